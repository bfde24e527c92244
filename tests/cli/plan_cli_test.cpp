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

// --page-copy-latency: the published write-back's per-copy cost, an uncited preset term
// (docs/model.md, pages in flight), as a what-if flag of plan and simulate; with the preset's value
// it changes nothing, a dearer copy piles more pages up at long context, and without the published
// preset it is refused by name.
TEST_F(PlanCli, ThePublishedCopyLatencyIsAWhatIfOfThePublishedPresetOnly) {
  const std::string published = "simulate --preset oomb-published --model qwen2.5-7b --gpu h200 --context 256K --json";
  auto peak = [](const CliRun& r) {
    EXPECT_EQ(r.rc, 0) << r.out;
    return r.rc == 0 ? oomb::parse_json(r.out, "stdout").at("peak_device_bytes").get<int64_t>() : int64_t{-1};
  };
  const int64_t preset = peak(oomb::test::run_oomb(published, true));
  EXPECT_EQ(peak(oomb::test::run_oomb(published + " --page-copy-latency 1e-05", true)), preset);
  const int64_t dearer = peak(oomb::test::run_oomb(published + " --page-copy-latency 2e-05", true));
  EXPECT_GT(dearer, preset);
  // The extra bytes are pages in flight: whole KV + gradient pages (128 tokens, 4 KV heads of 128).
  EXPECT_EQ((dearer - preset) % (128 * 4 * 128 * (2 * 2 + 2 * 4)), 0) << dearer - preset;
  // plan keeps it (the plan file carries it in its config).
  const CliRun p = run("--preset oomb-published --model qwen2.5-7b --gpu h200 --context 256K --page-copy-latency 2e-05 "
                       "--json", true);
  ASSERT_EQ(p.rc, 0) << p.out;
  EXPECT_EQ(oomb::parse_json(p.out, "stdout").at("plan").at("config").at("page_copy_latency_s").get<double>(), 2e-05);
  for (const char* bad : {"--page-copy-latency 2e-05", "--preset oomb --page-copy-latency 2e-05"}) {
    const CliRun r = oomb::test::run_oomb("simulate --model qwen2.5-7b --gpu h200 --context 256K " + std::string(bad));
    EXPECT_EQ(r.rc, 2) << r.out;
    EXPECT_NE(r.out.find("--page-copy-latency"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("add --preset oomb-published"), std::string::npos) << r.out;
  }
  for (const char* v : {"-1e-06", "nan", "0.5"}) {
    const CliRun r = oomb::test::run_oomb(published + " --page-copy-latency " + v);
    EXPECT_EQ(r.rc, 2) << v << ": " << r.out;
    EXPECT_NE(r.out.find("--page-copy-latency"), std::string::npos) << r.out;
  }
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
