#pragma once
// The GUI's view-model: what the user picked (Inputs) and everything derived from it (Results),
// with no ImGui or OpenGL in sight so that tests can drive it. Every change of the inputs
// recomputes the closed-form results synchronously (simulator::evaluate, well under a frame);
// the event timeline (simulator::simulate_events) runs on a background thread and is picked up by
// poll_timeline() without ever blocking a frame. Bad combinations become Results::error, never a
// crash.
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "planner/parallel.h"
#include "validation/ranks.h"
#include "validation/validation.h"
#include "simulator/simulator.h"
#include "traces/trace.h"

namespace oomb::gui {

struct Inputs {
  std::string model = "qwen2.5-7b";
  std::string gpu = "h200";
  std::string host;              // "" = the GPU profile's default host
  step::Config config = default_config();

  static step::Config default_config();  // oomb defaults at 4M tokens
  bool operator==(const Inputs& o) const;
};

// A derived number as shown: label, formatted value and the formula behind it (tooltips).
struct Figure {
  std::string label;
  std::string value;
  std::string formula;
};

struct CurvePoint {
  int64_t context_tokens = 0;
  bool valid = false;     // false: the scenario is invalid at this context (message in `invalid`)
  bool feasible = false;
  int64_t peak_device_bytes = 0;
  int64_t peak_host_bytes = 0;
  double step_s = 0;
  simulator::Binding binding = simulator::Binding::compute;
  std::string invalid;    // why, when !valid
};

struct Curve {
  std::string label;      // "oomb dense", "oomb sparse", "standard"
  step::Schedule schedule = step::Schedule::oomb;
  step::Attention attention = step::Attention::dense;
  std::vector<CurvePoint> points;  // one per curve_contexts() entry
};

// Chunk (rows) x sparse budget (columns; column 0 = dense attention) under the current inputs.
struct FeasibilityCell {
  bool valid = false;
  bool feasible = false;
  double step_s = 0;
  int64_t peak_device_bytes = 0;
  simulator::Binding binding = simulator::Binding::compute;
  std::string invalid;    // why, when !valid
};
struct FeasibilityMap {
  std::vector<int64_t> chunks;
  std::vector<int64_t> budgets;  // 0 = dense
  std::vector<FeasibilityCell> cells;  // [chunk][budget]
  double min_step_s = 0, max_step_s = 0;  // over feasible cells (colour scale)
  const FeasibilityCell& at(size_t chunk_i, size_t budget_i) const { return cells[chunk_i * budgets.size() + budget_i]; }
};

struct Results {
  bool ok = false;
  std::string error;      // why the inputs cannot be evaluated (oomb::Error message)
  simulator::Scenario scenario;
  step::BufferTable table;
  simulator::Summary summary;
  std::vector<Figure> figures;  // headline numbers with formulas
  std::vector<Curve> curves;
  FeasibilityMap feasibility;
  double compute_ms = 0;  // wall time of the last recompute
  // Why the event timeline is not simulated for these inputs ("" = it is): beyond the (chunk, layer)
  // pairs `oomb simulate --timeline` takes (simulator::check_event_simulation_size, the CLI's check).
  std::string timeline_refused;
};

struct TimelineRequest {
  traces::Detail detail = traces::Detail::layer;
  int64_t chunk_first = -1;  // -1: the last two chunks (the longest prefixes, the busiest copies)
  int64_t chunk_last = -1;
  bool operator==(const TimelineRequest& o) const = default;
};

// Key that aligns a predicted and a measured event (DESIGN.md section 2).
using EventKey = std::tuple<int, int, int64_t, int64_t, Op>;  // kind, stage, chunk, layer, op
EventKey event_key(const traces::Event& e);

struct PoolSeries {  // pool occupancy over the step, bucketed to at most kBuckets (max per bucket)
  static constexpr size_t kBuckets = 1024;
  std::vector<double> t_s;
  std::vector<int64_t> pool_pages;
  std::vector<int64_t> device_bytes;
  int64_t pool_capacity_pages = 0;   // the modelled high-water (summary.device_pool_pages)
  // What the pools allocate: the high-water in dense mode; sparse pools are allocated for the union's
  // bound (docs/model.md, peak rule), above the modelled high-water.
  int64_t pool_allocated_pages = 0;
  double step_s = 0;
};

// The finished background simulation, filtered to the requested chunk range.
struct Timeline {
  bool ok = false;
  std::string error;
  bool refused = false;              // not simulated: Results::timeline_refused (error says why)
  std::string note;                  // e.g. detail lowered to keep the event count bounded
  traces::Detail detail = traces::Detail::layer;
  int64_t chunk_first = 0, chunk_last = 0, chunks = 0;
  traces::Trace trace;               // the whole step
  simulator::Summary summary;
  double simulate_s = 0;             // wall time of simulate_events
  // Events of the chunk range per stage (index 0: stage 1 fill, 1: stage 2 backward), indices into
  // trace.events, and their time span.
  std::vector<size_t> stage_events[2];
  int64_t stage_t0_ns[2] = {0, 0}, stage_t1_ns[2] = {0, 0};
  // Collectives (tensor or data parallelism) in the range: the timeline draws a fourth lane, comm.
  bool has_comm = false;
  PoolSeries pool;
};

struct Overlay {
  std::string path;                   // the shown rank's trace file
  traces::Trace trace;                // the shown rank's trace
  std::map<EventKey, size_t> by_key;  // first measured event per key
  traces::Comparison comparison;      // vs the predicted timeline (empty until one exists)
  // `oomb validate`'s verdict on this trace against the current inputs (validation::validate_run, the
  // same terms and tolerances); empty with validation_error set when it cannot be judged.
  std::optional<validation::Validation> validation;
  std::string validation_error;
  // A multi-rank run (tensor or data parallelism under mpirun): its processes and the rank shown.
  // Loaded by rank 0's trace, `ranks` holds every rank's verdict against the current inputs (found
  // beside it by validation::rank_trace_path, as `oomb validate` finds them; rank k at index k), the
  // slowest marked `binds`; empty for a one-process run and for another rank's trace loaded alone.
  int world = 1;
  int rank = 0;
  std::vector<validation::RankVerdict> ranks;
  int binding_rank = -1;  // -1: none (one process, or no rank has a measured step)
};

class ViewModel {
 public:
  ViewModel();
  explicit ViewModel(Inputs in);
  ~ViewModel();
  ViewModel(const ViewModel&) = delete;
  ViewModel& operator=(const ViewModel&) = delete;

