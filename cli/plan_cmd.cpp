// oomb plan: search the knobs for a model, GPU, host and context (or the longest context that
// fits); print the plan, its memory and time, close alternatives, the memory/time frontier, or a
// diagnosis with concrete ways out when nothing fits; save it for `oomb run`.
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
#include "planner/defaults.h"
#include "planner/diagnosis.h"
#include "planner/executable.h"
#include "planner/parallel.h"
#include "planner/plan.h"
#include "planner/recall_curve.h"
#include "planner/requests.h"
#include "planner/search.h"

namespace oomb::cli {
namespace {

using planner::Baseline;
using planner::Comparison;
using planner::NodeGpus;

using planner::Candidate;
using simulator::Attention;

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

std::string tokens_text(int64_t n) {
  std::string digits = std::to_string(n), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  const std::string short_form = format_tokens(n);
  return short_form == digits ? grouped + " tokens" : short_form + " (" + grouped + " tokens)";
}

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

std::string signed_percent(double f) { return (f >= 0 ? "+" : "") + format_percent(f); }
std::string signed_bytes(int64_t b) { return (b >= 0 ? "+" : "-") + format_bytes(b >= 0 ? b : -b); }

Json candidate_brief(const Candidate& c) {
  return {{"config", c.config.to_json()},
          {"peak_device_bytes", c.summary.peak_device_bytes},
          {"peak_host_bytes", c.summary.peak_host_bytes},
          {"step_s", c.summary.step_s},
          {"tokens_per_s", c.summary.tokens_per_s},
          {"h2d_bytes", c.summary.h2d_bytes},
          {"d2h_bytes", c.summary.d2h_bytes},
          {"binding_constraint", c.summary.binding_constraint},
          {"executable", planner::executable(c.config)}};
}

void print_settings(const simulator::Scenario& s) {
  const auto& c = s.config;
  const int64_t L = simulator::effective_layers(c, s.model);
  std::printf("Settings\n");
  if (c.schedule == simulator::Schedule::standard) {
    std::printf("  schedule     standard (full-sequence training)\n");
  } else {
    std::printf("  schedule     oomb (chunk-recurrent), attention %s\n",
                c.attention == Attention::dense
                    ? "dense (exact gradients)"
                    : ("SPARSE, " + planner::budget_text(c) + " per query page, selection " + c.selection).c_str());
    const int64_t chunks = ceil_div(c.context_tokens, c.chunk_tokens);
    std::printf("  chunk        %s tokens (%lld chunk%s), page %lld tokens\n", format_tokens(c.chunk_tokens).c_str(),
                static_cast<long long>(chunks), chunks == 1 ? "" : "s", static_cast<long long>(c.page_tokens));
    if (c.resident_layers >= L)
      std::printf("  residency    all %lld layers on the GPU (no offload)\n", static_cast<long long>(L));
    else
      std::printf("  residency    %lld of %lld layers resident, the rest offloaded to the host\n",
                  static_cast<long long>(c.resident_layers), static_cast<long long>(L));
  }
  if (c.schedule == simulator::Schedule::standard)
    std::printf("  dtypes       params %s, param-grad %s\n", c.param_dtype.c_str(), c.param_grad_dtype.c_str());
  else
    std::printf("  dtypes       params %s, KV %s, KV-grad %s, param-grad %s\n", c.param_dtype.c_str(),
                c.kv_dtype.c_str(), c.kv_grad_dtype.c_str(), c.param_grad_dtype.c_str());
  const int64_t span = c.schedule == simulator::Schedule::standard ? c.context_tokens
                                                                    : std::min(c.chunk_tokens, c.context_tokens);
  const int64_t tile = std::min(c.logits_chunk_tokens, span);
  std::printf("  logits       %s\n", c.logits_chunk_tokens > 0
                                        ? ("fused, " + format_tokens(tile) + "-token tiles" +
                                           (tile < c.logits_chunk_tokens ? " (one tile)" : ""))
                                              .c_str()
                                        : "unfused, whole chunk");
  std::printf("  optimizer    %s\n", planner::optimizer_text(s).c_str());
  std::printf("  recompute    %s\n", planner::recompute_text(c, s.model).c_str());
  std::string why;
  if (!planner::executable(c, &why)) std::printf("  executable   NO, on paper: %s\n", why.c_str());
  if (c.gpus > 1) std::printf("  gpus         %lld (tensor parallelism, sizes per GPU)\n", static_cast<long long>(c.gpus));
}

void print_memory(const simulator::Scenario& s, const Candidate& k, double headroom) {
  const simulator::MemoryTable t = simulator::memory_table(s);
  const auto& u = k.usage;
  const bool tp = s.config.gpus > 1;
  std::printf("\nDevice memory%s: %s of %s (%s), limit %s with %s headroom\n", tp ? " per GPU" : "",
              format_bytes(u.device_need_bytes).c_str(), format_bytes(u.device_capacity_bytes).c_str(), s.gpu.id.c_str(),
              format_bytes(u.device_limit_bytes).c_str(), format_percent(headroom).c_str());
  std::printf("  %-28s %12s %7s\n", "buffer", "bytes", "share");
  for (const auto& r : t.rows)
    if (r.tier == simulator::Tier::device && r.bytes > 0)
      std::printf("  %-28s %12s %7s\n", r.name.c_str(), format_bytes(r.bytes).c_str(),
                  format_percent(static_cast<double>(r.bytes) / static_cast<double>(u.device_capacity_bytes)).c_str());
  if (s.config.peak_measure == simulator::PeakMeasure::allocated)
    std::printf("  %-28s %12s %7s  (not in the reported peak: --peak-measure allocated)\n", "runtime_reserve",
                format_bytes(s.gpu.reserved_bytes).c_str(),
                format_percent(static_cast<double>(s.gpu.reserved_bytes) / static_cast<double>(u.device_capacity_bytes)).c_str());
  std::printf("\nHost memory%s: %s (%s: %s RAM, %s pinnable; %s of it pinned)\n",
              tp ? (" per node (all " + std::to_string(s.config.gpus) + " GPUs)").c_str() : "",
              format_bytes(u.host_need_bytes).c_str(),
              s.host.id.c_str(), format_bytes(s.host.ram_bytes).c_str(), format_bytes(s.host.pinnable_bytes).c_str(),
              format_bytes(u.pinned_need_bytes).c_str());
  std::printf("  %-28s %12s %7s\n", "buffer", "bytes", "of pinnable");
  for (const auto& r : t.rows)
    if (r.tier == simulator::Tier::host && r.bytes > 0)
      std::printf("  %-28s %12s %7s\n", r.name.c_str(), format_bytes(r.bytes).c_str(),
                  format_percent(static_cast<double>(r.bytes) / static_cast<double>(s.host.pinnable_bytes)).c_str());
}

void print_time(const Candidate& k) {
  const auto& m = k.summary;
  std::printf("\nTransfers per step: h2d %s, d2h %s; exposed copy time %s (%s of the step)\n",
              format_bytes(m.h2d_bytes).c_str(), format_bytes(m.d2h_bytes).c_str(),
              format_duration_s(m.exposed_copy_s).c_str(),
              format_percent(m.step_s > 0 ? m.exposed_copy_s / m.step_s : 0).c_str());
  std::printf("Step time: %s, %.1f tokens/s (compute %s)\n", format_duration_s(m.step_s).c_str(), m.tokens_per_s,
              format_duration_s(m.compute_s).c_str());
  // What bounds the step's time; which limit bounds the context (--max-context) is said apart.
  std::printf("Step time bound by: %s\n", m.binding_constraint.c_str());
}

void print_allocation(const planner::Plan& p) {
  const auto& a = p.allocation;
  std::printf("Executor allocation: KV pool %lld pages x %s, gradient pool %lld pages x %s (%s); workspace %s; host "
              "pool %s (+%s other host)\n",
              static_cast<long long>(a.kv_pool_pages), format_bytes(a.kv_page_bytes).c_str(),
              static_cast<long long>(a.grad_pool_pages), format_bytes(a.grad_page_bytes).c_str(),
              format_bytes(a.device_pool_bytes).c_str(), format_bytes(a.workspace_bytes).c_str(),
              format_bytes(a.host_pool_bytes).c_str(), format_bytes(a.host_other_bytes).c_str());
}

void print_alternatives(const Candidate& best, const std::vector<Candidate>& alts, const models::ModelSpec& m) {
  if (alts.empty()) {
    std::printf("\nClose alternatives: none; every other fitting setting is within 1%% of this plan in both step "
                "time and peak memory\n");
    return;
  }
  std::printf("\nClose alternatives (all fit; each differs by >= 1%% in step time or peak memory):\n");
  for (const auto& a : alts)
    std::printf("  %-58s step %s (%s), peak %s (%s)%s\n", planner::describe_difference(best.config, a.config, m).c_str(),
                format_duration_s(a.summary.step_s).c_str(),
                signed_percent(a.summary.step_s / best.summary.step_s - 1.0).c_str(),
                format_bytes(a.summary.peak_device_bytes).c_str(),
                signed_bytes(a.summary.peak_device_bytes - best.summary.peak_device_bytes).c_str(),
                planner::executable(a.config) ? "" : " [on paper]");
}

void print_pareto(const std::vector<Candidate>& front, const models::ModelSpec& m) {
  std::printf("\nPareto frontier (peak device memory vs step time), %zu points:\n", front.size());
  std::printf("  (a point is kept unless another is as exact, no larger and no slower: KV-gradient dtypes and "
              "budgets each keep their own points)\n");
  std::printf("  %12s %12s %12s  %s\n", "peak device", "step", "tokens/s", "settings");
  for (const auto& k : front)
    std::printf("  %12s %12s %12.1f  %s%s\n", format_bytes(k.summary.peak_device_bytes).c_str(),
                format_duration_s(k.summary.step_s).c_str(), k.summary.tokens_per_s,
                planner::describe_knobs(k.config, m).c_str(), planner::executable(k.config) ? "" : " [on paper]");
}

void print_diagnosis(const planner::Diagnosis& d) {
  std::printf("\nDiagnosis: no configuration with %s fits.\n", d.target.c_str());
  for (const auto& f : d.failures) {
    std::printf("  Closest %s fails on %s:\n", f.label.c_str(), f.binding_constraint.c_str());
    for (const auto& v : f.violations) std::printf("    %s\n", v.c_str());
  }
  if (d.suggestions.empty()) {
    std::printf("  No single change from the catalog makes it fit.\n");
    return;
  }
  std::printf("  Changes that would make it fit (each re-planned):\n");
  for (const auto& s : d.suggestions)
    std::printf("    - %s [%s]: peak device %s, host %s, step %s\n", s.change.c_str(), s.flags.c_str(),
                format_bytes(s.result.summary.peak_device_bytes).c_str(),
                format_bytes(s.result.summary.peak_host_bytes).c_str(), format_duration_s(s.result.summary.step_s).c_str());
}

std::vector<std::string> plan_notes(const simulator::Config& c, bool sparse_fallback) {
  std::vector<std::string> notes;
  if (sparse_fallback)
    notes.push_back("SPARSE FALLBACK: no dense (exact-gradient) configuration fits; this plan uses sparse attention "
                    "with a budget of " + std::to_string(c.page_budget) +
                    " pages, so its gradients are those of the sparse forward, not of the dense model");
  if (c.gpus > 1)
    notes.push_back("tensor parallelism over " + std::to_string(c.gpus) +
                    " GPUs is planned on paper only: execution (oomb run) is single-GPU for now");
  if (std::string why; !planner::executable(c, &why)) notes.push_back("NOT EXECUTABLE: " + why);
  return notes;
}

void print_notes(const std::vector<std::string>& notes) {
  for (const auto& n : notes) {
    std::printf("\n!!! %s\n", n.c_str());
    std::fprintf(stderr, "oomb plan: warning: %s\n", n.c_str());
  }
}

std::string curve_context_text(const planner::RecallCurve& c, int64_t context) {
  std::string s = "the curve was measured at " + format_tokens(c.context_tokens) + " tokens (chunk " +
                  format_tokens(c.chunk_tokens) + ", page " + std::to_string(c.page_tokens) + ")";
  if (context <= 0 || context == c.context_tokens) return s + ", this plan's context";
  const double f = static_cast<double>(context) / static_cast<double>(c.context_tokens);
  char b[64];
  std::snprintf(b, sizeof b, f >= 1 ? "%.0fx longer" : "%.2fx as long", f);
  return s + "; this plan's context is " + format_tokens(context) + ", " + b +
         " (more pages compete for the budget: recall measured there is not this context's)";
}

Json max_context_json(const planner::MaxContext& mc) {
  if (!mc.available) return nullptr;
  return {{"attention", simulator::to_string(mc.attention)},
          {"max_context_tokens", mc.tokens},
          {"step_tokens", mc.step_tokens},
          {"capped", mc.capped},
          {"binding_constraint", mc.binding_constraint},
          {"binding_notes", mc.binding_notes},
          {"speed_limited", mc.speed_limited},
          {"plan", mc.plan ? candidate_brief(*mc.plan) : Json(nullptr)},
          {"evaluations", mc.evaluations},
          {"search_s", mc.seconds}};
}

void print_max_context(const planner::MaxContext& mc, const planner::Request& r) {
  const char* label = mc.attention == Attention::dense ? "dense (exact gradients)" : "sparse (approximate)";
  if (!mc.available) return;
  if (mc.tokens == 0) {
    std::printf("  %-26s nothing fits, not even %lld tokens (%s)\n", label, static_cast<long long>(mc.step_tokens),
                mc.binding_constraint.c_str());
    return;
  }
  std::printf("  %-26s %s%s, limited by %s\n", label, tokens_text(mc.tokens).c_str(), mc.capped ? " or more" : "",
              mc.binding_constraint.c_str());
  for (const auto& n : mc.binding_notes) std::printf("  %-26s   at +%lld tokens: %s\n", "", static_cast<long long>(mc.step_tokens), n.c_str());
  if (mc.plan)
    std::printf("  %-26s   %s; step %s, peak %s\n", "", planner::describe_knobs(mc.plan->config, r.scenario.model).c_str(),
                format_duration_s(mc.plan->summary.step_s).c_str(), format_bytes(mc.plan->summary.peak_device_bytes).c_str());
}

void print_baselines(const std::vector<Baseline>& bs, const Candidate& chosen) {
  std::printf("\nStandard training at this context (full sequence; the oomb plan above: %s, %s):\n",
              format_bytes(chosen.summary.peak_device_bytes).c_str(), format_duration_s(chosen.summary.step_s).c_str());
  for (const auto& b : bs) {
    if (!b.result) {
      std::printf("  %-62s nothing evaluated\n", b.label.c_str());
      continue;
    }
    const auto& k = *b.result;
    std::printf("  %-62s %s: peak %s, step %s%s\n", b.label.c_str(),
                b.fits ? "fits" : ("does not fit (" + k.usage.binding() + ")").c_str(),
                format_bytes(k.summary.peak_device_bytes).c_str(), format_duration_s(k.summary.step_s).c_str(),
                b.fits ? (", " +
                          std::string(!k.config.checkpointing ? "checkpointing off"
                                      : k.config.kept_layers > 0
                                          ? "checkpointing on, " + std::to_string(k.config.kept_layers) + " layers kept"
                                          : "checkpointing on") +
                          ", " +
                          (k.config.logits_chunk_tokens > 0 ? format_tokens(k.config.logits_chunk_tokens) + " loss tiles"
                                                            : std::string("unfused loss")))
                             .c_str()
                       : " (closest)");
  }
}

void print_comparison(const Comparison& cmp, const NodeGpus& node, const simulator::Scenario& s, int64_t context) {
  std::printf("\nMulti-GPU comparison: %lld x %s in one node (host %s), context %s\n", static_cast<long long>(node.gpus),
              s.gpu.id.c_str(), s.host.id.c_str(), format_tokens(context).c_str());
  std::printf("  %-52s %12s %12s %14s %12s  %s\n", "layout", "mem per GPU", "step", "tokens/s node", "GPU-h per 1B",
              "fits");
  for (const auto& p : cmp.rows) {
    std::printf("  %-52s %12s %12s %14s %12s  %s\n", p.label.c_str(), format_bytes(p.device_bytes).c_str(),
                format_duration_s(p.step_s).c_str(), format_count(p.tokens_per_s).c_str(),
                format_count(p.gpu_hours_per_billion_tokens).c_str(),
                p.fits ? ("yes (" + p.binding + ")").c_str() : ("NO: " + p.binding).c_str());
    for (const auto& n : p.notes) std::printf("  %-52s   %s\n", "", n.c_str());
  }
  for (const auto& n : cmp.notes) std::printf("  note: %s\n", n.c_str());
  std::printf("  (mem per GPU includes the runtime reserve; tokens/s and GPU-hours count every GPU of the layout; "
              "host memory is per node)\n");
}

int run_plan(PlanArgs a) {
  using namespace planner;
  planner::Request r;
  check_writable(a.out, "--out");  // before the search, not after it
  if (a.min_budget && (*a.min_budget < 1 || *a.min_budget > simulator::kMaxPageBudget))
    throw Error("--min-budget", std::to_string(*a.min_budget),
                "must be in [1, " + std::to_string(simulator::kMaxPageBudget) + "] pages", "e.g. 64");
  if (a.min_recall && !(*a.min_recall > 0 && *a.min_recall <= 1))  // NaN fails too
    throw Error("--min-recall", format_number(*a.min_recall), "must be in (0, 1]", "e.g. 0.9");
  const NodeGpus node = planner::node_gpus(a.flags.gpus ? *a.flags.gpus : 1, a.flags.model);
  if (node.tp != node.gpus) {
    if (node.tp > 1) a.flags.gpus = node.tp;
    else a.flags.gpus.reset();
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
  // --min-recall: the curve + R become a minimum budget (and the curve's page size for sparse
  // candidates, since a budget counts pages).
  std::optional<RecallCurve> curve;
  int64_t recall_min_budget = 0;
  if (a.min_recall && a.recall_curve.empty())
    throw Error("--min-recall", "", "needs a measured budget-to-recall curve (--recall-curve FILE)",
                "oomb run --attention sparse --measure-recall --trace T.json at a few budgets, then oomb calibrate "
                "--recall T*.json --out curve.json");
  if (!a.recall_curve.empty()) curve = load_recall_curve(a.recall_curve);
  if (curve && curve->model != r.scenario.model.id && !a.recall_curve_any)
    throw Error("--recall-curve", a.recall_curve,
                "was measured on model " + curve->model + ", not on " + r.scenario.model.id +
                    " (attention of another model says little about this one's)",
                "a curve measured on " + r.scenario.model.id +
                    " (oomb run --attention sparse --measure-recall, then oomb calibrate --recall), or "
                    "--recall-curve-any to use it anyway");
  if (curve && a.min_recall) {
    const int64_t cp = curve->page_tokens;
    const bool page_fixed = r.fixed.count("page") > 0;
    if (page_fixed && r.scenario.config.page_tokens != cp)
      throw Error("--page", std::to_string(r.scenario.config.page_tokens),
                  a.recall_curve + " was measured with pages of " + std::to_string(cp) +
                      " tokens (a budget counts pages)",
                  "--page " + std::to_string(cp) + ", or a curve measured at this page size");
    if (!page_fixed && cp != 64 && cp != 128 && cp != 256)
      throw Error("--recall-curve", a.recall_curve,
                  "was measured with pages of " + std::to_string(cp) + " tokens; the planner searches 64, 128, 256",
                  "fix --page " + std::to_string(cp) + ", or measure at one of the searched page sizes");
    recall_min_budget = min_budget_for_recall(*curve, *a.min_recall, a.recall_curve);
    // In the curve's pages; a --min-budget (in its own pages) still holds when it attends more.
    const int64_t user_tokens = a.min_budget ? *a.min_budget * r.min_budget_page_tokens : 0;
    r.min_budget = std::max(recall_min_budget, ceil_div(user_tokens, cp));
    r.min_budget_page_tokens = cp;
    r.sparse_page = cp;
    if (r.fixed.count("budget") && r.scenario.config.page_budget < recall_min_budget)
      throw Error("--budget", std::to_string(r.scenario.config.page_budget),
                  "has interpolated mean recall below --min-recall in " + a.recall_curve,
                  "a budget of at least " + std::to_string(recall_min_budget) + " pages, or a lower --min-recall");
  }
  auto recall_of = [&](const simulator::Config& c) -> std::optional<double> {
    if (!curve || c.attention != Attention::sparse || c.page_tokens != curve->page_tokens)
      return std::nullopt;
    return interpolate_recall(*curve, c.page_budget);
  };
  const auto& s0 = r.scenario;

  Json out = Json::object();
  std::optional<Candidate> chosen;
  bool sparse_fallback = false;
  std::optional<Candidate> sparse_hint;
  SearchResult res;
  std::optional<planner::Diagnosis> diagnosis;
  std::optional<MaxContext> mc_dense, mc_sparse;
  int64_t context = N;

  if (a.max_context) {
    planner::check_request(r, planner::kMaxContextCap);
    mc_dense = max_context(r, Attention::dense);
    if (s0.config.schedule == simulator::Schedule::oomb) mc_sparse = max_context(r, Attention::sparse);
    // Exact gradients unless sparse is asked for (or allowed and longer), or dense fits nothing.
    const MaxContext* pick = mc_dense->available && mc_dense->plan ? &*mc_dense : nullptr;
    const bool sparse_ok = mc_sparse && mc_sparse->available && mc_sparse->plan;
    if (sparse_ok && (!pick || (r.allow_sparse && mc_sparse->tokens > pick->tokens))) {
      sparse_fallback = !pick && !r.allow_sparse && !r.fixed.count("attention");
      pick = &*mc_sparse;
    }
    if (pick) {
      chosen = pick->plan;
      context = pick->tokens;
    }
  } else {
    planner::SearchOptions o;
    o.exhaustive = a.pareto;
    res = search(r, N, o);
    chosen = res.best;
    sparse_fallback = res.sparse_fallback;
    if (!res.best || res.sparse_fallback) diagnosis = diagnose(r, N, res);
    // Exact gradients were chosen by default: say what sparse attention would buy, when it is a lot.
    if (chosen && chosen->config.attention == Attention::dense && !r.fixed.count("attention") &&
        s0.config.schedule == simulator::Schedule::oomb) {
      planner::Request rs = r;
      rs.fixed.insert("attention");
      rs.scenario.config.attention = Attention::sparse;
      const SearchResult sparse = search(rs, N);
      if (sparse.best && sparse.best->summary.step_s < 0.5 * chosen->summary.step_s) sparse_hint = sparse.best;
    }
  }
  if (a.pareto && a.max_context && chosen) {
    planner::Request rp = r;
    rp.fixed.insert("attention");
    rp.scenario.config.attention = chosen->config.attention;
    planner::SearchOptions o;
    o.exhaustive = true;
    res = search(rp, context, o);
  } else if (a.max_context && chosen) {
    planner::Request rp = r;
    rp.fixed.insert("attention");
    rp.scenario.config.attention = chosen->config.attention;
    if (rp.objective == Objective::context) rp.objective = Objective::time;
    res = search(rp, context);
  }
  if (a.max_context && res.best) chosen = res.best;  // the same search max_context ended with
  std::vector<Candidate> front = a.pareto ? pareto_frontier(res.feasible, res.best ? &*res.best : nullptr) : std::vector<Candidate>{};

  // A plan on paper (a setting the executor does not follow yet): also name the best one it runs.
  // A plan to be run: say what the settings on paper would give.
  std::optional<Candidate> best_executable, on_paper;
  if (chosen && r.executable_only && !a.max_context) {
    planner::Request rp = r;
    rp.executable_only = false;
    const SearchResult paper = search(rp, context);
    if (paper.best && !executable(paper.best->config) &&
        paper.best->summary.step_s < chosen->summary.step_s * (1.0 - kTieTolerance))
      on_paper = paper.best;
  }
  if (chosen && !executable(chosen->config)) {
    std::vector<Candidate> runnable;
    for (const auto& k : res.feasible)
      if (executable(k.config)) runnable.push_back(k);
    if (const Candidate* b = select_best(runnable, r.objective, &s0.config)) best_executable = *b;
  }
  const std::string warning = context_warning(s0.model, chosen ? chosen->config.context_tokens : N);
  if (!warning.empty()) std::fprintf(stderr, "oomb plan: warning: %s\n", warning.c_str());

  std::optional<planner::Plan> plan;
  simulator::Scenario chosen_s = s0;
  if (chosen) {
    chosen_s.config = chosen->config;
    plan = make_plan(chosen_s, chosen->summary, to_string(r.objective), r.headroom,
                     plan_notes(chosen->config, sparse_fallback));
    if (!a.out.empty()) save_plan(a.out, *plan);
  }

  std::optional<Comparison> comparison;
  if (node.gpus > 1 && context > 0) comparison = planner::compare_multi_gpu(r, node, chosen, context);
  std::vector<Baseline> standard;
  if (chosen && s0.config.schedule == simulator::Schedule::oomb) standard = planner::baselines(r, context);

  if (a.json) {
    out["plan"] = plan ? plan->to_json() : Json(nullptr);
    out["node"] = {{"gpus", node.gpus}, {"tp", node.tp}, {"note", node.note}};
    out["multi_gpu"] = comparison ? comparison->to_json() : Json(nullptr);
    out["baselines"] = Json::array();
    for (const auto& b : standard) {
      Json x = b.result ? candidate_brief(*b.result) : Json::object();
      x["label"] = b.label;
      x["fits"] = b.fits;
      out["baselines"].push_back(x);
    }
    out["prediction"] = chosen ? simulator::to_json(chosen->summary) : Json(nullptr);
    out["alternatives"] = Json::array();
    if (chosen)
      for (const auto& alt : res.alternatives) {
        Json j = candidate_brief(alt);
        j["difference"] = describe_difference(chosen->config, alt.config, s0.model);
        out["alternatives"].push_back(j);
      }
    out["diagnosis"] = diagnosis ? diagnosis->to_json() : Json(nullptr);
    out["sparse_fallback"] = sparse_fallback;
    out["sparse_alternative"] = sparse_hint ? candidate_brief(*sparse_hint) : Json(nullptr);
    out["best_executable"] = best_executable ? candidate_brief(*best_executable) : Json(nullptr);
    out["on_paper"] = on_paper ? candidate_brief(*on_paper) : Json(nullptr);
    out["warnings"] = warning.empty() ? Json::array() : Json::array({warning});
    if (chosen) {
      std::string why;
      executable(chosen->config, &why);
      out["executable"] = {{"executable", why.empty()}, {"reason", why}};
      out["optimizer"] = {{"placement", simulator::to_string(chosen->config.optimizer)},
                          {"bytes", optimizer_bytes(chosen_s)},
                          {"tier", chosen->config.optimizer == simulator::Optimizer::host ? "host"
                                   : chosen->config.optimizer == simulator::Optimizer::gpu ? "device"
                                                                                           : "none"}};
    }
    out["search"] = {{"evaluations", res.evaluations}, {"search_s", res.seconds}, {"fixed", r.fixed}};
    if (a.pareto) {
      out["pareto"] = Json::array();
      for (const auto& k : front) out["pareto"].push_back(candidate_brief(k));
    }
    if (a.max_context)
      out["max_context"] = {{"dense", mc_dense ? max_context_json(*mc_dense) : Json(nullptr)},
                            {"sparse", mc_sparse ? max_context_json(*mc_sparse) : Json(nullptr)}};
    if (curve) {
      const auto rc = chosen ? recall_of(chosen->config) : std::nullopt;
      out["recall"] = {{"curve", a.recall_curve},
                       {"model", curve->model},
                       {"min_recall", a.min_recall ? Json(*a.min_recall) : Json(nullptr)},
                       {"min_budget", a.min_recall ? Json(recall_min_budget) : Json(nullptr)},
                       {"mean_recall", rc ? Json(*rc) : Json(nullptr)},
                       {"measured_context_tokens", curve->context_tokens},
                       {"measured_chunk_tokens", curve->chunk_tokens},
                       {"page_tokens", curve->page_tokens},
                       {"context_ratio", context > 0 ? static_cast<double>(context) / static_cast<double>(curve->context_tokens) : 0.0},
                       {"note", curve_context_text(*curve, context)}};
    }
    std::printf("%s\n", out.dump(2).c_str());
    if (plan) for (const auto& n : plan->notes) std::fprintf(stderr, "oomb plan: warning: %s\n", n.c_str());
    return chosen ? 0 : 1;
  }

  std::string fixed_text;
  for (const auto& k : r.fixed) fixed_text += (fixed_text.empty() ? "" : ", ") + k;
  if (a.max_context) {
    std::printf("oomb plan: largest context for %s on %s (host %s), headroom %s\n", s0.model.id.c_str(), s0.gpu.id.c_str(),
                s0.host.id.c_str(), format_percent(r.headroom).c_str());
    std::string limits;
    if (r.max_step_s > 0) limits += "step time <= " + format_duration_s(r.max_step_s);
    if (r.min_tokens_per_s > 0)
      limits += (limits.empty() ? "" : ", ") + std::string(">= ") + format_count(r.min_tokens_per_s) + " tokens/s";
    std::printf("  speed limits: %s\n", limits.empty() ? "none (give --max-step-time, e.g. 1h, for a useful answer)"
                                                        : limits.c_str());
    print_max_context(*mc_dense, r);
    if (mc_sparse) print_max_context(*mc_sparse, r);
    if (!chosen) {
      std::printf("\nNothing fits on this hardware.\n");
      return 1;
    }
    std::printf("\nPlan at %s:\n", tokens_text(context).c_str());
  } else {
    std::printf("oomb plan: %s on %s (host %s), context %s, objective %s\n", s0.model.id.c_str(), s0.gpu.id.c_str(),
                s0.host.id.c_str(), tokens_text(N).c_str(), to_string(r.objective));
  }
  if (!warning.empty()) std::printf("  WARNING: %s\n", warning.c_str());
  if (!node.note.empty()) std::printf("  note: %s\n", node.note.c_str());
  std::printf("  searched %lld configurations in %s; fixed by you: %s\n", static_cast<long long>(res.evaluations),
              format_duration_s(res.seconds).c_str(), fixed_text.empty() ? "nothing" : fixed_text.c_str());
  if (!chosen) {
    std::printf("\nNO PLAN FITS.\n");
    if (diagnosis) print_diagnosis(*diagnosis);
    if (comparison) print_comparison(*comparison, node, s0, context);
    return 1;
  }
  std::printf("\n");
  print_settings(chosen_s);
  if (curve) {
    const auto rc = recall_of(chosen->config);
    std::string line = "  recall       ";
    if (rc) line += "mean " + std::to_string(*rc).substr(0, 6) + " of the dense attention mass at budget " +
                    std::to_string(chosen->config.page_budget);
    else if (chosen->config.attention == Attention::dense) line += "1 (dense attention)";
    else line += "not measured at this budget/page";
    if (a.min_recall)
      line += " (--min-recall " + std::to_string(*a.min_recall).substr(0, 6) + ": budgets >= " +
              std::to_string(recall_min_budget) + " pages of " + std::to_string(curve->page_tokens) + " = " +
              format_tokens(recall_min_budget * curve->page_tokens) + " attended tokens)";
    std::printf("%s; curve %s (model %s)\n", line.c_str(), a.recall_curve.c_str(), curve->model.c_str());
    std::printf("  %s\n", curve_context_text(*curve, context).c_str());
    if (curve->model != s0.model.id)
      std::printf("  WARNING: the recall curve was measured on %s, not on %s (used because of --recall-curve-any)\n",
                  curve->model.c_str(), s0.model.id.c_str());
  }
  print_memory(chosen_s, *chosen, r.headroom);
  print_time(*chosen);
  print_allocation(*plan);
  print_alternatives(*chosen, res.alternatives, s0.model);
  if (on_paper) {
    std::string why;
    executable(on_paper->config, &why);
    std::printf("\nOn paper (not written: the executor does not run it): %s; step %s (%s), peak %s\n",
                describe_difference(chosen->config, on_paper->config, s0.model).c_str(),
                format_duration_s(on_paper->summary.step_s).c_str(),
                signed_percent(on_paper->summary.step_s / chosen->summary.step_s - 1.0).c_str(),
                format_bytes(on_paper->summary.peak_device_bytes).c_str());
  }
  if (best_executable)
    std::printf("\nBest executable plan (what `oomb run` can follow today): %s; step %s (%s), peak %s\n",
                describe_difference(chosen->config, best_executable->config, s0.model).c_str(),
                format_duration_s(best_executable->summary.step_s).c_str(),
                signed_percent(best_executable->summary.step_s / chosen->summary.step_s - 1.0).c_str(),
                format_bytes(best_executable->summary.peak_device_bytes).c_str());
  if (sparse_hint)
    std::printf("\nSparse attention would be %.0fx faster: %s (page size %lld tokens), step %s, %s tokens/s, peak %s "
                "(approximate gradients; add --allow-sparse to plan it)\n",
                chosen->summary.step_s / sparse_hint->summary.step_s, budget_text(sparse_hint->config).c_str(),
                static_cast<long long>(sparse_hint->config.page_tokens),
                format_duration_s(sparse_hint->summary.step_s).c_str(),
                format_count(sparse_hint->summary.tokens_per_s).c_str(),
                format_bytes(sparse_hint->summary.peak_device_bytes).c_str());
  if (!standard.empty()) print_baselines(standard, *chosen);
  if (a.pareto) print_pareto(front, s0.model);
  if (diagnosis) print_diagnosis(*diagnosis);
  if (comparison) print_comparison(*comparison, node, s0, context);
  print_notes(plan->notes);
  if (!a.out.empty()) std::printf("\nPlan written to %s\n", a.out.c_str());
  return 0;
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
      sub.add_flag("--pareto", a->pareto, "Also print the frontier of peak device memory vs step time");
      sub.footer(
          "Knobs given on the command line are fixed; the planner searches the others, recompute included: "
          "checkpointing off, full checkpointing, and partial checkpointing (--kept-layers K: the last K layers keep "
          "their activations, the largest K that fits), all run by the executor. --optimizer auto (the default) places AdamW state on the GPU or the host; --optimizer none "
          "plans without optimizer state (measurement settings, --preset oomb-published). --gpus N plans tensor parallelism on paper (execution is "
          "single-GPU for now). --min-recall R with --recall-curve F: the curve's mean recall is piecewise linear "
          "between measured budgets, the largest budget's value at or above it, and budgets below the smallest "
          "measured one are rejected; the planner then searches only budgets >= the smallest B whose every larger "
          "budget keeps recall >= R (max with --min-budget when given), and sparse candidates only at the curve's "
          "page size. Exit status: 0 plan found, 1 nothing fits (diagnosis printed), 2 bad input.");
      return [a] { return run_plan(*a); };
    });

}  // namespace
}  // namespace oomb::cli
