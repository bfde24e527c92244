#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/gemm.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>

#include <sys/mman.h>

#include "core/error.h"
#include "executor/cpu/moe.h"
#include "executor/cpu/ops.h"
#include "executor/cpu/parallel.h"
#include "executor/cpu/threads.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Memory-bound loops of the backend itself over n elements, cut into fixed pieces on the compute
// threads (elementwise: the result does not depend on the count).
constexpr int64_t kElementGrain = int64_t{1} << 16;
// A block the cache cannot serve comes from the C library. One of 2 MiB or more is 2 MiB-aligned
// and advised for transparent huge pages (where the kernel leaves them to madvise, as Debian
// does): its first touch, the zeroing below, then faults a few 2 MiB pages in instead of one
// 4 KiB page per 4 KiB. Measured on the phase buffers that a step frees and allocates again
// (a 38.9 MB logits-gradient tile of qwen2.5-0.5b that the cache had given back to the system):
// 64 ms to allocate and zero it with 4 KiB pages, most of it page faults. The accounting is the
// block's bytes either way; only the resident rounding differs.
constexpr size_t kHugePageBytes = size_t{2} << 20;
void* fresh_block(size_t n) {
  if (n < kHugePageBytes) return std::aligned_alloc(CpuBackend::kAllocationAlignment, n);
  const size_t rounded = (n + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: without huge pages it is 4 KiB pages
#endif
  return p;
}

void zero_bytes(void* p, int64_t bytes) {
  auto* b = static_cast<unsigned char*>(p);
  cpu::parallel_pieces(bytes, 4 * kElementGrain, bytes, [&](int64_t i0, int64_t i1) {
    std::memset(b + i0, 0, static_cast<size_t>(i1 - i0));
  });
}
void load_bf16(const uint16_t* src, float* dst, int64_t n) {
  cpu::parallel_pieces(n, kElementGrain, n, [&](int64_t i0, int64_t i1) { bf16_to_f32(src + i0, dst + i0, i1 - i0); });
}
void store_bf16(const float* src, uint16_t* dst, int64_t n) {
  cpu::parallel_pieces(n, kElementGrain, n, [&](int64_t i0, int64_t i1) { f32_to_bf16(src + i0, dst + i0, i1 - i0); });
}

// fp32 staging buffers of the bf16 operands, reused from op to op. A fresh vector per operand
// cost its page faults and its zero fill on one thread, every op: with 2 threads that serial part
// was most of the chunked step's lost speed-up (issue #15). Uninitialised; held while a CpuBackend
// lives and freed with the last one.
class Staging {
 public:
  struct Buf {
    std::unique_ptr<float[]> p;
    size_t cap = 0;
  };
  static Buf take(size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu());
      auto& f = free_list();
      // The smallest free buffer that holds n, else a new one (the free ones stay for others).
      auto best = f.end();
      for (auto it = f.begin(); it != f.end(); ++it)
        if (it->cap >= n && (best == f.end() || it->cap < best->cap)) best = it;
      if (best != f.end()) {
        Buf b = std::move(*best);
        f.erase(best);
        return b;
      }
    }
    Buf b;
    b.p.reset(new float[n]);
    b.cap = n;
    return b;
  }
  static void give(Buf b) {
    if (!b.p) return;
    std::lock_guard<std::mutex> lock(mu());
    auto& f = free_list();
    f.push_back(std::move(b));
    if (f.size() > kKept) {  // drop the smallest: the large ones are the ones that fault
      auto smallest = std::min_element(f.begin(), f.end(), [](const Buf& a, const Buf& c) { return a.cap < c.cap; });
      f.erase(smallest);
    }
  }
  static void backend_created() {
    std::lock_guard<std::mutex> lock(mu());
    ++backends();
  }
  static void backend_destroyed() {
    std::lock_guard<std::mutex> lock(mu());
    if (--backends() == 0) free_list().clear();
  }

 private:
  static constexpr size_t kKept = 8;  // more than the operands of any one op
  static std::mutex& mu() {
    static std::mutex m;
    return m;
  }
  static std::vector<Buf>& free_list() {
    static std::vector<Buf> f;
    return f;
  }
  static int& backends() {
    static int n = 0;
    return n;
  }
};
}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options)
    : options_(options), threads_(options.threads > 0 ? options.threads : cpu::available_cpus()) {
  cpu::set_threads(threads_);
  cpu::reserve_gemm_buffers(threads_);  // before any step: a GEMM must not be where memory runs out
  Staging::backend_created();
  for (auto& s : streams_) s.worker = std::thread([this, &s] { run_stream(s); });
  if (options_.report_lag_ns > 0) reporter_ = std::thread([this] { run_reporter(); });
}

