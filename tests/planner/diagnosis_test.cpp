#include "planner/diagnosis.h"

#include <gtest/gtest.h>

#include "models/specs.h"
#include "planner_test_util.h"

namespace oomb::planner {
namespace {

using step::Attention;
using testing::request;

constexpr int64_t M = 1024 * 1024;

// Every suggestion fits when re-evaluated on its own hardware.
void expect_suggestions_fit(const Request& r, const Diagnosis& d) {
  for (const auto& s : d.suggestions) {
    simulator::Scenario sc = r.scenario;
    sc.model = models::load_model(s.model_id);
    sc.gpu = models::load_gpu(s.gpu_id);
    sc.host = models::load_host(s.host_id);
    sc.config = s.result.config;
    const simulator::Summary sum = simulator::evaluate(sc);
    EXPECT_TRUE(sum.feasible && usage_of(sc, sum, r.headroom).fits()) << s.change;
    EXPECT_FALSE(s.flags.empty()) << s.change;
  }
}

// Known answer: Qwen2.5-7B at 4M on a 128 GiB workstation runs out of host memory for the
// offloaded pages (672 GiB), and keeping them all on the GPU is hopeless.
TEST(Diagnosis, HostRamBoundTargetNamesHostMemory) {
  const Request r = request("qwen2.5-7b", "h200", "workstation-128g");
  const SearchResult res = search(r, 4 * M);
  ASSERT_FALSE(res.best);
  const Diagnosis d = diagnose(r, 4 * M, res);
  EXPECT_EQ(d.target, "dense attention (exact gradients)");
  ASSERT_TRUE(d.binding.has_value());
  EXPECT_TRUE(*d.binding == simulator::Binding::pinned_host_memory || *d.binding == simulator::Binding::host_ram)
      << to_string(*d.binding);
  bool host_named = false;
  for (const auto& v : d.violations) host_named = host_named || v.find("host") != std::string::npos;
  EXPECT_TRUE(host_named);
  ASSERT_FALSE(d.failures.empty());
  EXPECT_TRUE(step::offloads(d.failures.front().closest.config, r.scenario.model));
  // A bigger host from the catalog is among the ways out, and it really fits.
  bool bigger_host = false;
  for (const auto& s : d.suggestions)
    if (s.host_id != "workstation-128g" && s.gpu_id == "h200" && s.result.config.gpus == 1) bigger_host = true;
  EXPECT_TRUE(bigger_host);
  expect_suggestions_fit(r, d);
  // Sparse attention does not shrink the host tier: it must not be suggested as a fix here.
  for (const auto& s : d.suggestions) EXPECT_EQ(s.result.config.attention, step::Attention::dense) << s.change;
}

TEST(Diagnosis, DeviceBoundTargetSuggestsBiggerGpuOrTensorParallelism) {
  Request r = request("qwen2.5-7b", "h200", "", {"resident_layers"});
  r.scenario.config.resident_layers = r.scenario.model.layers;  // all on the GPU, 1M: does not fit
  const SearchResult res = search(r, 1 * M);
  ASSERT_FALSE(res.best);
  const Diagnosis d = diagnose(r, 1 * M, res);
  EXPECT_EQ(d.binding, simulator::Binding::device_memory);
  bool unfix = false, gpu = false, tp = false;
  for (const auto& s : d.suggestions) {
    unfix = unfix || s.flags.find("--resident-layers") != std::string::npos;
    gpu = gpu || s.gpu_id != "h200";
    tp = tp || s.result.config.gpus > 1;
  }
  EXPECT_TRUE(unfix);
  EXPECT_TRUE(gpu);
  EXPECT_TRUE(tp);
  expect_suggestions_fit(r, d);
}

TEST(Diagnosis, FixedFp32GradientsSuggestBf16) {
  // 3.5M tokens on a workstation with 448 GiB pinnable: fp32 KV gradients need 168 KiB per token
  // on the host (588 GiB), bf16 ones 112 KiB (392 GiB).
  Request r = request("qwen2.5-7b", "h200", "workstation-512g", {"kv_grad_dtype"});
  r.scenario.config.kv_grad_dtype = Dtype::fp32;
  const SearchResult res = search(r, int64_t{3} * M + M / 2);
  ASSERT_FALSE(res.best);
  const Diagnosis d = diagnose(r, int64_t{3} * M + M / 2, res);
  bool bf16 = false;
  for (const auto& s : d.suggestions)
    if (s.flags == "--kv-grad-dtype bf16") {
      bf16 = true;
      EXPECT_EQ(s.result.config.kv_grad_dtype, Dtype::bf16);
    }
  EXPECT_TRUE(bf16);
  expect_suggestions_fit(r, d);
}

TEST(Diagnosis, SparseFallbackIsDiagnosedForTheDenseTarget) {
  const Request r = request("qwen2.5-32b", "h200");
  const SearchResult res = search(r, 2 * M);
  ASSERT_TRUE(res.best && res.sparse_fallback);
  const Diagnosis d = diagnose(r, 2 * M, res);
  EXPECT_EQ(d.target, "dense attention (exact gradients)");
  EXPECT_EQ(d.binding, simulator::Binding::device_memory);
  EXPECT_FALSE(d.suggestions.empty());
  for (const auto& s : d.suggestions) EXPECT_EQ(s.result.config.attention, step::Attention::dense) << s.change;
  expect_suggestions_fit(r, d);
}

TEST(Diagnosis, SuggestsSparseWithTheLargestBudgetThatFits) {
  Request r = request("qwen2.5-32b", "h200", "", {"attention"});
  r.scenario.config.attention = step::Attention::dense;
  const SearchResult res = search(r, 2 * M);
  ASSERT_FALSE(res.best);
  const Diagnosis d = diagnose(r, 2 * M, res);
  const Suggestion* sparse = nullptr;
  for (const auto& s : d.suggestions)
    if (s.result.config.attention == step::Attention::sparse) sparse = &s;
  ASSERT_NE(sparse, nullptr);
  EXPECT_GE(sparse->result.config.page_budget, kDefaultMinBudget);
  // One budget step up does not fit (or is beyond the search range).
  Request q = r;
  q.fixed.insert("budget");
  q.scenario.config.attention = step::Attention::sparse;
  q.scenario.config.page_budget = sparse->result.config.page_budget * 2;
  if (q.scenario.config.page_budget <= 1024) {
    EXPECT_FALSE(search(q, 2 * M).best);
  }
  expect_suggestions_fit(r, d);
}

}  // namespace
}  // namespace oomb::planner
