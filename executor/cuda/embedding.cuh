#pragma once
// out[t] = table[ids[t]]; backward adds rows of dout into the table gradient. table, out, dout and
// dtable are fp32 or bf16 (executor/cuda/typed.cuh). fp32 dtable: scatter-add with atomics (repeated
// ids summed in an unspecified order). bf16 dtable: the block of an id's first row sums that id's
// rows in row order in fp32 and adds the sum to the stored row with one rounding (the CPU backend's
// order, so the same bits when dout is the same). A negative id (tensor parallelism: a token of
// another rank's vocabulary shard) looks up a zero row and adds no gradient, as on the CPU backend.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out,
                          cudaStream_t s);
void launch_embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden, Tensor dtable_acc,
                          cudaStream_t s);

}  // namespace oomb::executor::cuda
