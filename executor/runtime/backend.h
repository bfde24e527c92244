#pragma once
// The one small interface between the backend-independent runtime (page pools, offload engine,
// sparse selector, chunk-recurrent driver) and a compute backend (cpu: fp32 + Eigen; cuda later).
//
// A backend owns two memory tiers (device, host), two copy streams (h2d, d2h) whose copies are
// ordered by events, and the model ops. All op pointers are device-tier pointers. Weights,
// parameter gradients, activations, page summaries and loss tiles are passed as typed views
// (Tensor / ConstTensor: pointer + storage dtype, fp32 or bf16) and stored in the plan's dtypes;
// every op loads its inputs to fp32, computes in fp32 and rounds once on store (bf16: round to
// nearest even, runtime/bf16.h), "acc" outputs load, add in fp32 and round. Per-row statistics
// (RMSNorm rstd, attention log-sum-exp) stay fp32 (`float*`). KV pages and KV-gradient pages are
// stored in a PageDtype (fp32 or bf16) that every op touching them is told.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"

#include "models/rope.h"
#include "models/layer_attention.h"
#include "step/phase.h"
#include "step/target.h"

namespace oomb::step::cuda_scratch {
struct LinearCall;  // step/cuda_scratch.h
}

namespace oomb::executor {

using step::Tier;  // device, host (step/phase.h)
using step::to_string;
enum class CopyDir { h2d, d2h };
const char* to_string(CopyDir d);

// Storage type of KV pages and KV-gradient pages (config kv_dtype / kv_grad_dtype). Page pointers
// stay `float*` / `const float*` at this interface whatever the dtype; they point at storage of the
// stated dtype, in the page layout below:
//   f32:  IEEE binary32 elements.
//   bf16: uint16_t elements, each the upper half of an IEEE binary32 (sign, 8 exponent bits, 7
//         mantissa bits); stores round to nearest, ties to even (NaN stays NaN, values beyond the
//         largest finite bf16 become inf); loads are exact (executor/runtime/bf16.h).
// A page of p tokens holds p * 2 * kv_dim elements: page_dtype_bytes(d) * p * 2 * kv_dim bytes.
enum class DType : uint8_t { f32, bf16 };
using PageDtype = DType;  // pages use the same two storage types
int64_t page_dtype_bytes(PageDtype d);  // 4 or 2
inline int64_t dtype_bytes(DType d) { return d == DType::bf16 ? 2 : 4; }
const char* to_string(PageDtype d);     // "fp32" or "bf16" (the config's names)
inline Dtype dtype_of(DType d) { return d == DType::bf16 ? Dtype::bf16 : Dtype::fp32; }
// The config's page dtype as the executor stores it (fp32, bf16); anything else (fp16, fp8) is
// refused with an oomb::Error naming `flag` (--kv-dtype, --kv-grad-dtype) and what the executor supports.
PageDtype page_dtype_of(Dtype d, const std::string& flag);
// The executor's storage dtype for weights, gradients, activations and loss tiles: fp32 or bf16;
// anything else is refused naming `flag`.
DType storage_dtype_of(Dtype d, const std::string& flag);

// A typed view of device-tier storage: elements of `dtype` (bf16: uint16 bit patterns, as pages)
// and, when it comes from a Buffer, how many elements it holds (`elements`, -1 = not known: a raw
// pointer). Every op checks the elements it touches against the views it is given (check_extent):
// an op that would touch more than its buffer holds fails, so an undersized buffer cannot pass
// silently. A plain float pointer converts implicitly to an fp32 view, so fp32 callers stay as they were.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t elements = -1;
  Tensor() = default;
  Tensor(float* p) : data(p) {}  // NOLINT: implicit fp32 view
  Tensor(std::nullptr_t) {}      // NOLINT
  Tensor(void* p, DType d, int64_t n = -1) : data(p), dtype(d), elements(n) {}
  explicit operator bool() const { return data != nullptr; }
  // The view `k` elements further on (what is left of it).
  Tensor at(int64_t k) const {
    return {data ? static_cast<char*>(data) + k * dtype_bytes(dtype) : nullptr, dtype, elements < 0 ? -1 : elements - k};
  }
  float* f32() const { return dtype == DType::f32 ? static_cast<float*>(data) : nullptr; }
};

