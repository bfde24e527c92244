// The CUDA backend: memory tiers, streams and copies, and the ops as launches of the kernel files
// (one .cu + .cuh per kernel family) and cuBLASLt GEMMs. See cuda_backend.h for the stream and
// event design.
#include "executor/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
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
#include "executor/cuda/arena.h"
#include "executor/cuda/attention.cuh"
#include "executor/cuda/attention_tc.cuh"
#include "executor/cuda/cross_entropy.cuh"
#include "executor/cuda/cuda_check.h"
#include "executor/cuda/elementwise.cuh"
#include "executor/cuda/embedding.cuh"
#include "executor/cuda/gemm.h"
#include "executor/cuda/kv_pages.cuh"
#include "executor/cuda/rmsnorm.cuh"
#include "executor/cuda/rope.cuh"
#include "executor/cuda/selection.cuh"
#include "executor/cuda/swiglu.cuh"

namespace oomb::executor {

using namespace cuda;

namespace {

constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;
constexpr int64_t kAlign = 256;

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t up(int64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

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
  std::unique_ptr<Arena> device, host;
  std::mutex mem_mu;

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
    for (auto& sl : slots) {
      if (sl.host) cudaFreeHost(sl.host);
      if (sl.done) cudaEventDestroy(sl.done);
    }
    device.reset();
    host.reset();
    if (compute_mark) cudaEventDestroy(compute_mark);
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
      float ms = 0;
      if (e == cudaSuccess) cudaEventElapsedTime(&ms, job.start, job.end);
      else
        std::fprintf(stderr, "oomb: asynchronous copy failed: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
      const int64_t t1 = steady_ns(), t0 = t1 - static_cast<int64_t>(static_cast<double>(ms) * 1e6);
      if (job.on_done) {
        try {
          job.on_done(t0, t1);
        } catch (const std::exception& ex) {
          std::fprintf(stderr, "oomb: copy completion callback failed: %s\n", ex.what());
        }
      }
      {
        std::lock_guard<std::mutex> lock(copy_mu);
        pending.erase(job.id);
      }
      job.event->signal();
    }
  }

  void synchronize() {
    OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
    OOMB_CUDA_CHECK(cudaStreamSynchronize(h2d));
    OOMB_CUDA_CHECK(cudaStreamSynchronize(d2h));
    free_retired();
  }

  // Device scratch of at least `bytes`. Grows only the first time a larger call arrives, without a
  // synchronisation: queued kernels may still use the old scratch, so it is retired (freed at the
  // next synchronize(), deallocate() or destruction) rather than freed (cudaFree would synchronise
  // the device inside the step).
  char* scratch(int64_t bytes) {
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

  // Device (or any tier) -> host, after everything queued on the compute stream.
  void get(void* dst, const void* src, int64_t bytes) {
    if (bytes <= 0) return;
    if (bytes > readback_bytes) {
      OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
      if (readback) OOMB_CUDA_CHECK(cudaFreeHost(readback));
      readback = nullptr;
      readback_bytes = std::max<int64_t>(up(bytes), 1 << 20);
      OOMB_CUDA_CHECK(cudaHostAlloc(&readback, static_cast<size_t>(readback_bytes), cudaHostAllocPortable));
    }
    OOMB_CUDA_CHECK(cudaMemcpyAsync(readback, src, static_cast<size_t>(bytes), cudaMemcpyDefault, compute));
    OOMB_CUDA_CHECK(cudaStreamSynchronize(compute));
    std::memcpy(dst, readback, static_cast<size_t>(bytes));
  }

  // One cudaMemcpyBatchAsync (CUDA 12.8+) of the regions, in stream order. False (and batching
  // off from then on) when the runtime or driver lacks it: the caller issues the regions one by one.
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
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotSupported && e != cudaErrorCallRequiresNewerDriver && e != cudaErrorInvalidValue)
      OOMB_CUDA_CHECK(e);
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
  m.device->reserve(m.opt.device_reserve_bytes);
  m.scratch(std::max<int64_t>(m.opt.workspace_bytes, kAlign));
  m.workspace_grows = 0;
  OOMB_CUDA_CHECK(cudaMalloc(&m.gemm_workspace, static_cast<size_t>(kGemmWorkspaceBytes)));
  m.gemm = std::make_unique<Gemm>(m.gemm_workspace, kGemmWorkspaceBytes);
  m.slots.resize(static_cast<size_t>(std::max(m.opt.staging_slots, 0)));
  for (auto& s : m.slots) {  // a slot not reached stays null (Impl::~Impl skips it)
    OOMB_CUDA_CHECK(cudaHostAlloc(&s.host, static_cast<size_t>(std::max<int64_t>(m.opt.staging_slot_bytes, 1)),
                                  cudaHostAllocPortable));
    OOMB_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
  for (auto& c : m.completion) c.thread = std::thread([&m, &c] { m.run_completion(c); });
}

CudaBackend::~CudaBackend() = default;  // Impl::~Impl

// ---------------------------------------------------------------- memory and copies

void* CudaBackend::allocate(Tier tier, int64_t bytes) {
  Impl& m = *impl_;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(m.mem_mu);
    p = (tier == Tier::device ? m.device : m.host)->allocate(bytes);
  }
  // Freed memory is reused only after deallocate() synchronised, so nothing in flight touches it.
  if (bytes > 0) {
    if (tier == Tier::device) OOMB_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), m.compute));
    else std::memset(p, 0, static_cast<size_t>(bytes));
  }
  return p;
}

