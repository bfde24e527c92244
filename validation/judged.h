#pragma once
// Inside validate_run (not for callers): the run being judged, what of it is comparable, and one
// function per family of terms (memory, copies, collectives, event order, times). validate_run
// decides comparability once and calls the families in the order their terms are printed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "simulator/simulator.h"
#include "step/run_record.h"
#include "traces/trace.h"
#include "validation/validation.h"

namespace oomb::validation::detail {

// The shortest of a trace's step phases (traces::kStepPhase): the fastest timed step.
struct StepWindow {
  bool found = false;
  int64_t start_ns = 0, end_ns = 0;
  int64_t count = 0;  // step phases in the trace
};
StepWindow fastest_step(const traces::Trace& t);
// e's seconds inside w (all of them without a window).
double seconds_within(const traces::Event& e, const StepWindow& w);
// e lies inside w (always, without a window).
bool in_window(const traces::Event& e, const StepWindow& w);

// A run of the plan, as validate_run found it: what ran, what was predicted for what ran (the
// scenario with the run's dtypes and peak measure), and which of its measurements compare.
struct Judged {
  Judged(const traces::Trace& t, const step::RunRecord& r, const simulator::Scenario& sc, const simulator::EventResult& p)
      : trace(t), run(r), s(sc), pred(p) {}
  const traces::Trace& trace;
  const step::RunRecord& run;
  const simulator::Scenario& s;             // the plan's scenario, as run
  const simulator::EventResult& pred;       // its event simulation at chunk detail
  bool cpu_run = false, cupti_run = false, executor_run = false;
  bool sparse = false;
  bool pass_detail = false;                 // a trace of layer or op detail: its passes can be told apart
  std::string backend;                      // "cpu" | "cuda": the backend that ran
  bool time_comparable = false;             // the plan's profile describes the device and threads that ran
  std::string time_note;                    // why times are not comparable ("" when they are)
  double copy_tolerance = 0;                // pools and copies: exact dense, the selection assumption sparse
  std::string sparse_note;                  // "" dense; the selection-overlap assumption sparse
  StepWindow fastest;                       // the fastest timed step of the trace
};

// Appends one term.
void add_term(Validation& v, std::string name, std::string unit, double predicted, std::optional<double> measured,
              double tolerance, std::string note = {});

// Device and host memory: the peak and its breakdown, CUDA's reserved bound, the page pools.
void memory_terms(const Judged& j, Validation& v);
// The bytes copied each way per step (h2d_bytes, then the collectives, then d2h_bytes).
struct CopyPrediction {
  int64_t h2d_bytes = 0, d2h_bytes = 0;
  std::string note;
};
CopyPrediction predict_copies(const Judged& j);
// The collectives of tensor and data parallelism: count, bytes and transfer time.
void collective_terms(const Judged& j, Validation& v);
// The event order: the compute stream's passes in the simulator's order, copies inside their pass.
void order_terms(const Judged& j, const simulator::EventResult& layer_pred, Validation& v);
// Step, exposed copy, stage and pass times.
void time_terms(const Judged& j, const simulator::EventResult& layer_pred, Validation& v);

}  // namespace oomb::validation::detail
