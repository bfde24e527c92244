#pragma once
// One typed record of what a run of the executor was and measured: the `metadata.extra` section of
// a trace written by `oomb run --trace` (schema "oomb.run/1"), read by this one loader. validate,
// calibrate, recall curves and the GUI overlay read the record, never the JSON by key.
//
// Written by the executor (Engine::trace: model, layers, config as run, measured) and the CLI
// (backend details). Traces from before the schema key have the same layout; their config may
// carry the plan's storage dtypes while the run stored others, so the loader takes the dtypes the
// measured block records (fp32 where it records none: runs before typed storage).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "step/buffers.h"
#include "step/config.h"

namespace oomb::step {

inline constexpr const char* kRunRecordSchema = "oomb.run/1";

struct RunRecord {
  std::string model;     // catalog id (or the spec's id)
  int64_t layers = 0;    // layers as run
  Config config;         // the configuration as run (storage dtypes as stored)
  std::string backend;   // "cpu" or "cuda"
  int64_t cpu_threads = 1;  // cpu runs (1 in traces from before threads were recorded)
  // Measured over the run (memory: its high-water marks; copies: the last step).
  int64_t steps = 1;     // timed steps (the warm-up excluded)
  double step_s = 0;     // the fastest timed step (what validate compares)
  double mean_step_s = 0, tokens_per_s = 0, loss = 0;
  int64_t kv_page_bytes = 0, grad_page_bytes = 0;
  int64_t kv_pool_pages = 0, grad_pool_pages = 0, kv_pool_high_water_pages = 0, grad_pool_high_water_pages = 0;
  int64_t host_kv_pages = 0, host_grad_pages = 0;
  int64_t peak_device_bytes = 0, peak_host_bytes = 0;
  std::map<std::string, int64_t> device_breakdown_bytes;  // at the device peak
  std::map<std::string, int64_t> row_high_water_bytes;    // per device row of the run's table
  int64_t h2d_bytes = 0, d2h_bytes = 0, copy_regions = 0;
  std::optional<double> mean_recall, min_recall;  // --measure-recall runs
  // Sparse runs: the selection union of each (chunk, layer) of the last step (measured.union_pages).
  std::vector<MeasuredUnion> union_pages;
  // CUPTI-timed CUDA runs: device bytes CUDA reserved, records without a tag.
  std::optional<int64_t> cupti_reserved_device_bytes, cupti_untagged;
  // Tensor parallelism (measured.tensor_parallel): this rank of the group, and the last step's
  // activation all-reduces (count, bytes given as stored).
  std::optional<int64_t> tp_rank, tp_allreduces, tp_allreduce_bytes;
  // The collectives' time in the last step as the ranks met them (CollectiveClock): the transfer
  // after the last rank's arrival, and the wait for it (the ranks' skew); collective_split false:
  // the ranks shared no clock and the wait could not be told apart (then all of it is transfer).
  std::optional<double> tp_allreduce_transfer_s, tp_allreduce_wait_s;
  // Data parallelism (measured.data_parallel): the gradient all-reduce, likewise.
  std::optional<int64_t> dp_allreduce_bytes;
  std::optional<double> dp_allreduce_transfer_s, dp_allreduce_wait_s;
  bool collective_split = true;
  std::vector<std::string> notes;  // the plan check's
};

// Throws oomb::Error naming `where` and the key when the section is not a run's record (a
// simulator trace, a missing or malformed key).
RunRecord run_record_from_json(const Json& extra, const std::string& where);

// The MPI job a run was one process of (tensor or data parallelism under mpirun): the job's process
// count and this process's rank in it, from measured.data_parallel (the job's rank) or, with tensor
// parallelism alone, measured.tensor_parallel (the group is the job). {1, 0} for a one-process run
// and for a section that records no run; never throws (a reader of any trace).
struct RunRank {
  int world = 1;
  int rank = 0;
};
RunRank run_rank(const Json& extra);

// One figure of a run's collectives as its record has it: name (unit in the suffix), value.
struct CollectiveFigure {
  std::string name;  // tp_allreduces, tp_allreduce_bytes, tp_allreduce_s, allreduce_bytes, allreduce_s, ...
  double value = 0;
  std::string unit() const;  // "bytes", "s" or "" (a count)
};
// Every number of measured.tensor_parallel (named tp_<key>, as `oomb simulate --json` names its
// predictions) and of measured.data_parallel (named <key>), counts, bytes, then seconds within each,
// leaving out the process's place in the job (tp, rank, world) and what is not a number: figures a
// later executor adds beside these appear under their own names. Never throws; empty for a
// one-process run.
std::vector<CollectiveFigure> run_collectives(const Json& extra);
// Seconds in collectives: tp_allreduce_s + allreduce_s (the two totals the executor times; other
// time figures may be parts of them, so they are not added); empty when the record has neither.
std::optional<double> collective_seconds(const std::vector<CollectiveFigure>& figures);

// The runner's timing of the record (the Engine writes the rest): the timed steps (the warm-up left
// out; 0 = keep the Engine's count), the fastest timed step validate compares and the mean over every
// step. No-op on a section without a measured block.
void record_step_timing(Json& extra, int64_t timed_steps, double step_s, double mean_step_s);

}  // namespace oomb::step
