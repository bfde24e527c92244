// Layer kinds and experts in oomb.model/1: the counts they give (against the published figures and
// against the arithmetic written out), their JSON, and the refusals of what is malformed.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/specs.h"

namespace oomb::models {
namespace {

const std::vector<std::string> kLayerKindModels = {"qwen3-30b-a3b", "gpt-oss-20b", "gpt-oss-120b",
                                                    "mixtral-8x7b",  "gemma-3-27b", "llama-4-scout"};

// Model cards: totals, and the parameters used per token. Qwen and Mistral count the embedding
// table in their "active" figure; OpenAI's gpt-oss figure leaves it out (its table: 3.61B active of
// 20.91B, 5.13B of 116.83B); Meta's Llama 4 figures include the vision encoder in the 109B total,
// which is not modelled (its language model is 108B).
TEST(LayerKinds, PublishedParameterCounts) {
  struct Card {
    const char* id;
    double total, active;
    bool active_counts_embedding;
  };
  for (const Card& c : {Card{"qwen3-30b-a3b", 30.5e9, 3.3e9, true}, Card{"gpt-oss-20b", 20.91e9, 3.61e9, false},
                        Card{"gpt-oss-120b", 116.83e9, 5.13e9, false}, Card{"mixtral-8x7b", 46.7e9, 12.9e9, true},
                        Card{"llama-4-scout", 108e9, 17e9, true}, Card{"gemma-3-27b", 27.0e9, 27.0e9, true}}) {
    const ModelSpec m = load_model(c.id);
    const double total = static_cast<double>(m.param_count());
    double active = static_cast<double>(m.active_param_count());
    if (!c.active_counts_embedding) active -= static_cast<double>(m.embedding_params());
    EXPECT_NEAR(total / c.total, 1.0, 0.02) << c.id << " total " << total;
    EXPECT_NEAR(active / c.active, 1.0, 0.02) << c.id << " active " << active;
  }
}

// gpt-oss-20b, one layer, written out: attention 2880 x (2 x 4096 + 2 x 512) with q/k/v and o
// biases and 64 sinks; two norms; a router 2880 x 32 with its bias; 32 experts of gate, up, down
// 2880 x 2880 with their biases (2 x 2880 + 2880).
TEST(LayerKinds, GptOss20bCountsWrittenOut) {
  const ModelSpec m = load_model("gpt-oss-20b");
  const int64_t attention = 2880 * (2 * 4096 + 2 * 512) + (4096 + 2 * 512) + 2880 + 64;
  const int64_t norms = 2 * 2880;
  const int64_t router = 2880 * 32 + 32;
  const int64_t expert = 3 * 2880 * 2880 + 3 * 2880;
  EXPECT_EQ(m.layer_params(0), attention + norms + router + 32 * expert);
  EXPECT_EQ(m.params_per_layer(), m.layer_params(0));
  EXPECT_EQ(m.param_count(), 2 * 201088 * 2880 + 24 * m.layer_params(0) + 2880);
  EXPECT_EQ(m.routed_expert_params(), 24 * 32 * expert);
  EXPECT_EQ(m.active_param_count(), m.param_count() - 24 * 28 * expert);
  // KV: 12 global layers grow, K and V of 8 heads x 64 in bf16 (24 KiB a token); 12 sliding layers
  // hold 128 tokens each (3 MiB).
  EXPECT_EQ(m.kv_bytes_per_token(2), 24 * 2 * 512 * 2);
  EXPECT_EQ(m.growing_kv_bytes_per_token(2), 24 * 1024);
  EXPECT_EQ(m.bounded_kv_bytes(2), 3 * 1024 * 1024);
  EXPECT_FALSE(m.uniform_layers());
  // MXFP4 experts: 17 bytes per 32 weights.
  EXPECT_EQ(weight_bytes(WeightFormat::mxfp4, m.routed_expert_params(), 2), m.routed_expert_params() / 32 * 17);
}

TEST(LayerKinds, WindowedKvOfTheCatalog) {
  // Gemma 3 27B: 10 global layers of 16 KV heads x 128 (80 KiB a token), 52 sliding at 1024 (416 MiB).
  const ModelSpec g = load_model("gemma-3-27b");
  EXPECT_EQ(g.growing_kv_bytes_per_token(2), 80 * 1024);
  EXPECT_EQ(g.bounded_kv_bytes(2), int64_t{416} * 1024 * 1024);
  // Llama 4 Scout: 12 NoPE global layers (48 KiB a token), 36 chunked at 8192 (1.125 GiB).
  const ModelSpec s = load_model("llama-4-scout");
  EXPECT_EQ(s.growing_kv_bytes_per_token(2), 48 * 1024);
  EXPECT_EQ(s.bounded_kv_bytes(2), int64_t{1152} * 1024 * 1024);
  EXPECT_EQ(s.window_tokens(LayerAttention::chunked), 8192);
  // The dense models: every layer grows, nothing bounded.
  const ModelSpec q = load_model("qwen2.5-7b");
  EXPECT_EQ(q.growing_kv_bytes_per_token(2), q.kv_bytes_per_token(2));
  EXPECT_EQ(q.bounded_kv_bytes(2), 0);
  EXPECT_EQ(q.layer_kinds_text(), "global");
  EXPECT_TRUE(q.uniform_layers());
  EXPECT_EQ(q.active_param_count(), q.param_count());
}

TEST(LayerKinds, WeightBytes) {
  EXPECT_EQ(weight_bytes(WeightFormat::mxfp4, 32, 2), 17);
  EXPECT_EQ(weight_bytes(WeightFormat::mxfp4, 33, 2), 34);  // a partial block is stored whole
  EXPECT_EQ(weight_bytes(WeightFormat::native, 33, 2), 66);
  EXPECT_EQ(weight_bytes(WeightFormat::native, 33, 4), 132);
}

TEST(LayerKinds, EveryCatalogEntryRoundTripsThroughJson) {
  for (const auto& id : model_ids()) {
    const ModelSpec m = load_model(id);
    const Json j = m.to_json();
    const ModelSpec back = model_from_json(j, "roundtrip " + id);
    EXPECT_EQ(back.to_json(), j) << id;
    EXPECT_EQ(back.param_count(), m.param_count()) << id;
  }
  for (const auto& id : kLayerKindModels) EXPECT_FALSE(load_model(id).uniform_layers()) << id;
  EXPECT_EQ(load_model("gpt-oss-20b").experts_text(), "32 x top-4 (mxfp4)");
  EXPECT_EQ(load_model("llama-4-scout").experts_text(), "16 x top-1 + 1 shared");
  EXPECT_EQ(load_model("qwen2.5-7b").experts_text(), "-");
}

// The refusal a malformed field gets: the key and what would be valid.
std::string error_of(const std::function<void(Json&)>& edit) {
  Json j = load_model("gpt-oss-20b").to_json();
  edit(j);
  try {
    model_from_json(j, "m.json");
  } catch (const Error& e) {
    return e.key() + ": " + e.what();
  }
  return "accepted";
}

TEST(LayerKinds, MalformedFieldsAreRefusedByKey) {
  struct Case {
    std::function<void(Json&)> edit;
    std::vector<std::string> named;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["layer_attention"].erase(0); }, {"layer_attention: ", "23 entries for 24 layers"}},
      {[](Json& j) { j["layer_attention"][2] = "linear"; }, {"layer_attention: ", "layer 2", "\"linear\""}},
      {[](Json& j) { j.erase("sliding_window"); }, {"sliding_window: ", "missing"}},
      {[](Json& j) { j["attention_chunk"] = 8192; }, {"attention_chunk: ", "no layer is chunked"}},
      {[](Json& j) { j["nope_layers"] = {3, 2}; }, {"nope_layers: ", "entry 1"}},
      {[](Json& j) { j["nope_layers"] = {24}; }, {"nope_layers: ", "[0, 24)"}},
      {[](Json& j) { j["mlp"] = "relu"; }, {"mlp: ", "'relu'", "swiglu, geglu_tanh or gpt_oss"}},
      {[](Json& j) { j.erase("swiglu_limit"); }, {"swiglu_limit: ", "missing"}},
      {[](Json& j) { j["mlp"] = "swiglu"; }, {"swiglu_limit: ", "gpt-oss"}},
      {[](Json& j) { j["moe"]["experts_per_token"] = 33; }, {"experts_per_token: "}},
      {[](Json& j) { j["moe"]["experts"] = 1; }, {"experts: "}},
      {[](Json& j) { j["moe"]["routing"] = "hash"; }, {"routing: ", "'hash'", "softmax_topk"}},
      {[](Json& j) { j["moe"]["expert_weights"] = "nvfp4"; }, {"expert_weights: ", "'nvfp4'", "mxfp4"}},
      {[](Json& j) { j["moe"]["shared_ffn_hidden"] = 128; }, {"shared_ffn_hidden: ", "without shared_experts"}},
      {[](Json& j) {
         j["moe"]["dense_layers"] = Json::array();
         for (int l = 0; l < 24; ++l) j["moe"]["dense_layers"].push_back(l);
       },
       {"dense_layers: ", "every layer"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string e = error_of(cases[i].edit);
    for (const auto& n : cases[i].named) EXPECT_NE(e.find(n), std::string::npos) << "case " << i << ": " << n << " in " << e;
    EXPECT_NE(e.find("m.json"), std::string::npos) << "case " << i << ": " << e;
  }
  // All layers global, spelled out: the default (no key written back).
  const std::string ok = error_of([](Json& j) {
    for (auto& k : j["layer_attention"]) k = "global";
    j.erase("sliding_window");
  });
  EXPECT_EQ(ok, "accepted");
  Json global = load_model("gpt-oss-20b").to_json();
  for (auto& k : global["layer_attention"]) k = "global";
  global.erase("sliding_window");
  const ModelSpec m = model_from_json(global, "m.json");
  EXPECT_TRUE(m.layer_attention.empty());
  EXPECT_FALSE(m.to_json().contains("layer_attention"));
}

}  // namespace
}  // namespace oomb::models
