#pragma once
// Facts about a CUDA device that callers outside the backend need (oomb calibrate --backend cuda
// writes them into the device profile). No CUDA header: usable from the CLI.
#include <cstdint>
#include <string>

namespace oomb::executor {

struct CudaDeviceInfo {
  std::string name;             // e.g. "NVIDIA H200"
  int64_t memory_bytes = 0;     // total global memory
  int64_t sm_count = 0;
  int compute_capability = 0;   // major * 10 + minor
  // A grid's y and z limit in blocks: 65,535 on every CUDA GPU; the emulated device reports a lower
  // one under OOMB_EMULATED_MAX_GRID_YZ (the kernels cap their grids at it, common.cuh).
  int64_t max_grid_yz = 0;
};

// Throws oomb::Error naming --backend when the device cannot be queried.
CudaDeviceInfo cuda_device_info(int device = 0);
// The current device's free memory (cudaMemGetInfo): what every allocation on it, by any library,
// leaves. Throws oomb::Error naming --backend when it cannot be queried.
int64_t cuda_device_free_bytes();

}  // namespace oomb::executor