void CudaBackend::deallocate(Tier tier, void* p, int64_t) {
  if (!p) return;
  Impl& m = *impl_;
  m.synchronize();  // throws after a sticky error (Buffer logs it)
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

void CudaBackend::embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out) {
  launch_embedding_fwd(ids, rows, table, hidden, out, impl_->compute);
}

void CudaBackend::embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden,
                                float* dtable_acc) {
  launch_embedding_bwd(ids, rows, dout, hidden, dtable_acc, impl_->compute);
}

void CudaBackend::rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                              float* rstd) {
  launch_rmsnorm_fwd(x, w, rows, dim, eps, y, rstd, impl_->compute);
}

void CudaBackend::rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                              int64_t dim, float* dx_acc, float* dw_acc) {
  launch_rmsnorm_bwd(x, w, rstd, dy, rows, dim, dx_acc, dw_acc, impl_->compute);
}

// ---- linear ops: cuBLASLt GEMMs at CudaBackendOptions::gemm_precision.
//
// A row-major [rows, cols] matrix with row stride ld is a column-major [cols, rows] one with leading
// dimension ld. With bf16 GEMMs each operand is first converted (launch_to_bf16) into the op scratch,
// rows padded to a multiple of 8 elements (16 bytes) and every copy 256-byte aligned, so the bf16
// operands always meet cuBLASLt's alignment for its fast kernels whatever the shape; C stays the
// caller's fp32 array (any alignment: the plan's heuristic is told it). The scratch is reused by the
// next op in stream order, like every op's scratch.

namespace {

int64_t ld8(int64_t cols) { return (cols + 7) / 8 * 8; }

// A GEMM operand: the caller's fp32 row-major matrix and, in bf16 mode, its converted copy.
struct Operand {
  const float* f32;
  int64_t ld;
  const uint16_t* bf16 = nullptr;
  int64_t ld16 = 0;
};

// Carves bf16 copies out of one scratch allocation.
class Bf16Scratch {
 public:
  // Bytes of a bf16 copy of a [rows, cols] matrix.
  static int64_t bytes(int64_t rows, int64_t cols) { return up(rows * ld8(cols) * 2); }
  explicit Bf16Scratch(char* base) : next_(base) {}
  // Converts src [rows, cols] into the next copy.
  Operand convert(const float* src, int64_t rows, int64_t cols, cudaStream_t s) {
    auto* dst = reinterpret_cast<uint16_t*>(next_);
    launch_to_bf16(src, rows, cols, dst, ld8(cols), s);
    next_ += bytes(rows, cols);
    return {src, cols, dst, ld8(cols)};
  }