CpuBackend::~CpuBackend() {
  for (auto& s : streams_) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stop = true;
    }
    s.cv.notify_all();
  }
  for (auto& s : streams_) s.worker.join();
  if (reporter_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(report_mu_);
      reporter_stop_ = true;
    }
    report_cv_.notify_all();
    reporter_.join();
  }
  for (TierHeap& h : heaps_)
    for (auto& [n, p] : h.cached) std::free(p);
  Staging::backend_destroyed();
}

void CpuBackend::run_reporter() {
  for (;;) {
    Report r;
    {
      std::unique_lock<std::mutex> lock(report_mu_);
      report_cv_.wait(lock, [&] { return reporter_stop_ || !reports_.empty(); });
      if (reports_.empty()) return;  // stopping and drained
      r = std::move(reports_.front());
      reports_.pop_front();
    }
    std::this_thread::sleep_until(
        std::chrono::steady_clock::time_point(std::chrono::nanoseconds(r.t1 + options_.report_lag_ns)));
    if (r.on_done) r.on_done(r.t0, r.t1);
    {
      std::lock_guard<std::mutex> lock(report_mu_);
      data_of_.erase(r.done.get());
    }
    r.done->signal();
  }
}

int64_t CpuBackend::reports_pending() {
  std::lock_guard<std::mutex> lock(report_mu_);
  return static_cast<int64_t>(data_of_.size());
}

void CpuBackend::wait_data(const EventPtr& e) {
  if (!e) return;
  EventPtr data;
  if (options_.report_lag_ns > 0) {
    std::lock_guard<std::mutex> lock(report_mu_);
    auto it = data_of_.find(e.get());
    if (it != data_of_.end()) data = it->second;
  }
  (data ? data : e)->wait();
}

void CpuBackend::run_stream(Stream& s) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait(lock, [&] { return s.stop || !s.queue.empty(); });
      if (s.queue.empty()) return;  // stopping and drained
      job = std::move(s.queue.front());
      s.queue.pop_front();
    }
    for (const auto& e : job.req.after) wait_data(e);
    const int64_t t0 = now_ns();
    int64_t bytes = 0;
    for (const auto& r : job.req.regions) {
      std::memcpy(r.dst, r.src, static_cast<size_t>(r.bytes));
      bytes += r.bytes;
    }
    const double delay_ns = options_.copy_ns_per_byte[job.req.dir == CopyDir::h2d ? 0 : 1] * static_cast<double>(bytes);
    if (delay_ns > 0) std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
                          std::chrono::nanoseconds(t0 + static_cast<int64_t>(delay_ns))));
    const int64_t t1 = now_ns();
    if (job.data) {
      job.data->signal();
      {
        std::lock_guard<std::mutex> lock(report_mu_);
        reports_.push_back({std::move(job.req.on_done), t0, t1, job.done});
      }
      report_cv_.notify_one();
      continue;
    }
    if (job.req.on_done) job.req.on_done(t0, t1);
    job.done->signal();
  }
}

// A caching allocator, as a GPU framework's: a freed block is kept for the next request of the same
// size and tier (the executor frees and allocates the same phase buffers every step); the blocks a
// tier keeps never exceed the most that tier had in use at once. So a phase whose blocks differ in
// size from the last phase's can find its blocks given back and take fresh ones, every step (the
// loss phase's logits tiles after the backward's buffers): fresh_block makes those cheap to touch.
// The memory is zeroed on every allocate (on the compute threads), as before.
void* CpuBackend::allocate_impl(Tier tier, int64_t bytes, const std::string& row) {
  const size_t n = (static_cast<size_t>(bytes) + kAllocationAlignment - 1) / kAllocationAlignment *
                   kAllocationAlignment;
  TierHeap& h = heaps_[static_cast<int>(tier)];
  void* p = nullptr;
  // A miss: cached blocks of other sizes go back first where keeping them would hold more than
  // the most ever in use (or this allocation's new high-water), so the tier never holds more than
  // its peak in use: what it reserves is what was planned, each block rounded to the alignment.
  std::vector<void*> release;
  {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    auto it = h.cached.find(n);
    if (it != h.cached.end()) {
      p = it->second;
      h.cached.erase(it);
      h.cached_bytes -= static_cast<int64_t>(n);
    } else {
      const int64_t limit = std::max(h.in_use_high_bytes, h.in_use_bytes + static_cast<int64_t>(n));
      while (!h.cached.empty() && h.in_use_bytes + static_cast<int64_t>(n) + h.cached_bytes > limit) {
        auto old = h.cached.begin();
        h.cached_bytes -= static_cast<int64_t>(old->first);
        release.push_back(old->second);
        h.cached.erase(old);
      }
    }
  }
  for (void* q : release) std::free(q);
  if (!p) p = fresh_block(n);
  if (!p) throw std::bad_alloc();
  zero_bytes(p, static_cast<int64_t>(n));
  std::lock_guard<std::mutex> lock(alloc_mu_);
  live_[p] = Live{n, tier, options_.on_allocation ? row : std::string()};
  h.in_use_bytes += static_cast<int64_t>(n);
  h.in_use_high_bytes = std::max(h.in_use_high_bytes, h.in_use_bytes);
  h.reserved_high_bytes = std::max(h.reserved_high_bytes, h.in_use_bytes + h.cached_bytes);
  reserved_high_bytes_ =
      std::max(reserved_high_bytes_, heaps_[0].in_use_bytes + heaps_[0].cached_bytes + heaps_[1].in_use_bytes +
                                         heaps_[1].cached_bytes);
  if (options_.on_allocation) options_.on_allocation(tier, p, bytes, row, true);
  return p;
}

