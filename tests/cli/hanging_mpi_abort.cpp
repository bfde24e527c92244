// A test shim (LD_PRELOAD into the ranks of an mpirun job): an MPI_Abort that never returns, as one
// may block on a corrupted heap or a wedged transport. The job must still end (executor/mpi/
// mpi_comm.h, abort(): kAbortGraceS). The communicator is taken as a pointer, which is what Open
// MPI's MPI_Comm is; the symbol is C's, so it interposes the library's.
#include <unistd.h>

extern "C" int MPI_Abort(void*, int) {
  for (;;) pause();
}
