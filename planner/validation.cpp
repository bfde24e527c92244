#include "planner/validation.h"

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

namespace oomb::planner {

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

std::string overlap_text(double overlap) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", overlap);
  return b;
}

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

// The shortest of a trace's step phases (traces::kStepPhase): the fastest timed step.
struct StepWindow {
  bool found = false;
  int64_t start_ns = 0, end_ns = 0;
  int64_t count = 0;  // step phases in the trace
};
StepWindow fastest_step(const traces::Trace& t) {
  StepWindow w;
  for (const auto& e : t.events) {
    if (e.kind != traces::EventKind::phase || e.name != traces::kStepPhase || e.end_ns <= e.start_ns) continue;
    ++w.count;
    if (!w.found || e.end_ns - e.start_ns < w.end_ns - w.start_ns) w.found = true, w.start_ns = e.start_ns, w.end_ns = e.end_ns;
  }
  return w;
}
// e's seconds inside w (all of them without a window).
double seconds_within(const traces::Event& e, const StepWindow& w) {
  if (!w.found) return static_cast<double>(e.duration_ns()) * 1e-9;
  const int64_t b = std::max(e.start_ns, w.start_ns), f = std::min(e.end_ns, w.end_ns);
  return f > b ? static_cast<double>(f - b) * 1e-9 : 0.0;
}


