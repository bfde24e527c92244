#pragma once
// The contract between the emulated runtime (runtime.cpp, memory.cpp, and the emulated cuBLASLt)
// and the emulated CUPTI activity API (cupti.cpp), which records what the runtime does in the
// toolkit's own record structs (cupti_activity.h) and hands them to the client's buffers.
//
// The runtime reports each API call that queues work or allocates memory (api_call: CUPTI's
// correlation id, the API record and the external correlations in front of it), wraps the work it
// queues (recorded: the kernel, memcpy or memset record with its start and end on the stream's
// thread) and reports allocations and frees (memory). When no activity kind is enabled these cost
// one relaxed load and change nothing.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

namespace oomb::emulated_cuda::activity {

// The API calls that are recorded. CUPTI puts external correlation records only in front of API
// records, so a call's tags reach its work only when its API's records are enabled: RUNTIME for the
// runtime's functions; DRIVER, or cuptiActivityEnableDriverApi of the launch ids, for the driver's
// kernel launch (cuLaunchKernel: how cuBLASLt launches its kernels).
enum class Call : uint8_t {
  launch_kernel, memcpy, memcpy_async, memcpy_batch_async, memset, memset_async,
  malloc, free, malloc_host, host_alloc, free_host, driver_launch_kernel
};

// The correlation id of one API call of the calling thread, with its API record and, before that
// record, one external correlation record per kind whose stack is non-empty (when those kinds are
// enabled). 0 when no activity kind is enabled (nothing is recorded).
uint32_t api_call(Call call);

// What a queued operation is, for its record.
struct Work {
  enum class Type : uint8_t { kernel, memcpy, memset };
  Type type = Type::kernel;
  const char* name = "";      // kernel: the kernel's name (interned by the recorder)
  dim3 grid{1, 1, 1}, block{1, 1, 1};
  int32_t dynamic_shared_bytes = 0;
  enum class Where : uint8_t { device, pinned, pageable };
  Where src = Where::device;  // memcpy
  Where dst = Where::device;  // memcpy, memset
  uint64_t bytes = 0;         // memcpy / memset
  uint64_t copy_count = 1;    // memcpy: copies of a batch folded into this record
  uint32_t value = 0;         // memset
};

// fn, wrapped so that running it on `stream` records `work` (correlated with `correlation`, from
// api_call) with its start and end timestamps; fn itself when correlation is 0.
std::function<void()> recorded(cudaStream_t stream, uint32_t correlation, const Work& work, std::function<void()> fn);

// An allocation or a free of device (cudaMalloc) or pinned host (cudaHostAlloc) memory: a MEMORY2
// record when that kind is enabled.
void memory(bool allocation, bool device, const void* address, uint64_t bytes, uint32_t correlation);

}  // namespace oomb::emulated_cuda::activity
