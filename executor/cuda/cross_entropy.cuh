#pragma once
// Fused cross-entropy over the given logits rows (never more memory than the logits themselves):
// one block per row reads the row twice (online max + sum of exp, then the gradient write) and
// writes d(scale * loss)/d(logits) to grad (which may be the logits' storage: in place); rows with
// target -1 get a zero gradient. logits and grad are fp32 or bf16 (fp32 math, the gradient rounded
// once). Per-row losses go to row_loss [rows] (double) and are summed in a fixed order into
// *loss_sum (device or mapped pinned host memory): stored, or added to it when accumulate.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                          Tensor grad, double* row_loss, double* loss_sum, cudaStream_t s, bool accumulate = false);

}  // namespace oomb::executor::cuda
