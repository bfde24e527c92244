#pragma once
// Running a plan, as one library call: the runner (oomb::runner) takes a resolved run (the model,
// the configuration as run, the plan's buffer table when there is one, the backend and its
// options), checks it before anything is read or allocated, builds the backend (CPU, or CUDA with
// the CUPTI collector when the build has them), runs the warm-up and timed steps with fault
// capture, the optional reference and dense checks, and assembles the trace (CUPTI-decoded or
// host-timed) with its typed run record. `oomb run` is flag parsing around it (cli/run_cmd.cpp);
// tests and benches call it directly.
//
// Owns: the run's checks that need the model and the configuration (kernel choice, dtypes, host
// memory, the plan's table against the run's), the backend factory and its #ifdefs, the step loop,
// the trace's step timing. Must not include: flag parsing, printing to a terminal (it reports
// through RunRequest::message and ::progress), file writes (the caller writes the trace and the
// checkpoints it returns).
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "executor/runtime/adapters.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "planner/plan.h"
#include "simulator/simulator.h"
#include "step/buffers.h"
#include "traces/trace.h"

namespace oomb::runner {

using executor::Gradients;
using executor::Measured;
using executor::Progress;
using executor::Weights;

// Flags that may change a plan's run (everything else a plan fixes): --layers cuts the model for a
// quick run, the page dtypes (e.g. fp32 pages for an exact reference run) are predicted as run.
struct PlanOverrides {
  std::optional<int64_t> layers;
  std::optional<std::string> kv_dtype, kv_grad_dtype;
};

// The run of a plan: its scenario with the overrides applied, and the buffer table the run is
// checked against at start (the plan's rows; none when an override changes the run's shapes, as
// the plan's table then describes another run). Throws oomb::Error naming `plan_path` for a plan
// that cannot run (not executable, more than one GPU).
struct PlannedRun {
  simulator::Scenario scenario;
  std::vector<step::BufferRow> planned;
};
PlannedRun plan_run(const planner::Plan& plan, const std::string& plan_path, const PlanOverrides& overrides);

// The run without a plan: the exact fp32 reference unless bf16 storage is asked for (`given` holds
// the configuration keys set explicitly, ScenarioFlags::explicit_knobs); the config's and presets'
// dtypes apply to predictions, not to an unflagged run. On cuda the weights are bf16 (the
// planner's default) so that bf16 GEMMs read them as they are.
simulator::Scenario unplanned_run(simulator::Scenario s, const std::set<std::string>& given, const std::string& backend);

struct RunRequest {
  simulator::Scenario scenario;          // the run (plan_run / unplanned_run)
  std::vector<step::BufferRow> planned;  // the plan's buffer table (empty: nothing to check against)
  std::string plan_path;                 // the plan's file ("" = no plan); errors name it
  std::string context_flag;              // the --context the user gave (errors of a run without a plan)
  std::string backend = "cpu";           // cpu | cuda
  int cpu_threads = 0;                   // cpu: compute threads (0 = the CPUs this process may use)
  // Data parallelism: the job's communicator (MPI under mpirun; not owned). Rank r of N trains on
  // sequence step x N + r. Null: one process.
  executor::Communicator* comm = nullptr;
  // The MPI job's identity, the same on every rank (cli/mpi_job.h): recorded in the trace, so that
  // validate judges rank traces of one run together ("" for a one-process run).
  std::string job;
  std::string attention_kernel;          // cuda: auto (""), fp32, bf16-tc
  std::string gemm_precision;            // cuda: bf16, tf32, fp32; "" = bf16, or fp32 without a plan on fp32 weights
  std::string trace_timing;              // "" (cupti where built, else host), host, cupti
  int64_t warmup_steps = 0, timed_steps = 1;
  bool record_trace = false;
  traces::Detail detail = traces::Detail::layer;
  std::string command;  // recorded in the trace
  float lr = 1e-3f;
  int64_t grad_accum = 1;
  bool reference = false, measure_recall = false, compare_dense = false;
  bool keep_weights = false, keep_gradients = false;  // return the final weights / gradients
  bool keep_adapters = false;                          // LoRA: return the trained adapters
  // Progress of step `step` of `steps` (warm-up included) and what the run is doing now (both quiet
  // with --quiet); warnings for the user (always shown; stderr in the CLI).
  std::function<void(int64_t step, int64_t steps, const Progress&)> progress;
  std::function<void(const std::string&)> status;
  std::function<void(const std::string&)> message;
  // Asked before every step: true ends the run there (an interrupt). The completed steps are the
  // result (RunResult::interrupted; no final weights, gradients or adapters are kept), the timed
  // ones those after the warm-up, or the warm-up steps when none after it completed.
  std::function<bool()> stop;
};

// What a CUPTI-timed trace recorded.
struct CuptiSummary {
  int64_t records = 0, kernels = 0, memcpys = 0, memsets = 0, untagged = 0, outside = 0, dropped = 0;
};

// --reference: the full-sequence reference against the chunk-recurrent step 1.
struct ReferenceCheck {
  double loss = 0, loss_rel_error = 0, max_grad_rel_error = 0;
  std::string worst_tensor;
};

struct RunResult {
  models::ModelSpec model;   // as run (layers cut)
  step::Config config;  // as run
  std::string backend, attention_kernel, gemm_precision;
  std::string kv_pages, grad_pages;  // page storage as run
  bool offload = false;
  int cpu_threads = 0;      // cpu runs
  std::string device_name;  // cuda runs: the device and its facts ("NVIDIA H200 (sm_90, 132 SMs, driver 12.8)")
  std::string cuda_device;  // cuda runs: the name the runtime reports ("NVIDIA H200"; models GpuSpec::cuda_device_names)
  bool emulated_device = false;  // cuda runs on the emulated CUDA device (CudaBackend::emulated)
  Json cuda;                // cuda runs: kernel families and GEMM precisions that ran, the backend's buffers
  int64_t warmup_steps = 0, timed_steps = 0;
  std::vector<double> losses;        // every step, the warm-up's first
  std::vector<double> step_times_s;  // the timed steps
  double fastest_step_s = 0, timed_mean_step_s = 0;
  Measured measured;
  int64_t allocator_reserved_bytes = 0;  // cpu runs: the caching allocator's most held at once
  std::optional<ReferenceCheck> reference;
  std::optional<executor::DenseComparison> dense;
  std::optional<traces::Trace> trace;  // record_trace: the measured trace (host trace so far after a failure)
  std::optional<CuptiSummary> cupti;   // the trace is CUPTI-timed
  std::string cupti_failure;           // why a CUPTI-timed trace fell back to host timing ("" = it did not)
  bool interrupted = false;            // RunRequest::stop ended the run after steps_completed steps
  int64_t steps_completed = 0, steps_requested = 0;  // warm-up included
  std::string failure;                 // a step failed (device fault or runtime error): what and where
  int64_t failed_step = 0;             // 1-based
  std::optional<Weights> weights;      // keep_weights
  std::optional<Gradients> gradients;  // keep_gradients (LoRA: the adapters' gradients)
  std::optional<executor::ParamTensors> adapters;  // keep_adapters (LoRA)
  int rank = 0, world = 1;                          // data parallelism
  std::vector<std::vector<double>> rank_losses;     // world > 1: every rank's losses (gathered)
  Json step_timing() const;            // the step time validate compares, and how it was taken
};

// Every check of a run that needs its model and configuration, before anything is read or
// allocated (throws oomb::Error naming the flag or the plan file): backend options, page dtypes,
// reference size, host memory, and the plan's buffer table against the one this run needs. Returns
// that table (built once, for the backend that will run it) with the check's notes.
executor::RunTable check_run(const RunRequest& r);

// What a run reads before it starts, each checked against the run's model and configuration (a
// file too short, a checkpoint or adapter that does not fit, an adapter for a run that trains every
// parameter: Error naming the flag). The paths are `oomb run`'s: "" = synthetic tokens / random
// weights (seeded) / new adapters (PEFT's initialisation, B drawn with lora_init_b_std when > 0).
struct InputFiles {
  std::string tokens, weights, adapter;
  uint64_t seed = 1234;
  float init_std = 0.02f;
  float lora_init_b_std = 0;
  // Told, before the adapter's tensors are read, that a loaded adapter was made for another base model.
  std::function<void(const std::string&)> warning;
};
struct RunInputs {
  executor::TokenSource tokens;
  Weights weights;
  executor::ParamTensors adapters;                     // LoRA: the adapters to train; empty otherwise
  std::optional<executor::AdapterConfig> loaded_adapter;  // --adapter's config (what a saved one keeps)
  std::string base;  // the base model a saved adapter names: --weights, else the model id
};
RunInputs read_inputs(const RunRequest& r, const InputFiles& f);

// Runs it on the table check_run returned for it (the Engine allocates from it). A step that fails is
// returned (failure, failed_step, the trace so far), not thrown; bad input throws oomb::Error. LoRA
// (config lora_rank > 0): `adapters` are the initial adapters (executor::init_adapters or
// read_adapter, laid out for the model as run).
RunResult run(const RunRequest& r, const executor::RunTable& table, const Weights& weights,
              const executor::TokenSource& tokens, const executor::ParamTensors& adapters = {});
// check_run, then run.
RunResult run(const RunRequest& r, const Weights& weights, const executor::TokenSource& tokens,
              const executor::ParamTensors& adapters = {});

// Weights or gradients about to be written: a non-finite value from a diverged step must not reach a
// file (Error naming `flag` and the tensor).
void check_finite(const executor::ParamTensors& t, const std::string& flag, const char* what);

// The run as --json prints it, and the text summary `oomb run` prints.
Json to_json(const RunResult& r);
// `tokens` and `weights` describe the run's inputs; `trace_file` is where the trace was written ("" = none).
std::string describe(const RunResult& r, const RunRequest& req, const std::string& tokens, const std::string& weights,
                     const std::string& trace_file);

}  // namespace oomb::runner
