#include "validation/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/format.h"
#include "models/catalog.h"
#include "step/buffers.h"
#include "step/run_record.h"
#include "validation/judged.h"

namespace oomb::validation {

using namespace simulator;

double ValidationTerm::error() const {
  if (!measured) return 0;
  if (predicted == 0) return *measured == 0 ? 0 : 1;
  return (*measured - predicted) / predicted;
}

std::optional<bool> ValidationTerm::ok() const {
  if (!measured || !judged) return std::nullopt;
  if (at_most) return error() <= tolerance + 1e-12;
  return std::fabs(error()) <= tolerance + 1e-12;
}

namespace {

void apply_tolerances(std::vector<ValidationTerm>& terms, const std::vector<std::pair<std::string, double>>& tols,
                      const char* unknown_problem) {
  for (const auto& [name, v] : tols) {
    bool found = false;
    for (auto& term : terms)
      if (term.name == name) term.tolerance = v, found = true;
    if (!found) {
      std::string names;
      for (const auto& term : terms) names += (names.empty() ? "" : ", ") + term.name;
      throw Error("--tolerance", name, unknown_problem, "one of " + names);
    }
  }
}

bool all_ok(const std::vector<ValidationTerm>& terms) {
  bool ok = true;
  for (const auto& t : terms) ok &= t.ok().value_or(true);
  return ok;
}

}  // namespace

Validation validate_numbers(const Scenario& s, const std::vector<std::pair<std::string, double>>& given,
                            const std::vector<std::pair<std::string, double>>& tolerances) {
  Validation v;
  const Summary pred = simulate_events(s, traces::Detail::step).summary;
  std::map<std::string, double> m(given.begin(), given.end());
  auto add = [&](const std::string& name, const std::string& unit, double p, double tol, const std::string& note) {
    if (m.count(name)) v.terms.push_back({name, unit, p, m[name], tol, note});
  };
  const std::string measure = to_string(s.config.peak_measure);
  add("step_s", "s", pred.step_s, kTimeTolerance, "");
  add("tokens_per_s", "tokens/s", pred.tokens_per_s, kTimeTolerance, "");
  add("peak_device_bytes", "bytes", static_cast<double>(pred.peak_device_bytes), kOutsideBytesTolerance,
      "as the plan counts its peak: " + measure +
          (s.config.peak_measure == step::PeakMeasure::allocated
               ? " (torch.cuda.max_memory_allocated)"
               : " (with the runtime reserve; torch.cuda.max_memory_allocated compares with --peak-measure allocated)"));
  add("peak_host_bytes", "bytes", static_cast<double>(pred.peak_host_bytes), kOutsideBytesTolerance, "");
  add("h2d_bytes", "bytes", static_cast<double>(pred.h2d_bytes), kOutsideBytesTolerance, "per step");
  add("d2h_bytes", "bytes", static_cast<double>(pred.d2h_bytes), kOutsideBytesTolerance, "per step");
  apply_tolerances(v.terms, tolerances, "is not among the --measured terms");
  v.ok = all_ok(v.terms);
  return v;
}

namespace {

// The run must be the plan's run: same model and the knobs that shape pages and copies. A run of
// the plan's first layers (`oomb run --plan --layers N`) is predicted for those layers.
void match_run_to_plan(const step::RunRecord& run, const std::string& tw, Scenario& s, std::vector<std::string>& notes) {
  if (run.model != s.model.id)
    throw Error(tw, "metadata.extra.model", "was measured on " + run.model + ", the plan is for " + s.model.id,
                "validate a trace of a run of this plan");
  {
    const step::Config& rc = run.config;
    const Json pj = s.config.to_json(), rj = rc.to_json();
    for (const char* key : {"schedule", "attention", "context_tokens", "chunk_tokens", "page_tokens", "page_budget",
                            "selection", "resident_layers", "checkpointing", "optimizer", "gpus"})
      if (pj[key] != rj[key])
        throw Error(tw, std::string("metadata.extra.config.") + key,
                    "differs from the plan (" + json_excerpt(rj[key]) + " vs " + json_excerpt(pj[key]) + ")",
                    "this trace is not a run of this plan");
    if (rc.layers_override != s.config.layers_override) {
      s.config.layers_override = rc.layers_override;
      notes.push_back("the run used the first " + std::to_string(rc.layers_override) +
                      " layers; predictions are made for the same");
      // `oomb run --plan --layers N` keeps at most N - 1 of the plan's kept layers.
      if (rc.kept_layers != s.config.kept_layers &&
          rc.kept_layers == std::min(s.config.kept_layers, rc.layers_override - 1)) {
        notes.push_back("it kept the last " + std::to_string(rc.kept_layers) + " of them (the plan keeps " +
                        std::to_string(s.config.kept_layers) + ")");
        s.config.kept_layers = rc.kept_layers;
      }
    }
    if (rc.kept_layers != s.config.kept_layers)
      throw Error(tw, "metadata.extra.config.kept_layers",
                  "differs from the plan (" + std::to_string(rc.kept_layers) + " vs " +
                      std::to_string(s.config.kept_layers) + ")",
                  "this trace is not a run of this plan");
  }
}

// Predict for what ran: the storage dtypes of the run's record (a plan's page dtypes may have been
// overridden by flags), peak as allocated (the runtime's own allocations).
void predict_as_run(const traces::Trace& trace, const step::RunRecord& run, bool cupti_run, Scenario& s,
                    std::vector<std::string>& notes) {
  const step::Config planned = s.config;
  const step::Config& rc = run.config;
  if (rc.kv_dtype != planned.kv_dtype || rc.kv_grad_dtype != planned.kv_grad_dtype)
    notes.push_back(std::string("the run stored KV pages as ") + to_string(rc.kv_dtype) + " and KV-gradient pages as " +
                    to_string(rc.kv_grad_dtype) + " (the plan says KV " + to_string(planned.kv_dtype) + ", KV-grad " +
                    to_string(planned.kv_grad_dtype) + "): predicted as run");
  s.config.kv_dtype = rc.kv_dtype;
  s.config.kv_grad_dtype = rc.kv_grad_dtype;
  s.config.param_dtype = rc.param_dtype;
  s.config.param_grad_dtype = rc.param_grad_dtype;
  s.config.activation_dtype = rc.activation_dtype;
  s.config.loss_dtype = rc.loss_dtype;
  s.config.peak_measure = step::PeakMeasure::allocated;
  const bool dtypes_differ = planned.param_dtype != s.config.param_dtype ||
                             planned.param_grad_dtype != s.config.param_grad_dtype ||
                             planned.activation_dtype != s.config.activation_dtype ||
                             planned.loss_dtype != s.config.loss_dtype;
  notes.push_back((cupti_run ? std::string("cuda") : trace.metadata.source) +
                  " backend: predicted as run: weights / gradients / activations / loss stored as " +
                  to_string(s.config.param_dtype) + " / " + to_string(s.config.param_grad_dtype) + " / " +
                  to_string(s.config.activation_dtype) + " / " + to_string(s.config.loss_dtype) + ", pages as run (KV " +
                  to_string(rc.kv_dtype) + ", KV-grad " + to_string(rc.kv_grad_dtype) + "), peak as allocated" +
                  (dtypes_differ ? std::string(" (the plan says ") + to_string(planned.param_dtype) + " / " +
                                       to_string(planned.param_grad_dtype) + " / " + to_string(planned.activation_dtype) +
                                       " / " + to_string(planned.loss_dtype) + ")"
                                 : std::string()));
}

void cupti_notes(const traces::Trace& trace, const step::RunRecord& run, std::vector<std::string>& notes) {
  std::string n = "times are CUPTI device times (kernels and copies, tagged with their stage, chunk, layer and "
                  "pass); memory terms are the runtime's device and host allocations";
  if (run.cupti_untagged && *run.cupti_untagged > 0)
    n += "; " + std::to_string(*run.cupti_untagged) + " records without a tag (time:op/untagged)";
  notes.push_back(n);
  if (trace.metadata.dropped_records > 0)
    notes.push_back("CUPTI dropped " + std::to_string(trace.metadata.dropped_records) +
                    " records: measured times miss that work");
}

// A CUPTI trace's times are the GPU's that ran: judged only against a profile of that GPU
// (GpuSpec::cuda_device_names), never e.g. an H100's run against an H200's prediction.
// Returns why its times do not compare ("" when they do).
std::string device_mismatch(const traces::Trace& trace, const Scenario& s, std::vector<std::string>& notes) {
  std::string device_mismatch;
  const std::string ran = trace.metadata.extra.is_object() ? trace.metadata.extra.value("gpu_name", "") : "";
  const std::vector<std::string>& names = s.gpu.cuda_device_names;
  if (!ran.empty() && !names.empty() && std::find(names.begin(), names.end(), ran) == names.end()) {
    std::string profile;
    for (const std::string& id : models::catalog_ids("gpu")) {
      const models::GpuSpec g = models::load_gpu(id);
      if (std::find(g.cuda_device_names.begin(), g.cuda_device_names.end(), ran) != g.cuda_device_names.end())
        profile = id;
    }
    device_mismatch = "not comparable: measured on " + ran + ", the plan is for " + s.gpu.id + " (" + names.front() +
                      (profile.empty() ? "; plan with the profile of the GPU that ran"
                                       : "; plan with --gpu " + profile) +
                      ")";
  } else if (!ran.empty() && names.empty()) {
    notes.push_back(s.gpu.id + " names no CUDA device (cuda_device_names): its times are taken to describe " + ran);
  }
  return device_mismatch;
}

// Time is comparable only when the plan's device profile describes the device that ran.
// A "cuda" trace times ops on the host (enqueue times): only CUPTI's device times compare.
// A cpu run's compute threads must be the profile's.
void time_comparability(const traces::Trace& trace, const step::RunRecord& run, const Scenario& s,
                        const std::string& device_mismatch, detail::Judged& j, std::vector<std::string>& notes) {
  const bool cpu_run = j.cpu_run, cupti_run = j.cupti_run;
  const int64_t run_threads = run.cpu_threads;
  const bool threads_differ = cpu_run && s.gpu.kind == "cpu" && s.gpu.cpu_threads > 0 && run_threads != s.gpu.cpu_threads;
  const bool time_comparable = j.time_comparable =
      !run.emulated_device && device_mismatch.empty() &&
      (cpu_run ? s.gpu.kind == "cpu" && !threads_differ : cupti_run && s.gpu.kind == "gpu");
  j.time_note =
      time_comparable ? ""
      : run.emulated_device ? "not comparable: measured on the emulated CUDA device (its times are not a GPU's; "
                              "memory and copies are judged)"
      : !device_mismatch.empty() ? device_mismatch
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
}

}  // namespace

Validation validate_run(const ValidationRequest& req) {
  OOMB_ASSERT(req.trace, "validate_run needs a trace");
  const traces::Trace& trace = *req.trace;
  const std::string& tw = req.trace_where;
  Scenario s = req.scenario;
  Validation v;
  std::vector<std::string>& notes = v.notes;
  if (trace.metadata.source == "simulator")
    throw Error(tw, "metadata.source", "is a prediction, not a measurement", "give a trace from `oomb run --trace`");
  const step::RunRecord run = step::run_record_from_json(trace.metadata.extra, tw);
  const std::string config_where = req.plan_where.empty() ? tw : req.plan_where;
  const std::string config_key = req.plan_where.empty() ? "metadata.extra.config.context_tokens" : "config.context_tokens";
  match_run_to_plan(run, tw, s, notes);
  const bool cpu_run = trace.metadata.source == "cpu";
  const bool cupti_run = trace.metadata.source == "cuda-cupti";
  const bool executor_run = cpu_run || trace.metadata.source == "cuda" || cupti_run;
  if (executor_run) predict_as_run(trace, run, cupti_run, s, notes);
  if (cupti_run) cupti_notes(trace, run, notes);
  const std::string mismatch = cupti_run && !run.emulated_device ? device_mismatch(trace, s, notes) : std::string();
  const bool sparse = s.config.attention == step::Attention::sparse;
  // The re-simulation holds every (chunk, layer) pass: a small file claiming a huge context is
  // refused by its key, not by running out of memory.
  check_event_simulation_size(s, config_where, config_key,
                              "validate compares runs of oomb run, whose contexts are far smaller; is this the right "
                              "file?");
  v.prediction = simulate_events(s, traces::Detail::chunk);
  const EventResult& pred = v.prediction;
  detail::Judged j{trace, run, s, pred};
  j.cpu_run = cpu_run;
  j.cupti_run = cupti_run;
  j.executor_run = executor_run;
  j.sparse = sparse;
  // The table is the backend's that ran (a cpu run holds none of the CUDA backend's rows).
  j.backend = !run.backend.empty() ? run.backend : (cpu_run ? "cpu" : "cuda");
  time_comparability(trace, run, s, mismatch, j, notes);
  j.copy_tolerance = sparse ? kSparseCopiesTolerance : kExactTolerance;
  std::string& sparse_note = j.sparse_note;
  sparse_note = sparse ? "sparse: depends on the selection-overlap assumption" : "";
  // What the run's unions say of that assumption (the executor measures every (chunk, layer)'s):
  // the overlap that covers the largest, to plan with when the pools or copies disagree.
  if (sparse && !run.union_pages.empty()) {
    const step::ImpliedOverlap io = step::implied_overlap(step::geometry(s.model, s.config), run.union_pages);
    if (io.pairs > 0) {
      v.implied_selection_overlap = io.at_largest;
      sparse_note += " (" + format_fixed(s.config.selection_overlap, 2) + "; the run's unions imply " +
                     format_fixed(io.at_largest, 2) + ")";
      notes.push_back("selection unions measured: " + std::to_string(io.pairs) +
                      " (chunk, layer) pairs whose prefix caps none imply --selection-overlap " +
                      format_fixed(io.at_largest, 2) + " at the largest (mean " + format_fixed(io.mean, 2) +
                      "); the plan assumed " + format_fixed(s.config.selection_overlap, 2));
    }
  }
  j.fastest = detail::fastest_step(trace);
  j.pass_detail = trace.metadata.detail == traces::Detail::layer || trace.metadata.detail == traces::Detail::op;

  // The families of terms, in the order they are printed.
  detail::memory_terms(j, v);
  const detail::CopyPrediction copies = detail::predict_copies(j);
  detail::add_term(v, "h2d_bytes", "bytes", static_cast<double>(copies.h2d_bytes), static_cast<double>(run.h2d_bytes),
                   j.copy_tolerance, copies.note);
  detail::collective_terms(j, v);
  detail::add_term(v, "d2h_bytes", "bytes", static_cast<double>(copies.d2h_bytes), static_cast<double>(run.d2h_bytes),
                   j.copy_tolerance, copies.note);
  // The simulation at layer detail: the passes and their order, and the per pass kind times.
  const EventResult layer_pred = j.pass_detail ? simulate_events(s, traces::Detail::layer) : EventResult{};
  detail::order_terms(j, layer_pred, v);
  detail::time_terms(j, layer_pred, v);
  apply_tolerances(v.terms, req.tolerances, "unknown term");
  v.ok = all_ok(v.terms);
  if (v.implied_selection_overlap) {
    bool assumption_failed = false;
    for (const auto& t : v.terms)
      if (t.note.rfind("sparse:", 0) == 0 && !t.ok().value_or(true)) assumption_failed = true;
    if (assumption_failed)
      notes.push_back("the sparse pools or copies disagree with the plan's --selection-overlap " +
                      format_fixed(s.config.selection_overlap, 2) + ": re-plan with --selection-overlap " +
                      format_fixed(*v.implied_selection_overlap, 2) +
                      " (what this run's unions imply), then run and validate again");
  }
  return v;
}

}  // namespace oomb::validation
