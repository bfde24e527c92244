#include <optional>
#include <map>
#include <string>

#include "core/format.h"
#include "validation/judged.h"

namespace oomb::validation::detail {

using namespace simulator;

void time_terms(const Judged& j, const EventResult& layer_pred, Validation& v) {
  const traces::Trace& trace = j.trace;
  const step::RunRecord& run = j.run;
  const EventResult& pred = j.pred;
  const bool time_comparable = j.time_comparable, cupti_run = j.cupti_run, pass_detail = j.pass_detail;
  const std::string& time_note = j.time_note;
  const StepWindow& fastest = j.fastest;
  std::vector<ValidationTerm>& terms = v.terms;
  std::vector<std::string>& notes = v.notes;
  std::optional<double> step;
  if (time_comparable) step = run.step_s;
  add_term(v, "step_s", "s", pred.summary.step_s, step, kTimeTolerance, time_note);
  // Exposed copy, information only: the copy time no compute covers, per timed step (the trace's
  // summary) against the event simulation's.
  std::optional<double> exposed;
  if (time_comparable) exposed = static_cast<double>(trace.summary.exposed_copy_ns) * 1e-9;
  add_term(v, "exposed_copy_s", "s", pred.summary.exposed_copy_s, exposed, kTimeTolerance,
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
    add_term(v, "time:stage" + std::to_string(stage), "s", pred_stage[stage], val, kTimeTolerance, time_note);
  }
  // Per pass kind (layer_fwd, layer_recompute, layer_bwd, lm_head, embedding): information only,
  // the step and stage totals above are what the tolerance judges. Needs a trace of layer or op
  // detail (coarser ones merge the passes of a stage).
  const bool per_op = pass_detail;
  // CUPTI traces: device work the driver did not tag (op "untagged") and measured passes the
  // simulator does not predict get rows of their own.
  std::map<Op, double> pred_op, meas_op;
  if (per_op) {
    for (const auto& e : layer_pred.trace.events)
      if (e.kind == traces::EventKind::compute && e.stage > 0) pred_op[e.op] += e.duration_ns() * 1e-9;
    for (const auto& e : trace.events)
      if (e.kind == traces::EventKind::compute && (e.stage > 0 || e.op == Op::untagged))
        meas_op[e.op == Op::none ? Op::untagged : e.op] += seconds_within(e, fastest) / steps;
  }
  for (const auto& [op, p] : pred_op) {
    std::optional<double> val;
    if (time_comparable) val = meas_op[op];
    add_term(v, std::string("time:op/") + to_string(op), "s", p, val, kTimeTolerance,
             time_comparable ? "information only" : time_note);
    terms.back().judged = false;
  }
  if (time_comparable && cupti_run)
    for (const auto& [op, val] : meas_op)
      if (!pred_op.count(op)) {
        add_term(v, std::string("time:op/") + to_string(op), "s", 0, val, kTimeTolerance,
            op == Op::untagged ? "information only: device work with no driver tag" : "information only: not predicted");
        terms.back().judged = false;
      }
}

}  // namespace oomb::validation::detail
