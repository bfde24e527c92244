// The CUDA backend: memory tiers, streams and copies, and the ops as launches of the kernel files
// (one .cu + .cuh per kernel family) and cuBLASLt GEMMs. See cuda_backend.h for the stream and
// event design.
#include "executor/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "executor/cuda/adamw.cuh"
#include "executor/runtime/arena.h"
#include "executor/cuda/attention.cuh"
#include "executor/cuda/attention_tc.cuh"
#include "executor/cuda/attention_staging.h"
#include "executor/cuda/batch_copy.h"
#include "executor/cuda/cross_entropy.cuh"
#include "executor/cuda/cross_entropy_shard.cuh"
#include "executor/cuda/cuda_check.h"
#include "step/cuda_scratch.h"
#include "executor/cuda/elementwise.cuh"
#include "executor/cuda/embedding.cuh"
#include "executor/cuda/gemm.h"
#include "executor/cuda/gemm_plan.h"
#include "executor/cuda/kv_pages.cuh"
#include "executor/cuda/moe.cuh"
#include "executor/cuda/rmsnorm.cuh"
#include "executor/cuda/rope.cuh"
#include "executor/cuda/selection.cuh"
#include "executor/cuda/sinks.cuh"
#include "executor/cuda/swiglu.cuh"
#include "step/buffers.h"
#include "step/cuda_layout.h"

namespace oomb::executor {

using namespace cuda;

namespace {

using step::cuda_scratch::kAlign;
using step::cuda_scratch::kGemmWorkspaceBytes;
using step::cuda_scratch::up;
using step::cuda_scratch::kLossSlots;  // cross_entropy_acc's slots (the Engine's: one per chunk), 32 KiB pinned

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The device events behind an oomb Event returned by copy_async. Held as the shared_ptr's
// deleter, so that std::get_deleter identifies this backend's events (Event itself is not
// polymorphic) and the CUDA events live exactly as long as the Event.
struct CopyEvents {
  cudaEvent_t start = nullptr, end = nullptr;
  void operator()(Event* e) const {
    // Errors are ignored: at process exit the runtime may already be gone.
    if (start) cudaEventDestroy(start);
    if (end) cudaEventDestroy(end);
    delete e;
  }
};

}  // namespace

struct CudaBackend::Impl {
  CudaBackendOptions opt;
  int64_t attention_calls[2] = {0, 0};  // attention_fwd / _bwd calls run by fp32, bf16 tensor-core kernels
  int64_t gemm_calls[3] = {0, 0, 0};     // linear GEMMs run in fp32, tf32, bf16 (CudaGemmPrecision order)
  cudaStream_t compute = nullptr, h2d = nullptr, d2h = nullptr;
  cudaEvent_t compute_mark = nullptr;  // re-recorded at each copy_async
  // The device clock's anchor on the host's: recorded on the idle compute stream at construction,
  // epoch_ns the steady clock when it completed. A copy's times are this anchor plus the device's
  // elapsed time, not the completion thread's wake-up time (which lags the device by however late
  // that thread is scheduled, so that a d2h copy could appear to start before the h2d copy it
  // waited for ended: the emulated device's first run of CudaBackendCopies showed 11 ms).
  cudaEvent_t epoch = nullptr;
  int64_t epoch_ns = 0;
  std::unique_ptr<Arena> device, host;
  std::mutex mem_mu;
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> device_ranges;  // row -> [lo, hi) of the layout
  int64_t device_spills = 0;

  // Device scratch of the ops: reused by every op (all on the compute stream, so in stream order).
  void* workspace = nullptr;
  int64_t workspace_bytes = 0, workspace_grows = 0;
  void* gemm_workspace = nullptr;
  std::unique_ptr<Gemm> gemm;

  // Pinned staging slots for host -> device transfers issued on the compute stream.
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::vector<Slot> slots;
  size_t next_slot = 0;
  void* readback = nullptr;  // pinned, for values returned to the host (synchronised)
  int64_t readback_bytes = 0;

  // Copies in flight: a completion thread per direction, and the host ranges each copy touches.
  struct Job {
    EventPtr event;
    cudaEvent_t start = nullptr, end = nullptr;
    std::function<void(int64_t, int64_t)> on_done;
    uint64_t id = 0;
  };
  struct Completion {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> queue;
    bool stop = false;
    std::thread thread;
  };
  Completion completion[2];
  std::mutex copy_mu;  // issue order; pending ranges
  struct Pending {
    EventPtr event;
    std::vector<std::pair<uintptr_t, uintptr_t>> host_ranges;
  };
  std::map<uint64_t, Pending> pending;
  uint64_t next_id = 0;

  // Copy regions issued (one cudaMemcpyAsync each, or one cudaMemcpyBatchAsync per copy_async).
  int64_t copy_regions = 0, copy_api_calls = 0;
  std::atomic<int64_t> host_syncs{0};  // CudaBackend::host_syncs
  // cross_entropy_acc's loss slots: pinned, mapped host memory the device adds to (loss_slots_dev),
  // read by take_losses after one synchronisation.
  double* loss_slots = nullptr;
  double* loss_slots_dev = nullptr;
  int64_t loss_slot_count = 0;
  bool batch_copies = true;  // cleared when the driver refuses cudaMemcpyBatchAsync
  // Op scratch replaced by a larger one, freed at the next synchronisation (never inside a step).
  std::vector<void*> retired;

  explicit Impl(CudaBackendOptions o) : opt(std::move(o)) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Releases whatever the constructor got to (it may have thrown half-way): nothing here throws,
  // errors are ignored (after a sticky error, or at exit, the runtime may refuse).
  ~Impl() {
    for (auto& c : completion) {
      {
        std::lock_guard<std::mutex> lock(c.mu);
        c.stop = true;
      }
      c.cv.notify_all();
    }
    for (auto& c : completion)
      if (c.thread.joinable()) c.thread.join();
    for (cudaStream_t s : {compute, h2d, d2h})
      if (s) cudaStreamSynchronize(s);
    gemm.reset();
    if (gemm_workspace) cudaFree(gemm_workspace);
    if (workspace) cudaFree(workspace);
    for (void* p : retired) cudaFree(p);
    if (readback) cudaFreeHost(readback);
    if (loss_slots) cudaFreeHost(loss_slots);
    for (auto& sl : slots) {
      if (sl.host) cudaFreeHost(sl.host);
      if (sl.done) cudaEventDestroy(sl.done);
    }
    device.reset();
    host.reset();
    if (compute_mark) cudaEventDestroy(compute_mark);
    if (epoch) cudaEventDestroy(epoch);
    for (cudaStream_t s : {compute, h2d, d2h})
      if (s) cudaStreamDestroy(s);
  }

