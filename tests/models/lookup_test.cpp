#include "models/lookup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "models/catalog.h"
#include "models/specs.h"

namespace oomb::models {
namespace {

TEST(Lookup, IdsAsPeopleTypeThem) {
  EXPECT_EQ(resolve_catalog_id("llm", "qwen2.5-7b"), "qwen2.5-7b");
  EXPECT_EQ(resolve_catalog_id("llm", "Qwen2.5-7B"), "qwen2.5-7b");
  EXPECT_EQ(resolve_catalog_id("llm", "qwen2_5-7b"), "qwen2.5-7b");
  EXPECT_EQ(resolve_catalog_id("llm", "Qwen2.5-7B-Instruct"), "qwen2.5-7b");  // an alias the catalog declares
  EXPECT_EQ(resolve_catalog_id("llm", "Meta-Llama-3.1-8B-Instruct"), "llama-3.1-8b");
  EXPECT_EQ(resolve_catalog_id("llm", "Mistral-7B-Instruct-v0.3"), "mistral-7b-v0.3");
  EXPECT_EQ(resolve_catalog_id("llm", "Qwen3-8B"), "qwen3-8b");
  EXPECT_EQ(resolve_catalog_id("gpu", "H200"), "h200");
  EXPECT_EQ(resolve_catalog_id("gpu", "h100"), "h100-sxm");
  EXPECT_EQ(resolve_catalog_id("gpu", "H100_SXM"), "h100-sxm");
  EXPECT_EQ(resolve_catalog_id("host", "DGX-H200"), "dgx-h200");
  // Not ids: no match rather than a guess.
  EXPECT_EQ(resolve_catalog_id("llm", "qwen2.5"), "");
  EXPECT_EQ(resolve_catalog_id("gpu", "h10"), "");
  EXPECT_EQ(resolve_catalog_id("llm", ""), "");
  // Loading goes through the same resolution.
  EXPECT_EQ(load_model("Qwen2.5-7B").id, "qwen2.5-7b");
  EXPECT_EQ(load_gpu("H200").id, "h200");
  EXPECT_EQ(load_gpu("h100").id, "h100-sxm");
}

TEST(Lookup, EveryIdAndAliasResolvesToItsOwnEntry) {
  // An alias that normalises to another entry's id or alias would make both ambiguous.
  for (const char* kind : {"llm", "gpu", "host"})
    for (const auto& id : catalog_ids(kind)) {
      EXPECT_EQ(resolve_catalog_id(kind, id), id) << kind << "/" << id;
      EXPECT_EQ(resolve_catalog_id(kind, normalized_id(id)), id) << kind << "/" << id;
      for (const auto& alias : catalog_aliases(kind, id)) EXPECT_EQ(resolve_catalog_id(kind, alias), id) << alias;
    }
}

TEST(Lookup, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("plan", "plann"), 1);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("abc", ""), 3);
}

TEST(Lookup, ClosestIdsNearestFirstAndOnlyPlausible) {
  const std::vector<std::string> subs = {"calibrate", "models", "plan", "run", "simulate", "sweep", "validate"};
  EXPECT_EQ(closest_ids("plann", subs), std::vector<std::string>{"plan"});
  EXPECT_EQ(closest_ids("simulat", subs).front(), "simulate");
  EXPECT_EQ(closest_ids("xyzzy-frobnicate", subs), std::vector<std::string>{});
  // Ambiguous normalised forms are not resolved: both are offered instead.
  EXPECT_EQ(closest_ids("a-b", {"a.b", "ab"}).size(), 2u);
}

TEST(Lookup, UnknownIdsSayDidYouMean) {
  auto message = [](auto load, const std::string& id) {
    try {
      load(id);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string m = message(load_model, "qwen2.5-7");
  EXPECT_NE(m.find("did you mean qwen2.5-7b"), std::string::npos) << m;
  EXPECT_NE(m.find("known: "), std::string::npos) << m;
  const std::string g = message(load_gpu, "h2000");
  EXPECT_NE(g.find("did you mean h200"), std::string::npos) << g;
  const std::string far = message(load_gpu, "tpu-v5e-pod");
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
}

// A folder in the current directory named like a catalog id does not replace the catalog entry:
// the argument is a path only when it has a '/' or ends in .json.
TEST(Lookup, CatalogIdWinsOverAFolderOfThatNameUnlessWrittenAsAPath) {
  namespace fs = std::filesystem;
  const fs::path old = fs::current_path();
  const fs::path dir = fs::temp_directory_path() / ("oomb_lookup_" + std::to_string(::getpid()));
  fs::create_directories(dir / "tiny");
  fs::create_directories(dir / "Qwen2.5-7B");
  fs::create_directories(dir / "mymodel");
  const std::string cfg =
      R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, "intermediate_size": 256,
          "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
          "max_position_embeddings": 4096})";
  for (const char* d : {"tiny", "Qwen2.5-7B", "mymodel"}) std::ofstream(dir / d / "config.json") << cfg;
  fs::current_path(dir);
  const ModelSpec catalog = load_model("tiny"), folder = load_model("./tiny"), slash = load_model("tiny/");
  const ModelSpec typed = load_model("Qwen2.5-7B"), as_path = load_model("./Qwen2.5-7B");
  const ModelSpec bare = load_model("mymodel");  // no catalog id: the folder
  const ModelSpec file = load_model("tiny/config.json");
  fs::current_path(old);
  fs::remove_all(dir);
  EXPECT_EQ(catalog.id, "tiny");
  EXPECT_EQ(catalog.hidden, 64);
  EXPECT_EQ(folder.hidden, 128);
  EXPECT_EQ(folder.family, "llama");
  EXPECT_EQ(slash.hidden, 128);
  EXPECT_EQ(typed.id, "qwen2.5-7b");
  EXPECT_EQ(as_path.hidden, 128);
  EXPECT_EQ(bare.hidden, 128);
  EXPECT_EQ(file.hidden, 128);
}

}  // namespace
}  // namespace oomb::models
