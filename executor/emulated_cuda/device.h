#pragma once
// The emulated CUDA device, force-included (-include) before a .cu file compiled as host C++ (with
// -ffp-contract=off: every float operation rounds once, as written; nvcc's default --fmad=true may
// fuse a * b + c into one rounding, so a GPU can differ in the last place where the source does not
// spell the operation with an _rn intrinsic or fmaf).
//
// Order matters. The toolkit headers the kernels use come first and take their host paths (no
// __CUDACC__, no __CUDA_ARCH__ yet), so the types are the toolkit's own and host code sees the same
// declarations as under nvcc. Then the execution-space keywords become host C++, __CUDA_ARCH__ is
// defined (900: the tensor-core kernels compile their bodies), and the built-ins read the CUDA
// thread whose fiber runs (grid.h): blocks run one at a time on their stream's worker thread, so
// function-static `__shared__` variables are `static thread_local`.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>  // on the host, only its include guard: wmma.h supplies nvcuda::wmma

#include <atomic>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "executor/emulated_cuda/grid.h"
#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/wmma.h"

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time per OS thread and all its fibers share that thread: per-block storage.
#define __shared__ static thread_local
#define __CUDA_ARCH__ 900

#define threadIdx (::oomb::emulated_cuda::current_thread().thread_idx)
#define blockIdx (::oomb::emulated_cuda::current_thread().block_idx)
#define blockDim (::oomb::emulated_cuda::current_thread().block_dim)
#define gridDim (::oomb::emulated_cuda::current_thread().grid_dim)
inline constexpr int warpSize = 32;

// ---------------------------------------------------------------- launches

namespace oomb::emulated_cuda {

template <class T>
T pass_argument(T value) {  // the implicit conversions of a call
  return value;
}

// OOMB_LAUNCH's object: the kernel and the launch configuration; calling it converts the arguments
// to the kernel's parameter types, as a call would, and queues the grid on the stream
// (submit_launch: errors as a real launch gives them, through cudaGetLastError).
template <class... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, const char* name)
      : kernel_(kernel) {
    config_.kernel_name = name;
    config_.kernel = reinterpret_cast<const void*>(kernel);
    config_.grid = grid;
    config_.block = block;
    config_.dynamic_shared_bytes = shared_bytes;
    config_.stream = stream;
  }

  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "a kernel launch passes one argument per parameter");
    submit_launch(config_, [config = config_, call = Call{kernel_, std::tuple<P...>(pass_argument<P>(
                                                                        std::forward<A>(args))...)}] {
      return call.run(config);
    });
  }

 private:
  struct Call {
    void (*kernel)(P...);
    std::tuple<P...> args;

    cudaError_t run(const LaunchConfig& config) const {
      const cudaError_t e = check_pointers(config, std::index_sequence_for<P...>{});
      return e != cudaSuccess ? e : run_grid(config, &Call::entry, this);
    }
    template <size_t... I>
    cudaError_t check_pointers(const LaunchConfig& config, std::index_sequence<I...>) const {
      cudaError_t e = cudaSuccess;
      ((e = e != cudaSuccess ? e : check(config, I, std::get<I>(args))), ...);
      return e;
    }
    template <class T>
    static cudaError_t check(const LaunchConfig& config, size_t index, const T& arg) {
      if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>)
        return check_pointer_argument(config, index, arg);
      return cudaSuccess;
    }
    // One CUDA thread: the kernel called with its own copies of the arguments.
    static void entry(const void* self) {
      const Call& c = *static_cast<const Call*>(self);
      std::apply(c.kernel, c.args);
    }
  };

  void (*kernel_)(P...);
  LaunchConfig config_;
};

}  // namespace oomb::emulated_cuda

// The kernel-pointer forms of these, which cuda_runtime.h declares for nvcc only (__CUDACC__).
template <class T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
template <class T>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, T* kernel) {
  return ::cudaFuncGetAttributes(attributes, reinterpret_cast<const void*>(kernel));
}