  void run_completion(Completion& c) {
    cudaSetDevice(opt.device);  // this thread's current device (its events belong to it)
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(c.mu);
        c.cv.wait(lock, [&] { return c.stop || !c.queue.empty(); });
        if (c.queue.empty()) return;  // stopping and drained
        job = std::move(c.queue.front());
        c.queue.pop_front();
      }
      const cudaError_t e = cudaEventSynchronize(job.end);
      float ms = 0, end_ms = 0;
      int64_t t1 = steady_ns();
      if (e == cudaSuccess) {
        cudaEventElapsedTime(&ms, job.start, job.end);
        // The end on the device clock; the duration from its own pair of events, which keeps it
        // exact however far the float offset from the epoch has lost resolution (0.25 ms an hour in).
        if (cudaEventElapsedTime(&end_ms, epoch, job.end) == cudaSuccess)
          t1 = epoch_ns + static_cast<int64_t>(static_cast<double>(end_ms) * 1e6);
      } else {
        std::fprintf(stderr, "oomb: asynchronous copy failed: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
      }
      const int64_t t0 = t1 - static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      if (job.on_done) {
        try {
          job.on_done(t0, t1);
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "oomb: copy completion callback failed: %s\n", ex.what());
        }
      }
      // Signal, then erase: a host wait (wait_host_range) that no longer finds the entry must find
      // the event done already.
      job.event->signal();
      {
        std::lock_guard<std::mutex> lock(copy_mu);
        pending.erase(job.id);
      }
    }
  }

  // At least `need` loss slots, the old values kept (kernels may still add to them: drained first).
  void grow_loss_slots(int64_t need) {
    const int64_t n = std::max(need, 2 * loss_slot_count);
    OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
    ++host_syncs;
    void* p = nullptr;
    OOMB_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(n) * 8, cudaHostAllocPortable | cudaHostAllocMapped));
    auto* grown = static_cast<double*>(p);
    std::fill(grown, grown + n, 0.0);
    if (loss_slots) {
      std::copy(loss_slots, loss_slots + loss_slot_count, grown);
      OOMB_CUDA_CHECK(cudaFreeHost(loss_slots));
    }
    loss_slots = grown;
    loss_slot_count = n;
    OOMB_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&loss_slots_dev), loss_slots, 0));
  }

  void synchronize() {
    ++host_syncs;
    OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
    OOMB_CUDA_CHECK(cudaStreamSynchronize(h2d));
    OOMB_CUDA_CHECK(cudaStreamSynchronize(d2h));
    free_retired();
  }

  // Device scratch of at least `bytes`. Grows only the first time a larger call arrives, without a
  // synchronisation: queued kernels may still use the old scratch, so it is retired (freed at the
  // next synchronize(), host-tier deallocate() or destruction) rather than freed (cudaFree would
  // synchronise the device inside the step). A run of a buffer table never grows it: its size is
  // the op_scratch row (size_op_scratch) and a larger request throws.
  char* scratch(int64_t bytes, const char* op = "an op") {
    // Sized from the buffer table's op_scratch row (the declared need of step/cuda_scratch.h): a
    // request beyond it is refused, never grown inside a step.
    if (bytes > workspace_bytes && opt.fixed_workspace)
      throw Error("op_scratch", std::to_string(bytes),
                  std::string(op) + " needs " + std::to_string(bytes) + " bytes of op scratch and the row holds " +
                      std::to_string(workspace_bytes) + " (its declared need, step/cuda_scratch.h, is short of what "
                                                        "this call does)",
                  "a bug of the declaration; --gemm-precision fp32 or bf16 changes which GEMM paths run");
    if (bytes > workspace_bytes) {
      const int64_t n = std::max(bytes, 2 * workspace_bytes);
      void* grown = nullptr;
      OOMB_CUDA_CHECK(cudaMalloc(&grown, static_cast<size_t>(n)));
      if (workspace) retired.push_back(workspace);
      workspace = grown;
      workspace_bytes = n;
      ++workspace_grows;
    }
    return static_cast<char*>(workspace);
  }

  void free_retired() {
    for (void* p : retired) OOMB_CUDA_CHECK(cudaFree(p));
    retired.clear();
  }

  // Host -> device (or any tier) on the compute stream; src may be reused when this returns. Goes
  // through the pinned staging ring in pieces of a slot, so the host waits at most for a slot's
  // previous copy, never for the stream (metadata of long-context launches exceeds a slot).
  void put(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    if (slots.empty() || opt.staging_slot_bytes <= 0) {  // no ring configured: a synchronous copy
      OOMB_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, compute));
      ++host_syncs;
      OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
      return;
    }
    for (int64_t off = 0; off < bytes; off += opt.staging_slot_bytes) {
      const int64_t n = std::min(opt.staging_slot_bytes, bytes - off);
      Slot& s = slots[next_slot++ % slots.size()];
      OOMB_CUDA_CHECK(cudaEventSynchronize(s.done));  // the slot's previous copy has read it
      std::memcpy(s.host, static_cast<const char*>(src) + off, static_cast<size_t>(n));
      OOMB_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + off, s.host, static_cast<size_t>(n),
                                      cudaMemcpyDefault, compute));
      OOMB_CUDA_CHECK(cudaEventRecord(s.done, compute));
    }
  }

  // Device (or any tier) -> host, after everything queued on the compute stream, through the
  // pinned read-back buffer in pieces of its size (a host optimizer's first read of the weights
  // would otherwise pin a buffer the size of the model: the host_readback row is fixed).
  void get(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    for (int64_t off = 0; off < bytes; off += readback_bytes) {
      const int64_t n = std::min(readback_bytes, bytes - off);
      OOMB_CUDA_CHECK(cudaMemcpyAsync(readback, static_cast<const char*>(src) + off, static_cast<size_t>(n),
                                      cudaMemcpyDefault, compute));
      ++host_syncs;
      OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
      std::memcpy(static_cast<char*>(dst) + off, readback, static_cast<size_t>(n));
    }
  }

  // One cudaMemcpyBatchAsync (CUDA 12.8+) of the regions, in stream order. False (and batching
  // off from then on) when the runtime or driver lacks it: the caller issues the regions one by one.
  // Any other failure throws with the call (classify_batch_copy, batch_copy.h).
  bool issue_batch(std::vector<void*>& dsts, std::vector<const void*>& srcs, std::vector<size_t>& sizes,
                   cudaStream_t st) {
#if CUDART_VERSION >= 12080
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_index = 0;
#if CUDART_VERSION >= 13000
    const cudaError_t e = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr,
                                               &attr_index, 1, st);
#else
    size_t fail_index = 0;
    const cudaError_t e = cudaMemcpyBatchAsync(dsts.data(), const_cast<void**>(srcs.data()), sizes.data(),
                                               sizes.size(), &attr, &attr_index, 1, &fail_index, st);
#endif
    switch (classify_batch_copy(e)) {
      case BatchCopyStatus::issued: return true;
      case BatchCopyStatus::fault:
        check_failed("cudaMemcpyBatchAsync(dsts, srcs, sizes, ...)", cudaGetErrorName(e), cudaGetErrorString(e),
                     __FILE__, __LINE__);
      case BatchCopyStatus::unsupported: break;
    }
    cudaGetLastError();  // not sticky: clear it and copy region by region from now on
    std::fprintf(stderr, "oomb: cudaMemcpyBatchAsync unavailable (%s): copies go region by region\n",
                 cudaGetErrorName(e));
#else
    (void)dsts, (void)srcs, (void)sizes, (void)st;
#endif
    batch_copies = false;
    return false;
  }

  bool in_host_tier(const void* p) {
    std::lock_guard<std::mutex> lock(mem_mu);
    return host->contains(p);
  }
  bool in_device_tier(const void* p) {
    std::lock_guard<std::mutex> lock(mem_mu);
    return device->contains(p);
  }

  // Host waits for the in-flight copies that read or write [p, p + bytes) on the host side.
  void wait_host_range(const void* p, int64_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(p), b = a + static_cast<uintptr_t>(bytes);
    std::vector<EventPtr> waits;
    {
      std::lock_guard<std::mutex> lock(copy_mu);
      for (const auto& [id, pend] : pending)
        for (const auto& [x, y] : pend.host_ranges)
          if (x < b && a < y) {
            waits.push_back(pend.event);
            break;
          }
    }
    if (!waits.empty()) ++host_syncs;
    for (auto& e : waits) e->wait();
  }
};

