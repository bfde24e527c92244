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
