#include "executor/cuda/common.cuh"
#include "executor/cuda/rope.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

// One thread per (row, frequency): the angle is computed once and applied to every head.
__global__ void rope_kernel(OutView x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0,
                            models::Rope rope, float sign) {
  const int64_t half = head_dim / 2;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * half;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = e / half, i = e % half;
    const double inv_freq = models::rope_inv_freq(rope, i, head_dim);
    const double a = static_cast<double>(pos0 + t) * inv_freq;
    const double scale = models::rope_scale(rope);  // YaRN's attention factor (1 otherwise)
    const float co = static_cast<float>(cos(a) * scale), si = sign * static_cast<float>(sin(a) * scale);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t v = (t * heads + h) * head_dim;
      const float p = x.load(v + i), q = x.load(v + i + half);
      x.store(v + i, __fsub_rn(__fmul_rn(p, co), __fmul_rn(q, si)));
      x.store(v + i + half, __fadd_rn(__fmul_rn(q, co), __fmul_rn(p, si)));
    }
  }
}

}  // namespace

void launch_rope(Tensor x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope, float sign,
                 cudaStream_t s) {
  const int64_t n = rows * (head_dim / 2);
  if (n <= 0 || heads <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, rope_kernel)(view(x), rows, heads, head_dim, pos0, rope, sign);
  OOMB_CUDA_LAUNCH_CHECK("rope_kernel");
}

}  // namespace oomb::executor::cuda
