// Hugging Face config.json as --model: the published configs of four families (values from their
// model cards / config.json on the Hugging Face Hub) read into the same shapes as the catalog.
#include "models/hf_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "models/specs.h"

namespace oomb::models {
namespace {

namespace fs = std::filesystem;

// Qwen/Qwen2.5-7B config.json (the keys that matter plus the usual others).
const char* kQwen25_7b = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.43.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 152064})";

// meta-llama/Llama-3.1-8B config.json.
const char* kLlama31_8b = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 128256})";

// mistralai/Mistral-7B-v0.3 config.json.
const char* kMistral7b = R"({
  "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 32768})";

// Qwen/Qwen3-8B config.json.
const char* kQwen3_8b = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 40960,
  "max_window_layers": 36, "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

class HfConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("oomb_hf_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  // Writes `text` as <folder>/config.json; returns the folder.
  std::string folder(const std::string& name, const std::string& text) {
    const fs::path d = root_ / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << text;
    return d.string();
  }
  std::string folder(const std::string& name, const Json& j) { return folder(name, j.dump()); }
  fs::path root_;
};

void expect_same_shapes(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.layers, b.layers);
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.q_heads, b.q_heads);
  EXPECT_EQ(a.kv_heads, b.kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.ffn_hidden, b.ffn_hidden);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_EQ(a.tied_embeddings, b.tied_embeddings);
  EXPECT_EQ(a.qkv_bias, b.qkv_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  EXPECT_DOUBLE_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.max_position, b.max_position);
  EXPECT_EQ(a.rope_scaling, b.rope_scaling);
  EXPECT_EQ(a.param_count(), b.param_count());
}

TEST_F(HfConfig, PublishedConfigsEqualTheCatalog) {
  const std::pair<const char*, const char*> cases[] = {{"Qwen2.5-7B", kQwen25_7b},
                                                       {"Llama-3.1-8B", kLlama31_8b},
                                                       {"Mistral-7B-v0.3", kMistral7b},
                                                       {"Qwen3-8B", kQwen3_8b}};
  const char* ids[] = {"qwen2.5-7b", "llama-3.1-8b", "mistral-7b-v0.3", "qwen3-8b"};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(cases[i].first);
    const std::string dir = folder(cases[i].first, std::string(cases[i].second));
    const ModelSpec cat = load_model(ids[i]);
    // The folder, and the config.json inside it.
    for (const std::string& path : {dir, dir + "/config.json"}) {
      const ModelSpec m = load_model(path);
      EXPECT_EQ(m.id, ids[i]);  // same shapes as the catalog entry: its id, so plans are the same
      expect_same_shapes(m, cat);
      EXPECT_NE(m.source.find("config.json"), std::string::npos) << m.source;
      // It round-trips through oomb.model/1.
      expect_same_shapes(model_from_json(m.to_json(), "roundtrip"), m);
    }
  }
}

TEST_F(HfConfig, PublishedParameterCounts) {
  // Model cards: Qwen2.5-7B 7.61B (7,615,616,512), Llama-3.1-8B 8.03B, Mistral-7B-v0.3 7.25B,
  // Qwen3-8B 8.2B of which 6.95B non-embedding.
  EXPECT_EQ(load_model(folder("q", std::string(kQwen25_7b))).param_count(), 7615616512);
  EXPECT_NEAR(load_model(folder("l", std::string(kLlama31_8b))).param_count() / 8.03e9, 1.0, 0.002);
  EXPECT_NEAR(load_model(folder("m", std::string(kMistral7b))).param_count() / 7.25e9, 1.0, 0.002);
  const ModelSpec q3 = load_model(folder("q3", std::string(kQwen3_8b)));
  EXPECT_NEAR(q3.param_count() / 8.2e9, 1.0, 0.005);
  const int64_t non_embedding = q3.param_count() - q3.embedding_params() - q3.lm_head_params();
  EXPECT_NEAR(non_embedding / 6.95e9, 1.0, 0.002);
  // q/k norm: 2 x head_dim weights per layer on top of the Qwen2-shaped count without biases.
  ModelSpec no_norm = q3;
  no_norm.qk_norm = false;
  EXPECT_EQ(q3.param_count() - no_norm.param_count(), 36 * 2 * 128);
}

void expect_refused(const std::string& path, const std::string& key, const std::vector<std::string>& named);

