#pragma once
// The contract between the emulated device (device.h, grid.cpp: blocks, fibers, barriers, warp
// rendezvous) and the emulated runtime (runtime.cpp: streams, events, memory, errors). Both live in
// the shared library oomb_emulated_cuda; the fake cuBLASLt (cublaslt.cpp) reaches the same streams
// through the public cudaLaunchHostFunc.
//
// A kernel launch (OOMB_LAUNCH in device.h) builds a LaunchConfig and a closure that runs the whole
// grid, and hands both to submit_launch. The runtime checks the configuration the way the real
// runtime does (block <= 1024 threads and within 1024 x 1024 x 64, grid x <= 2^31 - 1, y and z <=
// 65,535, dynamic shared memory <= 48 KiB unless cudaFuncSetAttribute raised the kernel's
// MaxDynamicSharedMemorySize, and never above the device's opt-in maximum; a sticky error already
// set), returning the error a real launch returns (and recording it for cudaGetLastError); on
// success it queues `run` on the stream, where it runs asynchronously to the caller, in stream order.
// A non-success result of `run` (a deadlock, a lane that never reaches a rendezvous) becomes the
// context's sticky error, with the message from report_launch_failure.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

namespace oomb::emulated_cuda {

struct LaunchConfig {
  const char* kernel_name = "";   // the launch expression as written, e.g. "topk_kernel"
  const void* kernel = nullptr;   // the kernel's address: the key of cudaFuncSetAttribute
  dim3 grid{1, 1, 1};
  dim3 block{1, 1, 1};
  size_t dynamic_shared_bytes = 0;
  cudaStream_t stream = nullptr;
};

cudaError_t submit_launch(const LaunchConfig& config, std::function<cudaError_t()> run);

// A kernel of a library (the emulated cuBLASLt), launched through the driver as the real library
// launches its kernels: fn(data) runs in stream order on `stream`, and CUPTI records it as a kernel
// named `name` under a driver cuLaunchKernel call (activity.h). The errors of cudaLaunchHostFunc.
cudaError_t submit_library_kernel(const char* name, cudaStream_t stream, void (*fn)(void*), void* data);
// The same for a library kernel that can fail (the emulated NCCL's collectives): a non-success
// result of `run` faults the context as a failing grid does (call report_launch_failure first).
cudaError_t submit_library_kernel(const char* name, cudaStream_t stream, std::function<cudaError_t()> run);

// Called by a failing grid (on the stream's worker) before it returns its error: the message
// (kernel, block, thread and what it waited for) is printed to stderr once and kept with the sticky
// error, for tests to read.
void report_launch_failure(const std::string& message);
// The message of the last launch failure since the last cudaDeviceReset ("" when none).
std::string last_launch_failure();

}  // namespace oomb::emulated_cuda
