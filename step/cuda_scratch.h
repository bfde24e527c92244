#pragma once
// The CUDA backend's declared device needs (executor/cuda): what it allocates for itself besides
// the runtime's buffers, as a function of the shapes the chunk-recurrent step runs. These are the
// formulas: the buffer table sizes the `gemm_workspace` and `op_scratch` rows from them, and the
// CUDA backend carves its scratch with the same layouts and refuses a request beyond its row.
//
// Every op's scratch is one allocation reused in stream order: 256-byte aligned sub-arrays of
//   GEMMs (linear_fwd / linear_bwd): operand copies (an fp32 operand as bf16, rows padded to 8
//     elements, when fp32 operands run as bf16 GEMMs; a bf16 operand as fp32 when a GEMM falls back
//     to fp32 because cuBLASLt has no bf16 algorithm for its shape) and an fp32 output of each GEMM
//     whose output is stored as bf16 (when cuBLASLt cannot write it, or a bias follows); a bf16 bias
//     gradient's fp32 column sums. Declared: the paths cuBLASLt is expected to offer (bf16 where both
//     operands are bf16 or the precision is bf16; a bf16 output written through the scratch where
//     it accumulates or has a bias). The choice is cuBLASLt's, at run time: before the first step
//     the backend plans every call of step_linear_calls against its heuristic and the Engine refuses
//     by name one whose fp32 fallback outgrows the row (executor/runtime/driver.h check_op_scratch),
//     rather than declaring a fallback that may never run (an fp32 copy of the LM head's weight is
//     2.2 GB for Qwen2.5-7B).
//   lora_fwd / lora_bwd: two of those linear phases in a row (A's, then B's in the forward; B's,
//     then A's on du in the backward), the second reading what the first wrote, each carved from the
//     start of the scratch: an op's need is its larger phase's (lora_fwd_bytes / lora_bwd_bytes).
//     Under LoRA the frozen base's projections declare their backward without dW and bias gradient,
//     and the LM head without dW unless lora_train_embeddings.
//   attention_fwd / _bwd: the page pointer arrays and selection lists, fp32 copies of bf16 rows,
//     fp32 staging of bf16 outputs (and the backward's per-row D = rowsum(dO * O)).
//   select_pages: the summed queries, the softmax normalisers, the page scores (double, per query
//     page and selection group, over the whole prefix: grows with N), the selected ids, the
//     summaries staged on the device, fp32 copies of bf16 queries and summaries.
//   write_kv_pages / add_from_grad_pages: page pointer arrays; cross_entropy: per-row losses + sum;
//   rmsnorm_bwd: a bf16 weight gradient's fp32 column sums.
#include <cstdint>
#include <string>
#include <vector>

#include "models/specs.h"
#include "step/config.h"
#include "step/cuda_layout.h"
#include "step/geometry.h"

