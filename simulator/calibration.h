#pragma once
// Calibration of the cost model's efficiency parameters to measured traces (docs/model.md,
// "Calibration"): every measured compute event (stage, chunk, layer, op) has a predicted
// decomposition into seconds at efficiency 1 per op class; least squares over all events gives
// the inverse efficiencies: measured ~ gemm_s / e_gemm + attn_s / e_attn + attn_bwd_s / e_attn_bwd +
// mb_s / e_mb + kernels * launch.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "simulator/simulator.h"
#include "traces/trace.h"

namespace oomb::simulator {

// Seconds of one pass's compute at efficiency 1 per class, and its launches.
struct OpWork {
  double gemm_s = 0, attn_s = 0, attn_bwd_s = 0, mb_s = 0, kernels = 0;
};

// Predicted work of the pass that a trace names op (embedding, layer_fwd, layer_recompute, lm_head,
// layer_bwd, embedding_bwd) for chunk c (and layer: a kept layer's backward does not
// recompute) of an oomb-schedule scenario; nullopt for ops the cost model does not price as a pass
// (e.g. optimizer_step) or that the scenario does not run (a frozen embedding's
// gradient).
std::optional<OpWork> pass_work(const Scenario& s, int64_t chunk, Op op, int64_t layer = 0);

// What the executor backends run (cpu, and cuda at its fp32 interface): fp32 parameters, parameter
// gradients, activations and loss (no upcast copy); KV and KV-gradient pages as the scenario's kv_dtype / kv_grad_dtype
// (kept: the executor stores the configured page dtype, fp32 or bf16); peak as allocated.
void apply_cpu_run(Scenario& s);

// The scenario a measured trace (from `oomb run --trace`) ran, as its time is priced: its run
// record's model and configuration (step/run_record.h) on `gpu`, with apply_cpu_run and the page
// dtypes the run stored. Throws Error naming the file when it is no run's trace.
Scenario scenario_of_trace(const traces::Trace& t, const std::string& where, const models::GpuSpec& gpu);

// One measured pass and its predicted work. measured_s: the fastest of its occurrences when the
// trace ran several steps and the pass occurs once per step (layer detail); otherwise its total
// per step (op detail, or one step).
struct CalibrationSample {
  int trace = 0;  // index into the fitted traces
  int stage = 0;
  int64_t chunk = 0, layer = -1;
  Op op = Op::none;  // Op::step for a whole measured step (calibration points)
  OpWork work;
  double measured_s = 0;
};

// Samples of one trace (layer or op detail); Error for coarser detail or a predicted trace.
std::vector<CalibrationSample> calibration_samples(const traces::Trace& t, const std::string& where,
                                                   const models::GpuSpec& gpu, int trace_index);

struct OpResidual {
  Op op = Op::none;
  int samples = 0;
  double measured_s = 0, predicted_s = 0;  // totals
  double rms_relative = 0;                 // RMS over samples of (pred - meas) / meas
};

// A parameter the fit held at its bound, and why: the value the fit wanted without the bound (an
// efficiency above 1, a negative launch overhead; infinity when it wanted no time at all for that
// work) and the traces or points that pull it there, with their shares of the pull (largest first).
struct ClampPull {
  std::string parameter;  // "gemm efficiency", ...
  std::string work;       // the work it prices: "GEMM", "attention forward", ...
  double wanted = 0;
  std::vector<std::pair<int, double>> by;  // trace / point index, share (0..1]
};

struct FitResult {
  models::Efficiency efficiency;  // copy unchanged from the input profile
  double launch_overhead_s = 0;
  std::vector<std::string> clamped;  // parameters held at a bound, with why
  std::vector<ClampPull> clamp_pulls;  // the same, with what pulls each there
  double r2 = 0;                     // of the weighted fit
  std::vector<OpResidual> residuals;  // per op kind
  // Leave one trace out: relative error of each held-out trace's total compute time (nullopt
  // when the others alone do not determine every parameter).
  std::vector<std::optional<double>> leave_one_out;
  std::vector<double> trace_error;  // with the full fit, per trace: (pred - meas) / meas of the total
  Json to_json() const;
};

// Least squares over the samples. Each trace's rows are weighted by 1 / its total measured time
// so that every trace counts alike. Constraints: efficiencies in (0, 1] (inverse >= 1), launch
// overhead >= 0; parameters that leave their range are held at the bound and reported. Throws
// Error naming the parameter when the samples cannot determine it ("attention efficiency is not
// determined by these traces: they contain no attention work"). `hold` keeps parameters at the
// base profile's values ("gemm", "attention", "attention_backward", "memory_bound", "launch_overhead").
FitResult fit_efficiencies(const std::vector<CalibrationSample>& samples, const models::GpuSpec& base,
                           int trace_count, const std::vector<std::string>& hold = {});

// ---- Whole steps as measurements (`oomb calibrate --points`): what a user has from their own
// PyTorch runs or a paper's figure, one step time per configuration.

// The compute work of one whole step at efficiency 1: every pass of every chunk and layer (oomb
// schedule) or of the full sequence (standard schedule), and a GPU optimizer's update as
// memory-bound work. Priced at a profile's efficiencies it is the step's compute_s wherever
// attention is compute-bound (the cost model takes the larger of its flops and K/V reads).
OpWork step_work(const Scenario& s);

// One measured configuration: a step time (and optionally the device peak and tokens/s).
struct MeasuredPoint {
  std::string name;  // where it came from, for messages ("points.csv line 3")
  Scenario scenario;
  double step_s = 0;
  std::optional<int64_t> peak_device_bytes;
  std::optional<double> tokens_per_s;
};

struct PointsFit {
  FitResult fit;                   // trace_error / leave_one_out: per point, of the whole step; r2: of the step times
  models::GpuSpec profile;         // the base profile with the fitted efficiencies and launch overhead
  std::vector<Summary> predicted;  // each point's prediction with the fitted profile
  int iterations = 0;
  int64_t evaluations = 0;         // cost-model evaluations, the leave-one-out included (linear in the points)
};

// Least squares of the efficiencies to whole steps: each point is one sample (weighted by 1 / its
// step time, so every point counts alike; leave-one-out leaves out one point, with the time
// outside compute held at the full fit's: a downdate of the full fit, linear in the points) whose measured
// compute is step_s minus the step's predicted time outside compute (exposed copies, a host
// optimizer). That part depends on the compute it hides behind, so the fit is repeated with its
// own profile until it settles. Bounds, held parameters and undetermined ones (refused by name)
// as fit_efficiencies. Throws Error naming the point when its step is shorter than its predicted
// copy time alone, and for tensor-parallel points (their all-reduce is not fitted).
PointsFit fit_points(const std::vector<MeasuredPoint>& points, const models::GpuSpec& base,
                     const std::vector<std::string>& hold = {});

}  // namespace oomb::simulator
