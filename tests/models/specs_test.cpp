#include "models/specs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace oomb::models {
namespace {

TEST(ModelSpec, Qwen25_7bDerivedQuantities) {
  auto m = load_model("qwen2.5-7b");
  // Published parameter count 7.62e9 (Qwen2.5 report); our count is exact from the shapes.
  EXPECT_EQ(m.param_count(), 7615616512);
  // K+V, bf16, all 28 layers: 2 * 28 * 4 * 128 * 2 = 57,344 bytes per token (ALGORITHM.md section 6).
  EXPECT_EQ(m.kv_bytes_per_token(2), 57344);
}

TEST(ModelSpec, RejectsInconsistentHeads) {
  Json j = load_model("tiny").to_json();
  j["kv_heads"] = 3;
  try {
    model_from_json(j, "my.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "kv_heads");
    EXPECT_EQ(e.where(), "my.json");
  }
  j = load_model("tiny").to_json();
  j.erase("vocab");
  EXPECT_THROW(model_from_json(j, "my.json"), Error);
  j = load_model("tiny").to_json();
  j["schema"] = "oomb.model/0";
  EXPECT_THROW(model_from_json(j, "my.json"), Error);
}

TEST(Catalog, UnknownIdListsKnownOnes) {
  try {
    load_model("qwen9");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen2.5-7b"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_gpu("nope"), Error);
  EXPECT_THROW(load_host("nope"), Error);
  EXPECT_THROW(load_model("/nonexistent/x.json"), Error);
}

TEST(Catalog, GpuRoundTripsThroughJson) {
  auto g = load_gpu("h200");
  auto g2 = gpu_from_json(g.to_json(), "roundtrip");
  EXPECT_EQ(g2.hbm_capacity_bytes, g.hbm_capacity_bytes);
  EXPECT_DOUBLE_EQ(g2.h2d_bytes_per_s, g.h2d_bytes_per_s);
  EXPECT_EQ(g2.default_host, g.default_host);
  EXPECT_NO_THROW(load_host(g.default_host));
}

}  // namespace
namespace {

// Issue #13: absurd values are refused by key with physical bounds, before any arithmetic on them
// (hidden 2^40 printed "weights -393.89 PiB"; a 1e-300 B/s link printed "inf (-nan%) FITS").
std::string bound_error(Json j, const std::string& key, const Json& value,
                        const std::function<void(const Json&)>& load) {
  j[key] = value;
  try {
    load(j);
  } catch (const Error& e) {
    return e.key();
  }
  return "(accepted)";
}

TEST(Specs, PhysicalBoundsNameTheKey) {
  const Json m = load_model("tiny").to_json();
  const auto model = [](const Json& j) { model_from_json(j, "m.json"); };
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"layers", 1000000000}, {"hidden", int64_t{1} << 40}, {"vocab", int64_t{1} << 40},
           {"norm_eps", 1e308}, {"rope_theta", 1e-300}, {"max_position", int64_t{1} << 41}, {"ffn_hidden", int64_t{1} << 30}})
    EXPECT_EQ(bound_error(m, key, value, model), key);
  const Json g = load_gpu("h200").to_json();
  const auto gpu = [](const Json& j) { gpu_from_json(j, "g.json"); };
  for (const char* key : {"h2d_bytes_per_s", "d2h_bytes_per_s", "hbm_bytes_per_s", "bf16_flops_per_s", "fp32_flops_per_s"})
    EXPECT_EQ(bound_error(g, key, 1e-300, gpu), key);
  EXPECT_EQ(bound_error(g, "hbm_capacity_bytes", int64_t{1} << 60, gpu), "hbm_capacity_bytes");
  EXPECT_EQ(bound_error(g, "copy_engines", 1000, gpu), "copy_engines");
  const Json h = load_host("workstation-128g").to_json();
  const auto host = [](const Json& j) { host_from_json(j, "h.json"); };
  EXPECT_EQ(bound_error(h, "mem_bytes_per_s", 1e-300, host), "mem_bytes_per_s");
  EXPECT_EQ(bound_error(h, "ram_bytes", int64_t{1} << 62, host), "ram_bytes");
  // The whole catalog is within the bounds.
  for (const auto& id : model_ids()) EXPECT_NO_THROW(load_model(id)) << id;
  for (const auto& id : gpu_ids()) EXPECT_NO_THROW(load_gpu(id)) << id;
  for (const auto& id : host_ids()) EXPECT_NO_THROW(load_host(id)) << id;
}