CudaBackend::CudaBackend(CudaBackendOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  std::string why;
  if (!cuda_device_available(&why)) throw Error("--backend", "cuda", "no usable CUDA device: " + why);
  OOMB_CUDA_CHECK(cudaSetDevice(m.opt.device));
  OOMB_CUDA_CHECK(cudaStreamCreateWithFlags(&m.compute, cudaStreamNonBlocking));
  OOMB_CUDA_CHECK(cudaStreamCreateWithFlags(&m.h2d, cudaStreamNonBlocking));
  OOMB_CUDA_CHECK(cudaStreamCreateWithFlags(&m.d2h, cudaStreamNonBlocking));
  OOMB_CUDA_CHECK(cudaEventCreateWithFlags(&m.compute_mark, cudaEventDisableTiming));
  OOMB_CUDA_CHECK(cudaEventCreate(&m.epoch));
  OOMB_CUDA_CHECK(cudaEventRecord(m.epoch, m.compute));
  OOMB_CUDA_CHECK(cudaEventSynchronize(m.epoch));
  m.epoch_ns = steady_ns();
  m.device = std::make_unique<Arena>(
      [](int64_t bytes) {
        void* p = nullptr;
        OOMB_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
        return p;
      },
      [](void* p, int64_t) { cudaFree(p); }, m.opt.device_grow_bytes, kAlign);
  m.host = std::make_unique<Arena>(
      [](int64_t bytes) {
        void* p = nullptr;
        OOMB_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocPortable | cudaHostAllocMapped));
        return p;
      },
      [](void* p, int64_t) { cudaFreeHost(p); }, m.opt.host_slab_bytes, kAlign);
  if (m.opt.before_device_block) m.opt.before_device_block(m.compute);
  m.device->reserve(m.opt.device_reserve_bytes);
  for (const step::allocator::RowRange& r : m.opt.device_layout)
    m.device_ranges[r.row] = {r.offset_bytes, r.offset_bytes + r.bytes};
  {
    // Exactly the declared size when it is fixed (a run of a buffer table), else at least one block.
    const bool fixed = m.opt.fixed_workspace;
    m.opt.fixed_workspace = false;
    m.scratch(fixed ? m.opt.workspace_bytes : std::max<int64_t>(m.opt.workspace_bytes, kAlign));
    m.opt.fixed_workspace = fixed;
  }
  m.workspace_grows = 0;
  OOMB_CUDA_CHECK(cudaMalloc(&m.gemm_workspace, static_cast<size_t>(kGemmWorkspaceBytes)));
  m.gemm = std::make_unique<Gemm>(m.gemm_workspace, kGemmWorkspaceBytes);
  m.slots.resize(static_cast<size_t>(std::max(m.opt.staging_slots, 0)));
  for (auto& s : m.slots) {  // a slot not reached stays null (Impl::~Impl skips it)
    OOMB_CUDA_CHECK(cudaHostAlloc(&s.host, static_cast<size_t>(std::max<int64_t>(m.opt.staging_slot_bytes, 1)),
                                  cudaHostAllocPortable));
    OOMB_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  m.grow_loss_slots(kLossSlots);
  m.readback_bytes = step::cuda_scratch::kReadbackBytes;
  OOMB_CUDA_CHECK(cudaHostAlloc(&m.readback, static_cast<size_t>(m.readback_bytes), cudaHostAllocPortable));
  m.host_syncs = 0;  // set-up, not work
  for (auto& c : m.completion) c.thread = std::thread([&m, &c] { m.run_completion(c); });
}

CudaBackend::~CudaBackend() = default;  // Impl::~Impl

// ---------------------------------------------------------------- memory and copies

void* CudaBackend::allocate(Tier tier, int64_t bytes) { return allocate_row(tier, bytes, {}); }

void* CudaBackend::allocate_row(Tier tier, int64_t bytes, const std::string& row) {
  Impl& m = *impl_;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(m.mem_mu);
    if (tier == Tier::device && !row.empty()) {
      if (auto it = m.device_ranges.find(row); it != m.device_ranges.end()) {
        p = m.device->allocate_within(bytes, it->second.first, it->second.second);
        if (!p) ++m.device_spills;  // not in its range: first fit over the block (or a new one)
      }
    }
    if (!p) p = (tier == Tier::device ? m.device : m.host)->allocate(bytes);
  }
  // Device memory freed by deallocate() is reused in compute-stream order (this zeroing and every
  // later use are queued after the work issued before the free); host memory only after
  // deallocate() synchronised.
  if (bytes > 0) {
    if (tier == Tier::device) OOMB_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), m.compute));
    else std::memset(p, 0, static_cast<size_t>(bytes));
  }
  return p;
}

void CudaBackend::deallocate(Tier tier, void* p, int64_t) {
  if (!p) return;
  Impl& m = *impl_;
  // Device tier: stream-ordered, no synchronisation (the Engine frees a phase's buffers inside the
  // step, and draining the three streams there waited for every prefetch in flight). Kernels queued
  // before the free may still use the range; whoever gets it next is ordered after them: its zeroing
  // (allocate) and its kernels on the compute stream, its copies through the compute mark that each
  // copy_async waits for. Copies in flight must not touch it (Backend::deallocate).
  // Host tier: host code reuses the range at once (allocate zeroes it with memset), so every stream
  // is drained first (throws after a sticky error; Buffer logs it).
  if (tier == Tier::host) m.synchronize();
  std::lock_guard<std::mutex> lock(m.mem_mu);
  (tier == Tier::device ? m.device : m.host)->deallocate(p);
}

void CudaBackend::fill_zero(void* p, int64_t bytes) {
  if (bytes <= 0) return;
  Impl& m = *impl_;
  bool device = m.in_device_tier(p);
  if (!device && !m.in_host_tier(p)) {
    cudaPointerAttributes attr{};
    device = cudaPointerGetAttributes(&attr, p) == cudaSuccess &&
             (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged);
    cudaGetLastError();  // a plain host pointer may leave an error behind on old runtimes
  }
  if (device) {
    OOMB_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), m.compute));
  } else {
    m.wait_host_range(p, bytes);
    std::memset(p, 0, static_cast<size_t>(bytes));
  }
}

void CudaBackend::upload(void* device_dst, const void* src, int64_t bytes) { impl_->put(device_dst, src, bytes); }

void CudaBackend::download(void* dst, const void* device_src, int64_t bytes) {
  Impl& m = *impl_;
  if (bytes <= 0) return;
  OOMB_CUDA_CHECK(cudaMemcpyAsync(dst, device_src, static_cast<size_t>(bytes), cudaMemcpyDefault, m.compute));
  ++m.host_syncs;
  OOMB_CUDA_CHECK(cudaStreamSynchronize(m.compute));
}

