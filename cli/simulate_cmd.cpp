// oomb simulate: predict memory, time and transfers of one configuration.
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cli/command.h"
#include "cli/report.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "step/describe.h"
#include "step/buffers.h"
#include "planner/defaults.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "view/report.h"
#include "core/files.h"

namespace oomb::cli {
namespace {

struct SimulateArgs {
  ScenarioFlags flags;
  std::string plan;  // simulate exactly what a plan predicted
  std::string timeline, chrome, report, detail = "layer";
  CLI::Option* detail_opt = nullptr;  // to tell an explicit --detail from the default
  bool json = false;
};

// The facts at the top of the HTML report: what was simulated, with every knob that shapes it.
std::vector<std::pair<std::string, std::string>> report_facts(const simulator::Scenario& s, const simulator::Summary& sum,
                                                              traces::Detail detail) {
  using namespace simulator;
  const step::Config& c = s.config;
  std::vector<std::pair<std::string, std::string>> f = {
      {"model", s.model.id + " (" + std::to_string(step::effective_layers(c, s.model)) + " layers)"},
      {"gpu", s.gpu.id + " (" + format_bytes(s.gpu.hbm_capacity_bytes) + " HBM)"},
      {"host", s.host.id + " (" + format_bytes(s.host.pinnable_bytes) + " pinnable)"},
      {"context", format_tokens(c.context_tokens) + " tokens"},
  };
  // The configuration in step/describe.h's words, as plan and simulate print it.
  for (const step::ConfigFact& k : step::describe(c, s.model)) f.emplace_back(k.knob, k.text);
  if (c.gpus > 1) f.emplace_back("figures", "per rank");
  if (c.data_parallel > 1)
    f.emplace_back("data-parallel traffic",
                   std::string("per-rank figures; ") +
                       (c.shard_optimizer ? "gradient reduce-scatter and weight all-gather " : "gradient all-reduce ") +
                       (sum.allreduce_bytes > 0
                            ? format_bytes(sum.allreduce_bytes) + " per rank, " + format_duration_s(sum.allreduce_s) +
                                  " per step (ring, in the step)"
                            : std::string("none (no optimizer step)")));
  // The phase holding the device peak and what is alive there (docs/model.md).
  std::string at_peak;
  for (const auto& [category, bytes] : sum.device_breakdown_bytes)
    if (bytes > 0) at_peak += (at_peak.empty() ? "" : ", ") + category + " " + format_bytes(bytes);
  f.emplace_back("peak phase", sum.peak_phase + " (" + format_bytes(sum.peak_device_bytes) + ": " + at_peak + ")");
  f.emplace_back("tokens/s", format_count(sum.tokens_per_s));
  f.emplace_back("verdict", std::string(sum.feasible ? "fits" : "does not fit") + "; binding: " + to_string(sum.binding));
  f.emplace_back("timeline detail", traces::to_string(detail));
  return f;
}

// The summary terms, predicted only (no measurement to judge them against).
std::vector<view::ReportTerm> report_terms(const simulator::Scenario& s, const simulator::Summary& sum) {
  auto term = [](std::string name, double v, std::string unit, std::string note) {
    view::ReportTerm t;
    t.name = std::move(name);
    t.predicted = v;
    t.unit = std::move(unit);
    t.note = std::move(note);
    return t;
  };
  auto d = [](int64_t v) { return static_cast<double>(v); };
  auto share = [](double part, double whole) { return format_percent(whole > 0 ? part / whole : 0); };
  std::vector<view::ReportTerm> terms;
  terms.push_back(term("peak_device_bytes", d(sum.peak_device_bytes), "bytes",
                       share(d(sum.peak_device_bytes), d(s.gpu.hbm_capacity_bytes)) + " of " +
                           format_bytes(s.gpu.hbm_capacity_bytes) + " HBM, in phase " + sum.peak_phase));
  terms.push_back(term("peak_host_bytes", d(sum.peak_host_bytes), "bytes",
                       share(d(sum.peak_host_bytes), d(s.host.pinnable_bytes)) + " of " +
                           format_bytes(s.host.pinnable_bytes) + " pinnable"));
  auto link = [](double need, double have) {
    return std::isfinite(need) ? "hidden at " + format_rate_bytes_per_s(need) + " (have " + format_rate_bytes_per_s(have) + ")"
                               : std::string("link too slow to hide");
  };
  terms.push_back(term("h2d_bytes", d(sum.h2d_bytes), "bytes", link(sum.required_h2d_bytes_per_s, s.gpu.h2d_bytes_per_s)));
  terms.push_back(term("d2h_bytes", d(sum.d2h_bytes), "bytes", link(sum.required_d2h_bytes_per_s, s.gpu.d2h_bytes_per_s)));
  terms.push_back(term("step_s", sum.step_s, "s", "compute " + format_duration_s(sum.compute_s)));
  terms.push_back(term("exposed_copy_s", sum.exposed_copy_s, "s", share(sum.exposed_copy_s, sum.step_s) + " of the step"));
  terms.push_back(term("device_pool_pages", d(sum.device_pool_pages), "pages",
                       std::to_string(sum.kv_pool_pages) + " KV + " + std::to_string(sum.grad_pool_pages) + " gradient"));
  return terms;
}

// The scenario: a plan's (every knob fixed by it) or the flags' with the training defaults, the
// optimizer placed as --optimizer auto would be.
simulator::Scenario scenario_of(const SimulateArgs& a, std::string* placed) {
  using namespace simulator;
  if (!a.plan.empty()) {
    if (!a.flags.context.empty() || !a.flags.explicit_knobs().empty() || !a.flags.preset.empty() || a.flags.layers ||
        a.flags.gpus)
      throw Error("--plan", a.plan, "a plan fixes the context and every knob",
                  "drop --context/--preset/knob flags, or simulate without --plan");
    return planner::load_plan(a.plan).scenario();
  }
  if (a.flags.context.empty()) throw Error("--context", "", "is required (or give --plan)", "e.g. 4M");
  Scenario s = a.flags.resolve();
  // A budget over the context's pages selects every earlier page: oomb plan refuses it, and so
  // does simulate (it would be sparse attention priced as dense under another name).
  const step::Config& c = s.config;
  if (a.flags.budget && c.attention == step::Attention::sparse && c.schedule != step::Schedule::standard && c.page_tokens > 0)
    planner::check_budget_within_context(c.page_budget, c.context_tokens, c.page_tokens);
  if (a.flags.optimizer_auto()) {
    s.config.optimizer = planner::place_optimizer(s, planner::kDefaultHeadroom);
    *placed = std::string("--optimizer auto: AdamW state on the ") +
              (s.config.optimizer == step::Optimizer::gpu ? "GPU" : "host") + " (" + planner::optimizer_text(s) + ")";
  }
  return s;
}

int run_simulate(const SimulateArgs& a) {
  using namespace simulator;
  std::string placed;
  const Scenario s = scenario_of(a, &placed);
  const std::string warning = planner::context_warning(s.model, s.config.context_tokens);
  if (!warning.empty()) std::fprintf(stderr, "oomb simulate: warning: %s\n", warning.c_str());
  const traces::Detail detail = traces::detail_from_string(a.detail, "--detail");
  const bool want_events = !a.timeline.empty() || !a.chrome.empty();
  // Every output is checked before any work: a bad --report must not cost (or leave) a timeline.
  check_writable(a.timeline, "--timeline");
  check_writable(a.chrome, "--chrome");
  check_writable(a.report, "--report");
  {
    std::vector<FlagPath> in = scenario_inputs(a.flags.model, a.flags.gpu, a.flags.host);
    in.push_back({"--plan", a.plan});
    check_distinct_paths(in, {{"--timeline", a.timeline}, {"--chrome", a.chrome}, {"--report", a.report}});
  }
  if (want_events || !a.report.empty())
    check_event_simulation_size(s, !a.timeline.empty() ? "--timeline" : !a.chrome.empty() ? "--chrome" : "--report", "",
                                "a larger --chunk, fewer --layers or a shorter --context; the summary without "
                                "--timeline/--chrome/--report has no such limit");
  // The report defaults to chunk detail: the timeline window then holds a handful of bars.
  const bool detail_given = a.detail_opt != nullptr && a.detail_opt->count() > 0;
  const traces::Detail report_detail = detail_given ? detail : traces::Detail::chunk;
  Summary sum;
  std::optional<EventResult> events;
  if (want_events) {
    events = simulate_events(s, detail);
    events->trace.metadata.command = "oomb simulate";
    if (!a.timeline.empty()) traces::write_trace(events->trace, a.timeline);
    if (!a.chrome.empty()) traces::write_chrome_trace(events->trace, a.chrome);
    sum = events->summary;
  }
  if (!a.report.empty()) {
    std::optional<EventResult> own;
    if (!events || detail != report_detail) {
      own = simulate_events(s, report_detail);
      own->trace.metadata.command = "oomb simulate";
    }
    const EventResult& r = own ? *own : *events;
    view::ReportInput in;
    in.title = "oomb simulate: " + s.model.id + " on " + s.gpu.id + ", " + format_tokens(s.config.context_tokens) +
               " tokens";
    in.facts = report_facts(s, r.summary, report_detail);
    in.predicted = &r.trace;
    in.terms = report_terms(s, r.summary);
    write_text_file(a.report, view::html_report(in));  // atomic: a bad path leaves nothing behind
    if (!events) sum = r.summary;
  } else if (!events) {
    sum = evaluate(s);
  }
  if (a.json) {
    std::printf("%s\n", to_json(sum).dump(2).c_str());
    if (!a.report.empty()) std::fprintf(stderr, "report (HTML): %s\n", a.report.c_str());  // stdout stays pure JSON
  } else {
    print_scenario_header(s);
    if (!a.plan.empty()) std::printf("  (from plan %s)\n", a.plan.c_str());
    if (!placed.empty()) std::printf("  %s\n", placed.c_str());
    if (a.plan.empty() && a.flags.preset.empty()) {
      // Knobs left to simulate's fixed defaults are not what `oomb plan` would choose: say so.
      const std::set<std::string> given = a.flags.explicit_knobs();
      std::string left;
      for (const auto& [key, text] : std::vector<std::pair<std::string, std::string>>{
               {"schedule", "schedule"}, {"attention", "attention"}, {"chunk", "chunk"}, {"page", "page"},
               {"resident_layers", "resident layers"}, {"checkpointing", "checkpointing"}, {"kept_layers", "kept layers"},
               {"kv_grad_dtype", "KV-grad dtype"}})
        if (!given.count(key)) left += (left.empty() ? "" : ", ") + text;
      if (!left.empty())
        std::printf("  defaults, not a plan's choice: %s (oomb plan searches them; give a flag to fix one)\n",
                    left.c_str());
    }
    if (!warning.empty()) std::printf("  WARNING: %s\n", warning.c_str());
    if (s.config.gpus > 1)
      std::printf("  %lld GPUs: device and host figures are per GPU (rank); the node's host holds %lld ranks' host "
                  "tiers: %s\n",
                  static_cast<long long>(s.config.gpus), static_cast<long long>(s.config.gpus),
                  format_bytes(step::node_host_bytes(sum.peak_host_bytes, s.config)).c_str());
    print_memory_report(s, memory_table(s), sum);
    print_time_report(s, sum);
    if (!a.timeline.empty()) std::printf("\ntimeline (oomb.trace/1, %s detail): %s\n", a.detail.c_str(), a.timeline.c_str());
    if (!a.chrome.empty()) std::printf("chrome trace (open in ui.perfetto.dev): %s\n", a.chrome.c_str());
    if (!a.report.empty()) std::printf("report (HTML): %s\n", a.report.c_str());
  }
  return 0;
}

const Registrar reg("simulate", "Predict peak memory, step time and transfers of one configuration",
                    [](CLI::App& sub) {
                      auto a = std::make_shared<SimulateArgs>();
                      a->flags.training_defaults = true;
                      a->flags.add_to(sub, false);
                      sub.add_option("--plan", a->plan,
                                     "Simulate a plan (oomb.plan/1 from `oomb plan --out`): its specs and every knob; "
                                     "--json then prints exactly the plan's prediction");
                      sub.add_option("--timeline", a->timeline,
                                     "Write the event-level timeline (oomb.trace/1 JSON) to FILE");
                      sub.add_option("--chrome", a->chrome, "Write the timeline as a Chrome/Perfetto trace to FILE");
                      sub.add_option("--report", a->report,
                                     "Write a self-contained HTML report (memory over time, stream timeline, terms) to "
                                     "FILE; chunk detail unless --detail is given");
                      a->detail_opt = sub.add_option("--detail", a->detail,
                                                     "Timeline detail: step, chunk, layer (default), op")
                                          ->capture_default_str();
                      sub.add_flag("--json", a->json,
                                   "Print the simulation summary as JSON (peak_device_bytes, peak_host_bytes, step_s, "
                                   "tokens_per_s, h2d_bytes, d2h_bytes, exposed_copy_s, required_h2d_bytes_per_s, "
                                   "required_d2h_bytes_per_s, device_pool_pages, device_breakdown_bytes (at the peak phase), "
                                   "feasible, binding_constraint, peak_phase, ...)");
                      sub.footer(
                          "Defaults are plan's: --optimizer auto (AdamW, placed on the GPU if that fits and is "
                          "not slower, else on the host), fused 1K-token loss tiles; --preset oomb-published "
                          "keeps the published measurement setting (no optimizer, unfused loss).\n"
                          "Examples:\n"
                          "  oomb simulate --model qwen2.5-7b --gpu h200 --context 4M\n"
                          "  oomb plan --model qwen2.5-7b --gpu h200 --context 4M --out p.json && oomb simulate --plan p.json\n"
                          "  oomb simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 4M "
                          "--attention sparse\n"
                          "  oomb simulate --model llama-3.1-8b --gpu h100-sxm --context 128K --schedule standard\n"
                          "  oomb simulate --model qwen2.5-7b --gpu h200 --context 1M --timeline t.json --chrome t.perfetto.json\n"
                          "  oomb simulate --model qwen2.5-7b --gpu h200 --context 256K --report report.html");
                      return [a] { return run_simulate(*a); };
                    });

}  // namespace
}  // namespace oomb::cli
