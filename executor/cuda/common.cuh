#pragma once
// Device helpers shared by the kernel files (included by .cu files only).
#include <cuda_runtime.h>

#include <cstdint>

#include "executor/cuda/cuda_check.h"

// A kernel launch and a dynamic shared-memory array, written once for two compilers: under nvcc
// they are the `<<<>>>` launch and `extern __shared__` declaration they spell; on the emulated
// device (executor/emulated_cuda/device.h, included before this file) a launch queues the grid on
// the emulated stream and the array is the block's exact-size buffer. The kernel expression comes
// last because a template argument list may contain commas:
//   OOMB_LAUNCH(grid, block, smem_bytes, stream, kernel<A, B>)(args...);
#ifndef OOMB_LAUNCH
#define OOMB_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define OOMB_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#define OOMB_DYNAMIC_SHARED_ALIGNED(T, name, align) extern __shared__ __align__(align) T name[]
#endif

namespace oomb::executor::cuda {

constexpr int kThreads = 256;

// The device's grid limit in y and z (65,535 on every CUDA GPU), queried once. A kernel whose y
// grows with the problem caps it here and strides over the rest (launch_shape.h); the emulated
// device can report a lower limit (OOMB_EMULATED_MAX_GRID_YZ), so that tests/cuda runs those
// strides past the limit with few blocks.
inline int64_t grid_yz_limit() {
  static const int64_t limit = [] {
    int device = 0, y = 0, z = 0;
    OOMB_CUDA_CHECK(cudaGetDevice(&device));
    OOMB_CUDA_CHECK(cudaDeviceGetAttribute(&y, cudaDevAttrMaxGridDimY, device));
    OOMB_CUDA_CHECK(cudaDeviceGetAttribute(&z, cudaDevAttrMaxGridDimZ, device));
    return int64_t{y < z ? y : z};
  }();
  return limit;
}

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b > (int64_t{1} << 20) ? (int64_t{1} << 20) : b);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `shared` holds 32 values of T.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T t = lane < warps ? shared[lane] : T(0);
  return warp_sum(t);
}

__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float t = lane < warps ? shared[lane] : -__int_as_float(0x7f800000);
  return warp_max(t);
}

}  // namespace oomb::executor::cuda
