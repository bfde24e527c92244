#include "executor/cuda/cuda_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace oomb::executor::cuda {

void check_failed(const char* call, const char* status, const char* message, const char* file, int line) {
  const std::string text = std::string("CUDA call failed: ") + call + " -> " + (status ? status : "?") + " (" +
                           (message ? message : "") + ") at " + file + ":" + std::to_string(line);
  std::fprintf(stderr, "oomb: %s\n", text.c_str());
  throw std::runtime_error(text);
}

void launch_check(const char* kernel, const char* file, int line) {
  static const bool sync = [] {
    const char* v = std::getenv("OOMB_CUDA_SYNC_CHECK");
    return v && std::strcmp(v, "0") != 0;
  }();
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    const std::string call = std::string("launch of ") + kernel;
    check_failed(call.c_str(), cudaGetErrorName(e), cudaGetErrorString(e), file, line);
  }
}

}  // namespace oomb::executor::cuda
