#include "executor/cpu/gemm.h"

#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "executor/cpu/eigen_util.h"
#include "executor/cpu/parallel.h"
#include "executor/cpu/threads.h"
#include "core/error.h"
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

#ifdef OOMB_HAVE_BLAS
// OpenBLAS's own buffer allocator (exported by libopenblas, not declared in cblas.h): weak, so that
// a BLAS without it still links, and the warm-up GEMMs below stand in for it.
extern "C" void* blas_memory_alloc(int) __attribute__((weak));
extern "C" void blas_memory_free(void*) __attribute__((weak));

namespace {
// OpenBLAS's GEMM buffer: BUFFER_SIZE (32 << 22 bytes in common_x86_64.h and common_arm64.h,
// Debian's build included: the 134217728-byte mmap seen in blas_memory_alloc) plus a page.
constexpr int64_t kBlasBufferBytes = (int64_t{32} << 22) + 4096;
// glibc gives a thread its own malloc arena at its first allocation: 64 MiB of address space,
// 128 MiB while it is being aligned.
constexpr int64_t kArenaBytes = int64_t{128} << 20;
constexpr int64_t kReserveMarginBytes = int64_t{64} << 20;  // the warm-up's operands, bookkeeping
constexpr int kWarmupSize = 256;  // above OpenBLAS's small-matrix path, which takes no buffer

int64_t thread_stack_bytes() {
  rlimit rl{};
  // A thread's stack is RLIMIT_STACK's soft limit (glibc), 8 MiB when it is unlimited or absurd.
  if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur >= (1u << 16) &&
      rl.rlim_cur <= (rlim_t{1} << 30))
    return static_cast<int64_t>(rl.rlim_cur);
  return int64_t{8} << 20;
}
}  // namespace
#endif

void reserve_gemm_buffers(int threads) {
#ifdef OOMB_HAVE_BLAS
  static std::mutex mu;
  static int ready = 0;  // buffers OpenBLAS holds for us (it keeps them for the process)
  std::lock_guard<std::mutex> lock(mu);
  if (threads <= ready) return;
  const int64_t need =
      (threads - ready) * (kBlasBufferBytes + thread_stack_bytes() + kArenaBytes) + kReserveMarginBytes;
  void* probe = ::mmap(nullptr, static_cast<size_t>(need), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) throw std::bad_alloc();
  ::munmap(probe, static_cast<size_t>(need));
  // Depending on its build OpenBLAS keeps the buffers in one table for the process (a GEMM takes a
  // free one) or one table per thread: each thread takes a buffer and holds it until every thread
  // has one, so that either way `threads` GEMMs at once find theirs.
  // An atomic rather than `omp critical`: the same effect, and ThreadSanitizer sees it (libgomp's
  // critical sections are not instrumented, so the sanitizer build reported a race here).
  std::atomic<bool> short_of_buffers{false};
  const size_t n = static_cast<size_t>(kWarmupSize) * kWarmupSize;
  std::vector<float> a(blas_memory_alloc ? 0 : n, 1.0f), c(blas_memory_alloc ? 0 : static_cast<size_t>(threads) * n);
#pragma omp parallel num_threads(threads)
  {
    if (blas_memory_alloc && blas_memory_free) {
      void* buf = blas_memory_alloc(0);
#pragma omp barrier
      if (buf) blas_memory_free(buf);
      if (!buf) short_of_buffers.store(true, std::memory_order_relaxed);
    } else {
      float* ci = c.data() + static_cast<size_t>(omp_get_thread_num()) * n;
      gemm_1(false, false, kWarmupSize, kWarmupSize, kWarmupSize, 1.0f, a.data(), kWarmupSize, a.data(), kWarmupSize,
             0.0f, ci, kWarmupSize);
    }
  }
  if (short_of_buffers.load())
    throw Error("--threads", std::to_string(threads),
                "more compute threads than the GEMM library (" + std::string(gemm_library()) + ") has buffers for",
                "fewer --threads");
  ready = threads;
#else
  (void)threads;
#endif
}

}  // namespace oomb::executor::cpu
