#pragma once
// The communicator behind the runtime (issue #25): the collectives data and tensor parallelism need,
// over the ranks of one job. Implementations: self (one process; every collective is the identity), MPI
// (executor/mpi: the CPU backend's collectives, and the launcher and bootstrap of a job) and NCCL
// (executor/cuda: the CUDA backend's, stream-ordered on its compute stream, its id broadcast over
// MPI). A build without MPI still builds and runs one-process plans.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/op.h"
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
  // A bf16 buffer: MPI (and self, and the tests' thread communicator) sum it in fp32 and round once.
  // NCCL does not: its ring adds in bf16, rounding at every hop, so with three ranks or more a sum can
  // differ from MPI's by a few bf16 steps (tests/cuda/nccl_test.cpp shows one: 1 + 2^-7 against 1).
  // Two ranks add once either way and agree. Tests comparing an NCCL run with one process allow
  // bf16 noise for this (tests/cuda/mpi_tensor_parallel_test.cpp's kBf16NoiseFactor).
  virtual void all_reduce_sum(Tensor data, int64_t n) = 0;
  // Whether all_reduce_sum of bf16 data sums through an fp32 copy (MPI: n floats), which a run of
  // a buffer table allocates under its row (gradient_allreduce_staging) and passes in.
  virtual bool stages_bf16_in_fp32() const { return false; }
  virtual void all_reduce_sum_staged(Tensor data, int64_t n, float* fp32_staging) {
    (void)fp32_staging;
    all_reduce_sum(data, n);
  }
  // all_reduce_sum_staged started now and finished by wait_all(): data parallelism's gradient
  // buckets, started as each becomes final in the backward. Where overlaps() (NCCL) it runs on a
  // stream of its own after the compute stream's work so far, so it overlaps the compute that
  // follows, and wait_all() makes the compute stream wait for every one started. Otherwise (MPI,
  // one process) it is done at the call: the CPU backend's ranks compute on every core they have,
  // and MPI moves data only inside a call, so nothing would move it in the background.
  virtual void all_reduce_sum_async(Tensor data, int64_t n, float* fp32_staging) {
    all_reduce_sum_staged(data, n, fp32_staging);
  }
  virtual void wait_all() {}
  virtual bool overlaps() const { return false; }
  // ZeRO-1's two halves of an all-reduce, in place over `data` of size() x n elements (fp32 or bf16),
  // rank r's block the n at r x n. reduce_scatter_sum: rank r's block becomes the sum over the ranks
  // of everyone's block r (bf16: as all_reduce_sum, MPI in fp32 through `fp32_staging`, size() x n
  // floats, rounded once; NCCL in bf16 at every hop); the other blocks are left undefined. all_gather: every rank's
  // block copied to every rank. The defaults (one process) have nothing to do.
  virtual void reduce_scatter_sum(Tensor data, int64_t n, float* fp32_staging) {
    (void)data, (void)n, (void)fp32_staging;
    OOMB_ASSERT(size() == 1, "reduce_scatter_sum: not implemented by the " + name() + " communicator");
  }
  virtual void all_gather(Tensor data, int64_t n) {
    (void)data, (void)n;
    OOMB_ASSERT(size() == 1, "all_gather: not implemented by the " + name() + " communicator");
  }
  // In place, host doubles (losses, counters): the sum over the ranks.
  virtual void all_reduce_sum_host(double* data, int64_t n) = 0;
  // In place, host doubles: the maximum over the ranks (the ranks' arrival times at collectives).
  virtual void all_reduce_max_host(double* data, int64_t n) = 0;
  // Whether every rank reads the same steady clock (all on one host): then one rank's arrival time
  // at a collective can be compared with another's, and a collective's wait for the slowest rank
  // told apart from its transfer (CollectiveClock).
  virtual bool shares_clock() const = 0;
  // This rank's position among the ranks of its host (MPI: a shared-memory split of the
  // communicator; one process: 0): with the host's visible device count, which GPU the rank drives.
  virtual int host_rank() const { return rank(); }
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
  // A rank that failed ends its part at once, before anything waits on a stream: NCCL aborts the
  // communicator (ncclCommAbort: its kernels stop waiting for peers, and the peers' collectives on
  // it fail instead of waiting for this rank); the job is then ended by the launcher (MPI_Abort).
  // Nothing may be called on it afterwards but its destructor. The host communicators have nothing
  // in flight when a call returns: nothing to do.
  virtual void abort() {}
  // Device memory a library holds for this communicator (NCCL's connection buffers, measured around
  // its set-up: cudaMemGetInfo); 0 for host communicators. Valid after connect().
  virtual int64_t device_bytes() const { return 0; }
  // Makes every connection now (NCCL: initialises the communicator, if it was made unconnected).
  // Collective over the communicator's ranks. Host communicators are always connected.
  virtual void connect() {}
  // Bytes all_reduce_sum was given so far (per rank, as stored).
  int64_t reduced_bytes() const { return reduced_bytes_; }

 protected:
  int64_t reduced_bytes_ = 0;
};

