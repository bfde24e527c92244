#include "executor/runtime/comm.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <cstdlib>
#include <vector>

namespace oomb::executor {

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  (void)color;
  (void)key;
  throw Error("--gpus", "", "the " + name() + " communicator cannot split its ranks into tensor-parallel groups",
              "tensor parallelism with data-parallel replicas runs under mpirun (MPI for --backend cpu, NCCL for "
              "--backend cuda)");
}

namespace {
class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }
  void all_reduce_sum(Tensor data, int64_t n) override { reduced_bytes_ += n * dtype_bytes(data.dtype); }
  void all_reduce_sum_host(double*, int64_t) override {}
  void all_reduce_max_host(double*, int64_t) override {}
  bool shares_clock() const override { return true; }
  void broadcast_host(void*, int64_t, int) override {}
  void barrier() override {}
  // One rank split is one rank (what MPI_Comm_split gives on a one-rank communicator).
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }
};
}  // namespace

std::unique_ptr<Communicator> self_communicator() { return std::make_unique<SelfCommunicator>(); }

ParallelGroups parallel_groups(Communicator& world, int64_t tp, int64_t dp) {
  ParallelGroups g;
  if (tp > 1 && dp > 1) {
    const int t = static_cast<int>(tp), r = world.rank();
    g.tp_owned = world.split(r / t, r % t);  // the replica's GPUs, by tensor-parallel rank
    g.dp_owned = world.split(r % t, r / t);  // one tensor-parallel rank of every replica, by replica
    g.tp = g.tp_owned.get();
    g.dp = g.dp_owned.get();
  } else if (tp > 1) {
    g.tp = &world;
  } else if (dp > 1) {
    g.dp = &world;
  }
  return g;
}

void CollectiveClock::resolve(Communicator& comm) {
  split_ = true;
  for (Call& c : calls_) c.last_arrival_ns = c.arrival_ns;
  if (comm.size() <= 1) return;
  // Every rank must have made the same calls; a mismatch is a driver bug, but it must not turn into
  // a wrong split: then the waits are left unknown.
  double count[2] = {static_cast<double>(calls_.size()), -static_cast<double>(calls_.size())};
  comm.all_reduce_max_host(count, 2);
  if (!comm.shares_clock() || count[0] != -count[1]) {
    split_ = false;
    return;
  }
  std::vector<double> arrivals(calls_.size());
  for (size_t i = 0; i < calls_.size(); ++i) arrivals[i] = static_cast<double>(calls_[i].arrival_ns);
  comm.all_reduce_max_host(arrivals.data(), static_cast<int64_t>(arrivals.size()));
  for (size_t i = 0; i < calls_.size(); ++i)
    calls_[i].last_arrival_ns =
        std::clamp(static_cast<int64_t>(arrivals[i]), calls_[i].arrival_ns, calls_[i].exit_ns);
}

double CollectiveClock::total_s() const {
  int64_t ns = 0;
  for (const Call& c : calls_) ns += c.exit_ns - c.arrival_ns;
  return static_cast<double>(ns) * 1e-9;
}

double CollectiveClock::wait_s() const {
  int64_t ns = 0;
  for (const Call& c : calls_) ns += c.last_arrival_ns - c.arrival_ns;
  return static_cast<double>(ns) * 1e-9;
}

double CollectiveClock::transfer_s() const { return total_s() - wait_s(); }

namespace {
AllReduceFit measure(Communicator& comm, Backend& backend, const std::vector<int64_t>& sizes_bytes, DType dtype,
                     int reps, bool gather) {
  AllReduceFit fit;
  const int N = comm.size();
  if (N <= 1 || sizes_bytes.empty()) return fit;
  const double ring = (gather ? 1.0 : 2.0) * (N - 1) / N;
  const int64_t eb = dtype_bytes(dtype);
  const bool staged = !gather && dtype == DType::bf16 && comm.stages_bf16_in_fp32();
  for (int64_t bytes : sizes_bytes) {
    // An all-gather's buffer holds every rank's block: a whole number of blocks.
    const int64_t n = gather ? std::max<int64_t>(1, bytes / eb / N) * N : std::max<int64_t>(1, bytes / eb);
    void* p = backend.allocate(Tier::device, n * eb);  // zeroed: sums stay finite
    std::vector<float> staging(staged ? static_cast<size_t>(n) : 0);
    // The fastest of at least `reps` repetitions (after one warm-up), and of as many more as fit in
    // 50 ms: a rank that loses its core to another process mid-call makes one call ten times
    // slower, and small calls are quick enough to repeat. The ranks agree on the count.
    double best = std::numeric_limits<double>::infinity(), spent = 0;
    for (int i = 0;; ++i) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      if (gather) comm.all_gather(Tensor(p, dtype, n), n / N);
      else comm.all_reduce_sum_staged(Tensor(p, dtype, n), n, staging.data());
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::min(best, t);  // the first warms up
      spent += t;
      double more = i < reps || spent < 0.05 ? 1.0 : 0.0;
      comm.all_reduce_max_host(&more, 1);
      if (more == 0 || i >= 1000) break;
    }
    backend.deallocate(Tier::device, p, n * eb);
    comm.all_reduce_sum_host(&best, 1);
    fit.points.push_back({n * eb, best / N});
  }
  // The line through the ends: the smallest all-reduce's time is latency (its bytes are few), the
  // largest's rate the link. The points themselves are the curve a profile keeps (GpuSpec).
  const auto& lo = fit.points.front();
  const auto& hi = fit.points.back();
  double link = 0, latency = lo.seconds;
  if (hi.bytes > lo.bytes && hi.seconds > lo.seconds) {
    link = ring * static_cast<double>(hi.bytes - lo.bytes) / (hi.seconds - lo.seconds);
    latency = std::max(0.0, lo.seconds - ring * static_cast<double>(lo.bytes) / link);
  } else if (hi.seconds > 0) {
    link = ring * static_cast<double>(hi.bytes) / hi.seconds;
    latency = 0;
  }
  fit.latency_s = latency;
  fit.link_bytes_per_s = link;
  return fit;
}
}  // namespace

AllReduceFit measure_all_reduce(Communicator& comm, Backend& backend, const std::vector<int64_t>& sizes_bytes,
                                DType dtype, int reps) {
  return measure(comm, backend, sizes_bytes, dtype, reps, false);
}

AllReduceFit measure_all_gather(Communicator& comm, Backend& backend, const std::vector<int64_t>& sizes_bytes, int reps) {
  return measure(comm, backend, sizes_bytes, DType::f32, reps, true);
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace oomb::executor
