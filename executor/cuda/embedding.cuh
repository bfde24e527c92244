#pragma once
// out[t] = table[ids[t]]; backward scatter-adds rows of dout into the table gradient (atomics:
// repeated ids are summed in an unspecified order).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace oomb::executor::cuda {

void launch_embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out,
                          cudaStream_t s);
void launch_embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dtable_acc,
                          cudaStream_t s);

}  // namespace oomb::executor::cuda
