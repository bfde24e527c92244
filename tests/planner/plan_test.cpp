#include "planner/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "planner/search.h"
#include "planner_test_util.h"

namespace oomb::planner {
namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("oomb_planner_test_" + name)).string();
}

Plan plan_for(const std::string& model, const std::string& gpu, int64_t context) {
  Request r = testing::request(model, gpu);
  SearchResult res = search(r, context);
  EXPECT_TRUE(res.best.has_value());
  simulator::Scenario s = r.scenario;
  s.config = res.best->config;
  return make_plan(s, res.best->summary, "time", r.headroom);
}

// Expects `f` to throw oomb::Error whose where() and key() are the given ones.
template <class F>
void expect_error(F&& f, const std::string& where, const std::string& key) {
  try {
    f();
    FAIL() << "no error thrown (expected " << where << ": " << key << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    EXPECT_EQ(e.key(), key) << e.what();
  }
}

TEST(Plan, JsonRoundTripIsExact) {
  const Plan p = plan_for("qwen2.5-7b", "h200", int64_t{4} << 20);
  const Json j = p.to_json();
  EXPECT_EQ(j.at("schema"), "oomb.plan/1");
  const Plan q = plan_from_json(j, "mem");
  EXPECT_EQ(q.to_json(), j);
  EXPECT_EQ(q.config.to_json(), p.config.to_json());
  EXPECT_EQ(q.model.to_json(), p.model.to_json());
  EXPECT_EQ(q.allocation.to_json(), p.allocation.to_json());
  // And through a file, written atomically (no temp file left behind).
  const std::string path = temp_path("roundtrip.json");
  save_plan(path, p);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(load_plan(path).to_json(), j);
  std::filesystem::remove(path);
}

TEST(Plan, AllocationMatchesTheMemoryTable) {
  const Plan p = plan_for("qwen2.5-7b", "h200", int64_t{4} << 20);
  const auto& a = p.allocation;
  const simulator::Scenario s = p.scenario();
  const auto pc = simulator::page_counts(s);
  EXPECT_EQ(a.kv_pool_pages, pc.kv_pool_pages);
  EXPECT_EQ(a.grad_pool_pages, pc.grad_pool_pages);
  EXPECT_GT(a.kv_pool_pages, 0);
  // Everything on the device is either a pool, the workspace or the runtime reserve.
  const int64_t peak = p.prediction.at("peak_device_bytes").get<int64_t>();
  EXPECT_EQ(a.device_pool_bytes + a.workspace_bytes + a.runtime_reserve_bytes, peak);
  EXPECT_EQ(a.host_pool_bytes + a.host_other_bytes, p.prediction.at("peak_host_bytes").get<int64_t>());
  // Offloaded: the host holds every page of every layer, KV and gradient.
  EXPECT_EQ(a.host_kv_pages, p.model.layers * ((int64_t{4} << 20) / p.config.page_tokens));
  EXPECT_EQ(a.host_pool_bytes, a.host_kv_pages * a.kv_page_bytes + a.host_grad_pages * a.grad_page_bytes);
}

// The published sparse cache allocates a tensor per selected page, one layer's slot outside the
// backward (docs/model.md), not this project's pool for the union's bound: the plan's allocation
// describes the pool rows the table gives it. `oomb plan --preset oomb-published --attention sparse
// --allow-sparse --page 128 --budget 64 --resident-layers 2` stopped on an internal assertion before.
TEST(Plan, ThePublishedSparseCacheIsPlannedAsItsPoolRows) {
  for (int64_t context : {int64_t{32} << 10, int64_t{256} << 10}) {
    SCOPED_TRACE(context);
    simulator::Scenario s = testing::request("qwen2.5-7b", "h200").scenario;
    s.config.context_tokens = context;
    s.config.attention = step::Attention::sparse;
    s.config = step::published_preset(s.config);
    ASSERT_EQ(s.config.resident_layers, 2);
    const simulator::Summary sum = simulator::evaluate(s);
    const Plan p = make_plan(s, sum, "what-if", 0.0);
    const auto& a = p.allocation;
    const step::BufferTable t = simulator::memory_table(s);
    int64_t pool_rows = 0, backward_slot_rows = 0;
    for (const auto& r : t.rows) {
      if (r.name == step::row::kKvPool || r.name == step::row::kKvGradPool) pool_rows += r.bytes;
      if (r.name == step::row::kKvPoolBackwardSlot || r.name == step::row::kKvGradPoolBackwardSlot)
        backward_slot_rows += r.bytes;
    }
    EXPECT_EQ(a.device_pool_bytes, pool_rows);
    EXPECT_EQ(a.device_pool_bytes, a.kv_pool_pages * a.kv_page_bytes + a.grad_pool_pages * a.grad_page_bytes);
    // One slot of the modelled union (+ own) outside the backward, the other resident layer's slot
    // in the backward only; both below this project's pool for the union's bound.
    const auto pc = simulator::page_counts(s);
    EXPECT_EQ(a.kv_pool_pages * 2, pc.kv_pool_pages);
    EXPECT_EQ(backward_slot_rows, pool_rows);
    EXPECT_LT(a.kv_pool_pages, pc.kv_pool_capacity_pages);
    // And it reads back as written (the plan file's check simulates the configuration again).
    EXPECT_EQ(plan_from_json(p.to_json(), "mem").to_json(), p.to_json());
  }
}

