// The configuration's flags and keys (step/config.h): one vocabulary, read both ways.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "models/specs.h"
#include "step/config.h"

namespace oomb::step {
namespace {

TEST(ConfigFlag, NamesTheFlagThatSetsAKey) {
  EXPECT_EQ(config_flag("kv_dtype"), "--kv-dtype");
  EXPECT_EQ(config_flag("context_tokens"), "--context");
  EXPECT_EQ(config_flag("layers_override"), "--layers");
  EXPECT_EQ(config_flag("lora_train_embeddings"), "--lora-train-embeddings");
  EXPECT_EQ(config_flag("implementation"), "--preset");
  EXPECT_EQ(config_flag("page_copy_latency_s"), "page_copy_latency_s");  // no flag sets it
}

// The load-balancing loss's weight: in a document only when on (older plans stay byte-identical),
// read back, named by its flag, and refused for a model without experts.
TEST(ConfigFlag, TheRouterAuxLossRoundTripsAndNeedsExperts) {
  EXPECT_EQ(config_flag("router_aux_loss_coef"), "--router-aux-loss");
  Config c;
  c.context_tokens = 1024;
  c.chunk_tokens = 256;
  c.page_tokens = 64;
  EXPECT_FALSE(c.to_json().contains("router_aux_loss_coef"));
  c.router_aux_loss_coef = 0.001;
  const Json j = c.to_json();
  EXPECT_EQ(config_from_json(j, "plan.json").router_aux_loss_coef, 0.001);
  Json bad = j;
  bad["router_aux_loss_coef"] = -1;
  EXPECT_THROW(config_from_json(bad, "plan.json"), Error);
  EXPECT_NO_THROW(validate(c, models::load_model("tiny-moe")));
  try {
    validate(c, models::load_model("tiny"));
    FAIL() << "accepted for a dense model";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "--router-aux-loss");
    EXPECT_NE(std::string(e.what()).find("no experts"), std::string::npos) << e.what();
  }
}

// The published sweep's first context (docs/model.md, "How it measures"): a key of the published
// implementation only (no flag), set by the preset, read back, refused below 0 by its name.
TEST(ConfigFlag, TheSweepsFirstContextIsAPublishedKey) {
  EXPECT_EQ(config_flag("sweep_first_context"), "sweep_first_context");  // no flag sets it
  Config ours;
  EXPECT_FALSE(ours.to_json().contains("sweep_first_context"));
  Config c = published_preset(Config{});
  c.context_tokens = 8192;
  EXPECT_EQ(c.sweep_first_context, 8192);
  EXPECT_NO_THROW(validate(c, models::load_model("qwen2.5-7b")));
  Json j = c.to_json();
  EXPECT_EQ(j["sweep_first_context"], 8192);
  EXPECT_EQ(config_from_json(j, "plan.json").sweep_first_context, 8192);
  j["sweep_first_context"] = -1;
  try {
    config_from_json(j, "plan.json");
    FAIL() << "read a negative context";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sweep_first_context"), std::string::npos) << e.what();
  }
  Config bad = c;
  bad.sweep_first_context = -1;
  try {
    validate(bad, models::load_model("qwen2.5-7b"));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "sweep_first_context");
  }
}

// validate() names flags; a document's validation names the keys of the same vocabulary.
TEST(ConfigFlag, ADocumentNamesTheKeyTheFlagSets) {
  const models::ModelSpec m = models::load_model("tiny");
  Config c;
  c.context_tokens = 1024;
  c.chunk_tokens = 100;  // not a multiple of the page
  try {
    validate(c, m);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), config_flag("chunk_tokens"));
  }
  try {
    validate_document(c, m, "plan.json");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "plan.json");
    EXPECT_EQ(e.key(), "chunk_tokens");
  }
}

}  // namespace
}  // namespace oomb::step
