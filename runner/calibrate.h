#pragma once
// `oomb calibrate --backend cpu|cuda` as one library call: builds the backend (the CUDA one with
// the defaults `oomb run` uses), runs the micro-benchmarks, turns them into a device profile
// (oomb.gpu/1) and, on the CPU, fits its efficiencies to short calibration runs of the model to be
// planned (runner/calibration_runs.h). The CLI prints and writes the profile.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "runner/calibration_runs.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/microbench.h"

namespace oomb::runner {

struct CalibrationRequest {
  std::string backend = "cpu";                             // cpu | cuda
  std::vector<std::string> models = {"tiny", "qwen2.5-0.5b"};  // benchmarked shapes
  std::string efficiency_model;  // the profile's efficiencies from this model's shapes ("" = all)
  std::string fit_model;         // cpu: calibration runs of this model ("" = the first of models, "none")
  std::string id;                // the profile's id ("" = "<backend>-calibrated")
  int64_t chunk = 1024;
  int threads = 0;               // cpu: compute threads (0 = the CPUs this process may use)
  std::function<void(const std::string&)> progress;  // a line per benchmark and run
  // Under mpirun (the job's ranks): each rank measures with its share of the node's cores, as a
  // data-parallel `oomb run` computes, and the ranks time their all-reduces together: the profile's
  // interconnect_bytes_per_s and collective_latency_s (what the simulator prices collectives with).
  executor::Communicator* comm = nullptr;
};

struct BackendCalibration {
  Json profile;  // a valid oomb.gpu/1 profile (checked by the loader)
  executor::MicrobenchResult microbench;
  std::optional<CalibrationRunsFit> runs;  // cpu with a fit model
  std::string fit_model;                             // as resolved
  int ranks = 1;                                     // the job's ranks (all-reduce measured when > 1)
  executor::AllReduceFit allreduce, allreduce_bf16;  // ranks > 1: the measured all-reduces (fp32, bf16 as run)
  executor::AllReduceFit all_gather;                  // and all-gathers (ZeRO-1's weights)
};

// The CPU backend's compute threads for one rank: `requested`, or (0) every CPU this process may
// use, divided among the ranks of a job on this node (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE).
int rank_cpu_threads(int requested, const executor::Communicator* comm);

// Throws oomb::Error naming the flag (--backend, --efficiency-model, --fit-model, --threads).
BackendCalibration calibrate_backend(const CalibrationRequest& a);

}  // namespace oomb::runner
