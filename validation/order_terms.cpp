#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "validation/judged.h"

namespace oomb::validation::detail {

using namespace simulator;

namespace {

// Event order (issue 42: a trace measured on the emulated device has no GPU times, but the order of
// its work is the program's). A pass is one (stage, chunk, layer, op) of the compute stream.
struct Pass {
  int stage = -1;
  int64_t chunk = -1, layer = -1;
  Op op = Op::none;
  bool operator==(const Pass& o) const {
    return stage == o.stage && chunk == o.chunk && layer == o.layer && op == o.op;
  }
  bool operator<(const Pass& o) const {
    return std::tie(stage, chunk, layer, op) < std::tie(o.stage, o.chunk, o.layer, o.op);
  }
};
Pass pass_of(const traces::Event& e) { return {e.stage, e.chunk, e.layer, e.op}; }
std::string pass_text(const Pass& p) {
  std::string s = p.op == Op::none ? "(no op)" : to_string(p.op);
  if (p.stage > 0) s += " stage " + std::to_string(p.stage);
  if (p.chunk >= 0) s += " chunk " + std::to_string(p.chunk);
  if (p.layer >= 0) s += " layer " + std::to_string(p.layer);
  return s;
}
// The passes of the compute stream in the order they started (a pass's kernels or ops merged),
// those of `ops` only.
std::vector<Pass> pass_order(const std::vector<traces::Event>& events, const StepWindow& w,
                             const std::set<Op>& ops) {
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
void order_terms(const Judged& j, const EventResult& layer_pred, Validation& v) {
  const traces::Trace& trace = j.trace;
  const step::RunRecord& run = j.run;
  const StepWindow& fastest = j.fastest;
  if (!j.executor_run || !j.pass_detail) return;
  const bool one_step = fastest.found || run.steps == 1;
  std::set<Op> predicted_ops, run_compute_ops, run_collective_ops, as_collectives;
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
  std::set<Op> left_out;
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
    auto names = [](const std::set<Op>& ops) {
      std::string out;
      for (const Op op : ops) out += std::string(out.empty() ? "" : ", ") + to_string(op);
      return out;
    };
    if (!left_out.empty()) note += " (not scheduled by the simulator, left out: " + names(left_out) + ")";
    if (!as_collectives.empty()) note += " (run as collectives on the comm lane: " + names(as_collectives) + ")";
  }
  add_term(v, "order:passes", "passes", static_cast<double>(want.size()), meas, kExactTolerance, note);
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
    add_term(v, "order:copies_out_of_order", "copies", 0, static_cast<double>(bad), kExactTolerance,
        bad > 0 ? std::to_string(bad) + " of " + std::to_string(copies) + " copies; first: " + first_bad
                : std::to_string(copies) + " copies tagged with a layer pass: onloads end before their pass ends, "
                                           "offloads start after it starts");
  }
}

}  // namespace oomb::validation::detail
