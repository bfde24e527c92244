#pragma once
// RMSNorm (fp32 math, row sums of squares in double like the CPU reference):
// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) saved per row; backward
// dx += rstd * w * dy - (mean(w * dy * x) * rstd^3) * x, dw += sum_rows dy * x * rstd.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

// x, w, y, dy, dx, dw of either storage dtype (executor/cuda/typed.cuh); rstd fp32. A bf16 dw_acc needs
// dw_scratch, dim fp32 elements of device scratch (the column sums before dw's one rounding).
void launch_rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y, float* rstd,
                        cudaStream_t s);
void launch_rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows, int64_t dim,
                        Tensor dx_acc, Tensor dw_acc, float* dw_scratch, cudaStream_t s);

}  // namespace oomb::executor::cuda
