#pragma once
// Row-major fp32 GEMM of the CPU backend: C = alpha * op(A) op(B) + beta * C, op = transpose when
// asked. OpenBLAS (cblas_sgemm) when built with it, else Eigen. Multithreaded over pieces of M
// or N fixed by the shape, each a single-threaded GEMM: the result does not depend on the count.
#include <cstdint>

namespace oomb::executor::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace oomb::executor::cpu