EventPtr CudaBackend::copy_async(CopyRequest req) {
  Impl& m = *impl_;
  const cudaStream_t st = req.dir == CopyDir::h2d ? m.h2d : m.d2h;
  Impl::Job job;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  std::unique_lock<std::mutex> lock(m.copy_mu);
  // Ordered after all compute work issued so far (pages written by kernels; pages kernels read).
  OOMB_CUDA_CHECK(cudaEventRecord(m.compute_mark, m.compute));
  OOMB_CUDA_CHECK(cudaStreamWaitEvent(st, m.compute_mark, 0));
  for (const EventPtr& e : req.after) {
    if (!e) continue;
    if (const CopyEvents* d = std::get_deleter<CopyEvents>(e)) {
      OOMB_CUDA_CHECK(cudaStreamWaitEvent(st, d->end, 0));
    } else {
      lock.unlock();
      e->wait();
      lock.lock();
    }
  }
  CopyEvents ev;
  OOMB_CUDA_CHECK(cudaEventCreate(&ev.start));
  OOMB_CUDA_CHECK(cudaEventCreateWithFlags(&ev.end, cudaEventBlockingSync));
  EventPtr done(new Event(), ev);
  OOMB_CUDA_CHECK(cudaEventRecord(ev.start, st));
  // Adjacent regions (contiguous on both sides) become one copy.
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  const auto& regs = req.regions;
  for (size_t i = 0; i < regs.size();) {
    auto* dst = static_cast<char*>(regs[i].dst);
    const auto* src = static_cast<const char*>(regs[i].src);
    int64_t bytes = regs[i].bytes;
    size_t k = i + 1;
    while (k < regs.size() && regs[k].dst == dst + bytes && regs[k].src == src + bytes) bytes += regs[k++].bytes;
    if (bytes > 0) {
      dsts.push_back(dst);
      srcs.push_back(src);
      sizes.push_back(static_cast<size_t>(bytes));
      const char* host_side = req.dir == CopyDir::h2d ? src : dst;
      ranges.emplace_back(reinterpret_cast<uintptr_t>(host_side), reinterpret_cast<uintptr_t>(host_side) + bytes);
    }
    i = k;
  }
  m.copy_regions += static_cast<int64_t>(sizes.size());
  // What stays scattered (sparse selections) goes as one batch, not one API call per region.
  if (sizes.size() > 1 && m.batch_copies && m.issue_batch(dsts, srcs, sizes, st)) {
    ++m.copy_api_calls;
  } else {
    for (size_t i = 0; i < sizes.size(); ++i)
      OOMB_CUDA_CHECK(cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault, st));
    m.copy_api_calls += static_cast<int64_t>(sizes.size());
  }
  OOMB_CUDA_CHECK(cudaEventRecord(ev.end, st));
  job.event = done;
  job.start = ev.start;
  job.end = ev.end;
  job.on_done = std::move(req.on_done);
  job.id = m.next_id++;
  m.pending[job.id] = {done, std::move(ranges)};
  lock.unlock();
  Impl::Completion& c = m.completion[req.dir == CopyDir::h2d ? 0 : 1];
  {
    std::lock_guard<std::mutex> cl(c.mu);
    c.queue.push_back(std::move(job));
  }
  c.cv.notify_one();
  return done;
}

void CudaBackend::wait(const EventPtr& e) {
  if (!e) return;
  if (const CopyEvents* d = std::get_deleter<CopyEvents>(e))
    OOMB_CUDA_CHECK(cudaStreamWaitEvent(impl_->compute, d->end, 0));
  else
    e->wait();
}

// ---------------------------------------------------------------- model ops
//
// Typed storage (backend.h Tensor / ConstTensor): the kernels take fp32 or bf16 views directly
// (executor/cuda/typed.cuh: loads exact, fp32 math, one rounding on store with runtime/bf16.h's
// routine). An fp32 scratch remains only where a result is summed by several blocks or by cuBLASLt
// before its one rounding (bf16 weight gradients of RMSNorm and biases, GEMM outputs cuBLASLt cannot
// write as bf16), and for the ops whose kernels compute on fp32 rows (attention, selection: bf16
// inputs are converted into the op scratch, bf16 outputs rounded from it); see executor/cuda/README.md,
// "Storage dtypes".

namespace {
using namespace cuda::gemm_plan;          // is_bf16, and the linear ops' GEMM planning (gemm_plan.h)
using namespace cuda::attention_staging;  // the attention and selection calls' staging
}  // namespace

void CudaBackend::embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out) {
  extents::embedding("embedding_fwd", rows, hidden, out);
  launch_embedding_fwd(ids, rows, table, hidden, out, impl_->compute);
}

void CudaBackend::embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden,
                                Tensor dtable_acc) {
  extents::embedding("embedding_bwd", rows, hidden, dout);
  launch_embedding_bwd(ids, rows, dout, hidden, dtable_acc, impl_->compute);
}

void CudaBackend::rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y,
                              float* rstd) {
  extents::rmsnorm("rmsnorm_fwd", x, w, rows, dim, y);
  launch_rmsnorm_fwd(x, w, rows, dim, eps, y, rstd, impl_->compute);
}

void CudaBackend::rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows,
                              int64_t dim, Tensor dx_acc, Tensor dw_acc) {
  extents::rmsnorm("rmsnorm_bwd", x, w, rows, dim, dy);
  extents::rmsnorm("rmsnorm_bwd", dx_acc, dw_acc, rows, dim, dx_acc);
  Impl& m = *impl_;
  // A bf16 dw gets its column sums in an fp32 scratch before its one rounding.
  float* dw_scratch =
      is_bf16(dw_acc) && rows > 0 && dim > 0 ? reinterpret_cast<float*>(m.scratch(up(dim * 4))) : nullptr;
  launch_rmsnorm_bwd(x, w, rstd, dy, rows, dim, dx_acc, dw_acc, dw_scratch, m.compute);
}

// ---- linear ops: cuBLASLt GEMMs, planned and run by gemm_plan.h (the operand forms, each GEMM's
// precision against cuBLASLt's heuristic, the op scratch they take).

// Row-major y[rows, out] = x[rows, in] W[out, in]^T is column-major y^T = W x^T.
void CudaBackend::linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out,
                             Tensor y) {
  extents::linear_fwd(x, rows, in, w, b, out, y);
  Impl& m = *impl_;
  if (rows <= 0 || out <= 0) return;
  Operand wo(w, out, in), xo(x, rows, in);
  GemmPhase p;
  plan_linear_fwd(*m.gemm, m.opt, wo, xo, rows, in, out, y, b, p);
  const int64_t bytes = p.scratch_bytes();
  run_steps(*m.gemm, m.gemm_calls, p.steps, p.operands, bytes > 0 ? m.scratch(bytes) : nullptr, m.compute);
}

void CudaBackend::linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy,
                             Tensor dx, bool accumulate_dx, Tensor dw_acc, Tensor db_acc) {
  extents::linear_bwd(x, rows, in, w, out, dy, dx, dw_acc, db_acc);
  Impl& m = *impl_;
  if (rows <= 0 || out <= 0) return;
  Operand wo(w, out, in), xo(x, rows, in), dyo(dy, rows, out);
  GemmPhase p;
  plan_linear_bwd(*m.gemm, m.opt, wo, xo, dyo, rows, in, out, dx, accumulate_dx, dw_acc, p);
  std::vector<GemmStep>& steps = p.steps;
  const std::vector<Operand*>& ops = p.operands;
  const bool db16 = db_acc && is_bf16(db_acc);
  const int64_t gemm_bytes = p.scratch_bytes(), bytes = gemm_bytes + linear_bwd_db_bytes(db16, out);
  char* ws = bytes > 0 ? m.scratch(bytes) : nullptr;
  run_steps(*m.gemm, m.gemm_calls, steps, ops, ws, m.compute);
  if (db_acc) {
    float* sums = db16 ? reinterpret_cast<float*>(ws + gemm_bytes) : db_acc.f32();
    if (db16) OOMB_CUDA_CHECK(cudaMemsetAsync(sums, 0, static_cast<size_t>(out) * 4, m.compute));
    launch_column_sum_acc(dy, rows, out, sums, m.compute);
    if (db16) launch_store_f32(db_acc, sums, 1, out, nullptr, true, m.compute);
  }
}