// executor/cuda/common.cuh keeps the nvcc spellings (<<<>>>, extern __shared__) for these.
#define OOMB_LAUNCH(grid, block, smem, stream, ...) \
  ::oomb::emulated_cuda::Launcher(__VA_ARGS__, (grid), (block), (smem), (stream), #__VA_ARGS__)
#define OOMB_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::oomb::emulated_cuda::dynamic_shared_memory())
#define OOMB_DYNAMIC_SHARED_ALIGNED(T, name, align)                                           \
  static_assert((align) <= 256, "the emulated dynamic shared memory is 256-byte aligned"); \
  OOMB_DYNAMIC_SHARED(T, name)

// ---------------------------------------------------------------- synchronisation

inline void __syncthreads() { ::oomb::emulated_cuda::sync_block(); }
inline int __syncthreads_or(int predicate) { return ::oomb::emulated_cuda::sync_block_or(predicate); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::oomb::emulated_cuda::sync_warp(mask); }

namespace oomb::emulated_cuda {
template <class T>
concept ShuffleType = std::same_as<T, int> || std::same_as<T, unsigned> || std::same_as<T, long> ||
                      std::same_as<T, unsigned long> || std::same_as<T, long long> ||
                      std::same_as<T, unsigned long long> || std::same_as<T, float> || std::same_as<T, double>;

template <ShuffleType T>
T shuffle_value(unsigned mask, T var, Collective what, const char* name, int arg, int width) {
  shuffle(mask, what, name, &var, sizeof var, arg, width);
  return var;
}
}  // namespace oomb::emulated_cuda

template <oomb::emulated_cuda::ShuffleType T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return oomb::emulated_cuda::shuffle_value(mask, var, oomb::emulated_cuda::Collective::shfl, "__shfl_sync", src_lane,
                                            width);
}
template <oomb::emulated_cuda::ShuffleType T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return oomb::emulated_cuda::shuffle_value(mask, var, oomb::emulated_cuda::Collective::shfl_up, "__shfl_up_sync",
                                            static_cast<int>(delta), width);
}
template <oomb::emulated_cuda::ShuffleType T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return oomb::emulated_cuda::shuffle_value(mask, var, oomb::emulated_cuda::Collective::shfl_down,
                                            "__shfl_down_sync", static_cast<int>(delta), width);
}
template <oomb::emulated_cuda::ShuffleType T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return oomb::emulated_cuda::shuffle_value(mask, var, oomb::emulated_cuda::Collective::shfl_xor, "__shfl_xor_sync",
                                            lane_mask, width);
}

// ---------------------------------------------------------------- atomics
// Relaxed, as CUDA's: other streams run the same memory concurrently on other OS threads.

inline int atomicAdd(int* address, int val) {
  return std::atomic_ref<int>(*address).fetch_add(val, std::memory_order_relaxed);
}
inline unsigned atomicAdd(unsigned* address, unsigned val) {
  return std::atomic_ref<unsigned>(*address).fetch_add(val, std::memory_order_relaxed);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long val) {
  return std::atomic_ref<unsigned long long>(*address).fetch_add(val, std::memory_order_relaxed);
}
inline float atomicAdd(float* address, float val) {
  return std::atomic_ref<float>(*address).fetch_add(val, std::memory_order_relaxed);
}
inline double atomicAdd(double* address, double val) {
  return std::atomic_ref<double>(*address).fetch_add(val, std::memory_order_relaxed);
}

// ---------------------------------------------------------------- loads, bit casts, rounding

template <class T>
T __ldg(const T* p) {
  return *p;
}

inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }

// IEEE single precision, round to nearest even: what host float arithmetic does (no contraction).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

// ---------------------------------------------------------------- CUDA's global min and max
// As the toolkit's math headers overload them: mixed signed and unsigned operands of one width
// compare as unsigned, a float with a double as double, floats as fminf / fmaxf.

inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned min(int a, unsigned b) { return min(static_cast<unsigned>(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, static_cast<unsigned>(b)); }
inline long min(long a, long b) { return a < b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long min(long a, unsigned long b) { return min(static_cast<unsigned long>(a), b); }
inline unsigned long min(unsigned long a, long b) { return min(a, static_cast<unsigned long>(b)); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long min(long long a, unsigned long long b) { return min(static_cast<unsigned long long>(a), b); }
inline unsigned long long min(unsigned long long a, long long b) { return min(a, static_cast<unsigned long long>(b)); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double min(float a, double b) { return std::fmin(static_cast<double>(a), b); }
inline double min(double a, float b) { return std::fmin(a, static_cast<double>(b)); }

inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned max(int a, unsigned b) { return max(static_cast<unsigned>(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, static_cast<unsigned>(b)); }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long max(long a, unsigned long b) { return max(static_cast<unsigned long>(a), b); }
inline unsigned long max(unsigned long a, long b) { return max(a, static_cast<unsigned long>(b)); }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long max(long long a, unsigned long long b) { return max(static_cast<unsigned long long>(a), b); }
inline unsigned long long max(unsigned long long a, long long b) { return max(a, static_cast<unsigned long long>(b)); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double max(float a, double b) { return std::fmax(static_cast<double>(a), b); }
inline double max(double a, float b) { return std::fmax(a, static_cast<double>(b)); }