void CpuBackend::deallocate(Tier, void* p, int64_t bytes) {
  if (p) {
    std::lock_guard<std::mutex> lock(alloc_mu_);
    auto it = live_.find(p);
    OOMB_ASSERT(it != live_.end(), "cpu backend: deallocate of a block it did not allocate");
    const size_t n = it->second.bytes;
    const Tier tier = it->second.tier;
    if (options_.on_allocation) options_.on_allocation(tier, p, bytes, it->second.row, false);
    live_.erase(it);
    TierHeap& h = heaps_[static_cast<int>(tier)];
    h.in_use_bytes -= static_cast<int64_t>(n);
    if (h.cached_bytes + static_cast<int64_t>(n) <= h.in_use_high_bytes) {
      h.cached.emplace(n, p);
      h.cached_bytes += static_cast<int64_t>(n);
    } else {
      std::free(p);
    }
  }
  if (options_.deallocate_throws) throw std::runtime_error("cpu backend: injected sticky error in deallocate");
}

int64_t CpuBackend::cached_bytes() {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  return heaps_[0].cached_bytes + heaps_[1].cached_bytes;
}
int64_t CpuBackend::cached_bytes(Tier tier) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  return heaps_[static_cast<int>(tier)].cached_bytes;
}
int64_t CpuBackend::reserved_high_bytes() {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  return reserved_high_bytes_;
}
int64_t CpuBackend::reserved_high_bytes(Tier tier) {
  std::lock_guard<std::mutex> lock(alloc_mu_);
  return heaps_[static_cast<int>(tier)].reserved_high_bytes;
}
void CpuBackend::fill_zero(void* p, int64_t bytes) { zero_bytes(p, bytes); }
void CpuBackend::upload(void* d, const void* s, int64_t bytes) { std::memcpy(d, s, static_cast<size_t>(bytes)); }
void CpuBackend::download(void* d, const void* s, int64_t bytes) { std::memcpy(d, s, static_cast<size_t>(bytes)); }

EventPtr CpuBackend::copy_async(CopyRequest req) {
  if (options_.fail_copy_after >= 0 && copies_issued_++ >= options_.fail_copy_after)
    throw std::runtime_error("cpu backend: injected device fault in copy_async");
  auto done = std::make_shared<Event>();
  EventPtr data;
  if (options_.report_lag_ns > 0) {
    data = std::make_shared<Event>();
    std::lock_guard<std::mutex> lock(report_mu_);
    data_of_[done.get()] = data;
  }
  Stream& s = streams_[req.dir == CopyDir::h2d ? 0 : 1];
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queue.push_back(Job{std::move(req), done, data});
  }
  s.cv.notify_one();
  return done;
}

// The compute side waits for the copy's data only, like a CUDA stream waiting on the copy's device
// event (the report may come later).
void CpuBackend::wait(const EventPtr& e) { wait_data(e); }

namespace {

// fp32 view of an input: the storage itself (fp32) or a converted copy (bf16: exact).
class In {
 public:
  In(ConstTensor t, int64_t n) {
    if (!t.data || t.dtype == DType::f32) {
      p_ = static_cast<const float*>(t.data);
      return;
    }
    buf_ = Staging::take(static_cast<size_t>(n));
    load_bf16(static_cast<const uint16_t*>(t.data), buf_.p.get(), n);
    p_ = buf_.p.get();
  }
  ~In() { Staging::give(std::move(buf_)); }
  In(const In&) = delete;
  In& operator=(const In&) = delete;
  operator const float*() const { return p_; }  // NOLINT

