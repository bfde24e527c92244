// A LoRA training step (adapters on a frozen base, executor/runtime/driver.h) on the CUDA backend
// against the same step on the CPU reference backend, and the step's op scratch: its op_scratch row
// (step/cuda_scratch.h, the LoRA ops declared per target and the frozen base's backward without dW),
// allocated once, with no op asking for more.
#include <gtest/gtest.h>

#include "../executor/test_util.h"
#include "cuda_test_util.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "step/buffers.h"
#include "step/config.h"

namespace oomb::executor::cudatest {
namespace {

// fp32 storage and GEMMs on both backends: summation order only (engine_test.cpp's step bounds).
constexpr double kStepGradRelTol = 1e-4;
constexpr double kStepLossRelTol = 1e-5;
constexpr float kInitStd = 0.1f;
constexpr float kInitBStd = 0.2f;  // B random: with PEFT's zero B every A gradient would be zero

struct LoraStep {
  double loss = 0;
  Gradients grads;
};

step::Config lora_config(const char* targets, int64_t rank) {
  auto c = test::small_config(64, 16, 8, 2);
  c.lora_rank = rank;
  c.lora_alpha = 2.0 * static_cast<double>(rank);  // scale 2
  c.lora_targets = step::lora_targets_from_string(targets, "--lora-targets");
  return c;
}

LoraStep run_lora(Backend& b, const models::ModelSpec& m, const step::Config& c, const Weights& w,
                  const std::vector<int32_t>& tokens) {
  EngineOptions o;
  o.adapters = init_adapters(m, c, 99, kInitBStd);
  Engine e(b, m, c, w, o);
  LoraStep s;
  s.loss = e.step(tokens).loss;
  s.grads = e.gradients();
  return s;
}

class CudaLoraEngine : public CudaTest {};

TEST_F(CudaLoraEngine, AdapterGradientsMatchTheCpuBackend) {
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, 64);
  for (const char* targets : {"q_proj,v_proj", "all-linear"}) {
    SCOPED_TRACE(targets);
    const auto c = lora_config(targets, 3);
    const LoraStep want = run_lora(cpu, m, c, w, tokens);
    const LoraStep got = run_lora(*gpu, m, c, w, tokens);
    EXPECT_NEAR(got.loss, want.loss, kStepLossRelTol * want.loss);
    const auto [err, name] = worst_relative_l2(got.grads, want.grads);
    EXPECT_LE(err, kStepGradRelTol) << "worst tensor " << name;
  }
}

// engine_test.cpp's OpScratchIsItsRowAndNoOpNeedsMore under LoRA: fp32 and bf16 storage, fp32 and
// bf16 GEMMs, two target sets.
TEST_F(CudaLoraEngine, OpScratchIsItsRowAndNoOpNeedsMore) {
  const auto m = test::small_model(2, 4, 2, 16, 32, true, true);
  const Weights w = random_weights(m, 5, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, 64);
  for (CudaGemmPrecision precision : {CudaGemmPrecision::fp32, CudaGemmPrecision::bf16}) {
    CudaBackend b(test_options(precision));
    for (int variant = 0; variant < 4; ++variant) {
      auto c = lora_config(variant & 1 ? "all-linear" : "q_proj,v_proj", 4);
      if (variant & 2) c.param_dtype = c.activation_dtype = c.kv_dtype = Dtype::bf16;
      SCOPED_TRACE(std::string(to_string(precision)) + " GEMMs, variant " + std::to_string(variant));
      int64_t row = -1;
      for (const auto& r : run_rows(m, c, b.target()))
        if (r.name == step::row::kOpScratch) row = r.bytes;
      ASSERT_GT(row, 0);
      EngineOptions o;
      o.adapters = init_adapters(m, c, 3, kInitBStd);
      Engine e(b, m, c, w, o);
      EXPECT_EQ(b.scratch_bytes(), row);
      EXPECT_NO_THROW(e.step(tokens));
      EXPECT_EQ(b.scratch_bytes(), row);
      EXPECT_EQ(b.memory_stats().workspace_grows, 0);
    }
  }
}

}  // namespace
}  // namespace oomb::executor::cudatest
