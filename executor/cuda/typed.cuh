#pragma once
// Typed storage in kernels (executor/runtime/backend.h Tensor / ConstTensor): a device view of fp32
// or bf16 elements that loads to fp32 (bf16: exact) and stores from fp32 (bf16: rounded to nearest
// even with runtime/bf16.h's routine, bit for bit the CPU backend's rounding). The dtype is a
// runtime flag rather than a template parameter: every kernel takes any mix of dtypes without an
// instantiation per combination, the branch is uniform across the grid, and with fp32 views the
// kernels do exactly the fp32 arithmetic they did before typed storage. Included by .cu files only.
#include <cuda_runtime.h>

#include <cstdint>

#include "executor/runtime/backend.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cuda {

struct InView {
  const void* p = nullptr;
  bool bf16 = false;
  __device__ __forceinline__ float operator[](int64_t i) const {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  __host__ __device__ explicit operator bool() const { return p != nullptr; }
};

struct OutView {
  void* p = nullptr;
  bool bf16 = false;
  __device__ __forceinline__ float load(int64_t i) const {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
  }
  __device__ __forceinline__ void store(int64_t i, float x) const {
    if (bf16) static_cast<uint16_t*>(p)[i] = f32_to_bf16(x);
    else static_cast<float*>(p)[i] = x;
  }
  __host__ __device__ explicit operator bool() const { return p != nullptr; }
};

inline InView view(ConstTensor t) { return {t.data, t.dtype == DType::bf16}; }
inline OutView view(Tensor t) { return {t.data, t.dtype == DType::bf16}; }

}  // namespace oomb::executor::cuda