 private:
  char* next_;
};

// One GEMM (column-major C[m, n] = op(A) op(B) + beta C) in the configured precision; bf16 falls back
// to fp32 on the original operands when cuBLASLt has no bf16 algorithm. Counted by the precision run.
void run_gemm(Gemm& gemm, const CudaBackendOptions& opt, int64_t* calls, bool ta, bool tb, int64_t m, int64_t n,
              int64_t k, const Operand& a, const Operand& b, float beta, float* c, int64_t ldc, cudaStream_t s) {
  if (m <= 0 || n <= 0) return;
  if (opt.gemm_precision == CudaGemmPrecision::bf16 && a.bf16 && b.bf16 &&
      gemm.try_matmul(CudaGemmPrecision::bf16, ta, tb, m, n, k, a.bf16, a.ld16, b.bf16, b.ld16, beta, c, ldc, s)) {
    ++calls[static_cast<int>(CudaGemmPrecision::bf16)];
    return;
  }
  const CudaGemmPrecision p =
      opt.gemm_precision == CudaGemmPrecision::tf32 ? CudaGemmPrecision::tf32 : CudaGemmPrecision::fp32;
  gemm.matmul(p, ta, tb, m, n, k, a.f32, a.ld, b.f32, b.ld, beta, c, ldc, s);
  ++calls[static_cast<int>(p)];
}

}  // namespace

// Row-major y[rows, out] = x[rows, in] W[out, in]^T is column-major y^T = W x^T.
void CudaBackend::linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out,
                             float* y) {
  Impl& m = *impl_;
  Operand wo{w, in}, xo{x, in};
  if (m.opt.gemm_precision == CudaGemmPrecision::bf16 && rows > 0 && out > 0 && in > 0) {
    Bf16Scratch ws(m.scratch(Bf16Scratch::bytes(out, in) + Bf16Scratch::bytes(rows, in)));
    wo = ws.convert(w, out, in, m.compute);
    xo = ws.convert(x, rows, in, m.compute);
  }
  run_gemm(*m.gemm, m.opt, m.gemm_calls, true, false, out, rows, in, wo, xo, 0.0f, y, out, m.compute);
  if (b) launch_add_bias(y, rows, out, b, m.compute);
}

void CudaBackend::linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy,
                             float* dx, bool accumulate_dx, float* dw_acc, float* db_acc) {
  Impl& m = *impl_;
  Operand wo{w, in}, xo{x, in}, dyo{dy, out};
  if (m.opt.gemm_precision == CudaGemmPrecision::bf16 && rows > 0 && out > 0 && in > 0 && (dx || dw_acc)) {
    // dy once for both products; W for dx, x for dW.
    Bf16Scratch ws(m.scratch(Bf16Scratch::bytes(rows, out) + (dx ? Bf16Scratch::bytes(out, in) : 0) +
                             (dw_acc ? Bf16Scratch::bytes(rows, in) : 0)));
    dyo = ws.convert(dy, rows, out, m.compute);
    if (dx) wo = ws.convert(w, out, in, m.compute);
    if (dw_acc) xo = ws.convert(x, rows, in, m.compute);
  }
  // dx^T [in, rows] (+)= W^T [in, out] dy^T [out, rows]
  if (dx)
    run_gemm(*m.gemm, m.opt, m.gemm_calls, false, false, in, rows, out, wo, dyo, accumulate_dx ? 1.0f : 0.0f, dx, in,
             m.compute);
  // dW^T [in, out] += x^T [in, rows] dy [rows, out]
  if (dw_acc) run_gemm(*m.gemm, m.opt, m.gemm_calls, false, true, in, out, rows, xo, dyo, 1.0f, dw_acc, in, m.compute);
  // The bias gradient sums the fp32 dy (never the bf16 copy).
  if (db_acc) launch_column_sum_acc(dy, rows, out, db_acc, m.compute);
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

void CudaBackend::rope_fwd(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) {
  OOMB_ASSERT(head_dim % 2 == 0, "RoPE needs an even head_dim");
  launch_rope(x, rows, heads, head_dim, pos0, theta, 1.0f, impl_->compute);
}

void CudaBackend::rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) {
  OOMB_ASSERT(head_dim % 2 == 0, "RoPE needs an even head_dim");
  launch_rope(dx, rows, heads, head_dim, pos0, theta, -1.0f, impl_->compute);
}

