#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "models/specs.h"
#include "planner/search.h"
#include "planner_test_util.h"

namespace oomb::planner {
namespace {

using step::Attention;
using testing::fits_under_evaluate;
using testing::request;

constexpr int64_t M = 1024 * 1024;

bool fits_at(Request r, step::Attention mode, int64_t n) {
  r.fixed.insert("attention");
  r.scenario.config.attention = mode;
  return search(r, n).best.has_value();
}

void expect_tight(const Request& r, step::Attention mode, const std::string& what) {
  const MaxContext mc = max_context(r, mode);
  ASSERT_TRUE(mc.available) << what;
  ASSERT_GT(mc.tokens, 0) << what;
  ASSERT_FALSE(mc.capped) << what;
  EXPECT_EQ(mc.tokens % mc.step_tokens, 0) << what;
  if (r.fixed.count("page")) {
    EXPECT_EQ(mc.step_tokens, r.scenario.config.page_tokens) << what;
  }
  EXPECT_TRUE(fits_at(r, mode, mc.tokens)) << what << " at " << mc.tokens;
  EXPECT_FALSE(fits_at(r, mode, mc.tokens + mc.step_tokens)) << what << " at " << mc.tokens + mc.step_tokens;
  ASSERT_TRUE(mc.plan) << what;
  EXPECT_EQ(mc.plan->config.context_tokens, mc.tokens);
  EXPECT_EQ(mc.plan->config.attention, mode);
  EXPECT_TRUE(fits_under_evaluate(r, mc.plan->config)) << what;
  EXPECT_TRUE(mc.binding.has_value()) << what;
  EXPECT_FALSE(mc.binding_notes.empty()) << what;
}

TEST(MaxContext, IsTight) {
  expect_tight(request("qwen2.5-7b", "h200"), step::Attention::dense, "qwen2.5-7b h200 dense");
  expect_tight(request("qwen2.5-7b", "h200"), step::Attention::sparse, "qwen2.5-7b h200 sparse");
  expect_tight(request("llama-3.2-1b", "rtx-4090", "workstation-512g"), step::Attention::dense, "llama-3.2-1b 4090 dense");
  expect_tight(request("llama-3.2-1b", "rtx-4090", "workstation-512g"), step::Attention::sparse, "llama-3.2-1b 4090 sparse");
  Request page64 = request("qwen2.5-7b", "a100-80gb-sxm", "", {"page"});
  page64.scenario.config.page_tokens = 64;
  expect_tight(page64, step::Attention::dense, "qwen2.5-7b a100 page 64");
}

TEST(MaxContext, BindingConstraintIsTheLimitThatStops) {
  // Qwen2.5-7B on an H200 in a DGX: the 1.8 TiB of pinnable host memory holds every page.
  const MaxContext host_bound = max_context(request("qwen2.5-7b", "h200"), step::Attention::dense);
  EXPECT_EQ(host_bound.binding, simulator::Binding::pinned_host_memory);
  EXPECT_GT(host_bound.tokens, 4 * M);  // the README's 4M fits, with room
  // On an A100-80GB the device pools (resident layers x all pages) stop it first.
  const MaxContext device_bound = max_context(request("qwen2.5-7b", "a100-80gb-sxm"), step::Attention::dense);
  EXPECT_EQ(device_bound.binding, simulator::Binding::device_memory);
  // Sparse pools do not grow with the context: sparse goes further there.
  const MaxContext sparse = max_context(request("qwen2.5-7b", "a100-80gb-sxm"), step::Attention::sparse);
  EXPECT_GT(sparse.tokens, device_bound.tokens);
}

TEST(MaxContext, ZeroWhenNothingFits) {
  // Llama-3.1-70B's bf16 weights and gradients alone exceed an H200.
  const MaxContext mc = max_context(request("llama-3.1-70b", "h200"), step::Attention::dense);
  EXPECT_EQ(mc.tokens, 0);
  EXPECT_FALSE(mc.plan);
  EXPECT_EQ(mc.binding, simulator::Binding::device_memory);
}

TEST(MaxContext, FixedAttentionOfTheOtherKindIsUnavailable) {
  Request r = request("qwen2.5-7b", "h200", "", {"attention"});
  r.scenario.config.attention = step::Attention::dense;
  EXPECT_FALSE(max_context(r, step::Attention::sparse).available);
  EXPECT_TRUE(max_context(r, step::Attention::dense).available);
}

TEST(MaxContext, CapIsReported) {
  const MaxContext mc = max_context(request("tiny", "h200"), step::Attention::dense, 1 * M);
  EXPECT_TRUE(mc.capped);
  EXPECT_EQ(mc.tokens, 1 * M);
}

// More memory, on the host or the GPU, never shortens the longest context.
TEST(MaxContext, MonotoneInHostMemory) {
  std::vector<models::HostSpec> hosts;
  for (const auto& id : models::host_ids()) hosts.push_back(models::load_host(id));
  for (step::Attention mode : {step::Attention::dense, step::Attention::sparse}) {
    std::vector<std::pair<models::HostSpec, int64_t>> got;
    for (const auto& h : hosts) {
      Request r = request("qwen2.5-7b", "h200");
      r.scenario.host = h;
      got.emplace_back(h, max_context(r, mode).tokens);
    }
    for (const auto& [a, na] : got)
      for (const auto& [b, nb] : got)
        if (b.ram_bytes >= a.ram_bytes && b.pinnable_bytes >= a.pinnable_bytes) {
          EXPECT_GE(nb, na) << b.id << " has more memory than " << a.id;
        }
    // Synthetic: the same host with more and more memory.
    int64_t last = 0;
    for (double scale : {0.25, 0.5, 1.0, 1.5}) {
      Request r = request("qwen2.5-7b", "h200", "workstation-512g");
      r.scenario.host.ram_bytes = static_cast<int64_t>(static_cast<double>(r.scenario.host.ram_bytes) * scale);
      r.scenario.host.pinnable_bytes = static_cast<int64_t>(static_cast<double>(r.scenario.host.pinnable_bytes) * scale);
      const int64_t n = max_context(r, mode).tokens;
      EXPECT_GE(n, last) << "host scale " << scale;
      last = n;
    }
  }
}

TEST(MaxContext, MonotoneInGpuMemory) {
  for (const char* model : {"qwen2.5-7b", "llama-3.1-8b", "qwen2.5-14b"}) {
    int64_t last = 0;
    for (double scale : {0.5, 0.75, 1.0, 1.25, 2.0}) {
      Request r = request(model, "a100-80gb-sxm");
      r.scenario.gpu.hbm_capacity_bytes =
          static_cast<int64_t>(static_cast<double>(r.scenario.gpu.hbm_capacity_bytes) * scale);
      const int64_t n = max_context(r, step::Attention::dense).tokens;
      EXPECT_GE(n, last) << model << " hbm scale " << scale;
      last = n;
    }
    // Catalog: the 80 GB A100 against the 40 GB one, same host.
    EXPECT_GE(max_context(request(model, "a100-80gb-sxm", "dgx-a100"), step::Attention::dense).tokens,
              max_context(request(model, "a100-40gb", "dgx-a100"), step::Attention::dense).tokens)
        << model;
  }
}

// --max-context and --pareto work for every catalog model on the two reference GPUs.
TEST(Catalog, MaxContextAndParetoForEveryModel) {
  for (const auto& model : models::model_ids()) {
    for (const char* gpu : {"h200", "a100-80gb-sxm"}) {
      const std::string what = model + " on " + gpu;
      const Request r = request(model, gpu);
      for (step::Attention mode : {step::Attention::dense, step::Attention::sparse}) {
        MaxContext mc;
        ASSERT_NO_THROW(mc = max_context(r, mode)) << what;
        if (mc.tokens == 0) {
          EXPECT_EQ(mc.binding, simulator::Binding::device_memory) << what;
          continue;
        }
        ASSERT_TRUE(mc.plan) << what;
        EXPECT_TRUE(fits_under_evaluate(r, mc.plan->config)) << what;
        if (!mc.capped) {
          EXPECT_FALSE(fits_at(r, mode, mc.tokens + mc.step_tokens)) << what;
        }
      }
      SearchOptions o;
      o.exhaustive = true;
      SearchResult res;
      ASSERT_NO_THROW(res = search(r, 128 * 1024, o)) << what;
      const auto front = pareto_frontier(res.feasible, res.best ? &*res.best : nullptr);
      EXPECT_EQ(front.empty(), !res.best.has_value()) << what;
      // Within one KV-gradient dtype (the exactness class of dense plans) time falls as memory grows.
      for (Dtype dtype : {Dtype::bf16, Dtype::fp32}) {
        std::vector<const Candidate*> pts;
        for (const auto& p : front)
          if (p.config.kv_grad_dtype == dtype) pts.push_back(&p);
        for (size_t i = 1; i < pts.size(); ++i) {
          EXPECT_GT(pts[i]->summary.peak_device_bytes, pts[i - 1]->summary.peak_device_bytes) << what << " " << to_string(dtype);
          EXPECT_LT(pts[i]->summary.step_s, pts[i - 1]->summary.step_s) << what << " " << to_string(dtype);
        }
      }
      // The chosen plan is never dominated by a frontier point.
      if (res.best) {
        for (const auto& p : front) EXPECT_FALSE(dominated_by(*res.best, p)) << what;
      }
      for (const auto& p : front) EXPECT_TRUE(fits_under_evaluate(r, p.config)) << what;
    }
  }
}

}  // namespace
}  // namespace oomb::planner
