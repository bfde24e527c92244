// The emulated CUDA device's throughput on a representative kernel: a row sum with a block
// reduction (warp shuffles, then __syncthreads and a second warp's shuffles: the pattern of
// executor/cuda's rmsnorm and cross-entropy kernels), 256 threads a block, one row a block.
// Prints fiber resumes per second (a switch into a CUDA thread's fiber and back: the emulator's
// unit of work), rows per second, and the ratio to the same sums in a plain loop measured in the
// same run. Compiled with executor/emulated_cuda/device.h forced in, like the backend's kernels.
//   oomb_emulated_cuda_bench [rows=4096] [cols=1024]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "executor/emulated_cuda/grid.h"

namespace {

constexpr int kThreads = 256;

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__global__ void row_sum_kernel(const float* __restrict__ x, int cols, float* __restrict__ out) {
  __shared__ float partial[32];
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float v = 0;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) v += row[c];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    v = warp_sum(v);
    if (threadIdx.x == 0) out[blockIdx.x] = v;
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 4096, cols = argc > 2 ? std::atoi(argv[2]) : 1024;
  if (rows <= 0 || cols <= 0) {
    std::fprintf(stderr, "usage: oomb_emulated_cuda_bench [rows > 0] [cols > 0]\n");
    return 2;
  }
  std::vector<float> host(static_cast<size_t>(rows) * cols);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 7) - 3.0f;
  float *x = nullptr, *out = nullptr;
  if (cudaMalloc(&x, host.size() * 4) != cudaSuccess || cudaMalloc(&out, static_cast<size_t>(rows) * 4) != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc failed\n");
    return 1;
  }
  cudaMemcpy(x, host.data(), host.size() * 4, cudaMemcpyHostToDevice);

  // Baseline: the same sums, a plain loop (best of 5).
  std::vector<float> want(static_cast<size_t>(rows));
  double loop_s = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < rows; ++r) {
      float s = 0;
      for (int c = 0; c < cols; ++c) s += host[static_cast<size_t>(r) * cols + c];
      want[static_cast<size_t>(r)] = s;
    }
    loop_s = std::min(loop_s, seconds_since(t0));
  }

  OOMB_LAUNCH(rows, kThreads, 0, 0, row_sum_kernel)(x, cols, out);  // warm-up: fiber pool, stacks
  cudaDeviceSynchronize();
  const uint64_t r0 = oomb::emulated_cuda::fiber_resumes();
  const auto t0 = std::chrono::steady_clock::now();
  OOMB_LAUNCH(rows, kThreads, 0, 0, row_sum_kernel)(x, cols, out);
  const cudaError_t e = cudaDeviceSynchronize();
  const double emu_s = seconds_since(t0);
  const uint64_t resumes = oomb::emulated_cuda::fiber_resumes() - r0;
  if (e != cudaSuccess) {
    std::fprintf(stderr, "kernel failed: %s\n", cudaGetErrorString(e));
    return 1;
  }
  std::vector<float> got(static_cast<size_t>(rows));
  cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost);
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    worst = std::max(worst, std::abs(static_cast<double>(got[static_cast<size_t>(r)]) - want[static_cast<size_t>(r)]));
  std::printf("emulated row sum: %d rows x %d, %d threads a block\n", rows, cols, kThreads);
  std::printf("  emulated   %.3f s  %.3g fiber resumes/s  %.3g rows/s  (%llu resumes)\n", emu_s,
              static_cast<double>(resumes) / emu_s, rows / emu_s, static_cast<unsigned long long>(resumes));
  std::printf("  plain loop %.6f s  (baseline, same sums)\n", loop_s);
  std::printf("  ratio emulated / plain loop: %.0fx   max |difference| %.3g\n", emu_s / loop_s, worst);
  cudaFree(x);
  cudaFree(out);
  return worst <= 1e-2 * cols ? 0 : 1;
}