 private:
  const float* p_ = nullptr;
  Staging::Buf buf_;
};

// fp32 working copy of an output: the storage itself (fp32) or a scratch (bf16) that is loaded when
// the op reads it (accumulate, in place) and rounded once into the storage when the op is done.
class Out {
 public:
  Out(Tensor t, int64_t n, bool load) : t_(t), n_(n) {
    if (!t.data || t.dtype == DType::f32) {
      p_ = static_cast<float*>(t.data);
      return;
    }
    buf_ = Staging::take(static_cast<size_t>(n));
    if (load) load_bf16(static_cast<const uint16_t*>(t.data), buf_.p.get(), n);
    else zero_bytes(buf_.p.get(), n * static_cast<int64_t>(sizeof(float)));
    p_ = buf_.p.get();
  }
  ~Out() {
    if (buf_.p) store_bf16(buf_.p.get(), static_cast<uint16_t*>(t_.data), n_);
    Staging::give(std::move(buf_));
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  operator float*() const { return p_; }  // NOLINT

 private:
  Tensor t_;
  int64_t n_ = 0;
  float* p_ = nullptr;
  Staging::Buf buf_;
};

}  // namespace

void CpuBackend::embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out) {
  extents::embedding("embedding_fwd", rows, hidden, out);
  // Only the rows looked up are loaded (a bf16 table is not converted whole).
  Out y(out, rows * hidden, false);
  if (table.dtype == DType::f32) {
    cpu::embedding_fwd(ids, rows, table.f32(), hidden, y);
    return;
  }
  const auto* t = static_cast<const uint16_t*>(table.data);
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[r] < 0) std::fill_n(y + r * hidden, hidden, 0.0f);
    else bf16_to_f32(t + static_cast<int64_t>(ids[r]) * hidden, y + r * hidden, hidden);
  }
}
void CpuBackend::embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden, Tensor dt) {
  extents::embedding("embedding_bwd", rows, hidden, dout);
  In d(dout, rows * hidden);
  if (dt.dtype == DType::f32) {
    cpu::embedding_bwd(ids, rows, d, hidden, dt.f32());
    return;
  }
  // bf16 table gradient: per touched row, the fp32 sum of this call's contributions, added and
  // rounded once (rows in first-seen order, contributions in row order as the fp32 op adds them).
  auto* g = static_cast<uint16_t*>(dt.data);
  std::vector<int32_t> seen;
  std::vector<float> acc;
  for (int64_t r = 0; r < rows; ++r) {
    if (ids[r] < 0) continue;  // another rank's token (the vocabulary-parallel embedding)
    size_t k = 0;
    while (k < seen.size() && seen[k] != ids[r]) ++k;
    if (k == seen.size()) {
      seen.push_back(ids[r]);
      acc.resize(acc.size() + static_cast<size_t>(hidden), 0.0f);
    }
    float* a = acc.data() + k * static_cast<size_t>(hidden);
    for (int64_t i = 0; i < hidden; ++i) a[i] += d[r * hidden + i];
  }
  for (size_t k = 0; k < seen.size(); ++k)
    bf16_add_f32(g + static_cast<int64_t>(seen[k]) * hidden, acc.data() + k * static_cast<size_t>(hidden), hidden);
}
void CpuBackend::rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y,
                             float* rstd) {
  extents::rmsnorm("rmsnorm_fwd", x, w, rows, dim, y);
  In xi(x, rows * dim), wi(w, dim);
  Out yo(y, rows * dim, false);
  cpu::rmsnorm_fwd(xi, wi, rows, dim, eps, yo, rstd);
}
void CpuBackend::rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows,
                             int64_t dim, Tensor dx, Tensor dw) {
  extents::rmsnorm("rmsnorm_bwd", x, w, rows, dim, dy);
  extents::rmsnorm("rmsnorm_bwd", dx, dw, rows, dim, dx);
  In xi(x, rows * dim), wi(w, dim), dyi(dy, rows * dim);
  Out dxo(dx, rows * dim, true), dwo(dw, dim, true);
  cpu::rmsnorm_bwd(xi, wi, rstd, dyi, rows, dim, dxo, dwo);
}
void CpuBackend::linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out,
                            Tensor y) {
  extents::linear_fwd(x, rows, in, w, b, out, y);
  In xi(x, rows * in), wi(w, out * in), bi(b, out);
  Out yo(y, rows * out, false);
  cpu::linear_fwd(xi, rows, in, wi, bi, out, yo);
}
void CpuBackend::linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy,
                            Tensor dx, bool acc, Tensor dw, Tensor db) {
  extents::linear_bwd(x, rows, in, w, out, dy, dx, dw, db);
  In xi(x, rows * in), wi(w, out * in), dyi(dy, rows * out);
  Out dxo(dx, rows * in, acc), dwo(dw, out * in, true), dbo(db, out, true);
  cpu::linear_bwd(xi, rows, in, wi, out, dyi, dxo, acc, dwo, dbo);
}
void CpuBackend::lora_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
                          int64_t out, float scale, Tensor u, Tensor y) {
  extents::lora("lora_fwd", x, rows, in, a, b, rank, out, u, y);
  if (rows <= 0 || rank <= 0) return;
  In xi(x, rows * in), ai(a, rank * in), bi(b, out * rank);
  {
    Out uo(u, rows * rank, false);
    cpu::gemm(false, true, rows, rank, in, scale, xi, in, ai, in, 0.0f, uo, rank);
  }
  // y's update reads u as stored (bf16 storage: rounded once), as the backward does.
  In ui(u, rows * rank);
  Out yo(y, rows * out, true);
  cpu::gemm(false, true, rows, out, rank, 1.0f, ui, rank, bi, rank, 1.0f, yo, out);
}
void CpuBackend::lora_bwd(ConstTensor x, ConstTensor u, int64_t rows, int64_t in, ConstTensor a, ConstTensor b,
                          int64_t rank, int64_t out, float scale, ConstTensor dy, Tensor du, Tensor dx, Tensor da,
                          Tensor db) {
  extents::lora("lora_bwd", x, rows, in, a, b, rank, out, u, dy);
  extents::lora("lora_bwd", dx, rows, in, da, db, rank, out, du, dy);
  if (rows <= 0 || rank <= 0) return;
  In xi(x, rows * in), ui(u, rows * rank), ai(a, rank * in), bi(b, out * rank), dyi(dy, rows * out);
  {
    Out dbo(db, out * rank, true);
    cpu::gemm(true, false, out, rank, rows, 1.0f, dyi, out, ui, rank, 1.0f, dbo, rank);
    Out duo(du, rows * rank, false);
    cpu::gemm(false, false, rows, rank, out, scale, dyi, out, bi, rank, 0.0f, duo, rank);
  }
  In dui(du, rows * rank);
  Out dao(da, rank * in, true);
  cpu::gemm(true, false, rank, in, rows, 1.0f, dui, rank, xi, in, 1.0f, dao, in);
  if (dx) {
    Out dxo(dx, rows * in, true);
    cpu::gemm(false, false, rows, in, rank, 1.0f, dui, rank, ai, in, 1.0f, dxo, in);
  }
}
void CpuBackend::rope_fwd(Tensor x, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, const models::Rope& rope) {
  Out xo(x, rows * heads * hd, true);
  cpu::rope_fwd(xo, rows, heads, hd, pos0, rope);
}
void CpuBackend::rope_bwd(Tensor dx, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, const models::Rope& rope) {
  Out d(dx, rows * heads * hd, true);
  cpu::rope_bwd(d, rows, heads, hd, pos0, rope);
}
void CpuBackend::swiglu_fwd(ConstTensor g, ConstTensor u, int64_t n, Tensor out, float limit) {
  extents::elementwise("swiglu_fwd", n, {g, u, out});
  In gi(g, n), ui(u, n);
  Out o(out, n, false);
  cpu::swiglu_fwd(gi, ui, n, o, limit);
}
void CpuBackend::swiglu_bwd(ConstTensor g, ConstTensor u, ConstTensor d, int64_t n, Tensor dg, Tensor du, float limit) {
  extents::elementwise("swiglu_bwd", n, {g, u, d, dg, du});
  In gi(g, n), ui(u, n), di(d, n);
  Out dgo(dg, n, false), duo(du, n, false);
  cpu::swiglu_bwd(gi, ui, di, n, dgo, duo, limit);
}
void CpuBackend::geglu_fwd(ConstTensor g, ConstTensor u, int64_t n, Tensor out) {
  extents::elementwise("geglu_fwd", n, {g, u, out});
  In gi(g, n), ui(u, n);
  Out o(out, n, false);
  cpu::geglu_fwd(gi, ui, n, o);
}
void CpuBackend::geglu_bwd(ConstTensor g, ConstTensor u, ConstTensor d, int64_t n, Tensor dg, Tensor du) {
  extents::elementwise("geglu_bwd", n, {g, u, d, dg, du});
  In gi(g, n), ui(u, n), di(d, n);
  Out dgo(dg, n, false), duo(du, n, false);
  cpu::geglu_bwd(gi, ui, di, n, dgo, duo);
}
void CpuBackend::moe_route(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                           int32_t* route_experts, float* route_weights, int32_t* route_rows, int32_t* offsets) {
  cpu::moe_route(extents::fp32_operand("moe_route", logits, rows * experts), rows, experts, k, renormalize,
                 route_experts, route_weights, route_rows, offsets);
}
void CpuBackend::moe_route_bwd(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                               const int32_t* route_experts, const float* route_weights, const float* d_weights,
                               Tensor d_logits) {
  cpu::moe_route_bwd(extents::fp32_operand("moe_route_bwd", logits, rows * experts), rows, experts, k, renormalize,
                     route_experts, route_weights, d_weights,
                     extents::fp32_operand("moe_route_bwd", d_logits, rows * experts));
}
void CpuBackend::moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k,
                                    const int32_t* route_experts, double* counts, double* prob_sums) {
  cpu::moe_aux_statistics(logits, rows, experts, k, route_experts, counts, prob_sums);
}
void CpuBackend::moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                              float* d_logits) {
  cpu::moe_aux_grad(logits, rows, experts, shares, scale, d_logits);
}
void CpuBackend::moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                            Tensor packed) {
  extents::elementwise("moe_gather", rows * dim, {x});
  extents::elementwise("moe_gather", rows * k * dim, {packed});
  In xi(x, rows * dim);
  Out po(packed, rows * k * dim, false);
  cpu::moe_gather(xi, rows, dim, k, route_rows, po);
}
void CpuBackend::moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                             const float* weights, Tensor y, bool accumulate) {
  extents::elementwise("moe_combine", rows * k * dim, {packed});
  extents::elementwise("moe_combine", rows * dim, {y});
  In pi(packed, rows * k * dim);
  Out yo(y, rows * dim, accumulate);
  cpu::moe_combine(pi, rows, dim, k, route_rows, weights, yo, accumulate);
}
void CpuBackend::moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                                 const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights) {
  extents::elementwise("moe_combine_bwd", rows * dim, {dy});
  extents::elementwise("moe_combine_bwd", rows * k * dim, {packed, d_packed});
  In gi(dy, rows * dim), pi(packed, rows * k * dim);
  Out dpo(d_packed, rows * k * dim, false);
  cpu::moe_combine_bwd(gi, pi, rows, dim, k, route_rows, weights, dpo, d_weights);
}
void CpuBackend::add(Tensor y, ConstTensor x, int64_t n) {
  extents::elementwise("add", n, {y, x});
  In xi(x, n);
  Out yo(y, n, true);
  float* d = yo;
  const float* s = xi;
  for (int64_t i = 0; i < n; ++i) d[i] += s[i];
}
void CpuBackend::copy(Tensor dst, ConstTensor src, int64_t n) {
  extents::elementwise("copy", n, {dst, src});
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data) std::memcpy(dst.data, src.data, static_cast<size_t>(n * dtype_bytes(dst.dtype)));
    return;
  }
  In s(src, n);
  Out d(dst, n, false);
  std::memcpy(static_cast<float*>(d), static_cast<const float*>(s), static_cast<size_t>(n) * 4);
}
namespace {
int64_t page_floats(const PagedAttention& a) { return 2 * a.page_tokens * a.kv_heads * a.head_dim; }
uint16_t* bf16_page(float* page) { return reinterpret_cast<uint16_t*>(page); }
const uint16_t* bf16_page(const float* page) { return reinterpret_cast<const uint16_t*>(page); }
}  // namespace

