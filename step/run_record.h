#pragma once
// The one record of a run of the executor: what ran and what it measured. The Engine fills it as it
// runs (executor::Measured is this type) and writes it, with to_json, as the `metadata.extra`
// section of the trace `oomb run --trace` writes (schema "oomb.run/1"); run_record_from_json reads it
// back. validate, calibrate, recall curves and the GUI overlay read the record, never the JSON by key.
//
// The runner adds beside it what the Engine does not know: the CPU threads, its step timing
// (record_step_timing) and the backend's details. Traces from before the schema key have the same
// layout; their config may carry the plan's storage dtypes while the run stored others, so the
// loader takes the dtypes the measured block records (fp32 where it records none: runs before
// typed storage).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "step/buffers.h"
#include "step/config.h"
#include "step/phase.h"

namespace oomb::step {

inline constexpr const char* kRunRecordSchema = "oomb.run/1";

// Of one (chunk, layer): mean over the chunk's query tokens and query heads of the dense softmax
// mass (scores q.k / sqrt(head_dim) over every earlier key and the causal own chunk) that falls on
// the keys the selection attends (selected pages + own chunk). 1 when the selection is dense.
struct RecallSample {
  int64_t chunk = 0, layer = 0;
  double recall = 0;
};

struct RunRecord {
  std::string model;     // catalog id (or the spec's id)
  // The spec that ran (ModelSpec::to_json), so that a trace of a model read from a file (an oomb
  // model JSON, a Hugging Face config) is validated and calibrated without that file, and a catalog
  // entry changed since is not mistaken for what ran. Null in traces from before it was recorded:
  // readers then load `model` from the catalog.
  Json model_spec;
  int64_t layers = 0;    // layers as run
  // The configuration as run (read back: its storage dtypes as stored, from the fields below).
  Config config;
  int64_t cpu_threads = 1;  // cpu runs (the runner's; 1 in traces from before threads were recorded)
  // Page storage as run (config kv_dtype / kv_grad_dtype: "fp32" or "bf16"); the executor computes
  // in fp32 ("compute_dtype" in the record) on values stored in the dtypes below.
  Dtype kv_dtype = Dtype::fp32, kv_grad_dtype = Dtype::fp32;
  // Storage of weights, parameter gradients, activations and loss tiles as run (fp32 or bf16).
  Dtype param_dtype = Dtype::fp32, param_grad_dtype = Dtype::fp32, activation_dtype = Dtype::fp32, loss_dtype = Dtype::fp32;
  std::string backend;                  // the backend that ran ("cpu", "cuda")
  // The cuda backend ran on the emulated CUDA device (executor/emulated_cuda): memory, copy bytes and
  // counts are the run's, its times are not a GPU's (validate judges no time term of such a run).
  bool emulated_device = false;
  // The MPI job this run was a process of (its identity, the same in every rank's record; "" for a
  // one-process run): measured.job.
  std::string job;
  std::vector<BufferRow> buffers;       // the run's buffer table (what it allocated under; not read back)
  std::vector<std::string> notes;       // the plan check's notes
  // Measured over the run (memory: its high-water marks; copies: the last step).
  int64_t kv_page_bytes = 0, grad_page_bytes = 0;
  int64_t kv_pool_pages = 0, grad_pool_pages = 0;  // device pool capacities
  int64_t kv_pool_high_water_pages = 0, grad_pool_high_water_pages = 0;
  // Sliding and chunked layers' pools (local_kv_pool, local_kv_grad_pool): capacities and high-water
  // marks in pages; 0 for a model of global layers (and then absent from the JSON).
  int64_t local_kv_pool_pages = 0, local_grad_pool_pages = 0;
  int64_t local_kv_high_water_pages = 0, local_grad_high_water_pages = 0;
  int64_t host_kv_pages = 0, host_grad_pages = 0;  // host pool capacities (offload)
  int64_t peak_device_bytes = 0, peak_host_bytes = 0;
  std::map<std::string, int64_t> device_breakdown_bytes;  // at the device peak
  // The memory account against the table: each device row's most bytes in use at once, and each
  // phase's device high-water mark (executor MemoryAccount).
  std::map<std::string, int64_t> row_high_water_bytes;
  std::map<Phase, int64_t> phase_high_water_bytes;
  int64_t h2d_bytes = 0, d2h_bytes = 0;  // last step
  int64_t copy_regions = 0;  // last step: contiguous copy regions issued (API calls unless batched)
  int64_t host_syncs = 0;    // last step: host synchronisations (Backend::host_syncs; 0 on the cpu backend)
  // Data parallelism: this rank of `world`, the communicator, and the last step's gradient
  // all-reduce (bytes given per rank, as stored, and its wall time); recorded when world > tp.
  int rank = 0, world = 1;
  std::string comm = "self";
  int64_t allreduce_bytes = 0;
  // Its time as the replicas met it: all of it, the wait for the slowest replica, the transfer
  // after the last one arrived (CollectiveClock); collective_split false: the ranks share no clock
  // (several hosts), the waits are unknown (0) and everything counts as transfer.
  double allreduce_s = 0, allreduce_wait_s = 0, allreduce_transfer_s = 0;
  bool collective_split = true;
  // Read back from a trace from before the wait was told apart from the transfer (the totals only):
  // false, and no collective time is judged.
  bool collective_times_recorded = true;
  // The collectives' times (both blocks) are their NCCL kernels' spans on the device (CUPTI) over
  // the fastest timed step: what the collectives took on the GPU, each rank's wait for the slowest
  // included (a kernel spins until every rank arrived), so wait and transfer are not told apart.
  bool collectives_device_timed = false;
  // Tensor parallelism (gpus > 1): the degree, this rank's place in it, and the last step's
  // activation all-reduces (count, bytes given per rank as stored, wall time); recorded when tp > 1.
  int64_t tp = 1, tp_rank = 0;
  int64_t tp_allreduces = 0, tp_allreduce_bytes = 0;
  double tp_allreduce_s = 0, tp_allreduce_wait_s = 0, tp_allreduce_transfer_s = 0;  // as the data-parallel ones
  std::vector<MeasuredUnion> union_pages;  // sparse: last step, per (chunk, layer)
  std::vector<RecallSample> recall;        // last step, per (chunk, layer); empty unless recall was measured
  // Read back: the mean and the minimum as the record states them (a record may state them without
  // the samples); mean_recall() and min_recall() return them, else the samples'.
  std::optional<double> recorded_mean_recall, recorded_min_recall;
  double mean_recall() const;  // over the samples (0 when none)
  double min_recall() const;
  // The Engine's mean over its steps; read back: the fastest timed step (what validate compares,
  // record_step_timing) and the mean in mean_step_s.
  double step_s = 0;
  double mean_step_s = 0;
  std::vector<double> step_times_s;  // each step (the first pays one-time set-up)
  double tokens_per_s = 0;  // over all steps
  double loss = 0;          // last step
  int64_t steps = 0;
  // CUPTI-timed CUDA runs (the collector's, beside the record): device bytes CUDA reserved, records
  // without a tag.
  std::optional<int64_t> cupti_reserved_device_bytes, cupti_untagged;
  bool cupti_timed = false;  // the record has the collector's block (metadata.extra.cupti)
};

// The record as a trace's metadata.extra holds it: {"model", "layers", "config", "measured"} (the
// measured block alone is `oomb run --json`'s "measured").
Json to_json(const RunRecord& r);

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
  std::string job;  // measured.job ("" where the record has none: one process, or a run before it)
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
