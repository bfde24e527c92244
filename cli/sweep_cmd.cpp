// oomb sweep: one row per context for oomb dense, oomb sparse and the two standard-training
// baselines (the best standard configuration and the published, unfused one).
//
// With no knob fixed (or with --plan-each) every oomb cell and the best-standard cell is the
// planner's best plan at that context, so a row answers what `oomb plan` would; with knobs fixed
// (and no --plan-each) the oomb cells evaluate the flags' configuration as given.
#include <cstdio>
#include <optional>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "step/buffers.h"
#include "core/units.h"
#include "planner/defaults.h"
#include "planner/executable.h"
#include "planner/search.h"

namespace oomb::cli {
namespace {

struct SweepArgs {
  ScenarioFlags flags;
  std::string contexts = "8K..4M";
  bool csv = false, json = false, plan_each = false;
};

struct Cell {
  step::Config config;
  simulator::Summary summary;
  bool fits = false;      // within device, pinned and host limits (the planner's test)
  bool planned = false;   // chosen by the planner (else evaluated as given)
  simulator::Binding binding = simulator::Binding::compute;  // what binds: the failed limit when it does not fit
};

Cell evaluated(const simulator::Scenario& s) {
  Cell c;
  c.config = s.config;
  c.summary = simulator::evaluate(s);
  const planner::Usage u = planner::usage_of(s, c.summary, planner::kDefaultHeadroom);
  c.fits = c.summary.feasible && u.fits();
  c.binding = c.fits || u.fits() ? c.summary.binding : u.binding();
  return c;
}

// The planner's best plan for `r` at `n`; when nothing fits, the closest miss (for its numbers).
Cell planned(planner::Request r, int64_t n) {
  const planner::SearchResult res = planner::search(r, n);
  Cell c;
  c.planned = true;
  const auto& k = res.best ? res.best : res.closest;
  if (!k) {
    simulator::Scenario s = r.scenario;
    s.config.context_tokens = n;
    Cell e = evaluated(s);
    e.planned = true;
    return e;
  }
  c.config = k->config;
  c.summary = k->summary;
  c.fits = res.best.has_value() && !res.sparse_fallback;
  c.binding = c.fits ? c.summary.binding : k->usage.binding();
  return c;
}

std::string knobs_text(const std::set<std::string>& fixed) {
  std::string s;
  for (const auto& k : fixed) s += (s.empty() ? "" : ", ") + k;
  return s;
}

int run_sweep(const SweepArgs& a) {
  using namespace simulator;
  const std::vector<int64_t> contexts = parse_token_list(a.contexts, "--contexts");
  bounded_list(contexts.size(), "--contexts", "contexts", kMaxSweepContexts);
  const Scenario base = a.flags.resolve();
  // Every row is checked before the first is printed: a bad range fails whole, naming --contexts.
  for (int64_t n : contexts) {
    step::Config c = base.config;
    c.context_tokens = n;
    try {
      validate(c, base.model);
    } catch (const Error& e) {
      if (e.where() != "--context") throw;
      throw Error("--contexts", a.contexts, "context " + std::to_string(n) + " " + e.problem(), e.hint());
    }
  }
  const std::set<std::string> fixed = a.flags.explicit_knobs();
  const bool plan_each = a.plan_each || (fixed.empty() && a.flags.preset.empty());
  if (fixed.count("schedule") || fixed.count("attention"))
    throw Error(fixed.count("schedule") ? "--schedule" : "--attention", "", "is what the sweep's columns vary",
                "drop it: the columns are oomb dense, oomb sparse and the two standard baselines");
  planner::Request req;
  req.scenario = base;
  req.fixed = fixed;
  req.fixed.insert("attention");
  req.fixed.insert("schedule");
  req.optimizer_auto = a.flags.optimizer_auto();
  auto place = [&](Scenario s) {
    if (req.optimizer_auto) s.config.optimizer = planner::place_optimizer(s, planner::kDefaultHeadroom);
    return s;
  };
  struct Variant {
    const char* name;
    const char* label;
  };
  const Variant variants[] = {{"oomb-dense", "oomb dense"},
                              {"oomb-sparse", "oomb sparse"},
                              {"standard-best", "standard, best"},
                              {"standard-published", "standard, published"}};
  auto cell_of = [&](int v, int64_t n) {
    Scenario s = base;
    s.config.context_tokens = n;
    planner::Request r = req;
    switch (v) {
      case 0:
      case 1:
        s.config.schedule = step::Schedule::oomb;
        s.config.attention = v == 0 ? step::Attention::dense : step::Attention::sparse;
        if (plan_each) {
          r.scenario.config = s.config;
          return planned(r, n);
        }
        return evaluated(place(s));
      case 2:
        // The strongest standard baseline: fused chunked loss, checkpointing searched, dtypes and
        // optimizer placement as the planner finds fastest (the user's fixed knobs kept).
        s.config.schedule = step::Schedule::standard;
        s.config.attention = step::Attention::dense;
        r.scenario.config = s.config;
        return planned(r, n);
      default:
        // The published baseline: full-sequence unfused logits, checkpointing on.
        s.config.schedule = step::Schedule::standard;
        s.config.attention = step::Attention::dense;
        s.config.logits_chunk_tokens = 0;
        s.config.checkpointing = true;
        s.config.kept_layers = 0;
        return evaluated(place(s));
    }
  };
  const bool tp = base.config.gpus > 1;
  const std::string per = tp ? " per GPU" : "";
  Json rows = Json::array();
  if (a.csv) {
    std::printf("context_tokens,variant,planned,peak_device_bytes,peak_host_bytes,step_s,tokens_per_s,exposed_copy_s,"
                "fits,binding_constraint\n");
  } else if (!a.json) {
    std::printf("%s on %s (host %s)%s\n", base.model.id.c_str(), base.gpu.id.c_str(), base.host.id.c_str(),
                tp ? (", " + std::to_string(base.config.gpus) + " GPUs (tensor parallel, on paper)").c_str() : "");
    if (plan_each)
      std::printf("each oomb and standard-best cell is the planner's best plan at that context (as `oomb plan`); "
                  "fixed by you: %s\n",
                  fixed.empty() ? "nothing" : knobs_text(fixed).c_str());
    else
      std::printf("oomb cells evaluate your settings as given (fixed by you: %s; add --plan-each to plan the others "
                  "per context); standard-best is planned\n",
                  fixed.empty() ? (std::string("preset ") + a.flags.preset).c_str() : knobs_text(fixed).c_str());
    std::printf("standard, best = fused chunked loss, checkpointing searched, whichever is fastest and fits; "
                "standard, published = full-sequence unfused logits, checkpointing on\n");
    std::printf("device memory%s, step time%s\n", per.c_str(),
                tp ? " (all GPUs together); host memory is per node" : "");
    std::printf("%9s | %-30s | %-30s | %-30s | %-30s\n", "context", "oomb dense", "oomb sparse", "standard, best",
                "standard, published");
  }
  for (int64_t n : contexts) {
    if (!a.csv && !a.json) std::printf("%9s", format_tokens(n).c_str());
    for (int v = 0; v < 4; ++v) {
      const Cell c = cell_of(v, n);
      const Summary& sum = c.summary;
      if (a.csv) {
        std::printf("%lld,%s,%s,%lld,%lld,%.6g,%.6g,%.6g,%s,%s\n", static_cast<long long>(n), variants[v].name,
                    c.planned ? "true" : "false", static_cast<long long>(sum.peak_device_bytes),
                    static_cast<long long>(oomb::step::node_host_bytes(sum.peak_host_bytes, c.config)), sum.step_s, sum.tokens_per_s, sum.exposed_copy_s,
                    c.fits ? "true" : "false", to_string(c.binding));
      } else if (a.json) {
        Json j = to_json(sum);
        j["context_tokens"] = n;
        j["variant"] = variants[v].name;
        j["planned"] = c.planned;
        j["fits"] = c.fits;
        j["executable"] = planner::executable(base.model, c.config);
        j["config"] = c.config.to_json();
        j["device_figures"] = tp ? "per GPU" : "one GPU";
        j["host_figures"] = tp ? "per node" : "one GPU's host";
        j["peak_host_bytes"] = oomb::step::node_host_bytes(sum.peak_host_bytes, c.config);  // the rows are per rank
        rows.push_back(j);
      } else {
        const bool paper = !planner::executable(base.model, c.config);
        const char* verdict = c.fits ? (paper ? "fits*" : "fits") : c.binding == simulator::Binding::device_memory ? "OOM " : "host!";
        char cell[64];
        std::snprintf(cell, sizeof cell, "%10s %10s %s", format_bytes(sum.peak_device_bytes).c_str(),
                      format_duration_s(sum.step_s).c_str(), verdict);
        std::printf(" | %-30s", cell);
      }
    }
    if (!a.csv && !a.json) std::printf("\n");
  }
  if (a.json) std::printf("%s\n", rows.dump(2).c_str());
  if (!a.csv && !a.json)
    std::printf("fits = within device and host limits (5%% headroom); OOM = device memory exceeded; host! = host memory "
                "exceeded (a planned cell that does not fit shows its closest miss); * = on paper: the executor does not "
                "run it (the standard baselines: the executor runs the oomb schedule)\n");
  return 0;
}

const Registrar reg("sweep",
                    "Memory and step time versus context for oomb dense, oomb sparse and the standard baselines",
                    [](CLI::App& sub) {
                      auto a = std::make_shared<SweepArgs>();
                      a->flags.training_defaults = true;
                      a->flags.add_to(sub, false);
                      sub.add_option("--contexts", a->contexts,
                                     "Contexts: LOW..HIGH (doubling, e.g. 8K..4M) or a list (8K,100000,1M); at most 256 (each is a "
                                     "plan search)")
                          ->capture_default_str();
                      sub.add_flag("--plan-each", a->plan_each,
                                   "Plan every cell (the default when no knob is fixed); knobs you give stay fixed");
                      sub.add_flag("--csv", a->csv, "CSV output");
                      sub.add_flag("--json", a->json, "JSON output (one simulation summary per cell, with its config)");
                      sub.footer("Example: oomb sweep --model qwen2.5-7b --gpu h200 --contexts 8K..4M");
                      return [a] { return run_sweep(*a); };
                    });

}  // namespace
}  // namespace oomb::cli
