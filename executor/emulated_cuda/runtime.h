#pragma once
// The emulated runtime's internal surface: what the device side and the tests need beyond the
// public CUDA runtime API (which runtime.cpp defines with the toolkit's prototypes).
#include <cuda_runtime_api.h>

#include <cstddef>

namespace oomb::emulated_cuda {

// True when p lies inside a live cudaMalloc allocation or a cudaHostAlloc / cudaMallocHost one
// (pinned host memory is device-accessible through unified addressing); false for pageable host
// memory and null. A kernel handed any other pointer fails as on a GPU.
bool device_accessible(const void* p);

}  // namespace oomb::emulated_cuda