// One process: rank 0 of 1.
std::unique_ptr<Communicator> self_communicator();

// The communicators a job of tp x dp ranks trains with (docs/model.md "Tensor parallelism"): rank
// r is tensor-parallel rank r % tp of replica r / tp. With both degrees > 1, the world is split into
// the tensor-parallel groups' and the replicas' communicators (owned here; the world itself then
// runs no collective: NCCL never needs to connect it); else the world is the one that is > 1.
struct ParallelGroups {
  Communicator* tp = nullptr;  // null when tp == 1
  Communicator* dp = nullptr;  // null when dp == 1
  std::unique_ptr<Communicator> tp_owned, dp_owned;
};
ParallelGroups parallel_groups(Communicator& world, int64_t tp, int64_t dp);

// The collectives of one step on one communicator, timed as the ranks meet them. A rank that
// reaches a collective first waits there for the slowest; that wait is the ranks' skew (what they
// computed at different speeds since they last met), not the collective's cost, which starts when
// the last rank arrives. record() keeps each call's arrival and exit (steady clock, ns); resolve()
// (a collective itself: every rank of the communicator calls it, after the step, with the same
// number of calls) takes the latest arrival of each call over the ranks and splits each rank's time
// in the calls into wait (its arrival to the last arrival) and transfer (the last arrival to its
// exit). Where the ranks do not share a clock (several hosts) the split is unknown: everything is
// transfer and `split` is false.
class CollectiveClock {
 public:
  // Where the call was made, as the trace's events name it.
  struct Tag {
    Op op = Op::none;
    int stage = -1;
    int64_t chunk = -1, layer = -1;
  };
  struct Call {
    int64_t arrival_ns = 0, exit_ns = 0;
    int64_t bytes = 0;
    Tag tag;
    int64_t last_arrival_ns = 0;  // after resolve()
  };
  void clear() { calls_.clear(); }
  void record(int64_t arrival_ns, int64_t exit_ns, int64_t bytes, Tag tag) {
    calls_.push_back({arrival_ns, exit_ns, bytes, tag, arrival_ns});
  }
  void resolve(Communicator& comm);
  const std::vector<Call>& calls() const { return calls_; }
  double total_s() const;     // arrival to exit, summed over the calls
  double wait_s() const;      // arrival to the last rank's arrival
  double transfer_s() const;  // the last rank's arrival to exit
  bool split() const { return split_; }

 private:
  std::vector<Call> calls_;
  bool split_ = true;  // nothing to split until resolve() says otherwise
};

// One ring all-reduce as the simulator prices it (docs/model.md "Communication"):
// time = latency + 2 (N-1)/N x bytes / link. measure_all_reduce times all-reduces of `dtype` data at
// each size of `sizes_bytes`, ascending (allocated from `backend`, in the memory the communicator
// reduces): per size the fastest of `reps` or more repetitions (as many as fit in 50 ms) after one
// warm-up, each started together (a barrier) so that no rank's wait is in it, the ranks' fastest
// averaged; latency and link are the
// line through the smallest and the largest size (on a CPU the points between lie far from it, so
// a profile keeps the points as its curve). Every rank calls it
// (it is collective); zeros with one rank.
struct AllReduceFit {
  double latency_s = 0;
  double link_bytes_per_s = 0;
  struct Point {
    int64_t bytes = 0;
    double seconds = 0;  // measured (mean over the ranks of their medians)
  };
  std::vector<Point> points;
};
// dtype: the data's (bf16 goes the way a run's bf16 does: all_reduce_sum_staged through an fp32
// buffer allocated once, where the communicator stages it). `bytes` are the data's bytes per rank.
AllReduceFit measure_all_reduce(Communicator& comm, Backend& backend, const std::vector<int64_t>& sizes_bytes,
                                DType dtype = DType::f32, int reps = 5);
// The same for all-gathers (ZeRO-1's weights after the update): `bytes` the gathered buffer's per
// rank (every rank's block), the line's time = latency + (N-1)/N x bytes / link.
AllReduceFit measure_all_gather(Communicator& comm, Backend& backend, const std::vector<int64_t>& sizes_bytes,
                                int reps = 5);

// Whether this process was started by an MPI launcher (mpirun / mpiexec / srun set the environment
// a job's ranks read: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK) with more than one rank or at all.
bool launched_by_mpi();

}  // namespace oomb::executor
