#include "executor/cpu/threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "core/error.h"
#ifdef OOMB_HAVE_BLAS
#include <cblas.h>
#endif

namespace oomb::executor::cpu {

namespace {
std::atomic<int> g_threads{0};  // 0 = not set yet: available_cpus()
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

void set_threads(int n) {
  OOMB_ASSERT(n >= 1, "thread count must be positive");
  g_threads = n;
#ifdef OOMB_HAVE_BLAS
  // OpenBLAS itself stays on one thread: gemm.cpp runs it on pieces fixed by the shape in our
  // threads (its own split depends on the thread count, and so would its rounding). First: its
  // OpenMP build sets the OpenMP count too.
  openblas_set_num_threads(1);
#endif
  omp_set_num_threads(n);
}

int threads() {
  const int n = g_threads.load();
  if (n > 0) return n;
  set_threads(available_cpus());
  return g_threads.load();
}

const char* gemm_library() {
#ifdef OOMB_HAVE_BLAS
  static const std::string s = [] {
    return std::string(openblas_get_config()) + ", core " + openblas_get_corename();
  }();
  return s.c_str();
#else
  return "Eigen (no BLAS)";
#endif
}

}  // namespace oomb::executor::cpu
