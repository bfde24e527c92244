#include <cmath>

#include "executor/cuda/adamw.cuh"
#include "executor/cuda/common.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

// master: the fp32 weights updated (param refreshed from them, rounded once); null: param updated.
__global__ void adamw_kernel(OutView param, float* __restrict__ master, InView grad, float* __restrict__ m,
                             float* __restrict__ v, const uint8_t* __restrict__ mask, int64_t n, float lr, float b1,
                             float b2, float eps, float wd, double bc1, double bc2) {
  const float one_b1 = __fsub_rn(1.0f, b1), one_b2 = __fsub_rn(1.0f, b2), lr_wd = __fmul_rn(lr, wd);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float p = master ? master[i] : param.load(i);
    const float g = grad[i];
    if (mask[i]) p = __fsub_rn(p, __fmul_rn(lr_wd, p));
    const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_b1, g));
    const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_b2, g), g));
    m[i] = mi;
    v[i] = vi;
    const double mhat = static_cast<double>(mi) / bc1, vhat = static_cast<double>(vi) / bc2;
    const double update = static_cast<double>(lr) * mhat / (sqrt(vhat) + static_cast<double>(eps));
    p = __fsub_rn(p, static_cast<float>(update));
    if (master) master[i] = p;
    param.store(i, p);
  }
}

}  // namespace

void launch_adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* decay_mask,
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  cudaStream_t s) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(view(param), master, view(grad), m, v, decay_mask, n, lr, beta1,
                                                beta2, eps, weight_decay, bc1, bc2);
  OOMB_CUDA_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace oomb::executor::cuda
