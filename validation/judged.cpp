#include "validation/judged.h"

#include <algorithm>

namespace oomb::validation::detail {

StepWindow fastest_step(const traces::Trace& t) {
  StepWindow w;
  for (const auto& e : t.events) {
    if (e.kind != traces::EventKind::phase || e.name != traces::kStepPhase || e.end_ns <= e.start_ns) continue;
    ++w.count;
    if (!w.found || e.end_ns - e.start_ns < w.end_ns - w.start_ns) w.found = true, w.start_ns = e.start_ns, w.end_ns = e.end_ns;
  }
  return w;
}

double seconds_within(const traces::Event& e, const StepWindow& w) {
  if (!w.found) return static_cast<double>(e.duration_ns()) * 1e-9;
  const int64_t b = std::max(e.start_ns, w.start_ns), f = std::min(e.end_ns, w.end_ns);
  return f > b ? static_cast<double>(f - b) * 1e-9 : 0.0;
}

bool in_window(const traces::Event& e, const StepWindow& w) {
  return !w.found || (e.start_ns >= w.start_ns && e.end_ns <= w.end_ns);
}

void add_term(Validation& v, std::string name, std::string unit, double predicted, std::optional<double> measured,
              double tolerance, std::string note) {
  v.terms.push_back({std::move(name), std::move(unit), predicted, measured, tolerance, std::move(note)});
}

}  // namespace oomb::validation::detail
