#pragma once
// Tensor parallelism's vocabulary-parallel cross-entropy (backend.h cross_entropy_shard_stats /
// _combine / _grad; the CPU backend's semantics, executor/cpu/ops.cpp): this rank holds `vocab`
// columns of each logits row and the targets index them (-2: another rank's column, -1: no target).
// Three launches per loss tile, none of which returns anything to the host:
//  - stats: block per row, one read of the row (online max and sum of exp, rescaled in double) ->
//    stats [rows][3] = max, sum of exp(x - max), the target's logit (0 unless the target is here);
//  - combine (after the ranks' stats met in one all-reduce, stats [ranks][rows][3]): each row's max
//    and sum over every rank -> max_sum [rows][2] written over the start of the same buffer, and the
//    tile's loss added to a loss slot (the mapped pinned memory of the CUDA backend's loss slots);
//  - grad: block per row, grad = scale * (softmax - one-hot) over this rank's columns (rows with
//    target -1: 0; grad may be the logits' own storage).
// Logits and grad are fp32 or bf16 (fp32 math, the gradient rounded once on store).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                      float* stats, cudaStream_t s);

// stats: [ranks][rows][3] in, max_sum [rows][2] out over its start (ranks >= 1). loss_slot: the
// tile's loss sum(log(sum) - (target logit - max)) over rows whose target is not -1 is added to it.
void launch_cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                        double* loss_slot, cudaStream_t s);

void launch_cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                     const float* max_sum, float scale, Tensor grad, cudaStream_t s);

}  // namespace oomb::executor::cuda
