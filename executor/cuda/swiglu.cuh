#pragma once
// out = silu(gate) * up, and its backward (fp32, expf).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace oomb::executor::cuda {

void launch_swiglu_fwd(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s);
void launch_swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup,
                       cudaStream_t s);

}  // namespace oomb::executor::cuda
