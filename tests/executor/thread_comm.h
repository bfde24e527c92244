#pragma once
// Tensor parallelism without MPI or a second GPU: the ranks of a group as threads of one process,
// each with its own backend, meeting in a communicator (ThreadGroup::communicator) that moves a
// rank's data only through that rank's own backend's copies: copy_async out (ordered after the
// rank's compute so far), summed on the host in rank order (fp32 in fp32, doubles in double, bf16 in
// fp32 rounded once as MPI's staging does), copy_async back in with the rank's compute waiting on it.
// So one harness serves the CPU and the CUDA backend (device memory, one GPU shared by both ranks,
// where NCCL refuses two ranks on one device), and it adds no host synchronisation to the backend's
// count (copy events are not host_syncs). A rank that throws fails the group: the others' next
// collective throws instead of waiting forever.
#include <condition_variable>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "executor/runtime/backend.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/driver.h"

namespace oomb::executor::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size) : size_(size), in_(static_cast<size_t>(size)) {}

  // Rank `rank`'s communicator; its collectives copy through `backend` (the rank's).
  std::unique_ptr<Communicator> communicator(int rank, Backend& backend);

  // Runs body(rank) on `size` threads and rethrows the first failure (after every thread ended).
  void run(const std::function<void(int rank)>& body) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
          fail();
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // Every rank arrives before any leaves.
  void barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    if (failed_) throw std::runtime_error("another rank of the thread group failed");
    const int64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || failed_; });
    if (generation_ == gen) throw std::runtime_error("another rank of the thread group failed");
  }
  void fail() {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    cv_.notify_all();
  }
  int size() const { return size_; }
  // Each rank's contribution to the current collective (written before a barrier, read after it).
  std::vector<char>& in(int rank) { return in_[static_cast<size_t>(rank)]; }

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  bool failed_ = false;
  std::vector<std::vector<char>> in_;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& g, int rank, Backend& b) : g_(g), rank_(rank), b_(b) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }
  std::string name() const override { return "threads"; }
  void all_reduce_sum(Tensor data, int64_t n) override {
    reduced_bytes_ += n * dtype_bytes(data.dtype);
    if (data.dtype == DType::f32) reduce<float>(data.data, n);
    else reduce<uint16_t>(data.data, n);
  }
  void all_reduce_sum_f64(double* data, int64_t n) override { reduce<double>(data, n); }
  void all_reduce_sum_host(double* data, int64_t n) override {
    exchange(data, n * 8);
    sum_host(data, n);
    g_.barrier();
  }
  void all_reduce_max_host(double* data, int64_t n) override {
    exchange(data, n * 8);
    for (int64_t i = 0; i < n; ++i)
      for (int k = 0; k < g_.size(); ++k)
        data[i] = std::max(data[i], reinterpret_cast<const double*>(g_.in(k).data())[i]);
    g_.barrier();
  }
  bool shares_clock() const override { return true; }  // threads of one process
  void broadcast_host(void* data, int64_t bytes, int root) override {
    exchange(data, bytes);
    if (rank_ != root) std::memcpy(data, g_.in(root).data(), static_cast<size_t>(bytes));
    g_.barrier();
  }
  void barrier() override { g_.barrier(); }

 private:
  // Host bytes of this rank into the group, then the barrier after which every rank's are there.
  void exchange(const void* data, int64_t bytes) {
    auto& mine = g_.in(rank_);
    mine.resize(static_cast<size_t>(bytes));
    std::memcpy(mine.data(), data, static_cast<size_t>(bytes));
    g_.barrier();
  }
  void sum_host(double* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int k = 0; k < g_.size(); ++k) s += reinterpret_cast<const double*>(g_.in(k).data())[i];
      out[i] = s;
    }
  }
  // Device data (the backend's memory): out through a d2h copy after the compute so far, summed in
  // rank order, back through an h2d copy the compute waits on.
  template <class T>
  void reduce(void* data, int64_t n) {
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    auto& mine = g_.in(rank_);
    mine.resize(static_cast<size_t>(bytes));
    CopyRequest out;
    out.dir = CopyDir::d2h;
    out.regions.push_back({mine.data(), data, bytes});
    b_.copy_async(std::move(out))->wait();
    g_.barrier();
    sum_.resize(static_cast<size_t>(bytes));
    T* s = reinterpret_cast<T*>(sum_.data());
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, uint16_t>) {  // bf16: one rounding of the fp32 sum
        float f = 0;
        for (int k = 0; k < g_.size(); ++k) f += bf16_to_f32(reinterpret_cast<const uint16_t*>(g_.in(k).data())[i]);
        s[i] = f32_to_bf16(f);
      } else {
        T acc = 0;
        for (int k = 0; k < g_.size(); ++k) acc += reinterpret_cast<const T*>(g_.in(k).data())[i];
        s[i] = acc;
      }
    }
    g_.barrier();  // every rank read every contribution before the next collective overwrites them
    CopyRequest back;
    back.dir = CopyDir::h2d;
    back.regions.push_back({data, sum_.data(), bytes});
    EventPtr e = b_.copy_async(std::move(back));
    b_.wait(e);  // the compute after this call reads the sum
    e->wait();   // and sum_ is free for the next call
  }

  ThreadGroup& g_;
  int rank_;
  Backend& b_;
  std::vector<char> sum_;
};

inline std::unique_ptr<Communicator> ThreadGroup::communicator(int rank, Backend& backend) {
  return std::make_unique<ThreadCommunicator>(*this, rank, backend);
}

// What each rank of a threaded tensor-parallel run measured, and the gathered gradients.
struct ThreadedRanks {
  std::vector<double> losses;          // per rank, the last step's
  std::vector<Measured> measured;      // per rank
  std::vector<SelectionLog> selections;  // per rank, the last step's
  Gradients gradients;                 // the whole model's (Engine::gradients, rank 0's copy)
};

// `steps` training steps of config (config.gpus = backends.size(), one data-parallel replica) on
// `tokens`, rank r on backends[r], every rank on its own thread.
inline ThreadedRanks threaded_tensor_parallel(const std::vector<Backend*>& backends, const models::ModelSpec& m,
                                              const step::Config& config, const Weights& w,
                                              const std::vector<int32_t>& tokens, int steps = 1) {
  const int n = static_cast<int>(backends.size());
  ThreadGroup group(n);
  ThreadedRanks out;
  out.losses.resize(static_cast<size_t>(n));
  out.measured.resize(static_cast<size_t>(n));
  out.selections.resize(static_cast<size_t>(n));
  std::vector<Gradients> grads(static_cast<size_t>(n));
  group.run([&](int r) {
    const auto comm = group.communicator(r, *backends[static_cast<size_t>(r)]);
    EngineOptions o;
    o.comm = comm.get();
    Engine e(*backends[static_cast<size_t>(r)], m, config, w, o);
    for (int s = 0; s < steps; ++s) out.losses[static_cast<size_t>(r)] = e.step(tokens).loss;
    out.measured[static_cast<size_t>(r)] = e.measured();
    out.selections[static_cast<size_t>(r)] = e.selections();
    grads[static_cast<size_t>(r)] = e.gradients();  // a collective: every rank gathers
  });
  out.gradients = std::move(grads[0]);
  return out;
}

}  // namespace oomb::executor::test
