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