const PagedAttention& CpuBackend::fp32_pages(const PagedAttention& a, PagedAttention& converted) {
  const bool own16 = a.q.dtype != DType::f32 || a.k_own.dtype != DType::f32 || a.v_own.dtype != DType::f32;
  if ((a.kv_dtype == PageDtype::f32 || a.prefix_pages.empty()) && !own16) return a;
  converted = a;
  if (own16) {
    // bf16 activations: the chunk's q, k, v loaded to fp32 (exact) into the backend's scratch.
    const int64_t nq = a.rows * a.q_heads * a.head_dim, nk = a.rows * a.kv_heads * a.head_dim;
    own_scratch_.resize(static_cast<size_t>(nq + 2 * nk));
    float* q = own_scratch_.data();
    const ConstTensor src[3] = {a.q, a.k_own, a.v_own};
    float* dst[3] = {q, q + nq, q + nq + nk};
    const int64_t n[3] = {nq, nk, nk};
    for (int i = 0; i < 3; ++i) {
      if (src[i].dtype == DType::f32)
        std::memcpy(dst[i], src[i].data, static_cast<size_t>(n[i]) * 4);
      else
        bf16_to_f32(static_cast<const uint16_t*>(src[i].data), dst[i], n[i]);
    }
    converted.q = dst[0];
    converted.k_own = dst[1];
    converted.v_own = dst[2];
  }
  if (a.kv_dtype == PageDtype::f32 || a.prefix_pages.empty()) return converted;
  const int64_t pf = page_floats(a), U = static_cast<int64_t>(a.prefix_pages.size());
  if (static_cast<int64_t>(kv_scratch_.size()) < U * pf) kv_scratch_.resize(static_cast<size_t>(U * pf));
  converted.kv_dtype = PageDtype::f32;
  for (int64_t u = 0; u < U; ++u) {
    float* dst = kv_scratch_.data() + u * pf;
    bf16_to_f32(bf16_page(a.prefix_pages[static_cast<size_t>(u)]), dst, pf);
    converted.prefix_pages[static_cast<size_t>(u)] = dst;
  }
  return converted;
}

