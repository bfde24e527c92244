#pragma once
// Fused cross-entropy over the given logits rows (never more memory than the logits themselves):
// one block per row reads the row twice (online max + sum of exp, then the gradient write) and
// replaces it by d(scale * loss)/d(logits); rows with target -1 become zero. Per-row losses go to
// row_loss [rows] (double) and are summed in a fixed order into *loss_sum (device).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace oomb::executor::cuda {

void launch_cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                          double* row_loss, double* loss_sum, cudaStream_t s);

}  // namespace oomb::executor::cuda
