#include "executor/cuda/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "executor/cuda/cuda_check.h"
#include "executor/cuda/device_info.h"

namespace oomb::executor::cuda {

namespace {
void check(ncclResult_t rc, const char* what) {
  if (rc == ncclSuccess) return;
  throw std::runtime_error(std::string("NCCL ") + what + " failed: " + ncclGetErrorString(rc));
}

class NcclCommunicator final : public Communicator {
 public:
  // Over `bootstrap`'s ranks, in its order; owned: a split's host communicator (null: the job's,
  // which the caller keeps alive).
  // connect: initialise now; else at connect() or the first collective (a world communicator
  // that is only split: no NCCL communicator, no buffers).
  NcclCommunicator(Communicator& bootstrap, std::unique_ptr<Communicator> owned, void* stream, bool connect_now)
      : owned_(std::move(owned)), boot_(bootstrap), stream_(static_cast<cudaStream_t>(stream)) {
    if (connect_now) connect();
  }
  // Every connection made at init, none lazily at a communicator's first collective (NCCL 2.22+
  // connects at first use by default): a job with two communicators (tensor x data parallelism)
  // would otherwise set up one while the other's kernels are in flight, and NCCL's buffers would
  // appear mid-step rather than before the first one. A value the user set is kept. The device
  // memory NCCL took is measured around the init (cudaMemGetInfo: the device's free bytes, so
  // nothing else may allocate on this device meanwhile; one rank per GPU).
  void connect() override {
    if (comm_ || aborted_) return;
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    ncclUniqueId id{};
    if (boot_.rank() == 0) check(ncclGetUniqueId(&id), "GetUniqueId");
    boot_.broadcast_host(&id, sizeof id, 0);
    const int64_t free_before = cuda_device_free_bytes();
    check(ncclCommInitRank(&comm_, boot_.size(), id, boot_.rank()), "CommInitRank");
    device_bytes_ = std::max<int64_t>(0, free_before - cuda_device_free_bytes());
  }
  int64_t device_bytes() const override { return device_bytes_; }
  ~NcclCommunicator() override {
    if (side_) {  // nothing may be left running on it: wait_all() ran, or the job is failing anyway
      cudaStreamSynchronize(side_);
      cudaEventDestroy(ready_);
      cudaEventDestroy(done_);
      cudaStreamDestroy(side_);
    }
    if (comm_) ncclCommDestroy(comm_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  void abort() override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    aborted_ = true;
  }
  int rank() const override { return boot_.rank(); }
  int size() const override { return boot_.size(); }
  std::string name() const override { return "nccl"; }
  // Device memory, in place, on the compute stream. bf16 is reduced by NCCL in bf16 (two ranks: one
  // addition, rounded once; more ranks: rounded at each hop of the ring, where MPI rounds the fp32
  // sum once: comm.h).
  void all_reduce_sum(Tensor data, int64_t n) override {
    connect();
    reduced_bytes_ += n * dtype_bytes(data.dtype);
    const ncclDataType_t type = data.dtype == DType::f32 ? ncclFloat32 : ncclBfloat16;
    check(ncclAllReduce(data.data, data.data, static_cast<size_t>(n), type, ncclSum, comm_, stream_), "AllReduce");
  }
  // On a stream of its own, after everything enqueued on the compute stream so far; wait_all()
  // orders the compute stream after every one started.
  void all_reduce_sum_async(Tensor data, int64_t n, float*) override {
    connect();
    if (!side_) {
      OOMB_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      OOMB_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      OOMB_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    }
    OOMB_CUDA_CHECK(cudaEventRecord(ready_, stream_));
    OOMB_CUDA_CHECK(cudaStreamWaitEvent(side_, ready_, 0));
    reduced_bytes_ += n * dtype_bytes(data.dtype);
    const ncclDataType_t type = data.dtype == DType::f32 ? ncclFloat32 : ncclBfloat16;
    check(ncclAllReduce(data.data, data.data, static_cast<size_t>(n), type, ncclSum, comm_, side_), "AllReduce");
    pending_ = true;
  }
  void wait_all() override {
    if (!pending_) return;
    OOMB_CUDA_CHECK(cudaEventRecord(done_, side_));
    OOMB_CUDA_CHECK(cudaStreamWaitEvent(stream_, done_, 0));
    pending_ = false;
  }
  bool overlaps() const override { return true; }
  // In place on the compute stream (NCCL's in-place forms: rank r's block at r x n).
  void reduce_scatter_sum(Tensor data, int64_t n, float*) override {
    connect();
    reduced_bytes_ += size() * n * dtype_bytes(data.dtype);
    const ncclDataType_t type = data.dtype == DType::f32 ? ncclFloat32 : ncclBfloat16;
    char* base = static_cast<char*>(data.data);
    check(ncclReduceScatter(base, base + rank() * n * dtype_bytes(data.dtype), static_cast<size_t>(n), type, ncclSum,
                            comm_, stream_),
          "ReduceScatter");
  }
  void all_gather(Tensor data, int64_t n) override {
    connect();
    reduced_bytes_ += size() * n * dtype_bytes(data.dtype);
    const ncclDataType_t type = data.dtype == DType::f32 ? ncclFloat32 : ncclBfloat16;
    char* base = static_cast<char*>(data.data);
    check(ncclAllGather(base + rank() * n * dtype_bytes(data.dtype), base, static_cast<size_t>(n), type, comm_, stream_),
          "AllGather");
  }
  // Device doubles (the selection's page scores), in place, on the compute stream.
  void all_reduce_sum_f64(double* data, int64_t n) override {
    connect();
    check(ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat64, ncclSum, comm_, stream_), "AllReduce");
  }
  void all_reduce_sum_host(double* data, int64_t n) override { boot_.all_reduce_sum_host(data, n); }
  void all_reduce_max_host(double* data, int64_t n) override { boot_.all_reduce_max_host(data, n); }
  bool shares_clock() const override { return boot_.shares_clock(); }
  void broadcast_host(void* data, int64_t bytes, int root) override { boot_.broadcast_host(data, bytes, root); }
  void barrier() override {
    OOMB_CUDA_CHECK(cudaStreamSynchronize(stream_));
    boot_.barrier();
  }
  // Why a new communicator over the split bootstrap and not ncclCommSplit (NCCL 2.18+): the host
  // collectives need the split host communicator anyway, and initialising the NCCL communicator over
  // exactly its ranks makes the two the same ranks in the same order by construction (ncclCommSplit
  // would be a second split that has to agree with MPI_Comm_split's ordering); every NCCL
  // communicator is then made one way, the one the one-rank test runs. The cost is one unique-id
  // broadcast per group, once per run. Collective over this communicator's ranks.
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> part = boot_.split(color, key);
    Communicator& boot = *part;
    return std::make_unique<NcclCommunicator>(boot, std::move(part), stream_, true);
  }

 private:
  std::unique_ptr<Communicator> owned_;  // declared before boot_: a split's outlives the reference
  Communicator& boot_;
  cudaStream_t stream_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  int64_t device_bytes_ = 0;  // what NCCL's init took of the device (cudaMemGetInfo)
  // The asynchronous all-reduces' stream and its two orderings (made at the first one).
  cudaStream_t side_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool pending_ = false;
};
}  // namespace

std::unique_ptr<Communicator> nccl_communicator(Communicator& bootstrap, void* stream, bool connect) {
  return std::make_unique<NcclCommunicator>(bootstrap, nullptr, stream, connect);
}

}  // namespace oomb::executor::cuda