// ---- LoRA adapters: two projections in a row, A [rank, in] then B [out, rank], as the GEMMs of
// linear_fwd / linear_bwd. The second GEMM of each op reads what the first wrote, as stored (a bf16
// u or du rounded once, as the CPU backend reads it), so each op runs as two phases in stream order,
// each converting its own operands into the op scratch from its start: the op's scratch is the
// larger phase's (step/cuda_scratch.h, lora_fwd_bytes / lora_bwd_bytes). The scale is cuBLASLt's
// alpha on the GEMMs that write u and du: applied to the fp32 accumulators before the one rounding
// of a bf16 output (a scale kernel after the store would round twice).


void CudaBackend::lora_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
                           int64_t out, float scale, Tensor u, Tensor y) {
  extents::lora("lora_fwd", x, rows, in, a, b, rank, out, u, y);
  Impl& m = *impl_;
  if (rows <= 0 || rank <= 0) return;
  if (in <= 0) {  // an empty x A^T: u = 0 and y unchanged
    OOMB_CUDA_CHECK(cudaMemsetAsync(u.data, 0, static_cast<size_t>(rows * rank * dtype_bytes(u.dtype)), m.compute));
    return;
  }
  Operand ao(a, rank, in), xo(x, rows, in), bo(b, out, rank), uo(u, rows, rank);
  GemmPhase through_a, through_b;
  lora_fwd_phases(ao, xo, bo, uo, rows, in, rank, out, scale, u, y, through_a, through_b);
  run_phases(*m.gemm, m.opt, m.gemm_calls, through_a, through_b, [&](int64_t n) { return m.scratch(n, "lora_fwd"); },
             m.compute);
}

void CudaBackend::lora_bwd(ConstTensor x, ConstTensor u, int64_t rows, int64_t in, ConstTensor a, ConstTensor b,
                           int64_t rank, int64_t out, float scale, ConstTensor dy, Tensor du, Tensor dx_acc,
                           Tensor da_acc, Tensor db_acc) {
  extents::lora("lora_bwd", x, rows, in, a, b, rank, out, u, dy);
  extents::lora("lora_bwd", dx_acc, rows, in, da_acc, db_acc, rank, out, du, dy);
  Impl& m = *impl_;
  if (rows <= 0 || rank <= 0) return;
  if (out <= 0) {  // an empty dy: du = 0, nothing accumulates
    OOMB_CUDA_CHECK(cudaMemsetAsync(du.data, 0, static_cast<size_t>(rows * rank * dtype_bytes(du.dtype)), m.compute));
    return;
  }
  Operand dyo(dy, rows, out), bo(b, out, rank), uo(u, rows, rank);
  Operand duo(du, rows, rank), ao(a, rank, in), xo(x, rows, in);
  GemmPhase through_b, through_a;
  lora_bwd_phases(dyo, bo, uo, duo, ao, xo, rows, in, rank, out, scale, du, dx_acc, da_acc, db_acc, through_b,
                  through_a);
  run_phases(*m.gemm, m.opt, m.gemm_calls, through_b, through_a, [&](int64_t n) { return m.scratch(n, "lora_bwd"); },
             m.compute);
}

// Review 3, finding 8: the op scratch a GEMM-running call will ask for, planned as linear_fwd /
// linear_bwd / lora_fwd / lora_bwd plan it (cuBLASLt's heuristic on the shapes, dtypes and leading
// dimensions of the call; operands and outputs 256-byte aligned, as the arena places them), without
// running it.
int64_t CudaBackend::planned_op_scratch(const step::cuda_scratch::LinearCall& l) {
  using Kind = step::cuda_scratch::LinearCall::Kind;
  Impl& m = *impl_;
  static char aligned_probe alignas(256)[256];  // stands for every operand: only its address is read
  auto t = [](bool b16) { return Tensor(aligned_probe, b16 ? DType::bf16 : DType::f32); };
  const int64_t rows = l.rows, in = l.in, out = l.out;
  switch (l.kind) {
    case Kind::forward: {
      if (rows <= 0 || out <= 0) return 0;
      Operand wo(t(l.w16), out, in), xo(t(l.x16), rows, in);
      GemmPhase p;
      plan_linear_fwd(*m.gemm, m.opt, wo, xo, rows, in, out, t(l.y16), l.has_bias ? ConstTensor(t(l.y16)) : nullptr, p);
      return p.scratch_bytes();
    }
    case Kind::backward: {
      if (rows <= 0 || out <= 0) return 0;
      Operand wo(t(l.w16), out, in), xo(t(l.x16), rows, in), dyo(t(l.dy16), rows, out);
      GemmPhase p;
      plan_linear_bwd(*m.gemm, m.opt, wo, xo, dyo, rows, in, out, l.has_dx ? t(l.dx16) : nullptr, l.dx_acc,
                      l.has_dw ? t(l.dw16) : nullptr, p);
      return p.scratch_bytes() + linear_bwd_db_bytes(l.has_db && l.db16, out);
    }
    case Kind::lora_forward:
    case Kind::lora_backward: {
      const step::cuda_scratch::LoraShape& s = l.lora;
      const int64_t rank = s.rank;
      if (s.rows <= 0 || rank <= 0) return 0;
      GemmPhase first, second;
      const Tensor act = t(s.act16), adapter = t(s.adapter16), grad = t(s.grad16);
      if (l.kind == Kind::lora_forward) {
        if (s.in <= 0) return 0;
        Operand ao(adapter, rank, s.in), xo(act, s.rows, s.in), bo(adapter, s.out, rank), uo(act, s.rows, rank);
        lora_fwd_phases(ao, xo, bo, uo, s.rows, s.in, rank, s.out, 1.0f, act, act, first, second);
        first.plan(*m.gemm, m.opt);
        second.plan(*m.gemm, m.opt);
        return std::max(first.scratch_bytes(), second.scratch_bytes());
      }
      if (s.out <= 0) return 0;
      Operand dyo(act, s.rows, s.out), bo(adapter, s.out, rank), uo(act, s.rows, rank);
      Operand duo(act, s.rows, rank), ao(adapter, rank, s.in), xo(act, s.rows, s.in);
      lora_bwd_phases(dyo, bo, uo, duo, ao, xo, s.rows, s.in, rank, s.out, 1.0f, act, l.has_dx ? act : nullptr, grad,
                      grad, first, second);
      first.plan(*m.gemm, m.opt);
      second.plan(*m.gemm, m.opt);
      return std::max(first.scratch_bytes(), second.scratch_bytes());
    }
  }
  return 0;
}

int64_t CudaBackend::gemm_calls(CudaGemmPrecision p) const { return impl_->gemm_calls[static_cast<int>(p)]; }

const char* to_string(CudaGemmPrecision p) {
  switch (p) {
    case CudaGemmPrecision::fp32: return "fp32";
    case CudaGemmPrecision::tf32: return "tf32";
    case CudaGemmPrecision::bf16: return "bf16";
  }
  return "?";
}

void CudaBackend::rope_fwd(Tensor x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0,
                           const models::Rope& rope) {
  OOMB_ASSERT(head_dim % 2 == 0, "RoPE needs an even head_dim");
  launch_rope(x, rows, heads, head_dim, pos0, rope, 1.0f, impl_->compute);
}

