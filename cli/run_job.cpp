// oomb run's work after its flags are parsed (cli/run_cmd.cpp): every output path checked before
// any work, the run resolved (a plan's or the flags') and checked by the runner (runner/runner.h),
// its inputs read (runner::read_inputs), the steps run with a progress line, and the trace,
// checkpoints and adapter written. The runner prints nothing and writes no file: this does.
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
#include "cli/run_args.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "core/json.h"
#include "core/files.h"
#include "core/interrupts.h"
#include "runner/runner.h"
#include "executor/runtime/adapters.h"
#include "cli/mpi_job.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "planner/plan.h"
#include "validation/ranks.h"

namespace oomb::cli {
namespace {

using namespace oomb::executor;

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

}  // namespace

int run_run(RunArgs a, executor::Communicator* comm, const std::string& job) {
  const int rank = comm ? comm->rank() : 0;
  // Rank r > 0 writes beside rank 0's trace (t.json -> t.rank1.json); beside a stream (--trace
  // /dev/null, a FIFO) there is no file to put, so the other ranks record theirs and discard it.
  const bool discard_trace = rank > 0 && validation::trace_is_stream(a.trace);
  if (!discard_trace) a.trace = validation::rank_trace_path(a.trace, rank);
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
  runner::InputFiles inputs{a.tokens, a.weights, a.adapter, a.seed, a.init_std, a.lora_init_b_std, {}};
  inputs.warning = [rank](const std::string& w) {
    if (rank == 0) std::fprintf(stderr, "oomb run: warning: %s\n", w.c_str());
  };
  const runner::RunInputs in = runner::read_inputs(r, inputs);
  const step::Config& c = r.scenario.config;
  // With a --trace, an interrupt (SIGINT, SIGTERM, SIGHUP) ends the run after the step in progress
  // and the trace of the completed steps is written before the process ends by the signal (a second
  // one ends it at once). A data-parallel job's ranks would stop at different steps, one waiting in
  // a collective for the others: there, as without a trace, an interrupt ends the process.
  std::optional<DeferInterrupts> defer;
  if (!a.trace.empty() && (!comm || comm->size() == 1)) {
    defer.emplace();
    r.stop = [] { return interrupt_pending() != 0; };
  }
  runner::RunResult res = runner::run(r, table, in.weights, in.tokens, in.adapters);
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
  const CheckpointWrite shards{a.max_shard_bytes, Dtype::fp32};
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
                                  in.loaded_adapter ? continued_adapter_config(*in.loaded_adapter, c, in.base)
                                                    : adapter_config(c, in.base));
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
  std::fputs(runner::describe(res, r, in.tokens.describe(), weights, a.trace).c_str(), stdout);
  auto files = [](const std::vector<std::string>& f) {
    return f.size() == 1 ? f[0] : f[0] + " (index of " + std::to_string(f.size() - 1) + " shards)";
  };
  if (!weight_files.empty()) std::printf("weights: %s\n", files(weight_files).c_str());
  if (!grad_files.empty()) std::printf("gradients: %s\n", files(grad_files).c_str());
  if (!adapter_files.empty()) std::printf("adapter: %s (PEFT: adapter_config.json, adapter_model.safetensors)\n",
                                          a.save_adapter.c_str());
  return 0;
}


}  // namespace oomb::cli
