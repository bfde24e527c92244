// oomb plan: search the knobs for a model, GPU, host and context (or the longest context that
// fits); print the plan, its memory and time, close alternatives, the memory/time frontier, or a
// diagnosis with concrete ways out when nothing fits; save it for `oomb run`. The answer is the
// planner's (planner/answer.h); here are the flags, their checks, and the output.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "planner/answer.h"
#include "planner/defaults.h"
#include "planner/knobs.h"
#include "planner/plan.h"
#include "planner/requests.h"
#include "core/files.h"

namespace oomb::cli {
namespace {

using planner::NodeGpus;

struct PlanArgs {
  ScenarioFlags flags;
  bool max_context = false;
  std::string objective = "time";
  bool allow_sparse = false;
  std::optional<int64_t> min_budget;
  std::optional<double> min_recall;
  std::string recall_curve;
  bool recall_curve_any = false;
  std::string max_step_time;
  std::optional<double> min_tokens_per_s;
  double headroom = planner::kDefaultHeadroom;
  std::string out;
  bool json = false;
  bool pareto = false;
};


// "1h", "30m", "1h30m", "900s", "2.5h" or plain seconds ("3600").
double parse_duration_s(const std::string& text, const std::string& where) {
  const auto bad = [&] {
    return Error(where, text, "is not a duration", "e.g. 1h, 30m, 1h30m, 900s or 3600 (seconds)");
  };
  if (text.empty()) throw bad();
  double total = 0;
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text.substr(i), &used);
    } catch (...) {
      throw bad();
    }
    if (used == 0 || !(v >= 0) || !std::isfinite(v)) throw bad();
    i += used;
    double unit = 1;
    if (i < text.size()) {
      const char u = text[i++];
      if (u == 'h') unit = 3600;
      else if (u == 'm') unit = 60;
      else if (u == 's') unit = 1;
      else throw bad();
    } else if (any) {
      throw bad();  // "1h30": a unit is needed after the first part
    }
    total += v * unit;
    any = true;
  }
  if (!(total > 0)) throw Error(where, text, "must be positive", "e.g. 1h");
  return total;
}