void CudaBackend::swiglu_fwd(const float* gate, const float* up_, int64_t n, float* out) {
  launch_swiglu_fwd(gate, up_, n, out, impl_->compute);
}

void CudaBackend::swiglu_bwd(const float* gate, const float* up_, const float* dout, int64_t n, float* dgate,
                             float* dup) {
  launch_swiglu_bwd(gate, up_, dout, n, dgate, dup, impl_->compute);
}

void CudaBackend::add(float* y, const float* x, int64_t n) { launch_add(y, x, n, impl_->compute); }

void CudaBackend::copy(float* dst, const float* src, int64_t n) {
  if (n <= 0 || dst == src) return;
  OOMB_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * 4, cudaMemcpyDefault, impl_->compute));
}

void CudaBackend::scale(float* x, int64_t n, float s) { launch_scale(x, n, s, impl_->compute); }

namespace {

// Host image of a launch's metadata (page pointer arrays, selection lists), laid out as it will be
// in the device workspace; aligned sub-arrays.
class Metadata {
 public:
  template <class T>
  int64_t add(const T* data, int64_t count) {
    const int64_t off = static_cast<int64_t>(bytes_.size());
    const int64_t n = up(count * static_cast<int64_t>(sizeof(T)));
    bytes_.resize(static_cast<size_t>(off + n), 0);
    if (count > 0) std::memcpy(bytes_.data() + off, data, static_cast<size_t>(count) * sizeof(T));
    return off;
  }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const char* data() const { return bytes_.data(); }

