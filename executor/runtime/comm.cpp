#include "executor/runtime/comm.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

namespace oomb::executor {

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  (void)color;
  (void)key;
  throw Error("--gpus", "", "the " + name() + " communicator cannot split its ranks into tensor-parallel groups",
              "tensor parallelism with data-parallel replicas runs under mpirun (MPI for --backend cpu, NCCL for "
              "--backend cuda)");
}

namespace {
class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }
  void all_reduce_sum(Tensor data, int64_t n) override { reduced_bytes_ += n * dtype_bytes(data.dtype); }
  void all_reduce_sum_host(double*, int64_t) override {}
  void broadcast_host(void*, int64_t, int) override {}
  void barrier() override {}
  // One rank split is one rank (what MPI_Comm_split gives on a one-rank communicator).
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SelfCommunicator>(); }
};
}  // namespace

std::unique_ptr<Communicator> self_communicator() { return std::make_unique<SelfCommunicator>(); }

double measure_all_reduce_link_bytes_per_s(Communicator& comm, Backend& backend, int64_t bytes, DType dtype,
                                           int reps) {
  const int N = comm.size();
  if (N <= 1 || bytes <= 0) return 0;
  const int64_t n = bytes / dtype_bytes(dtype);
  void* p = backend.allocate(Tier::device, n * dtype_bytes(dtype));  // zeroed: sums stay finite
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    comm.all_reduce_sum(Tensor(p, dtype, n), n);
    const auto t1 = std::chrono::steady_clock::now();
    if (i > 0) times.push_back(std::chrono::duration<double>(t1 - t0).count());  // the first warms up
  }
  backend.deallocate(Tier::device, p, n * dtype_bytes(dtype));
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  comm.all_reduce_sum_host(&median, 1);
  median /= N;
  const double ring = 2.0 * (N - 1) / N * static_cast<double>(n * dtype_bytes(dtype));
  return median > 0 ? ring / median : 0;
}

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

}  // namespace oomb::executor
