#include "cli/mpi_job.h"

#include <cstdio>
#include <exception>

#ifdef OOMB_HAVE_MPI
#include "executor/mpi/mpi_comm.h"
#endif

namespace oomb::cli {

int run_as_job(const std::string& command, const std::function<int(executor::Communicator*)>& body) {
  if (!executor::launched_by_mpi()) return body(nullptr);
#ifdef OOMB_HAVE_MPI
  executor::mpi::init(nullptr, nullptr);
  const auto world = executor::mpi::world();
  int rc = 0;
  try {
    rc = body(world.get());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (rank %d of %d): error: %s\n", command.c_str(), world->rank(), world->size(), e.what());
    std::fflush(stderr);
    if (world->size() > 1) executor::mpi::abort(2);
    throw;
  }
  if (rc != 0 && world->size() > 1) executor::mpi::abort(rc);
  executor::mpi::finalize();
  return rc;
#else
  (void)command;
  return body(nullptr);
#endif
}

}  // namespace oomb::cli
