#pragma once
// Threads of the CPU kernels: OpenMP loops over rows / heads and the BLAS GEMMs share one count,
// set for the process (the OpenMP runtime and OpenBLAS are process-wide). Results do not depend on
// it: every loop splits its work into pieces fixed by the shapes, not by the thread count, and
// reduces partial sums in piece order.
namespace oomb::executor::cpu {

// CPUs this process may run on (sched_getaffinity; at least 1).
int available_cpus();
// n >= 1: the OpenMP thread count (OpenBLAS runs single-threaded inside our parallel pieces).
void set_threads(int n);
int threads();
// What computes the GEMMs: OpenBLAS's build and the kernels it picked for this CPU, or "Eigen (no BLAS)".
const char* gemm_library();

}  // namespace oomb::executor::cpu
