#pragma once
// oomb calibrate's flags (cli/calibrate_cmd.cpp registers them) and its modes: --backend
// (calibrate_cmd.cpp); --traces, --points, --project-to and --recall (calibrate_fit_cmd.cpp), each
// parsing and printing around one library call (planner/profiles.h, planner/recall_curve.h).
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/json.h"
#include "executor/runtime/comm.h"

namespace oomb::cli {

struct CalibrateArgs {
  std::string backend, gpu, out, id, project_to, efficiency_model;
  std::string fit_model;  // --backend cpu: the model of the calibration runs ("" = the first --model, "none")
  std::vector<std::string> traces, recall, points, hold, models = {"tiny", "qwen2.5-0.5b"};
  int64_t chunk = 1024;
  int threads = 0;  // --backend cpu: compute threads (0 = the CPUs this process may use)
  CLI::Option* chunk_opt = nullptr;
  bool json = false, quiet = false;
};

int run_microbench_mode(const CalibrateArgs& a, executor::Communicator* comm);  // --backend
int run_fit_mode(const CalibrateArgs& a);                                         // --traces
int run_project_mode(const CalibrateArgs& a);                                     // --project-to
int run_recall_mode(const CalibrateArgs& a);                                      // --recall
int run_points_mode(const CalibrateArgs& a);                                      // --points
// The profile is checked with the loader, then printed (out "") or written to out.
void write_or_print(const Json& profile, const std::string& out);

}  // namespace oomb::cli