TEST(Specs, DerivedCountsAreChecked) {
  ModelSpec m = load_model("tiny");
  m.hidden = int64_t{1} << 40;  // built in code, past the loader's bounds
  m.vocab = int64_t{1} << 30;
  EXPECT_THROW(m.param_count(), Error);
  EXPECT_THROW(m.embedding_params(), Error);
}

// YaRN (Hugging Face's _compute_yarn_parameters), by hand for theta 1e4, head_dim 16, original 64,
// factor 4: the correction dims are 16 ln(64 / (2 pi 32)) / (2 ln 1e4) = -0.994 (floored, held at 0)
// and 16 ln(64 / (2 pi)) / (2 ln 1e4) = 2.016 (ceiled: 3), so frequency i is kept for i = 0, divided
// by 4 from i = 3, and in between f (1 - i/3) + f / 4 (i/3); cos and sin x (0.1 ln 4 + 1).
TEST(Rope, YarnInverseFrequenciesAndAttentionFactorMatchThePublishedFormula) {
  ModelSpec m = load_model("tiny");
  m.rope_theta = 1e4;
  m.head_dim = 16;
  m.rope_scaling = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  const Rope r = rope_of(m);
  ASSERT_TRUE(r.yarn());
  EXPECT_FALSE(r.llama3());
  EXPECT_NEAR(rope_scale(r), 0.1 * std::log(4.0) + 1.0, 1e-15);
  const Rope plain(1e4);
  const double want[] = {1.0, 2.0 / 3.0 + 1.0 / 12.0, 1.0 / 3.0 + 2.0 / 12.0, 0.25, 0.25, 0.25, 0.25, 0.25};
  for (int64_t i = 0; i < 8; ++i)
    EXPECT_NEAR(rope_inv_freq(r, i, 16) / rope_inv_freq(plain, i, 16), want[i], 1e-12) << "i " << i;
  // truncate false (gpt-oss): the dims are not rounded, the ramp runs over [0, 2.016].
  m.rope_scaling["truncate"] = false;
  const double hi = 16 * std::log(64 / (2 * M_PI)) / (2 * std::log(1e4));
  const double ramp = 1.0 / hi;
  EXPECT_NEAR(rope_inv_freq(rope_of(m), 1, 16) / rope_inv_freq(plain, 1, 16), ramp / 4 + (1 - ramp), 1e-12);
  // mscale and mscale_all_dim (DeepSeek's form): the ratio of the two magnitudes; attention_factor wins.
  m.rope_scaling["mscale"] = 1.0;
  m.rope_scaling["mscale_all_dim"] = 0.5;
  EXPECT_NEAR(rope_scale(rope_of(m)), (0.1 * std::log(4.0) + 1) / (0.05 * std::log(4.0) + 1), 1e-15);
  m.rope_scaling["attention_factor"] = 1.25;
  EXPECT_DOUBLE_EQ(rope_scale(rope_of(m)), 1.25);
  // gpt-oss's published scaling (factor 32 from 4096, beta 32 / 1, truncate false).
  const Rope oss = rope_of(load_model("gpt-oss-20b"));
  EXPECT_DOUBLE_EQ(oss.factor, 32.0);
  EXPECT_DOUBLE_EQ(oss.yarn_original_max_position, 4096.0);
  EXPECT_FALSE(oss.truncate);
  EXPECT_NEAR(rope_scale(oss), 0.1 * std::log(32.0) + 1.0, 1e-15);
}

