// planner/profiles.h: the calibrated profiles `oomb calibrate --points`, `--traces` and
// `--project-to` write are assembled by a library call: the fit recovers the profile that made the
// measurements, every profile says where it came from, and a degenerate fit or an uncalibrated
// source is refused naming the flag.
#include "planner/profiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "core/error.h"
#include "planner_test_util.h"
#include "models/specs.h"
#include "planner/points.h"
#include "simulator/simulator.h"

namespace oomb::planner {
namespace {

using Profiles = testing::TempFiles;

// The h200 with efficiencies and a launch overhead unlike its defaults.
models::GpuSpec known_profile() {
  models::GpuSpec g = models::load_gpu("h200");
  g.efficiency.gemm = 0.62;
  g.efficiency.attention = 0.45;
  g.efficiency.attention_backward = 0.33;
  g.efficiency.memory_bound = 0.55;
  g.launch_overhead_s = 7e-6;
  return g;
}

// Runs that tell the parameters apart: shapes, contexts, chunks, checkpointing and the schedule.
const char* kRuns[] = {
    "qwen2.5-7b,256K,4096,oomb,true,1",       "qwen2.5-7b,64K,2048,oomb,true,28",
    "qwen2.5-7b,32K,4096,oomb,false,28",      "qwen2.5-7b,1M,8192,oomb,true,2",
    "qwen2.5-0.5b,128K,1024,oomb,true,24",    "qwen2.5-0.5b,16K,512,oomb,true,2",
    "qwen2.5-0.5b,8K,256,oomb,false,24",      "qwen2.5-0.5b,512K,4096,oomb,false,24",
    "qwen2.5-1.5b,32K,4096,standard,true,28", "qwen2.5-1.5b,8K,4096,standard,false,28",
    "llama-3.1-8b,512K,8192,oomb,true,2",     "llama-3.1-8b,16K,1024,oomb,true,32",
    "qwen2.5-3b,96K,2048,oomb,false,36",      "qwen2.5-3b,256K,512,oomb,true,36"};
constexpr char kHeader[] = "model,context,chunk,schedule,checkpointing,resident_layers,step_s\n";

TEST_F(Profiles, APointsProfileRecoversTheProfileThatMadeTheStepsAndSaysWhereItCameFrom) {
  // The scenarios as the reader builds them from the file, then their step times on the known profile.
  std::string placeholder = kHeader;
  for (const char* r : kRuns) placeholder += std::string(r) + ",1\n";
  const auto read = read_points(file("placeholder.csv", placeholder), "h200", models::load_gpu("h200"));
  ASSERT_EQ(read.size(), std::size(kRuns));
  std::ostringstream csv;
  csv << kHeader;
  csv.precision(17);
  std::vector<double> truth_s;
  for (size_t i = 0; i < read.size(); ++i) {
    simulator::Scenario s = read[i].scenario;
    s.gpu = known_profile();
    truth_s.push_back(simulator::evaluate(s).step_s);
    csv << kRuns[i] << "," << truth_s.back() << "\n";
  }
  const std::string path = file("runs.csv", csv.str());

  const PointsProfile p = fit_profile_to_points("h200", models::load_gpu("h200"), {path}, {}, "");
  const models::GpuSpec truth = known_profile();
  EXPECT_NEAR(p.fit.profile.efficiency.gemm, truth.efficiency.gemm, 1e-6);
  EXPECT_NEAR(p.fit.profile.efficiency.attention, truth.efficiency.attention, 1e-6);
  EXPECT_NEAR(p.fit.profile.efficiency.attention_backward, truth.efficiency.attention_backward, 1e-6);
  EXPECT_NEAR(p.fit.profile.efficiency.memory_bound, truth.efficiency.memory_bound, 1e-6);
  EXPECT_NEAR(p.fit.profile.launch_overhead_s, truth.launch_overhead_s, 1e-12);

  // The written profile: loadable, named, with its provenance and one row per point.
  const models::GpuSpec g = models::gpu_from_json(p.json, "profile");
  EXPECT_EQ(g.id, "h200-calibrated");
  EXPECT_NE(g.calibrated_from.find("14 measured step(s)"), std::string::npos) << g.calibrated_from;
  EXPECT_NE(g.calibrated_from.find(path), std::string::npos) << g.calibrated_from;
  EXPECT_NEAR(g.efficiency.gemm, truth.efficiency.gemm, 1e-6);
  const Json& rows = p.json["calibration"]["points"];
  ASSERT_EQ(rows.size(), std::size(kRuns));
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(rows[i]["measured_step_s"].get<double>(), truth_s[i], truth_s[i] * 1e-12);
    EXPECT_NEAR(rows[i]["predicted_step_s"].get<double>(), truth_s[i], truth_s[i] * 1e-6);
  }
  EXPECT_FALSE(p.json["calibration"].contains("residuals"));  // one sample per point: the rows say it
  EXPECT_EQ(fit_profile_to_points("h200", models::load_gpu("h200"), {path}, {}, "mine").json["id"], "mine");
}

TEST_F(Profiles, ADegenerateFitIsRefusedNamingTheFlag) {
  simulator::FitResult fit;
  fit.efficiency = known_profile().efficiency;
  fit.r2 = 0.99;
  EXPECT_NO_THROW(check_fit(fit, "--points"));
  fit.r2 = std::numeric_limits<double>::quiet_NaN();
  fit.trace_error = {0.0, -0.25};
  try {
    check_fit(fit, "--points");
    FAIL() << "an undefined R^2 was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--points"), std::string::npos) << m;
    EXPECT_NE(m.find("R^2 is undefined"), std::string::npos) << m;
    EXPECT_NE(m.find("no profile written"), std::string::npos) << m;
  }
  fit.r2 = 0.5;
  fit.efficiency.gemm = std::numeric_limits<double>::infinity();
  EXPECT_THROW(check_fit(fit, "--traces"), Error);
  // Three copies of one run cannot tell the classes apart: refused naming the parameter, no profile.
  std::string same = kHeader;
  for (int i = 0; i < 3; ++i) same += "qwen2.5-0.5b,16K,512,oomb,true,2,0.5\n";
  try {
    fit_profile_to_points("h200", models::load_gpu("h200"), {file("same.csv", same)}, {}, "");
    FAIL() << "an undetermined fit made a profile";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not determined by these points"), std::string::npos) << e.what();
  }
}