void CpuBackend::attention_fwd(const PagedAttention& a, Tensor o, float* lse) {
  extents::attention("attention_fwd", a, {a.q, o}, {a.k_own, a.v_own});
  PagedAttention converted;
  Out oo(o, a.rows * a.q_heads * a.head_dim, false);
  cpu::attention_fwd(fp32_pages(a, converted), oo, lse);
}

void CpuBackend::attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                                     float* lse) {
  In si(sinks, q_heads);
  Out oo(o, rows * q_heads * head_dim, true);
  cpu::attention_sinks_fwd(si, rows, q_heads, head_dim, oo, lse);
}

void CpuBackend::attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                                     const float* lse, ConstTensor dout, Tensor d_sinks) {
  In si(sinks, q_heads), oi(o, rows * q_heads * head_dim), di(dout, rows * q_heads * head_dim);
  Out ds(d_sinks, q_heads, true);
  cpu::attention_sinks_bwd(si, rows, q_heads, head_dim, oi, lse, di, ds);
}

void CpuBackend::attention_bwd(const PagedAttention& a, ConstTensor o_, const float* lse, ConstTensor dout_,
                               Tensor dq_, Tensor dk_, Tensor dv_, const std::vector<float*>& pages) {
  extents::attention("attention_bwd", a, {a.q, o_, dout_, dq_}, {a.k_own, a.v_own, dk_, dv_});
  PagedAttention converted;
  const PagedAttention& f = fp32_pages(a, converted);
  const int64_t nq = a.rows * a.q_heads * a.head_dim, nk = a.rows * a.kv_heads * a.head_dim;
  In o(o_, nq), dout(dout_, nq);
  Out dq(dq_, nq, false), dk(dk_, nk, false), dv(dv_, nk, false);
  if (a.grad_dtype == PageDtype::f32 || pages.empty()) {
    cpu::attention_bwd(f, o, lse, dout, dq, dk, dv, pages);
    return;
  }
  // bf16 gradient pages: this call's contribution in fp32 (zeroed scratch pages), then added into
  // the stored pages with one rounding per element.
  const int64_t pf = page_floats(a), U = static_cast<int64_t>(pages.size());
  if (static_cast<int64_t>(grad_scratch_.size()) < U * pf) grad_scratch_.resize(static_cast<size_t>(U * pf));
  std::fill_n(grad_scratch_.data(), U * pf, 0.0f);
  std::vector<float*> scratch(static_cast<size_t>(U));
  for (int64_t u = 0; u < U; ++u) scratch[static_cast<size_t>(u)] = grad_scratch_.data() + u * pf;
  cpu::attention_bwd(f, o, lse, dout, dq, dk, dv, scratch);
  for (size_t u = 0; u < pages.size(); ++u) bf16_add_f32(bf16_page(pages[u]), scratch[u], pf);
}