int run_plan(PlanArgs a) {
  using namespace planner;
  planner::Request r;
  check_writable(a.out, "--out");  // before the search, not after it
  {
    std::vector<FlagPath> in = scenario_inputs(a.flags.model, a.flags.gpu, a.flags.host);
    in.push_back({"--recall-curve", a.recall_curve});
    check_distinct_paths(in, {{"--out", a.out}});
  }
  if (a.min_budget && (*a.min_budget < 1 || *a.min_budget > step::kMaxPageBudget))
    throw Error("--min-budget", std::to_string(*a.min_budget),
                "must be in [1, " + std::to_string(step::kMaxPageBudget) + "] pages", "e.g. 64");
  if (a.min_recall && !(*a.min_recall > 0 && *a.min_recall <= 1))  // NaN fails too
    throw Error("--min-recall", format_number(*a.min_recall), "must be in (0, 1]", "e.g. 0.9");
  const NodeGpus node = planner::node_gpus(a.flags.gpus ? *a.flags.gpus : 1, a.flags.model);
  if (node.tp != node.gpus) {
    if (node.tp > 1) a.flags.gpus = node.tp;
    else a.flags.gpus.reset();
  }
  // The plan runs on every GPU asked for: the node's GPUs beyond one tensor-parallel group, and
  // every further node, are data-parallel replicas (unless --data-parallel says how many; derived,
  // not fixed by the user, but not searched either).
  // --nodes is checked here, before it multiplies into the replicas, so a bad value is named as itself.
  if (a.flags.nodes && (*a.flags.nodes <= 0 || *a.flags.nodes > planner::kMaxNodes))
    throw Error("--nodes", std::to_string(*a.flags.nodes), "must be in [1, " + std::to_string(planner::kMaxNodes) + "]",
                "the nodes the job's GPUs are on, e.g. 2");
  const int64_t replicas = a.flags.data_parallel ? 0 : node.gpus / node.tp * a.flags.nodes.value_or(1);
  if (replicas > planner::kMaxDataParallel) {
    const int64_t per_node = node.gpus / node.tp;
    throw Error("--nodes", std::to_string(*a.flags.nodes),
                "makes " + std::to_string(replicas) + " data-parallel replicas (" + std::to_string(per_node) +
                    " per node), more than " + std::to_string(planner::kMaxDataParallel),
                "at most " + std::to_string(planner::kMaxDataParallel / per_node) + " nodes");
  }
  // --optimizer auto (the default) belongs to the planner: AdamW state is wanted, its placement
  // searched.
  r.optimizer_auto = a.flags.optimizer_auto();
  if (a.flags.optimizer && *a.flags.optimizer == "auto") a.flags.optimizer.reset();
  if (!a.max_step_time.empty()) r.max_step_s = parse_duration_s(a.max_step_time, "--max-step-time");
  if (a.min_tokens_per_s) {
    if (!(*a.min_tokens_per_s > 0) || !std::isfinite(*a.min_tokens_per_s))
      throw Error("--min-tokens-per-s", std::to_string(*a.min_tokens_per_s), "must be positive", "e.g. 1000");
    r.min_tokens_per_s = *a.min_tokens_per_s;
  }
  r.objective = objective_from_string(a.objective, "--objective");
  if (r.objective == Objective::context) a.max_context = true;
  if (a.max_context && !a.flags.context.empty())
    throw Error("--context", a.flags.context, "cannot be combined with --max-context (or --objective context)",
                "give a context to plan for, or let --max-context find the largest");
  if (!a.max_context && a.flags.context.empty())
    throw Error("--context", "", "missing", "give --context N (e.g. 4M) or --max-context");
  if ((r.max_step_s > 0 || r.min_tokens_per_s > 0) && !a.max_context)
    throw Error(r.max_step_s > 0 ? "--max-step-time" : "--min-tokens-per-s", "", "limits the answer of --max-context",
                "add --max-context (the longest context whose plan keeps the limit)");
  const int64_t N = a.max_context ? 0 : parse_tokens(a.flags.context, "--context");
  r.fixed = a.flags.explicit_knobs();
  ScenarioFlags f = a.flags;
  f.context.clear();  // knobs are validated per candidate, not against the defaults
  if (replicas > 1) f.data_parallel = replicas;
  r.scenario = f.resolve();
  r.headroom = a.headroom;
  r.allow_sparse = a.allow_sparse;
  if (a.min_budget) r.min_budget = *a.min_budget;
  // --min-budget counts pages of the fixed page size, or of the published 128 tokens; the planner
  // compares budgets by the tokens they attend.
  r.min_budget_page_tokens = r.fixed.count("page") ? r.scenario.config.page_tokens : kDefaultMinBudgetPage;
  r.host_explicit = !a.flags.host.empty();
  // A plan written for `oomb run` holds only settings the executor follows (unless fixed by you).
  r.executable_only = !a.out.empty();
  planner::PlanQuery q;
  q.request = std::move(r);
  q.context = N;
  q.max_context = a.max_context;
  q.pareto = a.pareto;
  q.node = node;
  q.min_budget = a.min_budget;
  q.min_recall = a.min_recall;
  q.recall_curve = a.recall_curve;
  q.recall_curve_any = a.recall_curve_any;
  const planner::PlanAnswer ans = planner::answer(q);
  if (!ans.warning.empty()) std::fprintf(stderr, "oomb plan: warning: %s\n", ans.warning.c_str());
  if (ans.plan && !a.out.empty()) save_plan(a.out, *ans.plan);
  if (a.json) std::printf("%s\n", ans.to_json().dump(2).c_str());
  else std::fputs(ans.describe().c_str(), stdout);
  if (ans.plan)
    for (const auto& n : ans.plan->notes) std::fprintf(stderr, "oomb plan: warning: %s\n", n.c_str());
  if (!a.json && ans.plan && !a.out.empty()) std::printf("\nPlan written to %s\n", a.out.c_str());
  return ans.chosen ? 0 : 1;
}