// Llama 3.1 8B's rope_scaling (factor 8, low_freq_factor 1, high_freq_factor 4, original 8192;
// theta 5e5, head_dim 128): the inverse frequencies of Hugging Face's llama3 formula, computed by
// hand (inv = theta^(-2i/128), wavelength 2 pi / inv against 8192 / 4 = 2048 and 8192 / 1 = 8192).
TEST(Rope, Llama31InverseFrequenciesMatchThePublishedFormula) {
  const ModelSpec m = load_model("llama-3.1-8b");
  ASSERT_EQ(m.head_dim, 128);
  const Rope r = rope_of(m);
  ASSERT_TRUE(r.llama3());
  EXPECT_DOUBLE_EQ(r.theta, 500000.0);
  EXPECT_DOUBLE_EQ(r.factor, 8.0);
  EXPECT_DOUBLE_EQ(r.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(r.high_freq_factor, 4.0);
  EXPECT_DOUBLE_EQ(r.original_max_position, 8192.0);
  const struct {
    int64_t i;
    double inv_freq;
  } cases[] = {
      {0, 1.0},                       // wavelength 6.28 < 2048: kept
      {28, 0.0032114459947525909},    // 1956.5 < 2048: kept
      {29, 0.0021665707635033591},    // 2401.7: smooth, s = 0.803621
      {30, 0.0013718935677611381},    // 2948.3: smooth, s = 0.592849
      {34, 0.00017850781276799641},   // 6695.1: smooth, s = 0.074527
      {35, 9.5562123539646833e-05},   // 8218.7 > 8192: divided by 8
      {63, 3.0689259889145111e-07},   // divided by 8
  };
  for (const auto& c : cases) EXPECT_NEAR(rope_inv_freq(r, c.i, 128) / c.inv_freq, 1.0, 1e-12) << "i " << c.i;
  // Plain RoPE is theta^(-2i/d), and the scaled frequencies are never above it.
  const Rope plain(500000.0);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_DOUBLE_EQ(rope_inv_freq(plain, i, 128), std::pow(500000.0, -2.0 * static_cast<double>(i) / 128.0));
    EXPECT_LE(rope_inv_freq(r, i, 128), rope_inv_freq(plain, i, 128));
  }
  // Every Llama 3.x and 4 catalog entry carries its llama3 scaling, gpt-oss its yarn and Gemma 3 its
  // linear one; the others are plain.
  for (const auto& id : model_ids()) {
    const ModelSpec spec = load_model(id);
    const std::string want = id.rfind("llama-", 0) == 0 ? "llama3" : id.rfind("gpt-oss", 0) == 0 ? "yarn"
                             : id == "gemma-3-27b"                  ? "linear"
                                                                    : "default";
    EXPECT_EQ(rope_scaling_type(spec), want) << id;
    EXPECT_EQ(rope_of(spec).llama3(), want == "llama3") << id;
    EXPECT_EQ(rope_of(spec).yarn(), want == "yarn") << id;
    EXPECT_EQ(rope_of(spec).linear, want == "linear") << id;
  }
}

std::string rope_error(const Json& scaling) {
  Json j = load_model("tiny").to_json();
  j["rope_scaling"] = scaling;
  try {
    model_from_json(j, "m.json");
  } catch (const Error& e) {
    return e.key() + ": " + e.what();
  }
  return "accepted";
}

