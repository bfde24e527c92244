// What the executor runs (step/capability.h): the one check the planner, the runner and the Engine
// ask. Each rule on its own, the target it depends on, and the refusal naming the flag and value.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "step/capability.h"

namespace oomb::step {
namespace {

Target target(BackendKind b) {
  Target t;
  t.backend = b;
  return t;
}

Config runnable() {
  Config c;
  c.context_tokens = 16 * 1024;
  return c;
}

TEST(Capability, TheDefaultsRunOnBothBackends) {
  for (BackendKind b : {BackendKind::cpu, BackendKind::cuda}) {
    const Capability cap = capability(runnable(), target(b));
    EXPECT_TRUE(cap.executable()) << cap.key << ": " << cap.reason;
    EXPECT_TRUE(cap.reason.empty());
  }
  Config c = runnable();
  c.attention = Attention::sparse;
  c.selection = "per-kv-head";
  c.lora_rank = 8;
  c.kv_dtype = c.kv_grad_dtype = Dtype::fp32;
  c.checkpointing = false;
  EXPECT_TRUE(capability(c, target(BackendKind::cuda)).executable());
}

TEST(Capability, EachRuleNamesItsKey) {
  const struct {
    const char* key;
    std::function<void(Config&)> set;
  } cases[] = {
      {"schedule", [](Config& c) { c.schedule = Schedule::standard; }},
      {"selection", [](Config& c) {
         c.attention = Attention::sparse;
         c.selection = "quest";
       }},
      {"lora_train_embeddings", [](Config& c) {
         c.lora_rank = 4;
         c.lora_train_embeddings = true;
       }},
      {"kv_dtype", [](Config& c) { c.kv_dtype = Dtype::fp8; }},
      {"kv_grad_dtype", [](Config& c) { c.kv_grad_dtype = Dtype::fp16; }},
      {"param_dtype", [](Config& c) { c.param_dtype = Dtype::fp16; }},
      {"param_grad_dtype", [](Config& c) { c.param_grad_dtype = Dtype::fp8; }},
      {"activation_dtype", [](Config& c) { c.activation_dtype = Dtype::fp16; }},
      {"loss_dtype", [](Config& c) { c.loss_dtype = Dtype::fp16; }},
      {"lora_rank", [](Config& c) {
         c.lora_rank = 4;
         c.gpus = 2;
       }},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.key);
    Config c = runnable();
    k.set(c);
    for (BackendKind b : {BackendKind::cpu, BackendKind::cuda}) {
      const Capability cap = capability(c, target(b));
      EXPECT_FALSE(cap.executable());
      EXPECT_EQ(cap.key, k.key);
      EXPECT_FALSE(cap.reason.empty());
    }
  }
  // A selection rule matters in sparse mode only.
  Config dense_rule = runnable();
  dense_rule.selection = "moba";
  EXPECT_TRUE(capability(dense_rule, target(BackendKind::cpu)).executable());
}

// The published implementation's table is its own GPU buffers on the CUDA backend only; on the CPU
// backend the table is this executor's and the run is the preset's knobs.
TEST(Capability, ThePublishedPresetRunsOnlyWhereItsTableIsTheExecutors) {
  Config c = published_preset(runnable());
  c.kv_grad_dtype = Dtype::fp32;
  EXPECT_TRUE(capability(c, target(BackendKind::cpu)).executable());
  const Capability gpu = capability(c, target(BackendKind::cuda));
  EXPECT_EQ(gpu.key, "implementation");
}

// Text only where it refuses: the planner's search asks for every candidate.
TEST(Capability, TheReasonSaysWhatIsModelled) {
  Config c = runnable();
  c.kv_dtype = Dtype::fp8;
  const Capability cap = capability(c, target(BackendKind::cpu));
  EXPECT_NE(cap.reason.find("fp32 or bf16"), std::string::npos) << cap.reason;
  EXPECT_NE(cap.reason.find("fp8"), std::string::npos) << cap.reason;
}

TEST(Capability, TheErrorNamesTheFlagAndTheValue) {
  Config c = runnable();
  c.attention = Attention::sparse;
  c.selection = "local";
  const Capability cap = capability(c, target(BackendKind::cpu));
  const Error e = capability_error(cap, c);
  EXPECT_EQ(e.where(), "--selection");
  EXPECT_EQ(e.key(), "local");
  EXPECT_EQ(e.problem(), cap.reason);
  c = runnable();
  c.lora_rank = 4;
  c.lora_train_embeddings = true;
  const Error emb = capability_error(capability(c, target(BackendKind::cuda)), c);
  EXPECT_EQ(emb.where(), "--lora-train-embeddings");
  EXPECT_EQ(emb.key(), "true");
}

// The model's half: the dense families run; what the executor does not compute is named, and a
// plan of it stays on paper (planner::executable says why; the runner and the Engine refuse it).
TEST(Capability, ModelsTheExecutorDoesNotComputeAreNamed) {
  for (const char* id : {"tiny", "qwen2.5-7b", "qwen3-8b", "llama-3.1-8b", "mistral-7b-v0.3"}) {
    const models::ModelSpec m = models::load_model(id);
    EXPECT_TRUE(model_capability(m).executable()) << id << ": " << model_capability(m).reason;
    EXPECT_TRUE(capability(m, runnable(), target(BackendKind::cpu)).executable()) << id;
  }
  const struct {
    const char* id;
    const char* named;
  } cases[] = {{"gpt-oss-20b", "experts stored as mxfp4"},
               {"gemma-3-27b", "gemma3 family"},
               {"llama-4-scout", "llama4 family"}};
  for (const auto& c : cases) {
    const models::ModelSpec m = models::load_model(c.id);
    const Capability cap = capability(m, runnable(), target(BackendKind::cpu));
    EXPECT_EQ(cap.key, "model") << c.id;
    EXPECT_NE(cap.reason.find(c.named), std::string::npos) << cap.reason;
    EXPECT_NE(cap.reason.find("planned, not run"), std::string::npos) << cap.reason;
    const Error e = model_capability_error(cap, m);
    EXPECT_EQ(e.where(), "--model");
    EXPECT_NE(std::string(e.what()).find(c.id), std::string::npos) << e.what();
  }
  // Routed experts with softmax routing run on both backends, in one process; the rest of the
  // configuration space is refused naming its key (step::moe_capability).
  Config fp32 = runnable();
  fp32.param_dtype = fp32.param_grad_dtype = fp32.activation_dtype = fp32.loss_dtype = Dtype::fp32;
  for (const char* id : {"qwen3-30b-a3b", "mixtral-8x7b", "tiny-moe"}) {
    const models::ModelSpec m = models::load_model(id);
    EXPECT_TRUE(model_capability(m).executable()) << id << ": " << model_capability(m).reason;
    EXPECT_TRUE(capability(m, fp32, target(BackendKind::cpu)).executable()) << id;
    EXPECT_TRUE(capability(m, fp32, target(BackendKind::cuda)).executable()) << id;
    EXPECT_TRUE(capability(m, runnable(), target(BackendKind::cuda)).executable()) << id;  // bf16 storage
    Config c = fp32;
    c.data_parallel = 2;
    EXPECT_EQ(capability(m, c, target(BackendKind::cpu)).key, "data_parallel") << id;
    EXPECT_EQ(capability_error(capability(m, c, target(BackendKind::cuda)), c).where(), "--data-parallel");
    c = fp32;
    c.optimizer = Optimizer::host;
    EXPECT_TRUE(capability(m, c, target(BackendKind::cpu)).executable()) << id;
  }
  const models::ModelSpec qmoe = models::load_model("qwen3-30b-a3b");
  const std::vector<std::pair<std::function<void(models::ModelSpec&)>, const char*>> moe_edits = {
      {[](models::ModelSpec& m) { m.moe.routing = models::Routing::sigmoid_topk; }, "sigmoid top-k routing"},
      {[](models::ModelSpec& m) { m.moe.expert_weights = models::WeightFormat::mxfp4; }, "experts stored as mxfp4"},
  };
  for (const auto& [edit, named] : moe_edits) {
    models::ModelSpec m = qmoe;
    edit(m);
    const Capability cap = model_capability(m);
    EXPECT_EQ(cap.key, "model") << named;
    EXPECT_NE(cap.reason.find(named), std::string::npos) << cap.reason;
  }
  // gpt-oss's router and expert biases run (tests/executor/moe_test.cpp, tests/cuda/moe_test.cpp).
  models::ModelSpec moe_biased = qmoe;
  moe_biased.moe.router_bias = moe_biased.moe.expert_bias = true;
  EXPECT_TRUE(model_capability(moe_biased).executable()) << model_capability(moe_biased).reason;
  models::ModelSpec moe_shared = qmoe;  // and shared experts beside the routed ones
  moe_shared.moe.shared_experts = 1, moe_shared.moe.shared_ffn_hidden = 512;
  EXPECT_TRUE(model_capability(moe_shared).executable()) << model_capability(moe_shared).reason;
  // One feature at a time on a dense model: each is named.
  const models::ModelSpec base = models::load_model("qwen3-8b");
  const std::vector<std::pair<std::function<void(models::ModelSpec&)>, const char*>> edits = {
      {[](models::ModelSpec& m) { m.nope_layers = {3}; }, "without RoPE"},
  };
  for (const auto& [edit, named] : edits) {
    models::ModelSpec m = base;
    edit(m);
    const Capability cap = model_capability(m);
    EXPECT_EQ(cap.key, "model") << named;
    EXPECT_NE(cap.reason.find(named), std::string::npos) << cap.reason;
  }
  // GeGLU (Gemma's MLP) runs on a dense family.
  models::ModelSpec geglu = base;
  geglu.mlp = models::Mlp::geglu_tanh;
  EXPECT_TRUE(model_capability(geglu).executable()) << model_capability(geglu).reason;
  // Sandwich norms (Gemma) run on one GPU beside a dense MLP; beside experts and under tensor
  // parallelism they are refused by name.
  models::ModelSpec sandwich = base;
  sandwich.sandwich_norms = true;
  EXPECT_TRUE(model_capability(sandwich).executable()) << model_capability(sandwich).reason;
  Config tp2 = runnable();
  tp2.gpus = 2;
  EXPECT_EQ(attention_capability(sandwich, tp2).key, "gpus");
  models::ModelSpec sandwich_moe = qmoe;
  sandwich_moe.sandwich_norms = true;
  EXPECT_NE(model_capability(sandwich_moe).reason.find("sandwich norms beside experts"), std::string::npos);
  // YaRN (Qwen3 at 128K) runs.
  models::ModelSpec yarn = base;
  yarn.rope_scaling = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  EXPECT_TRUE(model_capability(yarn).executable()) << model_capability(yarn).reason;
  // Attention sinks and local layers run (tests/executor/local_attention_test.cpp) on either
  // backend; sinks on one GPU, refused under tensor parallelism naming --gpus.
  models::ModelSpec sinks = base;
  sinks.attention_sinks = true;
  sinks.layer_attention.assign(static_cast<size_t>(sinks.layers), models::LayerAttention::global);
  sinks.layer_attention[0] = models::LayerAttention::sliding;
  sinks.sliding_window = 128;
  EXPECT_TRUE(capability(sinks, runnable(), target(BackendKind::cpu)).executable());
  EXPECT_TRUE(capability(sinks, runnable(), target(BackendKind::cuda)).executable());
  Config tp = runnable();
  tp.gpus = 2;
  const Capability cap = capability(sinks, tp, target(BackendKind::cuda));
  EXPECT_EQ(cap.key, "gpus");
  EXPECT_EQ(capability_error(cap, tp).where(), "--gpus");
  // An o_proj bias (gpt-oss's attention_bias) runs on one GPU (tests/executor/local_attention_test.cpp,
  // OProjBias) and is refused under tensor parallelism, where the row-parallel sum would add it per rank.
  models::ModelSpec biased = base;
  biased.o_bias = true;
  EXPECT_TRUE(capability(biased, runnable(), target(BackendKind::cpu)).executable());
  EXPECT_TRUE(capability(biased, runnable(), target(BackendKind::cuda)).executable());
  const Capability bias_tp = capability(biased, tp, target(BackendKind::cpu));
  EXPECT_EQ(bias_tp.key, "gpus");
  EXPECT_NE(bias_tp.reason.find("o_proj bias"), std::string::npos) << bias_tp.reason;
}

// Experts, sliding and chunked layers and sandwich norms are priced (plans validate them), and only
// this project's implementation: the published preset, which models a program of dense models,
// is refused naming the preset and what the model has.
TEST(Capability, ModelsWithLayerKindsAndExpertsArePlannedNotPublished) {
  const struct {
    const char* id;
    const char* named;
  } cases[] = {{"gpt-oss-20b", "a mixture of experts"},
               {"qwen3-30b-a3b", "a mixture of experts"},
               {"gemma-3-27b", "layers 52 sliding (1024) + 10 global"},
               {"llama-4-scout", "a mixture of experts"}};
  for (const auto& c : cases) {
    const models::ModelSpec m = models::load_model(c.id);
    EXPECT_NO_THROW(validate(runnable(), m)) << c.id;
    Config published = runnable();
    published.implementation = Implementation::published;
    try {
      validate(published, m);
      ADD_FAILURE() << c.id << " validated with the published preset";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "--preset") << e.what();
      EXPECT_NE(std::string(e.what()).find(c.named), std::string::npos) << c.named << " in " << e.what();
    }
  }
  // Tensor parallelism splits each expert's columns: a --gpus that does not divide them is refused.
  Config tp = runnable();
  tp.gpus = 4;
  models::ModelSpec odd = models::load_model("qwen3-30b-a3b");
  odd.moe.expert_ffn_hidden = 766;  // 4 does not divide it (it divides the heads, 6144 and the vocabulary)
  try {
    validate(tp, odd);
    ADD_FAILURE() << "an expert width 4 does not divide validated under --gpus 4";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "--gpus") << e.what();
    EXPECT_NE(std::string(e.what()).find("766"), std::string::npos) << e.what();
  }
  // LoRA on a MoE model's MLP projections (its experts) is refused by name.
  Config lora = runnable();
  lora.lora_rank = 16;
  lora.lora_targets = {"q_proj", "gate_proj"};
  try {
    validate(lora, models::load_model("gpt-oss-20b"));
    ADD_FAILURE() << "LoRA on experts validated";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "--lora-targets") << e.what();
    EXPECT_EQ(e.key(), "gate_proj") << e.what();
  }
  // Planned (not run) on a dense model: sinks and yarn change no buffer of the step.
  models::ModelSpec yarn = models::load_model("qwen3-8b");
  yarn.rope_scaling = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  yarn.attention_sinks = true;
  EXPECT_NO_THROW(validate(runnable(), yarn));
}

}  // namespace
}  // namespace oomb::step