const Registrar reg(
    "plan", "Find the best settings for a model, GPU, host and context (or the longest context that fits)",
    [](CLI::App& sub) {
      auto a = std::make_shared<PlanArgs>();
      a->flags.training_defaults = true;
      a->flags.add_to(sub, false);
      sub.add_flag("--max-context", a->max_context,
                   "Find the largest context that fits (dense and sparse), instead of planning for --context");
      sub.add_option("--max-step-time", a->max_step_time,
                     "With --max-context: the longest context whose best plan takes at most this per step (1h, 30m, "
                     "1h30m, 900s)");
      sub.add_option("--min-tokens-per-s", a->min_tokens_per_s,
                     "With --max-context: ... and trains at least this many tokens per second");
      sub.add_option("--objective", a->objective,
                     "time (min step time, default), memory (min peak device memory) or context (= --max-context)");
      sub.add_flag("--allow-sparse", a->allow_sparse,
                   "Let sparse attention compete with dense (approximate gradients); without it sparse is used only "
                   "when no dense plan fits, and then said loudly");
      sub.add_option("--min-budget", a->min_budget,
                     "Sparse: smallest budget the planner may choose, in pages of 128 tokens (of --page when given; "
                     "default 64 = 8K attended tokens); budgets of other page sizes must attend as many tokens");
      sub.add_option("--min-recall", a->min_recall,
                     "Sparse: only budgets whose mean recall of the dense attention mass, interpolated in "
                     "--recall-curve, is at least this (0..1]; replaces the default --min-budget");
      sub.add_option("--recall-curve", a->recall_curve,
                     "Budget-to-recall curve (oomb.recall/1, from `oomb calibrate --recall`); the chosen budget's "
                     "recall is printed");
      sub.add_flag("--recall-curve-any", a->recall_curve_any,
                   "Use a --recall-curve measured on another model (refused otherwise)");
      sub.add_option("--headroom", a->headroom, "Share of HBM capacity kept free (default 0.05)");
      sub.add_option("--out", a->out,
                     "Write the plan (oomb.plan/1 JSON) to this file for `oomb run`: only settings the executor "
                     "follows are chosen; the faster plan on paper is named");
      sub.add_flag("--json", a->json, "Print the plan, prediction, alternatives and diagnosis as JSON");
      sub.add_flag("--pareto", a->pareto, "Also print the frontier of peak device memory vs step time: every non-dominated configuration of the planner's search space (chunk 512..32K, page 64/128/256, 1..4 or all resident layers, gradient dtypes, loss tiles, every kept-layer count, optimizer placement; sparse budgets when sparse competes), knobs you fixed held; a run of kept-layer counts shows its ends and counts the points between, --json lists every point");
      sub.footer(
          "Knobs given on the command line are fixed; the planner searches the others, recompute included: "
          "checkpointing off, full checkpointing, and partial checkpointing (--kept-layers K: the last K layers keep "
          "their activations, the largest K that fits), all run by the executor. --optimizer auto (the default) places AdamW state on the GPU or the host; --optimizer none "
          "plans without optimizer state (measurement settings, --preset oomb-published). --gpus N plans tensor parallelism (oomb run executes it under "
          "mpirun -np N, one process per GPU: MPI's collectives on the CPU backend, NCCL's on the CUDA backend; "
          "not with LoRA) and prints a multi-GPU comparison of the node: oomb on one GPU, data-parallel replicas, "
          "Megatron-style context parallelism, and the recipes people run at long context (FSDP2 with PyTorch's ring "
          "context parallelism over every GPU, the stock Hugging Face 1M recipe, and ZeRO-3 with Ulysses, each with "
          "its checkpoints on the GPU or in pinned host memory, and the best FSDP layout with tiled MLP), over every "
          "node with --nodes M. --min-recall R with --recall-curve F: the curve's mean recall is piecewise linear "
          "between measured budgets, the largest budget's value at or above it, and budgets below the smallest "
          "measured one are rejected; the planner then searches only budgets >= the smallest B whose every larger "
          "budget keeps recall >= R (max with --min-budget when given), and sparse candidates only at the curve's "
          "page size. Exit status: 0 plan found, 1 nothing fits (diagnosis printed), 2 bad input.");
      return [a] { return run_plan(*a); };
    });

}  // namespace
}  // namespace oomb::cli
