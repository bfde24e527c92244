#include "executor/cuda/device_info.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "core/error.h"

namespace oomb::executor {

CudaDeviceInfo cuda_device_info(int device) {
  cudaDeviceProp p{};
  const cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("--backend", "cuda",
                std::string("cannot query CUDA device ") + std::to_string(device) + ": " + cudaGetErrorString(e),
                "use --backend cpu");
  }
  CudaDeviceInfo i;
  i.name = p.name;
  i.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
  i.sm_count = p.multiProcessorCount;
  i.compute_capability = p.major * 10 + p.minor;
  i.max_grid_yz = std::min(p.maxGridSize[1], p.maxGridSize[2]);
  return i;
}

int64_t cuda_device_free_bytes() {
  size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error("--backend", "cuda", std::string("cannot query the CUDA device's free memory: ") + cudaGetErrorString(e),
                "use --backend cpu");
  }
  return static_cast<int64_t>(free);
}

}  // namespace oomb::executor
