#include "planner/answer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "planner/defaults.h"
#include "planner/executable.h"
#include "planner/parallel.h"
#include "step/capability.h"
#include "step/describe.h"
#include "step/geometry.h"

namespace oomb::planner {

using step::Attention;

std::string tokens_text(int64_t n) {
  std::string digits = std::to_string(n), grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  const std::string short_form = format_tokens(n);
  return short_form == digits ? grouped + " tokens" : short_form + " (" + grouped + " tokens)";
}

namespace {

// Built by appending: GCC 12's -Wrestrict misreads a literal prepended to a string here (a false
// positive in the release build).
std::string signed_bytes(int64_t b) {
  std::string s(1, b >= 0 ? '+' : '-');
  s += format_bytes(b >= 0 ? b : -b);
  return s;
}

Json candidate_brief(const Candidate& c, const models::ModelSpec& m) {
  return {{"config", c.config.to_json()},
          {"peak_device_bytes", c.summary.peak_device_bytes},
          {"peak_host_bytes", c.summary.peak_host_bytes},
          {"step_s", c.summary.step_s},
          {"tokens_per_s", c.summary.tokens_per_s},
          {"h2d_bytes", c.summary.h2d_bytes},
          {"d2h_bytes", c.summary.d2h_bytes},
          {"binding_constraint", to_string(c.summary.binding)},
          {"executable", planner::executable(m, c.config)}};
}

void print_settings(std::string& out, const simulator::Scenario& s) {
  const auto& c = s.config;
  appendf(out, "Settings\n");
  if (c.schedule == step::Schedule::standard) {
    appendf(out, "  schedule     standard (full-sequence training)\n");
  } else {
    appendf(out, "  schedule     oomb (chunk-recurrent), attention %s\n",
                c.attention == step::Attention::dense
                    ? "dense (exact gradients)"
                    : ("SPARSE, " + step::budget_text(c) + " per query page, selection " + c.selection).c_str());
    const int64_t chunks = ceil_div(c.context_tokens, c.chunk_tokens);
    appendf(out, "  chunk        %s tokens (%lld chunk%s), page %lld tokens\n", format_tokens(c.chunk_tokens).c_str(),
                static_cast<long long>(chunks), chunks == 1 ? "" : "s", static_cast<long long>(c.page_tokens));
    appendf(out, "  residency    %s\n", step::residency_text(c, s.model).c_str());
  }
  appendf(out, "  dtypes       %s\n", step::dtypes_text(c).c_str());
  const int64_t span = c.schedule == step::Schedule::standard ? c.context_tokens
                                                                    : std::min(c.chunk_tokens, c.context_tokens);
  appendf(out, "  loss         %s%s, loss %s\n", step::logits_text(c).c_str(),
          c.logits_chunk_tokens > span ? (" (one tile of " + format_tokens(span) + ": the whole chunk)").c_str() : "",
          to_string(c.loss_dtype));
  if (c.lora_rank > 0) {
    const step::Geometry g = step::geometry(s.model, c);
    const int64_t trained = step::trainable_param_count(s.model, c, g);
    const double share = static_cast<double>(trained) / static_cast<double>(step::rank_param_count(s.model, c));
    appendf(out, "  training     LoRA rank %lld (alpha %g) on %s%s: %s trained parameters (%s of the model), the "
                 "base frozen\n",
            static_cast<long long>(c.lora_rank), c.lora_alpha, step::lora_targets_text(c.lora_targets).c_str(),
            c.lora_train_embeddings ? " + embeddings and LM head" : "", format_count(static_cast<double>(trained)).c_str(),
            format_percent(share).c_str());
  }
  appendf(out, "  optimizer    %s\n", planner::optimizer_text(s).c_str());
  appendf(out, "  recompute    %s\n", step::recompute_text(c, s.model).c_str());
  std::string why;
  if (!planner::executable(s.model, c, &why)) appendf(out, "  executable   NO, on paper: %s\n", why.c_str());
  if (c.gpus > 1) appendf(out, "  gpus         %lld (tensor parallelism, sizes per GPU)\n", static_cast<long long>(c.gpus));
}

void print_memory(std::string& out, const simulator::Scenario& s, const Candidate& k, double headroom) {
  const step::BufferTable t = simulator::memory_table(s);
  const auto& u = k.usage;
  const bool tp = s.config.gpus > 1;
  appendf(out, "\nDevice memory%s: %s of %s (%s), limit %s with %s headroom\n", tp ? " per GPU" : "",
              format_bytes(u.device_need_bytes).c_str(), format_bytes(u.device_capacity_bytes).c_str(), s.gpu.id.c_str(),
              format_bytes(u.device_limit_bytes).c_str(), format_percent(headroom).c_str());
  appendf(out, "  %-28s %12s %7s\n", "buffer", "bytes", "share");
  for (const auto& r : t.rows)
    if (r.tier == step::Tier::device && r.bytes > 0)
      appendf(out, "  %-28s %12s %7s\n", r.name.c_str(), format_bytes(r.bytes).c_str(),
                  format_percent(static_cast<double>(r.bytes) / static_cast<double>(u.device_capacity_bytes)).c_str());
  if (s.config.peak_measure == step::PeakMeasure::allocated)
    appendf(out, "  %-28s %12s %7s  (not in the reported peak: --peak-measure allocated)\n", "runtime_reserve",
                format_bytes(s.gpu.reserved_bytes).c_str(),
                format_percent(static_cast<double>(s.gpu.reserved_bytes) / static_cast<double>(u.device_capacity_bytes)).c_str());
  const int64_t on_node = step::ranks_per_node(s.config);
  appendf(out, "\nHost memory%s: %s (%s: %s RAM, %s pinnable; %s of it pinned)\n",
              on_node > 1 ? (" per node (all " + std::to_string(on_node) + " GPUs)").c_str() : "",
              format_bytes(u.host_need_bytes).c_str(),
              s.host.id.c_str(), format_bytes(s.host.ram_bytes).c_str(), format_bytes(s.host.pinnable_bytes).c_str(),
              format_bytes(u.pinned_need_bytes).c_str());
  appendf(out, "  %-28s %12s %7s\n", on_node > 1 ? "buffer (one rank's)" : "buffer", "bytes", "of pinnable");
  for (const auto& r : t.rows)
    if (r.tier == step::Tier::host && r.bytes > 0)
      appendf(out, "  %-28s %12s %7s\n", r.name.c_str(), format_bytes(r.bytes).c_str(),
                  format_percent(static_cast<double>(r.bytes) / static_cast<double>(s.host.pinnable_bytes)).c_str());
}

void print_time(std::string& out, const Candidate& k) {
  const auto& m = k.summary;
  appendf(out, "\nTransfers per step: h2d %s, d2h %s; exposed copy time %s (%s of the step)\n",
              format_bytes(m.h2d_bytes).c_str(), format_bytes(m.d2h_bytes).c_str(),
              format_duration_s(m.exposed_copy_s).c_str(),
              format_percent(m.step_s > 0 ? m.exposed_copy_s / m.step_s : 0).c_str());
  appendf(out, "Step time: %s, %.1f tokens/s (compute %s)\n", format_duration_s(m.step_s).c_str(), m.tokens_per_s,
              format_duration_s(m.compute_s).c_str());
  if (const int64_t d = k.config.data_parallel; d > 1) {
    appendf(out, "  %lld data-parallel replicas: %.1f tokens/s for the job", static_cast<long long>(d),
            m.tokens_per_s * static_cast<double>(d));
    if (m.allreduce_s > 0)
      appendf(out, k.config.shard_optimizer ? "; their gradient reduce-scatter and weight all-gather (ZeRO-1) %s per step (%s per rank%s)"
                                            : "; their gradient all-reduce %s per step (%s per rank%s)",
              format_duration_s(m.allreduce_s).c_str(),
              format_bytes(m.allreduce_bytes).c_str(),
              k.config.nodes > 1 ? (", across " + std::to_string(k.config.nodes) + " nodes").c_str() : "");
    appendf(out, "\n");
  }
  if (m.tp_allreduce_s > 0)
    appendf(out, "  tensor parallelism: %lld all-reduces of %s per step, %s\n", static_cast<long long>(m.tp_allreduces),
            format_bytes(m.tp_allreduce_bytes).c_str(), format_duration_s(m.tp_allreduce_s).c_str());
  // What bounds the step's time; which limit bounds the context (--max-context) is said apart.
  appendf(out, "Step time bound by: %s\n", to_string(m.binding));
}

void print_allocation(std::string& out, const planner::Plan& p) {
  const auto& a = p.allocation;
  appendf(out, "Executor allocation: KV pool %lld pages x %s, gradient pool %lld pages x %s (%s); workspace %s; host "
              "pool %s (+%s other host)\n",
              static_cast<long long>(a.kv_pool_pages), format_bytes(a.kv_page_bytes).c_str(),
              static_cast<long long>(a.grad_pool_pages), format_bytes(a.grad_page_bytes).c_str(),
              format_bytes(a.device_pool_bytes).c_str(), format_bytes(a.workspace_bytes).c_str(),
              format_bytes(a.host_pool_bytes).c_str(), format_bytes(a.host_other_bytes).c_str());
}

// " [on paper]" after a row whose settings the executor does not follow; nothing when the model
// itself is not run (the plan's "executable NO" line says so once, for every row).
const char* paper_tag(const models::ModelSpec& m, const step::Config& c) {
  if (!step::model_capability(m).executable()) return "";
  return planner::executable(m, c) ? "" : " [on paper]";
}

void print_alternatives(std::string& out, const Candidate& best, const std::vector<Candidate>& alts, const models::ModelSpec& m) {
  if (alts.empty()) {
    appendf(out, "\nClose alternatives: none; every other fitting setting is within 1%% of this plan in both step "
                "time and peak memory\n");
    return;
  }
  appendf(out, "\nClose alternatives (all fit; each differs by >= 1%% in step time or peak memory):\n");
  // The numbers first and the (any length) description last, so the columns stay aligned.
  appendf(out, "  %-22s %-28s %s\n", "step", "peak device", "differs from the plan in");
  for (const auto& a : alts) {
    const std::string step = format_duration_s(a.summary.step_s) + " (" +
                             format_signed_percent(a.summary.step_s / best.summary.step_s - 1.0) + ")";
    const std::string peak = format_bytes(a.summary.peak_device_bytes) + " (" +
                             signed_bytes(a.summary.peak_device_bytes - best.summary.peak_device_bytes) + ")";
    appendf(out, "  %-22s %-28s %s%s\n", step.c_str(), peak.c_str(),
                planner::describe_difference(best.config, a.config, m).c_str(),
                paper_tag(m, a.config));
  }
}

void print_pareto(std::string& out, const std::vector<Candidate>& front, const models::ModelSpec& m) {
  // Kept-layer counts step the memory and time by a fraction of a percent each: of a run of four or
  // more points that differ only in the count (one more layer kept each), the two ends are shown
  // and the points between are counted on a line under the run's last (--json lists every point).
  // Runs of different settings interleave in memory order, so a run is followed by its settings.
  constexpr size_t kMinRun = 4;
  struct Run {
    size_t first = 0, last = 0;
    int64_t first_kept = 0, last_kept = 0;
    bool collapsed() const { return static_cast<size_t>(last_kept - first_kept + 1) >= kMinRun; }
  };
  std::vector<Run> runs;
  constexpr size_t kNoRun = static_cast<size_t>(-1);
  std::vector<size_t> run_of(front.size(), kNoRun);  // point -> its run (checkpointing on)
  std::map<std::string, size_t> open;  // settings with kept_layers cleared -> its latest run
  for (size_t i = 0; i < front.size(); ++i) {
    const step::Config& c = front[i].config;
    if (!c.checkpointing) continue;
    step::Config base = c;
    base.kept_layers = 0;
    const std::string key = base.to_json().dump();
    auto it = open.find(key);
    if (it != open.end() && runs[it->second].last_kept + 1 == c.kept_layers) {
      runs[it->second].last = i;
      runs[it->second].last_kept = c.kept_layers;
    } else {
      it = open.insert_or_assign(key, runs.size()).first;
      runs.push_back({i, i, c.kept_layers, c.kept_layers});
    }
    run_of[i] = it->second;
  }
  // A collapsed run's points between its ends are hidden; its last point carries the count.
  auto run_at = [&](size_t i) -> const Run* { return run_of[i] == kNoRun ? nullptr : &runs[run_of[i]]; };
  auto hidden = [&](size_t i) {
    const Run* r = run_at(i);
    return r && r->collapsed() && i != r->first && i != r->last;
  };
  size_t shown = 0;
  for (size_t i = 0; i < front.size(); ++i) shown += !hidden(i);
  appendf(out, "\nPareto frontier (peak device memory vs step time), %zu points", front.size());
  if (shown < front.size()) appendf(out, " (%zu shown; --json lists every one)", shown);
  appendf(out, ":\n  (a point is kept unless another is as exact, no larger and no slower: KV-gradient dtypes and "
              "budgets each keep their own points)\n");
  appendf(out, "  %12s %12s %12s  %s\n", "peak device", "step", "tokens/s", "settings");
  for (size_t i = 0; i < front.size(); ++i) {
    if (hidden(i)) continue;
    const Candidate& k = front[i];
    appendf(out, "  %12s %12s %12.1f  %s%s\n", format_bytes(k.summary.peak_device_bytes).c_str(),
            format_duration_s(k.summary.step_s).c_str(), k.summary.tokens_per_s,
            planner::describe_knobs(k.config, m).c_str(), paper_tag(m, k.config));
    if (const Run* r = run_at(i); r && r->collapsed() && i == r->last)
      appendf(out, "  %38s  ^ and %lld points of these settings between %s and this line: last %lld..%lld of %lld "
                   "layers kept\n",
              "", static_cast<long long>(r->last_kept - r->first_kept - 1),
              format_bytes(front[r->first].summary.peak_device_bytes).c_str(), static_cast<long long>(r->first_kept + 1),
              static_cast<long long>(r->last_kept - 1), static_cast<long long>(step::effective_layers(k.config, m)));
  }
}

void print_diagnosis(std::string& out, const planner::Diagnosis& d) {
  appendf(out, "\nDiagnosis: no configuration with %s fits.\n", d.target.c_str());
  for (const auto& f : d.failures) {
    appendf(out, "  Closest %s fails on %s:\n", f.label.c_str(), to_string(f.binding));
    for (const auto& v : f.violations) appendf(out, "    %s\n", v.c_str());
  }
  if (d.suggestions.empty()) {
    appendf(out, "  No single change from the catalog makes it fit.\n");
    return;
  }
  appendf(out, "  Changes that would make it fit (each re-planned):\n");
  for (const auto& s : d.suggestions)
    appendf(out, "    - %s [%s]: peak device %s, host %s, step %s\n", s.change.c_str(), s.flags.c_str(),
                format_bytes(s.result.summary.peak_device_bytes).c_str(),
                format_bytes(s.result.summary.peak_host_bytes).c_str(), format_duration_s(s.result.summary.step_s).c_str());
}

std::vector<std::string> plan_notes(const step::Config& c, const models::ModelSpec& m, bool sparse_fallback) {
  std::vector<std::string> notes;
  if (sparse_fallback)
    notes.push_back("SPARSE FALLBACK: no dense (exact-gradient) configuration fits; this plan uses sparse attention "
                    "with a budget of " + std::to_string(c.page_budget) +
                    " pages, so its gradients are those of the sparse forward, not of the dense model");
  if (const int64_t ranks = c.gpus * c.data_parallel; ranks > 1) {
    std::string layout = c.gpus > 1 ? "tensor parallelism over " + std::to_string(c.gpus) + " GPUs" : "";
    if (c.data_parallel > 1)
      layout += (layout.empty() ? "" : " x ") + std::to_string(c.data_parallel) + " data-parallel replicas";
    if (c.nodes > 1) layout += " on " + std::to_string(c.nodes) + " nodes";
    notes.push_back(layout + ": one process per GPU, figures per rank; oomb run executes it under MPI (mpirun -np " +
                    std::to_string(ranks) + " oomb run --plan P --backend cuda: NCCL's collectives; --backend cpu: " +
                    "MPI's" + (c.nodes > 1 ? "; the nodes in a hostfile" : "") + ")");
  }
  if (std::string why; !planner::executable(m, c, &why)) notes.push_back("NOT EXECUTABLE: " + why);
  return notes;
}

void print_notes(std::string& out, const std::vector<std::string>& notes) {
  for (const auto& n : notes) appendf(out, "\n!!! %s\n", n.c_str());
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

Json max_context_json(const planner::MaxContext& mc, const models::ModelSpec& m) {
  if (!mc.available) return nullptr;
  return {{"attention", step::to_string(mc.attention)},
          {"max_context_tokens", mc.tokens},
          {"step_tokens", mc.step_tokens},
          {"capped", mc.capped},
          {"binding_constraint", mc.binding_text()},
          {"binding_notes", mc.binding_notes},
          {"speed_limited", mc.speed_limited},
          {"plan", mc.plan ? candidate_brief(*mc.plan, m) : Json(nullptr)},
          {"evaluations", mc.evaluations},
          {"search_s", mc.seconds}};
}

void print_max_context(std::string& out, const planner::MaxContext& mc, const planner::Request& r) {
  const char* label = mc.attention == step::Attention::dense ? "dense (exact gradients)" : "sparse (approximate)";
  if (!mc.available) return;
  if (mc.tokens == 0) {
    appendf(out, "  %-26s nothing fits, not even %lld tokens (%s)\n", label, static_cast<long long>(mc.step_tokens),
                mc.binding_text().c_str());
    return;
  }
  appendf(out, "  %-26s %s%s, limited by %s\n", label, tokens_text(mc.tokens).c_str(), mc.capped ? " or more" : "",
              mc.binding_text().c_str());
  for (const auto& n : mc.binding_notes) appendf(out, "  %-26s   at +%lld tokens: %s\n", "", static_cast<long long>(mc.step_tokens), n.c_str());
  if (mc.plan)
    appendf(out, "  %-26s   %s; step %s, peak %s\n", "", planner::describe_knobs(mc.plan->config, r.scenario.model).c_str(),
                format_duration_s(mc.plan->summary.step_s).c_str(), format_bytes(mc.plan->summary.peak_device_bytes).c_str());
}

void print_baselines(std::string& out, const std::vector<Baseline>& bs, const Candidate& chosen) {
  appendf(out, "\nStandard training at this context (full sequence; the oomb plan above: %s, %s):\n",
              format_bytes(chosen.summary.peak_device_bytes).c_str(), format_duration_s(chosen.summary.step_s).c_str());
  for (const auto& b : bs) {
    if (!b.result) {
      appendf(out, "  %-62s nothing evaluated\n", b.label.c_str());
      continue;
    }
    const auto& k = *b.result;
    appendf(out, "  %-62s %s: peak %s, step %s%s\n", b.label.c_str(),
                b.fits ? "fits" : ("does not fit (" + std::string(to_string(k.usage.binding())) + ")").c_str(),
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

void print_comparison(std::string& out, const Comparison& cmp, const NodeGpus& node, const simulator::Scenario& s, int64_t context) {
  appendf(out, "\nMulti-GPU comparison: %lld x %s in one node (host %s), context %s\n", static_cast<long long>(node.gpus),
              s.gpu.id.c_str(), s.host.id.c_str(), format_tokens(context).c_str());
  appendf(out, "  %-52s %12s %12s %12s %14s %12s  %s\n", "layout", "mem per GPU", "host/node", "step", "tokens/s node",
              "GPU-h per 1B", "fits");
  for (const auto& p : cmp.rows) {
    appendf(out, "  %-52s %12s %12s %12s %14s %12s  %s\n", p.label.c_str(), format_bytes(p.device_bytes).c_str(),
                p.host_bytes > 0 ? format_bytes(p.host_bytes).c_str() : "-", format_duration_s(p.step_s).c_str(),
                format_count(p.tokens_per_s).c_str(),
                format_count(p.gpu_hours_per_billion_tokens).c_str(),
                p.fits ? ("yes (" + p.binding + ")").c_str() : ("NO: " + p.binding).c_str());
    for (const auto& n : p.notes) appendf(out, "  %-52s   %s\n", "", n.c_str());
  }
  for (const auto& n : cmp.notes) appendf(out, "  note: %s\n", n.c_str());
  appendf(out, "  (mem per GPU includes the runtime reserve; tokens/s and GPU-hours count every GPU of the layout; "
              "host memory is per node)\n");
}
std::optional<double> recall_at(const std::optional<RecallCurve>& curve, const step::Config& c) {
  if (!curve || c.attention != step::Attention::sparse || c.page_tokens != curve->page_tokens) return std::nullopt;
  return interpolate_recall(*curve, c.page_budget);
}

}  // namespace

PlanAnswer answer(const PlanQuery& query) {
  PlanAnswer ans;
  ans.query = query;
  PlanQuery& q = ans.query;
  Request& r = q.request;
  const int64_t N = q.context;
  // --min-recall: the curve + R become a minimum budget (and the curve's page size for sparse
  // candidates, since a budget counts pages).
  std::optional<RecallCurve>& curve = ans.curve;
  int64_t& recall_min_budget = ans.recall_min_budget;
  if (q.min_recall && q.recall_curve.empty())
    throw Error("--min-recall", "", "needs a measured budget-to-recall curve (--recall-curve FILE)",
                "oomb run --attention sparse --measure-recall --trace T.json at a few budgets, then oomb calibrate "
                "--recall T*.json --out curve.json");
  if (!q.recall_curve.empty()) curve = load_recall_curve(q.recall_curve);
  if (curve && curve->model != r.scenario.model.id && !q.recall_curve_any)
    throw Error("--recall-curve", q.recall_curve,
                "was measured on model " + curve->model + ", not on " + r.scenario.model.id +
                    " (attention of another model says little about this one's)",
                "a curve measured on " + r.scenario.model.id +
                    " (oomb run --attention sparse --measure-recall, then oomb calibrate --recall), or "
                    "--recall-curve-any to use it anyway");
  if (curve && q.min_recall) {
    const int64_t cp = curve->page_tokens;
    const bool page_fixed = r.fixed.count("page") > 0;
    if (page_fixed && r.scenario.config.page_tokens != cp)
      throw Error("--page", std::to_string(r.scenario.config.page_tokens),
                  q.recall_curve + " was measured with pages of " + std::to_string(cp) +
                      " tokens (a budget counts pages)",
                  "--page " + std::to_string(cp) + ", or a curve measured at this page size");
    if (!page_fixed && cp != 64 && cp != 128 && cp != 256)
      throw Error("--recall-curve", q.recall_curve,
                  "was measured with pages of " + std::to_string(cp) + " tokens; the planner searches 64, 128, 256",
                  "fix --page " + std::to_string(cp) + ", or measure at one of the searched page sizes");
    recall_min_budget = min_budget_for_recall(*curve, *q.min_recall, q.recall_curve);
    // In the curve's pages; a --min-budget (in its own pages) still holds when it attends more.
    const int64_t user_tokens = q.min_budget ? *q.min_budget * r.min_budget_page_tokens : 0;
    r.min_budget = std::max(recall_min_budget, ceil_div(user_tokens, cp));
    r.min_budget_page_tokens = cp;
    r.sparse_page = cp;
    if (r.fixed.count("budget") && r.scenario.config.page_budget < recall_min_budget)
      throw Error("--budget", std::to_string(r.scenario.config.page_budget),
                  "has interpolated mean recall below --min-recall in " + q.recall_curve,
                  "a budget of at least " + std::to_string(recall_min_budget) + " pages, or a lower --min-recall");
  }
  const auto& s0 = r.scenario;

  std::optional<Candidate>& chosen = ans.chosen;
  bool& sparse_fallback = ans.sparse_fallback;
  std::optional<Candidate>& sparse_hint = ans.sparse_hint;
  SearchResult& res = ans.search;
  std::optional<planner::Diagnosis>& diagnosis = ans.diagnosis;
  std::optional<MaxContext>& mc_dense = ans.max_dense;
  std::optional<MaxContext>& mc_sparse = ans.max_sparse;
  int64_t& context = ans.context;
  context = N;

  if (q.max_context) {
    planner::check_request(r, planner::kMaxContextCap);
    mc_dense = max_context(r, step::Attention::dense);
    if (s0.config.schedule == step::Schedule::oomb) mc_sparse = max_context(r, step::Attention::sparse);
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
    o.exhaustive = q.pareto;
    res = search(r, N, o);
    chosen = res.best;
    sparse_fallback = res.sparse_fallback;
    if (!res.best || res.sparse_fallback) diagnosis = diagnose(r, N, res);
    // Exact gradients were chosen by default: say what sparse attention would buy, when it is a lot.
    if (chosen && chosen->config.attention == step::Attention::dense && !r.fixed.count("attention") &&
        s0.config.schedule == step::Schedule::oomb) {
      planner::Request rs = r;
      rs.fixed.insert("attention");
      rs.scenario.config.attention = step::Attention::sparse;
      const SearchResult sparse = search(rs, N);
      if (sparse.best && sparse.best->summary.step_s < 0.5 * chosen->summary.step_s) sparse_hint = sparse.best;
    }
  }
  if (q.pareto && q.max_context && chosen) {
    planner::Request rp = r;
    rp.fixed.insert("attention");
    rp.scenario.config.attention = chosen->config.attention;
    planner::SearchOptions o;
    o.exhaustive = true;
    res = search(rp, context, o);
  } else if (q.max_context && chosen) {
    planner::Request rp = r;
    rp.fixed.insert("attention");
    rp.scenario.config.attention = chosen->config.attention;
    if (rp.objective == Objective::context) rp.objective = Objective::time;
    res = search(rp, context);
  }
  if (q.max_context && res.best) chosen = res.best;  // the same search max_context ended with
  ans.pareto = q.pareto ? pareto_frontier(res.feasible, res.best ? &*res.best : nullptr) : std::vector<Candidate>{};

  // A plan on paper (a setting the executor does not follow yet): also name the best one it runs.
  // A plan to be run: say what the settings on paper would give.
  std::optional<Candidate>& best_executable = ans.best_executable;
  std::optional<Candidate>& on_paper = ans.on_paper;
  if (chosen && r.executable_only && !q.max_context) {
    planner::Request rp = r;
    rp.executable_only = false;
    const SearchResult paper = search(rp, context);
    if (paper.best && !executable(s0.model, paper.best->config) &&
        paper.best->summary.step_s < chosen->summary.step_s * (1.0 - kTieTolerance))
      on_paper = paper.best;
  }
  if (chosen && !executable(s0.model, chosen->config)) {
    std::vector<Candidate> runnable;
    for (const auto& k : res.feasible)
      if (executable(s0.model, k.config)) runnable.push_back(k);
    if (const Candidate* b = select_best(runnable, r.objective, &s0.config)) best_executable = *b;
  }
  ans.warning = context_warning(s0.model, chosen ? chosen->config.context_tokens : N);

  ans.chosen_scenario = s0;
  if (chosen) {
    ans.chosen_scenario.config = chosen->config;
    ans.plan = make_plan(ans.chosen_scenario, chosen->summary, to_string(r.objective), r.headroom,
                         plan_notes(chosen->config, s0.model, sparse_fallback));
  }

  if (q.node.gpus > 1 && context > 0) ans.comparison = planner::compare_multi_gpu(r, q.node, chosen, context);
  if (chosen && s0.config.schedule == step::Schedule::oomb) ans.baselines = planner::baselines(r, context);
  if (s0.config.lora_rank > 0 && context > 0) {
    Request full = r;
    full.scenario.config.lora_rank = 0;
    full.scenario.config.lora_train_embeddings = false;
    for (const char* k : {"lora_rank", "lora_alpha", "lora_targets", "lora_train_embeddings"}) full.fixed.erase(k);
    const SearchResult f = planner::search(full, context);
    ans.full_finetune_fits = f.best.has_value();
    ans.full_finetune = f.best ? f.best : f.closest;
    if (chosen) {
      simulator::Scenario same = ans.chosen_scenario;
      same.config.lora_rank = 0;
      same.config.lora_train_embeddings = false;
      const simulator::Summary sum = simulator::evaluate(same);
      ans.full_finetune_same = Candidate{same.config, sum, usage_of(same, sum, r.headroom)};
    }
  }
  return ans;

}

Json PlanAnswer::to_json() const {
  const PlanQuery& q = query;
  const Request& r = q.request;
  const simulator::Scenario& s0 = r.scenario;
  const models::ModelSpec& m = s0.model;
  const NodeGpus& node = q.node;
  const SearchResult& res = search;
  const std::vector<Candidate>& front = pareto;
  const std::optional<MaxContext>& mc_dense = max_dense;
  const std::optional<MaxContext>& mc_sparse = max_sparse;
  const std::vector<Baseline>& standard = baselines;
  const simulator::Scenario& chosen_s = chosen_scenario;
  auto recall_of = [&](const step::Config& c) { return recall_at(curve, c); };
  Json out = Json::object();
  out["plan"] = plan ? plan->to_json() : Json(nullptr);
  out["node"] = {{"gpus", node.gpus}, {"tp", node.tp}, {"note", node.note}};
  out["multi_gpu"] = comparison ? comparison->to_json() : Json(nullptr);
  out["baselines"] = Json::array();
  for (const auto& b : standard) {
    Json x = b.result ? candidate_brief(*b.result, m) : Json::object();
    x["label"] = b.label;
    x["fits"] = b.fits;
    out["baselines"].push_back(x);
  }
  out["prediction"] = chosen ? simulator::to_json(chosen->summary) : Json(nullptr);
  out["alternatives"] = Json::array();
  if (chosen)
    for (const auto& alt : res.alternatives) {
      Json j = candidate_brief(alt, m);
      j["difference"] = describe_difference(chosen->config, alt.config, s0.model);
      out["alternatives"].push_back(j);
    }
  out["diagnosis"] = diagnosis ? diagnosis->to_json() : Json(nullptr);
  out["sparse_fallback"] = sparse_fallback;
  if (full_finetune) {
    Json ff = candidate_brief(*full_finetune, m);
    ff["fits"] = full_finetune_fits;
    out["full_finetune"] = ff;
  }
  if (full_finetune_same) {
    Json ff = candidate_brief(*full_finetune_same, m);
    ff["fits"] = full_finetune_same->fits();
    out["full_finetune_same_settings"] = ff;
  }
  out["sparse_alternative"] = sparse_hint ? candidate_brief(*sparse_hint, m) : Json(nullptr);
  out["best_executable"] = best_executable ? candidate_brief(*best_executable, m) : Json(nullptr);
  out["on_paper"] = on_paper ? candidate_brief(*on_paper, m) : Json(nullptr);
  out["warnings"] = warning.empty() ? Json::array() : Json::array({warning});
  if (chosen) {
    std::string why;
    executable(m, chosen->config, &why);
    out["executable"] = {{"executable", why.empty()}, {"reason", why}};
    out["optimizer"] = {{"placement", step::to_string(chosen->config.optimizer)},
                        {"sharded", chosen->config.shard_optimizer},
                        {"bytes", optimizer_bytes(chosen_s)},
                        {"tier", chosen->config.optimizer == step::Optimizer::host ? "host"
                                 : chosen->config.optimizer == step::Optimizer::gpu ? "device"
                                                                                         : "none"}};
  }
  out["search"] = {{"evaluations", res.evaluations}, {"search_s", res.seconds}, {"fixed", r.fixed}};
  if (q.pareto) {
    out["pareto"] = Json::array();
    for (const auto& k : front) out["pareto"].push_back(candidate_brief(k, m));
  }
  if (q.max_context)
    out["max_context"] = {{"dense", mc_dense ? max_context_json(*mc_dense, m) : Json(nullptr)},
                          {"sparse", mc_sparse ? max_context_json(*mc_sparse, m) : Json(nullptr)}};
  if (curve) {
    const auto rc = chosen ? recall_of(chosen->config) : std::nullopt;
    out["recall"] = {{"curve", q.recall_curve},
                     {"model", curve->model},
                     {"min_recall", q.min_recall ? Json(*q.min_recall) : Json(nullptr)},
                     {"min_budget", q.min_recall ? Json(recall_min_budget) : Json(nullptr)},
                     {"mean_recall", rc ? Json(*rc) : Json(nullptr)},
                     {"measured_context_tokens", curve->context_tokens},
                     {"measured_chunk_tokens", curve->chunk_tokens},
                     {"page_tokens", curve->page_tokens},
                     {"context_ratio", context > 0 ? static_cast<double>(context) / static_cast<double>(curve->context_tokens) : 0.0},
                     {"note", curve_context_text(*curve, context)}};
  }
  return out;
}

std::string PlanAnswer::describe() const {
  const PlanQuery& q = query;
  const Request& r = q.request;
  const simulator::Scenario& s0 = r.scenario;
  const NodeGpus& node = q.node;
  const SearchResult& res = search;
  const std::optional<MaxContext>& mc_dense = max_dense;
  const std::optional<MaxContext>& mc_sparse = max_sparse;
  const std::vector<Baseline>& standard = baselines;
  const int64_t N = q.context;
  auto recall_of = [&](const step::Config& c) { return recall_at(curve, c); };
  std::string out;
  std::string fixed_text;
  for (const auto& k : r.fixed) fixed_text += (fixed_text.empty() ? "" : ", ") + k;
  if (q.max_context) {
    appendf(out, "oomb plan: largest context for %s on %s (host %s), headroom %s\n", s0.model.id.c_str(), s0.gpu.id.c_str(),
                s0.host.id.c_str(), format_percent(r.headroom).c_str());
    std::string limits;
    if (r.max_step_s > 0) limits += "step time <= " + format_duration_s(r.max_step_s);
    if (r.min_tokens_per_s > 0)
      limits += (limits.empty() ? "" : ", ") + std::string(">= ") + format_count(r.min_tokens_per_s) + " tokens/s";
    appendf(out, "  speed limits: %s\n", limits.empty() ? "none (give --max-step-time, e.g. 1h, for a useful answer)"
                                                        : limits.c_str());
    print_max_context(out, *mc_dense, r);
    if (mc_sparse) print_max_context(out, *mc_sparse, r);
    if (!chosen) {
      appendf(out, "\nNothing fits on this hardware.\n");
      return out;
    }
    appendf(out, "\nPlan at %s:\n", tokens_text(context).c_str());
  } else {
    appendf(out, "oomb plan: %s on %s (host %s), context %s, objective %s\n", s0.model.id.c_str(), s0.gpu.id.c_str(),
                s0.host.id.c_str(), tokens_text(N).c_str(), to_string(r.objective));
  }
  if (!warning.empty()) appendf(out, "  WARNING: %s\n", warning.c_str());
  if (!node.note.empty()) appendf(out, "  note: %s\n", node.note.c_str());
  appendf(out, "  searched %lld configurations in %s; fixed by you: %s\n", static_cast<long long>(res.evaluations),
              format_duration_s(res.seconds).c_str(), fixed_text.empty() ? "nothing" : fixed_text.c_str());
  if (!chosen) {
    appendf(out, "\nNO PLAN FITS.\n");
    if (diagnosis) print_diagnosis(out, *diagnosis);
    if (comparison) print_comparison(out, *comparison, node, s0, context);
    return out;
  }
  appendf(out, "\n");
  print_settings(out, chosen_scenario);
  if (curve) {
    const auto rc = recall_of(chosen->config);
    std::string line = "  recall       ";
    if (rc) line += "mean " + std::to_string(*rc).substr(0, 6) + " of the dense attention mass at budget " +
                    std::to_string(chosen->config.page_budget);
    else if (chosen->config.attention == step::Attention::dense) line += "1 (dense attention)";
    else line += "not measured at this budget/page";
    if (q.min_recall)
      line += " (--min-recall " + std::to_string(*q.min_recall).substr(0, 6) + ": budgets >= " +
              std::to_string(recall_min_budget) + " pages of " + std::to_string(curve->page_tokens) + " = " +
              format_tokens(recall_min_budget * curve->page_tokens) + " attended tokens)";
    appendf(out, "%s; curve %s (model %s)\n", line.c_str(), q.recall_curve.c_str(), curve->model.c_str());
    appendf(out, "  %s\n", curve_context_text(*curve, context).c_str());
    if (curve->model != s0.model.id)
      appendf(out, "  WARNING: the recall curve was measured on %s, not on %s (used because of --recall-curve-any)\n",
                  curve->model.c_str(), s0.model.id.c_str());
  }
  print_memory(out, chosen_scenario, *chosen, r.headroom);
  print_time(out, *chosen);
  if (s0.model.moe.present()) {
    // What the experts' figures assume (docs/model.md "Layer kinds and experts").
    const step::Config& c = chosen->config;
    const int64_t rows = std::min(c.chunk_tokens, c.context_tokens) * s0.model.moe.experts_per_token / s0.model.moe.experts;
    const models::Efficiency& e = s0.gpu.efficiency;
    appendf(out,
            "Experts: packed dispatch (the peak holds for any routing); time assumes balanced routing, each expert's "
            "GEMMs %lld rows a chunk, priced at efficiency.expert_gemm %.3f (%s)\n",
            static_cast<long long>(rows), e.expert_gemm,
            e.expert_gemm != e.gemm ? "measured on expert shapes by oomb calibrate"
                                    : "the profile's large-GEMM figure: not measured at that size; oomb calibrate "
                                      "--backend ... --model <a MoE model> measures it");
  }
  print_allocation(out, *plan);
  print_alternatives(out, *chosen, res.alternatives, s0.model);
  if (on_paper) {
    std::string why;
    executable(s0.model, on_paper->config, &why);
    appendf(out, "\nOn paper (not written: the executor does not run it): %s; step %s (%s), peak %s\n",
                describe_difference(chosen->config, on_paper->config, s0.model).c_str(),
                format_duration_s(on_paper->summary.step_s).c_str(),
                format_signed_percent(on_paper->summary.step_s / chosen->summary.step_s - 1.0).c_str(),
                format_bytes(on_paper->summary.peak_device_bytes).c_str());
  }
  if (best_executable)
    appendf(out, "\nBest executable plan (what `oomb run` can follow today): %s; step %s (%s), peak %s\n",
                describe_difference(chosen->config, best_executable->config, s0.model).c_str(),
                format_duration_s(best_executable->summary.step_s).c_str(),
                format_signed_percent(best_executable->summary.step_s / chosen->summary.step_s - 1.0).c_str(),
                format_bytes(best_executable->summary.peak_device_bytes).c_str());
  if (sparse_hint)
    appendf(out, "\nSparse attention would be %.0fx faster: %s (page size %lld tokens), step %s, %s tokens/s, peak %s "
                "(approximate gradients; add --allow-sparse to plan it)\n",
                chosen->summary.step_s / sparse_hint->summary.step_s, step::budget_text(sparse_hint->config).c_str(),
                static_cast<long long>(sparse_hint->config.page_tokens),
                format_duration_s(sparse_hint->summary.step_s).c_str(),
                format_count(sparse_hint->summary.tokens_per_s).c_str(),
                format_bytes(sparse_hint->summary.peak_device_bytes).c_str());
  if (!standard.empty()) print_baselines(out, standard, *chosen);
  if (full_finetune_same) {
    const Candidate& f = *full_finetune_same;
    appendf(out,
            "\nFull fine-tuning (every parameter trained, AdamW on all), these settings: %s: peak %s, step %s (LoRA saves "
            "%s and %s of the step)\n",
            f.fits() ? "fits" : ("does not fit (" + std::string(to_string(f.usage.binding())) + ")").c_str(),
            format_bytes(f.summary.peak_device_bytes).c_str(), format_duration_s(f.summary.step_s).c_str(),
            format_bytes(f.summary.peak_device_bytes - chosen->summary.peak_device_bytes).c_str(),
            format_percent(1.0 - chosen->summary.step_s / f.summary.step_s).c_str());
  }
  if (full_finetune) {
    const Candidate& f = *full_finetune;
    std::string tail = full_finetune_fits ? "" : " (closest)";
    if (full_finetune_fits && f.config.attention == step::Attention::sparse && chosen->config.attention == step::Attention::dense)
      tail = " with sparse attention (approximate gradients: no dense full fine-tuning fits)";
    appendf(out, "Full fine-tuning, its best plan: %s: peak %s, step %s%s; %s\n",
            full_finetune_fits ? "fits" : ("does not fit (" + std::string(to_string(f.usage.binding())) + ")").c_str(),
            format_bytes(f.summary.peak_device_bytes).c_str(), format_duration_s(f.summary.step_s).c_str(), tail.c_str(),
            describe_knobs(f.config, s0.model).c_str());
  }
  if (q.pareto) print_pareto(out, pareto, s0.model);
  if (diagnosis) print_diagnosis(out, *diagnosis);
  if (comparison) print_comparison(out, *comparison, node, s0, context);
  print_notes(out, plan->notes);
  return out;
}

}  // namespace oomb::planner
