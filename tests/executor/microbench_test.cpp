// The micro-benchmarks behind `oomb calibrate --backend` (executor/runtime/microbench.h): a MoE
// model's routed-expert GEMMs are measured at the rows one expert receives and give the profile its
// efficiency.expert_gemm; without a MoE model the profile has none (the large-GEMM figure applies).
#include <gtest/gtest.h>

#include <string>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/microbench.h"
#include "models/specs.h"

namespace oomb::executor {
namespace {

MicrobenchOptions quick(std::vector<models::ModelSpec> models) {
  MicrobenchOptions o;
  o.models = std::move(models);
  o.chunk_tokens = 256;
  o.seconds_per_point = 0.002;
  o.repetitions = 1;
  return o;
}

TEST(Microbench, AMixtureOfExpertsGivesTheExpertGemmEfficiency) {
  CpuBackend backend;
  const models::ModelSpec moe = models::load_model("tiny-moe");
  const MicrobenchResult r = run_microbench(backend, quick({models::load_model("tiny"), moe}));
  // The expert shapes: gate/up (hidden -> fe) and down (fe -> hidden) at chunk x top-k / experts rows.
  int expert_shapes = 0;
  for (const GemmShape& g : r.gemms) {
    if (g.name.find(" expert_") == std::string::npos) continue;
    ++expert_shapes;
    EXPECT_EQ(g.name.rfind("tiny-moe ", 0), 0u) << g.name;
    EXPECT_EQ(g.rows, 256 * moe.moe.experts_per_token / moe.moe.experts) << g.name;
    EXPECT_GT(g.fwd.median, 0) << g.name;
  }
  EXPECT_EQ(expert_shapes, 2);
  ASSERT_EQ(r.models.size(), 2u);
  EXPECT_EQ(r.models[0].expert_gemm_flops_per_s, 0);  // tiny: dense
  EXPECT_GT(r.models[1].expert_gemm_flops_per_s, 0);
  const Json p = device_profile(r, "cpu-test", int64_t{1} << 30);
  ASSERT_TRUE(p["efficiency"].contains("expert_gemm"));
  const double e = p["efficiency"]["expert_gemm"].get<double>();
  EXPECT_GT(e, 0);
  EXPECT_LE(e, 1);
  EXPECT_NEAR(e, r.models[1].expert_gemm_flops_per_s / r.peak_flops_per_s, 1e-12);
  EXPECT_EQ(models::gpu_from_json(p, "cpu-test").efficiency.expert_gemm, e);
  EXPECT_NE(p["sources"]["efficiency.expert_gemm"].get<std::string>().find("one expert receives"), std::string::npos);

  const MicrobenchResult dense = run_microbench(backend, quick({models::load_model("tiny")}));
  const Json q = device_profile(dense, "cpu-test", int64_t{1} << 30);
  EXPECT_FALSE(q["efficiency"].contains("expert_gemm"));
  const models::GpuSpec g = models::gpu_from_json(q, "cpu-test");
  EXPECT_EQ(g.efficiency.expert_gemm, g.efficiency.gemm);
}

}  // namespace
}  // namespace oomb::executor
