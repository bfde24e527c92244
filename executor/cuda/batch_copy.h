#pragma once
// What a cudaMemcpyBatchAsync status means for the backend's sparse copies, in plain C++ (no CUDA
// header) so that the policy is tested on the host with injected statuses
// (tests/cuda/backend_test.cpp). Only "this runtime or driver cannot do it" turns batching off (the
// regions then go one cudaMemcpyAsync each); any other failure (a bad argument, a sticky device
// error) is a fault, which the backend throws with the call named, never swallowed.
#include <cstdint>

namespace oomb::executor::cuda {

// cudaError_t values the policy names (driver_types.h; batch_copy.cpp checks them against it).
inline constexpr int kCudaSuccess = 0;
inline constexpr int kCudaErrorNotYetImplemented = 31;
inline constexpr int kCudaErrorCallRequiresNewerDriver = 36;
inline constexpr int kCudaErrorNotSupported = 801;

enum class BatchCopyStatus { issued, unsupported, fault };

// cuda_status: a cudaError_t. Success -> issued; not supported, requires a newer driver, not yet
// implemented -> unsupported; anything else -> fault.
BatchCopyStatus classify_batch_copy(int cuda_status);

}  // namespace oomb::executor::cuda
