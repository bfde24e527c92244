// The planning requests `oomb plan` answers, through the library (planner/answer.h): the answer's
// data, its JSON and its text. (The command line itself is tested in tests/cli.)
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "core/error.h"
#include "planner/answer.h"
#include "planner/defaults.h"
#include "planner/executable.h"
#include "planner_test_util.h"

namespace oomb::planner {
namespace {

// A request as `oomb plan` builds it with no knob given: training defaults (AdamW placed by the
// planner, fused 1K loss tiles).
PlanQuery query(const std::string& model, const std::string& gpu, int64_t context, const std::string& host = "") {
  PlanQuery q;
  q.request = testing::request(model, gpu, host);
  q.request.optimizer_auto = true;
  q.request.scenario.config.optimizer = step::Optimizer::gpu;
  q.request.scenario.config.logits_chunk_tokens = kDefaultLogitsChunk;
  q.context = context;
  return q;
}

bool has(const std::string& text, const std::string& s) { return text.find(s) != std::string::npos; }

TEST(PlanAnswer, ReadmeFirstRequest) {
  const PlanAnswer a = answer(query("qwen2.5-7b", "h200", 4 << 20));
  ASSERT_TRUE(a.chosen);
  ASSERT_TRUE(a.plan);
  EXPECT_EQ(a.context, 4 << 20);
  EXPECT_EQ(a.chosen->config.attention, step::Attention::dense);
  EXPECT_TRUE(a.chosen->summary.feasible);
  EXPECT_EQ(a.plan->prediction["peak_device_bytes"].get<int64_t>(), a.chosen->summary.peak_device_bytes);
  EXPECT_FALSE(a.warning.empty());  // 4M is beyond the model's max_position
  EXPECT_EQ(a.baselines.size(), 2u);  // the best and the published standard training
  const std::string text = a.describe();
  for (const char* s : {"attention dense (exact gradients)", "Host memory:", "Step time:", "Step time bound by:",
                        "Device memory:", "kv_pool", "Close alternatives", "Standard training at this context"})
    EXPECT_TRUE(has(text, s)) << s << "\n" << text;
}

TEST(PlanAnswer, JsonCarriesThePlanAndItsPrediction) {
  const PlanAnswer a = answer(query("qwen2.5-7b", "h200", 1 << 20));
  ASSERT_TRUE(a.plan);
  const Json j = a.to_json();
  for (const char* k : {"plan", "prediction", "alternatives", "diagnosis", "baselines", "search"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["plan"], a.plan->to_json());
  EXPECT_TRUE(j["prediction"]["feasible"].get<bool>());
  EXPECT_EQ(j["prediction"]["peak_device_bytes"].get<int64_t>(), a.chosen->summary.peak_device_bytes);
  EXPECT_EQ(j["search"]["evaluations"].get<int64_t>(), a.search.evaluations);
}

TEST(PlanAnswer, MaxContextFindsDenseAndSparse) {
  PlanQuery q = query("qwen2.5-7b", "a100-80gb-sxm", 0);
  q.max_context = true;
  const PlanAnswer a = answer(q);
  ASSERT_TRUE(a.max_dense && a.max_sparse);
  ASSERT_TRUE(a.chosen);
  EXPECT_GT(a.context, 0);
  EXPECT_EQ(a.chosen->config.context_tokens, a.context);
  const std::string text = a.describe();
  EXPECT_TRUE(has(text, "dense (exact gradients)")) << text;
  EXPECT_TRUE(has(text, "sparse (approximate)")) << text;
  EXPECT_TRUE(has(text, "limited by device memory")) << text;
}

TEST(PlanAnswer, ParetoFrontKeepsTheChosenPlan) {
  PlanQuery q = query("qwen2.5-7b", "h200", 1 << 20);
  q.pareto = true;
  const PlanAnswer a = answer(q);
  ASSERT_TRUE(a.chosen);
  ASSERT_FALSE(a.pareto.empty());
  bool found = false;
  for (const Candidate& k : a.pareto) found = found || k.config.to_json() == a.chosen->config.to_json();
  EXPECT_TRUE(found) << "the chosen plan is on its own frontier";
  // No point of the front dominates another.
  for (const Candidate& x : a.pareto)
    for (const Candidate& y : a.pareto)
      if (&x != &y && x.config.attention == y.config.attention && x.config.kv_grad_dtype == y.config.kv_grad_dtype &&
          x.config.page_budget == y.config.page_budget) {
        EXPECT_FALSE(x.summary.peak_device_bytes < y.summary.peak_device_bytes &&
                     x.summary.step_s < y.summary.step_s * (1 - 1e-9))
            << describe_knobs(x.config, q.request.scenario.model) << " dominates "
            << describe_knobs(y.config, q.request.scenario.model);
      }
  EXPECT_TRUE(has(a.describe(), "Pareto frontier"));
}

// The frontier's text shows the ends of each run of kept-layer counts and counts the points between
// on a line under its last: every point is a row or counted once; the JSON lists every point.
TEST(PlanAnswer, ParetoTextCollapsesKeptLayerRunsAndAccountsForEveryPoint) {
  PlanQuery q = query("qwen2.5-7b", "h200", 1 << 20);
  q.pareto = true;
  const PlanAnswer a = answer(q);
  ASSERT_GT(a.pareto.size(), 20u);
  const std::string text = a.describe();
  const size_t start = text.find("Pareto frontier");
  ASSERT_NE(start, std::string::npos);
  size_t rows = 0, counted = 0, runs = 0;
  std::istringstream in(text.substr(start));
  std::string line;
  std::getline(in, line);
  size_t shown = 0;
  ASSERT_EQ(std::sscanf(line.c_str(), "Pareto frontier (peak device memory vs step time), %*d points (%zu shown", &shown), 1)
      << line;
  while (std::getline(in, line) && !line.empty()) {
    long long n = 0, lo = 0, hi = 0, layers = 0;
    if (const size_t at = line.find("^ and "); at != std::string::npos) {
      ASSERT_EQ(std::sscanf(line.c_str() + at, "^ and %lld points of these settings between %*s %*s and this line: "
                                                "last %lld..%lld of %lld layers kept",
                            &n, &lo, &hi, &layers),
                4)
          << line;
      EXPECT_EQ(n, hi - lo + 1) << line;
      EXPECT_GE(n, 2) << "a run of four or more points is collapsed: " << line;
      EXPECT_EQ(layers, 28);
      counted += static_cast<size_t>(n);
      ++runs;
    } else if (line.find(" GiB ") != std::string::npos || line.find(" MiB ") != std::string::npos) {
      ++rows;
    }
  }
  EXPECT_GT(runs, 0u) << text.substr(start);
  EXPECT_EQ(rows, shown);
  EXPECT_EQ(rows + counted, a.pareto.size()) << text.substr(start);
  EXPECT_EQ(a.to_json()["pareto"].size(), a.pareto.size());
}

TEST(PlanAnswer, NothingFitsGivesADiagnosis) {
  const PlanAnswer a = answer(query("qwen2.5-7b", "h200", 4 << 20, "workstation-128g"));
  EXPECT_FALSE(a.chosen);
  EXPECT_FALSE(a.plan);
  ASSERT_TRUE(a.diagnosis);
  EXPECT_FALSE(a.diagnosis->failures.empty());
  EXPECT_TRUE(has(a.describe(), "NO PLAN FITS"));
  EXPECT_TRUE(a.to_json()["plan"].is_null());
}

TEST(PlanAnswer, SparseFallbackIsSaidLoudly) {
  const PlanAnswer a = answer(query("qwen2.5-32b", "h200", 2 << 20));
  ASSERT_TRUE(a.chosen);
  EXPECT_TRUE(a.sparse_fallback);
  EXPECT_EQ(a.chosen->config.attention, step::Attention::sparse);
  ASSERT_TRUE(a.plan);
  bool noted = false;
  for (const std::string& n : a.plan->notes) noted = noted || has(n, "SPARSE FALLBACK");
  EXPECT_TRUE(noted);
  EXPECT_TRUE(has(a.describe(), "SPARSE FALLBACK"));
}

TEST(PlanAnswer, ANodeOfEightGpusIsComparedWithContextParallelism) {
  PlanQuery q = query("qwen2.5-7b", "h100-sxm", 4 << 20);
  q.node = node_gpus(8, "qwen2.5-7b");
  if (q.node.tp > 1) q.request.scenario.config.gpus = q.node.tp;
  const PlanAnswer a = answer(q);
  ASSERT_TRUE(a.comparison);
  EXPECT_GE(a.comparison->rows.size(), 3u);
  EXPECT_TRUE(has(a.describe(), "Multi-GPU comparison"));
  EXPECT_FALSE(a.to_json()["multi_gpu"].is_null());
}

TEST(PlanAnswer, MinRecallWithoutACurveIsRefusedByFlag) {
  PlanQuery q = query("qwen2.5-7b", "h200", 1 << 20);
  q.min_recall = 0.9;
  try {
    (void)answer(q);
    FAIL() << "--min-recall without a curve was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "--min-recall")) << e.what();
    EXPECT_TRUE(has(e.what(), "--recall-curve")) << e.what();
  }
}

// What adapters buy: qwen2.5-32b at 1M on one H200 fits with exact (dense) gradients under LoRA,
// while full fine-tuning fits only with sparse attention; the answer says both.
TEST(PlanAnswer, LoraIsPlannedNextToFullFineTuning) {
  PlanQuery q = query("qwen2.5-32b", "h200", 1 << 20);
  q.request.scenario.config.lora_rank = 16;
  q.request.fixed.insert("lora_rank");
  const PlanAnswer a = answer(q);
  ASSERT_TRUE(a.chosen);
  EXPECT_EQ(a.chosen->config.lora_rank, 16);
  EXPECT_EQ(a.chosen->config.attention, step::Attention::dense);
  EXPECT_FALSE(a.sparse_fallback);
  ASSERT_TRUE(a.full_finetune);
  EXPECT_EQ(a.full_finetune->config.lora_rank, 0);
  EXPECT_TRUE(a.full_finetune_fits);
  EXPECT_EQ(a.full_finetune->config.attention, step::Attention::sparse);
  const std::string text = a.describe();
  EXPECT_TRUE(has(text, "LoRA rank 16")) << text;
  EXPECT_TRUE(has(text, "lora_adapters")) << text;
  EXPECT_TRUE(has(text, "Full fine-tuning (every parameter trained")) << text;
  // Like for like: the LoRA plan's settings with every parameter trained hold more and take longer.
  ASSERT_TRUE(a.full_finetune_same);
  EXPECT_EQ(a.full_finetune_same->config.lora_rank, 0);
  EXPECT_EQ(a.full_finetune_same->config.chunk_tokens, a.chosen->config.chunk_tokens);
  EXPECT_GT(a.full_finetune_same->summary.peak_device_bytes, a.chosen->summary.peak_device_bytes);
  EXPECT_GT(a.full_finetune_same->summary.step_s, a.chosen->summary.step_s);
  EXPECT_TRUE(has(text, "no dense full fine-tuning fits")) << text;
  EXPECT_FALSE(a.to_json()["full_finetune"].is_null());
  // A plan oomb run follows (adapters on a frozen base); with trained embeddings it is on paper.
  std::string why;
  const models::ModelSpec& m = a.query.request.scenario.model;
  EXPECT_TRUE(executable(m, a.chosen->config, &why)) << why;
  step::Config emb = a.chosen->config;
  emb.lora_train_embeddings = true;
  EXPECT_FALSE(executable(m, emb, &why));
  EXPECT_TRUE(has(why, "--lora-train-embeddings")) << why;
  // A model the executor does not compute (layers without RoPE, Llama 4's): every plan of it is on
  // paper, and the reason names the model, not a setting to change.
  models::ModelSpec nope = m;
  nope.nope_layers = {3};
  EXPECT_FALSE(executable(nope, a.chosen->config, &why));
  EXPECT_TRUE(has(why, "layers without RoPE is planned, not run")) << why;
  EXPECT_TRUE(has(why, "no setting makes it run")) << why;
  // Without LoRA the answer has no such comparison.
  EXPECT_FALSE(answer(query("qwen2.5-7b", "h200", 1 << 20)).full_finetune);
}

}  // namespace
}  // namespace oomb::planner