struct ConstTensor {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t elements = -1;
  ConstTensor() = default;
  ConstTensor(const float* p) : data(p) {}  // NOLINT: implicit fp32 view
  ConstTensor(std::nullptr_t) {}            // NOLINT
  ConstTensor(const void* p, DType d, int64_t n = -1) : data(p), dtype(d), elements(n) {}
  ConstTensor(const Tensor& t) : data(t.data), dtype(t.dtype), elements(t.elements) {}  // NOLINT
  explicit operator bool() const { return data != nullptr; }
  ConstTensor at(int64_t k) const {
    return {data ? static_cast<const char*>(data) + k * dtype_bytes(dtype) : nullptr, dtype,
            elements < 0 ? -1 : elements - k};
  }
  const float* f32() const { return dtype == DType::f32 ? static_cast<const float*>(data) : nullptr; }
};

// The always-on extent check of the ops: `op` would touch n elements of `what` (a view of known
// size), and it holds fewer. Throws ExtentError naming the op, the operand and both counts.
class ExtentError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};
void extent_fail(const char* op, const char* what, int64_t n, int64_t held);
inline void check_extent(const char* op, const char* what, ConstTensor t, int64_t n) {
  if (t.data && t.elements >= 0 && n > t.elements) extent_fail(op, what, n, t.elements);
}

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
// [2][p][kv_heads * head_dim] elements of kv_dtype) followed by the chunk's own keys, causal
// inside the chunk.
struct PagedAttention {
  int64_t rows = 0;  // T (chunk tokens, may be a ragged last chunk)
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t page_tokens = 0;  // p: query pages and key pages
  ConstTensor q;      // [T, q_heads * head_dim], post-RoPE
  ConstTensor k_own;  // [T, kv_heads * head_dim], post-RoPE
  ConstTensor v_own;  // [T, kv_heads * head_dim]
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
  // A local layer (sliding window or chunked block; docs/model.md "Layer kinds and experts"): the
  // query at position qp attends the keys from models::first_key(local, window, qp) on. Chunk row r
  // is at position q_pos0 + r, row r of prefix page u at prefix_ids[u] * page_tokens + r (the
  // pages, ascending, cover every key a row attends). Global: no mask beyond the causal one, and
  // prefix_ids may be empty.
  models::LayerAttention local = models::LayerAttention::global;
  int64_t window = 0, q_pos0 = 0;
  std::vector<int64_t> prefix_ids;
};

// Page-level selection (ALGORITHM.md section 5, "published" and per-KV-head rules).
struct SelectionArgs {
  ConstTensor q;  // [T, q_heads * head_dim], post-RoPE
  int64_t rows = 0, q_heads = 0, kv_heads = 0, head_dim = 0, page_tokens = 0;
  ConstTensor summaries;  // [prefix_pages, kv_heads * head_dim]: per-page key means
  int64_t prefix_pages = 0;
  int64_t budget = 0;  // B, < prefix_pages (the caller handles <= B as dense)
  bool per_kv_head = false;
  // Tensor parallelism: the scores [query pages x groups x prefix pages] summed over the ranks
  // before the top-k, in place (the published rule sums over every KV head, which the ranks hold a
  // share of each); null: the scores are this process's. The pointer is where the backend computes
  // them: host memory on the CPU backend, device memory (stream-ordered) on the CUDA backend.
  std::function<void(double*, int64_t)> reduce_scores;
};

