#pragma once
// The emulated CUDA runtime's own surface: what the device side and the tests need beyond the
// public CUDA runtime API, which runtime.cpp (errors, device queries, launches), streams.cpp
// (streams, events, host functions) and memory.cpp (allocations, copies, memset) define with the
// toolkit's prototypes and extern "C" linkage, in place of libcudart.
//
// Model: one device (0); device memory is host memory the runtime tracks, so device, pinned and
// pageable pointers share one address space (unified addressing). Each stream is an in-order queue
// served by its own worker thread, asynchronous to the host; the legacy default stream orders with
// the blocking streams as CUDA documents.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace oomb::emulated_cuda {

// True when p lies inside a live cudaMalloc allocation or a cudaHostAlloc / cudaMallocHost one
// (pinned host memory is device-accessible through unified addressing); false for pageable host
// memory and null. A kernel handed any other pointer fails as on a GPU.
bool device_accessible(const void* p);

// Device memory capacity in bytes: OOMB_EMULATED_GPU_MEMORY_BYTES, else the H200's. Tests set it;
// 0 restores the default. Allocations already made stay.
void set_device_memory_capacity(size_t bytes);
size_t device_memory_capacity();
// Bytes of live cudaMalloc allocations (each rounded up to 256 B).
size_t device_memory_in_use();

// The device's opt-in maximum of dynamic shared memory per block (227 KiB on H100/H200), and the
// limit without opt-in.
inline constexpr int kSharedMemoryOptinBytes = 232448;
inline constexpr int kSharedMemoryDefaultBytes = 49152;

// Internals shared by runtime.cpp, streams.cpp and memory.cpp.
namespace detail {

// Records e as this host thread's last error (cudaGetLastError) unless it is cudaSuccess or
// cudaErrorNotReady (a status, not an error), and returns it.
cudaError_t fail(cudaError_t e);
// The context's sticky error (cudaSuccess when none): once set, queued work is skipped and every
// call that touches the device returns it until cudaDeviceReset.
cudaError_t sticky_error();
void set_sticky_error(cudaError_t e);

// The completion of one queued operation; `when` is stamped (steady clock) as it completes.
struct Mark {
  bool done = false;
  std::chrono::steady_clock::time_point when{};
};
using MarkPtr = std::shared_ptr<Mark>;

// Queues fn on the stream (0, cudaStreamLegacy and cudaStreamPerThread name the legacy default
// stream); it runs after the stream's earlier work, the marks in `after`, and the legacy-stream
// ordering. cudaErrorInvalidResourceHandle for an unknown stream. `done` receives its completion.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn, MarkPtr* done = nullptr,
                    std::vector<MarkPtr> after = {});
// Blocks the calling host thread until the mark completes (null: at once).
void wait(const MarkPtr& mark);
// Waits for all work queued so far on every stream.
void synchronize_device();
// cudaDeviceReset's share of each file: streams and events destroyed (after draining), every
// allocation freed, kernel attributes forgotten.
void reset_streams_and_events();
void reset_memory();
void reset_function_attributes();

}  // namespace detail
}  // namespace oomb::emulated_cuda