// Page layout: [K rows p x kv_dim][V rows p x kv_dim] elements of the page dtype; a ragged last
// page fills its first rows.
void CpuBackend::write_kv_pages(ConstTensor k_, ConstTensor v_, int64_t rows, int64_t kv_dim, int64_t p,
                                const std::vector<float*>& pages, PageDtype dtype) {
  In ki(k_, rows * kv_dim), vi(v_, rows * kv_dim);
  const float* k = ki;
  const float* v = vi;
  for (size_t j = 0; j < pages.size(); ++j) {
    const int64_t r0 = static_cast<int64_t>(j) * p, n = std::min(rows - r0, p);
    OOMB_ASSERT(n > 0);
    if (dtype == PageDtype::bf16) {
      f32_to_bf16(k + r0 * kv_dim, bf16_page(pages[j]), n * kv_dim);
      f32_to_bf16(v + r0 * kv_dim, bf16_page(pages[j]) + p * kv_dim, n * kv_dim);
    } else {
      std::memcpy(pages[j], k + r0 * kv_dim, static_cast<size_t>(n * kv_dim) * 4);
      std::memcpy(pages[j] + p * kv_dim, v + r0 * kv_dim, static_cast<size_t>(n * kv_dim) * 4);
    }
  }
}

void CpuBackend::add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim, int64_t p,
                                     Tensor dk_, Tensor dv_, PageDtype dtype) {
  Out dko(dk_, rows * kv_dim, true), dvo(dv_, rows * kv_dim, true);
  float* dk = dko;
  float* dv = dvo;
  for (size_t j = 0; j < pages.size(); ++j) {
    const int64_t r0 = static_cast<int64_t>(j) * p, n = std::min(rows - r0, p);
    if (dtype == PageDtype::bf16) {
      f32_add_bf16(dk + r0 * kv_dim, bf16_page(pages[j]), n * kv_dim);
      f32_add_bf16(dv + r0 * kv_dim, bf16_page(pages[j]) + p * kv_dim, n * kv_dim);
    } else {
      for (int64_t i = 0; i < n * kv_dim; ++i) dk[r0 * kv_dim + i] += pages[j][i];
      for (int64_t i = 0; i < n * kv_dim; ++i) dv[r0 * kv_dim + i] += pages[j][p * kv_dim + i];
    }
  }
}