// A device buffer a backend allocates for itself (a GEMM workspace, an op scratch): a row of the
// buffer table under `name` and `category` (e.g. "gemm_workspace", "backend_scratch").
struct BackendBuffer {
  std::string name, category;
  int64_t bytes = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // What this backend allocates besides the runtime's buffers (step/buffers.h Target): the CPU
  // backend nothing on the device tier, the CUDA backend its declared workspace and op scratch.
  virtual step::Target target() const { return {}; }
  // The op scratch the run's table declares (its op_scratch row; backends without one ignore it):
  // from now on no op may need more. Called once at set-up, before anything runs.
  virtual void size_op_scratch(int64_t bytes) {}
  // The op scratch a GEMM-running call of the step will ask for on this backend, its GEMMs planned
  // as they will run (the CUDA backend: against cuBLASLt's heuristic); -1 = this backend has no op
  // scratch. Checked against the op_scratch row before the first step (Engine).
  virtual int64_t planned_op_scratch(const step::cuda_scratch::LinearCall& call) { return -1; }
  // The device buffers this backend holds for itself (none on the CPU backend, whose scratch is
  // host RAM of the emulator): the runtime accounts them as rows of its buffer table.
  virtual std::vector<BackendBuffer> device_buffers() const { return {}; }
  // The same on the host tier (the CUDA backend's pinned staging ring, read-back buffer and loss
  // slots).
  virtual std::vector<BackendBuffer> host_buffers() const { return {}; }
  // The loss slots a step uses (one per chunk): a backend that keeps them sizes them now, before
  // the first step (none grows inside one).
  virtual void size_loss_slots(int64_t slots) {}

  // ---- memory and copies
  virtual void* allocate(Tier tier, int64_t bytes) = 0;  // zero-filled
  // A buffer of a row of the run's buffer table (Buffer with a row): a backend that lays its
  // memory out by the table (the CUDA backend's device arena, step/allocator.h) places it in the
  // row's range; by default as allocate.
  virtual void* allocate_row(Tier tier, int64_t bytes, const std::string& row) {
    (void)row;
    return allocate(tier, bytes);
  }
  // Ops queued before the call may still be using p (a backend orders the range's reuse after
  // them: the CUDA backend in stream order, without a synchronisation); no copy_async in flight may
  // touch it.
  virtual void deallocate(Tier tier, void* p, int64_t bytes) = 0;
  virtual void fill_zero(void* p, int64_t bytes) = 0;                // device or host tier
  virtual void upload(void* device_dst, const void* src, int64_t bytes) = 0;    // synchronous
  virtual void download(void* dst, const void* device_src, int64_t bytes) = 0;  // synchronous
  virtual EventPtr copy_async(CopyRequest req) = 0;
  virtual void wait(const EventPtr& e) = 0;

