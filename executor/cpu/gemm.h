#pragma once
// Row-major fp32 GEMM of the CPU backend: C = alpha * op(A) op(B) + beta * C, op = transpose when
// asked. OpenBLAS (cblas_sgemm) when built with it, else Eigen. Multithreaded over pieces of M
// or N fixed by the shape, each a single-threaded GEMM: the result does not depend on the count.
#include <cstdint>

namespace oomb::executor::cpu {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Gives each of the `threads` compute threads the GEMM library's working buffer before any step
// runs (called when a CpuBackend is made). OpenBLAS allocates that buffer (128 MiB, per thread) at
// a thread's first GEMM and, when the allocation fails (an address-space limit, `ulimit -v`),
// retries it forever: a run that would have run out of memory inside its first step spun instead.
// So the address space for the threads' buffers and stacks is reserved first (a PROT_NONE mapping,
// released at once) and std::bad_alloc thrown when it is not there (oomb's exit 3, out of host
// memory); then every thread runs one GEMM, and the buffers stay for the process. Threads already
// given their buffer by an earlier call are not counted again. Without BLAS: nothing to do.
void reserve_gemm_buffers(int threads);

}  // namespace oomb::executor::cpu
