#pragma once
// Attention sinks (gpt-oss; executor/runtime/backend.h attention_sinks_fwd / _bwd): one learned
// logit per q head joins each row's softmax after the paged attention kernels ran, as a rescaling
// of o and lse; its gradient is a per-head reduction over the rows (one block per head, no atomics).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

// sinks [q_heads] and o [rows, q_heads * head_dim] of either storage dtype; lse fp32, in place.
void launch_attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                                float* lse, cudaStream_t s);
// d_sinks accumulated (either dtype: one rounding per element and call).
void launch_attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                                const float* lse, ConstTensor dout, Tensor d_sinks, cudaStream_t s);

}  // namespace oomb::executor::cuda
