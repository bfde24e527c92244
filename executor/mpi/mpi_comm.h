#pragma once
// MPI (Debian's OpenMPI): the CPU backend's collectives, and the launcher of a data-parallel job
// (`mpirun -np N oomb run ...`: one process per rank). Built when CMake finds MPI (OOMB_HAVE_MPI).
#include <memory>

#include "executor/runtime/comm.h"

namespace oomb::executor::mpi {

// MPI_Init once (MPI_THREAD_FUNNELED: only the main thread calls MPI); MPI_Finalize at exit.
void init(int* argc, char*** argv);
bool initialized();
void finalize();
// Ends every rank of the job (a rank that failed must not leave the others waiting in a collective):
// MPI_Abort, and if that has not ended this rank within kAbortGraceS seconds (it can block on a
// corrupted heap), SIGALRM ends it, which mpirun treats as any rank killed by a signal.
inline constexpr unsigned kAbortGraceS = 10;
[[noreturn]] void abort(int code);

// MPI_COMM_WORLD (init() first). Host memory only: the CPU backend's buffers.
std::unique_ptr<Communicator> world();

}  // namespace oomb::executor::mpi