// Event order (issue 42: a trace measured on the emulated device has no GPU times, but the order of
// its work is the program's). A pass is one (stage, chunk, layer, op) of the compute stream.
struct Pass {
  int stage = -1;
  int64_t chunk = -1, layer = -1;
  std::string op;
  bool operator==(const Pass& o) const {
    return stage == o.stage && chunk == o.chunk && layer == o.layer && op == o.op;
  }
  bool operator<(const Pass& o) const {
    return std::tie(stage, chunk, layer, op) < std::tie(o.stage, o.chunk, o.layer, o.op);
  }
};
Pass pass_of(const traces::Event& e) { return {e.stage, e.chunk, e.layer, e.op}; }
std::string pass_text(const Pass& p) {
  std::string s = p.op.empty() ? "(no op)" : p.op;
  if (p.stage > 0) s += " stage " + std::to_string(p.stage);
  if (p.chunk >= 0) s += " chunk " + std::to_string(p.chunk);
  if (p.layer >= 0) s += " layer " + std::to_string(p.layer);
  return s;
}
bool in_window(const traces::Event& e, const StepWindow& w) {
  return !w.found || (e.start_ns >= w.start_ns && e.end_ns <= w.end_ns);
}
// The passes of the compute stream in the order they started (a pass's kernels or ops merged),
// those of `ops` only.
std::vector<Pass> pass_order(const std::vector<traces::Event>& events, const StepWindow& w,
                             const std::set<std::string>& ops) {
  std::vector<const traces::Event*> es;
  for (const auto& e : events)
    if (e.kind == traces::EventKind::compute && e.stage > 0 && ops.count(e.op) && in_window(e, w)) es.push_back(&e);
  std::stable_sort(es.begin(), es.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  std::vector<Pass> out;
  for (const auto* e : es)
    if (out.empty() || !(out.back() == pass_of(*e))) out.push_back(pass_of(*e));
  return out;
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
  // The run must be the plan's run: same model and the knobs that shape pages and copies.
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
  const bool cpu_run = trace.metadata.source == "cpu";
  const bool cupti_run = trace.metadata.source == "cuda-cupti";
  const bool executor_run = cpu_run || trace.metadata.source == "cuda" || cupti_run;
  if (executor_run) {
    // Predict for what ran: the storage dtypes of the run's record (a plan's page dtypes may have
    // been overridden by flags), peak as allocated (the runtime's own allocations).
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
  if (cupti_run) {
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
  std::string device_mismatch;
  if (cupti_run && !run.emulated_device) {
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
  }
  const bool sparse = s.config.attention == step::Attention::sparse;
  // The re-simulation holds every (chunk, layer) pass: a small file claiming a huge context is
  // refused by its key, not by running out of memory.
  check_event_simulation_size(s, config_where, config_key,
                              "validate compares runs of oomb run, whose contexts are far smaller; is this the right "
                              "file?");
  v.prediction = simulate_events(s, traces::Detail::chunk);
  const EventResult& pred = v.prediction;
  const step::PageCounts pc = page_counts(s);
  // Time is comparable only when the plan's device profile describes the device that ran.
  // A "cuda" trace times ops on the host (enqueue times): only CUPTI's device times compare.
  // A cpu run's compute threads must be the profile's.
  const int64_t run_threads = run.cpu_threads;
  const bool threads_differ = cpu_run && s.gpu.kind == "cpu" && s.gpu.cpu_threads > 0 && run_threads != s.gpu.cpu_threads;
  const bool time_comparable =
      !run.emulated_device && device_mismatch.empty() &&
      (cpu_run ? s.gpu.kind == "cpu" && !threads_differ : cupti_run && s.gpu.kind == "gpu");
  const std::string time_note =
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

  std::vector<ValidationTerm>& terms = v.terms;
  auto add = [&](std::string name, std::string unit, double p, std::optional<double> meas, double tol, std::string note = {}) {
    terms.push_back({std::move(name), std::move(unit), p, meas, tol, std::move(note)});
  };
  const double copy_tol = sparse ? kSparseCopiesTolerance : kExactTolerance;
  std::string sparse_note = sparse ? "sparse: depends on the selection-overlap assumption" : "";
  // What the run's unions say of that assumption (the executor measures every (chunk, layer)'s):
  // the overlap that covers the largest, to plan with when the pools or copies disagree.
  if (sparse && !run.union_pages.empty()) {
    const step::ImpliedOverlap io = step::implied_overlap(step::geometry(s.model, s.config), run.union_pages);
    if (io.pairs > 0) {
      v.implied_selection_overlap = io.at_largest;
      sparse_note += " (" + overlap_text(s.config.selection_overlap) + "; the run's unions imply " +
                     overlap_text(io.at_largest) + ")";
      notes.push_back("selection unions measured: " + std::to_string(io.pairs) +
                      " (chunk, layer) pairs whose prefix caps none imply --selection-overlap " +
                      overlap_text(io.at_largest) + " at the largest (mean " + overlap_text(io.mean) +
                      "); the plan assumed " + overlap_text(s.config.selection_overlap));
    }
  }
  const double kv_hw = static_cast<double>(run.kv_pool_high_water_pages);
  const double grad_hw = static_cast<double>(run.grad_pool_high_water_pages);
  // Device memory: the runtime's allocations, measured by its memory account under the rows of the
  // run's buffer table, against the predicted table's peak over phases, and the breakdown at the
  // peak category by category. The table is the backend's that ran (a cpu run holds none of the
  // CUDA backend's rows).
  Scenario mem = s;
  const std::string backend = !run.backend.empty() ? run.backend : (cpu_run ? "cpu" : "cuda");
  if (backend == "cpu") mem.gpu.kind = "cpu";
  // A CUPTI-timed run holds the collector's activity buffers (a host row the plan leaves out).
  mem.cupti_timed = backend == "cuda" && run.cupti_timed;
  const Summary mem_pred = mem.gpu.kind == s.gpu.kind && !mem.cupti_timed ? pred.summary : evaluate(mem);
  add("peak_device_bytes", "bytes", static_cast<double>(mem_pred.peak_device_bytes),
      static_cast<double>(run.peak_device_bytes), kPeakBytesTolerance,
      mem_pred.peak_phase.empty() ? "" : "peak phase " + mem_pred.peak_phase);
  if (!run.device_breakdown_bytes.empty()) {
    std::set<std::string> cats;
    for (const auto& [cat, b] : mem_pred.device_breakdown_bytes) cats.insert(cat);
    for (const auto& [cat, b] : run.device_breakdown_bytes) cats.insert(cat);
    for (const std::string& cat : cats) {
      auto p = mem_pred.device_breakdown_bytes.find(cat);
      auto q = run.device_breakdown_bytes.find(cat);
      add("peak:" + cat, "bytes", p == mem_pred.device_breakdown_bytes.end() ? 0.0 : static_cast<double>(p->second),
          q == run.device_breakdown_bytes.end() ? 0.0 : static_cast<double>(q->second), kExactTolerance, "at the peak");
    }
  }
  // CUDA: what the device really gave the run (every cudaMalloc CUPTI recorded: the arena's blocks,
  // cuBLASLt's and the backend's own buffers) must stay within what the plan holds the GPU for, the
  // table's peak plus the profile's runtime reserve (the CUDA context and libraries' share). A
  // judged bound: an allocator that reserves more than it uses, or scratch outside the table,
  // fails it.
  // The arena's block beyond the buffers (the table's allocator_blocks row) is part of the plan.
  if (run.cupti_reserved_device_bytes) {
    Scenario reserved = mem;
    reserved.config.peak_measure = step::PeakMeasure::reserved;
    const Summary rp = evaluate(reserved);
    const auto blocks = rp.device_breakdown_bytes.find(step::kAllocatorCategory);
    const int64_t arena_slack = blocks == rp.device_breakdown_bytes.end() ? 0 : blocks->second;
    add("reserved_device_bytes", "bytes",
        static_cast<double>(mem_pred.peak_device_bytes + arena_slack + s.gpu.reserved_bytes),
        static_cast<double>(*run.cupti_reserved_device_bytes), kExactTolerance,
        "at most: the table's peak + the arena block's slack (" + format_bytes(arena_slack) +
            ") + the runtime reserve (" + format_bytes(s.gpu.reserved_bytes) +
            "); measured: device bytes CUDA allocated (CUPTI)");
    terms.back().at_most = true;
  }
  add("device_pool_bytes", "bytes",
      static_cast<double>(pc.kv_pool_pages * pc.kv_page_bytes + pc.grad_pool_pages * pc.grad_page_bytes),
      kv_hw * static_cast<double>(run.kv_page_bytes) + grad_hw * static_cast<double>(run.grad_page_bytes), copy_tol,
      sparse_note);
  add("pool_pages", "pages", static_cast<double>(pc.kv_pool_pages + pc.grad_pool_pages), kv_hw + grad_hw, copy_tol,
      sparse_note);
  add("kv_pool_pages", "pages", static_cast<double>(pc.kv_pool_pages), kv_hw, copy_tol, sparse_note);
  add("grad_pool_pages", "pages", static_cast<double>(pc.grad_pool_pages), grad_hw, copy_tol, sparse_note);
  add("host_pool_bytes", "bytes",
      static_cast<double>(pc.host_kv_pages * pc.kv_page_bytes + pc.host_grad_pages * pc.grad_page_bytes),
      static_cast<double>(run.host_kv_pages * run.kv_page_bytes + run.host_grad_pages * run.grad_page_bytes),
      kExactTolerance);
  add("peak_host_bytes", "bytes", static_cast<double>(mem_pred.peak_host_bytes), static_cast<double>(run.peak_host_bytes),
      kPeakHostBytesTolerance);
  // The executor keeps bounded-mode page summaries in the host tier and its kernels read them in
  // place (executor/README.md, known limits): its copies are predicted without the summaries'
  // streaming, i.e. as with the summaries on the device.
  int64_t pred_h2d = pred.summary.h2d_bytes, pred_d2h = pred.summary.d2h_bytes;
  std::string copy_note = sparse_note;
  if (sparse && s.config.selection_memory == step::SelectionMemory::bounded) {
    Scenario in_place = s;
    in_place.config.selection_memory = step::SelectionMemory::device;
    const auto ip = simulate_events(in_place, traces::Detail::step).summary;
    pred_h2d = ip.h2d_bytes;
    pred_d2h = ip.d2h_bytes;
    copy_note += "; without the page summaries' streaming (" + format_bytes(pred.summary.h2d_bytes - ip.h2d_bytes) +
                 " in, " + format_bytes(pred.summary.d2h_bytes - ip.d2h_bytes) +
                 " out): the executor reads them in the host tier in place";
  }
  add("h2d_bytes", "bytes", static_cast<double>(pred_h2d), static_cast<double>(run.h2d_bytes), copy_tol, copy_note);
  // Collective time (docs/model.md "Communication"): what the collectives cost once every rank has
  // arrived (the transfer), judged against the prediction. A rank's wait for the slowest one is the
  // ranks' skew (what they computed at different speeds since they last met): the step of the
  // slowest rank holds it, which validate judges through step_s; it is reported, not predicted.
  // Comparable on the CPU backend with a shared clock (the ranks on one host); NCCL's collectives
  // run on the device stream, where a host-timed call is only its enqueue.
  const bool comm_comparable = time_comparable && backend == "cpu" && run.collective_split;
  const std::string comm_note =
      !time_comparable ? time_note
      : backend != "cpu" && run.collectives_device_timed
          ? "not comparable: the NCCL kernels' device time (CUPTI) holds each rank's wait for the slowest with the "
            "transfer; measured " + format_duration_s(run.tp > 1 ? run.tp_allreduce_s : run.allreduce_s) +
                " (tensor parallel " + format_duration_s(run.tp_allreduce_s) + ", data parallel " +
                format_duration_s(run.allreduce_s) + ")"
      : backend != "cpu" ? "not comparable: NCCL collectives run on the device stream (host-timed calls are enqueues)"
      : !run.collective_split ? "not comparable: the ranks share no clock (several hosts), the wait for the slowest "
                                "rank cannot be told apart from the transfer"
                              : "transfer from the last rank's arrival (the wait for it is the ranks' skew)";
  auto wait_note = [&](const char* what, double wait_s) {
    if (comm_comparable && wait_s > 0)
      notes.push_back("this rank waited " + format_duration_s(wait_s) + " in its " + what +
                      " for the slowest rank to arrive (the ranks' skew, in the step, not in the collectives' time)");
  };
  if (s.config.gpus > 1 && run.tp > 1) {
    // Tensor parallelism: the collectives of this rank's step, count and bytes exact, and their time.
    const std::string rank = "rank " + std::to_string(run.tp_rank) + " of " + std::to_string(s.config.gpus);
    add("tp_allreduces", "calls", static_cast<double>(pred.summary.tp_allreduces),
        static_cast<double>(run.tp_allreduces), kExactTolerance, rank);
    add("tp_allreduce_bytes", "bytes", static_cast<double>(pred.summary.tp_allreduce_bytes),
        static_cast<double>(run.tp_allreduce_bytes), kExactTolerance, rank);
    if (run.collective_times_recorded) {
      std::optional<double> meas;
      if (comm_comparable) meas = run.tp_allreduce_transfer_s;
      add("tp_allreduce_s", "s", pred.summary.tp_allreduce_s, meas, kTimeTolerance, comm_note);
      wait_note("tensor-parallel all-reduces", run.tp_allreduce_wait_s);
    }
  }
  if (s.config.data_parallel > 1 && run.world > run.tp && pred.summary.allreduce_bytes > 0) {
    add("allreduce_bytes", "bytes", static_cast<double>(pred.summary.allreduce_bytes),
        static_cast<double>(run.allreduce_bytes), kExactTolerance, "the gradient all-reduce, per rank");
    if (run.collective_times_recorded) {
      std::optional<double> meas;
      if (comm_comparable) meas = run.allreduce_transfer_s;
      add("gradient_allreduce_s", "s", pred.summary.allreduce_s, meas, kTimeTolerance, comm_note);
      wait_note("gradient all-reduce", run.allreduce_wait_s);
    }
  }
  add("d2h_bytes", "bytes", static_cast<double>(pred_d2h), static_cast<double>(run.d2h_bytes), copy_tol, copy_note);
  const StepWindow fastest = fastest_step(trace);
  // Event order, judged on every executor trace of layer or op detail, whatever its clock (an
  // emulated device's or a CPU's times are not the plan's GPU's, their order is the program's):
  //  - order:passes: the compute stream runs the passes the simulator schedules (ops it predicts;
  //    a pass it does not schedule, e.g. the embedding's backward, is left out) in its order. Predicted:
  //    the simulator's pass count; measured: the same count when the sequences agree, else the
  //    passes before the first difference (or all of them, when the run has more). Exact.
  //  - order:copies_out_of_order: a copy tagged with a layer pass must respect it: an onload (h2d)
  //    ends before its pass ends (the pass cannot have read its pages otherwise), an offload (d2h)
  //    starts after its pass starts (its pages are the pass's output). A missing stream wait shows
  //    here.
  const bool pass_detail = trace.metadata.detail == traces::Detail::layer || trace.metadata.detail == traces::Detail::op;
  // The simulation at layer detail: the passes and their order (and below, per pass kind times).
  const EventResult layer_pred = pass_detail ? simulate_events(s, traces::Detail::layer) : EventResult{};
  if (executor_run && pass_detail) {
    const bool one_step = fastest.found || run.steps == 1;
    std::set<std::string> predicted_ops, run_compute_ops, run_collective_ops, as_collectives;
    for (const auto& e : trace.events)
      if (e.kind == traces::EventKind::compute) run_compute_ops.insert(e.op);
      else if (e.kind == traces::EventKind::collective) run_collective_ops.insert(e.op);
    for (const auto& e : layer_pred.trace.events)
      if (e.kind == traces::EventKind::compute && e.stage > 0) {
        // A collective the simulator prices as a compute-stream pass (ZeRO-1's reduce-scatter and
        // all-gather, a bucket without overlap) that the run ran on the comm lane only (NCCL's
        // kernels on a communicator's stream): no pass of the compute stream's order.
        if (!run_compute_ops.count(e.op) && run_collective_ops.count(e.op)) as_collectives.insert(e.op);
        else predicted_ops.insert(e.op);
      }
    const std::vector<Pass> want = pass_order(layer_pred.trace.events, StepWindow{}, predicted_ops);
    const std::vector<Pass> got = pass_order(trace.events, fastest, predicted_ops);
    std::set<std::string> left_out;
    for (const auto& e : trace.events)
      if (e.kind == traces::EventKind::compute && e.stage > 0 && !predicted_ops.count(e.op)) left_out.insert(e.op);
    std::optional<double> meas;
    std::string note;
    if (got.empty()) {
      note = "not comparable: the trace holds no pass of the compute stream";
    } else if (!one_step) {
      note = "not comparable: " + std::to_string(run.steps) + " steps and no step phases to tell them apart";
    } else {
      size_t same = 0;
      while (same < want.size() && same < got.size() && want[same] == got[same]) ++same;
      meas = static_cast<double>(same == want.size() ? got.size() : same);
      if (same < want.size() || got.size() != want.size())
        note = "first difference at pass " + std::to_string(same + 1) + ": ran " +
               (same < got.size() ? pass_text(got[same]) : std::string("nothing more")) + ", predicted " +
               (same < want.size() ? pass_text(want[same]) : std::string("nothing more"));
      else
        note = "the compute stream's passes in the simulator's order";
      auto names = [](const std::set<std::string>& ops) {
        std::string out;
        for (const auto& op : ops) out += (out.empty() ? "" : ", ") + op;
        return out;
      };
      if (!left_out.empty()) note += " (not scheduled by the simulator, left out: " + names(left_out) + ")";
      if (!as_collectives.empty()) note += " (run as collectives on the comm lane: " + names(as_collectives) + ")";
    }
    add("order:passes", "passes", static_cast<double>(want.size()), meas, kExactTolerance, note);
    if (meas) {
      // Each pass's span in the step: its first start and last end.
      std::map<Pass, std::pair<int64_t, int64_t>> span;
      for (const auto& e : trace.events)
        if (e.kind == traces::EventKind::compute && e.stage > 0 && in_window(e, fastest)) {
          auto [it, fresh] = span.try_emplace(pass_of(e), e.start_ns, e.end_ns);
          if (!fresh) it->second = {std::min(it->second.first, e.start_ns), std::max(it->second.second, e.end_ns)};
        }
      int64_t copies = 0, bad = 0;
      std::string first_bad;
      for (const auto& e : trace.events) {
        const bool h2d = e.kind == traces::EventKind::copy_h2d, d2h = e.kind == traces::EventKind::copy_d2h;
        // Pages move for layer passes (a chunk's KV and KV-gradient pages of one layer); the
        // optimizer's round trip (gradients out, weights back) is ordered around the update, not
        // around a pass's kernels.
        if ((!h2d && !d2h) || e.layer < 0 || !in_window(e, fastest)) continue;
        const auto it = span.find(pass_of(e));
        if (it == span.end()) continue;
        ++copies;
        const bool ok = h2d ? e.end_ns <= it->second.second : e.start_ns >= it->second.first;
        if (!ok && bad++ == 0)
          first_bad = std::string(h2d ? "the onload of " : "the offload of ") + pass_text(pass_of(e)) +
                      (h2d ? " ended after its pass" : " started before its pass");
      }
      add("order:copies_out_of_order", "copies", 0, static_cast<double>(bad), kExactTolerance,
          bad > 0 ? std::to_string(bad) + " of " + std::to_string(copies) + " copies; first: " + first_bad
                  : std::to_string(copies) + " copies tagged with a layer pass: onloads end before their pass ends, "
                                             "offloads start after it starts");
    }
  }
  std::optional<double> step;
  if (time_comparable) step = run.step_s;
  add("step_s", "s", pred.summary.step_s, step, kTimeTolerance, time_note);
  // Exposed copy, information only: the copy time no compute covers, per timed step (the trace's
  // summary) against the event simulation's.
  std::optional<double> exposed;
  if (time_comparable) exposed = static_cast<double>(trace.summary.exposed_copy_ns) * 1e-9;
  add("exposed_copy_s", "s", pred.summary.exposed_copy_s, exposed, kTimeTolerance,
      time_comparable ? "information only: per timed step, copy time no compute covers" : time_note);
  terms.back().judged = false;
  // Per-phase time: compute time of each stage.
  // Measured over the step that step_s is (the run's fastest timed step: the shortest of the
  // trace's step phases), like with like: means over the steps against the fastest step would
  // give stages that do not fit in the step they are part of.
  std::map<int, double> pred_stage, meas_stage;
  for (const auto& e : pred.trace.events)
    if (e.kind == traces::EventKind::compute && e.stage > 0) pred_stage[e.stage] += e.duration_ns() * 1e-9;
  for (const auto& e : trace.events)
    if (e.kind == traces::EventKind::compute && e.stage > 0) meas_stage[e.stage] += seconds_within(e, fastest);
  // Without step phases (a one-step trace, an older file) the whole trace is spread over its steps.
  const double steps = fastest.found ? 1.0 : static_cast<double>(run.steps);
  if (time_comparable && fastest.found && fastest.count > 1)
    notes.push_back("stage and pass times are the fastest timed step's (" +
                    format_duration_s(static_cast<double>(fastest.end_ns - fastest.start_ns) * 1e-9) + " of " +
                    std::to_string(fastest.count) + " traced steps), as step_s is");
  for (int stage : {1, 2}) {
    std::optional<double> val;
    if (time_comparable) val = meas_stage[stage] / steps;
    add("time:stage" + std::to_string(stage), "s", pred_stage[stage], val, kTimeTolerance, time_note);
  }
  // Per pass kind (layer_fwd, layer_recompute, layer_bwd, lm_head, embedding): information only,
  // the step and stage totals above are what the tolerance judges. Needs a trace of layer or op
  // detail (coarser ones merge the passes of a stage).
  const bool per_op = pass_detail;
  // CUPTI traces: device work the driver did not tag (op "untagged") and measured passes the
  // simulator does not predict get rows of their own.
  std::map<std::string, double> pred_op, meas_op;
  if (per_op) {
    for (const auto& e : layer_pred.trace.events)
      if (e.kind == traces::EventKind::compute && e.stage > 0) pred_op[e.op] += e.duration_ns() * 1e-9;
    for (const auto& e : trace.events)
      if (e.kind == traces::EventKind::compute && (e.stage > 0 || e.op == "untagged"))
        meas_op[e.op.empty() ? "untagged" : e.op] += seconds_within(e, fastest) / steps;
  }
  for (const auto& [op, p] : pred_op) {
    std::optional<double> val;
    if (time_comparable) val = meas_op[op];
    add("time:op/" + op, "s", p, val, kTimeTolerance, time_comparable ? "information only" : time_note);
    terms.back().judged = false;
  }
  if (time_comparable && cupti_run)
    for (const auto& [op, val] : meas_op)
      if (!pred_op.count(op)) {
        add("time:op/" + op, "s", 0, val, kTimeTolerance,
            op == "untagged" ? "information only: device work with no driver tag" : "information only: not predicted");
        terms.back().judged = false;
      }
  apply_tolerances(terms, req.tolerances, "unknown term");
  v.ok = all_ok(terms);
  if (v.implied_selection_overlap) {
    bool assumption_failed = false;
    for (const auto& t : terms)
      if (t.note.rfind("sparse:", 0) == 0 && !t.ok().value_or(true)) assumption_failed = true;
    if (assumption_failed)
      notes.push_back("the sparse pools or copies disagree with the plan's --selection-overlap " +
                      overlap_text(s.config.selection_overlap) + ": re-plan with --selection-overlap " +
                      overlap_text(*v.implied_selection_overlap) +
                      " (what this run's unions imply), then run and validate again");
  }
  return v;
}

}  // namespace oomb::planner