  const Inputs& inputs() const { return inputs_; }
  // Replaces the inputs and recomputes when they differ; returns whether it recomputed.
  bool set_inputs(const Inputs& in);
  // "oomb" or "oomb-published" applied to the current config (context and attention kept).
  bool apply_preset(const std::string& name);
  const Results& results() const { return results_; }

  static std::vector<int64_t> curve_contexts();  // 8K .. 16M, doubling
  static const std::vector<std::string>& presets();

  // Timeline: set what to show, then call poll_timeline() every frame. It starts a background
  // simulation when the inputs or the detail changed, collects it when done, and refilters the
  // chunk range without recomputing. Never blocks.
  void set_timeline_request(const TimelineRequest& r);
  const TimelineRequest& timeline_request() const { return request_; }
  void poll_timeline();
  bool timeline_pending() const { return job_.valid(); }
  // The latest finished timeline for the current inputs (nullptr while none).
  const Timeline* timeline() const { return timeline_ && timeline_generation_ == generation_ ? timeline_.get() : nullptr; }
  // Blocks until the timeline for the current inputs is there (screenshots, tests).
  bool wait_timeline(double timeout_s);

  // "Plan for me": runs the planner (planner::search) for the current model, GPU, host and context
  // with nothing fixed (sparse competes when the current attention is sparse) and loads the chosen
  // configuration. Returns a one-line report, or why nothing fits (the planner's binding limit).
  std::string plan_for_me();
  // Multi-GPU layouts for the inputs' GPUs per node (gpus x data-parallel replicas / nodes) over
  // their nodes: the stock recipes (planner::stock_recipes) and the best FSDP layout where it is none
  // of them; empty for one GPU or when the inputs do not evaluate. Computed when first asked for
  // after an input change (tens of milliseconds), not on every recompute.
  int64_t layout_gpus_per_node() const;
  const std::vector<planner::ParallelPlan>& layouts();

  // Writes the plan (oomb.plan/1) of the current inputs to `path`; returns "" or the error message.
  std::string export_plan(const std::string& path) const;

  // Loads a measured trace to overlay; returns "" or the error message. With adopt_run_config the
  // inputs switch to the model and configuration the trace records (metadata.extra, written by
  // `oomb run`), so that the prediction shown is that of the measured run.
  // Rank 0's trace of a multi-rank run brings the other ranks' (t.json: t.rank1.json, ...); rank 0
  // is shown first, a missing rank is listed as missing.
  std::string load_trace(const std::string& path, bool adopt_run_config = false);
  const Overlay* overlay() const { return overlay_.get(); }
  void clear_overlay();
  // Overlays rank `rank` of the loaded multi-rank run instead (its timeline, memory and verdict);
  // returns "" or why not: no trace loaded, a one-process run, a rank beyond the run's world size,
  // that rank's trace missing (the message names the file and what would be valid).
  std::string select_rank(int rank);
  // Sparse: sets the inputs' --selection-overlap to what the overlaid run's unions imply (its
  // validation's implied_selection_overlap), so that the pools and copies are predicted as the run
  // selected; returns a one-line report, or why not (no trace, no sparse unions measured).
  std::string use_measured_overlap();

 private:
  void recompute();
  void start_job();
  void refilter();
  void compare_overlay();
  void show_overlay_rank();

  Inputs inputs_;
  Results results_;
  uint64_t generation_ = 0;  // bumped on every input change
  TimelineRequest request_;
  std::future<std::unique_ptr<Timeline>> job_;
  uint64_t job_generation_ = 0;
  traces::Detail job_detail_ = traces::Detail::layer;
  std::unique_ptr<Timeline> timeline_;
  uint64_t timeline_generation_ = UINT64_MAX;
  std::unique_ptr<Overlay> overlay_;
  std::vector<planner::ParallelPlan> layouts_;
  uint64_t layouts_generation_ = UINT64_MAX;
  // The other ranks' traces of the loaded run (index: rank; the shown one is in overlay_->trace and
  // its slot is empty, as is a missing rank's).
  std::vector<std::optional<traces::Trace>> rank_traces_;
};

}  // namespace oomb::gui
