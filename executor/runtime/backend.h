#pragma once
// The one small interface between the backend-independent runtime (page pools, offload engine,
// sparse selector, chunk-recurrent driver) and a compute backend (cpu: fp32 + Eigen; cuda later).
//
// A backend owns two memory tiers (device, host), two copy streams (h2d, d2h) whose copies are
// ordered by events, and the model ops. All op pointers are device-tier pointers; activations are
// row-major fp32 matrices [rows, cols] (the CUDA backend will keep fp32 at this interface for
// accumulators and define its own storage types behind it). KV pages and KV-gradient pages are the
// exception: they are stored in a PageDtype (fp32 or bf16) that every op touching them is told.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace oomb::executor {

enum class Tier { device, host };
enum class CopyDir { h2d, d2h };
const char* to_string(Tier t);
const char* to_string(CopyDir d);

// Storage type of KV pages and KV-gradient pages (config kv_dtype / kv_grad_dtype). Page pointers
// stay `float*` / `const float*` at this interface whatever the dtype; they point at storage of the
// stated dtype, in the page layout below:
//   f32:  IEEE binary32 elements.
//   bf16: uint16_t elements, each the upper half of an IEEE binary32 (sign, 8 exponent bits, 7
//         mantissa bits); stores round to nearest, ties to even (NaN stays NaN, values beyond the
//         largest finite bf16 become inf); loads are exact (executor/runtime/bf16.h).
// A page of p tokens holds p * 2 * kv_dim elements: page_dtype_bytes(d) * p * 2 * kv_dim bytes.
enum class PageDtype { f32, bf16 };
int64_t page_dtype_bytes(PageDtype d);  // 4 or 2
const char* to_string(PageDtype d);     // "fp32" or "bf16" (the config's names)
// The config's name of a page dtype ("fp32", "bf16"); anything else (fp16, fp8, ...) is refused
// with an oomb::Error naming `flag` (--kv-dtype, --kv-grad-dtype) and what the executor supports.
PageDtype page_dtype_from_string(const std::string& name, const std::string& flag);

// Completion of an asynchronous copy. Waiting blocks on a condition variable (never polls).
class Event {
 public:
  void signal();
  void wait();
  bool done();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};
using EventPtr = std::shared_ptr<Event>;

struct CopyRegion {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t bytes = 0;
};

// One batched copy on a stream: starts after every event in `after` completed, signals the event
// it returns when all regions are copied, then calls on_done(start_ns, end_ns) (steady clock).
struct CopyRequest {
  CopyDir dir = CopyDir::h2d;
  std::vector<CopyRegion> regions;
  std::vector<EventPtr> after;
  std::function<void(int64_t start_ns, int64_t end_ns)> on_done;
};

// Paged attention of one chunk (ALGORITHM.md sections 2 and 5). Queries are the chunk's T rows;
// keys are the union of attended earlier pages (each a full page of p tokens: K rows then V rows,
// [2][p][kv_heads * head_dim] elements of kv_dtype) followed by the chunk's own keys (fp32), causal
// inside the chunk.
struct PagedAttention {
  int64_t rows = 0;  // T (chunk tokens, may be a ragged last chunk)
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t page_tokens = 0;  // p: query pages and key pages
  const float* q = nullptr;      // [T, q_heads * head_dim], post-RoPE
  const float* k_own = nullptr;  // [T, kv_heads * head_dim], post-RoPE
  const float* v_own = nullptr;  // [T, kv_heads * head_dim]
  // U earlier KV pages (union of selections), page order. Storage of kv_dtype (bf16: uint16 bit
  // patterns behind the float pointer, see PageDtype).
  std::vector<const float*> prefix_pages;
  PageDtype kv_dtype = PageDtype::f32;
  // Storage of the prefix gradient pages attention_bwd accumulates into (same layout as the KV
  // pages; bf16: each call adds its fp32 contribution to the stored value and rounds once).
  PageDtype grad_dtype = PageDtype::f32;
  // Which union slots each query page attends: select_groups == 0 means every query page attends
  // all U slots (dense). Otherwise select[j * select_groups + g] lists slots (ascending) for query
  // page j and KV-head group g (select_groups 1 = one set shared by all heads, kv_heads = per head).
  int64_t select_groups = 0;
  std::vector<std::vector<int32_t>> select;
};

