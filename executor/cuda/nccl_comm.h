#pragma once
// NCCL: the CUDA backend's collectives (issue #25). One NCCL communicator over the ranks of a host
// communicator (MPI: one GPU per rank), bootstrapped over it (rank 0's ncclUniqueId broadcast to the
// others); the device collectives are enqueued on the backend's compute stream (stream-ordered with
// the step's kernels, no host synchronisation), host ones go through the bootstrap. split() gives
// tensor parallelism's groups and the data-parallel replicas their own NCCL communicators (see
// nccl_comm.cpp for why they are bootstrapped over split host communicators rather than made by
// ncclCommSplit). Built when CMake finds NCCL beside the CUDA toolkit (OOMB_HAVE_NCCL).
#include <memory>

#include "executor/runtime/comm.h"

namespace oomb::executor::cuda {

// bootstrap: the job's host communicator (its rank and size are NCCL's); it must outlive the result.
// stream: the cudaStream_t the collectives are enqueued on (CudaBackend::stream(CudaStream::compute)).
// connect: initialise the NCCL communicator now (collective); else at connect() or its first
// collective, so that a world communicator the job only splits (tensor x data parallelism) never
// takes NCCL's buffers. Its splits are connected as they are made.
std::unique_ptr<Communicator> nccl_communicator(Communicator& bootstrap, void* stream, bool connect = true);

}  // namespace oomb::executor::cuda
