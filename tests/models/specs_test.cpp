#include "models/specs.h"

#include <gtest/gtest.h>

#include <functional>
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

}  // namespace

}  // namespace oomb::models
