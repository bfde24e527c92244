#include "executor/cuda/common.cuh"
#include "executor/cuda/swiglu.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr float kGptOssAlpha = 1.702f;  // gpt-oss's MLP: sigmoid(1.702 x) x

__global__ void swiglu_fwd_kernel(InView g, InView u, int64_t n, float limit, OutView out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i];
    if (limit > 0) {
      const float xc = fminf(x, limit), uc = fminf(fmaxf(u[i], -limit), limit);
      out.store(i, xc / (1.0f + expf(-kGptOssAlpha * xc)) * (uc + 1.0f));
    } else {
      out.store(i, x / (1.0f + expf(-x)) * u[i]);
    }
  }
}

__global__ void swiglu_bwd_kernel(InView g, InView u, InView d, int64_t n, float limit, OutView dg, OutView du) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i], di = d[i];
    const float ui = u[i];  // read before du is stored (du may share storage with u)
    if (limit > 0) {
      const float xc = fminf(x, limit), uc = fminf(fmaxf(ui, -limit), limit);
      const float sig = 1.0f / (1.0f + expf(-kGptOssAlpha * xc));
      du.store(i, ui >= -limit && ui <= limit ? di * xc * sig : 0.0f);
      dg.store(i, x <= limit ? di * (uc + 1.0f) * sig * (1.0f + kGptOssAlpha * xc * (1.0f - sig)) : 0.0f);
    } else {
      const float sig = 1.0f / (1.0f + expf(-x));
      du.store(i, di * x * sig);
      dg.store(i, di * ui * sig * (1.0f + x * (1.0f - sig)));
    }
  }
}

constexpr float kGeluC = 0.7978845608028654f, kGeluA = 0.044715f;  // sqrt(2 / pi), the cubic's weight

__global__ void geglu_fwd_kernel(InView g, InView u, int64_t n, OutView out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i];
    out.store(i, 0.5f * x * (1.0f + tanhf(kGeluC * (x + kGeluA * x * x * x))) * u[i]);
  }
}

__global__ void geglu_bwd_kernel(InView g, InView u, InView d, int64_t n, OutView dg, OutView du) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i], di = d[i];
    const float ui = u[i];  // read before du is stored (du may share storage with u)
    const float t = tanhf(kGeluC * (x + kGeluA * x * x * x));
    du.store(i, di * 0.5f * x * (1.0f + t));
    dg.store(i, di * ui * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x)));
  }
}

}  // namespace

void launch_geglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out, cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, geglu_fwd_kernel)(view(gate), view(up), n, view(out));
  OOMB_CUDA_LAUNCH_CHECK("geglu_fwd_kernel");
}

void launch_geglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup,
                      cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, geglu_bwd_kernel)(view(gate), view(up), view(dout), n, view(dgate),
                                                              view(dup));
  OOMB_CUDA_LAUNCH_CHECK("geglu_bwd_kernel");
}

void launch_swiglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out, float limit, cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, swiglu_fwd_kernel)(view(gate), view(up), n, limit, view(out));
  OOMB_CUDA_LAUNCH_CHECK("swiglu_fwd_kernel");
}

void launch_swiglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup,
                       float limit, cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, swiglu_bwd_kernel)(view(gate), view(up), view(dout), n, limit,
                                                               view(dgate), view(dup));
  OOMB_CUDA_LAUNCH_CHECK("swiglu_bwd_kernel");
}

}  // namespace oomb::executor::cuda