 private:
  std::vector<char> bytes_;
};

struct SelectCsr {
  std::vector<int32_t> offsets, slots;
};

SelectCsr csr_of(const PagedAttention& a) {
  SelectCsr c;
  if (a.select_groups == 0) return c;
  const int64_t qpages = (a.rows + a.page_tokens - 1) / a.page_tokens;
  OOMB_ASSERT(static_cast<int64_t>(a.select.size()) == qpages * a.select_groups, "selection lists per query page");
  c.offsets.push_back(0);
  for (const auto& list : a.select) {
    for (int32_t s : list) {
      OOMB_ASSERT(s >= 0 && s < static_cast<int32_t>(a.prefix_pages.size()), "selected slot out of range");
      c.slots.push_back(s);
    }
    c.offsets.push_back(static_cast<int32_t>(c.slots.size()));
  }
  return c;
}

AttentionArgs attention_args(const PagedAttention& a) {
  AttentionArgs r;
  r.rows = a.rows;
  r.q_heads = a.q_heads;
  r.kv_heads = a.kv_heads;
  r.head_dim = a.head_dim;
  r.page_tokens = a.page_tokens;
  r.prefix_slots = static_cast<int64_t>(a.prefix_pages.size());
  r.q = a.q;
  r.k_own = a.k_own;
  r.v_own = a.v_own;
  r.kv_bf16 = a.kv_dtype == PageDtype::bf16;
  r.select_groups = a.select_groups;
  return r;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class Ptr>
bool all_aligned16(const std::vector<Ptr>& v) {
  return std::all_of(v.begin(), v.end(), [](Ptr p) { return aligned16(p); });
}

// Which family runs a call (after the fallback rule of CudaAttentionKernel::bf16_tensor_core); with
// CudaBackendOptions::attention_kernel_strict a call the tensor-core kernels cannot take is refused.
bool use_tc(const CudaBackendOptions& opt, const AttentionArgs& args, bool buffers_aligned, const char* op) {
  if (opt.attention_kernel != CudaAttentionKernel::bf16_tensor_core) return false;
  if (buffers_aligned && attention_tc_supported(args)) return true;
  if (!opt.attention_kernel_strict) return false;
  std::string why;
  if (args.head_dim != 64 && args.head_dim != 128)
    why = "head_dim " + std::to_string(args.head_dim) + " (they take 64 or 128)";
  else if (!attention_tc_device_supported())
    why = "this device or build (they need sm_80 or later and a kernel image for it)";
  else
    why = "a buffer that is not 16-byte aligned";
  throw Error("--attention-kernel", "bf16-tc",
              std::string("the bf16 tensor-core kernels cannot run ") + op + " on " + why,
              "use --attention-kernel auto, which runs the fp32 kernels where the tensor-core ones cannot, or fp32");
}

}  // namespace

void CudaBackend::attention_fwd(const PagedAttention& a, float* o, float* lse) {
  Impl& m = *impl_;
  const SelectCsr csr = csr_of(a);
  Metadata md;
  const int64_t pages = md.add(a.prefix_pages.data(), static_cast<int64_t>(a.prefix_pages.size()));
  const int64_t off = md.add(csr.offsets.data(), static_cast<int64_t>(csr.offsets.size()));
  const int64_t slots = md.add(csr.slots.data(), static_cast<int64_t>(csr.slots.size()));
  char* ws = m.scratch(md.size());
  m.put(ws, md.data(), md.size());
  AttentionArgs args = attention_args(a);
  args.pages = reinterpret_cast<const void* const*>(ws + pages);
  args.select_offsets = reinterpret_cast<const int32_t*>(ws + off);
  args.select_slots = reinterpret_cast<const int32_t*>(ws + slots);
  // Tensor cores when asked for and possible (the kernels read and write float4 rows); else fp32.
  const bool tc = use_tc(m.opt, args, aligned16(o) && all_aligned16(a.prefix_pages), "attention_fwd");
  ++m.attention_calls[tc ? 1 : 0];
  if (tc) launch_attention_tc_fwd(args, o, lse, m.compute);
  else launch_attention_fwd(args, o, lse, m.compute);
}

void CudaBackend::attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout,
                                float* dq, float* dk_own, float* dv_own,
                                const std::vector<float*>& prefix_grad_pages) {
  Impl& m = *impl_;
  OOMB_ASSERT(prefix_grad_pages.size() == a.prefix_pages.size(), "one gradient page per prefix page");
  const SelectCsr csr = csr_of(a);
  Metadata md;
  const int64_t pages = md.add(a.prefix_pages.data(), static_cast<int64_t>(a.prefix_pages.size()));
  const int64_t grads = md.add(prefix_grad_pages.data(), static_cast<int64_t>(prefix_grad_pages.size()));
  const int64_t off = md.add(csr.offsets.data(), static_cast<int64_t>(csr.offsets.size()));
  const int64_t slots = md.add(csr.slots.data(), static_cast<int64_t>(csr.slots.size()));
  const int64_t drow_bytes = up(a.rows * a.q_heads * 4);
  char* ws = m.scratch(md.size() + drow_bytes);
  m.put(ws, md.data(), md.size());
  AttentionArgs args = attention_args(a);
  args.pages = reinterpret_cast<const void* const*>(ws + pages);
  args.select_offsets = reinterpret_cast<const int32_t*>(ws + off);
  args.select_slots = reinterpret_cast<const int32_t*>(ws + slots);
  AttentionGrads g;
  g.o = o;
  g.lse = lse;
  g.dout = dout;
  g.drow = reinterpret_cast<float*>(ws + md.size());
  g.dq = dq;
  g.dk_own = dk_own;
  g.dv_own = dv_own;
  g.grad_pages = reinterpret_cast<void* const*>(ws + grads);
  g.grad_bf16 = a.grad_dtype == PageDtype::bf16;
  const bool tc = use_tc(m.opt, args,
                         aligned16(o) && aligned16(dout) && aligned16(dq) && aligned16(dk_own) && aligned16(dv_own) &&
                             all_aligned16(a.prefix_pages) && all_aligned16(prefix_grad_pages),
                         "attention_bwd");
  ++m.attention_calls[tc ? 1 : 0];
  if (tc) launch_attention_tc_bwd(args, g, m.compute);
  else launch_attention_bwd(args, g, m.compute);
}

int64_t CudaBackend::copy_regions() const { return impl_->copy_regions; }
int64_t CudaBackend::copy_api_calls() const { return impl_->copy_api_calls; }

int64_t CudaBackend::attention_calls(CudaAttentionKernel k) const {
  return impl_->attention_calls[k == CudaAttentionKernel::fp32 ? 0 : 1];
}

