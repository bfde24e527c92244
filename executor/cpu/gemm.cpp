#include "executor/cpu/gemm.h"

#include <omp.h>

#include <algorithm>

#include "executor/cpu/eigen_util.h"
#include "executor/cpu/parallel.h"
#ifdef OOMB_HAVE_BLAS
#include <cblas.h>
#endif

namespace oomb::executor::cpu {

namespace {

// One single-threaded GEMM (inside the parallel loop below, OpenBLAS's OpenMP build runs on the
// calling thread; the Eigen build does not parallelise, EIGEN_DONT_PARALLELIZE).
void gemm_1(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef OOMB_HAVE_BLAS
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
#else
  auto C = block(c, m, n, ldc);
  if (beta == 0) C.setZero();
  else if (beta != 1) C *= beta;
  if (k <= 0) return;
  const auto A = block(a, ta ? k : m, ta ? m : k, lda);
  const auto B = block(b, tb ? n : k, tb ? k : n, ldb);
  if (ta && tb) C.noalias() += alpha * (A.transpose() * B.transpose());
  else if (ta) C.noalias() += alpha * (A.transpose() * B);
  else if (tb) C.noalias() += alpha * (A * B.transpose());
  else C.noalias() += alpha * (A * B);
#endif
}

// Pieces of the split dimension: at least 128 (BLAS tiles stay full), at most 16 pieces, a
// multiple of 64. Fixed by the shape: OpenBLAS's own threading splits by the thread count and its
// edge kernels sum in another order, so its results change with the count; ours do not.
int64_t piece_of(int64_t d) { return std::max<int64_t>(128, (d / 16 + 63) / 64 * 64); }

// OpenBLAS's OpenMP build threads a call made outside an active parallel region at
// omp_get_max_threads(): a call we run on one thread says so for its duration.
class OneThread {
 public:
  OneThread() : saved_(omp_in_parallel() ? 0 : omp_get_max_threads()) {
    if (saved_ > 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (saved_ > 1) omp_set_num_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const bool split_m = m >= n;
  const int64_t d = split_m ? m : n, piece = piece_of(d), pieces = (d + piece - 1) / piece;
  const bool parallel = pieces > 1 && 2 * m * n * std::max<int64_t>(k, 1) >= kParallelMinFlops;
  auto piece_gemm = [&](int64_t p) {
    const int64_t s0 = p * piece, s1 = std::min(d, s0 + piece);
    if (split_m)  // rows s0..s1 of C and of op(A)
      gemm_1(trans_a, trans_b, s1 - s0, n, k, alpha, trans_a ? a + s0 : a + s0 * lda, lda, b, ldb, beta,
             c + s0 * ldc, ldc);
    else  // columns s0..s1 of C and of op(B)
      gemm_1(trans_a, trans_b, m, s1 - s0, k, alpha, a, lda, trans_b ? b + s0 * ldb : b + s0, ldb, beta, c + s0,
             ldc);
  };
  if (parallel && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t p = 0; p < pieces; ++p) piece_gemm(p);  // an active team: OpenBLAS runs serially
  } else {
    const OneThread serial_blas;
    for (int64_t p = 0; p < pieces; ++p) piece_gemm(p);
  }
}

}  // namespace oomb::executor::cpu
