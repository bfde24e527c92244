// The emulated CUDA runtime (minimal first cut: launches run synchronously; streams follow).
#include "executor/emulated_cuda/launch.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace oomb::emulated_cuda {
namespace {

std::mutex g_mutex;
cudaError_t g_last_error = cudaSuccess;
cudaError_t g_sticky_error = cudaSuccess;
std::string g_failure_message;

}  // namespace

cudaError_t submit_launch(const LaunchConfig& config, std::function<cudaError_t()> run) {
  (void)config;
  {
    std::lock_guard lock(g_mutex);
    if (g_sticky_error != cudaSuccess) return g_sticky_error;
  }
  const cudaError_t result = run();
  if (result != cudaSuccess) {
    std::lock_guard lock(g_mutex);
    if (g_sticky_error == cudaSuccess) g_sticky_error = result;
  }
  return cudaSuccess;
}

void report_launch_failure(const std::string& message) {
  std::lock_guard lock(g_mutex);
  if (!g_failure_message.empty()) return;
  g_failure_message = message;
  std::fprintf(stderr, "oomb emulated CUDA: %s\n", message.c_str());
}

std::string last_launch_failure() {
  std::lock_guard lock(g_mutex);
  return g_failure_message;
}

}  // namespace oomb::emulated_cuda

using namespace oomb::emulated_cuda;

extern "C" {

cudaError_t cudaGetLastError(void) {
  std::lock_guard lock(g_mutex);
  if (g_sticky_error != cudaSuccess) return g_sticky_error;
  const cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  std::lock_guard lock(g_mutex);
  return g_sticky_error != cudaSuccess ? g_sticky_error : g_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) { return cudaGetErrorName(error); }

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaPeekAtLastError(); }
cudaError_t cudaDeviceSynchronize(void) { return cudaPeekAtLastError(); }

cudaError_t cudaDeviceReset(void) {
  std::lock_guard lock(g_mutex);
  g_last_error = cudaSuccess;
  g_sticky_error = cudaSuccess;
  g_failure_message.clear();
  return cudaSuccess;
}

}  // extern "C"