TEST_F(HfConfig, FamiliesSetBiasAndNormFlags) {
  EXPECT_TRUE(load_model(folder("q", std::string(kQwen25_7b))).qkv_bias);  // Qwen2 always has q/k/v bias
  const ModelSpec q3 = load_model(folder("q3", std::string(kQwen3_8b)));
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(q3.family, "qwen3");
  // attention_bias true is q/k/v and o_proj biases in Hugging Face Llama and Qwen3 (both run; the
  // parameter count grows by them); Mistral's and Qwen2's attention does not read the key: refused.
  Json l = Json::parse(kLlama31_8b);
  l["attention_bias"] = true;
  const ModelSpec lb = load_model(folder("lb", l));
  EXPECT_TRUE(lb.qkv_bias);
  EXPECT_TRUE(lb.o_bias);
  const ModelSpec lplain = load_model(folder("lplain", std::string(kLlama31_8b)));
  EXPECT_EQ(lb.param_count() - lplain.param_count(), lb.layers * (lb.q_dim() + 2 * lb.kv_dim() + lb.hidden));
  Json q3b = Json::parse(kQwen3_8b);
  q3b["attention_bias"] = true;
  const ModelSpec q3bias = load_model(folder("q3b", q3b));
  EXPECT_TRUE(q3bias.qkv_bias && q3bias.o_bias);
  Json mb = Json::parse(kMistral7b);
  mb["attention_bias"] = true;
  expect_refused(folder("mb", mb), "attention_bias", {"does not read the key", "Mistral"});
  Json qb = Json::parse(kQwen25_7b);
  qb["attention_bias"] = true;
  expect_refused(folder("qb", qb), "attention_bias", {"does not read the key"});
  qb["attention_bias"] = false;
  EXPECT_TRUE(load_model(folder("qb0", qb)).qkv_bias);
  const ModelSpec llama = load_model(folder("l", std::string(kLlama31_8b)));
  EXPECT_FALSE(llama.qkv_bias);
  EXPECT_EQ(llama.rope_scaling.value("rope_type", ""), "llama3");
  EXPECT_DOUBLE_EQ(llama.rope_scaling.value("factor", 0.0), 8.0);
}

TEST_F(HfConfig, DefaultsAndOptionalKeys) {
  // head_dim absent: hidden / heads; num_key_value_heads absent: every head.
  Json j = Json::parse(kMistral7b);
  j.erase("num_key_value_heads");
  const ModelSpec mha = load_model(folder("mha", j));
  EXPECT_EQ(mha.head_dim, 128);
  EXPECT_EQ(mha.kv_heads, 32);
  // An explicit head_dim that is not hidden / heads is kept (q_dim != hidden).
  j = Json::parse(kQwen3_8b);
  j["head_dim"] = 64;
  const ModelSpec narrow = load_model(folder("narrow", j));
  EXPECT_EQ(narrow.head_dim, 64);
  EXPECT_EQ(narrow.q_dim(), 32 * 64);
  // tie_word_embeddings, rms_norm_eps, rope_theta, max_position_embeddings, vocab_size are read.
  j = Json::parse(kQwen25_7b);
  j["tie_word_embeddings"] = true;
  j["rms_norm_eps"] = 1e-5;
  j["rope_theta"] = 2e6;
  j["max_position_embeddings"] = 4096;
  j["vocab_size"] = 1000;
  const ModelSpec t = load_model(folder("MyModel", j));
  EXPECT_TRUE(t.tied_embeddings);
  EXPECT_EQ(t.lm_head_params(), 0);
  EXPECT_DOUBLE_EQ(t.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(t.rope_theta, 2e6);
  EXPECT_EQ(t.max_position, 4096);
  EXPECT_EQ(t.vocab, 1000);
  EXPECT_EQ(t.id, "mymodel");  // no catalog entry has these shapes: the folder's name
  // model_type alone (no architectures) is enough.
  j = Json::parse(kMistral7b);
  j.erase("architectures");
  EXPECT_EQ(load_model(folder("mt", j)).id, "mistral-7b-v0.3");
  // The catalog match is of the whole model, family included: Mistral's shapes as a Llama config,
  // or with another rope_theta / rms_norm_eps, are not Mistral 7B.
  j = Json::parse(kMistral7b);
  j["architectures"] = {"LlamaForCausalLM"};
  j["model_type"] = "llama";
  j.erase("sliding_window");
  EXPECT_EQ(load_model(folder("asllama", j)).id, "asllama");
  for (const auto& [key, value] : std::vector<std::pair<std::string, double>>{{"rope_theta", 5e5}, {"rms_norm_eps", 1e-6}}) {
    j = Json::parse(kMistral7b);
    j[key] = value;
    EXPECT_EQ(load_model(folder("other", j)).id, "other") << key;
  }
}

// The message names the architecture and the keys; the Error's key is the config key at fault.
void expect_refused(const std::string& path, const std::string& key, const std::vector<std::string>& named) {
  try {
    load_model(path);
    FAIL() << "accepted " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), key) << e.what();
    for (const auto& n : named) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n << " in " << e.what();
  }
}