void CpuBackend::page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t p, Tensor out) {
  In ki(k, rows * kv_dim);
  Out o(out, (rows + p - 1) / p * kv_dim, false);
  cpu::page_summaries(ki, rows, kv_dim, p, o);
}
std::vector<std::vector<int32_t>> CpuBackend::select_pages(const SelectionArgs& a) {
  In q(a.q, a.rows * a.q_heads * a.head_dim), sum(a.summaries, a.prefix_pages * a.kv_heads * a.head_dim);
  SelectionArgs f = a;
  f.q = static_cast<const float*>(q);
  f.summaries = static_cast<const float*>(sum);
  return cpu::select_pages(f);
}
namespace {
// The loss ops' shared shape: fp32 logits copied into the gradient's fp32 view, f computes the
// gradient (and loss) in place there, rounded once on store (grad may be the logits' own storage:
// In has read them before Out writes back).
template <class F>
auto in_place_on_logits(ConstTensor logits, int64_t rows, int64_t vocab, Tensor grad, F&& f) {
  extents::cross_entropy(logits, rows, vocab, grad);
  const int64_t n = rows * vocab;
  In l(logits, n);
  Out g(grad, n, false);
  if (static_cast<float*>(g) != static_cast<const float*>(l))
    std::memcpy(static_cast<float*>(g), static_cast<const float*>(l), static_cast<size_t>(n) * 4);
  return f(static_cast<float*>(g));
}
}  // namespace

double CpuBackend::cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float s,
                                 Tensor grad) {
  // The loss and the gradient in fp32 from the exact logits.
  return in_place_on_logits(logits, rows, vocab, grad,
                            [&](float* g) { return cpu::cross_entropy(g, rows, vocab, targets, s); });
}
void CpuBackend::cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                           float* stats) {
  extents::elementwise("cross_entropy_shard_stats", rows * vocab, {logits});
  In l(logits, rows * vocab);
  cpu::cross_entropy_shard_stats(l, rows, vocab, targets, stats);
}
void CpuBackend::cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                          const float* max_sum, float s, Tensor grad) {
  in_place_on_logits(logits, rows, vocab, grad,
                     [&](float* g) { cpu::cross_entropy_shard_grad(g, rows, vocab, targets, max_sum, s); });
}
void CpuBackend::scale(Tensor x, int64_t n, float s) {
  Out xo(x, n, true);
  float* d = xo;
  for (int64_t i = 0; i < n; ++i) d[i] *= s;
}
void CpuBackend::adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* mask,
                       int64_t n, float lr, float b1, float b2, float eps, float wd, int64_t step, float grad_scale) {
  In g(grad, n);
  if (!master) {
    Out p(param, n, true);
    cpu::adamw(p, g, m, v, mask, n, lr, b1, b2, eps, wd, step, grad_scale);
    return;
  }
  cpu::adamw(master, g, m, v, mask, n, lr, b1, b2, eps, wd, step, grad_scale);
  copy(param, master, n);  // the working weights refreshed from the fp32 master, rounded once
}

}  // namespace oomb::executor
