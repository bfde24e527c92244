// oomb validate: a measured trace next to the prediction for the same plan, term by term.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <map>
#include <set>
#include <optional>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "planner/plan.h"
#include "validation/ranks.h"
#include "validation/validation.h"
#include "simulator/calibration.h"
#include "simulator/simulator.h"
#include "view/report.h"
#include "traces/trace.h"
#include "core/files.h"

namespace oomb::cli {
namespace {

struct ValidateArgs {
  std::string plan, trace, report, gpu = "h200";
  std::string measured;  // NAME=VALUE,...: numbers from outside (a PyTorch run, a paper) instead of a trace
  std::vector<std::string> tolerances;  // name=fraction
  bool json = false;
};

using validation::Validation;
using validation::ValidationTerm;

// NAME=FRACTION with nothing after the number ("0.3abc" is refused, not read as 0.3).
std::pair<std::string, double> parse_tolerance(const std::string& t) {
  const auto eq = t.find('=');
  if (eq == std::string::npos) throw Error("--tolerance", t, "expected NAME=FRACTION", "e.g. step_s=0.3");
  const std::string text = t.substr(eq + 1);
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size())
    throw Error("--tolerance", t, "the fraction is not a number", "e.g. step_s=0.3");
  if (!std::isfinite(v) || v < 0) throw Error("--tolerance", t, "must be a finite fraction >= 0");
  return {t.substr(0, eq), v};
}

// `oomb validate --plan p.json --measured step_s=...,peak_device_bytes=...`: the plan's prediction
// next to numbers measured outside oomb (torch.cuda.max_memory_allocated, a logged step time).
// The comparison table: the name column as wide as the longest term's, so long names
// (per-stage and per-buffer terms) do not push their row out of line.
void print_terms(const std::vector<validation::ValidationTerm>& terms) {
  int w = 18;
  for (const auto& t : terms) w = std::max(w, static_cast<int>(t.name.size()));
  auto fmt = [](const std::string& unit, double v) {
    if (unit == "bytes") return format_bytes(static_cast<int64_t>(std::llround(v)));
    if (unit == "s") return format_duration_s(v);
    return format_count(v);
  };
  std::printf("\n  %-*s %16s %16s %9s %9s\n", w, "term", "predicted", "measured", "error", "tolerance");
  for (const auto& t : terms) {
    const auto ok = t.ok();
    std::printf("  %-*s %16s %16s %9s %9s  %s%s%s\n", w, t.name.c_str(), fmt(t.unit, t.predicted).c_str(),
                t.measured ? fmt(t.unit, *t.measured).c_str() : "-",
                t.measured ? format_percent(t.error()).c_str() : "-",
                ((t.at_most ? "<= " : "") + format_percent(t.tolerance)).c_str(),
                !ok ? (t.measured ? "info" : "n/a") : *ok ? "ok" : "FAIL", t.note.empty() ? "" : "  ", t.note.c_str());
  }
}

int run_validate_measured(const ValidateArgs& a) {
  using namespace simulator;
  if (a.plan.empty())
    throw Error("--measured", a.measured, "compares a plan with outside numbers", "add --plan p.json (from `oomb plan --out`)");
  if (!a.report.empty()) throw Error("--report", a.report, "draws a measured trace", "drop --report with --measured");
  const planner::Plan plan = planner::load_plan(a.plan);
  const Scenario s = plan.scenario();
  const std::vector<std::string> keys = {"step_s", "tokens_per_s", "peak_device_bytes", "peak_host_bytes", "h2d_bytes",
                                         "d2h_bytes"};
  std::map<std::string, double> given;
  std::string rest = a.measured;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string name = item.substr(0, eq);
    std::string all;
    for (const auto& k : keys) all += (all.empty() ? "" : ", ") + k;
    if (eq == std::string::npos || name.empty())
      throw Error("--measured", item, "expected NAME=VALUE", "e.g. step_s=12.5,peak_device_bytes=61000000000");
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) throw Error("--measured", name, "unknown term", "one of " + all);
    if (given.count(name)) throw Error("--measured", name, "given twice");
    const std::string text = item.substr(eq + 1);
    size_t used = 0;
    double v = -1;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() || !std::isfinite(v) || v < 0 || (name.find("_s") != std::string::npos && v == 0))
      throw Error("--measured", item, "the value is not a " + std::string(name == "step_s" || name == "tokens_per_s" ? "positive" : "non-negative") + " number",
                  name == "step_s" ? "seconds, e.g. step_s=12.5" : name == "tokens_per_s" ? "e.g. tokens_per_s=5800" : "bytes, e.g. 61000000000");
    given[name] = v;
  }
  if (given.empty()) throw Error("--measured", "", "is empty", "e.g. step_s=12.5,peak_device_bytes=61000000000");
  std::vector<std::pair<std::string, double>> tols;
  for (const auto& t : a.tolerances) tols.push_back(parse_tolerance(t));
  const Validation res =
      validation::validate_numbers(s, std::vector<std::pair<std::string, double>>(given.begin(), given.end()), tols);
  const std::vector<ValidationTerm>& terms = res.terms;
  const bool all_ok = res.ok;
  if (a.json) {
    Json j = {{"ok", all_ok}, {"terms", Json::array()}};
    for (const auto& t : terms)
      j["terms"].push_back({{"name", t.name}, {"predicted", t.predicted}, {"measured", *t.measured}, {"error", t.error()},
                            {"tolerance", t.tolerance}, {"ok", *t.ok()}});
    std::printf("%s\n", j.dump(2).c_str());
    return all_ok ? 0 : 1;
  }
  std::printf("oomb validate: plan %s (%s on %s, %s tokens) against measured numbers\n", a.plan.c_str(),
              s.model.id.c_str(), s.gpu.id.c_str(), format_tokens(s.config.context_tokens).c_str());
  print_terms(terms);
  std::printf("\n%s\n", all_ok ? "OK: every measured term is within tolerance" : "FAILED: terms beyond tolerance (see above)");
  return all_ok ? 0 : 1;
}

