#pragma once
// Mixture-of-experts routing and packed dispatch on the device, the CUDA backend's moe_* ops (the
// routes and logits fp32; the hidden-wide rows fp32 or bf16, fp32 arithmetic rounded once) (executor/runtime/backend.h says what each computes; executor/cpu/moe.cpp is the reference).
// Deterministic: no atomics; each output element has one writer and sums run in a fixed order.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_moe_route(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                      int32_t* route_experts, float* route_weights, int32_t* route_rows, int32_t* offsets,
                      cudaStream_t s);
void launch_moe_route_bwd(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                          const int32_t* route_experts, const float* route_weights, const float* d_weights,
                          float* d_logits, cudaStream_t s);
void launch_moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k,
                               const int32_t* route_experts, double* counts, double* prob_sums, cudaStream_t s);
void launch_moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                         float* d_logits, cudaStream_t s);
void launch_moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows, Tensor packed,
                       cudaStream_t s);
void launch_moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                        const float* weights, Tensor y, bool accumulate, cudaStream_t s);
void launch_moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                            const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights,
                            cudaStream_t s);

}  // namespace oomb::executor::cuda
