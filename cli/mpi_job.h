#pragma once
// A command that may run as one process of an MPI job (`mpirun -np N oomb run|calibrate ...`).
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"
#include "executor/runtime/comm.h"

namespace oomb::cli {

// body(nullptr, "") when this process was not started by an MPI launcher (or the build has no MPI);
// else body(MPI_COMM_WORLD, job): every rank runs the same command, and a rank that fails (an error
// or a non-zero exit) ends the job, so that its peers do not wait for it in a collective.
//
// Before the body, the ranks agree on what they run: each describes its command line (every flag and
// value, the --threads of each host excepted) and the contents of the files its `input_flags` name
// (size and a digest; a folder's files alike), and compares with rank 0's. On a difference every
// rank exits 2 and the ranks that differ name the flag or file and both values (an MPMD launch, per
// host scripts, or a plan file that differs between nodes would otherwise crash, hang, or train an
// inconsistent model). `job` is rank 0's identity of this run (its UTC start and a random number),
// the same on every rank: each rank records it in its trace, so a rank trace says which job it is of.
int run_as_job(const std::string& command, const std::vector<std::string>& input_flags,
               const std::function<int(executor::Communicator*, const std::string& job)>& body);

// What run_as_job compares (exposed for tests): the description of a command line, and the first
// difference of `mine` (rank `rank`'s) from rank 0's description `root` ("" when they agree).
Json describe_command(const std::vector<std::string>& args, const std::vector<std::string>& input_flags);
std::string command_difference(const Json& mine, const Json& root, int rank);

}  // namespace oomb::cli