// transformers v5 writes RoPE as rope_parameters {rope_type, rope_theta, the type's keys} and the
// weight type as dtype (its MIGRATION_GUIDE_V5.md): the same model as the v4 form, never plain RoPE
// at theta 10000.
TEST_F(HfConfig, TransformersV5RopeParametersAndDtypeReadAsTheV4Keys) {
  Json q = Json::parse(kQwen25_7b);
  const ModelSpec v4 = load_model(folder("q4", q));
  q.erase("rope_theta");
  q.erase("torch_dtype");
  q["dtype"] = "bfloat16";
  q["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const ModelSpec v5 = load_model(folder("q5", q));
  EXPECT_DOUBLE_EQ(v5.rope_theta, 1e6);
  EXPECT_TRUE(v5.rope_scaling.is_null());
  EXPECT_EQ(v5.id, v4.id) << "the catalog's qwen2.5-7b either way";
  EXPECT_NE(v5.source.find("dtype bfloat16"), std::string::npos) << v5.source;

  Json l = Json::parse(kLlama31_8b);
  const ModelSpec l4 = load_model(folder("l4", l));
  l["rope_parameters"] = l["rope_scaling"];
  l["rope_parameters"]["rope_theta"] = 500000.0;
  l.erase("rope_scaling");
  l.erase("rope_theta");
  const ModelSpec l5 = load_model(folder("l5", l));
  EXPECT_DOUBLE_EQ(l5.rope_theta, 5e5);
  EXPECT_EQ(l5.rope_scaling, l4.rope_scaling);
  EXPECT_TRUE(rope_of(l5).llama3());
  // Both forms, saying the same: accepted; saying different things: refused naming both.
  Json both = l;
  both["rope_scaling"] = l4.rope_scaling;
  both["rope_theta"] = 500000.0;
  EXPECT_EQ(load_model(folder("lb", both)).rope_scaling, l4.rope_scaling);
  both["rope_theta"] = 10000.0;
  expect_refused(folder("lt", both), "rope_parameters.rope_theta", {"500000", "10000"});
  Json factor = l;
  factor["rope_scaling"] = l4.rope_scaling;
  factor["rope_scaling"]["factor"] = 4.0;
  expect_refused(folder("lf", factor), "rope_parameters", {"disagrees with rope_scaling"});
  Json types = Json::parse(kQwen25_7b);
  types["dtype"] = "float32";
  expect_refused(folder("dt", types), "dtype", {"float32", "torch_dtype", "bfloat16"});
}

TEST_F(HfConfig, TransformersV5FormsOombDoesNotModelAreRefusedByName) {
  Json yarn = Json::parse(kQwen3_8b);
  yarn.erase("rope_theta");
  yarn["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1000000.0},
                             {"original_max_position_embeddings", 32768}};
  // YaRN imports (planned; the executor refuses it): the same scaling as the v4 form.
  EXPECT_EQ(load_model(folder("yarn5", yarn)).rope_scaling,
            Json({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}}));
  Json dynamic = Json::parse(kQwen3_8b);
  dynamic.erase("rope_theta");
  dynamic["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 4.0}, {"rope_theta", 1000000.0}};
  expect_refused(folder("dynamic5", dynamic), "rope_parameters.rope_type", {"dynamic", "llama3"});
  Json no_theta = Json::parse(kQwen3_8b);
  no_theta.erase("rope_theta");
  no_theta["rope_parameters"] = {{"rope_type", "default"}};
  expect_refused(folder("nt", no_theta), "rope_parameters.rope_theta", {"missing"});
  Json per_layer = Json::parse(kQwen3_8b);
  per_layer["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                                  {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  expect_refused(folder("pl", per_layer), "rope_parameters.full_attention", {"per layer type"});
  Json partial = Json::parse(kQwen3_8b);
  partial["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.5}};
  expect_refused(folder("pr", partial), "rope_parameters.partial_rotary_factor", {"0.5", "head_dim"});
  Json partial4 = Json::parse(kQwen3_8b);
  partial4["partial_rotary_factor"] = 0.25;
  expect_refused(folder("pr4", partial4), "partial_rotary_factor", {"0.25"});
  Json kinds = Json::parse(kQwen3_8b);
  kinds["layer_types"] = Json::array();
  for (int i = 0; i < 36; ++i) kinds["layer_types"].push_back(i < 30 ? "full_attention" : "sliding_attention");
  expect_refused(folder("lt", kinds), "layer_types", {"layer 30", "sliding_attention"});
  kinds["layer_types"] = Json::array();
  for (int i = 0; i < 36; ++i) kinds["layer_types"].push_back("full_attention");
  EXPECT_EQ(load_model(folder("lt_full", kinds)).layers, 36);
}

TEST_F(HfConfig, UnsupportedArchitecturesAreRefusedByName) {
  // A dense family's config with expert keys is refused by them (Mixtral, Qwen3-MoE and gpt-oss
  // read theirs: EachFamilysPublicConfigImportsAsItsCatalogEntry).
  Json mistral_moe = Json::parse(kMistral7b);
  mistral_moe["num_local_experts"] = 8;
  mistral_moe["num_experts_per_tok"] = 2;
  expect_refused(folder("mistral_moe", mistral_moe), "architectures",
                 {"MistralForCausalLM", "num_local_experts", "mixture of experts"});
  Json moe = Json::parse(kQwen25_7b);
  moe["architectures"] = {"Qwen2MoeForCausalLM"};
  moe["num_experts"] = 60;
  moe["moe_intermediate_size"] = 1408;
  expect_refused(folder("qwen2moe", moe), "architectures", {"Qwen2MoeForCausalLM", "num_experts"});
  Json oss = Json::parse(kMistral7b);
  oss["architectures"] = {"GptOssForCausalLM"};
  oss["num_local_experts"] = 32;  // and no window for its sliding layers (transformers' default kinds)
  expect_refused(folder("gptoss", oss), "sliding_window", {"missing"});
  oss["sliding_window"] = 128;  // and no top-k
  expect_refused(folder("gptoss_k", oss), "num_experts_per_tok", {"missing"});
  Json vl = Json::parse(kQwen25_7b);
  vl["architectures"] = {"Qwen2VLForConditionalGeneration"};
  vl["vision_config"] = {{"depth", 32}};
  expect_refused(folder("vl", vl), "architectures", {"Qwen2VLForConditionalGeneration", "vision_config", "multimodal"});
  Json mla = Json::parse(kMistral7b);
  mla["architectures"] = {"DeepseekV2ForCausalLM"};
  mla["kv_lora_rank"] = 512;
  expect_refused(folder("mla", mla), "architectures", {"DeepseekV2ForCausalLM", "kv_lora_rank", "latent attention"});
  Json other = Json::parse(kMistral7b);
  other["architectures"] = {"GPT2LMHeadModel"};
  expect_refused(folder("gpt2", other), "architectures", {"GPT2LMHeadModel", "Qwen3ForCausalLM"});
  // Supported families with a feature oomb does not model.
  Json window = Json::parse(kMistral7b);
  window["sliding_window"] = 4096;
  expect_refused(folder("window", window), "sliding_window", {"4096", "sliding-window"});
  Json qwin = Json::parse(kQwen25_7b);
  qwin["use_sliding_window"] = true;
  expect_refused(folder("qwin", qwin), "use_sliding_window", {"sliding-window"});
  // YaRN (Qwen3's way to 128K) and linear scaling import and plan; the executor runs YaRN and refuses
  // linear by name (step::model_capability). One it does not know is refused here.
  Json yarn = Json::parse(kQwen3_8b);
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  EXPECT_EQ(rope_scaling_type(load_model(folder("yarn", yarn))), "yarn");
  yarn["rope_scaling"].erase("original_max_position_embeddings");
  expect_refused(folder("yarn_short", yarn), "original_max_position_embeddings", {"missing"});
  Json linear = Json::parse(kLlama31_8b);
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(rope_scaling_type(load_model(folder("linear", linear))), "linear");
  Json dynamic = Json::parse(kLlama31_8b);
  dynamic["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_refused(folder("dynamic", dynamic), "rope_scaling.rope_type", {"dynamic", "llama3", "yarn"});
  Json act = Json::parse(kLlama31_8b);
  act["hidden_act"] = "gelu";
  expect_refused(folder("gelu", act), "hidden_act", {"gelu"});
  Json missing = Json::parse(kLlama31_8b);
  missing.erase("intermediate_size");
  expect_refused(folder("missing", missing), "intermediate_size", {"missing"});
}

// The published configs of the layer-kind and expert families (tests/models/hf_configs, with their
// sources): each imports as its catalog entry (the id, and every field of oomb.model/1 but the source).
TEST_F(HfConfig, EachFamilysPublicConfigImportsAsItsCatalogEntry) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen3-30b-a3b.json", "qwen3-30b-a3b"}, {"gpt-oss-20b.json", "gpt-oss-20b"},
      {"gpt-oss-120b.json", "gpt-oss-120b"},   {"mixtral-8x7b.json", "mixtral-8x7b"},
      {"gemma-3-27b.text_config.json", "gemma-3-27b"}, {"llama-4-scout.text_config.json", "llama-4-scout"}};
  const fs::path dir = fs::path(OOMB_SOURCE_DIR) / "tests/models/hf_configs";
  for (const auto& [file, id] : cases) {
    SCOPED_TRACE(file);
    const ModelSpec m = load_model((dir / file).string());
    EXPECT_EQ(m.id, id);
    Json have = m.to_json(), want = load_model(id).to_json();
    EXPECT_NE(have["source"].get<std::string>().find(file), std::string::npos) << have["source"];
    have.erase("source");
    want.erase("source");
    EXPECT_EQ(have, want);
  }
  // What each family's keys became.
  const ModelSpec oss = load_model((dir / "gpt-oss-20b.json").string());
  EXPECT_EQ(oss.layer_kinds_text(), "12 sliding (128) + 12 global");
  EXPECT_EQ(oss.attention_of(0), LayerAttention::sliding);
  EXPECT_EQ(oss.attention_of(1), LayerAttention::global);
  EXPECT_TRUE(oss.attention_sinks && oss.qkv_bias && oss.o_bias && oss.moe.router_bias && oss.moe.expert_bias);
  EXPECT_EQ(oss.mlp, Mlp::gpt_oss);
  EXPECT_DOUBLE_EQ(oss.swiglu_limit, 7.0);
  EXPECT_EQ(oss.moe.expert_weights, WeightFormat::mxfp4);
  EXPECT_EQ(oss.moe.experts_per_token, 4);
  const ModelSpec scout = load_model((dir / "llama-4-scout.text_config.json").string());
  EXPECT_EQ(scout.layer_kinds_text(), "36 chunked (8192) + 12 global");
  EXPECT_EQ(scout.nope_layers, (std::vector<int64_t>{3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47}));
  for (int64_t l : scout.nope_layers) EXPECT_EQ(scout.attention_of(l), LayerAttention::global) << l;
  EXPECT_EQ(scout.moe.routing, Routing::sigmoid_topk);
  EXPECT_EQ(scout.moe.shared_experts, 1);
  EXPECT_EQ(scout.ffn_hidden, 16384);  // intermediate_size_mlp: the dense layers' width (none here)
  const ModelSpec gemma = load_model((dir / "gemma-3-27b.text_config.json").string());
  EXPECT_EQ(gemma.layer_kinds_text(), "52 sliding (1024) + 10 global");
  for (int64_t l = 0; l < gemma.layers; ++l)
    EXPECT_EQ(gemma.attention_of(l), (l + 1) % 6 == 0 ? LayerAttention::global : LayerAttention::sliding) << l;
  EXPECT_TRUE(gemma.sandwich_norms && gemma.qk_norm && gemma.tied_embeddings);
  EXPECT_EQ(gemma.mlp, Mlp::geglu_tanh);
  // The defaults transformers applies to Gemma 3's ten-key text_config are named in the source, and
  // so is the query scale the spec does not carry.
  for (const char* s : {"Gemma3TextConfig defaults", "vocab_size 262208", "sliding_window_pattern 6", "query_pre_attn_scalar 168"})
    EXPECT_NE(gemma.source.find(s), std::string::npos) << s << " in " << gemma.source;
  const ModelSpec qwen = load_model((dir / "qwen3-30b-a3b.json").string());
  EXPECT_EQ(qwen.moe.routing, Routing::softmax_topk);  // norm_topk_prob true
  EXPECT_TRUE(qwen.moe.dense_layers.empty());
}

TEST_F(HfConfig, FamilyKeysOombDoesNotModelAreRefusedByName) {
  const fs::path dir = fs::path(OOMB_SOURCE_DIR) / "tests/models/hf_configs";
  const Json oss = read_json_file((dir / "gpt-oss-20b.json").string());
  Json linear = oss;
  linear["layer_types"][3] = "linear_attention";
  expect_refused(folder("linear", linear), "layer_types", {"layer 3", "linear_attention"});
  Json short_types = oss;
  short_types["layer_types"].erase(0);
  expect_refused(folder("short", short_types), "layer_types", {"23 entries", "24"});
  Json topk = oss;
  topk["experts_per_token"] = 2;
  expect_refused(folder("topk", topk), "experts_per_token", {"disagrees with num_experts_per_tok"});
  Json too_many = oss;
  too_many["num_experts_per_tok"] = too_many["experts_per_token"] = 33;
  expect_refused(folder("k33", too_many), "experts_per_token", {"exceeds num_local_experts"});
  Json quant = oss;
  quant["quantization_config"]["quant_method"] = "gptq";
  expect_refused(folder("gptq", quant), "quantization_config.quant_method", {"gptq", "mxfp4"});
  // The multimodal wrappers: refused, the hint naming the language model that imports alone.
  Json wrapper = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                  {"text_config", read_json_file((dir / "gemma-3-27b.text_config.json").string())},
                  {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  expect_refused(folder("wrapper", wrapper), "architectures", {"vision_config", "multimodal", "text_config", "gemma3_text"});
  // Gemma 2's soft-capping; Qwen3.5's linear-attention layers; a Qwen3-MoE shared expert.
  Json gemma = read_json_file((dir / "gemma-3-27b.text_config.json").string());
  gemma["final_logit_softcapping"] = 30.0;
  expect_refused(folder("softcap", gemma), "final_logit_softcapping", {"soft-capping"});
  Json hybrid = Json::parse(kQwen3_8b);
  hybrid["full_attention_interval"] = 4;
  hybrid["linear_num_key_heads"] = 16;
  expect_refused(folder("hybrid", hybrid), "architectures", {"linear_num_key_heads", "linear-attention"});
  Json shared = read_json_file((dir / "qwen3-30b-a3b.json").string());
  shared["shared_expert_intermediate_size"] = 512;
  expect_refused(folder("shared", shared), "shared_expert_intermediate_size", {"shared expert"});
  Json qwin = read_json_file((dir / "qwen3-30b-a3b.json").string());
  qwin["use_sliding_window"] = true;
  expect_refused(folder("qwin", qwin), "use_sliding_window", {"sliding-window"});
  // Qwen3-MoE's layer rule: mlp_only_layers and decoder_sparse_step give the dense layers.
  Json sparse_step = read_json_file((dir / "qwen3-30b-a3b.json").string());
  sparse_step["decoder_sparse_step"] = 2;
  sparse_step["mlp_only_layers"] = {1};
  const ModelSpec m = load_model(folder("step2", sparse_step));
  ASSERT_EQ(m.moe.dense_layers.size(), 25u);  // the 24 even layers and layer 1
  EXPECT_EQ(m.moe.dense_layers[0], 0);
  EXPECT_EQ(m.moe.dense_layers[1], 1);
  EXPECT_EQ(m.moe.dense_layers[2], 2);
  EXPECT_FALSE(m.moe_layer(0));
  EXPECT_TRUE(m.moe_layer(3));
  EXPECT_EQ(m.layer_params(0) - m.layer_params(3),
            3 * 2048 * 6144 - (2048 * 128 + 128 * 3 * 2048 * 768));  // a dense MLP of 6144 for router + 128 experts
  Json unnormalised = read_json_file((dir / "qwen3-30b-a3b.json").string());
  unnormalised["norm_topk_prob"] = false;
  EXPECT_EQ(load_model(folder("nonorm", unnormalised)).moe.routing, Routing::softmax_all);
}

TEST_F(HfConfig, FolderWithoutConfigAndNonHfJson) {
  fs::create_directories(root_ / "empty");
  try {
    load_model((root_ / "empty").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
  // An oomb.model/1 file still loads the usual way, and a schema-less non-HF JSON is refused as such.
  std::ofstream(root_ / "mine.json") << load_model("tiny").to_json().dump();
  EXPECT_EQ(load_model((root_ / "mine.json").string()).id, "tiny");
  std::ofstream(root_ / "odd.json") << R"({"hidden_size": 4})";
  try {
    load_model((root_ / "odd.json").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "schema") << e.what();
  }
}

}  // namespace
}  // namespace oomb::models
