// oomb run: execute chunk-recurrent training steps (the CPU reference backend; CUDA when built),
// with a progress line, a measured summary, an optional trace, and an optional full-sequence
// reference check of the gradients. A cuda run's trace is timed on the device by the CUPTI collector
// when the build has it (--trace-timing cupti, the default there): the driver tags every op and copy
// with its (stage, chunk, layer, pass) through EngineOptions::tagger. A cuda run's attention kernels
// are chosen by --attention-kernel (auto: bf16 tensor cores where they run, fp32 elsewhere); which
// family ran how often goes into --json and the trace's metadata.extra.cuda. Its linear GEMMs run at
// --gemm-precision (bf16 by default: bf16 operands, fp32 accumulation; CudaBackendOptions' own default is
// fp32, the tests' reference), recorded the same way with the GEMM count of each precision.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/microbench.h"
#include "executor/runtime/profiler_fallback.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "planner/executable.h"
#include "planner/plan.h"
#include "simulator/calibration.h"
#ifdef OOMB_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#endif
#ifdef OOMB_HAVE_CUPTI
#include "executor/cupti/collector.h"
#endif

namespace oomb::cli {
namespace {

using namespace oomb::executor;

struct RunArgs {
  ScenarioFlags flags;
  std::string plan;
  std::string backend = "cpu";
  int64_t steps = 1;
  bool steps_given = false;
  int64_t warmup = -1;  // untimed steps first; -1 = 1 when a --trace is written, else 0
  int threads = 0;      // cpu backend compute threads; 0 = the CPUs this process may use
  std::string tokens, weights, save_weights, dump_grads, trace, detail = "layer";
  std::string trace_timing;  // "" = cupti for cuda when built with CUPTI, else host
  std::string attention_kernel;  // "" = auto (cuda only)
  std::string gemm_precision;    // "" = bf16, or fp32 for a run without a plan on fp32 weights (cuda only)
  uint64_t seed = 1234;
  float init_std = 0.02f;
  int64_t grad_accum = 1;
  int64_t max_shard_bytes = kDefaultMaxShardBytes;  // --save-weights / --dump-grads shard size
  float lr = 1e-3f;
  bool reference = false;
  bool measure_recall = false, compare_dense = false;
  bool json = false;
  bool quiet = false;
  std::string command;
};

// Progress on stderr, at most ~5 updates per second (a rewritten line on a terminal, plain lines
// at most once a second otherwise).
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled), tty_(isatty(fileno(stderr)) != 0) {}
  void update(int64_t step, int64_t steps, const Progress& p) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::milliseconds(tty_ ? 200 : 1000)) return;
    last_ = now;
    char buf[256];
    std::snprintf(buf, sizeof buf, "step %lld/%lld  stage %d  chunk %lld/%lld  %5.1f%%  %s tokens/s  device %s  ETA %s",
                  static_cast<long long>(step + 1), static_cast<long long>(steps), p.stage,
                  static_cast<long long>(p.chunk + 1), static_cast<long long>(p.chunks), 100.0 * p.fraction,
                  format_count(p.tokens_per_s).c_str(), format_bytes(p.device_bytes).c_str(),
                  format_duration_s(p.eta_s).c_str());
    if (tty_) std::fprintf(stderr, "\r\033[K%s", buf);
    else std::fprintf(stderr, "%s\n", buf);
    shown_ = true;
  }
  void done() {
    if (enabled_ && tty_ && shown_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  bool enabled_, tty_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point last_{};
};

struct ReferenceCheck {
  double loss = 0, loss_rel_error = 0, max_grad_rel_error = 0;
  std::string worst_tensor;
};

// Before any work: the reference's size is known from the model and the context.
void check_reference_size(const models::ModelSpec& m, int64_t context_tokens) {
  const auto n = static_cast<double>(context_tokens);
  const double probs_bytes = 4.0 * static_cast<double>(m.q_heads) * n * n * static_cast<double>(m.layers);
  if (probs_bytes > 4.0 * (1ull << 30))
    throw Error("--reference", "", "the full-sequence reference keeps every layer's N x N attention probabilities (" +
                                       format_bytes(static_cast<int64_t>(std::min(probs_bytes, 9e18))) + " here)",
                "use a shorter --context (e.g. 4K) or fewer --layers");
}

// Weights or gradients about to be written: a NaN from a diverged step must not reach a file.
void check_finite(const ParamTensors& t, const std::string& flag, const char* what) {
  for (const auto& p : t.layout.params()) {
    const float* x = t.at(p);
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(x[i]))
        throw Error(flag, p.name, std::string("the run's ") + what + " hold a non-finite value (element " +
                                      std::to_string(i) + "); nothing was written",
                    "a lower --lr, or finite --weights");
  }
}

ReferenceCheck check_against_reference(const models::ModelSpec& m, const simulator::Config& c, const Weights& w,
                                       const std::vector<int32_t>& tokens, const Engine& e, double loss) {
  check_reference_size(m, static_cast<int64_t>(tokens.size()));
  std::vector<cpu::MaskedAttention> masks;
  if (c.attention == simulator::Attention::sparse)
    for (int64_t l = 0; l < m.layers; ++l)
      masks.push_back(cpu::selection_mask(m, c.context_tokens, c.chunk_tokens, c.page_tokens, e.selections(), l));
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens, masks.empty() ? nullptr : &masks);
  const Gradients g = e.gradients();
  ReferenceCheck r;
  r.loss = ref.loss;
  r.loss_rel_error = std::abs(loss - ref.loss) / std::max(std::abs(ref.loss), 1e-30);
  const WorstTensor worst = worst_relative_l2(g, ref.grads);
  r.max_grad_rel_error = worst.rel_l2;
  r.worst_tensor = worst.name;
  return r;
}

// What a CUPTI-timed trace recorded (printed, and in --json).
struct CuptiSummary {
  int64_t records = 0, kernels = 0, memcpys = 0, memsets = 0, untagged = 0, outside = 0, dropped = 0;
};

