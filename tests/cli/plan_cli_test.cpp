// End-to-end: the `oomb plan` subcommand on the built binary: flags, exit codes, output (skipped when
// the oomb executable was not built). The planning itself is tested through the library
// (tests/planner/answer_test.cpp).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>

#include "core/json.h"
#include "planner/plan.h"
#include "cli_run.h"

namespace {

using oomb::test::CliRun;
using oomb::test::oomb_binary;

// `oomb plan ARGS`; stderr joins stdout unless `stdout_only` (JSON output, with warnings on stderr).
CliRun run(const std::string& args, bool stdout_only = false) { return oomb::test::run_oomb("plan " + args, stdout_only); }

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(oomb_binary())) GTEST_SKIP() << "oomb executable not built";
  }
};

TEST_F(PlanCli, ReadmeFirstCommand) {
  const CliRun r = run("--model qwen2.5-7b --gpu h200 --context 4M");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* s : {"attention dense (exact gradients)", "Host memory:", "Step time:", "Step time bound by:",
                        "Device memory:", "kv_pool", "Close alternatives"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST_F(PlanCli, JsonAndOut) {
  const std::string path = (std::filesystem::temp_directory_path() / "oomb_plan_cli_test.json").string();
  const CliRun r = run("--model qwen2.5-7b --gpu h200 --context 1M --json --out " + path, true);
  ASSERT_EQ(r.rc, 0) << r.out;
  const oomb::Json j = oomb::parse_json(r.out, "stdout");
  for (const char* k : {"plan", "prediction", "alternatives", "diagnosis"}) EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["plan"]["schema"], "oomb.plan/1");
  EXPECT_TRUE(j["prediction"]["feasible"].get<bool>());
  const auto plan = oomb::planner::load_plan(path);
  EXPECT_EQ(plan.to_json(), j["plan"]);
  std::filesystem::remove(path);
}

TEST_F(PlanCli, MaxContextParetoAndInfeasible) {
  CliRun r = run("--model qwen2.5-7b --gpu a100-80gb-sxm --max-context");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("dense (exact gradients)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sparse (approximate)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("limited by device memory"), std::string::npos) << r.out;
  r = run("--model qwen2.5-7b --gpu h200 --context 1M --pareto");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("Pareto frontier"), std::string::npos) << r.out;
  r = run("--model qwen2.5-7b --gpu h200 --host workstation-128g --context 4M");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("NO PLAN FITS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("host"), std::string::npos) << r.out;
  r = run("--model qwen2.5-32b --gpu h200 --context 2M");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("SPARSE FALLBACK"), std::string::npos) << r.out;
  r = run("--model qwen2.5-7b --gpu h200 --context 4M --gpus 2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("mpirun -np 2 oomb run --plan P --backend cuda"), std::string::npos) << r.out;
}

TEST_F(PlanCli, BadInputExitsWithTwo) {
  const std::string path = (std::filesystem::temp_directory_path() / "oomb_plan_cli_missing_dir/x/plan.json").string();
  for (const std::string& args :
       {std::string("--model nope --context 4M"), std::string("--gpu nope --context 4M"),
        std::string("--context 4M --host nope"), std::string("--context 16K --attention sparse --budget 1000"),
        std::string("--context 4M --chunk 128 --page 256"), std::string("--context 4M --gpus 16"),
        std::string("--context 4M --gpus 3"), std::string("--context 0"), std::string("--context -1"),
        std::string("--context 4M --headroom -0.5"), std::string("--context 4M --min-budget 0"),
        std::string("--context 4M --resident-layers 0"), std::string("--context 4M --objective fastest"),
        std::string("--max-context --context 4M"), std::string(""), std::string("--context 1M --out " + path)}) {
    const CliRun r = run(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("error"), std::string::npos) << args << "\n" << r.out;
  }
}

}  // namespace
