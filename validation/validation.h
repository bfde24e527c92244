#pragma once
// Closing the loop (DESIGN.md section 6): a measured run next to the prediction for the same plan,
// term by term, with the tolerances that judge it. `oomb validate` prints this; the GUI's overlay
// shows the same verdict from the same function.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simulator/simulator.h"
#include "traces/trace.h"

namespace oomb::validation {

// Default tolerances (fractions): memory and bytes that the schedule fixes are exact in dense
// mode; sparse copies depend on the selection-union assumption; whole-buffer peaks and times are
// model-level estimates.
inline constexpr double kExactTolerance = 0.0;
inline constexpr double kSparseCopiesTolerance = 0.5;
inline constexpr double kPeakBytesTolerance = 0.01;      // device: the buffer table, predicted and allocated
inline constexpr double kPeakHostBytesTolerance = 0.25;
inline constexpr double kOutsideBytesTolerance = 0.25;   // numbers measured outside oomb (--measured)
inline constexpr double kTimeTolerance = 0.25;

struct ValidationTerm {
  std::string name, unit;  // unit: "bytes", "pages", "s", "tokens/s"
  double predicted = 0;
  std::optional<double> measured;  // empty: not comparable
  double tolerance = 0;
  std::string note;
  bool judged = true;  // false: shown for information only
  bool at_most = false;  // a bound: ok when measured <= predicted x (1 + tolerance), however much lower
  double error() const;              // (measured - predicted) / predicted
  std::optional<bool> ok() const;    // empty when not judged or not comparable
};

struct Validation {
  std::vector<ValidationTerm> terms;
  std::vector<std::string> notes;
  // Sparse runs: the --selection-overlap the run's measured unions imply (step::implied_overlap, at
  // the largest union); empty when the run recorded no informative union.
  std::optional<double> implied_selection_overlap;
  bool ok = true;  // every judged, comparable term within its tolerance
  simulator::EventResult prediction;  // the event simulation the terms were taken from (chunk detail)
};

struct ValidationRequest {
  const traces::Trace* trace = nullptr;  // a trace of `oomb run --trace`
  std::string trace_where;               // its file (named in errors)
  // The plan's scenario, or (plan_where empty) one built from the trace's run record on a profile.
  simulator::Scenario scenario;
  std::string plan_where;                // the plan file ("" = none)
  std::vector<std::pair<std::string, double>> tolerances;  // overrides by term name
};

// Throws oomb::Error naming the file and key when the trace is not a run of the plan, or a
// tolerance names no term.
Validation validate_run(const ValidationRequest& r);

// `--measured NAME=VALUE,...` against a plan's prediction (numbers measured outside oomb).
Validation validate_numbers(const simulator::Scenario& plan, const std::vector<std::pair<std::string, double>>& given,
                            const std::vector<std::pair<std::string, double>>& tolerances);

}  // namespace oomb::validation