TEST_F(Profiles, AProjectionKeepsTheCalibratedEfficienciesOnTheTargetsPeaks) {
  models::GpuSpec cal = known_profile();
  EXPECT_THROW(project_profile(file("plain.json", cal.to_json().dump()), "h100-sxm", ""), Error);  // not calibrated
  try {
    project_profile(file("plain2.json", cal.to_json().dump()), "h100-sxm", "");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--gpu"), std::string::npos) << e.what();
  }
  cal.id = "h200-mine";
  cal.calibrated_from = "a test";
  const Projection p = project_profile(file("cal.json", cal.to_json().dump()), "h100-sxm", "");
  const models::GpuSpec h100 = models::load_gpu("h100-sxm");
  EXPECT_EQ(p.profile.id, "h100-sxm-projected");
  EXPECT_DOUBLE_EQ(p.profile.efficiency.gemm, 0.62);
  EXPECT_DOUBLE_EQ(p.profile.efficiency.attention_backward, 0.33);
  EXPECT_DOUBLE_EQ(p.profile.bf16_flops_per_s, h100.bf16_flops_per_s);
  EXPECT_EQ(p.profile.hbm_capacity_bytes, h100.hbm_capacity_bytes);
  EXPECT_NE(p.profile.calibrated_from.find("projected from h200-mine (a test) to h100-sxm"), std::string::npos)
      << p.profile.calibrated_from;
  EXPECT_FALSE(p.other_kind);
  EXPECT_NO_THROW(models::gpu_from_json(p.profile.to_json(), "projection"));
}

}  // namespace
}  // namespace oomb::planner
