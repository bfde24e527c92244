#include "core/error.h"
#include "executor/cuda/common.cuh"
#include "executor/cuda/elementwise.cuh"
#include "executor/cuda/launch_shape.h"
#include "executor/cuda/rmsnorm.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kRowsPerBlock = 64;  // dw: rows summed per block before one atomic per column

__global__ void rmsnorm_fwd_kernel(InView x, InView w, int64_t rows, int64_t dim, float eps, OutView y,
                                   float* __restrict__ rstd) {
  __shared__ double red[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int64_t row = t * dim;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      const float xi = x[row + i];
      ss += static_cast<double>(xi) * xi;
    }
    ss = block_sum(ss, red);
    const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + eps));
    if (threadIdx.x == 0) rstd[t] = r;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y.store(row + i, __fmul_rn(__fmul_rn(x[row + i], r), w[i]));
  }
}

__global__ void rmsnorm_dx_kernel(InView x, InView w, const float* __restrict__ rstd, InView dy, int64_t rows,
                                  int64_t dim, OutView dx) {
  __shared__ double red[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int64_t row = t * dim;
    double dot = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
      dot += static_cast<double>(w[i]) * dy[row + i] * x[row + i];
    dot = block_sum(dot, red);
    const float r = rstd[t];
    const float c = static_cast<float>(dot / static_cast<double>(dim)) * r * r * r;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
      dx.store(row + i, dx.load(row + i) + (r * w[i] * dy[row + i] - c * x[row + i]));
  }
}

// Block (column tile, row tile), grid-stride over both (launch_shape.h: row tiles beyond the grid's
// y limit loop); one atomic per column and row tile.
__global__ void rmsnorm_dw_kernel(InView x, const float* __restrict__ rstd, InView dy, int64_t rows, int64_t dim,
                                  float* __restrict__ dw) {
  const int64_t tiles = row_tiles(rows, kRowsPerBlock);
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < dim; c += int64_t{gridDim.x} * blockDim.x)
    for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {
      const RowRange rr = row_tile(tile, kRowsPerBlock, rows);
      float acc = 0;
      for (int64_t r = rr.begin; r < rr.end; ++r) acc += dy[r * dim + c] * x[r * dim + c] * rstd[r];
      atomicAdd(dw + c, acc);
    }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void launch_rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y, float* rstd,
                        cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return;
  OOMB_LAUNCH(row_blocks(rows), kRowThreads, 0, s, rmsnorm_fwd_kernel)(view(x), view(w), rows, dim, eps, view(y), rstd);
  OOMB_CUDA_LAUNCH_CHECK("rmsnorm_fwd_kernel");
}

void launch_rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows, int64_t dim,
                        Tensor dx_acc, Tensor dw_acc, float* dw_scratch, cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return;
  OOMB_LAUNCH(row_blocks(rows), kRowThreads, 0, s, rmsnorm_dx_kernel)(view(x), view(w), rstd, view(dy), rows, dim,
                                                              view(dx_acc));
  OOMB_CUDA_LAUNCH_CHECK("rmsnorm_dx_kernel");
  if (!dw_acc) return;  // a frozen weight (LoRA): no gradient
  // bf16 dw: the row tiles' atomics sum into a zeroed fp32 scratch, added to dw and rounded once.
  const bool f32 = dw_acc.dtype == DType::f32;
  OOMB_ASSERT(f32 || dw_scratch, "a bf16 RMSNorm weight gradient needs an fp32 scratch");
  float* acc = f32 ? dw_acc.f32() : dw_scratch;
  if (!f32) OOMB_CUDA_CHECK(cudaMemsetAsync(acc, 0, static_cast<size_t>(dim) * 4, s));
  const GridShape g = column_reduce_grid(rows, dim, kThreads, kRowsPerBlock, grid_yz_limit());
  const dim3 grid(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y));
  OOMB_LAUNCH(grid, kThreads, 0, s, rmsnorm_dw_kernel)(view(x), rstd, view(dy), rows, dim, acc);
  OOMB_CUDA_LAUNCH_CHECK("rmsnorm_dw_kernel");
  if (!f32) launch_store_f32(dw_acc, acc, 1, dim, nullptr, true, s);
}

}  // namespace oomb::executor::cuda
