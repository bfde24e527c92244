#pragma once
// The one CUDA status macro: OOMB_CUDA_CHECK(call) evaluates a CUDA runtime (or cuBLASLt, CUPTI)
// call and, when it fails, prints the call text with the status name and throws. Every kernel
// launch is followed by OOMB_CUDA_LAUNCH_CHECK(name) (cudaGetLastError; with the environment
// variable OOMB_CUDA_SYNC_CHECK=1 also a device synchronisation, so that an asynchronous fault is
// reported at the launch that caused it).
#include <cuda_runtime_api.h>

namespace oomb::executor::cuda {

[[noreturn]] void check_failed(const char* call, const char* status, const char* message, const char* file,
                               int line);
void launch_check(const char* kernel, const char* file, int line);

// Status adapters; other status types (cublasStatus_t, CUptiResult) add overloads of these three
// in this namespace before they use the macro.
inline bool status_ok(cudaError_t s) { return s == cudaSuccess; }
inline const char* status_name(cudaError_t s) { return cudaGetErrorName(s); }
inline const char* status_message(cudaError_t s) { return cudaGetErrorString(s); }

}  // namespace oomb::executor::cuda

#define OOMB_CUDA_CHECK(call)                                                                           \
  do {                                                                                                  \
    const auto oomb_status_ = (call);                                                                   \
    if (!::oomb::executor::cuda::status_ok(oomb_status_))                                               \
      ::oomb::executor::cuda::check_failed(#call, ::oomb::executor::cuda::status_name(oomb_status_),    \
                                           ::oomb::executor::cuda::status_message(oomb_status_), __FILE__, \
                                           __LINE__);                                                   \
  } while (0)

#define OOMB_CUDA_LAUNCH_CHECK(kernel) ::oomb::executor::cuda::launch_check(kernel, __FILE__, __LINE__)