// A scaling oomb does not know is refused by name (the key, the type, what is supported), never
// run as plain RoPE. linear and yarn (Gemma 3, gpt-oss) are read, their keys checked, and run.
TEST(Rope, OtherScalingsAreRefusedByName) {
  for (const char* type : {"linear", "yarn"}) {
    Json j = load_model("tiny").to_json();
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    if (std::string(type) == "yarn") j["rope_scaling"]["original_max_position_embeddings"] = 4096;
    const ModelSpec m = model_from_json(j, "m.json");
    EXPECT_EQ(rope_scaling_type(m), type);
    if (std::string(type) == "yarn") EXPECT_TRUE(rope_of(m, "m.json").yarn());
    else EXPECT_TRUE(rope_of(m, "m.json").linear && rope_of(m, "m.json").factor == 4.0);
    j["rope_scaling"]["beta_fst"] = 32.0;  // a misspelt key of the type
    EXPECT_NE(rope_error(j["rope_scaling"]).find("rope_scaling.beta_fst"), std::string::npos);
  }
  for (const char* type : {"dynamic", "longrope", "su", "mrope"}) {
    for (const char* key : {"rope_type", "type"}) {
      const std::string e = rope_error({{key, type}, {"factor", 4.0}});
      EXPECT_EQ(e.rfind("rope_scaling.", 0), 0u) << e;
      EXPECT_NE(e.find(std::string("'") + type + "'"), std::string::npos) << e;
      EXPECT_NE(e.find("llama3"), std::string::npos) << e;
      EXPECT_NE(e.find("m.json"), std::string::npos) << e;
    }
  }
  const Json ok = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                   {"original_max_position_embeddings", 8192}};
  EXPECT_EQ(rope_error(ok), "accepted");
  EXPECT_EQ(rope_error({{"rope_type", "default"}}), "accepted");
  EXPECT_NE(rope_error({{"factor", 8.0}}).find("rope_scaling.rope_type: "), std::string::npos);
  EXPECT_NE(rope_error(Json::array()).find("rope_scaling: "), std::string::npos);
  Json both = ok;
  both["type"] = "linear";
  EXPECT_NE(rope_error(both).find("disagree"), std::string::npos);
  for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    Json missing = ok;
    missing.erase(k);
    EXPECT_NE(rope_error(missing).find(std::string(k) + ": "), std::string::npos) << k;
  }
  Json inverted = ok;
  inverted["high_freq_factor"] = 0.5;  // below low_freq_factor: no band to interpolate over
  EXPECT_NE(rope_error(inverted).find("high_freq_factor: "), std::string::npos);
  // Equal factors (Llama-4-Scout-Instruct: 1 and 1) leave no band: each frequency is kept or divided,
  // the boundary itself kept (transformers' formula would divide 0 by 0 there).
  Json equal = ok;
  equal["high_freq_factor"] = 1.0;
  EXPECT_EQ(rope_error(equal), "accepted");
  Rope r4(500000.0);
  r4.factor = 16.0;
  r4.low_freq_factor = r4.high_freq_factor = 1.0;
  r4.original_max_position = 8192.0;
  for (int64_t i = 0; i < 64; ++i) {
    const double plain = rope_inv_freq(Rope(500000.0), i, 128), f = rope_inv_freq(r4, i, 128);
    EXPECT_TRUE(f == plain || f == plain / 16.0) << i;
  }
  Json extra = ok;
  extra["attention_factor"] = 2.0;
  EXPECT_NE(rope_error(extra).find("rope_scaling.attention_factor"), std::string::npos);
}

// efficiency.expert_gemm (the routed experts' GEMMs): optional, the large-GEMM figure when absent
// (every datasheet profile), read when given, written only where it differs, refused out of (0, 1].
TEST(GpuSpec, ExpertGemmEfficiencyDefaultsToTheGemmOne) {
  const GpuSpec h200 = load_gpu("h200");
  EXPECT_EQ(h200.efficiency.expert_gemm, h200.efficiency.gemm);
  Json j = h200.to_json();
  EXPECT_FALSE(j["efficiency"].contains("expert_gemm"));
  j["efficiency"]["expert_gemm"] = 0.25;
  const GpuSpec g = gpu_from_json(j, "g.json");
  EXPECT_EQ(g.efficiency.expert_gemm, 0.25);
  EXPECT_EQ(g.to_json()["efficiency"]["expert_gemm"], 0.25);
  j["efficiency"]["expert_gemm"] = 1.5;
  try {
    gpu_from_json(j, "g.json");
    ADD_FAILURE() << "an efficiency above 1 was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert_gemm"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace oomb::models
