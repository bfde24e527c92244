#pragma once
// The CPU reference ops (fp32, Eigen), Hugging Face Qwen2/Llama semantics. Row-major matrices
// [rows, cols]; outputs named *_acc accumulate, others are overwritten. The CpuBackend and the
// full-sequence reference both call these; tests/executor/ops_test.cpp checks every backward
// against finite differences.
#include <cstdint>
#include <vector>

#include "executor/runtime/backend.h"

namespace oomb::executor::cpu {

void embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out);
void embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dtable_acc);

// y = x * rsqrt(mean(x^2) + eps) * w ; rstd [rows] saved for backward.
void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd);
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                 float* dx_acc, float* dw_acc);

void linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out, float* y);
void linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy, float* dx,
                bool accumulate_dx, float* dw_acc, float* db_acc);

// Rotate-half RoPE (HF): inv_freq_i = models::rope_inv_freq (theta^(-2i/d), llama3-scaled when the
// model says so), angle = pos * inv_freq_i; for i < d/2:
// x'_i = x_i cos - x_{i+d/2} sin, x'_{i+d/2} = x_{i+d/2} cos + x_i sin. Backward is the inverse rotation.
void rope_fwd(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope);
void rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope);

// out = silu(gate) * up; limit > 0: gpt-oss's clamped variant (Backend::swiglu_fwd).
void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out, float limit = 0);
// out = gelu_tanh(gate) * up (Backend::geglu_fwd) and its backward.
void geglu_fwd(const float* gate, const float* up, int64_t n, float* out);
void geglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup);
void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup,
                float limit = 0);
// gpt-oss's constant: sigmoid(1.702 x) x approximates GELU (its MLP's `alpha`).
inline constexpr float kGptOssAlpha = 1.702f;

double cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale);
// Tensor parallelism's vocabulary-parallel loss over one rank's columns of the logits (Backend::
// cross_entropy_shard_stats / _grad): per row its max, sum of exp(x - max) and the target's logit
// (targets[t] in [0, vocab): on this rank; otherwise 0); then, given the row's global max and sum
// (stats [rows][2]), the gradient scale * (exp(x - max) / sum - [v == target]) in place (rows with
// target -1 are zeroed; -2: the target is another rank's).
void cross_entropy_shard_stats(const float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float* stats);
void cross_entropy_shard_grad(float* logits, int64_t rows, int64_t vocab, const int32_t* targets,
                              const float* max_sum, float scale);

// Paged, causal-in-chunk attention (blocked per query page; see backend.h PagedAttention).
void attention_fwd(const PagedAttention& a, float* o, float* lse);
void attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout, float* dq,
                   float* dk_own, float* dv_own, const std::vector<float*>& prefix_grad_pages);

// Full-sequence attention with an explicit mask (the reference): allowed[g][i * n + t] for kv-head
// group g (groups = 1: shared by all heads, or kv_heads). probs [q_heads][n][n] saved for backward.
struct MaskedAttention {
  int64_t n = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t groups = 1;
  std::vector<std::vector<uint8_t>> allowed;
};
// Attention sinks (Backend::attention_sinks_fwd / _bwd): o, lse rescaled in place; d_sinks accumulated.
void attention_sinks_fwd(const float* sinks, int64_t rows, int64_t q_heads, int64_t head_dim, float* o, float* lse);
void attention_sinks_bwd(const float* sinks, int64_t rows, int64_t q_heads, int64_t head_dim, const float* o,
                         const float* lse, const float* dout, float* d_sinks);
// sinks (optional, [q_heads]): each row's softmax has the head's sink logit in its denominator (a
// plain loop in double, independent of the executor's attention_sinks_fwd); the backward then adds
// the sinks' gradient into d_sinks.
void masked_attention_fwd(const MaskedAttention& a, const float* q, const float* k, const float* v, float* o,
                          std::vector<float>& probs, const float* sinks = nullptr);
void masked_attention_bwd(const MaskedAttention& a, const float* q, const float* k, const float* v,
                          const std::vector<float>& probs, const float* dout, float* dq, float* dk, float* dv,
                          float* d_sinks = nullptr);

void page_summaries(const float* k, int64_t rows, int64_t kv_dim, int64_t page_tokens, float* out);
std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a);

// AdamW as PyTorch's torch.optim.AdamW computes it in fp32 (executor/runtime/adamw.h), of
// g = grad x grad_scale.
void adamw(float* param, const float* grad, float* m, float* v, const uint8_t* decay_mask, int64_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale = 1.0f);

}  // namespace oomb::executor::cpu
