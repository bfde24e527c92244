#include "executor/mpi/mpi_comm.h"

#include <mpi.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor::mpi {

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw std::runtime_error(std::string("MPI ") + what + " failed: " + std::string(msg, static_cast<size_t>(len)));
}

// MPI counts are int: large buffers go in pieces.
constexpr int64_t kPiece = int64_t{1} << 30;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm = MPI_COMM_WORLD) : comm_(comm) {
    check(MPI_Comm_rank(comm_, &rank_), "Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "Comm_size");
    // The ranks that share this one's host: all of them, or several hosts (no common clock).
    MPI_Comm local = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local), "Comm_split_type");
    int local_size = 0;
    check(MPI_Comm_size(local, &local_size), "Comm_size");
    check(MPI_Comm_rank(local, &host_rank_), "Comm_rank");
    MPI_Comm_free(&local);
    int everywhere = local_size == size_ ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, comm_), "Allreduce");
    one_host_ = everywhere == 1;
  }
  ~MpiCommunicator() override {
    if (comm_ != MPI_COMM_WORLD && initialized()) MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &sub), "Comm_split");
    return std::make_unique<MpiCommunicator>(sub);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void all_reduce_sum(Tensor data, int64_t n) override {
    std::vector<float> f(data.dtype == DType::f32 ? 0 : static_cast<size_t>(n));
    all_reduce_sum_staged(data, n, f.data());
  }
  bool stages_bf16_in_fp32() const override { return true; }
  void all_reduce_sum_staged(Tensor data, int64_t n, float* f) override {
    reduced_bytes_ += n * dtype_bytes(data.dtype);
    if (data.dtype == DType::f32) return sum(static_cast<float*>(data.data), n);
    // bf16: summed in fp32 (each rank's values exact in fp32), rounded once.
    bf16_to_f32(static_cast<const uint16_t*>(data.data), f, n);
    sum(f, n);
    f32_to_bf16(f, static_cast<uint16_t*>(data.data), n);
  }
  // An all-reduce of the whole buffer (every block summed everywhere, this rank's among them): on
  // one node's shared memory Open MPI 4.1's MPI_Reduce_scatter_block is slower than its all-reduce of
  // the same buffer (bench/mpi_collectives_bench.cpp: 1.67-1.92x for 664 MB fp32 over 2 ranks on a
  // 2-core VM; docs/model.md "Data parallelism"), and the simulator prices what runs.
  void reduce_scatter_sum(Tensor data, int64_t n, float* f) override { all_reduce_sum_staged(data, size_ * n, f); }
  // MPI_Allgather in place; a block beyond an int count broadcast from its rank in pieces.
  void all_gather(Tensor data, int64_t n) override {
    const int64_t bytes = n * dtype_bytes(data.dtype);
    reduced_bytes_ += size_ * bytes;
    if (n <= kPiece) {
      const MPI_Datatype type = data.dtype == DType::f32 ? MPI_FLOAT : MPI_UINT16_T;
      check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data, static_cast<int>(n), type, comm_), "Allgather");
      return;
    }
    for (int r = 0; r < size_; ++r) broadcast_host(static_cast<char*>(data.data) + r * bytes, bytes, r);
  }
  void all_reduce_sum_host(double* data, int64_t n) override {
    for (int64_t at = 0; at < n; at += kPiece)
      check(MPI_Allreduce(MPI_IN_PLACE, data + at, static_cast<int>(std::min(kPiece, n - at)), MPI_DOUBLE, MPI_SUM,
                          comm_),
            "Allreduce");
  }
  void all_reduce_max_host(double* data, int64_t n) override {
    for (int64_t at = 0; at < n; at += kPiece)
      check(MPI_Allreduce(MPI_IN_PLACE, data + at, static_cast<int>(std::min(kPiece, n - at)), MPI_DOUBLE, MPI_MAX,
                          comm_),
            "Allreduce");
  }
  bool shares_clock() const override { return one_host_; }
  int host_rank() const override { return host_rank_; }
  void broadcast_host(void* data, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(data);
    for (int64_t at = 0; at < bytes; at += kPiece)
      check(MPI_Bcast(p + at, static_cast<int>(std::min(kPiece, bytes - at)), MPI_BYTE, root, comm_), "Bcast");
  }
  void barrier() override { check(MPI_Barrier(comm_), "Barrier"); }

 private:
  void sum(float* p, int64_t n) {
    for (int64_t at = 0; at < n; at += kPiece)
      check(MPI_Allreduce(MPI_IN_PLACE, p + at, static_cast<int>(std::min(kPiece, n - at)), MPI_FLOAT, MPI_SUM,
                          comm_),
            "Allreduce");
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  bool one_host_ = true;
  int host_rank_ = 0;  // among the ranks of this host (MPI_COMM_TYPE_SHARED)
};
}  // namespace

void init(int* argc, char*** argv) {
  if (initialized()) return;
  int provided = 0;
  check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "Init_thread");
}

bool initialized() {
  int flag = 0, done = 0;
  MPI_Initialized(&flag);
  MPI_Finalized(&done);
  return flag != 0 && done == 0;
}

void finalize() {
  if (initialized()) MPI_Finalize();
}

void abort(int code) {
  std::fflush(nullptr);
  // MPI_Abort allocates and talks to the launcher: after the failure that brought a rank here (a
  // corrupted heap, a wedged transport) it can block forever, and the whole job with it. A rank still
  // here after kAbortGraceS ends by SIGALRM's default action, a death by signal, on which mpirun
  // ends every other rank of the job.
  alarm(kAbortGraceS);
  if (initialized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // no exit handlers: they may wait on what failed
}

std::unique_ptr<Communicator> world() {
  OOMB_ASSERT(initialized(), "mpi::world() before mpi::init()");
  return std::make_unique<MpiCommunicator>();
}

}  // namespace oomb::executor::mpi