int run_run(const RunArgs& a) {
#ifndef OOMB_HAVE_CUDA_BACKEND
  if (a.backend == "cuda")
    throw Error("--backend", "cuda", "this build has no CUDA backend",
                "use --backend cpu, or build on a machine with nvcc (OOMB_CUDA=AUTO|ON)");
#endif
  if (a.backend != "cpu" && a.backend != "cuda") throw Error("--backend", a.backend, "unknown backend", "cpu or cuda");
  // The cuda backend's attention kernels (CudaAttentionKernel): auto = bf16 tensor cores where they
  // run (head_dim 64 / 128, sm_80+, aligned buffers), fp32 elsewhere; fp32 = the CUDA-core reference;
  // bf16-tc = tensor cores or an error.
  if (!a.attention_kernel.empty() && a.attention_kernel != "auto" && a.attention_kernel != "fp32" &&
      a.attention_kernel != "bf16-tc")
    throw Error("--attention-kernel", a.attention_kernel, "unknown attention kernel", "auto, fp32 or bf16-tc");
  if (!a.attention_kernel.empty() && a.backend != "cuda")
    throw Error("--attention-kernel", a.attention_kernel,
                "chooses the cuda backend's attention kernels; a " + a.backend +
                    " run computes attention in fp32 on the CPU",
                "drop --attention-kernel, or use --backend cuda");
  const std::string attention_kernel = a.attention_kernel.empty() ? "auto" : a.attention_kernel;
  // The cuda backend's linear GEMMs (CudaGemmPrecision): bf16 (default: the method's bf16 training),
  // tf32, or fp32 (the reference).
  if (!a.gemm_precision.empty() && a.gemm_precision != "fp32" && a.gemm_precision != "tf32" &&
      a.gemm_precision != "bf16")
    throw Error("--gemm-precision", a.gemm_precision, "unknown GEMM precision", "fp32, tf32 or bf16");
  if (!a.gemm_precision.empty() && a.backend != "cuda")
    throw Error("--gemm-precision", a.gemm_precision,
                "chooses the cuda backend's GEMM precision; a " + a.backend + " run computes its GEMMs in fp32",
                "drop --gemm-precision, or use --backend cuda");
  if (a.steps <= 0 || a.steps > 1000000) throw Error("--steps", std::to_string(a.steps), "must be in [1, 1000000]");
  if (a.warmup < -1) throw Error("--warmup", std::to_string(a.warmup), "must be 0 or more");
  if (a.threads < 0) throw Error("--threads", std::to_string(a.threads), "must be positive", "e.g. --threads 2");
  if (a.threads > 0 && a.backend != "cpu")
    throw Error("--threads", std::to_string(a.threads), "sets the cpu backend's compute threads",
                "drop it, or --backend cpu");
  // A trace is what `oomb validate` compares: timed like the fidelity suite (a warm-up step, then
  // the fastest of 3 steps) unless --warmup / --steps say otherwise.
  const int64_t warmup = a.warmup >= 0 ? a.warmup : (a.trace.empty() ? 0 : 1);
  const int64_t timed_steps = a.steps_given || a.trace.empty() ? a.steps : 3;
  const int64_t total_steps = warmup + timed_steps;
  if (a.grad_accum <= 0 || a.grad_accum > 1000000)
    throw Error("--grad-accum", std::to_string(a.grad_accum), "must be in [1, 1000000]");
  finite_in(a.init_std, 0, 10, "--init-std", "the std of the random weights, e.g. 0.02");
  finite_in(a.lr, 0, 10, "--lr", "an AdamW learning rate, e.g. 1e-3");
  // Every output is checked before any work: a bad --trace must not cost the whole run.
  check_writable(a.save_weights, "--save-weights");
  check_writable(a.dump_grads, "--dump-grads");
  check_writable(a.trace, "--trace");
  // How the trace is timed: CUPTI device times (cuda, when built with CUPTI) or host wall clock.
  if (!a.trace_timing.empty() && a.trace_timing != "host" && a.trace_timing != "cupti")
    throw Error("--trace-timing", a.trace_timing, "unknown trace timing", "host or cupti");
  if (!a.trace_timing.empty() && a.trace.empty())
    throw Error("--trace-timing", a.trace_timing, "times the trace, and no --trace is written", "add --trace FILE");
  if (a.trace_timing == "cupti" && a.backend != "cuda")
    throw Error("--trace-timing", "cupti", "CUPTI times CUDA work; a " + a.backend + " run is timed on the host",
                "use --backend cuda, or --trace-timing host");
  if (a.trace_timing == "cupti" && !built_with_cupti())
    throw Error("--trace-timing", "cupti", "this build has no CUPTI collector",
                "build with -DOOMB_CUDA=ON where the CUDA toolkit has CUPTI, or use --trace-timing host");
  const bool use_cupti = !a.trace.empty() && a.backend == "cuda" && built_with_cupti() && a.trace_timing != "host";
  (void)use_cupti;  // read only in builds with CUPTI
  const traces::Detail detail = traces::detail_from_string(a.detail, "--detail");
  simulator::Scenario s;
  std::vector<step::BufferRow> planned_rows;
  if (!a.plan.empty()) {
    // The plan carries every knob; flags that would change it are refused rather than ignored, except
    // --layers (a quick run) and the page dtypes (e.g. fp32 pages for an exact reference run), which
    // `oomb validate` predicts as run.
    std::set<std::string> knobs = a.flags.explicit_knobs();
    knobs.erase("kv_dtype");
    knobs.erase("kv_grad_dtype");
    if (!a.flags.context.empty() || !knobs.empty() || !a.flags.preset.empty())
      throw Error("--plan", a.plan, "a plan fixes the context and every knob",
                  "drop --context/--preset/knob flags (--layers, --kv-dtype and --kv-grad-dtype may stay), or run "
                  "without --plan");
    const planner::Plan plan = planner::load_plan(a.plan);
    if (std::string why; !planner::executable(plan.config, &why)) throw Error("--plan", a.plan, "is not executable", why);
    s = plan.scenario();
    if (s.config.gpus > 1)
      throw Error("--plan", a.plan,
                  "plans tensor parallelism over " + std::to_string(s.config.gpus) +
                      " GPUs, and oomb run executes on one GPU (its pages and copies would not be the plan's)",
                  "plan for one GPU (drop --gpus from oomb plan) to run it");
    // The plan's buffer table is what the run is checked against at start, unless a flag changed
    // the run's shapes (then the table describes another run).
    if (!a.flags.layers && !a.flags.kv_dtype && !a.flags.kv_grad_dtype)
      planned_rows = plan.buffers;
    if (a.flags.layers) {
      s.config.layers_override = *a.flags.layers;
      // A quick run on fewer layers keeps at most all but one of them (the trace records it).
      if (s.config.checkpointing) s.config.kept_layers = std::min(s.config.kept_layers, *a.flags.layers - 1);
    }
    if (a.flags.kv_dtype) s.config.kv_dtype = *a.flags.kv_dtype;
    if (a.flags.kv_grad_dtype) s.config.kv_grad_dtype = *a.flags.kv_grad_dtype;
    simulator::validate(s.config, s.model);
  } else {
    s = a.flags.resolve();
    // Without a plan the run is the exact fp32 reference unless bf16 storage is asked for: the
    // config's (and presets') dtypes apply to predictions, not to an unflagged run. On cuda the
    // weights are bf16 (the planner's default), so that its bf16 GEMMs read them as they are
    // instead of converting W at every call; --param-dtype fp32 gives the fp32 reference (with fp32
    // GEMMs, below).
    if (!a.flags.kv_dtype) s.config.kv_dtype = "fp32";
    if (!a.flags.kv_grad_dtype) s.config.kv_grad_dtype = "fp32";
    if (!a.flags.param_dtype) s.config.param_dtype = a.backend == "cuda" ? "bf16" : "fp32";
    if (!a.flags.param_grad_dtype) s.config.param_grad_dtype = "fp32";
    if (!a.flags.activation_dtype) s.config.activation_dtype = "fp32";
    if (!a.flags.loss_dtype) s.config.loss_dtype = "fp32";
  }
  const simulator::Config& c = s.config;
  // The GEMM precision, unless --gemm-precision: bf16; without a plan, that of the weights (fp32
  // weights with bf16 GEMMs would be converted at every call).
  const std::string gemm_precision = !a.gemm_precision.empty()                      ? a.gemm_precision
                                     : a.plan.empty() && c.param_dtype == "fp32" ? "fp32"
                                                                                 : "bf16";
  if (c.context_tokens <= 0) throw Error("--context", "", "is required (or give --plan)", "e.g. 16K");
  const models::ModelSpec m = effective_model(s.model, c);
  if (a.reference && c.optimizer != simulator::Optimizer::none)
    throw Error("--reference", "", "compares the gradients of step 1, which an optimizer step consumes",
                "use --optimizer none with --reference");
  const bool sparse_mode = c.attention == simulator::Attention::sparse;
  if (a.measure_recall && !sparse_mode)
    throw Error("--measure-recall", "", "measures what sparse page selections capture of the dense attention",
                "add --attention sparse");
  // Page dtypes the executor stores (fp32, bf16; the Engine refuses others by name), on either
  // backend: refused before anything is read or allocated.
  auto page_dtype = [&](const std::string& name, const char* flag, bool given) {
    try {
      return page_dtype_from_string(name, flag);
    } catch (const Error& e) {
      if (a.plan.empty() || given) throw;
      throw Error(flag, name, e.problem() + "; the plan asks for it",
                  std::string("override it: ") + flag + " fp32 or bf16");
    }
  };
  const PageDtype kv_pages = page_dtype(c.kv_dtype, "--kv-dtype", a.flags.kv_dtype.has_value());
  const PageDtype grad_pages = page_dtype(c.kv_grad_dtype, "--kv-grad-dtype", a.flags.kv_grad_dtype.has_value());
  if (a.backend == "cuda" && attention_kernel == "bf16-tc" && m.head_dim != 64 && m.head_dim != 128)
    throw Error("--attention-kernel", "bf16-tc",
                "the bf16 tensor-core kernels take head_dim 64 or 128; " + m.id + " has head_dim " +
                    std::to_string(m.head_dim),
                "use --attention-kernel auto, which runs the fp32 kernels where the tensor-core ones cannot, or fp32");
  if (a.reference) check_reference_size(m, c.context_tokens);
  {
    // A context no host can hold is refused by flag, before the tokens are generated: the
    // simulator's prediction of this run (fp32, as the executor runs it) is a lower bound of what
    // it allocates (the CPU backend's device memory is host memory too), plus the token ids.
    simulator::Scenario need = s;
    need.config.layers_override = c.layers_override;
    simulator::apply_cpu_run(need);
    const simulator::Summary sum = simulator::evaluate(need);
    const double host_bytes = static_cast<double>(sum.peak_host_bytes) + 8.0 * static_cast<double>(c.context_tokens) +
                              (a.backend == "cpu" ? static_cast<double>(sum.peak_device_bytes) : 0.0);
    const int64_t ram = host_ram_bytes();
    if (ram > 0 && host_bytes > static_cast<double>(ram))
      throw Error(a.plan.empty() ? "--context" : "--plan", a.plan.empty() ? a.flags.context : a.plan,
                  "this run needs at least " + format_bytes(static_cast<int64_t>(std::min(host_bytes, 9e18))) +
                      " of host memory and this machine has " + format_bytes(ram),
                  "a shorter context or fewer --layers");
  }
  if (a.compare_dense && !sparse_mode)
    throw Error("--compare-dense", "", "compares a sparse step with the dense one", "add --attention sparse");
  if (a.compare_dense && c.optimizer != simulator::Optimizer::none)
    throw Error("--compare-dense", "", "compares the gradients of step 1, which an optimizer step consumes",
                "use --optimizer none with --compare-dense");

  // All input is read and checked before anything runs or is written.
  const TokenSource tokens = a.tokens.empty() ? TokenSource::synthetic(m.vocab, a.seed)
                                               : TokenSource::from_file(a.tokens, m.vocab);
  const std::vector<int32_t> first = tokens.sequence(0, c.context_tokens);
  if (a.max_shard_bytes <= 0)
    throw Error("--max-shard-bytes", std::to_string(a.max_shard_bytes), "must be positive", "e.g. 5000000000 (5 GB)");
  // A checkpoint has the model's own layers; tensors of layers --layers leaves out are skipped.
  const Weights w = a.weights.empty() ? random_weights(m, a.seed, a.init_std) : read_checkpoint(a.weights, m, s.model.layers);

  // The run's buffer table for the backend that will run it (step/buffers.h: the CUDA backend's
  // workspace and op scratch included) and the plan check against it, before any device call: a plan
  // that cannot start is refused here, not after the weights are on the GPU.
  step::Target target;
  target.backend = a.backend == "cuda" ? step::BackendKind::cuda : step::BackendKind::cpu;
  target.bf16_gemm = gemm_precision == "bf16";
  const std::vector<step::BufferRow> needed_rows = run_rows(s.model, c, target);
  check_plan_rows(planned_rows, needed_rows, a.backend);

#ifdef OOMB_HAVE_CUPTI
  // Declared before the backend and the Engine: outlives both.
  std::unique_ptr<cupti::CuptiCollector> collector;
  std::unique_ptr<cupti::CuptiTagger> tagger;
#endif
  std::unique_ptr<Backend> backend_owner;
  std::string device_name;
  // Why a CUPTI-timed trace fell back to host timing ("" = it did not): the collector could not
  // start, or failed later; the run goes on, says so and the trace records it.
  std::string cupti_failure;
  // cuda runs: the attention kernel asked for and how many attention calls each family ran (in
  // --json and the trace's metadata.extra.cuda); null for cpu runs.
  std::function<Json()> cuda_summary = [] { return Json(); };
  if (a.backend == "cpu") {
    CpuBackendOptions copt;
    copt.threads = a.threads;
    backend_owner = std::make_unique<CpuBackend>(copt);
  } else {
#ifdef OOMB_HAVE_CUDA_BACKEND
    std::string why;
    if (!cuda_device_available(&why))
      throw Error("--backend", "cuda", "no usable CUDA device: " + why, "use --backend cpu");
#ifdef OOMB_HAVE_CUPTI
    // Before the backend exists, so that CUPTI sees its allocations (memory records).
    // Asked for by name (--trace-timing cupti), a refusal is an error; by default the run falls
    // back to host timing.
    if (use_cupti) {
      collector = start_or_fall_back([] { return std::make_unique<cupti::CuptiCollector>(); }, &cupti_failure);
      if (!collector && a.trace_timing == "cupti")
        throw Error("--trace-timing", "cupti", "CUPTI could not start: " + cupti_failure, "use --trace-timing host");
      if (!collector) std::fprintf(stderr, "%s\n", fallback_message(cupti_failure).c_str());
    }
#endif
    try {
      CudaBackendOptions copt;
      copt.attention_kernel =
          attention_kernel == "fp32" ? CudaAttentionKernel::fp32 : CudaAttentionKernel::bf16_tensor_core;
      copt.attention_kernel_strict = attention_kernel == "bf16-tc";
      copt.gemm_precision = gemm_precision == "fp32"   ? CudaGemmPrecision::fp32
                            : gemm_precision == "tf32" ? CudaGemmPrecision::tf32
                                                       : CudaGemmPrecision::bf16;
      // The op scratch is the table's op_scratch row, allocated once; no op grows it.
      for (const step::BufferRow& r : needed_rows)
        if (r.name == step::row::kOpScratch) copt.workspace_bytes = r.bytes;
      copt.fixed_workspace = true;
      auto cuda = std::make_unique<CudaBackend>(copt);
      device_name = cuda->device_name();
      if (attention_kernel == "bf16-tc" && !cuda->attention_tc_available())
        throw Error("--attention-kernel", "bf16-tc",
                    "the bf16 tensor-core kernels do not run on " + device_name +
                        " (they need sm_80 or later and a kernel image for it)",
                    "--attention-kernel auto or fp32");
      CudaBackend* cb = cuda.get();
      cuda_summary = [cb, attention_kernel, gemm_precision] {
        return Json{{"attention_kernel", attention_kernel},
                    {"attention_calls",
                     {{"fp32", cb->attention_calls(CudaAttentionKernel::fp32)},
                      {"bf16_tc", cb->attention_calls(CudaAttentionKernel::bf16_tensor_core)}}},
                    {"gemm_precision", gemm_precision},
                    {"gemm_calls",
                     {{"fp32", cb->gemm_calls(CudaGemmPrecision::fp32)},
                      {"tf32", cb->gemm_calls(CudaGemmPrecision::tf32)},
                      {"bf16", cb->gemm_calls(CudaGemmPrecision::bf16)}}},
                    // The backend's own device buffers: cuBLASLt's workspace, the ops' scratch (final size).
                    {"gemm_workspace_bytes", cb->gemm_workspace_bytes()},
                    {"scratch_bytes", cb->scratch_bytes()}};
      };
#ifdef OOMB_HAVE_CUPTI
      if (collector) {
        try {
          collector->name_stream(cuda->stream(CudaStream::compute), "compute");
          collector->name_stream(cuda->stream(CudaStream::h2d), "h2d");
          collector->name_stream(cuda->stream(CudaStream::d2h), "d2h");
          tagger = std::make_unique<cupti::CuptiTagger>(*collector);
        } catch (const std::exception& ex) {
          if (a.trace_timing == "cupti") throw Error("--trace-timing", "cupti", std::string("CUPTI failed: ") + ex.what(),
                                                     "use --trace-timing host");
          cupti_failure = ex.what();
          std::fprintf(stderr, "%s\n", fallback_message(cupti_failure).c_str());
          collector.reset();
        }
      }
#endif
      backend_owner = std::move(cuda);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("--backend", "cuda", std::string("no usable CUDA device: ") + e.what(), "use --backend cpu");
    }
#endif
  }
  Backend& backend = *backend_owner;
  EngineOptions o;
  o.planned = planned_rows;
  o.record_trace = !a.trace.empty();
  o.detail = detail;
  o.adamw.lr = a.lr;
  o.adamw.grad_accum = a.grad_accum;
  o.measure_recall = a.measure_recall;
#ifdef OOMB_HAVE_CUPTI
  o.tagger = tagger.get();
#endif
  // Remembers the (stage, chunk, layer, op) a failing step was in (forwarding to the CUPTI tagger).
  FaultTagger fault_tagger(o.tagger);
  o.tagger = &fault_tagger;
  ProgressLine line(!a.quiet);
  int64_t current = 0;
  o.progress = [&](const Progress& p) { line.update(current, total_steps, p); };
  Engine e(backend, s.model, c, w, o);

  std::vector<double> losses;
  std::optional<ReferenceCheck> ref;
  std::optional<DenseComparison> cmp;
  // CUPTI: the steps' intervals on the steady clock, each closed after the device finished its
  // work; only work inside them goes into the trace (not set-up, nor the checks run between steps).
  std::vector<std::pair<int64_t, int64_t>> windows;
  std::string failure;                // a device fault (or other runtime failure) in a step
  std::vector<double> step_times_s;  // of the timed steps (after the warm-up)
  int64_t timed_start_ns = 0;        // steady clock at the first timed step
  try {
    for (current = 0; current < total_steps; ++current) {
      const std::vector<int32_t> seq = current == 0 ? first : tokens.sequence(current, c.context_tokens);
      const int64_t t0 = steady_now_ns();
      if (current == warmup) timed_start_ns = t0;
      const StepResult sr = e.step(seq);
      losses.push_back(sr.loss);
      if (current >= warmup) step_times_s.push_back(sr.seconds);
#ifdef OOMB_HAVE_CUPTI
      if (collector) {
        static_cast<CudaBackend&>(backend).synchronize();
        // The warm-up's device work is left out, as on the host-timed path.
        if (current >= warmup) windows.emplace_back(t0, steady_now_ns());
      }
#else
      (void)t0;
#endif
      if (current == 0 && a.reference) {
        line.done();
        if (!a.quiet) std::fprintf(stderr, "running the full-sequence reference ...\n");
        ref = check_against_reference(m, c, w, seq, e, losses.back());
      }
      if (current == 0 && a.compare_dense) {
        line.done();
        if (!a.quiet) std::fprintf(stderr, "running the dense step ...\n");
        cmp = compare_with_dense(backend, s.model, c, w, seq, losses.back(), e.gradients());
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& ex) {
    const std::optional<FaultTagger::Tag> at = fault_tagger.fault();
    failure = ex.what() + (at ? " (in " + at->to_string() + ")" : std::string());
  }
  line.done();
  if (!failure.empty()) {
    // Still write what was measured: the completed steps (measured) and the host trace so far.
    std::fprintf(stderr, "oomb run: step %lld of %lld failed: %s\n", static_cast<long long>(current + 1),
                 static_cast<long long>(total_steps), failure.c_str());
    if (!a.trace.empty()) {
      try {
        traces::write_trace(e.trace(a.command), a.trace);
        std::fprintf(stderr, "oomb run: trace so far (host-timed): %s\n", a.trace.c_str());
      } catch (const std::exception& write_error) {
        std::fprintf(stderr, "oomb run: the trace could not be written: %s\n", write_error.what());
      }
    }
    if (a.json) {
      Json j = {{"error", failure},        {"failed_step", current + 1}, {"losses", losses},
                {"backend", a.backend},    {"model", m.id},              {"config", c.to_json()},
                {"measured", e.measured().steps > 0 ? e.measured().to_json() : Json()}};
      std::printf("%s\n", j.dump(2).c_str());
    }
    return 4;
  }

  const CheckpointWrite shards{a.max_shard_bytes, "F32"};
  std::vector<std::string> weight_files, grad_files;
  if (!a.save_weights.empty()) {
    const Weights final_weights = e.weights();
    check_finite(final_weights, "--save-weights", "weights");
    weight_files = write_checkpoint(final_weights, a.save_weights, shards);
  }
  if (!a.dump_grads.empty()) {
    const Gradients grads = e.gradients();
    check_finite(grads, "--dump-grads", "gradients");
    grad_files = write_checkpoint(grads, a.dump_grads, shards);
  }
  std::optional<CuptiSummary> cupti_summary;
  const Measured& ms = e.measured();
  const double fastest_step_s = *std::min_element(step_times_s.begin(), step_times_s.end());
  double timed_mean_s = 0;
  for (double x : step_times_s) timed_mean_s += x / static_cast<double>(step_times_s.size());
  const int cpu_threads = a.backend == "cpu" ? static_cast<CpuBackend&>(backend).threads() : 0;
  const Json step_timing = {{"warmup_steps", warmup},
                            {"timed_steps", timed_steps},
                            {"statistic", "fastest"},
                            {"step_s", fastest_step_s},
                            {"timed_mean_step_s", timed_mean_s},
                            {"step_times_s", step_times_s},
                            {"why", "the step time validate compares: the fastest timed step after the warm-up, as "
                                    "the fidelity suite and the calibration time (interference only adds time)"}};
  std::string step_timing_events = "every step's";
  if (!a.trace.empty()) {
    traces::Trace t;
    bool engine_clock = true;  // the events' times are on the Engine's steady clock
#ifdef OOMB_HAVE_CUPTI
    if (collector) {
      cupti::DecodeOptions d;
      d.detail = detail;
      if (collector->steady_clock()) {  // the Engine's clock: same origin as its memory samples
        d.origin_ns = e.trace_origin_ns();
        d.windows = windows;
      } else {
        std::fprintf(stderr, "oomb run: warning: CUPTI refused the steady clock; the trace keeps every record "
                             "(set-up and warm-up included) on CUPTI's clock\n");
        engine_clock = false;
      }
      traces::Metadata md;
      md.device = device_name + ", CUPTI device times";
      cupti::DecodeStats st;
      std::optional<traces::Trace> decoded;
      try {
        decoded = collector->trace(md, d, &st);
      } catch (const std::exception& ex) {  // the host trace is still good: keep it, say why
        cupti_failure = ex.what();
        std::fprintf(stderr, "%s\n", fallback_message(cupti_failure).c_str());
        engine_clock = true;
      }
      if (decoded) {
        traces::Trace& dev = *decoded;
        int64_t reserved_device = 0, reserved_host = 0;  // cudaMalloc'd / pinned, as CUPTI saw them
        for (const auto& sample : dev.memory) {
          reserved_device = std::max(reserved_device, sample.device_bytes);
          reserved_host = std::max(reserved_host, sample.host_bytes);
        }
        dev.metadata.extra = {{"gpu", device_name},
                              {"trace_timing", "cupti"},
                              {"cupti",
                               {{"records", st.records},
                                {"kernels", st.kernels},
                                {"memcpys", st.memcpys},
                                {"memsets", st.memsets},
                                {"memory", st.memory},
                                {"correlations", st.correlations},
                                {"untagged", st.untagged},
                                {"outside_steps", st.outside},
                                {"invalid", st.invalid},
                                {"ignored", st.ignored},
                                {"dropped", st.dropped},
                                {"steady_clock", collector->steady_clock()},
                                {"driver_api_records", collector->driver_records()},
                                {"reserved_device_bytes", reserved_device},
                                {"reserved_pinned_bytes", reserved_host}}}};
        t = e.device_timed_trace(std::move(dev), a.command);
        if (!engine_clock) {  // the Engine's step intervals are on another clock: one step, first to last
          std::erase_if(t.events, [](const traces::Event& ev) {
            return ev.kind == traces::EventKind::phase && ev.name == traces::kStepPhase;
          });
          t.summary = traces::summarize(t);
        }
        cupti_summary = CuptiSummary{st.records, st.kernels, st.memcpys, st.memsets, st.untagged, st.outside, st.dropped};
        if (st.dropped > 0)
          std::fprintf(stderr, "oomb run: warning: CUPTI dropped %lld activity records (its buffers were full): the "
                               "trace misses work\n", static_cast<long long>(st.dropped));
        if (!tagger->error().empty())
          std::fprintf(stderr, "oomb run: warning: a CUPTI tag could not be popped (%s): later tags may be wrong\n",
                       tagger->error().c_str());
      }
    }
#endif
    if (!cupti_summary) t = e.trace(a.command);
    // Either timing: the warm-up's events (and its step phase) are left out, so that per-step times
    // (the summary's, and validate's stage and pass rows, which divide by the measured block's
    // steps) describe the timed steps only. CUPTI decoded only the timed steps' windows already.
    if (warmup > 0 && engine_clock) {
      const int64_t cut = timed_start_ns - e.trace_origin_ns();
      std::erase_if(t.events, [cut](const traces::Event& ev) { return ev.start_ns < cut; });
      t.summary = traces::summarize(t);
      if (t.metadata.extra.contains("measured") && t.metadata.extra["measured"].is_object())
        t.metadata.extra["measured"]["steps"] = timed_steps;
      step_timing_events = "timed steps only (the warm-up's events are left out)";
    }
    if (!cupti_summary) {
      if (a.backend == "cuda") {
        t.metadata.device = device_name + ", host-timed (enqueue times)";
        t.metadata.extra["gpu"] = device_name;
        t.metadata.extra["trace_timing"] = "host";
      }
      if (!cupti_failure.empty()) record_profiler_fallback(t, cupti_failure);
    }
    if (a.backend == "cuda") t.metadata.extra["cuda"] = cuda_summary();
    // What validate compares as the step time: the fastest timed step (the measured block's mean
    // over all steps stays as mean_step_s), and how it was timed.
    if (t.metadata.extra.contains("measured") && t.metadata.extra["measured"].is_object()) {
      Json& mj = t.metadata.extra["measured"];
      mj["mean_step_s"] = ms.step_s;
      mj["step_s"] = fastest_step_s;
    }
    t.metadata.extra["step_timing"] = step_timing;
    t.metadata.extra["step_timing"]["events"] = step_timing_events;
    if (a.backend == "cpu") t.metadata.extra["cpu_threads"] = cpu_threads;
    const std::string v = version_string();
    const auto at = v.find("commit ");
    if (at != std::string::npos) t.metadata.git_commit = v.substr(at + 7, v.find(')', at) - at - 7);
    traces::write_trace(t, a.trace);
  }

  if (a.json) {
    Json j = {{"loss", losses.back()}, {"losses", losses}, {"tokens_per_s", ms.tokens_per_s},
              {"measured", ms.to_json()}, {"backend", a.backend}, {"model", m.id}, {"config", c.to_json()},
              {"step_timing", step_timing}};
    if (a.backend == "cpu") j["cpu_threads"] = cpu_threads;
    if (a.backend == "cuda") j["cuda"] = cuda_summary();
    if (ref)
      j["reference"] = {{"loss", ref->loss},
                        {"loss_rel_error", ref->loss_rel_error},
                        {"max_grad_rel_error", ref->max_grad_rel_error},
                        {"worst_tensor", ref->worst_tensor}};
    if (cmp) j["compare_dense"] = cmp->to_json();
    if (!a.trace.empty()) {
      j["trace"] = {{"file", a.trace}, {"timing", cupti_summary ? "cupti" : "host"}, {"step_s", fastest_step_s}};
      if (!cupti_failure.empty()) j["trace"]["cupti_unavailable"] = cupti_failure;
      if (cupti_summary)
        j["trace"]["cupti"] = {{"records", cupti_summary->records},   {"kernels", cupti_summary->kernels},
                               {"memcpys", cupti_summary->memcpys},   {"memsets", cupti_summary->memsets},
                               {"untagged", cupti_summary->untagged}, {"dropped", cupti_summary->dropped}};
    }
    if (!ms.recall.empty()) {
      j["mean_recall"] = ms.mean_recall();
      j["min_recall"] = ms.min_recall();
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const bool sparse = c.attention == simulator::Attention::sparse;
  std::printf("oomb run: %s (%lld layers), context %s, chunk %s, page %s, %s attention%s, resident layers %lld%s\n",
              m.id.c_str(), static_cast<long long>(m.layers), format_tokens(c.context_tokens).c_str(),
              format_tokens(c.chunk_tokens).c_str(), format_tokens(c.page_tokens).c_str(),
              simulator::to_string(c.attention),
              sparse ? (" (budget " + std::to_string(c.page_budget) + ", " + c.selection + ")").c_str() : "",
              static_cast<long long>(std::min(c.resident_layers, m.layers)),
              e.geometry().offload ? " (offload)" : " (no offload)");
  std::printf("backend %s, tokens %s, weights %s\n", a.backend == "cpu" ? ("cpu (bf16 storage emulated exactly, " + std::to_string(cpu_threads) + " compute threads)").c_str() : "cuda", tokens.describe().c_str(),
              a.weights.empty() ? ("random (seed " + std::to_string(a.seed) + ")").c_str() : a.weights.c_str());
  std::printf("storage: weights %s, gradients %s, activations %s, loss %s; pages: KV %s, KV-grad %s\n",
              c.param_dtype.c_str(), c.param_grad_dtype.c_str(), c.activation_dtype.c_str(), c.loss_dtype.c_str(),
              to_string(kv_pages), to_string(grad_pages));
  if (a.backend == "cuda") {
    const Json cs = cuda_summary();
    std::printf("attention kernel %s: %lld calls on bf16 tensor cores, %lld on fp32 CUDA cores\n",
                attention_kernel.c_str(), static_cast<long long>(cs["attention_calls"]["bf16_tc"].get<int64_t>()),
                static_cast<long long>(cs["attention_calls"]["fp32"].get<int64_t>()));
    std::printf("GEMM precision %s: %lld GEMMs in bf16, %lld in tf32, %lld in fp32\n", gemm_precision.c_str(),
                static_cast<long long>(cs["gemm_calls"]["bf16"].get<int64_t>()),
                static_cast<long long>(cs["gemm_calls"]["tf32"].get<int64_t>()),
                static_cast<long long>(cs["gemm_calls"]["fp32"].get<int64_t>()));
  }
  for (size_t i = 0; i < losses.size(); ++i)
    std::printf("  step %zu  loss %.6f%s\n", i + 1, losses[i], static_cast<int64_t>(i) < warmup ? "  (warm-up)" : "");
  std::printf("\nstep time %s, %s tokens/s\n", format_duration_s(ms.step_s).c_str(),
              format_count(ms.tokens_per_s).c_str());
  if (ms.step_times_s.size() > 1) {  // the first step pays one-time set-up (scratch growth, caches)
    double later = 0;
    for (size_t i = 1; i < ms.step_times_s.size(); ++i) later += ms.step_times_s[i];
    std::printf("first step %s, later steps %s on average\n", format_duration_s(ms.step_times_s[0]).c_str(),
                format_duration_s(later / static_cast<double>(ms.step_times_s.size() - 1)).c_str());
  }
  if (!planned_rows.empty())
    std::printf("buffer table: checked against the plan's (%zu rows)%s\n", planned_rows.size(),
                ms.notes.empty() ? ", every row as planned" : "");
  for (const std::string& n : ms.notes) std::printf("  note: %s\n", n.c_str());
  if (warmup > 0 || timed_steps > 1)
    std::printf("timed step (fastest of %lld after %lld warm-up%s): %s%s\n", static_cast<long long>(timed_steps),
                static_cast<long long>(warmup), warmup == 1 ? "" : "s", format_duration_s(fastest_step_s).c_str(),
                a.trace.empty() ? "" : " (the trace's step_s, what validate compares)");
  std::printf("peak device %s, peak host %s\n", format_bytes(ms.peak_device_bytes).c_str(),
              format_bytes(ms.peak_host_bytes).c_str());
  std::printf("device pools: KV %lld / %lld pages of %s, KV-grad %lld / %lld pages of %s (high-water / capacity)\n",
              static_cast<long long>(ms.kv_pool_high_water_pages), static_cast<long long>(ms.kv_pool_pages),
              format_bytes(ms.kv_page_bytes).c_str(), static_cast<long long>(ms.grad_pool_high_water_pages),
              static_cast<long long>(ms.grad_pool_pages), format_bytes(ms.grad_page_bytes).c_str());
  std::printf("copies per step: h2d %s, d2h %s, in %lld contiguous regions\n", format_bytes(ms.h2d_bytes).c_str(),
              format_bytes(ms.d2h_bytes).c_str(), static_cast<long long>(ms.copy_regions));
  if (sparse) {
    int64_t mx = 0;
    double sum = 0;
    for (const auto& u : ms.union_pages) {
      mx = std::max(mx, u.pages);
      sum += static_cast<double>(u.pages);
    }
    std::printf("selection union per (chunk, layer): mean %.1f pages, max %lld pages\n",
                ms.union_pages.empty() ? 0.0 : sum / static_cast<double>(ms.union_pages.size()),
                static_cast<long long>(mx));
  }
  if (!ms.recall.empty())
    std::printf("recall of the dense attention mass (last step, %zu (chunk, layer) pairs): mean %.4f, min %.4f\n",
                ms.recall.size(), ms.mean_recall(), ms.min_recall());
  if (cmp)
    std::printf("dense comparison (step 1): loss %.6f vs dense %.6f (diff %+.3e), max gradient rel. L2 error %.3e "
                "(%s)\n",
                cmp->loss, cmp->dense_loss, cmp->loss_diff, cmp->max_grad_rel_error, cmp->worst_tensor.c_str());
  if (ref)
    std::printf("reference (full sequence): loss %.6f (rel. error %.2e), max gradient rel. L2 error %.2e (%s)\n",
                ref->loss, ref->loss_rel_error, ref->max_grad_rel_error, ref->worst_tensor.c_str());
  if (!a.trace.empty()) {
    std::printf("trace (oomb.trace/1, %s detail, %s): %s\n", a.detail.c_str(),
                cupti_summary ? "CUPTI device times" : "host wall-clock times", a.trace.c_str());
    if (cupti_summary)
      std::printf("  CUPTI: %lld records (%lld kernels, %lld memcpys, %lld memsets), %lld dropped, %lld untagged; "
                  "step time with the collector %s (tracing overhead: divide by the step time of the same run "
                  "without --trace)\n",
                  static_cast<long long>(cupti_summary->records), static_cast<long long>(cupti_summary->kernels),
                  static_cast<long long>(cupti_summary->memcpys), static_cast<long long>(cupti_summary->memsets),
                  static_cast<long long>(cupti_summary->dropped), static_cast<long long>(cupti_summary->untagged),
                  format_duration_s(ms.step_s).c_str());
  }
  auto files = [](const std::vector<std::string>& f) {
    return f.size() == 1 ? f[0] : f[0] + " (index of " + std::to_string(f.size() - 1) + " shards)";
  };
  if (!weight_files.empty()) std::printf("weights: %s\n", files(weight_files).c_str());
  if (!grad_files.empty()) std::printf("gradients: %s\n", files(grad_files).c_str());
  return 0;
}

const Registrar reg("run", "Execute chunk-recurrent training steps (cpu reference backend, or cuda) and measure them",
                    [](CLI::App& sub) {
                      auto a = std::make_shared<RunArgs>();
                      a->flags.add_to(sub, false);
                      // The run's own page-dtype defaults (the shared help states the planning defaults).
                      sub.get_option("--kv-dtype")
                          ->description("KV page storage: fp32 or bf16 (round to nearest even, converted to fp32 "
                                        "for compute). Default for oomb run: fp32, the exact reference (with --plan: "
                                        "the plan's dtype, this flag overrides it; presets do not change it); "
                                        "fp16/fp8 are modelled by simulate and plan but not executed (both backends "
                                        "store fp32 and bf16 pages)");
                      sub.get_option("--kv-grad-dtype")
                          ->description("KV-gradient page storage: fp32 or bf16 (each chunk's fp32 contribution "
                                        "is added and rounded once). Default for oomb run: fp32 (with --plan: the "
                                        "plan's dtype, this flag overrides it)");
                      sub.add_option("--plan", a->plan,
                                     "Run a plan made by `oomb plan --out` (its model, context and knobs; --layers may "
                                     "still cut the model for a quick run)");
                      sub.add_option("--backend", a->backend, "cpu (fp32 reference) or cuda")->capture_default_str();
                      sub.add_option("--attention-kernel", a->attention_kernel,
                                     "--backend cuda only: the paged-attention kernels. auto (default): bf16 tensor "
                                     "cores (WMMA; operands rounded to bf16, fp32 softmax and accumulation, ~3e-3 "
                                     "relative error) where they run (head_dim 64 or 128, sm_80+, 16-byte-aligned "
                                     "buffers), the fp32 kernels elsewhere; fp32: the fp32 CUDA-core kernels (the "
                                     "reference, ~1e-5 from the CPU backend); bf16-tc: tensor cores or an error. "
                                     "The choice and how many calls each family ran are printed and recorded in "
                                     "--json (cuda) and the trace (metadata.extra.cuda)");
                      sub.add_option("--gemm-precision", a->gemm_precision,
                                     "--backend cuda only: the linear layers' GEMMs (cuBLASLt). bf16 (default for "
                                     "oomb run, except fp32 for a run without --plan on fp32 weights (--param-dtype "
                                     "fp32): the method's bf16 training; operands rounded to bf16, fp32 "
                                     "accumulation and fp32 results, ~2e-3 relative error per GEMM; a GEMM with no "
                                     "bf16 algorithm runs in fp32), tf32 (tensor cores on fp32 operands, 10-bit "
                                     "mantissas) or fp32 (the reference, the backend library's default). The choice "
                                     "and how many GEMMs ran in each precision are printed and recorded in --json "
                                     "(cuda) and the trace (metadata.extra.cuda)");
                      sub.add_option("--steps", a->steps,
                                     "Timed training steps (one sequence each; default 1, or 3 when a --trace is "
                                     "written: the trace's step_s is the fastest of them)");
                      sub.add_option("--warmup", a->warmup,
                                     "Untimed training steps before the --steps (default: 1 when a --trace is "
                                     "written, else 0); they train like the others and are in the trace's events");
                      sub.add_option("--threads", a->threads,
                                     "--backend cpu: compute threads (OpenMP loops and BLAS GEMMs; results are "
                                     "identical at any count). Default: the CPUs this process may use. Recorded in "
                                     "the trace (cpu_threads): validate compares it with a profile calibrated at "
                                     "the same count");
                      sub.add_option("--tokens", a->tokens,
                                     "Binary file of little-endian uint32 token ids (default: seeded synthetic)");
                      sub.add_option("--weights", a->weights,
                                     "Initial weights: a Hugging Face checkpoint (folder with model.safetensors or "
                                     "model.safetensors.index.json + shards, the index, or one .safetensors file; "
                                     "F32, BF16 or F16 tensors, HF names)");
                      sub.add_option("--save-weights", a->save_weights,
                                     "Write the final weights (F32, HF layout): a folder, or FILE.safetensors; sharded "
                                     "with an index above --max-shard-bytes");
                      sub.add_option("--dump-grads", a->dump_grads,
                                     "Write the accumulated parameter gradients (same layout as --save-weights)");
                      sub.add_option("--max-shard-bytes", a->max_shard_bytes,
                                     "Largest shard --save-weights / --dump-grads write (default 5e9, Hugging Face's "
                                     "5GB)")
                          ->capture_default_str();
                      sub.add_option("--seed", a->seed, "Seed of the random weights and synthetic tokens")
                          ->capture_default_str()
                          ->check(unsigned_integer());
                      sub.add_option("--init-std", a->init_std, "Std of the random weights")->capture_default_str();
                      sub.add_option("--lr", a->lr, "AdamW learning rate (with --optimizer gpu|host)")
                          ->capture_default_str();
                      sub.add_option("--grad-accum", a->grad_accum, "Steps per optimizer step")->capture_default_str();
                      sub.add_option("--trace", a->trace, "Write the measured trace (oomb.trace/1 JSON) to FILE");
                      sub.add_option("--detail", a->detail, "Trace detail: step, chunk, layer (default), op")
                          ->capture_default_str();
                      sub.add_option("--trace-timing", a->trace_timing,
                                     "How the --trace is timed: cupti (default for --backend cuda in a build with "
                                     "CUPTI: kernel and copy times on the device, tagged with the driver's (stage, "
                                     "chunk, layer, pass); source cuda-cupti, which `oomb validate` compares in "
                                     "time) or host (wall clock around each op; on cuda these are enqueue times, "
                                     "not compared in time; always for --backend cpu). Tracing overhead = step "
                                     "time with --trace / step time of the same run without it (both printed as "
                                     "'step time', a mean over all steps, warm-up included: compare runs with the "
                                     "same --steps and --warmup); a CUPTI run also prints its record count");
                      sub.add_flag("--reference", a->reference,
                                   "Also run the full-sequence reference and report the gradient error");
                      sub.add_flag("--measure-recall", a->measure_recall,
                                   "Sparse: per (chunk, layer) of stage 1, the share of the dense attention "
                                   "probability mass the selected pages (+ own chunk) capture, averaged over "
                                   "tokens and heads; mean/min printed, all in the trace (small contexts: keeps a "
                                   "host copy of the keys and scores every earlier key)");
                      sub.add_flag("--compare-dense", a->compare_dense,
                                   "Sparse: also run step 1 with dense attention (same weights and tokens) and "
                                   "report the loss difference and the worst relative L2 gradient error "
                                   "(with --optimizer none; small contexts)");
                      sub.add_flag("--json", a->json, "Print {loss, tokens_per_s, measured: {...}} as JSON");
                      sub.add_flag("--quiet", a->quiet, "No progress line");
                      sub.footer(
                          "Examples:\n"
                          "  oomb run --model tiny --context 16K --backend cpu --trace t.json\n"
                          "  oomb run --model tiny --context 16K --backend cuda --steps 2 --trace t.json && oomb "
                          "validate --trace t.json --gpu h200   (CUPTI-timed)\n"
                          "  oomb plan --model tiny --gpu h200 --context 16K --resident-layers 1 --out p.json && "
                          "oomb run --plan p.json --trace t.json && oomb validate --plan p.json --trace t.json\n"
                          "  oomb run --model tiny --context 2K --chunk 512 --page 64 --resident-layers 1 --reference\n"
                          "  oomb run --model tiny --context 2K --chunk 512 --page 64 --kv-dtype bf16 --reference   "
                          "(bf16 KV pages)\n"
                          "  oomb run --model tiny --context 8K --attention sparse --budget 4 --chunk 1K --page 64\n"
                          "  oomb run --model tiny --context 4K --attention sparse --budget 4 --chunk 512 --page 64 "
                          "--measure-recall --compare-dense --trace t.json\n"
                          "Exit status: 0 done, 2 bad input, 4 a step failed on the device (the error names the "
                          "stage, chunk, layer and op it was issued under; --json and --trace still record the "
                          "completed steps).");
                      return [a, &sub] {
                        a->command = "oomb run";
                        a->steps_given = sub.get_option("--steps")->count() > 0;
                        for (const auto* opt : sub.get_options()) {
                          if (opt->count() == 0 || opt->get_name() == "--help") continue;
                          a->command += " " + opt->get_name();
                          if (opt->get_expected_min() > 0)
                            for (const auto& r : opt->results()) a->command += " " + r;
                        }
                        return run_run(*a);
                      };
                    });

}  // namespace
}  // namespace oomb::cli
