#pragma once
// y += x, x *= s, y[r][c] += b[c] (biases), and out[c] += sum_r x[r][c] (bias gradients): fp32; and
// the fp32 -> bf16 conversion of GEMM operands (CudaGemmPrecision::bf16).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace oomb::executor::cuda {

void launch_add(float* y, const float* x, int64_t n, cudaStream_t s);
void launch_scale(float* x, int64_t n, float factor, cudaStream_t s);
// y [rows, cols] row-major, b [cols].
void launch_add_bias(float* y, int64_t rows, int64_t cols, const float* b, cudaStream_t s);
// x [rows, cols] row-major; out [cols] accumulated.
void launch_column_sum_acc(const float* x, int64_t rows, int64_t cols, float* out, cudaStream_t s);
// dst [rows, ld] (bf16 bit patterns, ld >= cols) = src [rows, cols] rounded to nearest even with
// runtime/bf16.h's routine (NaNs kept); the padding columns [cols, ld) are not written.
void launch_to_bf16(const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld, cudaStream_t s);

}  // namespace oomb::executor::cuda
