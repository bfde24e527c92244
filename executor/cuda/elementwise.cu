#include "executor/cuda/common.cuh"
#include "executor/cuda/elementwise.cuh"
#include "executor/cuda/launch_shape.h"
#include "executor/cuda/typed.cuh"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cuda {

namespace {

__global__ void add_kernel(OutView y, InView x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y.store(i, y.load(i) + x[i]);
}

__global__ void scale_kernel(OutView x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    x.store(i, x.load(i) * factor);
}

__global__ void convert_kernel(OutView dst, InView src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst.store(i, src[i]);
}

__global__ void add_bias_kernel(float* __restrict__ y, int64_t rows, int64_t cols, InView b) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x)
    y[i] += b[i % cols];
}

// The GEMM result src plus (as the fp32 path adds them) the stored value and the bias, rounded once.
__global__ void store_f32_kernel(OutView dst, const float* __restrict__ src, int64_t rows, int64_t cols, InView b,
                                 bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * cols;
       i += int64_t{gridDim.x} * blockDim.x) {
    float v = accumulate ? dst.load(i) + src[i] : src[i];
    if (b) v += b[i % cols];
    dst.store(i, v);
  }
}

constexpr int kRowsPerBlock = 64;

// Block (column tile, row tile): each thread sums kRowsPerBlock rows of one column, then one
// atomic add per column and row tile.
__global__ void column_sum_kernel(InView x, int64_t rows, int64_t cols, float* __restrict__ out) {
  const int64_t tiles = row_tiles(rows, kRowsPerBlock);
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x)
    for (int64_t tile = blockIdx.y; tile < tiles; tile += gridDim.y) {  // row tiles past grid.y's limit loop
      const RowRange rr = row_tile(tile, kRowsPerBlock, rows);
      float acc = 0;
      for (int64_t r = rr.begin; r < rr.end; ++r) acc += x[r * cols + c];
      atomicAdd(out + c, acc);
    }
}

// Block (column tile, row), grid-stride over both: dst[r * ld + c] = bf16(src[r * cols + c]).
__global__ void to_bf16_kernel(const float* __restrict__ src, int64_t rows, int64_t cols, uint16_t* __restrict__ dst,
                               int64_t ld) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < cols; c += int64_t{gridDim.x} * blockDim.x)
      dst[r * ld + c] = f32_to_bf16(src[r * cols + c]);
}

}  // namespace

void launch_add(Tensor y, ConstTensor x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, add_kernel)(view(y), view(x), n);
  OOMB_CUDA_LAUNCH_CHECK("add_kernel");
}

void launch_scale(Tensor x, int64_t n, float factor, cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, scale_kernel)(view(x), n, factor);
  OOMB_CUDA_LAUNCH_CHECK("scale_kernel");
}

void launch_convert(Tensor dst, ConstTensor src, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, convert_kernel)(view(dst), view(src), n);
  OOMB_CUDA_LAUNCH_CHECK("convert_kernel");
}

void launch_add_bias(float* y, int64_t rows, int64_t cols, ConstTensor b, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  OOMB_LAUNCH(grid_for(rows * cols), kThreads, 0, s, add_bias_kernel)(y, rows, cols, view(b));
  OOMB_CUDA_LAUNCH_CHECK("add_bias_kernel");
}

void launch_store_f32(Tensor dst, const float* src, int64_t rows, int64_t cols, ConstTensor b, bool accumulate,
                      cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  OOMB_LAUNCH(grid_for(rows * cols), kThreads, 0, s, store_f32_kernel)(view(dst), src, rows, cols, view(b), accumulate);
  OOMB_CUDA_LAUNCH_CHECK("store_f32_kernel");
}

void launch_column_sum_acc(ConstTensor x, int64_t rows, int64_t cols, float* out, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const GridShape g = column_reduce_grid(rows, cols, kThreads, kRowsPerBlock, grid_yz_limit());
  const dim3 grid(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y));
  OOMB_LAUNCH(grid, kThreads, 0, s, column_sum_kernel)(view(x), rows, cols, out);
  OOMB_CUDA_LAUNCH_CHECK("column_sum_kernel");
}

void launch_to_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld, cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  // Narrow matrices get narrow blocks (a warp at least); rows beyond the grid's y limit loop.
  const int threads = static_cast<int>(cols >= kThreads ? kThreads : (cols + 31) / 32 * 32);
  const int64_t xb = (cols + threads - 1) / threads;
  const dim3 grid(static_cast<unsigned>(xb < 1024 ? xb : 1024),
                  static_cast<unsigned>(capped_blocks(rows, 1, grid_yz_limit())));
  OOMB_LAUNCH(grid, threads, 0, s, to_bf16_kernel)(src, rows, cols, dst, ld);
  OOMB_CUDA_LAUNCH_CHECK("to_bf16_kernel");
}

}  // namespace oomb::executor::cuda