void CudaBackend::rope_bwd(Tensor dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0,
                           const models::Rope& rope) {
  OOMB_ASSERT(head_dim % 2 == 0, "RoPE needs an even head_dim");
  launch_rope(dx, rows, heads, head_dim, pos0, rope, -1.0f, impl_->compute);
}

void CudaBackend::geglu_fwd(ConstTensor gate, ConstTensor up_, int64_t n, Tensor out) {
  extents::elementwise("geglu_fwd", n, {gate, up_, out});
  launch_geglu_fwd(gate, up_, n, out, impl_->compute);
}

void CudaBackend::geglu_bwd(ConstTensor gate, ConstTensor up_, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup) {
  extents::elementwise("geglu_bwd", n, {gate, up_, dout, dgate, dup});
  launch_geglu_bwd(gate, up_, dout, n, dgate, dup, impl_->compute);
}

void CudaBackend::swiglu_fwd(ConstTensor gate, ConstTensor up_, int64_t n, Tensor out, float limit) {
  extents::elementwise("swiglu_fwd", n, {gate, up_, out});
  launch_swiglu_fwd(gate, up_, n, out, limit, impl_->compute);
}

void CudaBackend::swiglu_bwd(ConstTensor gate, ConstTensor up_, ConstTensor dout, int64_t n, Tensor dgate,
                             Tensor dup, float limit) {
  extents::elementwise("swiglu_bwd", n, {gate, up_, dout, dgate, dup});
  launch_swiglu_bwd(gate, up_, dout, n, dgate, dup, limit, impl_->compute);
}

void CudaBackend::moe_route(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                            int32_t* route_experts, float* route_weights, int32_t* route_rows, int32_t* offsets) {
  launch_moe_route(extents::fp32_operand("moe_route", logits, rows * experts), rows, experts, k, renormalize,
                   route_experts, route_weights, route_rows, offsets, impl_->compute);
}
void CudaBackend::moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k,
                                     const int32_t* route_experts, double* counts, double* prob_sums) {
  launch_moe_aux_statistics(logits, rows, experts, k, route_experts, counts, prob_sums, impl_->compute);
}

void CudaBackend::moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                               float* d_logits) {
  launch_moe_aux_grad(logits, rows, experts, shares, scale, d_logits, impl_->compute);
}

void CudaBackend::moe_route_bwd(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                                const int32_t* route_experts, const float* route_weights, const float* d_weights,
                                Tensor d_logits) {
  launch_moe_route_bwd(extents::fp32_operand("moe_route_bwd", logits, rows * experts), rows, experts, k, renormalize,
                       route_experts, route_weights, d_weights,
                       extents::fp32_operand("moe_route_bwd", d_logits, rows * experts), impl_->compute);
}
void CudaBackend::moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                             Tensor packed) {
  extents::elementwise("moe_gather", rows * dim, {x});
  extents::elementwise("moe_gather", rows * k * dim, {packed});
  launch_moe_gather(x, rows, dim, k, route_rows, packed, impl_->compute);
}
void CudaBackend::moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                              const float* weights, Tensor y, bool accumulate) {
  extents::elementwise("moe_combine", rows * k * dim, {packed});
  extents::elementwise("moe_combine", rows * dim, {y});
  launch_moe_combine(packed, rows, dim, k, route_rows, weights, y, accumulate, impl_->compute);
}
void CudaBackend::moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                                  const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights) {
  extents::elementwise("moe_combine_bwd", rows * dim, {dy});
  extents::elementwise("moe_combine_bwd", rows * k * dim, {packed, d_packed});
  launch_moe_combine_bwd(dy, packed, rows, dim, k, route_rows, weights, d_packed, d_weights, impl_->compute);
}

void CudaBackend::attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                                      float* lse) {
  extents::elementwise("attention_sinks_fwd", q_heads, {sinks});
  extents::elementwise("attention_sinks_fwd", rows * q_heads * head_dim, {o});
  launch_attention_sinks_fwd(sinks, rows, q_heads, head_dim, o, lse, impl_->compute);
}

void CudaBackend::attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim,
                                      ConstTensor o, const float* lse, ConstTensor dout, Tensor d_sinks) {
  extents::elementwise("attention_sinks_bwd", q_heads, {sinks, d_sinks});
  extents::elementwise("attention_sinks_bwd", rows * q_heads * head_dim, {o, dout});
  launch_attention_sinks_bwd(sinks, rows, q_heads, head_dim, o, lse, dout, d_sinks, impl_->compute);
}

void CudaBackend::add(Tensor y, ConstTensor x, int64_t n) {
  extents::elementwise("add", n, {y, x});
  launch_add(y, x, n, impl_->compute);
}

void CudaBackend::copy(Tensor dst, ConstTensor src, int64_t n) {
  extents::elementwise("copy", n, {dst, src});
  if (n <= 0) return;
  if (dst.dtype != src.dtype) {
    launch_convert(dst, src, n, impl_->compute);
    return;
  }
  if (dst.data == src.data) return;
  OOMB_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n * dtype_bytes(dst.dtype)),
                                  cudaMemcpyDefault, impl_->compute));
}

void CudaBackend::scale(Tensor x, int64_t n, float s) { launch_scale(x, n, s, impl_->compute); }

void CudaBackend::attention_fwd(const PagedAttention& a, Tensor o, float* lse) {
  extents::attention("attention_fwd", a, {a.q, o}, {a.k_own, a.v_own});
  Impl& m = *impl_;
  const SelectCsr csr = csr_of(a);
  Metadata md;
  const int64_t pages = md.add(a.prefix_pages.data(), static_cast<int64_t>(a.prefix_pages.size()));
  const int64_t off = md.add(csr.offsets.data(), static_cast<int64_t>(csr.offsets.size()));
  const int64_t slots = md.add(csr.slots.data(), static_cast<int64_t>(csr.slots.size()));
  const int64_t nq = a.rows * a.q_heads * a.head_dim, nk = a.rows * a.kv_heads * a.head_dim;
  Fp32Rows rows(md.size());
  const int q = rows.add_in(a.q, nq), k = rows.add_in(a.k_own, nk), v = rows.add_in(a.v_own, nk);
  const int of = rows.add_out(o, nq);
  char* ws = m.scratch(rows.bytes());
  m.put(ws, md.data(), md.size());
  rows.place(ws, m.compute);
  AttentionArgs args = attention_args(a);
  args.q = rows.in(q);
  args.k_own = rows.in(k);
  args.v_own = rows.in(v);
  args.pages = reinterpret_cast<const void* const*>(ws + pages);
  args.select_offsets = reinterpret_cast<const int32_t*>(ws + off);
  args.select_slots = reinterpret_cast<const int32_t*>(ws + slots);
  // Tensor cores when asked for and possible (the kernels read and write float4 rows); else fp32.
  const bool tc = use_tc(m.opt, args, aligned16(rows.out(of)) && all_aligned16(a.prefix_pages), "attention_fwd");
  ++m.attention_calls[tc ? 1 : 0];
  if (tc) launch_attention_tc_fwd(args, rows.out(of), lse, m.compute);
  else launch_attention_fwd(args, rows.out(of), lse, m.compute);
  rows.finish(m.compute);
}

