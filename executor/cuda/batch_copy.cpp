#include "executor/cuda/batch_copy.h"

#include <cuda_runtime_api.h>

namespace oomb::executor::cuda {

static_assert(kCudaSuccess == cudaSuccess);
static_assert(kCudaErrorNotYetImplemented == cudaErrorNotYetImplemented);
static_assert(kCudaErrorCallRequiresNewerDriver == cudaErrorCallRequiresNewerDriver);
static_assert(kCudaErrorNotSupported == cudaErrorNotSupported);

BatchCopyStatus classify_batch_copy(int cuda_status) {
  switch (cuda_status) {
    case kCudaSuccess:
      return BatchCopyStatus::issued;
    case kCudaErrorNotSupported:
    case kCudaErrorCallRequiresNewerDriver:
    case kCudaErrorNotYetImplemented:
      return BatchCopyStatus::unsupported;
    default:
      return BatchCopyStatus::fault;
  }
}

}  // namespace oomb::executor::cuda