// Page-level selection (ALGORITHM.md section 5, "published" and per-KV-head rules).
struct SelectionArgs {
  const float* q = nullptr;  // [T, q_heads * head_dim], post-RoPE
  int64_t rows = 0, q_heads = 0, kv_heads = 0, head_dim = 0, page_tokens = 0;
  const float* summaries = nullptr;  // [prefix_pages, kv_heads * head_dim]: per-page key means
  int64_t prefix_pages = 0;
  int64_t budget = 0;  // B, < prefix_pages (the caller handles <= B as dense)
  bool per_kv_head = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory and copies
  virtual void* allocate(Tier tier, int64_t bytes) = 0;  // zero-filled
  virtual void deallocate(Tier tier, void* p, int64_t bytes) = 0;
  virtual void fill_zero(void* p, int64_t bytes) = 0;                // device or host tier
  virtual void upload(void* device_dst, const void* src, int64_t bytes) = 0;    // synchronous
  virtual void download(void* dst, const void* device_src, int64_t bytes) = 0;  // synchronous
  virtual EventPtr copy_async(CopyRequest req) = 0;
  virtual void wait(const EventPtr& e) = 0;

  // ---- model ops (row-major fp32, device pointers; "acc" outputs accumulate, others overwrite)
  virtual void embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out) = 0;
  virtual void embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden,
                             float* dtable_acc) = 0;
  virtual void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                           float* rstd) = 0;
  virtual void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows,
                           int64_t dim, float* dx_acc, float* dw_acc) = 0;
  // y = x W^T (+ b): x [rows, in], W [out, in], b [out] or null.
  virtual void linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out,
                          float* y) = 0;
  // dx (+)= dy W ; dW += dy^T x ; db += colsum(dy) (db may be null).
  virtual void linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy,
                          float* dx, bool accumulate_dx, float* dw_acc, float* db_acc) = 0;
  // In place, rotate-half convention, absolute positions pos0 .. pos0 + rows - 1.
  virtual void rope_fwd(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) = 0;
  virtual void rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) = 0;
  virtual void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                          float* dup) = 0;
  virtual void add(float* y, const float* x, int64_t n) = 0;  // y += x
  virtual void copy(float* dst, const float* src, int64_t n) = 0;
  // Causal paged attention: o [T, q_heads * head_dim], lse [T, q_heads] (log-sum-exp of scaled scores).
  virtual void attention_fwd(const PagedAttention& a, float* o, float* lse) = 0;
  // dq, dk_own, dv_own are overwritten (own contributions only); the gradient pages of the prefix
  // (same layout and order as a.prefix_pages, storage a.grad_dtype) are accumulated into.
  virtual void attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout, float* dq,
                             float* dk_own, float* dv_own, const std::vector<float*>& prefix_grad_pages) = 0;
  // Own K/V rows (fp32) -> pages stored as `dtype` (page j gets rows [j p, min(T, (j+1) p)); bf16:
  // rounded to nearest even).
  virtual void write_kv_pages(const float* k, const float* v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                              const std::vector<float*>& pages, PageDtype dtype) = 0;
  // dk += dK rows of the pages, dv += dV rows (the accumulated gradient of the chunk's own K/V); the
  // gradient pages are stored as `dtype`.
  virtual void add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim,
                                   int64_t page_tokens, float* dk, float* dv, PageDtype dtype) = 0;
  // Mean of each page's keys: out [ceil(rows / p), kv_dim]. Reads the chunk's fp32 K rows, never
  // pages, so the summaries do not depend on the page dtype.
  virtual void page_summaries(const float* k, int64_t rows, int64_t kv_dim, int64_t page_tokens, float* out) = 0;
  // Selected earlier page ids, ascending, per query page (x per KV head when per_kv_head):
  // result[j * groups + g].
  virtual std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) = 0;
  // Cross-entropy over rows with targets (-1 = no target): returns the sum of token losses;
  // logits are replaced by d(scale * sum)/d(logits).
  virtual double cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale) = 0;
  virtual void scale(float* x, int64_t n, float s) = 0;
  // AdamW (PyTorch semantics, bias-corrected, decoupled weight decay applied where decay_mask != 0).
  virtual void adamw(float* param, const float* grad, float* m, float* v, const uint8_t* decay_mask, int64_t n,
                     float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step) = 0;
};

// Buffer owned by RAII; `accounted` bytes are reported to a MemoryAccount category when given.
class MemoryAccount;
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& b, Tier tier, int64_t bytes, MemoryAccount* account = nullptr, std::string category = {});
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }

 private:
  void reset();
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
  Tier tier_ = Tier::device;
  MemoryAccount* account_ = nullptr;
  std::string category_;
};

}  // namespace oomb::executor
