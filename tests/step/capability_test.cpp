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

}  // namespace
}  // namespace oomb::step
