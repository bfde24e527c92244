#pragma once
// Paged flash attention of one chunk (executor/runtime/backend.h PagedAttention), fp32 on CUDA
// cores: online softmax with saved log-sum-exp, GQA of any ratio, any head_dim <= 128, causal
// inside the chunk, prefix keys from a list of page pointers, dense or selected per query page
// (and KV head). The key sequence of query page j and KV head g is: the rows of its attended prefix
// slots (in slot order), then the chunk's own rows (causal).
//
// Forward: block per (32 query rows of page j, j, g); query rows are the (token, head) pairs of the
// page's tokens and g's query heads. Backward: D = rowsum(dO * O); dQ by the forward's blocks;
// dK / dV by one block per (32 keys of a prefix page or of the own rows, g), which loops over every
// query row that attends those keys, so it is the only writer of their gradients: prefix gradient
// pages are accumulated with plain read-add-writes (deterministic, no atomics), own dK / dV are
// overwritten.
//
// Page dtypes (executor/runtime/backend.h PageDtype): prefix KV pages and prefix gradient pages are
// fp32 or bf16 (kv_bf16, grad_bf16). bf16 K / V page rows are converted to fp32 as they are loaded
// (exact), so the kernels compute on exactly the stored values; with bf16 gradient pages the owning
// block's read-add-write becomes: read bf16, add the block's fp32 sum of this call, round once to
// nearest even (runtime/bf16.h), which is the CPU backend's "one rounding per element and call" up
// to fp32 summation order. The chunk's own rows (q, k_own, v_own, dout, dq, dk_own, dv_own) are fp32.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "models/layer_attention.h"

namespace oomb::executor::cuda {

struct AttentionArgs {
  int64_t rows = 0, q_heads = 0, kv_heads = 0, head_dim = 0, page_tokens = 0;
  int64_t prefix_slots = 0;                  // U
  const float* q = nullptr;                  // [T, q_heads * hd]
  const float* k_own = nullptr;              // [T, kv_heads * hd]
  const float* v_own = nullptr;
  const void* const* pages = nullptr;        // device array [U] of pages (fp32 or bf16 elements)
  bool kv_bf16 = false;                      // the pages hold bf16 (else fp32)
  int64_t select_groups = 0;                 // 0 = dense
  const int32_t* select_offsets = nullptr;   // device [qpages * select_groups + 1] (CSR)
  const int32_t* select_slots = nullptr;     // device
  // A local layer (PagedAttention::local): query row t sees the keys from models::first_key(local,
  // window, q_pos0 + t) on. Its prefix slots are the pages right before the chunk, consecutive, and
  // dense (attention_args checks it), so slot u row r is at q_pos0 + (u - U) p + r. The CUDA-core
  // kernels only (attention_tc_supported says no).
  models::LayerAttention local = models::LayerAttention::global;
  int64_t window = 0, q_pos0 = 0;
};

void launch_attention_fwd(const AttentionArgs& a, float* o, float* lse, cudaStream_t s);

struct AttentionGrads {
  const float* o = nullptr;
  const float* lse = nullptr;
  const float* dout = nullptr;
  float* drow = nullptr;                     // scratch [T, q_heads]
  float* dq = nullptr;                       // overwritten
  float* dk_own = nullptr;                   // overwritten
  float* dv_own = nullptr;
  void* const* grad_pages = nullptr;         // device array [U], accumulated (fp32 or bf16 elements)
  bool grad_bf16 = false;                    // the gradient pages hold bf16 (else fp32)
};

void launch_attention_bwd(const AttentionArgs& a, const AttentionGrads& g, cudaStream_t s);

constexpr int64_t kMaxAttentionHeadDim = 128;

}  // namespace oomb::executor::cuda
