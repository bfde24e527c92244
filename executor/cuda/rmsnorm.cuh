#pragma once
// RMSNorm (fp32 math, row sums of squares in double like the CPU reference):
// y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps) saved per row; backward
// dx += rstd * w * dy - (mean(w * dy * x) * rstd^3) * x, dw += sum_rows dy * x * rstd.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace oomb::executor::cuda {

void launch_rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd,
                        cudaStream_t s);
void launch_rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                        float* dx_acc, float* dw_acc, cudaStream_t s);

}  // namespace oomb::executor::cuda
