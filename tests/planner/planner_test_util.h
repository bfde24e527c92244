#pragma once
// Shared set-up for the planner tests: a request over catalog specs, as the CLI builds it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "models/specs.h"
#include "planner/search.h"
#include "planner/validation.h"
#include "step/run_record.h"
#include "traces/trace.h"

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
inline bool fits_under_evaluate(const Request& r, const step::Config& c) {
  simulator::Scenario s = r.scenario;
  s.config = c;
  const simulator::Summary sum = simulator::evaluate(s);
  return sum.feasible && usage_of(s, sum, r.headroom).fits();
}

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

// A test with its own temporary folder (removed after it): file(name, text) writes one file there.
class TempFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("oomb_planner_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string file(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }
  std::filesystem::path dir_;
};

}  // namespace oomb::planner::testing
