// The one description of a configuration as text (step/describe.h): each knob's words, and the
// ordered list plan, simulate, run, the report and the GUI print.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/specs.h"
#include "step/describe.h"

namespace oomb::step {
namespace {

Config oomb_config() {
  Config c;
  c.context_tokens = 64 * 1024;
  c.chunk_tokens = 4096;
  c.page_tokens = 128;
  c.resident_layers = 2;
  return c;
}

TEST(Describe, ResidencyNamesTheLayersAndWhetherPagesAreOffloaded) {
  const models::ModelSpec m = models::load_model("qwen2.5-7b");
  Config c = oomb_config();
  EXPECT_EQ(residency_text(c, m), "2 of 28 layers resident (offload)");
  c.resident_layers = 28;
  EXPECT_EQ(residency_text(c, m), "all 28 layers resident (no offload)");
  c.layers_override = 4;  // --layers 4: the run's layers
  c.resident_layers = 4;
  EXPECT_EQ(residency_text(c, m), "all 4 layers resident (no offload)");
}

TEST(Describe, AttentionBudgetLogitsAndCheckpointing) {
  const models::ModelSpec m = models::load_model("qwen2.5-7b");
  Config c = oomb_config();
  EXPECT_EQ(attention_text(c), "dense");
  c.attention = Attention::sparse;
  c.page_budget = 64;
  c.selection = "published";
  EXPECT_EQ(budget_text(c), "budget 64 pages of 128 = 8K attended tokens");
  EXPECT_EQ(attention_text(c), "sparse (budget 64 pages of 128 = 8K attended tokens, published)");
  c.logits_chunk_tokens = 1024;
  EXPECT_EQ(logits_text(c), "logits in fused 1K tiles");
  c.logits_chunk_tokens = 0;
  EXPECT_EQ(logits_text(c), "logits unfused (whole chunk)");
  c.checkpointing = false;
  EXPECT_EQ(checkpointing_text(c, m), "checkpointing off");
  EXPECT_EQ(recompute_text(c, m), "checkpointing off (every layer's activations kept: no recompute)");
  c.checkpointing = true;
  c.kept_layers = 0;
  EXPECT_EQ(checkpointing_text(c, m), "checkpointing on");
  c.kept_layers = 2;
  EXPECT_EQ(checkpointing_text(c, m), "checkpointing on, last 2 of 28 layers kept");
  // The long form starts with the short one: one wording.
  EXPECT_EQ(recompute_text(c, m).rfind(checkpointing_text(c, m) + " (", 0), 0u) << recompute_text(c, m);
  EXPECT_NE(recompute_text(c, m).find("the other 26 are recomputed"), std::string::npos);
}

TEST(Describe, DtypesAndParallelism) {
  Config c = oomb_config();
  c.kv_dtype = Dtype::bf16;
  c.kv_grad_dtype = Dtype::fp32;
  c.param_dtype = Dtype::bf16;
  c.param_grad_dtype = Dtype::bf16;
  EXPECT_EQ(dtypes_text(c), "KV bf16, KV-grad fp32, params bf16, param-grad bf16");
  c.schedule = Schedule::standard;  // no pages
  EXPECT_EQ(dtypes_text(c), "params bf16, param-grad bf16");
  EXPECT_EQ(parallelism_text(c), "");
  c.gpus = 2;
  c.data_parallel = 4;
  c.nodes = 2;
  c.shard_optimizer = true;
  EXPECT_EQ(parallelism_text(c),
            "tensor parallel x2, 4 data-parallel replicas on 2 nodes, AdamW state sharded over the 4 data-parallel "
            "replicas (ZeRO-1)");
}

// The list every printer walks: one knob per line, in one order, each in the words above.
TEST(Describe, ListsEveryKnobOnceInOneOrder) {
  const models::ModelSpec m = models::load_model("qwen2.5-7b");
  Config c = oomb_config();
  c.kept_layers = 2;
  c.optimizer = Optimizer::host;
  std::vector<std::string> knobs;
  for (const ConfigFact& f : describe(c, m)) knobs.push_back(f.knob);
  EXPECT_EQ(knobs, (std::vector<std::string>{"schedule", "attention", "chunk / page", "residency", "dtypes", "loss",
                                             "optimizer", "checkpointing"}));
  const std::vector<ConfigFact> f = describe(c, m);
  EXPECT_EQ(f[0].text, "oomb (chunk-recurrent)");
  EXPECT_EQ(f[2].text, "4K / 128 tokens");
  EXPECT_EQ(f[3].text, residency_text(c, m));
  EXPECT_EQ(f[6].text, "AdamW on the host (updated there)");
  EXPECT_EQ(f[7].text, "on, last 2 of 28 layers kept");
  // The standard schedule has no chunks or residency; parallelism and a layer cut are listed.
  c.schedule = Schedule::standard;
  c.gpus = 2;
  c.layers_override = 4;
  knobs.clear();
  for (const ConfigFact& k : describe(c, m)) knobs.push_back(k.knob);
  EXPECT_EQ(knobs, (std::vector<std::string>{"schedule", "attention", "dtypes", "loss", "optimizer", "checkpointing",
                                             "parallelism", "layers"}));
}

}  // namespace
}  // namespace oomb::step
