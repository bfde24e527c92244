#pragma once
// Inside runner::run (not for callers): the device a run trains on, opened once per run, and the
// CUPTI-timed trace of its timed steps. Kept apart from the step loop so that the CUDA, CUPTI and
// NCCL set-up (compiled only in builds that have them) is one job in one file.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "executor/runtime/backend.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/driver.h"
#include "runner/runner.h"
#ifdef OOMB_HAVE_CUPTI
#include "executor/cupti/collector.h"
#endif

namespace oomb::runner::detail {

// The backend, and on a GPU the CUPTI collector and tagger and a multi-process run's NCCL
// communicators. Members are destroyed in reverse order: the groups and communicators before the
// backend, the collector last (it outlives the backend, whose allocations it records).
struct RunDevice {
#ifdef OOMB_HAVE_CUPTI
  std::unique_ptr<executor::cupti::CuptiCollector> collector;
  std::unique_ptr<executor::cupti::CuptiTagger> tagger;
#endif
  std::unique_ptr<executor::Backend> backend;
  // A multi-process CUDA run's collectives (bootstrapped over r.comm), and the groups this rank
  // trains with (parallel_groups: with tensor x data parallelism, the groups' and the replicas' NCCL
  // communicators, and the world is never connected), made before the device block.
  std::unique_ptr<executor::Communicator> nccl;
  executor::ParallelGroups groups;
  // cuda runs: the kernel families and GEMM precisions that ran, and the backend's own buffers.
  std::function<Json()> cuda_summary = [] { return Json(); };
};

// Opens the run's backend as the request and the table say (the CPU backend's threads; the CUDA
// backend's kernels, GEMM precision, op scratch and device block, the CUPTI collector before it and
// NCCL's communicators before its device block); records on `res` what it opened.
void open_device(const RunRequest& r, const executor::RunTable& table, RunResult& res, RunDevice& d);

// A message for the user (RunRequest::message), when the caller takes them.
void say(const RunRequest& r, const std::string& line);

#ifdef OOMB_HAVE_CUPTI
// The trace of the timed steps as CUPTI recorded them (the Engine's events re-timed by the
// device), or none when CUPTI failed or recorded no kernel (then res.cupti_failure says why and the
// host-timed trace is kept). windows: the timed steps' intervals on the steady clock. engine_clock
// is cleared when CUPTI's clock is not the Engine's.
std::optional<traces::Trace> cupti_trace(const RunRequest& r, executor::Engine& e, RunDevice& device,
                                         const std::vector<std::pair<int64_t, int64_t>>& windows, RunResult& res,
                                         bool& engine_clock);
#endif

}  // namespace oomb::runner::detail
