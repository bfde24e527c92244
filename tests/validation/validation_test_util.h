#pragma once
// Shared set-up for the validation tests: run records that measured exactly a prediction, and a
// validation's terms by name (the planner tests' requests and temporary folders beside them).
#include <string>

#include "step/run_record.h"
#include "tests/planner/planner_test_util.h"
#include "traces/trace.h"
#include "validation/validation.h"

namespace oomb::validation::testing {

using planner::testing::request;
using planner::testing::TempFiles;

// A CUPTI-timed cuda run record of `s` that measured exactly the prediction (its peaks as allocated),
// one step of `step_s` (the prediction's when negative).
inline traces::Trace cuda_record_as_predicted(const simulator::Scenario& s, double step_s = -1) {
  simulator::Scenario as_run = s;
  as_run.config.peak_measure = step::PeakMeasure::allocated;
  const simulator::Summary p = simulator::evaluate(as_run);
  traces::Trace t;
  t.metadata.source = "cuda-cupti";
  const Json measured = {{"backend", "cuda"},
                         {"kv_dtype", s.config.kv_dtype},
                         {"kv_grad_dtype", s.config.kv_grad_dtype},
                         {"param_dtype", s.config.param_dtype},
                         {"param_grad_dtype", s.config.param_grad_dtype},
                         {"activation_dtype", s.config.activation_dtype},
                         {"loss_dtype", s.config.loss_dtype},
                         {"steps", 1},
                         {"step_s", step_s < 0 ? p.step_s : step_s},
                         {"peak_device_bytes", p.peak_device_bytes},
                         {"peak_host_bytes", p.peak_host_bytes}};
  t.metadata.extra = {{"schema", step::kRunRecordSchema},
                      {"model", s.model.id},
                      {"layers", s.model.layers},
                      {"config", s.config.to_json()},
                      {"measured", measured}};
  return t;
}

// The term of a validation by name, or null.
inline const ValidationTerm* term(const Validation& v, const std::string& name) {
  for (const auto& t : v.terms)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace oomb::validation::testing
