// oomb plan: search the knobs for a model, GPU, host and context (or the longest context that
// fits); print the plan, its memory and time, close alternatives, the memory/time frontier, or a
// diagnosis with concrete ways out when nothing fits; save it for `oomb run`.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "planner/diagnosis.h"
#include "planner/plan.h"
#include "planner/recall_curve.h"
#include "planner/search.h"

namespace oomb::cli {
namespace {

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
          {"binding_constraint", c.summary.binding_constraint}};
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
                    : ("SPARSE, budget " + std::to_string(c.page_budget) + " pages (" +
                       format_tokens(c.page_budget * c.page_tokens) + " tokens per query page), selection " + c.selection)
                          .c_str());
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
  std::printf("  optimizer    %s\n", c.optimizer == simulator::Optimizer::none ? "none (no AdamW state)"
                                     : c.optimizer == simulator::Optimizer::gpu ? "AdamW, state on the GPU"
                                                                                 : "AdamW, state on the host");
  if (c.gpus > 1) std::printf("  gpus         %lld (tensor parallelism, sizes per GPU)\n", static_cast<long long>(c.gpus));
}

void print_memory(const simulator::Scenario& s, const Candidate& k, double headroom) {
  const simulator::MemoryTable t = simulator::memory_table(s);
  const auto& u = k.usage;
  std::printf("\nDevice memory: %s of %s (%s), limit %s with %s headroom\n", format_bytes(u.device_need_bytes).c_str(),
              format_bytes(u.device_capacity_bytes).c_str(), s.gpu.id.c_str(), format_bytes(u.device_limit_bytes).c_str(),
              format_percent(headroom).c_str());
  std::printf("  %-28s %12s %7s\n", "buffer", "bytes", "share");
  for (const auto& r : t.rows)
    if (r.tier == simulator::Tier::device && r.bytes > 0)
      std::printf("  %-28s %12s %7s\n", r.name.c_str(), format_bytes(r.bytes).c_str(),
                  format_percent(static_cast<double>(r.bytes) / static_cast<double>(u.device_capacity_bytes)).c_str());
  if (s.config.peak_measure == simulator::PeakMeasure::allocated)
    std::printf("  %-28s %12s %7s  (not in the reported peak: --peak-measure allocated)\n", "runtime_reserve",
                format_bytes(s.gpu.reserved_bytes).c_str(),
                format_percent(static_cast<double>(s.gpu.reserved_bytes) / static_cast<double>(u.device_capacity_bytes)).c_str());
  std::printf("\nHost memory: %s (%s: %s RAM, %s pinnable; %s of it pinned)\n", format_bytes(u.host_need_bytes).c_str(),
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
  std::printf("Binding constraint: %s\n", m.binding_constraint.c_str());
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
  if (alts.empty()) return;
  std::printf("\nClose alternatives (all fit):\n");
  for (const auto& a : alts)
    std::printf("  %-58s step %s (%s), peak %s (%s)\n", planner::describe_difference(best.config, a.config, m).c_str(),
                format_duration_s(a.summary.step_s).c_str(),
                signed_percent(a.summary.step_s / best.summary.step_s - 1.0).c_str(),
                format_bytes(a.summary.peak_device_bytes).c_str(),
                signed_bytes(a.summary.peak_device_bytes - best.summary.peak_device_bytes).c_str());
}

void print_pareto(const std::vector<Candidate>& front, const models::ModelSpec& m) {
  std::printf("\nPareto frontier (peak device memory vs step time), %zu points:\n", front.size());
  std::printf("  %12s %12s %12s  %s\n", "peak device", "step", "tokens/s", "settings");
  for (const auto& k : front)
    std::printf("  %12s %12s %12.1f  %s\n", format_bytes(k.summary.peak_device_bytes).c_str(),
                format_duration_s(k.summary.step_s).c_str(), k.summary.tokens_per_s,
                planner::describe_knobs(k.config, m).c_str());
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
  return notes;
}

void print_notes(const std::vector<std::string>& notes) {
  for (const auto& n : notes) {
    std::printf("\n!!! %s\n", n.c_str());
    std::fprintf(stderr, "oomb plan: warning: %s\n", n.c_str());
  }
}

Json max_context_json(const planner::MaxContext& mc) {
  if (!mc.available) return nullptr;
  return {{"attention", simulator::to_string(mc.attention)},
          {"max_context_tokens", mc.tokens},
          {"step_tokens", mc.step_tokens},
          {"capped", mc.capped},
          {"binding_constraint", mc.binding_constraint},
          {"binding_notes", mc.binding_notes},
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

int run_plan(PlanArgs a) {
  using namespace planner;
  planner::Request r;
  check_writable(a.out, "--out");  // before the search, not after it
  if (a.min_budget && (*a.min_budget < 1 || *a.min_budget > simulator::kMaxPageBudget))
    throw Error("--min-budget", std::to_string(*a.min_budget),
                "must be in [1, " + std::to_string(simulator::kMaxPageBudget) + "] pages", "e.g. 64");
  if (a.min_recall && !(*a.min_recall > 0 && *a.min_recall <= 1))  // NaN fails too
    throw Error("--min-recall", format_number(*a.min_recall), "must be in (0, 1]", "e.g. 0.9");
  // --optimizer auto belongs to the planner: AdamW state is wanted, its placement searched.
  if (a.flags.optimizer && *a.flags.optimizer == "auto") {
    r.optimizer_auto = true;
    a.flags.optimizer.reset();
  }
  r.objective = objective_from_string(a.objective, "--objective");
  if (r.objective == Objective::context) a.max_context = true;
  if (a.max_context && !a.flags.context.empty())
    throw Error("--context", a.flags.context, "cannot be combined with --max-context (or --objective context)",
                "give a context to plan for, or let --max-context find the largest");
  if (!a.max_context && a.flags.context.empty())
    throw Error("--context", "", "missing", "give --context N (e.g. 4M) or --max-context");
  const int64_t N = a.max_context ? 0 : parse_tokens(a.flags.context, "--context");
  r.fixed = a.flags.explicit_knobs();
  ScenarioFlags f = a.flags;
  f.context.clear();  // knobs are validated per candidate, not against the defaults
  r.scenario = f.resolve();
  r.headroom = a.headroom;
  r.allow_sparse = a.allow_sparse;
  if (a.min_budget) r.min_budget = *a.min_budget;
  r.host_explicit = !a.flags.host.empty();
  // --min-recall: the curve + R become a minimum budget (and the curve's page size for sparse
  // candidates, since a budget counts pages).
  std::optional<RecallCurve> curve;
  int64_t recall_min_budget = 0;
  if (a.min_recall && a.recall_curve.empty())
    throw Error("--min-recall", "", "needs a measured budget-to-recall curve (--recall-curve FILE)",
                "oomb run --attention sparse --measure-recall --trace T.json at a few budgets, then oomb calibrate "
                "--recall T*.json --out curve.json");
  if (!a.recall_curve.empty()) curve = load_recall_curve(a.recall_curve);
  if (curve && a.min_recall) {
    const int64_t cp = curve->points.front().page_tokens;
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
    r.min_budget = a.min_budget ? std::max(*a.min_budget, recall_min_budget) : recall_min_budget;
    r.sparse_page = cp;
    if (r.fixed.count("budget") && r.scenario.config.page_budget < recall_min_budget)
      throw Error("--budget", std::to_string(r.scenario.config.page_budget),
                  "has interpolated mean recall below --min-recall in " + a.recall_curve,
                  "a budget of at least " + std::to_string(recall_min_budget) + " pages, or a lower --min-recall");
  }
  auto recall_of = [&](const simulator::Config& c) -> std::optional<double> {
    if (!curve || c.attention != Attention::sparse || c.page_tokens != curve->points.front().page_tokens)
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
  std::vector<Candidate> front = a.pareto ? pareto_frontier(res.feasible) : std::vector<Candidate>{};

  std::optional<planner::Plan> plan;
  simulator::Scenario chosen_s = s0;
  if (chosen) {
    chosen_s.config = chosen->config;
    plan = make_plan(chosen_s, chosen->summary, to_string(r.objective), r.headroom,
                     plan_notes(chosen->config, sparse_fallback));
    if (!a.out.empty()) save_plan(a.out, *plan);
  }

  if (a.json) {
    out["plan"] = plan ? plan->to_json() : Json(nullptr);
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
                       {"mean_recall", rc ? Json(*rc) : Json(nullptr)}};
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
  std::printf("  searched %lld configurations in %s; fixed by you: %s\n", static_cast<long long>(res.evaluations),
              format_duration_s(res.seconds).c_str(), fixed_text.empty() ? "nothing" : fixed_text.c_str());
  if (!chosen) {
    std::printf("\nNO PLAN FITS.\n");
    if (diagnosis) print_diagnosis(*diagnosis);
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
              std::to_string(recall_min_budget) + " pages of " +
              std::to_string(curve->points.front().page_tokens) + " tokens)";
    std::printf("%s; curve %s (model %s)\n", line.c_str(), a.recall_curve.c_str(), curve->model.c_str());
    if (curve->model != s0.model.id)
      std::printf("  note: the recall curve was measured on %s, not on %s\n", curve->model.c_str(),
                  s0.model.id.c_str());
  }
  print_memory(chosen_s, *chosen, r.headroom);
  print_time(*chosen);
  print_allocation(*plan);
  print_alternatives(*chosen, res.alternatives, s0.model);
  if (sparse_hint)
    std::printf("\nSparse attention would be %.0fx faster: budget %lld pages, step %s, %s tokens/s, peak %s "
                "(approximate gradients; add --allow-sparse to plan it)\n",
                chosen->summary.step_s / sparse_hint->summary.step_s,
                static_cast<long long>(sparse_hint->config.page_budget),
                format_duration_s(sparse_hint->summary.step_s).c_str(),
                format_count(sparse_hint->summary.tokens_per_s).c_str(),
                format_bytes(sparse_hint->summary.peak_device_bytes).c_str());
  if (a.pareto) print_pareto(front, s0.model);
  if (diagnosis) print_diagnosis(*diagnosis);
  print_notes(plan->notes);
  if (!a.out.empty()) std::printf("\nPlan written to %s\n", a.out.c_str());
  return 0;
}

const Registrar reg(
    "plan", "Find the best settings for a model, GPU, host and context (or the longest context that fits)",
    [](CLI::App& sub) {
      auto a = std::make_shared<PlanArgs>();
      a->flags.add_to(sub, false);
      sub.add_flag("--max-context", a->max_context,
                   "Find the largest context that fits (dense and sparse), instead of planning for --context");
      sub.add_option("--objective", a->objective,
                     "time (min step time, default), memory (min peak device memory) or context (= --max-context)");
      sub.add_flag("--allow-sparse", a->allow_sparse,
                   "Let sparse attention compete with dense (approximate gradients); without it sparse is used only "
                   "when no dense plan fits, and then said loudly");
      sub.add_option("--min-budget", a->min_budget, "Sparse: smallest page budget the planner may choose (default 64)");
      sub.add_option("--min-recall", a->min_recall,
                     "Sparse: only budgets whose mean recall of the dense attention mass, interpolated in "
                     "--recall-curve, is at least this (0..1]; replaces the default --min-budget");
      sub.add_option("--recall-curve", a->recall_curve,
                     "Budget-to-recall curve (oomb.recall/1, from `oomb calibrate --recall`); the chosen budget's "
                     "recall is printed");
      sub.add_option("--headroom", a->headroom, "Share of HBM capacity kept free (default 0.05)");
      sub.add_option("--out", a->out, "Write the plan (oomb.plan/1 JSON) to this file");
      sub.add_flag("--json", a->json, "Print the plan, prediction, alternatives and diagnosis as JSON");
      sub.add_flag("--pareto", a->pareto, "Also print the frontier of peak device memory vs step time");
      sub.footer(
          "Knobs given on the command line are fixed; the planner searches the others. --optimizer auto lets it "
          "place AdamW state on the GPU or the host. --gpus N plans tensor parallelism on paper (execution is "
          "single-GPU for now). --min-recall R with --recall-curve F: the curve's mean recall is piecewise linear "
          "between measured budgets, the largest budget's value at or above it, and budgets below the smallest "
          "measured one are rejected; the planner then searches only budgets >= the smallest B whose every larger "
          "budget keeps recall >= R (max with --min-budget when given), and sparse candidates only at the curve's "
          "page size. Exit status: 0 plan found, 1 nothing fits (diagnosis printed), 2 bad input.");
      return [a] { return run_plan(*a); };
    });

}  // namespace
}  // namespace oomb::cli