TEST(Plan, CarriesTheBufferTableAndRoundTripsIt) {
  for (const char* kind : {"gpu", "cpu"}) {
    Request r = testing::request("tiny", "h200");
    r.scenario.gpu.kind = kind;
    r.scenario.config.loss_dtype = Dtype::bf16;
    SearchResult res = search(r, 8192);
    ASSERT_TRUE(res.best.has_value());
    simulator::Scenario s = r.scenario;
    s.config = res.best->config;
    const Plan p = make_plan(s, res.best->summary, "time", r.headroom);
    SCOPED_TRACE(kind);
    EXPECT_EQ(p.config.loss_dtype, Dtype::bf16);  // the planner keeps the config's loss dtype
    // One buffer per row of the memory table, with its tier, dtype, bytes and phases.
    const step::BufferTable t = simulator::memory_table(s);
    ASSERT_EQ(p.buffers.size(), t.rows.size());
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const auto& b = p.buffers[i];
      const auto& row = t.rows[i];
      EXPECT_EQ(b.name, row.name);
      EXPECT_EQ(b.category, row.category);
      EXPECT_EQ(b.tier, row.tier);
      EXPECT_EQ(b.shape, row.shape);
      EXPECT_EQ(b.dtype, row.dtype);
      EXPECT_EQ(b.bytes, row.bytes);
      EXPECT_EQ(b.phases, row.phases);
      EXPECT_NE(b.phases, 0u) << b.name;
      EXPECT_TRUE(find_dtype(step::to_json(b).value("dtype", "")).has_value()) << b.name;  // written by name
    }
    // The rows alive at the predicted peak phase add up to the predicted peak.
    const std::string peak_phase = p.prediction.at("peak_phase").get<std::string>();
    int64_t at_peak = 0;
    for (const auto& b : p.buffers)
      if (b.tier == step::Tier::device && (b.phases & step::phase_bit(step::phase_from_string(peak_phase, "peak"))))
        at_peak += b.bytes;
    EXPECT_EQ(at_peak, p.prediction.at("peak_device_bytes").get<int64_t>());
    // JSON: {"name", "category", "tier", "shape", "dtype", "bytes", "phases"} per row, read back equal.
    const Json j = p.to_json();
    ASSERT_TRUE(j.at("buffers").is_array());
    const Json& first = j.at("buffers").at(0);
    EXPECT_EQ(first.at("name"), "weights");
    EXPECT_EQ(first.at("tier"), "device");
    EXPECT_EQ(first.at("dtype"), Dtype::bf16);
    EXPECT_EQ(first.at("phases"), Json({"fill", "recompute", "loss", "backward", "optimizer"}));
    const Plan q = plan_from_json(j, "mem");
    ASSERT_EQ(q.buffers.size(), p.buffers.size());
    for (size_t i = 0; i < p.buffers.size(); ++i) EXPECT_EQ(step::to_json(q.buffers[i]), step::to_json(p.buffers[i]));
    EXPECT_EQ(q.to_json(), j);
    bool has_gemm = false;
    for (const auto& b : q.buffers) has_gemm |= b.name == "gemm_workspace";
    EXPECT_EQ(has_gemm, std::string(kind) == "gpu");
  }
}

TEST(Plan, OldPlansWithoutBuffersOrLossDtypeStillLoad) {
  Json j = plan_for("tiny", "h200", 4096).to_json();
  j.erase("buffers");
  j["config"].erase("loss_dtype");
  j["prediction"].erase("peak_phase");
  const Plan p = plan_from_json(j, "old.json");
  EXPECT_TRUE(p.buffers.empty());
  EXPECT_EQ(p.config.loss_dtype, Dtype::fp32);
}

