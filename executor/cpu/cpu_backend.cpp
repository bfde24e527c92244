#include "executor/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"
#include "executor/cpu/ops.h"
#include "executor/cpu/threads.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor {

namespace {
constexpr size_t kAlign = 64;
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions options)
    : threads_(options.threads > 0 ? options.threads : cpu::available_cpus()) {
  cpu::set_threads(threads_);
  for (auto& s : streams_) s.worker = std::thread([this, &s] { run_stream(s); });
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
    for (const auto& e : job.req.after) e->wait();
    const int64_t t0 = now_ns();
    for (const auto& r : job.req.regions) std::memcpy(r.dst, r.src, static_cast<size_t>(r.bytes));
    const int64_t t1 = now_ns();
    if (job.req.on_done) job.req.on_done(t0, t1);
    job.done->signal();
  }
}

void* CpuBackend::allocate(Tier, int64_t bytes) {
  const size_t n = (static_cast<size_t>(bytes) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, n);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, n);
  return p;
}

void CpuBackend::deallocate(Tier, void* p, int64_t) { std::free(p); }
void CpuBackend::fill_zero(void* p, int64_t bytes) { std::memset(p, 0, static_cast<size_t>(bytes)); }
void CpuBackend::upload(void* d, const void* s, int64_t bytes) { std::memcpy(d, s, static_cast<size_t>(bytes)); }
void CpuBackend::download(void* d, const void* s, int64_t bytes) { std::memcpy(d, s, static_cast<size_t>(bytes)); }

EventPtr CpuBackend::copy_async(CopyRequest req) {
  auto done = std::make_shared<Event>();
  Stream& s = streams_[req.dir == CopyDir::h2d ? 0 : 1];
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queue.push_back(Job{std::move(req), done});
  }
  s.cv.notify_one();
  return done;
}

void CpuBackend::wait(const EventPtr& e) {
  if (e) e->wait();
}

void CpuBackend::embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out) {
  cpu::embedding_fwd(ids, rows, table, hidden, out);
}
void CpuBackend::embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dt) {
  cpu::embedding_bwd(ids, rows, dout, hidden, dt);
}
void CpuBackend::rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                             float* rstd) {
  cpu::rmsnorm_fwd(x, w, rows, dim, eps, y, rstd);
}
void CpuBackend::rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                             int64_t dim, float* dx, float* dw) {
  cpu::rmsnorm_bwd(x, w, rstd, dy, rows, dim, dx, dw);
}
void CpuBackend::linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out,
                            float* y) {
  cpu::linear_fwd(x, rows, in, w, b, out, y);
}
void CpuBackend::linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy,
                            float* dx, bool acc, float* dw, float* db) {
  cpu::linear_bwd(x, rows, in, w, out, dy, dx, acc, dw, db);
}
void CpuBackend::rope_fwd(float* x, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, double theta) {
  cpu::rope_fwd(x, rows, heads, hd, pos0, theta);
}
void CpuBackend::rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, double theta) {
  cpu::rope_bwd(dx, rows, heads, hd, pos0, theta);
}
void CpuBackend::swiglu_fwd(const float* g, const float* u, int64_t n, float* out) { cpu::swiglu_fwd(g, u, n, out); }
void CpuBackend::swiglu_bwd(const float* g, const float* u, const float* d, int64_t n, float* dg, float* du) {
  cpu::swiglu_bwd(g, u, d, n, dg, du);
}
void CpuBackend::add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
void CpuBackend::copy(float* dst, const float* src, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
namespace {
int64_t page_floats(const PagedAttention& a) { return 2 * a.page_tokens * a.kv_heads * a.head_dim; }
uint16_t* bf16_page(float* page) { return reinterpret_cast<uint16_t*>(page); }
const uint16_t* bf16_page(const float* page) { return reinterpret_cast<const uint16_t*>(page); }
}  // namespace

const PagedAttention& CpuBackend::fp32_pages(const PagedAttention& a, PagedAttention& converted) {
  if (a.kv_dtype == PageDtype::f32 || a.prefix_pages.empty()) return a;
  const int64_t pf = page_floats(a), U = static_cast<int64_t>(a.prefix_pages.size());
  if (static_cast<int64_t>(kv_scratch_.size()) < U * pf) kv_scratch_.resize(static_cast<size_t>(U * pf));
  converted = a;
  converted.kv_dtype = PageDtype::f32;
  for (int64_t u = 0; u < U; ++u) {
    float* dst = kv_scratch_.data() + u * pf;
    bf16_to_f32(bf16_page(a.prefix_pages[static_cast<size_t>(u)]), dst, pf);
    converted.prefix_pages[static_cast<size_t>(u)] = dst;
  }
  return converted;
}

void CpuBackend::attention_fwd(const PagedAttention& a, float* o, float* lse) {
  PagedAttention converted;
  cpu::attention_fwd(fp32_pages(a, converted), o, lse);
}

void CpuBackend::attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout,
                               float* dq, float* dk, float* dv, const std::vector<float*>& pages) {
  PagedAttention converted;
  const PagedAttention& f = fp32_pages(a, converted);
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
void CpuBackend::write_kv_pages(const float* k, const float* v, int64_t rows, int64_t kv_dim, int64_t p,
                                const std::vector<float*>& pages, PageDtype dtype) {
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
                                     float* dk, float* dv, PageDtype dtype) {
  for (size_t j = 0; j < pages.size(); ++j) {
    const int64_t r0 = static_cast<int64_t>(j) * p, n = std::min(rows - r0, p);
    if (dtype == PageDtype::bf16) {
      f32_add_bf16(dk + r0 * kv_dim, bf16_page(pages[j]), n * kv_dim);
      f32_add_bf16(dv + r0 * kv_dim, bf16_page(pages[j]) + p * kv_dim, n * kv_dim);
    } else {
      add(dk + r0 * kv_dim, pages[j], n * kv_dim);
      add(dv + r0 * kv_dim, pages[j] + p * kv_dim, n * kv_dim);
    }
  }
}

void CpuBackend::page_summaries(const float* k, int64_t rows, int64_t kv_dim, int64_t p, float* out) {
  cpu::page_summaries(k, rows, kv_dim, p, out);
}
std::vector<std::vector<int32_t>> CpuBackend::select_pages(const SelectionArgs& a) { return cpu::select_pages(a); }
double CpuBackend::cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float s) {
  return cpu::cross_entropy(logits, rows, vocab, targets, s);
}
void CpuBackend::scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void CpuBackend::adamw(float* param, const float* grad, float* m, float* v, const uint8_t* mask, int64_t n, float lr,
                       float b1, float b2, float eps, float wd, int64_t step) {
  cpu::adamw(param, grad, m, v, mask, n, lr, b1, b2, eps, wd, step);
}

}  // namespace oomb::executor
