#include <optional>
#include <string>

#include "core/format.h"
#include "step/buffers.h"
#include "validation/judged.h"

namespace oomb::validation::detail {

using namespace simulator;

CopyPrediction predict_copies(const Judged& j) {
  const Scenario& s = j.s;
  const EventResult& pred = j.pred;
  // The executor keeps bounded-mode page summaries in the host tier and its kernels read them in
  // place (executor/README.md, known limits): its copies are predicted without the summaries'
  // streaming, i.e. as with the summaries on the device.
  CopyPrediction c{pred.summary.h2d_bytes, pred.summary.d2h_bytes, j.sparse_note};
  if (j.sparse && s.config.selection_memory == step::SelectionMemory::bounded) {
    Scenario in_place = s;
    in_place.config.selection_memory = step::SelectionMemory::device;
    const auto ip = simulate_events(in_place, traces::Detail::step).summary;
    c.h2d_bytes = ip.h2d_bytes;
    c.d2h_bytes = ip.d2h_bytes;
    c.note += "; without the page summaries' streaming (" + format_bytes(pred.summary.h2d_bytes - ip.h2d_bytes) +
              " in, " + format_bytes(pred.summary.d2h_bytes - ip.d2h_bytes) +
              " out): the executor reads them in the host tier in place";
  }
  return c;
}

// Collective time (docs/model.md "Communication"): what the collectives cost once every rank has
// arrived (the transfer), judged against the prediction. A rank's wait for the slowest one is the
// ranks' skew (what they computed at different speeds since they last met): the step of the
// slowest rank holds it, which validate judges through step_s; it is reported, not predicted.
// Comparable on the CPU backend with a shared clock (the ranks on one host); NCCL's collectives
// run on the device stream, where a host-timed call is only its enqueue.
void collective_terms(const Judged& j, Validation& v) {
  const step::RunRecord& run = j.run;
  const Scenario& s = j.s;
  const EventResult& pred = j.pred;
  const std::string& backend = j.backend;
  const bool time_comparable = j.time_comparable;
  const std::string& time_note = j.time_note;
  std::vector<std::string>& notes = v.notes;
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
    add_term(v, "tp_allreduces", "calls", static_cast<double>(pred.summary.tp_allreduces),
        static_cast<double>(run.tp_allreduces), kExactTolerance, rank);
    add_term(v, "tp_allreduce_bytes", "bytes", static_cast<double>(pred.summary.tp_allreduce_bytes),
        static_cast<double>(run.tp_allreduce_bytes), kExactTolerance, rank);
    if (run.collective_times_recorded) {
      std::optional<double> meas;
      if (comm_comparable) meas = run.tp_allreduce_transfer_s;
      add_term(v, "tp_allreduce_s", "s", pred.summary.tp_allreduce_s, meas, kTimeTolerance, comm_note);
      wait_note("tensor-parallel all-reduces", run.tp_allreduce_wait_s);
    }
  }
  if (s.config.data_parallel > 1 && run.world > run.tp && pred.summary.allreduce_bytes > 0) {
    add_term(v, "allreduce_bytes", "bytes", static_cast<double>(pred.summary.allreduce_bytes),
        static_cast<double>(run.allreduce_bytes), kExactTolerance, "the gradient all-reduce, per rank");
    if (run.collective_times_recorded) {
      std::optional<double> meas;
      if (comm_comparable) meas = run.allreduce_transfer_s;
      add_term(v, "gradient_allreduce_s", "s", pred.summary.allreduce_s, meas, kTimeTolerance, comm_note);
      wait_note("gradient all-reduce", run.allreduce_wait_s);
    }
  }
}

}  // namespace oomb::validation::detail
