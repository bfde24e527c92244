#include "executor/cuda/common.cuh"
#include "executor/cuda/rmsnorm.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kRowsPerBlock = 64;  // dw: rows summed per block before one atomic per column

__global__ void rmsnorm_fwd_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t rows,
                                   int64_t dim, float eps, float* __restrict__ y, float* __restrict__ rstd) {
  __shared__ double red[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* xr = x + t * dim;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += static_cast<double>(xr[i]) * xr[i];
    ss = block_sum(ss, red);
    const float r = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(dim) + eps));
    if (threadIdx.x == 0) rstd[t] = r;
    float* yr = y + t * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], r), w[i]);
  }
}

__global__ void rmsnorm_dx_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                  const float* __restrict__ rstd, const float* __restrict__ dy, int64_t rows,
                                  int64_t dim, float* __restrict__ dx) {
  __shared__ double red[32];
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* xr = x + t * dim;
    const float* dyr = dy + t * dim;
    double dot = 0;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dot += static_cast<double>(w[i]) * dyr[i] * xr[i];
    dot = block_sum(dot, red);
    const float r = rstd[t];
    const float c = static_cast<float>(dot / static_cast<double>(dim)) * r * r * r;
    float* dxr = dx + t * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) dxr[i] += r * w[i] * dyr[i] - c * xr[i];
  }
}

__global__ void rmsnorm_dw_kernel(const float* __restrict__ x, const float* __restrict__ rstd,
                                  const float* __restrict__ dy, int64_t rows, int64_t dim, float* __restrict__ dw) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= dim) return;
  const int64_t r0 = blockIdx.y * int64_t{kRowsPerBlock};
  const int64_t r1 = r0 + kRowsPerBlock < rows ? r0 + kRowsPerBlock : rows;
  float acc = 0;
  for (int64_t r = r0; r < r1; ++r) acc += dy[r * dim + c] * x[r * dim + c] * rstd[r];
  atomicAdd(dw + c, acc);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void launch_rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd,
                        cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return;
  rmsnorm_fwd_kernel<<<row_blocks(rows), kRowThreads, 0, s>>>(x, w, rows, dim, eps, y, rstd);
  OOMB_CUDA_LAUNCH_CHECK("rmsnorm_fwd_kernel");
}

void launch_rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                        float* dx_acc, float* dw_acc, cudaStream_t s) {
  if (rows <= 0 || dim <= 0) return;
  rmsnorm_dx_kernel<<<row_blocks(rows), kRowThreads, 0, s>>>(x, w, rstd, dy, rows, dim, dx_acc);
  OOMB_CUDA_LAUNCH_CHECK("rmsnorm_dx_kernel");
  const dim3 grid(static_cast<unsigned>((dim + kThreads - 1) / kThreads),
                  static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  rmsnorm_dw_kernel<<<grid, kThreads, 0, s>>>(x, rstd, dy, rows, dim, dw_acc);
  OOMB_CUDA_LAUNCH_CHECK("rmsnorm_dw_kernel");
}

}  // namespace oomb::executor::cuda
