// oomb run: flag parsing and printing around the runner (runner/runner.h), which checks the
// run, builds the backend (CPU; CUDA with the CUPTI collector when built), runs the steps and
// assembles the trace. Here: the flags and their help, the plan-override policy's flag names, the
// progress line, reading the tokens and weights, writing the trace and the checkpoints.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "core/json_util.h"
#include "runner/runner.h"
#include "executor/runtime/adapters.h"
#include "cli/mpi_job.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "planner/plan.h"
#include "planner/ranks.h"

namespace oomb::cli {
namespace {

using namespace oomb::executor;

struct RunArgs {
  ScenarioFlags flags;
  std::string plan;
  std::string backend = "cpu";
  int64_t steps = 1;
  bool steps_given = false;
  int64_t warmup = 0;   // untimed steps first; not given (warmup_given false): 1 when a --trace is written, else 0
  bool warmup_given = false;
  int threads = 0;      // cpu backend compute threads; 0 = the CPUs this process may use
  std::string tokens, weights, save_weights, dump_grads, trace, detail = "layer";
  std::string adapter, save_adapter;  // LoRA: PEFT adapter folders in and out
  float lora_init_b_std = 0;          // LoRA without --adapter: B's init std (0 = PEFT's zeros)
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

int run_run(RunArgs a, Communicator* comm, const std::string& job) {
  const int rank = comm ? comm->rank() : 0;
  // Rank r > 0 writes beside rank 0's trace (t.json -> t.rank1.json); beside a stream (--trace
  // /dev/null, a FIFO) there is no file to put, so the other ranks record theirs and discard it.
  const bool discard_trace = rank > 0 && planner::trace_is_stream(a.trace);
  if (!discard_trace) a.trace = planner::rank_trace_path(a.trace, rank);
  auto write_own_trace = [&](const traces::Trace& t) {
    if (!discard_trace) traces::write_trace(t, a.trace);
  };
  if (rank > 0) a.quiet = true;  // rank 0 reports progress and prints the job's summary
  // Resource flags are bounded (issue 24): each is refused, naming the flag and its range, before any work.
  bounded(a.steps, 1, kMaxSteps, "--steps", "timed steps, e.g. 3");
  bounded(a.warmup, 0, kMaxSteps, "--warmup", "untimed steps, e.g. 1 (leave it out for the default)");
  bounded(a.grad_accum, 1, kMaxSteps, "--grad-accum", "steps per optimizer step, e.g. 4");
  bounded(a.max_shard_bytes, kMinShardBytes, kMaxShardBytes, "--max-shard-bytes", "e.g. 5000000000 (5 GB)");
  // A trace holds every event of every step in memory until it is written: bounded in steps.
  constexpr int64_t kMaxTraceSteps = 1000;
  const int64_t traced = (a.steps_given ? a.steps : 3) + (a.warmup_given ? a.warmup : 1);
  if (!a.trace.empty() && traced > kMaxTraceSteps)
    throw Error(a.steps_given ? "--steps" : "--warmup", std::to_string(a.steps_given ? a.steps : a.warmup),
                "with --trace at most " + std::to_string(kMaxTraceSteps) +
                    " steps, warm-up included (the trace holds every event of every step in memory)",
                "fewer --steps (3, the default with --trace, gives the fastest of 3), or no --trace");
  finite_in(a.init_std, 0, 10, "--init-std", "the std of the random weights, e.g. 0.02");
  finite_in(a.lr, 0, 10, "--lr", "an AdamW learning rate, e.g. 1e-3");
  finite_in(a.lora_init_b_std, 0, 10, "--lora-init-b-std", "0 (PEFT's zero B) or e.g. 0.02");
  if (!a.adapter.empty() && a.lora_init_b_std != 0)
    throw Error("--lora-init-b-std", "", "initialises new adapters, and --adapter loads one", "drop one of them");
  // Every output is checked before any work: a bad --trace must not cost the whole run.
  check_checkpoint_writable(a.save_weights, "--save-weights");
  check_checkpoint_writable(a.dump_grads, "--dump-grads");
  check_writable(a.trace, "--trace");
  if (!a.save_adapter.empty()) check_adapter_writable(a.save_adapter, "--save-adapter");
  // No output may replace an input, nor two outputs one file (checkpoints: their folder and files).
  {
    std::vector<FlagPath> in = a.plan.empty() ? scenario_inputs(a.flags.model, a.flags.gpu, a.flags.host)
                                              : std::vector<FlagPath>{};
    in.push_back({"--plan", a.plan});
    in.push_back({"--tokens", a.tokens});
    for (const std::string& f : checkpoint_input_files(a.weights)) in.push_back({"--weights", f});
    std::error_code ec;
    if (std::filesystem::is_directory(a.weights, ec)) in.push_back({"--weights", a.weights, true});
    if (!a.adapter.empty()) in.push_back({"--adapter", a.adapter, true});
    std::vector<FlagPath> out = {{"--trace", a.trace}};
    if (!a.save_adapter.empty()) out.push_back({"--save-adapter", a.save_adapter, true});
    for (const auto& [flag, path] : {std::pair{"--save-weights", a.save_weights}, {"--dump-grads", a.dump_grads}}) {
      if (path.empty()) continue;
      const CheckpointPaths c = checkpoint_paths(path);
      if (c.folder) out.push_back({flag, path, true});
      for (const std::string& f : c.files) out.push_back({flag, f});
    }
    check_distinct_paths(in, out);
  }

  runner::RunRequest r;
  if (!a.plan.empty()) {
    // The plan carries every knob; flags that would change it are refused rather than ignored.
    std::set<std::string> knobs = a.flags.explicit_knobs();
    knobs.erase("kv_dtype");
    knobs.erase("kv_grad_dtype");
    if (!a.flags.context.empty() || !knobs.empty() || !a.flags.preset.empty())
      throw Error("--plan", a.plan, "a plan fixes the context and every knob",
                  "drop --context/--preset/knob flags (--layers, --kv-dtype and --kv-grad-dtype may stay), or run "
                  "without --plan");
    runner::PlannedRun p =
        runner::plan_run(planner::load_plan(a.plan), a.plan, {a.flags.layers, a.flags.kv_dtype, a.flags.kv_grad_dtype});
    r.scenario = std::move(p.scenario);
    r.planned = std::move(p.planned);
    r.plan_path = a.plan;
  } else {
    // --adapter without --lora-rank: the adapter's own rank, and its alpha and targets where no flag
    // gives them (a flag that disagrees with the adapter is then reported as that disagreement).
    if (!a.adapter.empty() && !a.flags.lora_rank) {
      const AdapterConfig ac = read_adapter_config(a.adapter);
      a.flags.lora_rank = ac.rank;
      if (!a.flags.lora_alpha) a.flags.lora_alpha = ac.alpha;
      if (!a.flags.lora_targets) {
        std::string names;
        for (const std::string& t : ac.targets) names += (names.empty() ? "" : ",") + t;
        a.flags.lora_targets = names;
      }
    }
    r.scenario = runner::unplanned_run(a.flags.resolve(), a.flags.explicit_knobs(), a.backend);
  }
  r.context_flag = a.flags.context;
  r.job = job;
  r.backend = a.backend;
  r.cpu_threads = a.threads;
  r.comm = comm;
  r.attention_kernel = a.attention_kernel;
  r.gemm_precision = a.gemm_precision;
  r.trace_timing = a.trace_timing;
  // A trace is what `oomb validate` compares: timed like the fidelity suite (a warm-up step, then
  // the fastest of 3 steps) unless --warmup / --steps say otherwise.
  r.warmup_steps = a.warmup_given ? a.warmup : (a.trace.empty() ? 0 : 1);
  r.timed_steps = a.steps_given || a.trace.empty() ? a.steps : 3;
  r.record_trace = !a.trace.empty();
  r.detail = traces::detail_from_string(a.detail, "--detail");
  r.command = a.command;
  r.lr = a.lr;
  r.grad_accum = a.grad_accum;
  r.reference = a.reference;
  r.measure_recall = a.measure_recall;
  r.compare_dense = a.compare_dense;
  r.keep_weights = !a.save_weights.empty();
  r.keep_gradients = !a.dump_grads.empty();
  r.keep_adapters = !a.save_adapter.empty();
  ProgressLine line(!a.quiet);
  r.progress = [&](int64_t step, int64_t steps, const Progress& p) { line.update(step, steps, p); };
  r.status = [&](const std::string& s) {
    line.done();
    if (!a.quiet) std::fprintf(stderr, "%s\n", s.c_str());
  };
  r.message = [&](const std::string& s) {
    line.done();
    std::fprintf(stderr, "%s\n", s.c_str());
  };
  const executor::RunTable table = runner::check_run(r);

  // All input is read and checked before anything runs or is written.
  const models::ModelSpec m = effective_model(r.scenario.model, r.scenario.config);
  const TokenSource tokens = a.tokens.empty() ? TokenSource::synthetic(m.vocab, a.seed)
                                               : TokenSource::from_file(a.tokens, m.vocab);
  (void)tokens.sequence(0, r.scenario.config.context_tokens);  // a file too short is refused now
  // A checkpoint has the model's own layers; tensors of layers --layers leaves out are skipped.
  const Weights w = a.weights.empty() ? random_weights(m, a.seed, a.init_std)
                                      : read_checkpoint(a.weights, m, r.scenario.model.layers);
  const step::Config& c = r.scenario.config;
  if (c.lora_rank <= 0 && !a.adapter.empty())
    throw Error("--adapter", a.adapter, "loads a LoRA adapter, and the plan trains every parameter",
                "re-plan with --lora-rank (and the adapter's alpha and targets), or run without --plan");
  if (c.lora_rank <= 0 && a.lora_init_b_std != 0)
    throw Error("--lora-init-b-std", "", "initialises LoRA adapters, and this run trains every parameter",
                "add --lora-rank R");
  // LoRA: the adapter to train, loaded (a PEFT folder) or initialised as PEFT does (seeded). A loaded
  // adapter's file is what the saved one keeps (its base model, its other keys).
  const std::string run_base = a.weights.empty() ? m.id : a.weights;
  std::optional<AdapterConfig> loaded_adapter;
  if (c.lora_rank > 0 && !a.adapter.empty()) {
    loaded_adapter = read_adapter_config(a.adapter);
    const std::string warning = adapter_base_warning(*loaded_adapter, a.adapter, run_base);
    if (!warning.empty() && rank == 0) std::fprintf(stderr, "oomb run: warning: %s\n", warning.c_str());
  }
  const ParamTensors adapters =
      c.lora_rank <= 0    ? ParamTensors{}
      : a.adapter.empty() ? init_adapters(m, c, a.seed + 1, a.lora_init_b_std)
                          : read_adapter(a.adapter, m, c, r.scenario.model.layers);
  // With a --trace, an interrupt (SIGINT, SIGTERM, SIGHUP) ends the run after the step in progress
  // and the trace of the completed steps is written before the process ends by the signal (a second
  // one ends it at once). A data-parallel job's ranks would stop at different steps, one waiting in
  // a collective for the others: there, as without a trace, an interrupt ends the process.
  std::optional<DeferInterrupts> defer;
  if (!a.trace.empty() && (!comm || comm->size() == 1)) {
    defer.emplace();
    r.stop = [] { return interrupt_pending() != 0; };
  }
  runner::RunResult res = runner::run(r, table, w, tokens, adapters);
  defer.reset();  // from here an interrupt ends the process (the writes remove their temporaries)
  line.done();
  if (res.trace) res.trace->metadata.git_commit = git_commit();
  if (!res.failure.empty()) {
    // Still write what was measured: the completed steps (measured) and the host trace so far.
    std::fprintf(stderr, "oomb run: step %lld of %lld failed: %s\n", static_cast<long long>(res.failed_step),
                 static_cast<long long>(r.warmup_steps + r.timed_steps), res.failure.c_str());
    if (res.trace) {
      try {
        write_own_trace(*res.trace);
        if (!discard_trace) std::fprintf(stderr, "oomb run: trace so far (host-timed): %s\n", a.trace.c_str());
      } catch (const std::exception& write_error) {
        std::fprintf(stderr, "oomb run: the trace could not be written: %s\n", write_error.what());
      }
    }
    if (a.json) std::printf("%s\n", runner::to_json(res).dump(2).c_str());
    return 4;
  }

  if (res.interrupted) {
    const int sig = interrupt_pending();
    std::string what = "no step completed: no trace written";
    if (res.trace) {
      write_own_trace(*res.trace);
      what = "the trace of the " + std::to_string(res.steps_completed) + " completed step" +
             (res.steps_completed == 1 ? "" : "s") + " written to " + a.trace;
    }
    std::fprintf(stderr, "oomb run: interrupted (%s) after %lld of %lld steps: %s; no weights, gradients or "
                         "adapters written\n",
                 sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal",
                 static_cast<long long>(res.steps_completed), static_cast<long long>(res.steps_requested), what.c_str());
    std::fflush(stderr);
    raise_pending_interrupt();
    return 2;  // not reached: the signal ends the process
  }

  // Data parallelism: every replica holds the same weights (and adapters); rank 0 writes them and
  // prints the job's summary, each rank writes its own trace.
  if (rank > 0) {
    if (res.trace) write_own_trace(*res.trace);
    return 0;
  }
  const CheckpointWrite shards{a.max_shard_bytes, "F32"};
  std::vector<std::string> weight_files, grad_files;
  if (res.weights) {
    runner::check_finite(*res.weights, "--save-weights", "weights");
    weight_files = write_checkpoint(*res.weights, a.save_weights, shards);
  }
  if (res.gradients) {
    runner::check_finite(*res.gradients, "--dump-grads", "gradients");
    grad_files = write_checkpoint(*res.gradients, a.dump_grads, shards);
  }
  std::vector<std::string> adapter_files;
  if (res.adapters) {
    runner::check_finite(*res.adapters, "--save-adapter", "adapters");
    adapter_files = write_adapter(*res.adapters, a.save_adapter,
                                  loaded_adapter ? continued_adapter_config(*loaded_adapter, c, run_base)
                                                 : adapter_config(c, run_base));
  }
  if (res.trace) traces::write_trace(*res.trace, a.trace);
  if (a.json) {
    Json j = runner::to_json(res);
    if (res.trace) j["trace"]["file"] = a.trace;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  const std::string weights =
      a.weights.empty() ? "random (seed " + std::to_string(a.seed) + ")" : a.weights;
  std::fputs(runner::describe(res, r, tokens.describe(), weights, a.trace).c_str(), stdout);
  auto files = [](const std::vector<std::string>& f) {
    return f.size() == 1 ? f[0] : f[0] + " (index of " + std::to_string(f.size() - 1) + " shards)";
  };
  if (!weight_files.empty()) std::printf("weights: %s\n", files(weight_files).c_str());
  if (!grad_files.empty()) std::printf("gradients: %s\n", files(grad_files).c_str());
  if (!adapter_files.empty()) std::printf("adapter: %s (PEFT: adapter_config.json, adapter_model.safetensors)\n",
                                          a.save_adapter.c_str());
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
                                     "Timed training steps, 1..1000000 (one sequence each; default 1, or 3 when a "
                                     "--trace is written: the trace's step_s is the fastest of them)");
                      sub.add_option("--warmup", a->warmup,
                                     "Untimed training steps before the --steps, 0..1000000 (default: 1 when a "
                                     "--trace is written, else 0); they train like the others and are in the "
                                     "trace's events");
                      sub.add_option("--threads", a->threads,
                                     "--backend cpu: compute threads, 0..1024 (OpenMP loops and BLAS GEMMs; results "
                                     "are identical at any count; 1024, a fixed bound so that a command means the "
                                     "same on every machine, is far above any CPU's count and far below what the "
                                     "OpenMP runtime fails to create). Default (0): the CPUs this process may use. Recorded in "
                                     "the trace (cpu_threads): validate compares it with a profile calibrated at "
                                     "the same count");
                      sub.add_option("--tokens", a->tokens,
                                     "Binary file of little-endian uint32 token ids (default: seeded synthetic)");
                      sub.add_option("--weights", a->weights,
                                     "Initial weights: a Hugging Face checkpoint (folder with model.safetensors or "
                                     "model.safetensors.index.json + shards, the index, or one .safetensors file; "
                                     "F32, BF16 or F16 tensors, HF names). A folder holding both is read as its "
                                     "model.safetensors (the single file first, as Hugging Face's loader); shards "
                                     "are files inside the index's folder (no absolute path, no '..'); a tied "
                                     "model's lm_head.weight is accepted when it equals the embedding");
                      sub.add_option("--save-weights", a->save_weights,
                                     "Write the final weights (F32, HF layout): a folder (new or existing; other "
                                     "files in it stay), or FILE.safetensors; sharded with an index above "
                                     "--max-shard-bytes. Every file is written aside first and the checkpoint "
                                     "switched at the end: an interrupted or failed save leaves the old one whole");
                      sub.add_option("--dump-grads", a->dump_grads,
                                     "Write the accumulated parameter gradients (same layout as --save-weights; "
                                     "LoRA: the adapters' gradients, PEFT's tensor names)");
                      sub.add_option("--adapter", a->adapter,
                                     "LoRA: start from this Hugging Face PEFT adapter folder (adapter_config.json + "
                                     "adapter_model.safetensors, lora_A [r, in] / lora_B [out, r] per target). Its r, "
                                     "lora_alpha and target_modules must match --lora-* or the plan (without them "
                                     "they are taken from it); a missing, extra or misshapen tensor is an error "
                                     "naming it. Default: PEFT's initialisation (A kaiming-uniform, B zero; seeded)");
                      sub.add_option("--save-adapter", a->save_adapter,
                                     "LoRA: write the trained adapter as a PEFT folder (adapter_config.json, "
                                     "adapter_model.safetensors in F32), loadable by PeftModel.from_pretrained; both "
                                     "files written aside and switched in together");
                      sub.add_option("--lora-init-b-std", a->lora_init_b_std,
                                     "LoRA without --adapter: draw B from N(0, std^2) instead of PEFT's zeros, so that "
                                     "the first step's A gradients are not zero (for --reference checks)")
                          ->capture_default_str();
                      sub.add_option("--max-shard-bytes", a->max_shard_bytes,
                                     "Largest shard --save-weights / --dump-grads write, 1024..2^50 bytes (default "
                                     "5e9, Hugging Face's 5GB)")
                          ->capture_default_str();
                      sub.add_option("--seed", a->seed, "Seed of the random weights and synthetic tokens")
                          ->capture_default_str()
                          ->check(unsigned_integer());
                      sub.add_option("--init-std", a->init_std, "Std of the random weights")->capture_default_str();
                      sub.add_option("--lr", a->lr, "AdamW learning rate (with --optimizer gpu|host)")
                          ->capture_default_str();
                      sub.add_option("--grad-accum", a->grad_accum, "Steps per optimizer step, 1..1000000")->capture_default_str();
                      sub.add_option("--trace", a->trace, "Write the measured trace (oomb.trace/1 JSON) to FILE (at most 1000 steps, warm-up included: "
                                     "it is held in memory until written; on SIGTERM/SIGINT the completed steps are written, then the run ends by the signal)");
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
                          "  oomb run --model tiny --context 2K --chunk 512 --page 64 --lora-rank 8 --lora-targets "
                          "all-linear --optimizer gpu --steps 3 --save-adapter out/adapter   (LoRA, PEFT folder out)\n"
                          "  oomb run --model tiny --context 4K --attention sparse --budget 4 --chunk 512 --page 64 "
                          "--measure-recall --compare-dense --trace t.json\n"
                          "Exit status: 0 done, 2 bad input, 4 a step failed on the device (the error names the "
                          "stage, chunk, layer and op it was issued under; --json and --trace still record the "
                          "completed steps).");
                      return [a, &sub] {
                        a->command = "oomb run";
                        a->steps_given = sub.get_option("--steps")->count() > 0;
                        a->warmup_given = sub.get_option("--warmup")->count() > 0;
                        for (const auto* opt : sub.get_options()) {
                          if (opt->count() == 0 || opt->get_name() == "--help") continue;
                          a->command += " " + opt->get_name();
                          if (opt->get_expected_min() > 0)
                            for (const auto& r : opt->results()) a->command += " " + r;
                        }
                        // The ranks of a job agree on the command and on the files these flags read.
                        const std::vector<std::string> inputs = {"--plan", "--model", "--gpu", "--host",
                                                                 "--tokens", "--adapter", "--weights"};
                        return run_as_job("oomb run", inputs,
                                          [a](executor::Communicator* comm, const std::string& job) {
                                            return run_run(*a, comm, job);
                                          });
                      };
                    });

}  // namespace
}  // namespace oomb::cli