void CudaBackend::attention_bwd(const PagedAttention& a, ConstTensor o, const float* lse, ConstTensor dout,
                                Tensor dq, Tensor dk_own, Tensor dv_own,
                                const std::vector<float*>& prefix_grad_pages) {
  extents::attention("attention_bwd", a, {a.q, o, dout, dq}, {a.k_own, a.v_own, dk_own, dv_own});
  Impl& m = *impl_;
  OOMB_ASSERT(prefix_grad_pages.size() == a.prefix_pages.size(), "one gradient page per prefix page");
  const SelectCsr csr = csr_of(a);
  Metadata md;
  const int64_t pages = md.add(a.prefix_pages.data(), static_cast<int64_t>(a.prefix_pages.size()));
  const int64_t grads = md.add(prefix_grad_pages.data(), static_cast<int64_t>(prefix_grad_pages.size()));
  const int64_t off = md.add(csr.offsets.data(), static_cast<int64_t>(csr.offsets.size()));
  const int64_t slots = md.add(csr.slots.data(), static_cast<int64_t>(csr.slots.size()));
  const int64_t drow_bytes = up(a.rows * a.q_heads * 4);
  const int64_t nq = a.rows * a.q_heads * a.head_dim, nk = a.rows * a.kv_heads * a.head_dim;
  Fp32Rows rows(md.size() + drow_bytes);
  const int q = rows.add_in(a.q, nq), k = rows.add_in(a.k_own, nk), v = rows.add_in(a.v_own, nk);
  const int oi = rows.add_in(o, nq), di = rows.add_in(dout, nq);
  const int dqi = rows.add_out(dq, nq), dki = rows.add_out(dk_own, nk), dvi = rows.add_out(dv_own, nk);
  char* ws = m.scratch(rows.bytes());
  m.put(ws, md.data(), md.size());
  rows.place(ws, m.compute);
  AttentionArgs args = attention_args(a);
  args.q = rows.in(q);
  args.k_own = rows.in(k);
  args.v_own = rows.in(v);
  args.pages = reinterpret_cast<const void* const*>(ws + pages);
  args.select_offsets = reinterpret_cast<const int32_t*>(ws + off);
  args.select_slots = reinterpret_cast<const int32_t*>(ws + slots);
  AttentionGrads g;
  g.o = rows.in(oi);
  g.lse = lse;
  g.dout = rows.in(di);
  g.drow = reinterpret_cast<float*>(ws + md.size());
  g.dq = rows.out(dqi);
  g.dk_own = rows.out(dki);
  g.dv_own = rows.out(dvi);
  g.grad_pages = reinterpret_cast<void* const*>(ws + grads);
  g.grad_bf16 = a.grad_dtype == PageDtype::bf16;
  const bool tc = use_tc(m.opt, args,
                         aligned16(g.o) && aligned16(g.dout) && aligned16(g.dq) && aligned16(g.dk_own) &&
                             aligned16(g.dv_own) && all_aligned16(a.prefix_pages) && all_aligned16(prefix_grad_pages),
                         "attention_bwd");
  ++m.attention_calls[tc ? 1 : 0];
  if (tc) launch_attention_tc_bwd(args, g, m.compute);
  else launch_attention_bwd(args, g, m.compute);
  rows.finish(m.compute);
}

int64_t CudaBackend::copy_regions() const { return impl_->copy_regions; }
int64_t CudaBackend::copy_api_calls() const { return impl_->copy_api_calls; }

int64_t CudaBackend::attention_calls(CudaAttentionKernel k) const {
  return impl_->attention_calls[k == CudaAttentionKernel::fp32 ? 0 : 1];
}

bool CudaBackend::attention_tc_available() const { return attention_tc_device_supported(); }

void CudaBackend::write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                                 const std::vector<float*>& pages, PageDtype dtype) {
  Impl& m = *impl_;
  if (pages.empty()) return;
  OOMB_ASSERT(static_cast<int64_t>(pages.size()) <= (rows + page_tokens - 1) / page_tokens && pages.size() < 65536);
  char* ws = m.scratch(up(static_cast<int64_t>(pages.size()) * 8));
  m.put(ws, pages.data(), static_cast<int64_t>(pages.size()) * 8);
  launch_write_kv_pages(k, v, rows, kv_dim, page_tokens, reinterpret_cast<void* const*>(ws),
                        static_cast<int64_t>(pages.size()), dtype == PageDtype::bf16, m.compute);
}

void CudaBackend::add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim,
                                      int64_t page_tokens, Tensor dk, Tensor dv, PageDtype dtype) {
  Impl& m = *impl_;
  if (pages.empty()) return;
  OOMB_ASSERT(static_cast<int64_t>(pages.size()) <= (rows + page_tokens - 1) / page_tokens && pages.size() < 65536);
  char* ws = m.scratch(up(static_cast<int64_t>(pages.size()) * 8));
  m.put(ws, pages.data(), static_cast<int64_t>(pages.size()) * 8);
  launch_add_from_grad_pages(reinterpret_cast<const void* const*>(ws), static_cast<int64_t>(pages.size()), rows,
                             kv_dim, page_tokens, dk, dv, dtype == PageDtype::bf16, m.compute);
}

void CudaBackend::page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out) {
  launch_page_summaries(k, rows, kv_dim, page_tokens, out, impl_->compute);
}

std::vector<std::vector<int32_t>> CudaBackend::select_pages(const SelectionArgs& a) {
  Impl& m = *impl_;
  OOMB_ASSERT(a.q_heads % a.kv_heads == 0 && a.page_tokens > 0 && a.budget > 0);
  const int64_t qpages = (a.rows + a.page_tokens - 1) / a.page_tokens, groups = a.per_kv_head ? a.kv_heads : 1;
  const int64_t take = std::min(a.budget, a.prefix_pages);
  const int64_t bytes =
      SelectWorkspace::bytes(a.rows, a.kv_heads, a.head_dim, qpages, groups, a.prefix_pages, a.budget);
  // bf16 queries / summaries: fp32 copies (exact) after the selection workspace.
  Fp32Rows rows(up(bytes));
  const int q = rows.add_in(a.q, a.rows * a.q_heads * a.head_dim);
  const int sum = rows.add_in(a.summaries, a.prefix_pages * a.kv_heads * a.head_dim);
  char* base = m.scratch(rows.bytes());
  rows.place(base, m.compute);
  const SelectWorkspace ws =
      SelectWorkspace::carve(base, a.rows, a.kv_heads, a.head_dim, qpages, groups, a.prefix_pages, a.budget);
  // fp32 summaries outside the device arena (the host tier with bounded selection memory) are
  // staged into device scratch once; bf16 ones were converted into device scratch above.
  const bool stage = !is_bf16(a.summaries) && !m.in_device_tier(a.summaries.data);
  launch_page_scores(rows.in(q), a.rows, a.q_heads, a.kv_heads, a.head_dim, a.page_tokens, rows.in(sum),
                     a.prefix_pages, a.per_kv_head, stage, ws, m.compute);
  // Tensor parallelism (the published rule): the ranks' scores summed in place on the device, in
  // stream order (NCCL on the compute stream), before the top-k; no extra host synchronisation.
  if (a.reduce_scores) a.reduce_scores(ws.scores, qpages * groups * a.prefix_pages);
  launch_top_pages(a.rows, a.page_tokens, groups, a.prefix_pages, a.budget, ws, m.compute);
  std::vector<int32_t> flat(static_cast<size_t>(qpages * groups * a.budget));
  m.get(flat.data(), ws.selected, static_cast<int64_t>(flat.size()) * 4);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(qpages * groups));
  for (size_t jg = 0; jg < out.size(); ++jg) {
    const auto* row = flat.data() + jg * static_cast<size_t>(a.budget);
    out[jg].assign(row, row + take);
  }
  return out;
}