// Partial checkpointing travels with the plan; plans written before it read as full checkpointing,
// and a plan keeping every layer (or keeping layers without checkpointing) is refused by key.
TEST(Plan, KeptLayersRoundTripAndOldPlansReadAsNone) {
  Request r = testing::request("qwen2.5-14b", "h200");
  const SearchResult res = search(r, int64_t{4} << 20);
  ASSERT_TRUE(res.best);
  ASSERT_TRUE(res.best->config.checkpointing);
  ASSERT_GT(res.best->config.kept_layers, 0) << "qwen2.5-14b at 4M on h200 keeps some of its layers";
  simulator::Scenario s = r.scenario;
  s.config = res.best->config;
  const Plan p = make_plan(s, res.best->summary, "time", r.headroom);
  Json j = p.to_json();
  EXPECT_EQ(j["config"]["kept_layers"], res.best->config.kept_layers);
  const Plan q = plan_from_json(j, "mem");
  EXPECT_EQ(q.config.kept_layers, res.best->config.kept_layers);
  EXPECT_EQ(q.to_json(), j);
  bool kept_row = false;
  for (const auto& b : q.buffers) kept_row |= b.name == "kept_layer_activations";
  EXPECT_TRUE(kept_row);

  Json old = plan_for("tiny", "h200", 4096).to_json();
  old["config"].erase("kept_layers");
  EXPECT_EQ(plan_from_json(old, "old.json").config.kept_layers, 0);
  Json all = j;
  all["config"]["kept_layers"] = 48;
  expect_error([&] { plan_from_json(all, "all.json"); }, "all.json", "kept_layers");
  Json off = j;
  off["config"]["checkpointing"] = false;
  expect_error([&] { plan_from_json(off, "off.json"); }, "off.json", "kept_layers");
  Json negative = j;
  negative["config"]["kept_layers"] = -1;
  expect_error([&] { plan_from_json(negative, "neg.json"); }, "neg.json", "kept_layers");
}

TEST(Plan, RejectsBadBufferRowsNamingTheRowAndKey) {
  const Json good = plan_for("tiny", "h200", 4096).to_json();
  ASSERT_GE(good.at("buffers").size(), 3u);
  Json j = good;
  j["buffers"][2]["tier"] = "gpu";
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[2]", "tier");
  j = good;
  j["buffers"][1]["phases"] = Json::array({"loss", "stage2"});
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[1]: phases", "stage2");
  j = good;
  j["buffers"][1]["phases"] = Json::array();
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[1]", "phases");
  j = good;
  j["buffers"][0]["bytes"] = -1;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[0]", "bytes");
  j = good;
  j["buffers"][0].erase("dtype");
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[0]", "dtype");
  j = good;
  j["buffers"][1]["name"] = j["buffers"][0]["name"];
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "buffers");
  j = good;
  j["buffers"] = Json::object();
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "buffers");
  j = good;
  j["config"]["loss_dtype"] = "fp8";
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: config", "loss_dtype");
}

// A hand-edited plan is checked like every other input: its recorded prediction, allocation and
// buffer table must be what its own configuration gives, and every key must be one a plan has.
TEST(Plan, HandEditsAreRefusedNamingTheKey) {
  const Json good = plan_for("tiny", "h200", 4096).to_json();
  EXPECT_NO_THROW(plan_from_json(good, "plan.json"));
  auto message = [](const Json& j) -> std::string {
    try {
      plan_from_json(j, "plan.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  Json j = good;
  j["buffers"][0]["dtype"] = "fp7";
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[0]", "dtype");
  j = good;
  j["buffers"] = Json::array();
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "buffers");
  j = good;
  j["buffers"][0]["bytes"] = int64_t{1} << 62;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: buffers[0]", "bytes");
  j = good;
  j["prediction"]["peak_device_bytes"] = 1;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: prediction", "peak_device_bytes");
  const std::string both = message(j);
  EXPECT_NE(both.find("'peak_device_bytes': 1 differs from " + good["prediction"]["peak_device_bytes"].dump()),
            std::string::npos)
      << both;
  j = good;
  j["prediction"]["step_s"] = good["prediction"]["step_s"].get<double>() * 2;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: prediction", "step_s");
  j = good;
  j["allocation"]["workspace_bytes"] = 1;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: allocation", "workspace_bytes");
  j = good;
  j["headroom"] = 0.999;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "headroom");
  j = good;
  j["objective"] = "zzz";
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "objective");
  for (const char* o : {"time", "memory", "context", "what-if"}) {
    j = good;
    j["objective"] = o;
    EXPECT_EQ(message(j), "accepted") << o;
  }
  j = good;
  j["config"]["zzz_knob"] = 1;
  expect_error([&] { plan_from_json(j, "plan.json: config"); }, "plan.json: config", "zzz_knob");
  j = good;
  j["extra"] = 1;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "extra");
  j = good;
  j["allocation"]["extra"] = 1;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: allocation", "extra");
}

