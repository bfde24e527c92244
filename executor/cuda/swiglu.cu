#include "executor/cuda/common.cuh"
#include "executor/cuda/swiglu.cuh"

namespace oomb::executor::cuda {

namespace {

__global__ void swiglu_fwd_kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t n,
                                  float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i];
    out[i] = x / (1.0f + expf(-x)) * u[i];
  }
}

__global__ void swiglu_bwd_kernel(const float* __restrict__ g, const float* __restrict__ u,
                                  const float* __restrict__ d, int64_t n, float* __restrict__ dg,
                                  float* __restrict__ du) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i], sig = 1.0f / (1.0f + expf(-x)), di = d[i];
    du[i] = di * x * sig;
    dg[i] = di * u[i] * sig * (1.0f + x * (1.0f - sig));
  }
}

}  // namespace

void launch_swiglu_fwd(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0) return;
  swiglu_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(gate, up, n, out);
  OOMB_CUDA_LAUNCH_CHECK("swiglu_fwd_kernel");
}

void launch_swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup,
                       cudaStream_t s) {
  if (n <= 0) return;
  swiglu_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(gate, up, dout, n, dgate, dup);
  OOMB_CUDA_LAUNCH_CHECK("swiglu_bwd_kernel");
}

}  // namespace oomb::executor::cuda