double CudaBackend::cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                  float scale_, Tensor grad) {
  extents::cross_entropy(logits, rows, vocab, grad);
  Impl& m = *impl_;
  OOMB_ASSERT(grad.data != logits.data || grad.dtype == logits.dtype, "an in-place loss gradient keeps the dtype");
  char* ws = m.scratch(up(std::max<int64_t>(rows, 1) * 8) + kAlign);
  auto* row_loss = reinterpret_cast<double*>(ws);
  auto* sum = reinterpret_cast<double*>(ws + up(std::max<int64_t>(rows, 1) * 8));
  launch_cross_entropy(logits, rows, vocab, targets, scale_, grad, row_loss, sum, m.compute);
  double total = 0;
  m.get(&total, sum, 8);
  return total;
}

void CudaBackend::cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                            float* stats) {
  extents::elementwise("cross_entropy_shard_stats", rows * vocab, {logits});
  launch_cross_entropy_shard_stats(logits, rows, vocab, targets, stats, impl_->compute);
}

void CudaBackend::cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                              int64_t slot) {
  Impl& m = *impl_;
  OOMB_ASSERT(slot >= 0 && ranks >= 1);
  if (slot >= m.loss_slot_count) m.grow_loss_slots(slot + 1);
  launch_cross_entropy_shard_combine(stats, ranks, rows, targets, m.loss_slots_dev + slot, m.compute);
}

void CudaBackend::cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                           const float* max_sum, float scale_, Tensor grad) {
  extents::cross_entropy(logits, rows, vocab, grad);
  OOMB_ASSERT(grad.data != logits.data || grad.dtype == logits.dtype, "an in-place loss gradient keeps the dtype");
  launch_cross_entropy_shard_grad(logits, rows, vocab, targets, max_sum, scale_, grad, impl_->compute);
}

void CudaBackend::cross_entropy_acc(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                    float scale_, Tensor grad, int64_t slot) {
  extents::cross_entropy(logits, rows, vocab, grad);
  Impl& m = *impl_;
  OOMB_ASSERT(slot >= 0);
  OOMB_ASSERT(grad.data != logits.data || grad.dtype == logits.dtype, "an in-place loss gradient keeps the dtype");
  if (slot >= m.loss_slot_count) m.grow_loss_slots(slot + 1);
  // The same scratch request as cross_entropy (row losses; the sum goes to the slot instead).
  char* ws = m.scratch(up(std::max<int64_t>(rows, 1) * 8) + kAlign);
  launch_cross_entropy(logits, rows, vocab, targets, scale_, grad, reinterpret_cast<double*>(ws),
                       m.loss_slots_dev + slot, m.compute, /*accumulate=*/true);
}

std::vector<double> CudaBackend::take_losses(int64_t n) {
  Impl& m = *impl_;
  OOMB_ASSERT(n >= 0);
  ++m.host_syncs;
  OOMB_CUDA_CHECK(cudaStreamSynchronize(m.compute));  // every tile's kernel has added its loss
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  std::copy(m.loss_slots, m.loss_slots + std::min(n, m.loss_slot_count), out.begin());
  std::fill(m.loss_slots, m.loss_slots + m.loss_slot_count, 0.0);
  return out;
}

int64_t CudaBackend::host_syncs() const { return impl_->host_syncs.load(); }

void CudaBackend::adamw(Tensor param, float* master, ConstTensor grad, float* m_, float* v, const uint8_t* decay_mask,
                        int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                        float grad_scale) {
  launch_adamw(param, master, grad, m_, v, decay_mask, n, lr, beta1, beta2, eps, weight_decay, step, grad_scale,
               impl_->compute);
}

int64_t CudaBackend::gemm_workspace_bytes() const { return kGemmWorkspaceBytes; }

std::vector<BackendBuffer> CudaBackend::host_buffers() const {
  const Impl& m = *impl_;
  const int64_t ring = static_cast<int64_t>(m.slots.size()) * std::max<int64_t>(m.opt.staging_slot_bytes, 1);
  return {{step::row::kStagingRing, "backend_scratch", m.slots.empty() ? 0 : ring},
          {step::row::kReadback, "backend_scratch", m.readback_bytes},
          {step::row::kLossSlots, "backend_scratch", m.loss_slot_count * 8}};
}

void CudaBackend::size_loss_slots(int64_t slots) {
  Impl& m = *impl_;
  if (slots > m.loss_slot_count) m.grow_loss_slots(slots);
}

std::vector<BackendBuffer> CudaBackend::device_buffers() const {
  return {{step::row::kGemmWorkspace, "backend_scratch", gemm_workspace_bytes()},
          {step::row::kOpScratch, "backend_scratch", scratch_bytes()}};
}

step::Target CudaBackend::target() const {
  step::Target t;
  t.backend = step::BackendKind::cuda;
  t.bf16_gemm = impl_->opt.gemm_precision == CudaGemmPrecision::bf16;
  return t;
}

int64_t CudaBackend::scratch_bytes() const { return impl_->workspace_bytes; }

// ---------------------------------------------------------------- beyond the interface

void CudaBackend::synchronize() { impl_->synchronize(); }

void CudaBackend::size_op_scratch(int64_t bytes) {
  Impl& m = *impl_;
  m.opt.fixed_workspace = true;
  if (bytes == m.workspace_bytes) return;
  // At set-up, never inside a step: the old scratch may still be read by queued kernels.
  m.synchronize();
  if (m.workspace) OOMB_CUDA_CHECK(cudaFree(m.workspace));
  m.workspace = nullptr;
  m.workspace_bytes = 0;
  if (bytes > 0) OOMB_CUDA_CHECK(cudaMalloc(&m.workspace, static_cast<size_t>(bytes)));
  m.workspace_bytes = bytes;
}

void* CudaBackend::stream(CudaStream s) const {
  switch (s) {
    case CudaStream::compute: return impl_->compute;
    case CudaStream::h2d: return impl_->h2d;
    case CudaStream::d2h: return impl_->d2h;
  }
  return nullptr;
}

CudaMemoryStats CudaBackend::memory_stats() const {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mem_mu);
  CudaMemoryStats s;
  s.device_reserved_bytes = m.device->reserved_bytes();
  s.device_in_use_bytes = m.device->in_use_bytes();
  s.device_blocks = m.device->blocks();
  s.device_grows = m.device->grows();
  s.device_spills = m.device_spills;
  s.host_reserved_bytes = m.host->reserved_bytes();
  s.host_in_use_bytes = m.host->in_use_bytes();
  s.host_slabs = m.host->blocks();
  s.host_grows = m.host->grows();
  s.workspace_bytes = m.workspace_bytes;
  s.workspace_grows = m.workspace_grows;
  s.gemm_workspace_bytes = kGemmWorkspaceBytes;
  return s;
}

const CudaBackendOptions& CudaBackend::options() const { return impl_->opt; }

bool CudaBackend::emulated() {
#ifdef OOMB_CUDA_EMULATED_BACKEND
  return true;
#else
  return false;
#endif
}

std::string CudaBackend::device_name() const {
  cudaDeviceProp p{};
  OOMB_CUDA_CHECK(cudaGetDeviceProperties(&p, impl_->opt.device));
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, driver " + std::to_string(driver / 1000) + "." +
         std::to_string((driver % 1000) / 10) + ")";
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool cuda_device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  return true;
}

}  // namespace oomb::executor