TEST(Plan, RejectsOtherSchemasNamingTheFile) {
  Json j = plan_for("tiny", "h200", 4096).to_json();
  for (const char* schema : {"oomb.plan/0", "oomb.plan/2", "oomb.model/1"}) {
    j["schema"] = schema;
    expect_error([&] { plan_from_json(j, "old.json"); }, "old.json", "schema");
  }
  j.erase("schema");
  expect_error([&] { plan_from_json(j, "old.json"); }, "old.json", "schema");
}

TEST(Plan, RejectsMissingKeysNamingFileAndKey) {
  const Json good = plan_for("tiny", "h200", 4096).to_json();
  for (const char* key : {"model_id", "gpu_id", "host_id", "context_tokens", "config", "allocation", "prediction",
                          "model_spec", "gpu_spec", "host_spec", "notes"}) {
    Json j = good;
    j.erase(key);
    expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", key);
  }
  // Nested keys name their section.
  Json j = good;
  j["allocation"].erase("kv_pool_pages");
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: allocation", "kv_pool_pages");
  j = good;
  j["config"].erase("chunk_tokens");
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: config", "chunk_tokens");
  j = good;
  j["prediction"].erase("step_s");
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: prediction", "step_s");
  j = good;
  j["allocation"]["workspace_bytes"] = -1;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json: allocation", "workspace_bytes");
  j = good;
  j["context_tokens"] = good["context_tokens"].get<int64_t>() * 2;
  expect_error([&] { plan_from_json(j, "plan.json"); }, "plan.json", "context_tokens");
}

TEST(Plan, RejectsTruncatedAndMissingFiles) {
  const std::string text = plan_for("tiny", "h200", 4096).to_json().dump(2);
  const std::string path = temp_path("truncated.json");
  for (size_t cut : {size_t{0}, size_t{1}, text.size() / 2, text.size() - 2}) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(text.data(), 1, cut, f);
    std::fclose(f);
    try {
      load_plan(path);
      FAIL() << "truncated at " << cut;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
  EXPECT_THROW(load_plan(path), Error);
}

TEST(Plan, CheckAgainstAnotherModelOrGpuNamesBoth) {
  const Plan p = plan_for("qwen2.5-7b", "h200", 1 << 20);
  EXPECT_NO_THROW(check_plan_against(p, models::load_model("qwen2.5-7b"), models::load_gpu("h200")));
  try {
    check_plan_against(p, models::load_model("llama-3.1-8b"), models::load_gpu("h200"));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("qwen2.5-7b"), std::string::npos) << m;
    EXPECT_NE(m.find("llama-3.1-8b"), std::string::npos) << m;
  }
  try {
    check_plan_against(p, models::load_model("qwen2.5-7b"), models::load_gpu("a100-80gb-sxm"));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("h200"), std::string::npos) << m;
    EXPECT_NE(m.find("a100-80gb-sxm"), std::string::npos) << m;
  }
  // Same id, different shapes (a user's edited model file): still another model.
  models::ModelSpec edited = models::load_model("qwen2.5-7b");
  edited.layers = 14;
  EXPECT_THROW(check_plan_against(p, edited, models::load_gpu("h200")), Error);
}

TEST(Plan, IsSelfContained) {
  // The embedded specs rebuild the scenario without the catalog, and predict the same thing.
  const Plan p = plan_for("llama-3.2-1b", "a100-80gb-sxm", 256 << 10);
  const Plan q = plan_from_json(p.to_json(), "mem");
  const simulator::Summary s = simulator::evaluate(q.scenario());
  EXPECT_EQ(simulator::to_json(s), p.prediction);
}

}  // namespace
}  // namespace oomb::planner
