#pragma once
// y += x, x *= s, dtype conversion, y[r][c] += b[c] (biases), out[c] += sum_r x[r][c] (bias gradients),
// the store of a GEMM's fp32 result into a typed output (plus bias, plus the stored value when
// accumulating; one rounding), all on typed views (executor/cuda/typed.cuh: fp32 math, bf16 loads exact,
// bf16 stores rounded once); and the fp32 -> bf16 conversion of GEMM operands (CudaGemmPrecision::bf16).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_add(Tensor y, ConstTensor x, int64_t n, cudaStream_t s);
void launch_scale(Tensor x, int64_t n, float factor, cudaStream_t s);
// dst = src, converted between dtypes (bf16 -> fp32 exact, fp32 -> bf16 rounded).
void launch_convert(Tensor dst, ConstTensor src, int64_t n, cudaStream_t s);
// y [rows, cols] row-major fp32, b [cols].
void launch_add_bias(float* y, int64_t rows, int64_t cols, ConstTensor b, cudaStream_t s);
// dst [rows, cols] = (accumulate ? dst : 0) + src [rows, cols] (+ b [cols] when b), summed in fp32
// and stored once in dst's dtype.
void launch_store_f32(Tensor dst, const float* src, int64_t rows, int64_t cols, ConstTensor b, bool accumulate,
                      cudaStream_t s);
// x [rows, cols] row-major; out [cols] (fp32) accumulated.
void launch_column_sum_acc(ConstTensor x, int64_t rows, int64_t cols, float* out, cudaStream_t s);
// dst [rows, ld] (bf16 bit patterns, ld >= cols) = src [rows, cols] rounded to nearest even with
// runtime/bf16.h's routine (NaNs kept); the padding columns [cols, ld) are not written.
void launch_to_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld, cudaStream_t s);

}  // namespace oomb::executor::cuda
