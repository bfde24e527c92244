#include <cfloat>

#include "executor/cuda/common.cuh"
#include "executor/cuda/cross_entropy.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr int kRowThreads = 512;

// grad may be the logits' own storage: each element is read (both passes) by the thread that writes it,
// after the block has read row[target].
__global__ void cross_entropy_kernel(InView logits, int64_t rows, int64_t vocab, const int32_t* __restrict__ targets,
                                     float scale, OutView grad, double* __restrict__ row_loss) {
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int64_t row = t * vocab;
    const int32_t target = targets[t];
    if (target < 0) {
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) grad.store(row + i, 0.0f);
      if (threadIdx.x == 0) row_loss[t] = 0.0;
      continue;
    }
    // Pass 1: online max and sum of exp (per thread, rescaled in double), then combined.
    float m = -FLT_MAX;
    double l = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float x = logits[row + i];
      if (x > m) {
        l *= exp(static_cast<double>(m) - x);
        m = x;
      }
      l += expf(x - m);
    }
    const float mx = block_max(m, red_f);
    const double sum = block_sum(l * exp(static_cast<double>(m) - mx), red_d);
    // loss = log(sum) - (x_target - mx), not log(expf(x_target - mx)): that is -inf once the target
    // is ~104 below the max (expf underflows) and the run would be refused as diverged.
    const double target_shifted = static_cast<double>(logits[row + target]) - static_cast<double>(mx);
    __syncthreads();  // every thread has read row[target] before it is overwritten
    const float factor = static_cast<float>(scale / sum);
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float g = expf(logits[row + i] - mx) * factor;
      grad.store(row + i, i == target ? g - scale : g);
    }
    if (threadIdx.x == 0) row_loss[t] = log(sum) - target_shifted;
  }
}

__global__ void sum_kernel(const double* __restrict__ v, int64_t n, double* __restrict__ out, bool accumulate) {
  __shared__ double red[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += v[i];
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) *out = accumulate ? *out + acc : acc;
}

}  // namespace

void launch_cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                          Tensor grad, double* row_loss, double* loss_sum, cudaStream_t s, bool accumulate) {
  if (rows > 0 && vocab > 0) {
    const auto blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
    OOMB_LAUNCH(blocks, kRowThreads, 0, s, cross_entropy_kernel)(view(logits), rows, vocab, targets, scale, view(grad),
                                                        row_loss);
    OOMB_CUDA_LAUNCH_CHECK("cross_entropy_kernel");
  }
  OOMB_LAUNCH(1, kThreads, 0, s, sum_kernel)(row_loss, rows > 0 ? rows : 0, loss_sum, accumulate);
  OOMB_CUDA_LAUNCH_CHECK("sum_kernel");
}

}  // namespace oomb::executor::cuda