  // ---- model ops (device pointers, typed views; "acc" outputs accumulate, others overwrite)
  // A negative id (the CPU backend, under tensor parallelism: another rank's token) looks up a zero
  // row and adds no gradient.
  virtual void embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out) = 0;
  virtual void embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden,
                             Tensor dtable_acc) = 0;
  virtual void rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y,
                           float* rstd) = 0;
  virtual void rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows,
                           int64_t dim, Tensor dx_acc, Tensor dw_acc) = 0;
  // y = x W^T (+ b): x [rows, in], W [out, in], b [out] or null.
  virtual void linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out,
                          Tensor y) = 0;
  // dx (+)= dy W ; dW += dy^T x ; db += colsum(dy) (db may be null).
  virtual void linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy,
                          Tensor dx, bool accumulate_dx, Tensor dw_acc, Tensor db_acc) = 0;
  // A LoRA adapter on a projection y = x W^T (Hugging Face PEFT: y += scale * (x A^T) B^T, scale =
  // lora_alpha / r): x [rows, in], A [rank, in], B [out, rank] (fp32 or the storage dtype),
  // u [rows, rank] = scale * x A^T (overwritten; kept for the backward), then y += u B^T.
  virtual void lora_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
                        int64_t out, float scale, Tensor u, Tensor y) = 0;
  // Its backward, given u from lora_fwd and dy [rows, out]: dB += dy^T u; du = scale * dy B
  // (overwritten, [rows, rank]); dA += du^T x; dx += du A (dx accumulates: the base projection's
  // linear_bwd wrote its part first). dx may be null (no input gradient wanted).
  virtual void lora_bwd(ConstTensor x, ConstTensor u, int64_t rows, int64_t in, ConstTensor a, ConstTensor b,
                        int64_t rank, int64_t out, float scale, ConstTensor dy, Tensor du, Tensor dx_acc,
                        Tensor da_acc, Tensor db_acc) = 0;
  // In place, rotate-half convention, absolute positions pos0 .. pos0 + rows - 1.
  virtual void rope_fwd(Tensor x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope) = 0;
  virtual void rope_bwd(Tensor dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope) = 0;
  // out = silu(gate) * up; with limit > 0 gpt-oss's variant (models::Mlp::gpt_oss): gate clamped
  // above at limit, up to [-limit, limit], out = gate sigmoid(1.702 gate) (up + 1), and the clamps'
  // gradients zero outside their ranges (PyTorch's clamp: bounds included).
  virtual void swiglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out, float limit = 0) = 0;
  virtual void swiglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate,
                          Tensor dup, float limit = 0) = 0;
  // out = gelu_tanh(gate) * up (GeGLU, models::Mlp::geglu_tanh: Gemma's MLP, PyTorch's
  // gelu(approximate="tanh"): x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), and its backward.
  virtual void geglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out) = 0;
  virtual void geglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup) = 0;
  virtual void add(Tensor y, ConstTensor x, int64_t n) = 0;  // y += x
  // Mixture of experts, packed dispatch (docs/model.md "Layer kinds and experts"): the rows x k
  // (token, expert) pairs sorted by expert, then by token, so each expert's rows are one block.
  // moe_route: from the router's logits [rows, experts] (fp32), each token's k largest (descending;
  // equal logits by ascending expert) in route_experts [rows, k], their weights in route_weights
  // [rows, k] (renormalize: the softmax of the k selected logits, as Mixtral, gpt-oss and Qwen3-MoE
  // with norm_topk_prob; else the softmax over every expert read at the selected), each pair's
  // packed row in route_rows [rows, k] and each expert's first row in offsets [experts + 1] (int32).
  // The router's logits, weights and their gradients are fp32; the hidden-wide rows (gather, combine)
  // fp32 or bf16 (fp32 arithmetic, rounded once).
  virtual void moe_route(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                         int32_t* route_experts, float* route_weights, int32_t* route_rows, int32_t* offsets) = 0;
  // d_logits [rows, experts] (overwritten) from the weights' gradients, the selection held.
  virtual void moe_route_bwd(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                             const int32_t* route_experts, const float* route_weights, const float* d_weights,
                             Tensor d_logits) = 0;
  // The load-balancing loss (Config::router_aux_loss_coef), stage 1's statistics, accumulated:
  // counts[e] += the routed copies of route_experts [rows, k] sent to expert e, prob_sums[e] +=
  // sum_t softmax(logits_t)_e (fp32 logits [rows, experts]; sums in double, in row order).
  virtual void moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k,
                                  const int32_t* route_experts, double* counts, double* prob_sums) = 0;
  // Its gradient into the router's logits, accumulated: d_logits[t, e] += scale p_te (shares_e -
  // sum_e' p_te' shares_e'), p_t = softmax(logits_t), shares [experts] fp32.
  virtual void moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                            float* d_logits) = 0;
  // packed[route_rows[t k + j]] = x[t] (rows x k rows of dim).
  virtual void moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                          Tensor packed) = 0;
  // y[t] (+)= sum_j w[t k + j] packed[route_rows[t k + j]], in j order (weights null: 1, the
  // gather's backward).
  virtual void moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                           const float* weights, Tensor y, bool accumulate) = 0;
  // The combine's backward: d_packed[route_rows[t k + j]] = w[t k + j] dy[t] (overwritten) and
  // d_weights[t k + j] = dy[t] . packed[route_rows[t k + j]].
  virtual void moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                               const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights) = 0;
  // Attention sinks (gpt-oss; docs/model.md "Layer kinds and experts"): one learned logit s_h per q
  // head joins every row's softmax and has no value. After attention_fwd, with its o and lse:
  // lse' = log(exp(lse) + exp(s_h)), o *= exp(lse - lse'), lse = lse' (so attention_bwd, reading
  // lse' and the scaled o, gives the gradients of the keys, values and queries with the sink in).
  virtual void attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                                   float* lse) = 0;
  // The sinks' gradient, accumulated: d_sinks[h] += -sum_t exp(s_h - lse'[t, h]) (dout[t, h] . o[t, h])
  // (o and lse' of attention_sinks_fwd).
  virtual void attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                                   const float* lse, ConstTensor dout, Tensor d_sinks) = 0;
  // dst = src, converting between storage dtypes when they differ (the loss's fp32 upcast).
  virtual void copy(Tensor dst, ConstTensor src, int64_t n) = 0;
  // Causal paged attention: o [T, q_heads * head_dim], lse [T, q_heads] (log-sum-exp of scaled scores).
  virtual void attention_fwd(const PagedAttention& a, Tensor o, float* lse) = 0;
  // dq, dk_own, dv_own are overwritten (own contributions only); the gradient pages of the prefix
  // (same layout and order as a.prefix_pages, storage a.grad_dtype) are accumulated into.
  virtual void attention_bwd(const PagedAttention& a, ConstTensor o, const float* lse, ConstTensor dout, Tensor dq,
                             Tensor dk_own, Tensor dv_own, const std::vector<float*>& prefix_grad_pages) = 0;
  // Own K/V rows -> pages stored as `dtype` (page j gets rows [j p, min(T, (j+1) p)); bf16:
  // rounded to nearest even).
  virtual void write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                              const std::vector<float*>& pages, PageDtype dtype) = 0;
  // dk += dK rows of the pages, dv += dV rows (the accumulated gradient of the chunk's own K/V); the
  // gradient pages are stored as `dtype`.
  virtual void add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim,
                                   int64_t page_tokens, Tensor dk, Tensor dv, PageDtype dtype) = 0;
  // Mean of each page's keys: out [ceil(rows / p), kv_dim]. Reads the chunk's K rows, never
  // pages, so the summaries do not depend on the page dtype.
  virtual void page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out) = 0;
  // Selected earlier page ids, ascending, per query page (x per KV head when per_kv_head):
  // result[j * groups + g].
  virtual std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) = 0;
  // Cross-entropy over rows with targets (-1 = no target): returns the sum of token losses and
  // writes d(scale * sum)/d(logits) to `grad` (which may be `logits` itself: in place).
  virtual double cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                               Tensor grad) = 0;
  // The same without returning the loss: it is added to loss slot `slot` (the Engine: one per
  // chunk) where the backend keeps it (the CUDA backend: written by the device), and take_losses(n)
  // returns slots [0, n) and clears them: one host synchronisation per step instead of one per
  // logits tile. Default: the slots on the host, filled through cross_entropy (the CPU backend).
  virtual void cross_entropy_acc(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                 float scale, Tensor grad, int64_t slot);
  virtual std::vector<double> take_losses(int64_t n);
  // Tensor parallelism's vocabulary-parallel loss: this rank holds `vocab` columns of the logits
  // and targets index them (-2: the row's target is another rank's column; -1: no target). stats
  // [rows][3] (device): per row its max, sum of exp(x - max) and the target's logit (0 when not
  // here). Then, given the row's max and sum over every rank (max_sum [rows][2], device), grad =
  // scale * (softmax - one-hot) over this rank's columns (rows with -1: 0; grad may be logits).
  // The default refuses them (a backend without a vocabulary-parallel loss); the CPU and CUDA
  // backends implement them.
  virtual void cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                         float* stats);
  // Between the two (after the ranks' statistics met in one all-reduce): stats [ranks][rows][3]
  // (device) holds every rank's; each row's max over the ranks and sum of exponentials rescaled to
  // it become max_sum [rows][2], written over the start of stats (rows with target -1: 0 and 1),
  // and the tile's loss, the sum over rows with a target of log(sum) - (target logit - max) in
  // double, is added to loss slot `slot` (take_losses). targets: device, as above. The default
  // combines on the host (download, upload: the CPU backend, whose "device" is host memory); the
  // CUDA backend on the device, without a host synchronisation.
  virtual void cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                           int64_t slot);
  virtual void cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                        const float* max_sum, float scale, Tensor grad);
  // Host synchronisations so far: the times the host waited for the device's work (read-backs,
  // stream drains). The CUDA backend counts its own; 0 on the CPU backend, which computes on the
  // host. The Engine reports them per step (Measured::host_syncs).
  virtual int64_t host_syncs() const { return 0; }
  virtual void scale(Tensor x, int64_t n, float s) = 0;
  // AdamW (PyTorch's torch.optim.AdamW in fp32: bias-corrected, decoupled weight decay applied where
  // decay_mask != 0) of grad x grad_scale (the mean over accumulated steps and replicas, taken as the
  // gradient is read: no pass of its own). master == null: `param` is updated in place (fp32).
  // Otherwise the fp32 master weights are updated and `param` (the working weights, e.g. bf16) is
  // refreshed from them, rounded once.
  virtual void adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* decay_mask,
                     int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                     float grad_scale) = 0;

 private:
  std::vector<double> loss_slots_;  // the default cross_entropy_acc's
};

