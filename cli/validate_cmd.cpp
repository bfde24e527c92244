// oomb validate: a measured trace next to the prediction for the same plan, term by term.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <optional>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "planner/plan.h"
#include "simulator/calibration.h"
#include "simulator/simulator.h"
#include "traces/report.h"
#include "traces/trace.h"

namespace oomb::cli {
namespace {

struct ValidateArgs {
  std::string plan, trace, report, gpu = "h200";
  std::string measured;  // NAME=VALUE,...: numbers from outside (a PyTorch run, a paper) instead of a trace
  std::vector<std::string> tolerances;  // name=fraction
  bool json = false;
};

struct Term {
  std::string name, unit;
  double predicted = 0;
  std::optional<double> measured;  // empty: not comparable
  double tolerance = 0;
  std::string note;
  bool judged = true;  // false: shown for information only
  double error() const {
    if (!measured) return 0;
    if (predicted == 0) return *measured == 0 ? 0 : 1;
    return (*measured - predicted) / predicted;
  }
  std::optional<bool> ok() const {
    if (!measured || !judged) return std::nullopt;
    return std::fabs(error()) <= tolerance + 1e-12;
  }
};

// Default tolerances (fractions): memory and bytes that the schedule fixes are exact in dense
// mode; sparse copies depend on the selection-union assumption; whole-buffer peaks and times are
// model-level estimates.
constexpr double kExact = 0.0;
constexpr double kSparseCopies = 0.5;
constexpr double kPeakBytes = 0.01;      // device: the buffer table, predicted and allocated
constexpr double kPeakHostBytes = 0.25;
// Numbers measured outside oomb (--measured: a framework's allocator, a logged step): 25%.
constexpr double kOutsideBytes = 0.25;
constexpr double kTime = 0.25;

const Json& measured_block(const traces::Trace& t, const std::string& where) {
  if (!t.metadata.extra.is_object() || !t.metadata.extra.contains("measured") ||
      !t.metadata.extra["measured"].is_object())
    throw Error(where, "metadata.extra.measured", "missing", "a trace written by `oomb run --trace`");
  return t.metadata.extra["measured"];
}

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
int run_validate_measured(const ValidateArgs& a) {
  using namespace simulator;
  if (a.plan.empty())
    throw Error("--measured", a.measured, "compares a plan with outside numbers", "add --plan p.json (from `oomb plan --out`)");
  if (!a.report.empty()) throw Error("--report", a.report, "draws a measured trace", "drop --report with --measured");
  const planner::Plan plan = planner::load_plan(a.plan);
  const Scenario s = plan.scenario();
  const Summary pred = simulate_events(s, traces::Detail::step).summary;
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
  std::vector<Term> terms;
  auto add = [&](const std::string& name, const std::string& unit, double p, double tol, const std::string& note) {
    std::optional<double> m;
    if (given.count(name)) m = given[name];
    terms.push_back({name, unit, p, m, tol, note});
  };
  const std::string measure = to_string(s.config.peak_measure);
  add("step_s", "s", pred.step_s, kTime, "");
  add("tokens_per_s", "tokens/s", pred.tokens_per_s, kTime, "");
  add("peak_device_bytes", "bytes", static_cast<double>(pred.peak_device_bytes), kOutsideBytes,
      "as the plan counts its peak: " + measure +
          (s.config.peak_measure == PeakMeasure::allocated
               ? " (torch.cuda.max_memory_allocated)"
               : " (with the runtime reserve; torch.cuda.max_memory_allocated compares with --peak-measure allocated)"));
  add("peak_host_bytes", "bytes", static_cast<double>(pred.peak_host_bytes), kOutsideBytes, "");
  add("h2d_bytes", "bytes", static_cast<double>(pred.h2d_bytes), kOutsideBytes, "per step");
  add("d2h_bytes", "bytes", static_cast<double>(pred.d2h_bytes), kOutsideBytes, "per step");
  // Only what was given is shown.
  terms.erase(std::remove_if(terms.begin(), terms.end(), [](const Term& t) { return !t.measured; }), terms.end());
  for (const auto& t : a.tolerances) {
    const auto [name, v] = parse_tolerance(t);
    bool found = false;
    for (auto& term : terms)
      if (term.name == name) term.tolerance = v, found = true;
    if (!found) throw Error("--tolerance", name, "is not among the --measured terms");
  }
  bool all_ok = true;
  for (const auto& t : terms) all_ok &= t.ok().value_or(true);
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
  std::printf("\n  %-18s %16s %16s %9s %9s\n", "term", "predicted", "measured", "error", "tolerance");
  for (const auto& t : terms) {
    auto fmt = [&](double v) {
      return t.unit == "bytes" ? format_bytes(static_cast<int64_t>(std::llround(v)))
             : t.unit == "s"   ? format_duration_s(v)
                               : format_count(v);
    };
    std::printf("  %-18s %16s %16s %9s %9s  %s%s%s\n", t.name.c_str(), fmt(t.predicted).c_str(), fmt(*t.measured).c_str(),
                format_percent(t.error()).c_str(), format_percent(t.tolerance).c_str(), *t.ok() ? "ok" : "FAIL",
                t.note.empty() ? "" : "  ", t.note.c_str());
  }
  std::printf("\n%s\n", all_ok ? "OK: every measured term is within tolerance" : "FAILED: terms beyond tolerance (see above)");
  return all_ok ? 0 : 1;
}

int run_validate(const ValidateArgs& a) {
  using namespace simulator;
  for (const auto& t : a.tolerances) parse_tolerance(t);  // flags before any work
  check_writable(a.report, "--report");
  if (!a.measured.empty()) {
    if (!a.trace.empty()) throw Error("--measured", a.measured, "is instead of --trace", "give one of them");
    return run_validate_measured(a);
  }
  if (a.trace.empty()) throw Error("--trace", "", "is required (or --measured NAME=VALUE,...)", "a trace from `oomb run --trace`");
  const traces::Trace trace = traces::read_trace(a.trace);
  Scenario s;
  std::string config_where = a.trace, config_key = "metadata.extra.config.context_tokens";
  if (!a.plan.empty()) {
    s = planner::load_plan(a.plan).scenario();
    config_where = a.plan;
    config_key = "config.context_tokens";
  } else {
    // No plan: predict the configuration the trace records, on the --gpu profile.
    s = scenario_of_trace(trace, a.trace, models::load_gpu(a.gpu));
  }
  if (trace.metadata.source == "simulator")
    throw Error(a.trace, "metadata.source", "is a prediction, not a measurement", "give a trace from `oomb run --trace`");
  const Json& m = measured_block(trace, a.trace);
  JsonReader mr(m, a.trace + ": metadata.extra.measured");

  std::vector<std::string> notes;
  if (a.plan.empty()) notes.push_back("no --plan: predictions for the configuration recorded in the trace, on " + a.gpu);
  // The run must be the plan's run: same model and the knobs that shape pages and copies.
  const Json& extra = trace.metadata.extra;
  if (extra.contains("model") && extra["model"].is_string() && extra["model"].get<std::string>() != s.model.id)
    throw Error(a.trace, "metadata.extra.model",
                "was measured on " + extra["model"].get<std::string>() + ", the plan is for " + s.model.id,
                "validate a trace of a run of this plan");
  if (extra.contains("config") && extra["config"].is_object()) {
    const Config run = config_from_json(extra["config"], a.trace + ": metadata.extra.config");
    const Json pj = s.config.to_json(), rj = run.to_json();
    for (const char* key : {"schedule", "attention", "context_tokens", "chunk_tokens", "page_tokens", "page_budget",
                            "selection", "resident_layers", "checkpointing", "optimizer", "gpus"})
      if (pj[key] != rj[key])
        throw Error(a.trace, std::string("metadata.extra.config.") + key,
                    "differs from the plan (" + json_excerpt(rj[key]) + " vs " + json_excerpt(pj[key]) + ")",
                    "this trace is not a run of this plan");
    if (run.layers_override != s.config.layers_override) {
      s.config.layers_override = run.layers_override;
      notes.push_back("the run used the first " + std::to_string(run.layers_override) +
                      " layers; predictions are made for the same");
      // `oomb run --plan --layers N` keeps at most N - 1 of the plan's kept layers.
      if (run.kept_layers != s.config.kept_layers && run.kept_layers == std::min(s.config.kept_layers, run.layers_override - 1)) {
        notes.push_back("it kept the last " + std::to_string(run.kept_layers) + " of them (the plan keeps " +
                        std::to_string(s.config.kept_layers) + ")");
        s.config.kept_layers = run.kept_layers;
      }
    }
    if (run.kept_layers != s.config.kept_layers)
      throw Error(a.trace, "metadata.extra.config.kept_layers",
                  "differs from the plan (" + std::to_string(run.kept_layers) + " vs " +
                      std::to_string(s.config.kept_layers) + ")",
                  "this trace is not a run of this plan");
  }
  const bool cpu_run = trace.metadata.source == "cpu";
  const bool cupti_run = trace.metadata.source == "cuda-cupti";
  const bool executor_run = cpu_run || trace.metadata.source == "cuda" || cupti_run;
  if (executor_run) {
    // Predict for what actually ran: the storage dtypes the run records (a plan's page dtypes may
    // have been overridden by flags; traces from before typed storage stored fp32 everything but
    // the pages they record), peak as allocated (the runtime's own allocations).
    const RunPageDtypes pages = executor_page_dtypes(trace);
    if (pages.kv != s.config.kv_dtype || pages.kv_grad != s.config.kv_grad_dtype)
      notes.push_back("the run stored KV pages as " + pages.kv + " and KV-gradient pages as " + pages.kv_grad +
                      " (the plan says KV " + s.config.kv_dtype + ", KV-grad " + s.config.kv_grad_dtype +
                      "): predicted as run");
    s.config.kv_dtype = pages.kv;
    s.config.kv_grad_dtype = pages.kv_grad;
    auto stored = [&](const char* key) {
      return m.contains(key) && m[key].is_string() ? m[key].get<std::string>() : std::string("fp32");
    };
    const Config planned = s.config;
    s.config.param_dtype = stored("param_dtype");
    s.config.param_grad_dtype = stored("param_grad_dtype");
    s.config.activation_dtype = stored("activation_dtype");
    s.config.loss_dtype = stored("loss_dtype");
    s.config.peak_measure = PeakMeasure::allocated;
    notes.push_back((cupti_run ? std::string("cuda") : trace.metadata.source) +
                    " backend: predicted as run: weights / gradients / activations / loss stored as " +
                    s.config.param_dtype + " / " + s.config.param_grad_dtype + " / " + s.config.activation_dtype +
                    " / " + s.config.loss_dtype + ", pages as run (KV " + pages.kv + ", KV-grad " + pages.kv_grad +
                    "), peak as allocated" +
                    (planned.param_dtype != s.config.param_dtype || planned.param_grad_dtype != s.config.param_grad_dtype ||
                             planned.activation_dtype != s.config.activation_dtype || planned.loss_dtype != s.config.loss_dtype
                         ? " (the plan says " + planned.param_dtype + " / " + planned.param_grad_dtype + " / " +
                               planned.activation_dtype + " / " + planned.loss_dtype + ")"
                         : ""));
  }
  if (cupti_run) {
    std::string n = "times are CUPTI device times (kernels and copies, tagged with their stage, chunk, layer and "
                    "pass); memory terms are the runtime's device and host allocations";
    if (extra.contains("cupti") && extra["cupti"].is_object()) {
      const Json& cu = extra["cupti"];
      if (cu.contains("reserved_device_bytes") && cu["reserved_device_bytes"].is_number_integer())
        n += " (CUDA reserved " + format_bytes(cu["reserved_device_bytes"].get<int64_t>()) + " on the device)";
      if (cu.contains("untagged") && cu["untagged"].is_number_integer() && cu["untagged"].get<int64_t>() > 0)
        n += "; " + std::to_string(cu["untagged"].get<int64_t>()) + " records without a tag (time:op/untagged)";
    }
    notes.push_back(n);
    if (trace.metadata.dropped_records > 0)
      notes.push_back("CUPTI dropped " + std::to_string(trace.metadata.dropped_records) +
                      " records: measured times miss that work");
  }
  const bool sparse = s.config.attention == Attention::sparse;
  // The re-simulation holds every (chunk, layer) pass: a small file claiming a huge context is
  // refused by its key, not by running out of memory.
  check_event_simulation_size(s, config_where, config_key,
                              "validate compares runs of oomb run, whose contexts are far smaller; is this the right "
                              "file?");
  const EventResult pred = simulate_events(s, traces::Detail::chunk);
  const PageCounts pc = page_counts(s);
  // Time is comparable only when the plan's device profile describes the device that ran.
  // A "cuda" trace times ops on the host (enqueue times): only CUPTI's device times compare.
  // A cpu run's compute threads (recorded since --threads; 1 before) must be the profile's.
  const int64_t run_threads = extra.contains("cpu_threads") && extra["cpu_threads"].is_number_integer()
                                  ? extra["cpu_threads"].get<int64_t>() : 1;
  const bool threads_differ = cpu_run && s.gpu.kind == "cpu" && s.gpu.cpu_threads > 0 && run_threads != s.gpu.cpu_threads;
  const bool time_comparable =
      cpu_run ? s.gpu.kind == "cpu" && !threads_differ : trace.metadata.source == "cuda-cupti" && s.gpu.kind == "gpu";
  const std::string time_note =
      time_comparable ? ""
      : threads_differ ? "not comparable: run at " + std::to_string(run_threads) + " compute threads, " + s.gpu.id +
                             " calibrated at " + std::to_string(s.gpu.cpu_threads) + " (oomb run --threads " +
                             std::to_string(s.gpu.cpu_threads) + ", or oomb calibrate --backend cpu --threads " +
                             std::to_string(run_threads) + ")"
      : trace.metadata.source == "cuda"
          ? "not comparable: host-timed cuda trace (no CUPTI device times)"
          : "not comparable: plan for " + s.gpu.id + " (" + s.gpu.kind + "), measured on " + trace.metadata.source;
  if (cpu_run && s.gpu.kind == "cpu" && s.gpu.cpu_threads == 0)
    notes.push_back(s.gpu.id + " does not record its compute threads (calibrated before oomb calibrate --threads): its "
                    "times describe this run (" + std::to_string(run_threads) + " threads) only if it was measured at "
                    "that count");
  if (!time_comparable && cpu_run && !threads_differ)
    notes.push_back("times are compared against a cpu profile: --gpu cpu.json from `oomb calibrate --backend cpu --out "
                    "cpu.json`");

  std::vector<Term> terms;
  auto add = [&](std::string name, std::string unit, double p, std::optional<double> meas, double tol, std::string note = {}) {
    terms.push_back({std::move(name), std::move(unit), p, meas, tol, std::move(note)});
  };
  const double copy_tol = sparse ? kSparseCopies : kExact;
  const std::string sparse_note = sparse ? "sparse: depends on the selection-overlap assumption" : "";
  const double kv_hw = static_cast<double>(mr.i64("kv_pool_high_water_pages"));
  const double grad_hw = static_cast<double>(mr.i64("grad_pool_high_water_pages"));
  // Device memory: the runtime's own allocations (the executor's buffer table, measured at its
  // high-water mark) against the predicted table's peak over phases, and the breakdown at the peak
  // category by category. A cpu run holds no GPU-implementation rows (workspaces, device page
  // tables, score buffers: the CPU backend keeps those in host RAM), so it is predicted without
  // (the backend is the measured block's; traces from before it was recorded: the trace's source).
  Scenario mem = s;
  const std::string backend = m.contains("backend") && m["backend"].is_string() ? m["backend"].get<std::string>()
                                                                                : (cpu_run ? "cpu" : "cuda");
  if (backend == "cpu") mem.gpu.kind = "cpu";
  const Summary mem_pred = mem.gpu.kind == s.gpu.kind ? pred.summary : evaluate(mem);
  add("peak_device_bytes", "bytes", static_cast<double>(mem_pred.peak_device_bytes),
      static_cast<double>(mr.i64("peak_device_bytes")), kPeakBytes,
      mem_pred.peak_phase.empty() ? "" : "peak phase " + mem_pred.peak_phase);
  if (m.contains("device_breakdown_bytes") && m["device_breakdown_bytes"].is_object()) {
    std::map<std::string, int64_t> measured_cat;
    for (const auto& [cat, v] : m["device_breakdown_bytes"].items())
      if (v.is_number_integer()) measured_cat[cat] = v.get<int64_t>();
    std::set<std::string> cats;
    for (const auto& [cat, v] : mem_pred.device_breakdown_bytes) cats.insert(cat);
    for (const auto& [cat, v] : measured_cat) cats.insert(cat);
    for (const std::string& cat : cats) {
      auto p = mem_pred.device_breakdown_bytes.find(cat);
      auto q = measured_cat.find(cat);
      add("peak:" + cat, "bytes", p == mem_pred.device_breakdown_bytes.end() ? 0.0 : static_cast<double>(p->second),
          q == measured_cat.end() ? 0.0 : static_cast<double>(q->second), kExact, "at the peak");
    }
  }
  add("device_pool_bytes", "bytes",
      static_cast<double>(pc.kv_pool_pages * pc.kv_page_bytes + pc.grad_pool_pages * pc.grad_page_bytes),
      kv_hw * static_cast<double>(mr.i64("kv_page_bytes")) + grad_hw * static_cast<double>(mr.i64("grad_page_bytes")),
      copy_tol, sparse_note);
  add("pool_pages", "pages", static_cast<double>(pc.kv_pool_pages + pc.grad_pool_pages), kv_hw + grad_hw, copy_tol,
      sparse_note);
  add("kv_pool_pages", "pages", static_cast<double>(pc.kv_pool_pages), kv_hw, copy_tol, sparse_note);
  add("grad_pool_pages", "pages", static_cast<double>(pc.grad_pool_pages), grad_hw, copy_tol, sparse_note);
  add("host_pool_bytes", "bytes",
      static_cast<double>(pc.host_kv_pages * pc.kv_page_bytes + pc.host_grad_pages * pc.grad_page_bytes),
      static_cast<double>(mr.i64("host_kv_pages") * mr.i64("kv_page_bytes") +
                          mr.i64("host_grad_pages") * mr.i64("grad_page_bytes")),
      kExact);
  add("peak_host_bytes", "bytes", static_cast<double>(mem_pred.peak_host_bytes),
      static_cast<double>(mr.i64("peak_host_bytes")), kPeakHostBytes);
  // The executor keeps bounded-mode page summaries in the host tier and its kernels read them in
  // place (executor/README.md, known limits): its copies are predicted without the summaries'
  // streaming, i.e. as with the summaries on the device.
  int64_t pred_h2d = pred.summary.h2d_bytes, pred_d2h = pred.summary.d2h_bytes;
  std::string copy_note = sparse_note;
  if (sparse && s.config.selection_memory == SelectionMemory::bounded) {
    Scenario in_place = s;
    in_place.config.selection_memory = SelectionMemory::device;
    const auto ip = simulate_events(in_place, traces::Detail::step).summary;
    pred_h2d = ip.h2d_bytes;
    pred_d2h = ip.d2h_bytes;
    copy_note += "; without the page summaries' streaming (" + format_bytes(pred.summary.h2d_bytes - ip.h2d_bytes) +
                 " in, " + format_bytes(pred.summary.d2h_bytes - ip.d2h_bytes) +
                 " out): the executor reads them in the host tier in place";
  }
  add("h2d_bytes", "bytes", static_cast<double>(pred_h2d), static_cast<double>(mr.i64("h2d_bytes")), copy_tol,
      copy_note);
  add("d2h_bytes", "bytes", static_cast<double>(pred_d2h), static_cast<double>(mr.i64("d2h_bytes")), copy_tol,
      copy_note);
  std::optional<double> step;
  if (time_comparable) step = mr.f64("step_s");
  add("step_s", "s", pred.summary.step_s, step, kTime, time_note);
  // Exposed copy, information only: the copy time no compute covers, per timed step (the trace's
  // summary) against the event simulation's.
  std::optional<double> exposed;
  if (time_comparable) exposed = static_cast<double>(trace.summary.exposed_copy_ns) * 1e-9;
  add("exposed_copy_s", "s", pred.summary.exposed_copy_s, exposed, kTime,
      time_comparable ? "information only: per timed step, copy time no compute covers" : time_note);
  terms.back().judged = false;
  // Per-phase time: compute time of each stage.
  std::map<int, double> pred_stage, meas_stage;
  for (const auto& e : pred.trace.events)
    if (e.kind == traces::EventKind::compute && e.stage > 0) pred_stage[e.stage] += e.duration_ns() * 1e-9;
  for (const auto& e : trace.events)
    if (e.kind == traces::EventKind::compute && e.stage > 0) meas_stage[e.stage] += e.duration_ns() * 1e-9;
  const double steps = std::max<double>(1.0, static_cast<double>(mr.i64_or("steps", 1)));
  for (int stage : {1, 2}) {
    std::optional<double> v;
    if (time_comparable) v = meas_stage[stage] / steps;
    add("time:stage" + std::to_string(stage), "s", pred_stage[stage], v, kTime, time_note);
  }
  // Per pass kind (layer_fwd, layer_recompute, layer_bwd, lm_head, embedding): information only,
  // the step and stage totals above are what the tolerance judges.
  // Needs a trace of layer or op detail (coarser ones merge the passes of a stage).
  const bool per_op = trace.metadata.detail == traces::Detail::layer || trace.metadata.detail == traces::Detail::op;
  // CUPTI traces: device work the driver did not tag (op "untagged") and measured passes the
  // simulator does not predict get rows of their own.
  std::map<std::string, double> pred_op, meas_op;
  if (per_op) {
    for (const auto& e : simulate_events(s, traces::Detail::layer).trace.events)
      if (e.kind == traces::EventKind::compute && e.stage > 0) pred_op[e.op] += e.duration_ns() * 1e-9;
    for (const auto& e : trace.events)
      if (e.kind == traces::EventKind::compute && (e.stage > 0 || e.op == "untagged"))
        meas_op[e.op.empty() ? "untagged" : e.op] += e.duration_ns() * 1e-9 / steps;
  }
  for (const auto& [op, p] : pred_op) {
    std::optional<double> v;
    if (time_comparable) v = meas_op[op];
    add("time:op/" + op, "s", p, v, kTime, time_comparable ? "information only" : time_note);
    terms.back().judged = false;
  }
  if (time_comparable && cupti_run)
    for (const auto& [op, v] : meas_op)
      if (!pred_op.count(op)) {
        add("time:op/" + op, "s", 0, v, kTime,
            op == "untagged" ? "information only: device work with no driver tag" : "information only: not predicted");
        terms.back().judged = false;
      }

  // User tolerances: name=fraction.
  for (const auto& t : a.tolerances) {
    const auto [name, v] = parse_tolerance(t);
    bool found = false;
    for (auto& term : terms)
      if (term.name == name) term.tolerance = v, found = true;
    if (!found) {
      std::string names;
      for (const auto& term : terms) names += (names.empty() ? "" : ", ") + term.name;
      throw Error("--tolerance", name, "unknown term", "one of " + names);
    }
  }

  bool all_ok = true;
  for (const auto& t : terms) all_ok &= t.ok().value_or(true);

  if (!a.report.empty()) {
    traces::ReportInput in;
    in.title = "oomb validate: " + s.model.id + " on " + s.gpu.id + ", " + format_tokens(s.config.context_tokens) +
               " tokens";
    in.facts = {{"plan", a.plan}, {"trace", a.trace}, {"measured on", trace.metadata.device},
                {"verdict", all_ok ? "within tolerance" : "OUT OF TOLERANCE"}};
    for (const auto& n : notes) in.facts.emplace_back("note", n);
    in.predicted = &pred.trace;
    in.measured = &trace;
    for (const auto& t : terms)
      in.terms.push_back({t.name, t.predicted, t.measured, t.error(), t.tolerance, t.ok(), t.unit, t.note});
    write_text_file(a.report, traces::html_report(in));
  }

  if (a.json) {
    Json j = {{"ok", all_ok}, {"terms", Json::array()}, {"notes", notes}};
    for (const auto& t : terms) {
      Json row = {{"name", t.name}, {"predicted", t.predicted}, {"tolerance", t.tolerance}};
      row["measured"] = t.measured ? Json(*t.measured) : Json(nullptr);
      row["error"] = t.measured ? Json(t.error()) : Json(nullptr);
      row["ok"] = t.ok() ? Json(*t.ok()) : Json(nullptr);
      if (!t.note.empty()) row["note"] = t.note;
      j["terms"].push_back(row);
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("oomb validate: plan %s, trace %s (%s)\n", a.plan.empty() ? "(from the trace)" : a.plan.c_str(), a.trace.c_str(), trace.metadata.device.c_str());
    for (const auto& n : notes) std::printf("  note: %s\n", n.c_str());
    std::printf("\n  %-18s %16s %16s %9s %9s  %s\n", "term", "predicted", "measured", "error", "tolerance", "");
    auto fmt = [](const std::string& unit, double v) {
      if (unit == "bytes") return format_bytes(static_cast<int64_t>(std::llround(v)));
      if (unit == "s") return format_duration_s(v);
      return format_count(v);
    };
    for (const auto& t : terms) {
      const auto ok = t.ok();
      std::printf("  %-18s %16s %16s %9s %9s  %s%s%s\n", t.name.c_str(), fmt(t.unit, t.predicted).c_str(),
                  t.measured ? fmt(t.unit, *t.measured).c_str() : "-",
                  t.measured ? format_percent(t.error()).c_str() : "-", format_percent(t.tolerance).c_str(),
                  !ok ? (t.measured ? "info" : "n/a") : *ok ? "ok" : "FAIL", t.note.empty() ? "" : "  ", t.note.c_str());
    }
    std::printf("\n%s\n", all_ok ? "OK: every comparable term is within tolerance"
                                 : "FAILED: terms beyond tolerance (see above)");
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
      sub.add_option("--trace", a->trace, "The measured trace (oomb.trace/1, from `oomb run --trace`)");
      sub.add_option("--measured", a->measured,
                     "Instead of --trace: numbers measured outside oomb, NAME=VALUE,... of step_s, tokens_per_s, "
                     "peak_device_bytes, peak_host_bytes, h2d_bytes, d2h_bytes (compared with --plan's prediction)");
      sub.add_option("--tolerance", a->tolerances,
                     "Override a term's tolerance as NAME=FRACTION (repeatable). Defaults: pool pages, host pool and "
                     "device pool bytes and bytes per copy direction exact (0) in dense mode, 0.5 in sparse mode (selection-union "
                     "assumption); peak_device_bytes 0.01 and the device breakdown at the peak (peak:CATEGORY) exact, peak_host_bytes 0.25; step_s and time:stage1/2 0.25 (time "
                     "is compared only when the plan's device profile is the kind of device that ran)");
      sub.add_option("--report", a->report, "Also write a self-contained HTML report (memory and timelines)");
      sub.add_flag("--json", a->json,
                   "Print {\"ok\": bool, \"terms\": [{name, predicted, measured, error, tolerance, ok}]}");
      sub.footer("Exit codes: 0 within tolerance, 1 a term beyond tolerance, 2 bad input.\n"
                 "Example:\n"
                 "  oomb plan --model tiny --gpu h200 --context 16K --resident-layers 1 --out p.json\n"
                 "  oomb run --plan p.json --trace t.json && oomb validate --plan p.json --trace t.json");
      return [a] { return run_validate(*a); };
    });

}  // namespace
}  // namespace oomb::cli