bool CudaBackend::attention_tc_available() const { return attention_tc_device_supported(); }

void CudaBackend::write_kv_pages(const float* k, const float* v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
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
                                      int64_t page_tokens, float* dk, float* dv, PageDtype dtype) {
  Impl& m = *impl_;
  if (pages.empty()) return;
  OOMB_ASSERT(static_cast<int64_t>(pages.size()) <= (rows + page_tokens - 1) / page_tokens && pages.size() < 65536);
  char* ws = m.scratch(up(static_cast<int64_t>(pages.size()) * 8));
  m.put(ws, pages.data(), static_cast<int64_t>(pages.size()) * 8);
  launch_add_from_grad_pages(reinterpret_cast<const void* const*>(ws), static_cast<int64_t>(pages.size()), rows,
                             kv_dim, page_tokens, dk, dv, dtype == PageDtype::bf16, m.compute);
}

void CudaBackend::page_summaries(const float* k, int64_t rows, int64_t kv_dim, int64_t page_tokens, float* out) {
  launch_page_summaries(k, rows, kv_dim, page_tokens, out, impl_->compute);
}

std::vector<std::vector<int32_t>> CudaBackend::select_pages(const SelectionArgs& a) {
  Impl& m = *impl_;
  OOMB_ASSERT(a.q_heads % a.kv_heads == 0 && a.page_tokens > 0 && a.budget > 0);
  const int64_t qpages = (a.rows + a.page_tokens - 1) / a.page_tokens, groups = a.per_kv_head ? a.kv_heads : 1;
  const int64_t take = std::min(a.budget, a.prefix_pages);
  const int64_t bytes =
      SelectWorkspace::bytes(a.rows, a.kv_heads, a.head_dim, qpages, groups, a.prefix_pages, a.budget);
  const SelectWorkspace ws = SelectWorkspace::carve(m.scratch(bytes), a.rows, a.kv_heads, a.head_dim, qpages, groups,
                                                     a.prefix_pages, a.budget);
  // Summaries outside the device arena (the host tier with bounded selection memory) are staged.
  launch_select_pages(a.q, a.rows, a.q_heads, a.kv_heads, a.head_dim, a.page_tokens, a.summaries, a.prefix_pages,
                      a.budget, a.per_kv_head, !m.in_device_tier(a.summaries), ws, m.compute);
  std::vector<int32_t> flat(static_cast<size_t>(qpages * groups * a.budget));
  m.get(flat.data(), ws.selected, static_cast<int64_t>(flat.size()) * 4);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(qpages * groups));
  for (size_t jg = 0; jg < out.size(); ++jg) {
    const auto* row = flat.data() + jg * static_cast<size_t>(a.budget);
    out[jg].assign(row, row + take);
  }
  return out;
}

double CudaBackend::cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale_) {
  Impl& m = *impl_;
  char* ws = m.scratch(up(std::max<int64_t>(rows, 1) * 8) + kAlign);
  auto* row_loss = reinterpret_cast<double*>(ws);
  auto* sum = reinterpret_cast<double*>(ws + up(std::max<int64_t>(rows, 1) * 8));
  launch_cross_entropy(logits, rows, vocab, targets, scale_, row_loss, sum, m.compute);
  double total = 0;
  m.get(&total, sum, 8);
  return total;
}

void CudaBackend::adamw(float* param, const float* grad, float* m_, float* v, const uint8_t* decay_mask, int64_t n,
                        float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  launch_adamw(param, grad, m_, v, decay_mask, n, lr, beta1, beta2, eps, weight_decay, step, impl_->compute);
}

// ---------------------------------------------------------------- beyond the interface

void CudaBackend::synchronize() { impl_->synchronize(); }

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

std::string CudaBackend::device_name() const {
  cudaDeviceProp p{};
  OOMB_CUDA_CHECK(cudaGetDeviceProperties(&p, impl_->opt.device));
  int driver = 0;
  cudaDriverGetVersion(&driver);
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.multiProcessorCount) + " SMs, driver " + std::to_string(driver / 1000) + "." +
         std::to_string((driver % 1000) / 10) + ")";
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
