// Open MPI's ways to reduce-scatter one buffer, timed against its all-reduce of the same buffer, in
// one run: why the CPU backend's ZeRO-1 reduce-scatter is an all-reduce (executor/mpi/mpi_comm.cpp,
// docs/model.md "Data parallelism"). `mpirun -np 2 oomb_mpi_collectives_bench [floats]` (default
// 166,000,000 fp32 per rank, the 664 MB of qwen2.5-0.5b's gradients): per way the fastest of 4
// repetitions after one warm-up, the ranks started together, and its ratio to the all-reduce.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace {

template <class F>
double fastest_s(F&& f) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    f();
    const double t = MPI_Wtime() - t0;
    if (i > 0) best = std::min(best, t);  // the first warms up
  }
  double worst = 0;  // the slowest rank's
  MPI_Allreduce(&best, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const long long asked = argc > 1 ? std::atoll(argv[1]) : 166000000LL;
  const int block = static_cast<int>(std::clamp<long long>(asked / std::max(size, 1), 1, (1LL << 30) / 4));
  const long long n = static_cast<long long>(block) * size;
  if (size < 2) {
    if (rank == 0) std::printf("oomb mpi collectives bench: run it under mpirun with 2 or more ranks\n");
    MPI_Finalize();
    return 0;
  }
  std::vector<float> a(static_cast<size_t>(n), 0.0f), b(static_cast<size_t>(block), 0.0f);
  const double allreduce =
      fastest_s([&] { MPI_Allreduce(MPI_IN_PLACE, a.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  const double rsb_in_place = fastest_s(
      [&] { MPI_Reduce_scatter_block(MPI_IN_PLACE, a.data(), block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  const double rsb =
      fastest_s([&] { MPI_Reduce_scatter_block(a.data(), b.data(), block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); });
  const double reduces = fastest_s([&] {
    for (int r = 0; r < size; ++r) {
      float* p = a.data() + static_cast<long long>(r) * block;
      MPI_Reduce(r == rank ? MPI_IN_PLACE : p, p, block, MPI_FLOAT, MPI_SUM, r, MPI_COMM_WORLD);
    }
  });
  const double allgather = fastest_s(
      [&] { MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, a.data(), block, MPI_FLOAT, MPI_COMM_WORLD); });
  if (rank == 0) {
    std::printf("oomb mpi collectives bench: %d ranks, %lld fp32 per rank (%.0f MB), fastest of 4\n", size, n,
                static_cast<double>(n) * 4e-6);
    auto row = [&](const char* what, double t) {
      std::printf("  %-38s %9.2f ms   %.2fx the all-reduce\n", what, t * 1e3, t / allreduce);
    };
    row("MPI_Allreduce (in place)", allreduce);
    row("MPI_Reduce_scatter_block (in place)", rsb_in_place);
    row("MPI_Reduce_scatter_block", rsb);
    row("MPI_Reduce per block (to its rank)", reduces);
    row("MPI_Allgather (in place)", allgather);
  }
  MPI_Finalize();
  return 0;
}
