// Attention sinks (see sinks.cuh).
#include "core/error.h"
#include "executor/cuda/common.cuh"
#include "executor/cuda/sinks.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

// One thread per (row, head): lse' = log(exp(lse) + exp(s)), o *= exp(lse - lse').
__global__ void attention_sinks_fwd_kernel(InView sinks, int64_t rows, int64_t q_heads, int64_t head_dim, OutView o,
                                           float* __restrict__ lse) {
  const int64_t n = rows * q_heads;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const float l = lse[e], s = sinks[e % q_heads], m = fmaxf(l, s);
    const float merged = m + logf(expf(l - m) + expf(s - m));
    const float scale = expf(l - merged);
    for (int64_t d = 0; d < head_dim; ++d) o.store(e * head_dim + d, o.load(e * head_dim + d) * scale);
    lse[e] = merged;
  }
}

// Block h: -sum over rows of exp(s_h - lse') (dout . o), in double, added to d_sinks[h].
__global__ void attention_sinks_bwd_kernel(InView sinks, int64_t rows, int64_t q_heads, int64_t head_dim, InView o,
                                           const float* __restrict__ lse, InView dout, OutView d_sinks) {
  __shared__ double red[32];
  const int64_t h = blockIdx.x;
  double acc = 0;
  for (int64_t t = threadIdx.x; t < rows; t += blockDim.x) {
    const int64_t row = (t * q_heads + h) * head_dim;
    float dot = 0;
    for (int64_t d = 0; d < head_dim; ++d) dot += o[row + d] * dout[row + d];
    acc += static_cast<double>(expf(sinks[h] - lse[t * q_heads + h]) * dot);
  }
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) d_sinks.store(h, d_sinks.load(h) - static_cast<float>(acc));
}

}  // namespace

void launch_attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                                float* lse, cudaStream_t s) {
  if (rows <= 0 || q_heads <= 0) return;
  OOMB_LAUNCH(grid_for(rows * q_heads), kThreads, 0, s, attention_sinks_fwd_kernel)(view(sinks), rows, q_heads,
                                                                                  head_dim, view(o), lse);
  OOMB_CUDA_LAUNCH_CHECK("attention_sinks_fwd_kernel");
}

void launch_attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                                const float* lse, ConstTensor dout, Tensor d_sinks, cudaStream_t s) {
  if (rows <= 0 || q_heads <= 0 || !d_sinks) return;
  OOMB_LAUNCH(static_cast<unsigned>(q_heads), kThreads, 0, s, attention_sinks_bwd_kernel)(
      view(sinks), rows, q_heads, head_dim, view(o), lse, view(dout), view(d_sinks));
  OOMB_CUDA_LAUNCH_CHECK("attention_sinks_bwd_kernel");
}

}  // namespace oomb::executor::cuda
