#include <cfloat>

#include "executor/cuda/common.cuh"
#include "executor/cuda/cross_entropy_shard.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr int kRowThreads = 512;

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

// Every row, whatever its target (the CPU computes the statistics of rows without a target too).
__global__ void shard_stats_kernel(InView logits, int64_t rows, int64_t vocab, const int32_t* __restrict__ targets,
                                   float* __restrict__ stats) {
  __shared__ float red_f[32];
  __shared__ double red_d[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int64_t row = t * vocab;
    // Online max and sum of exp per thread (rescaled in double), then combined over the block.
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
    if (threadIdx.x == 0) {
      const int32_t target = targets[t];
      stats[t * 3] = mx;
      stats[t * 3 + 1] = static_cast<float>(sum);
      stats[t * 3 + 2] = target >= 0 ? logits[row + target] : 0.0f;
    }
  }
}

// One block over every row, in chunks of blockDim.x rows (a tile has at most a few thousand rows of
// G x 3 floats: microseconds). In place: chunk [a, a + B) writes floats [2a, 2a + 2B) of rank 0's
// statistics, which hold rows below (2a + 2B) / 3 <= a + B: earlier chunks' rows (read already) or
// this chunk's (read before the barrier); the other ranks' statistics start at 3 x rows and are
// never written. Each thread adds its rows' losses in double; the block's sum (fixed order for a
// fixed block size) is added to the slot by one thread.
__global__ void shard_combine_kernel(float* __restrict__ stats, int64_t ranks, int64_t rows,
                                     const int32_t* __restrict__ targets, double* __restrict__ loss_slot) {
  __shared__ double red[32];
  double loss = 0;
  for (int64_t a = 0; a < rows; a += blockDim.x) {
    const int64_t r = a + threadIdx.x;
    float mx = 0.0f, sum = 1.0f;  // rows without a target (the CPU's max_sum for them)
    if (r < rows && targets[r] != -1) {
      mx = -__int_as_float(0x7f800000);
      for (int64_t k = 0; k < ranks; ++k) mx = fmaxf(mx, stats[(k * rows + r) * 3]);
      double s = 0, target = 0;
      for (int64_t k = 0; k < ranks; ++k) {
        const float* e = stats + (k * rows + r) * 3;
        s += static_cast<double>(e[1]) * exp(static_cast<double>(e[0]) - static_cast<double>(mx));
        target += static_cast<double>(e[2]);
      }
      sum = static_cast<float>(s);
      loss += log(s) - (target - static_cast<double>(mx));
    }
    __syncthreads();  // the chunk's statistics are read before any of them is overwritten
    if (r < rows) {
      stats[r * 2] = mx;
      stats[r * 2 + 1] = sum;
    }
  }
  loss = block_sum(loss, red);
  if (threadIdx.x == 0) *loss_slot += loss;
}

// grad may be the logits' own storage: each element is read and written by the same thread.
__global__ void shard_grad_kernel(InView logits, int64_t rows, int64_t vocab, const int32_t* __restrict__ targets,
                                  const float* __restrict__ max_sum, float scale, OutView grad) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int64_t row = t * vocab;
    const int32_t target = targets[t];
    if (target == -1) {
      for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) grad.store(row + i, 0.0f);
      continue;
    }
    const float mx = max_sum[t * 2];
    const float factor = static_cast<float>(scale / static_cast<double>(max_sum[t * 2 + 1]));
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float g = expf(logits[row + i] - mx) * factor;
      grad.store(row + i, i == target ? g - scale : g);
    }
  }
}

}  // namespace

void launch_cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                      float* stats, cudaStream_t s) {
  if (rows <= 0 || vocab <= 0) return;
  OOMB_LAUNCH(row_blocks(rows), kRowThreads, 0, s, shard_stats_kernel)(view(logits), rows, vocab, targets, stats);
  OOMB_CUDA_LAUNCH_CHECK("shard_stats_kernel");
}

void launch_cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                        double* loss_slot, cudaStream_t s) {
  if (rows <= 0 || ranks <= 0) return;
  OOMB_LAUNCH(1, kThreads, 0, s, shard_combine_kernel)(stats, ranks, rows, targets, loss_slot);
  OOMB_CUDA_LAUNCH_CHECK("shard_combine_kernel");
}

void launch_cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                     const float* max_sum, float scale, Tensor grad, cudaStream_t s) {
  if (rows <= 0 || vocab <= 0) return;
  OOMB_LAUNCH(row_blocks(rows), kRowThreads, 0, s, shard_grad_kernel)(view(logits), rows, vocab, targets, max_sum,
                                                                       scale, view(grad));
  OOMB_CUDA_LAUNCH_CHECK("shard_grad_kernel");
}

}  // namespace oomb::executor::cuda
