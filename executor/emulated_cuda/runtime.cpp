// Error state, device queries, kernel attributes and launches of the emulated CUDA runtime
// (runtime.h; streams.cpp and memory.cpp hold the rest). Error names and descriptions are the CUDA
// runtime's own, so a failing check in the backend reads as it would on a GPU.
#include <cuda_runtime_api.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "executor/emulated_cuda/activity.h"
#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"

namespace oomb::emulated_cuda {
namespace {

// The device the runtime reports: the limits of an H100/H200 (Hopper, sm_90; models/gpu/h200.json
// for the SM count and, in memory.cpp, the capacity).
constexpr int kMultiProcessors = 132;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxBlockDim[3] = {1024, 1024, 64};
constexpr int kMaxGridDim[3] = {2147483647, 65535, 65535};

// The grid's y and z limit: the hardware's 65,535, or lower with OOMB_EMULATED_MAX_GRID_YZ (1 to
// 65,535), read once. A kernel that caps a grid dimension at the device's limit and strides over
// the rest is then tested past the limit with a few hundred blocks instead of 65,536 (the kernels
// query the limit, executor/cuda/common.cuh); a kernel that does not cap fails its launch.
int max_grid_yz() {
  static const int limit = [] {
    const char* v = std::getenv("OOMB_EMULATED_MAX_GRID_YZ");
    if (!v || !*v) return kMaxGridDim[1];
    int n = 0;
    const std::string_view s(v);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n < 1 || n > kMaxGridDim[1])
      throw std::invalid_argument("OOMB_EMULATED_MAX_GRID_YZ=" + std::string(s) +
                                  ": expected the grid's y and z limit, an integer from 1 to 65535");
    return n;
  }();
  return limit;
}
int max_grid_dim(int i) { return i == 0 ? kMaxGridDim[0] : max_grid_yz(); }
constexpr int kVersion = 13000;  // CUDA 13.0, the toolkit the headers come from

std::atomic<int> g_sticky{cudaSuccess};
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

std::mutex g_failure_mu;
std::string g_failure_message;

struct KernelAttributes {
  int max_dynamic_shared = kSharedMemoryDefaultBytes;
  int carveout = -1;  // cudaSharedmemCarveoutDefault
};
std::mutex g_kernels_mu;
std::unordered_map<const void*, KernelAttributes> g_kernels;

KernelAttributes kernel_attributes(const void* kernel) {
  std::lock_guard lock(g_kernels_mu);
  auto it = g_kernels.find(kernel);
  return it == g_kernels.end() ? KernelAttributes{} : it->second;
}

bool is_sticky(cudaError_t e) {
  // The errors that leave a CUDA context unusable (the runtime documents each as "the process must
  // be terminated and relaunched" or, for the emulation, until cudaDeviceReset).
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

cudaError_t check_config(const LaunchConfig& c) {
  const unsigned block[3] = {c.block.x, c.block.y, c.block.z};
  const unsigned grid[3] = {c.grid.x, c.grid.y, c.grid.z};
  unsigned long long threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (block[i] == 0 || block[i] > static_cast<unsigned>(kMaxBlockDim[i])) return cudaErrorInvalidConfiguration;
    if (grid[i] == 0 || grid[i] > static_cast<unsigned>(max_grid_dim(i))) return cudaErrorInvalidConfiguration;
    threads *= block[i];
  }
  if (threads > static_cast<unsigned long long>(kMaxThreadsPerBlock)) return cudaErrorInvalidConfiguration;
  // Above 48 KiB a kernel needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize); the real runtime
  // answers a request beyond the kernel's limit with "invalid argument".
  if (c.dynamic_shared_bytes > static_cast<size_t>(kernel_attributes(c.kernel).max_dynamic_shared))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

cudaDeviceProp device_properties() {
  cudaDeviceProp p{};
  std::snprintf(p.name, sizeof(p.name), "oomb emulated CUDA device (H200 limits)");
  p.totalGlobalMem = device_memory_capacity();
  p.sharedMemPerBlock = kSharedMemoryDefaultBytes;
  p.regsPerBlock = 65536;
  p.warpSize = 32;
  p.memPitch = 2147483647;
  p.maxThreadsPerBlock = kMaxThreadsPerBlock;
  for (int i = 0; i < 3; ++i) {
    p.maxThreadsDim[i] = kMaxBlockDim[i];
    p.maxGridSize[i] = max_grid_dim(i);
  }
  p.totalConstMem = 65536;
  p.major = 9;
  p.minor = 0;
  p.textureAlignment = 512;
  p.texturePitchAlignment = 32;
  p.multiProcessorCount = kMultiProcessors;
  p.integrated = 0;
  p.canMapHostMemory = 1;
  p.surfaceAlignment = 512;
  p.concurrentKernels = 1;
  p.ECCEnabled = 1;
  p.asyncEngineCount = 2;  // models/gpu/h200.json: copy_engines
  p.unifiedAddressing = 1;
  p.memoryBusWidth = 5120;
  p.l2CacheSize = 50 * 1024 * 1024;
  p.persistingL2CacheMaxSize = 0;
  p.maxThreadsPerMultiProcessor = 2048;
  p.streamPrioritiesSupported = 1;
  p.globalL1CacheSupported = 1;
  p.localL1CacheSupported = 1;
  p.sharedMemPerMultiprocessor = 233472;
  p.regsPerMultiprocessor = 65536;
  p.managedMemory = 1;
  p.hostNativeAtomicSupported = 0;
  p.pageableMemoryAccess = 0;  // a kernel cannot read pageable host memory (the emulation checks it)
  p.concurrentManagedAccess = 1;
  p.computePreemptionSupported = 1;
  p.canUseHostPointerForRegisteredMem = 1;
  p.cooperativeLaunch = 1;
  p.sharedMemPerBlockOptin = kSharedMemoryOptinBytes;
  p.maxBlocksPerMultiProcessor = 32;
  p.reservedSharedMemPerBlock = 1024;
  p.hostRegisterSupported = 1;
  p.memoryPoolsSupported = 1;
  p.clusterLaunch = 1;
  p.unifiedFunctionPointers = 1;
  return p;
}

// cudaGetErrorName / cudaGetErrorString: the runtime's names and descriptions.
struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
#define OOMB_ERR(code, text) {code, #code, text}
constexpr ErrorText kErrors[] = {
    OOMB_ERR(cudaSuccess, "no error"),
    OOMB_ERR(cudaErrorInvalidValue, "invalid argument"),
    OOMB_ERR(cudaErrorMemoryAllocation, "out of memory"),
    OOMB_ERR(cudaErrorInitializationError, "initialization error"),
    OOMB_ERR(cudaErrorCudartUnloading, "driver shutting down"),
    OOMB_ERR(cudaErrorProfilerDisabled, "profiler disabled while using external profiling tool"),
    OOMB_ERR(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    OOMB_ERR(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    OOMB_ERR(cudaErrorInvalidSymbol, "invalid device symbol"),
    OOMB_ERR(cudaErrorInvalidHostPointer, "invalid host pointer"),
    OOMB_ERR(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    OOMB_ERR(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    OOMB_ERR(cudaErrorSynchronizationError, "incorrect use of __syncthreads()"),
    OOMB_ERR(cudaErrorNotYetImplemented, "function not yet implemented"),
    OOMB_ERR(cudaErrorStubLibrary, "CUDA driver is a stub library"),
    OOMB_ERR(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    OOMB_ERR(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver"),
    OOMB_ERR(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"),
    OOMB_ERR(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
    OOMB_ERR(cudaErrorPriorLaunchFailure, "unspecified launch failure in prior launch"),
    OOMB_ERR(cudaErrorInvalidDeviceFunction, "invalid device function"),
    OOMB_ERR(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    OOMB_ERR(cudaErrorInvalidDevice, "invalid device ordinal"),
    OOMB_ERR(cudaErrorStartupFailure, "device init failed"),
    OOMB_ERR(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    OOMB_ERR(cudaErrorDeviceUninitialized, "invalid device context"),
    OOMB_ERR(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"),
    OOMB_ERR(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered"),
    OOMB_ERR(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
    OOMB_ERR(cudaErrorInvalidPtx, "a PTX JIT compilation failed"),
    OOMB_ERR(cudaErrorUnsupportedPtxVersion, "the provided PTX was compiled with an unsupported toolchain."),
    OOMB_ERR(cudaErrorFileNotFound, "file not found"),
    OOMB_ERR(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS"),
    OOMB_ERR(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    OOMB_ERR(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
    OOMB_ERR(cudaErrorSymbolNotFound, "named symbol not found"),
    OOMB_ERR(cudaErrorNotReady, "device not ready"),
    OOMB_ERR(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    OOMB_ERR(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    OOMB_ERR(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    OOMB_ERR(cudaErrorContextIsDestroyed, "context is destroyed"),
    OOMB_ERR(cudaErrorAssert, "device-side assert triggered"),
    OOMB_ERR(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    OOMB_ERR(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    OOMB_ERR(cudaErrorHardwareStackError, "hardware stack error"),
    OOMB_ERR(cudaErrorIllegalInstruction, "an illegal instruction was encountered"),
    OOMB_ERR(cudaErrorMisalignedAddress, "misaligned address"),
    OOMB_ERR(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space"),
    OOMB_ERR(cudaErrorInvalidPc, "invalid program counter"),
    OOMB_ERR(cudaErrorLaunchFailure, "unspecified launch failure"),
    OOMB_ERR(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch"),
    OOMB_ERR(cudaErrorNotPermitted, "operation not permitted"),
    OOMB_ERR(cudaErrorNotSupported, "operation not supported"),
    OOMB_ERR(cudaErrorSystemNotReady, "system not yet initialized"),
    OOMB_ERR(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination"),
    OOMB_ERR(cudaErrorTimeout, "wait operation timed out"),
    OOMB_ERR(cudaErrorInvalidClusterSize, "invalid cluster size"),
    OOMB_ERR(cudaErrorUnknown, "unknown error"),
};
#undef OOMB_ERR

const ErrorText* error_text(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

cudaError_t check_device(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

}  // namespace

cudaError_t detail::fail(cudaError_t e) {
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

cudaError_t detail::sticky_error() { return static_cast<cudaError_t>(g_sticky.load(std::memory_order_acquire)); }

void detail::set_sticky_error(cudaError_t e) {
  int none = cudaSuccess;
  g_sticky.compare_exchange_strong(none, e, std::memory_order_acq_rel);  // the first fault stays
}

void detail::reset_function_attributes() {
  std::lock_guard lock(g_kernels_mu);
  g_kernels.clear();
}

namespace {
// Test switch: OOMB_EMULATED_FAULT_AT_LAUNCH=<n> makes the process's n-th kernel launch (1-based)
// fault the context when its grid runs, as a GPU exception does (cudaErrorLaunchFailure, sticky):
// a device failure in the middle of a step, for the tests of what a run does then.
bool injected_fault() {
  static const int64_t at = [] {
    const char* v = std::getenv("OOMB_EMULATED_FAULT_AT_LAUNCH");
    return v && *v ? std::strtoll(v, nullptr, 10) : int64_t{0};
  }();
  static std::atomic<int64_t> launches{0};
  return at > 0 && launches.fetch_add(1) + 1 == at;
}
}  // namespace

cudaError_t submit_launch(const LaunchConfig& config, std::function<cudaError_t()> run) {
  const uint32_t correlation = activity::api_call(activity::Call::launch_kernel);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  if (const cudaError_t e = check_config(config); e != cudaSuccess) return detail::fail(e);
  auto grid = [run = std::move(run), fault = injected_fault(), name = std::string(config.kernel_name)] {
    if (fault) {
      report_launch_failure(name + ": injected fault (OOMB_EMULATED_FAULT_AT_LAUNCH)");
      detail::set_sticky_error(cudaErrorLaunchFailure);
      return;
    }
    const cudaError_t e = run();
    // A grid that fails (deadlock, a lane missing a rendezvous, a bad address) faults the context
    // as a GPU exception does; any other status is reported as the launch failure it stands for.
    if (e != cudaSuccess) detail::set_sticky_error(is_sticky(e) ? e : cudaErrorLaunchFailure);
  };
  activity::Work work;
  work.name = config.kernel_name;
  work.grid = config.grid;
  work.block = config.block;
  work.dynamic_shared_bytes = static_cast<int32_t>(config.dynamic_shared_bytes);
  return detail::fail(
      detail::enqueue(config.stream, activity::recorded(config.stream, correlation, work, std::move(grid))));
}

cudaError_t submit_library_kernel(const char* name, cudaStream_t stream, void (*fn)(void*), void* data) {
  const uint32_t correlation = activity::api_call(activity::Call::driver_launch_kernel);
  if (!fn) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  activity::Work work;
  work.name = name;
  return detail::fail(detail::enqueue(stream, activity::recorded(stream, correlation, work, [fn, data] { fn(data); })));
}

cudaError_t submit_library_kernel(const char* name, cudaStream_t stream, std::function<cudaError_t()> run) {
  const uint32_t correlation = activity::api_call(activity::Call::driver_launch_kernel);
  if (!run) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  activity::Work work;
  work.name = name;
  auto kernel = [run = std::move(run)] {
    const cudaError_t e = run();
    if (e != cudaSuccess) detail::set_sticky_error(is_sticky(e) ? e : cudaErrorLaunchFailure);
  };
  return detail::fail(detail::enqueue(stream, activity::recorded(stream, correlation, work, std::move(kernel))));
}

void report_launch_failure(const std::string& message) {
  std::lock_guard lock(g_failure_mu);
  if (!g_failure_message.empty()) return;  // the first failure explains the sticky error
  g_failure_message = message;
  std::fprintf(stderr, "oomb emulated CUDA: kernel failed: %s\n", message.c_str());
}

std::string last_launch_failure() {
  std::lock_guard lock(g_failure_mu);
  return g_failure_message;
}

}  // namespace oomb::emulated_cuda

using namespace oomb::emulated_cuda;

extern "C" {

cudaError_t cudaGetLastError(void) {
  // A sticky error is never cleared; any other is returned once.
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return e;
  return std::exchange(t_last_error, cudaSuccess);
}

cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t e = detail::sticky_error();
  return e != cudaSuccess ? e : t_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* t = error_text(error);
  return t ? t->name : "unrecognized error code";
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* t = error_text(error);
  return t ? t->text : "unrecognized error code";
}

cudaError_t cudaDeviceSynchronize(void) {
  detail::synchronize_device();
  const cudaError_t e = detail::sticky_error();
  return e == cudaSuccess ? cudaSuccess : detail::fail(e);
}

cudaError_t cudaDeviceReset(void) {
  // Waits for the device, then forgets it: streams, events, allocations, kernel attributes, the
  // sticky error and its message, so a test can go on after a deliberate fault.
  detail::reset_streams_and_events();
  detail::reset_memory();
  detail::reset_function_attributes();
  g_sticky.store(cudaSuccess, std::memory_order_release);
  {
    std::lock_guard lock(g_failure_mu);
    g_failure_message.clear();
  }
  t_last_error = cudaSuccess;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return detail::fail(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (check_device(device) != cudaSuccess) return detail::fail(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return detail::fail(cudaErrorInvalidValue);
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return detail::fail(cudaErrorInvalidValue);
  if (check_device(device) != cudaSuccess) return detail::fail(cudaErrorInvalidDevice);
  *prop = device_properties();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return detail::fail(cudaErrorInvalidValue);
  if (check_device(device) != cudaSuccess) return detail::fail(cudaErrorInvalidDevice);
  const cudaDeviceProp p = device_properties();
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrTotalConstantMemory: *value = static_cast<int>(p.totalConstMem); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrIntegrated: *value = p.integrated; break;
    case cudaDevAttrCanMapHostMemory: *value = p.canMapHostMemory; break;
    case cudaDevAttrConcurrentKernels: *value = p.concurrentKernels; break;
    case cudaDevAttrEccEnabled: *value = p.ECCEnabled; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrAsyncEngineCount: *value = p.asyncEngineCount; break;
    case cudaDevAttrUnifiedAddressing: *value = p.unifiedAddressing; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrStreamPrioritiesSupported: *value = p.streamPrioritiesSupported; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
    case cudaDevAttrManagedMemory: *value = p.managedMemory; break;
    case cudaDevAttrPageableMemoryAccess: *value = p.pageableMemoryAccess; break;
    case cudaDevAttrCanUseHostPointerForRegisteredMem: *value = p.canUseHostPointerForRegisteredMem; break;
    case cudaDevAttrCooperativeLaunch: *value = p.cooperativeLaunch; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrReservedSharedMemoryPerBlock: *value = static_cast<int>(p.reservedSharedMemPerBlock); break;
    case cudaDevAttrMemoryPoolsSupported: *value = p.memoryPoolsSupported; break;
    case cudaDevAttrClusterLaunch: *value = p.clusterLaunch; break;
    default: return detail::fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return detail::fail(cudaErrorInvalidValue);
  *driverVersion = kVersion;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (!runtimeVersion) return detail::fail(cudaErrorInvalidValue);
  *runtimeVersion = kVersion;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return detail::fail(cudaErrorInvalidDeviceFunction);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  std::lock_guard lock(g_kernels_mu);
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      // Never above the device's opt-in maximum (static shared memory is the device side's to add).
      if (value < 0 || value > kSharedMemoryOptinBytes) return detail::fail(cudaErrorInvalidValue);
      g_kernels[func].max_dynamic_shared = value;
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      // A percentage of the maximum, or -1 for the default: only a hint.
      if (value < -1 || value > 100) return detail::fail(cudaErrorInvalidValue);
      g_kernels[func].carveout = value;
      return cudaSuccess;
    default:
      return detail::fail(cudaErrorNotSupported);
  }
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (!attr) return detail::fail(cudaErrorInvalidValue);
  if (!func) return detail::fail(cudaErrorInvalidDeviceFunction);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  const KernelAttributes k = kernel_attributes(func);
  *attr = cudaFuncAttributes{};
  attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
  attr->numRegs = 32;
  attr->ptxVersion = 90;  // compiled for sm_90, as the GPU build's default architecture
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = k.max_dynamic_shared;
  attr->preferredShmemCarveout = k.carveout;
  return cudaSuccess;
}

}  // extern "C"