namespace oomb::step::cuda_scratch {

// y[rows, out] = x[rows, in] W[out, in]^T (+ b).
int64_t linear_fwd_bytes(int64_t rows, int64_t in, int64_t out, bool x16, bool w16, bool y16, bool has_bias,
                         bool bf16_gemm);
// dx (+)= dy W, dW += dy^T x, db += colsum(dy); has_* say which are computed.
int64_t linear_bwd_bytes(int64_t rows, int64_t in, int64_t out, bool x16, bool w16, bool dy16, bool has_dx, bool dx16,
                         bool dx_acc, bool has_dw, bool dw16, bool has_db, bool db16, bool bf16_gemm);
int64_t rmsnorm_bwd_bytes(int64_t dim, bool dw16);

// A LoRA adapter (backend.h lora_fwd / lora_bwd) on a projection of in -> out at rank `rank`: x, u,
// y, dy, du, dx stored as bf16 when act16, A and B when adapter16, dA and dB when grad16 (a LoRA run:
// activations in their dtype, the adapters and their gradients fp32).
struct LoraShape {
  int64_t rows = 0, in = 0, rank = 0, out = 0;
  bool act16 = false, adapter16 = false, grad16 = false;
};
// Each op is two linear ops in a row, the second reading what the first wrote: the forward
// u = scale x A^T (linear_fwd of A) then y += u B^T (of B, accumulating); the backward the linear_bwd
// of B (dB += dy^T u, du = scale dy B) then that of A on du (dA += du^T x, dx += du A when has_dx).
// The two phases reuse the scratch from its start: an op's need is the larger phase's.
int64_t lora_fwd_bytes(const LoraShape& s, bool bf16_gemm);
int64_t lora_bwd_bytes(const LoraShape& s, bool has_dx, bool bf16_gemm);

// Paged attention over `slots` prefix pages; select_groups 0 = dense (no lists), else `listed`
// selected slots in all lists together over qpages x select_groups lists.
struct AttentionShape {
  int64_t rows = 0, q_heads = 0, kv_heads = 0, head_dim = 0, page_tokens = 0;
  int64_t slots = 0, select_groups = 0, listed = 0;
  bool act16 = false;  // q, k, v, o, dout, dq, dk, dv stored as bf16
};
int64_t attention_metadata_bytes(const AttentionShape& a, bool backward);
int64_t attention_fwd_bytes(const AttentionShape& a);
int64_t attention_bwd_bytes(const AttentionShape& a);

int64_t select_pages_bytes(int64_t rows, int64_t q_heads, int64_t kv_heads, int64_t head_dim, int64_t page_tokens,
                           int64_t groups, int64_t prefix_pages, int64_t budget, bool q16, bool summaries16);
int64_t page_list_bytes(int64_t pages);  // write_kv_pages, add_from_grad_pages
int64_t cross_entropy_bytes(int64_t rows);

// One call of a GEMM-running op in a step (linear_fwd / linear_bwd / lora_fwd / lora_bwd), as the
// Engine makes it: the shapes and dtypes that decide its op scratch. Its declared need is
// bytes(bf16_gemm); the CUDA backend plans the same call against cuBLASLt's heuristic before the
// first step (review 3, finding 8), so a GEMM that falls back to fp32 past the declared row is
// refused by name then, never in the middle of a step.
struct LinearCall {
  enum class Kind { forward, backward, lora_forward, lora_backward };
  Kind kind = Kind::forward;
  const char* op = "";                 // "q projection", "lm_head backward", " LoRA forward", ...
  const std::string* target = nullptr;  // lora_*: the adapted projection (Config::lora_targets)
  std::string name() const { return target ? *target + op : std::string(op); }  // "q_proj LoRA forward"
  int64_t chunk = 0;
  bool head = false;  // the LM head's (after the layers' attention and page ops)
  int64_t rows = 0, in = 0, out = 0;
  bool x16 = false, w16 = false;
  bool y16 = false, has_bias = false;  // forward
  bool dy16 = false, has_dx = false, dx16 = false, dx_acc = false, has_dw = false, dw16 = false, has_db = false,
       db16 = false;  // backward
  LoraShape lora;  // lora_*: its shape (rows, in, rank, out, dtypes); has_dx for the backward
  int64_t bytes(bool bf16_gemm) const;
};
// The GEMM-running calls of one step of (m, c): the passes of the last two chunks, which hold every
// shape of the step (the largest rows: the last chunk may be ragged).
std::vector<LinearCall> step_linear_calls(const models::ModelSpec& m, const Config& c, const Geometry& g);

// The largest op scratch of one step of (m, c) and the op that needs it.
struct StepScratch {
  int64_t bytes = 0;
  std::string op;  // "lm_head backward", "attention backward", "select_pages", ...
};
StepScratch step_op_scratch(const models::ModelSpec& m, const Config& c, const Geometry& g, bool bf16_gemm);

}  // namespace oomb::step::cuda_scratch
