#pragma once
// A command that may run as one process of an MPI job (`mpirun -np N oomb run|calibrate ...`).
#include <functional>
#include <string>

#include "executor/runtime/comm.h"

namespace oomb::cli {

// body(nullptr) when this process was not started by an MPI launcher (or the build has no MPI);
// else body(MPI_COMM_WORLD): every rank runs the same command, and a rank that fails (an error or a
// non-zero exit) ends the job, so that its peers do not wait for it in a collective.
int run_as_job(const std::string& command, const std::function<int(executor::Communicator*)>& body);

}  // namespace oomb::cli