// The elements each op touches of its typed views (both backends check them before they run):
// throws ExtentError when a view of known size holds fewer.
namespace extents {
void embedding(const char* op, int64_t rows, int64_t hidden, ConstTensor rows_view);
void rmsnorm(const char* op, ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, ConstTensor y);
void linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out, ConstTensor y);
void linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy, ConstTensor dx,
                ConstTensor dw, ConstTensor db);
void lora(const char* op, ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
          int64_t out, ConstTensor u, ConstTensor y);
void elementwise(const char* op, int64_t n, std::initializer_list<ConstTensor> views);
// An fp32-only op's operand (the MoE routing's logits): its data, after the extent check of n
// elements; a bf16 view is refused naming the op.
const float* fp32_operand(const char* op, ConstTensor t, int64_t n);
float* fp32_operand(const char* op, Tensor t, int64_t n);
void attention(const char* op, const PagedAttention& a, std::initializer_list<ConstTensor> q_rows,
               std::initializer_list<ConstTensor> kv_rows);
void cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, ConstTensor grad);
}  // namespace extents

// Buffer owned by RAII; its bytes are recorded in a MemoryAccount under the row `row` when given
// (before the allocation: an account bound to the step's table refuses what no row holds).
// `dtype` is the storage type its typed views carry (t(), ct()).
class MemoryAccount;
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& b, Tier tier, int64_t bytes, MemoryAccount* account = nullptr, std::string row = {},
         DType dtype = DType::f32);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  void* data() const { return ptr_; }
  Tensor t() const { return {ptr_, dtype_, bytes_ / dtype_bytes(dtype_)}; }
  ConstTensor ct() const { return {ptr_, dtype_, bytes_ / dtype_bytes(dtype_)}; }
  DType dtype() const { return dtype_; }
  int64_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }

 private:
  void reset();
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
  Tier tier_ = Tier::device;
  DType dtype_ = DType::f32;
  MemoryAccount* account_ = nullptr;
  std::string row_;
};

}  // namespace oomb::executor
