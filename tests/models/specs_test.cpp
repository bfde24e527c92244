#include "models/specs.h"

#include <gtest/gtest.h>

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
}  // namespace oomb::models
