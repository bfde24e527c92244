#pragma once
// The communicator behind the runtime (issue #25): the collectives data and tensor parallelism need,
// over the ranks of one job. Implementations: self (one process; every collective is the identity), MPI
// (executor/mpi: the CPU backend's collectives, and the launcher and bootstrap of a job) and NCCL
// (executor/cuda: the CUDA backend's, stream-ordered on its compute stream, its id broadcast over
// MPI). A build without MPI still builds and runs one-process plans.
#include <cstdint>
#include <memory>
#include <string>

#include "executor/runtime/backend.h"

namespace oomb::executor {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "self", "mpi", "nccl"
  // In place, on every rank: the sum over the ranks of n elements of `data` (fp32 or bf16 storage)
  // in the memory the backend computes in (host memory for the CPU backend, device memory for NCCL).
  // A bf16 buffer is summed in fp32 and rounded once.
  virtual void all_reduce_sum(Tensor data, int64_t n) = 0;
  // Whether all_reduce_sum of bf16 data sums through an fp32 copy (MPI: n floats), which a run of
  // a buffer table allocates under its row (gradient_allreduce_staging) and passes in.
  virtual bool stages_bf16_in_fp32() const { return false; }
  virtual void all_reduce_sum_staged(Tensor data, int64_t n, float* fp32_staging) {
    (void)fp32_staging;
    all_reduce_sum(data, n);
  }
  // In place, host doubles (losses, counters): the sum over the ranks.
  virtual void all_reduce_sum_host(double* data, int64_t n) = 0;
  // In place, n doubles in the memory the backend computes in (the published selection rule's page
  // scores under tensor parallelism): the sum over the ranks. By default the host collective (MPI
  // and self, whose backend computes in host memory); NCCL reduces device memory on its stream.
  virtual void all_reduce_sum_f64(double* data, int64_t n) { all_reduce_sum_host(data, n); }
  virtual void broadcast_host(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // The ranks of this communicator with the same color, ordered by key (MPI_Comm_split): tensor
  // parallelism's groups and the data-parallel replicas across them. A collective. MPI splits its
  // communicator, NCCL its bootstrap and a new NCCL communicator over each part (nccl_comm.h), one
  // process gives a one-rank communicator; the default refuses.
  virtual std::unique_ptr<Communicator> split(int color, int key);
  // Bytes all_reduce_sum was given so far (per rank, as stored).
  int64_t reduced_bytes() const { return reduced_bytes_; }

 protected:
  int64_t reduced_bytes_ = 0;
};

// One process: rank 0 of 1.
std::unique_ptr<Communicator> self_communicator();

// The job's all-reduce as the simulator prices it (a ring: 2 (N-1)/N x bytes over the link):
// bytes / s of link that reproduce the measured time of all_reduce_sum on `bytes` of `dtype`
// (allocated from `backend`, in the memory the communicator reduces), the median of `reps` timed
// repetitions after one warm-up, each between barriers, the mean of the ranks' medians. Every
// rank calls it (it is collective); 0 with one rank.
double measure_all_reduce_link_bytes_per_s(Communicator& comm, Backend& backend, int64_t bytes, DType dtype,
                                           int reps = 5);

// Whether this process was started by an MPI launcher (mpirun / mpiexec / srun set the environment
// a job's ranks read: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) with more than one rank or at all.
bool launched_by_mpi();

}  // namespace oomb::executor