int run_validate(const ValidateArgs& a) {
  using namespace simulator;
  bounded_list(a.tolerances.size(), "--tolerance", "terms");
  for (const auto& t : a.tolerances) parse_tolerance(t);  // flags before any work
  check_writable(a.report, "--report");
  check_distinct_paths({{"--plan", a.plan}, {"--trace", a.trace}, input_file("--gpu", a.gpu)}, {{"--report", a.report}});
  if (!a.measured.empty()) {
    if (!a.trace.empty()) throw Error("--measured", a.measured, "is instead of --trace", "give one of them");
    return run_validate_measured(a);
  }
  if (a.trace.empty()) throw Error("--trace", "", "is required (or --measured NAME=VALUE,...)", "a trace from `oomb run --trace`");
  const traces::Trace trace = traces::read_trace(a.trace);
  Scenario s;
  if (!a.plan.empty()) {
    s = planner::load_plan(a.plan).scenario();
  } else {
    // No plan: predict the configuration the trace records, on the --gpu profile.
    s = scenario_of_trace(trace, a.trace, models::load_gpu(a.gpu));
  }
  validation::ValidationRequest req;
  req.trace = &trace;
  req.trace_where = a.trace;
  req.scenario = s;
  req.plan_where = a.plan;
  for (const auto& t : a.tolerances) req.tolerances.push_back(parse_tolerance(t));
  const Validation res = validation::validate_run(req);
  std::vector<std::string> notes = res.notes;
  if (a.plan.empty()) notes.insert(notes.begin(), "no --plan: predictions for the configuration recorded in the trace, on " + a.gpu);
  const std::vector<ValidationTerm>& terms = res.terms;
  const simulator::EventResult& pred = res.prediction;

  // A multi-rank run given by rank 0's trace: every rank's trace is validated against the same
  // plan (each rank's rows are the plan's, sharded), and the step is the slowest rank's.
  const std::vector<validation::RankTrace> others = validation::read_other_rank_traces(a.trace, trace);
  std::vector<validation::RankVerdict> ranks;
  if (!others.empty()) ranks = validation::judge_ranks(req, &res, others);
  const int world = static_cast<int>(ranks.size());
  const validation::JobVerdict verdict = validation::job_verdict(res, ranks);
  const bool all_ok = verdict.ok, terms_failed = verdict.terms_failed;
  const std::vector<std::string>& missing = verdict.missing;
  const std::string missing_text = verdict.missing_text(), failure = verdict.failure;

  if (!a.report.empty()) {
    view::ReportInput in;
    in.title = "oomb validate: " + s.model.id + " on " + s.gpu.id + ", " + format_tokens(s.config.context_tokens) +
               " tokens";
    in.facts = {{"plan", a.plan}, {"trace", a.trace}, {"measured on", trace.metadata.device},
                {"verdict", all_ok ? "within tolerance"
                            : missing.empty() ? "OUT OF TOLERANCE"
                            : terms_failed ? "OUT OF TOLERANCE; ranks' traces missing: " + missing_text
                                           : "FAILED: ranks' traces missing: " + missing_text}};
    for (const auto& n : notes) in.facts.emplace_back("note", n);
    in.predicted = &pred.trace;
    in.measured = &trace;
    auto report_terms = [](const std::vector<ValidationTerm>& ts) {
      std::vector<view::ReportTerm> out;
      for (const auto& t : ts) out.push_back({t.name, t.predicted, t.measured, t.error(), t.tolerance, t.ok(), t.unit, t.note});
      return out;
    };
    in.terms = report_terms(terms);
    if (world > 1)
      in.facts.emplace_back("ranks", std::to_string(world) + " processes (the memory, timeline and terms are rank 0's; "
                                                             "every rank's terms follow them)");
    for (const auto& r : ranks) {
      view::ReportRank rr;
      rr.rank = r.rank;
      rr.trace = r.trace;
      rr.found = r.found;
      if (r.validation) {
        rr.ok = r.validation->ok;
        rr.terms = report_terms(r.validation->terms);
      }
      rr.note = r.error;
      rr.step_s = r.step_s;
      rr.peak_device_bytes = r.peak_device_bytes;
      for (const auto& f : r.collectives) rr.collectives.push_back({f.name, f.value, f.unit()});
      rr.binds = r.binds;
      in.ranks.push_back(std::move(rr));
    }
    write_text_file(a.report, view::html_report(in));
  }

  if (a.json) {
    Json j = {{"ok", all_ok}, {"terms", Json::array()}, {"notes", notes}};
    if (res.implied_selection_overlap) j["implied_selection_overlap"] = *res.implied_selection_overlap;
    for (const auto& t : terms) {
      Json row = {{"name", t.name}, {"predicted", t.predicted}, {"tolerance", t.tolerance}};
      row["measured"] = t.measured ? Json(*t.measured) : Json(nullptr);
      row["error"] = t.measured ? Json(t.error()) : Json(nullptr);
      row["ok"] = t.ok() ? Json(*t.ok()) : Json(nullptr);
      if (t.at_most) row["at_most"] = true;
      if (!t.note.empty()) row["note"] = t.note;
      j["terms"].push_back(row);
    }
    if (!ranks.empty()) {
      j["ranks"] = Json::array();
      for (const auto& r : ranks) {
        Json row = {{"rank", r.rank},
                    {"trace", r.trace},
                    {"found", r.found},
                    {"ok", r.ok()},
                    {"step_s", r.step_s ? Json(*r.step_s) : Json(nullptr)},
                    {"peak_device_bytes", r.peak_device_bytes ? Json(*r.peak_device_bytes) : Json(nullptr)},
                    {"binds", r.binds},
                    {"collectives", Json::object()}};
        for (const auto& f : r.collectives) row["collectives"][f.name] = f.value;
        if (r.validation) {
          row["failed_terms"] = Json::array();
          for (const auto& t : r.validation->terms)
            if (t.ok() == std::optional<bool>(false)) row["failed_terms"].push_back(t.name);
        }
        j["ranks"].push_back(row);
      }
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("oomb validate: plan %s, trace %s (%s)\n", a.plan.empty() ? "(from the trace)" : a.plan.c_str(), a.trace.c_str(), trace.metadata.device.c_str());
    for (const auto& n : notes) std::printf("  note: %s\n", n.c_str());
    print_terms(terms);
    if (!ranks.empty()) {
      // The other ranks' terms are validated the same way (run validate on a rank's trace for its rows).
      std::printf("\nranks (%d; the terms above are rank 0's, `oomb validate --trace` of a rank's trace prints its):\n",
                  world);
      for (const auto& r : ranks) {
        std::string figures;
        if (r.step_s) figures += ", step " + format_duration_s(*r.step_s);
        if (r.peak_device_bytes) figures += ", device peak " + format_bytes(*r.peak_device_bytes);
        if (const auto c = r.collective_s()) figures += ", collectives " + format_duration_s(*c);
        std::string failed;
        if (r.validation)
          for (const auto& t : r.validation->terms)
            if (t.ok() == std::optional<bool>(false)) failed += (failed.empty() ? " (beyond tolerance: " : ", ") + t.name;
        if (!failed.empty()) failed += ")";
        std::printf("  rank %d  %-40s %s%s%s%s\n", r.rank, r.trace.c_str(),
                    !r.found ? "MISSING (not validated)" : r.ok() ? "ok" : "FAILED", failed.c_str(), figures.c_str(),
                    r.binds ? "  <- binds" : "");
      }
      for (const auto& r : ranks)
        if (r.binds)
          std::printf("  the step binds on rank %d (the slowest measured step%s)\n", r.rank,
                      missing.empty() ? "" : " of the ranks found");
    }
    std::printf("\n%s\n", all_ok ? (ranks.empty() ? "OK: every comparable term is within tolerance"
                                                   : "OK: every comparable term of every rank is within tolerance")
                                 : ("FAILED: " + failure).c_str());
    if (!a.report.empty()) std::printf("report: %s\n", a.report.c_str());
  }
  return all_ok ? 0 : 1;
}

const Registrar reg(
    "validate", "Compare a measured trace with the prediction for its plan, term by term", [](CLI::App& sub) {
      auto a = std::make_shared<ValidateArgs>();
      sub.add_option("--plan", a->plan,
                     "The plan the run followed (oomb.plan/1, from `oomb plan --out`); without it the configuration "
                     "recorded in the trace is predicted on --gpu");
      sub.add_option("--gpu", a->gpu, "Device profile when no --plan is given")->capture_default_str();
      sub.add_option("--trace", a->trace,
                     "The measured trace (oomb.trace/1, from `oomb run --trace`). Rank 0's trace of a multi-rank "
                     "run (mpirun) validates every rank's beside it too (t.json, t.rank1.json, ...)");
      sub.add_option("--measured", a->measured,
                     "Instead of --trace: numbers measured outside oomb, NAME=VALUE,... of step_s, tokens_per_s, "
                     "peak_device_bytes, peak_host_bytes, h2d_bytes, d2h_bytes (compared with --plan's prediction)");
      sub.add_option("--tolerance", a->tolerances,
                     "Override a term's tolerance as NAME=FRACTION (repeatable). Defaults: pool pages, device pool "
                     "bytes and bytes per copy direction exact (0) in dense mode, 0.5 in sparse mode (selection-union "
                     "assumption); host pool bytes exact; peak_device_bytes 0.01 and the device breakdown at the peak (peak:CATEGORY) exact, peak_host_bytes 0.25; step_s and time:stage1/2 0.25 (time "
                     "is compared only when the plan's device profile is the kind of device that ran)");
      sub.add_option("--report", a->report,
                     "Also write a self-contained HTML report (memory and timelines; of a multi-rank run every rank's "
                     "file, verdict, step, peak, collectives and terms)");
      sub.add_flag("--json", a->json,
                   "Print {\"ok\": bool, \"terms\": [{name, predicted, measured, error, tolerance, ok}]}, and for rank "
                   "0's trace of a multi-rank run \"ranks\": [{rank, trace, found, ok, step_s, peak_device_bytes, "
                   "collectives, binds, failed_terms}]");
      sub.footer("Exit codes: 0 within tolerance, 1 a term beyond tolerance, 2 bad input.\n"
                 "Example:\n"
                 "  oomb plan --model tiny --gpu h200 --context 16K --resident-layers 1 --out p.json\n"
                 "  oomb run --plan p.json --trace t.json && oomb validate --plan p.json --trace t.json");
      return [a] { return run_validate(*a); };
    });

}  // namespace
}  // namespace oomb::cli
