// LoRA (Config::lora_rank): the buffer table's rows by hand, the backward without the frozen base's
// weight-gradient GEMMs, and the knobs' checks.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"
#include "step/buffers.h"

namespace oomb::simulator {
namespace {

Scenario scenario(const std::string& model, int64_t context) {
  Scenario s;
  s.model = models::load_model(model);
  s.gpu = models::load_gpu("h200");
  s.host = models::load_host(s.gpu.default_host);
  s.config.context_tokens = context;
  s.config.optimizer = step::Optimizer::gpu;
  return s;
}

int64_t row(const step::BufferTable& t, const char* name) {
  const step::BufferRow* r = t.find(name, step::Tier::device);
  return r ? r->bytes : -1;
}

TEST(Lora, RowsOfQwen7bRank16OnQueryAndValueByHand) {
  Scenario s = scenario("qwen2.5-7b", 64 * 1024);
  s.config.lora_rank = 16;  // targets: PEFT's default for qwen2, q_proj and v_proj
  const int64_t h = 3584, qd = 28 * 128, kvd = 4 * 128, L = 28, r = 16;
  const int64_t adapters = L * (r * (h + qd) + r * (h + kvd));  // A [r, in] and B [out, r] per target
  ASSERT_EQ(adapters, 5'046'272);
  const step::BufferTable lora = step::buffer_table(s.model, s.config, step::target_of(s.gpu));
  Scenario full = s;
  full.config.lora_rank = 0;
  const step::BufferTable ft = step::buffer_table(full.model, full.config, step::target_of(full.gpu));
  EXPECT_EQ(row(lora, "weights"), row(ft, "weights"));  // the frozen base is still there
  EXPECT_EQ(row(lora, "lora_adapters"), adapters * 4);
  EXPECT_EQ(row(ft, "lora_adapters"), -1);
  EXPECT_EQ(row(lora, "parameter_gradients"), adapters * 4);  // none for the base
  EXPECT_EQ(row(lora, "master_weights"), -1);                // the adapters are fp32
  EXPECT_EQ(row(lora, "adamw_moments"), adapters * 8);
  EXPECT_EQ(row(lora, "adamw_decay_mask"), adapters);
  // The rank-r intermediates: r values per target and token more in a layer's working set.
  const int64_t T = s.config.chunk_tokens, act = 2;
  EXPECT_EQ(row(lora, "layer_activations") - row(ft, "layer_activations"), T * 2 * r * act);
  EXPECT_EQ(row(lora, "layer_backward_temporaries") - row(ft, "layer_backward_temporaries"), T * 2 * r * act);
  // Trained embeddings and LM head: their gradients (param-grad dtype) and fp32 master weights join.
  s.config.lora_train_embeddings = true;
  const step::BufferTable emb = step::buffer_table(s.model, s.config, step::target_of(s.gpu));
  const int64_t V = 152064, E = 2 * V * h;  // untied embedding and LM head
  EXPECT_EQ(row(emb, "parameter_gradients"), adapters * 4 + E * 2);
  EXPECT_EQ(row(emb, "master_weights"), E * 4);
  EXPECT_EQ(row(emb, "adamw_moments"), (adapters + E) * 8);
}

TEST(Lora, TensorParallelAdaptersSplitLikeTheirProjections) {
  Scenario s = scenario("qwen2.5-7b", 64 * 1024);
  s.config.lora_rank = 8;
  s.config.lora_targets = {"q_proj", "o_proj"};
  s.config.gpus = 2;
  const step::Geometry g = detail::geometry(s);
  const int64_t h = 3584, qd = 3584, r = 8;
  // q_proj column-parallel: A [r, h] whole, B [qd / 2, r]; o_proj row-parallel: A [r, qd / 2], B [h, r] whole.
  EXPECT_EQ(g.lora_layer_params, (r * h + r * qd / 2) + (r * qd / 2 + r * h));
  EXPECT_EQ(g.lora_width, 2 * r);
}

TEST(Lora, TheBackwardSkipsTheFrozenBasesWeightGradients) {
  // A short context (GEMM-bound): full fine-tuning's layer backward does 2 forwards' worth of GEMMs
  // (dX and dW), LoRA's 1 (dX) plus the adapters' dX and dW.
  Scenario full = scenario("qwen2.5-7b", 8 * 1024);
  full.config.checkpointing = false;
  Scenario lora = full;
  lora.config.lora_rank = 16;
  const Summary f = evaluate(full), l = evaluate(lora);
  EXPECT_LT(l.step_s, f.step_s);
  EXPECT_LT(l.peak_device_bytes, f.peak_device_bytes);
  const step::Geometry g = detail::geometry(full);
  const detail::ChunkCosts cf = detail::chunk_costs(full, g, 0), cl = detail::chunk_costs(lora, detail::geometry(lora), 0);
  const double T = 4096, base = 2.0 * T * (3584.0 * 3584 + 2 * 3584.0 * 512 + 3584.0 * 3584 + 3 * 3584.0 * 18944);
  const double adapter = 2.0 * T * static_cast<double>(detail::geometry(lora).lora_layer_params);
  // backward_kept (no recompute): full 2 x base; LoRA base + 2 x adapter; attention flops equal.
  EXPECT_NEAR((cf.backward_kept.flops - cl.backward_kept.flops) / base, (2 * base - (base + 2 * adapter)) / base, 1e-9);
  // The forward gains the adapters' GEMMs.
  EXPECT_NEAR(cl.fill.flops - cf.fill.flops, adapter, 1);
  // The frozen LM head: forward and input gradient, no weight gradient (2 of 3 GEMMs).
  EXPECT_NEAR(cl.head.flops / cf.head.flops, 2.0 / 3.0, 1e-12);
}

TEST(Lora, KnobsAreChecked) {
  Scenario s = scenario("qwen2.5-7b", 64 * 1024);
  s.config.lora_rank = 16;
  s.config.lora_targets = {"q_proj", "qkv"};
  try {
    validate(s.config, s.model);
    FAIL() << "an unknown target was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lora-targets"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qkv"), std::string::npos) << e.what();
  }
  s.config.lora_targets = {"q_proj", "q_proj"};
  EXPECT_THROW(validate(s.config, s.model), Error);
  s.config.lora_targets = {};
  EXPECT_THROW(validate(s.config, s.model), Error);
  s.config.lora_targets = {"v_proj"};
  s.config.lora_rank = 600;  // beyond kv_dim 512
  EXPECT_THROW(validate(s.config, s.model), Error);
  s.config.lora_rank = 16;
  s.config.lora_alpha = 0;
  EXPECT_THROW(validate(s.config, s.model), Error);
  EXPECT_EQ(step::lora_targets_from_string("all-linear", "--lora-targets").size(), 7u);
  EXPECT_EQ(step::lora_targets_from_string("q_proj, v_proj", "--lora-targets"),
            (std::vector<std::string>{"q_proj", "v_proj"}));
  // The configuration round-trips through a plan's JSON; documents before LoRA are full fine-tuning.
  s.config.lora_alpha = 32;
  s.config.lora_targets = {"q_proj", "down_proj"};
  const step::Config back = step::config_from_json(s.config.to_json(), "config");
  EXPECT_EQ(back.lora_rank, 16);
  EXPECT_EQ(back.lora_alpha, 32);
  EXPECT_EQ(back.lora_targets, s.config.lora_targets);
  Json old = s.config.to_json();
  old.erase("lora_rank");
  old.erase("lora_targets");
  EXPECT_EQ(step::config_from_json(old, "config").lora_rank, 0);
}

}  // namespace
}  // namespace oomb::simulator
