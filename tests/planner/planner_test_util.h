#pragma once
// Shared set-up for the planner tests: a request over catalog specs, as the CLI builds it.
#include <set>
#include <string>

#include "models/specs.h"
#include "planner/search.h"
#include "planner/validation.h"

namespace oomb::planner::testing {

inline Request request(const std::string& model, const std::string& gpu, const std::string& host = "",
                       std::set<std::string> fixed = {}) {
  Request r;
  r.scenario.model = models::load_model(model);
  r.scenario.gpu = models::load_gpu(gpu);
  r.scenario.host = models::load_host(host.empty() ? r.scenario.gpu.default_host : host);
  r.host_explicit = !host.empty();
  r.fixed = std::move(fixed);
  return r;
}

// Re-evaluates a configuration from scratch: does it fit under the request's limits?
inline bool fits_under_evaluate(const Request& r, const simulator::Config& c) {
  simulator::Scenario s = r.scenario;
  s.config = c;
  const simulator::Summary sum = simulator::evaluate(s);
  return sum.feasible && usage_of(s, sum, r.headroom).fits();
}

// The term of a validation by name, or null.
inline const ValidationTerm* term(const Validation& v, const std::string& name) {
  for (const auto& t : v.terms)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace oomb::planner::testing
