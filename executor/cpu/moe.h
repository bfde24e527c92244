#pragma once
// Mixture-of-experts routing and packed dispatch on the CPU (fp32), the CPU backend's moe_* ops
// (executor/runtime/backend.h says what each computes). Packed order: the rows x k (token, expert)
// pairs sorted by expert, then by token, so that each expert's rows are one contiguous block.
#include <cstdint>

namespace oomb::executor::cpu {

void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize, int32_t* route_experts,
               float* route_weights, int32_t* route_rows, int32_t* offsets);
void moe_route_bwd(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                   const int32_t* route_experts, const float* route_weights, const float* d_weights, float* d_logits);
void moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k, const int32_t* route_experts,
                        double* counts, double* prob_sums);
void moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                  float* d_logits);
void moe_gather(const float* x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows, float* packed);
void moe_combine(const float* packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                 const float* weights, float* y, bool accumulate);
void moe_combine_bwd(const float* dy, const float* packed, int64_t rows, int64_t dim, int64_t k,
                     const int32_t* route_rows, const float* weights, float* d_packed, float* d_weights);

}  // namespace oomb::executor::cpu
