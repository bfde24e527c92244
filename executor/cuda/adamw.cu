#include <cmath>

#include "executor/cuda/adamw.cuh"
#include "executor/runtime/adamw.h"
#include "executor/cuda/common.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

// master: the fp32 weights updated (param refreshed from them, rounded once); null: param updated.
// AdamWConstants (executor/runtime/adamw.h) gives the per-step scalars, so both backends round the same values.
__global__ void adamw_kernel(OutView param, float* __restrict__ master, InView grad, float* __restrict__ m,
                             float* __restrict__ v, const uint8_t* __restrict__ mask, int64_t n, float b1, float b2,
                             float eps, float grad_scale, float decay, float step_size, float bc2_sqrt) {
  const float one_b1 = __fsub_rn(1.0f, b1), one_b2 = __fsub_rn(1.0f, b2);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float p = master ? master[i] : param.load(i);
    const float g = grad_scale == 1.0f ? grad[i] : __fmul_rn(grad[i], grad_scale);
    if (mask[i]) p = __fmul_rn(p, decay);
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_b1, g));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    p = __fsub_rn(p, __fmul_rn(step_size, __fdiv_rn(mi, denom)));
    if (master) master[i] = p;
    param.store(i, p);
  }
}

}  // namespace

void launch_adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* decay_mask,
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  float grad_scale, cudaStream_t s) {
  if (n <= 0) return;
  const AdamWConstants k = adamw_constants(lr, beta1, beta2, weight_decay, step);
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, adamw_kernel)(view(param), master, view(grad), m, v, decay_mask, n,
                                                         beta1, beta2, eps, grad_scale, k.decay, k.step_size,
                                                         k.bc2_sqrt);
  OOMB_CUDA_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace oomb::executor::cuda
