#include "planner/knobs.h"
#include "planner/search.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "planner_test_util.h"

namespace oomb::planner {
namespace {

using step::Attention;
using step::Config;
using testing::fits_under_evaluate;
using testing::request;

constexpr int64_t K = 1024;
constexpr int64_t M = 1024 * 1024;

TEST(Search, ReadmeCommandFindsAFeasiblePlanQuickly) {
  const Request r = request("qwen2.5-7b", "h200");
  double fastest = 1e9;
  SearchResult res;
  for (int i = 0; i < 3; ++i) {
    res = search(r, 4 * M);
    fastest = std::min(fastest, res.seconds);
  }
  ASSERT_TRUE(res.best);
  EXPECT_FALSE(res.sparse_fallback);
  EXPECT_EQ(res.best->config.attention, step::Attention::dense);
  EXPECT_TRUE(res.best->fits());
  EXPECT_TRUE(fits_under_evaluate(r, res.best->config));
  EXPECT_GT(res.best->summary.peak_host_bytes, 0);  // 4M tokens of KV only fit offloaded
  EXPECT_GT(res.best->summary.step_s, 0);
  EXPECT_LT(fastest, 0.2) << "a full search for qwen2.5-7b at 4M must take < 200 ms";
}

TEST(Search, ChosenPlanIsFeasibleUnderTheEventSimulation) {
  for (auto [model, gpu, n] : {std::tuple{"qwen2.5-7b", "h200", 1 * M}, std::tuple{"llama-3.2-1b", "a100-80gb-sxm", 256 * K},
                               std::tuple{"tiny", "h200", int64_t{3000}}}) {
    const Request r = request(model, gpu);
    const SearchResult res = search(r, n);
    ASSERT_TRUE(res.best) << model;
    simulator::Scenario s = r.scenario;
    s.config = res.best->config;
    const simulator::EventResult ev = simulator::simulate_events(s, traces::Detail::chunk);
    EXPECT_TRUE(ev.summary.feasible) << model;
    EXPECT_TRUE(usage_of(s, ev.summary, r.headroom).fits()) << model;
    EXPECT_LE(ev.trace.summary.peak_device_bytes, usage_of(s, ev.summary, r.headroom).device_limit_bytes) << model;
  }
}

TEST(Search, NeverReturnsAPlanThatDoesNotFit) {
  for (const char* model : {"tiny", "qwen2.5-0.5b", "qwen2.5-7b", "llama-3.1-8b", "qwen2.5-32b", "mistral-7b-v0.3"})
    for (const char* gpu : {"h200", "a100-40gb", "rtx-4090", "l40s"})
      for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{1000}, 32 * K, 1 * M, 4 * M, 16 * M}) {
        Request r = request(model, gpu);
        for (bool sparse : {false, true}) {
          r.allow_sparse = sparse;
          const SearchResult res = search(r, n);
          for (const auto& k : res.feasible) ASSERT_TRUE(fits_under_evaluate(r, k.config)) << model << " " << gpu << " " << n;
          if (res.best) {
            EXPECT_TRUE(fits_under_evaluate(r, res.best->config)) << model << " " << gpu << " " << n;
            EXPECT_EQ(res.best->config.context_tokens, n);
          }
        }
      }
}

// Recompute settings of the brute force: every one on models of up to 16 layers; on larger ones
// both ends, their neighbours and the middle (a brute force over every kept-layer count there
// would take seconds; the small models and the squeezed GPUs below cover the search between).
std::vector<int64_t> recompute_settings(int64_t L) {
  if (L <= 16) {
    std::vector<int64_t> v;
    for (int64_t x = 0; x <= L; ++x) v.push_back(x);
    return v;
  }
  return {0, 1, 2, L / 2, L - 2, L - 1, L};
}

// The pruned search must find a plan as good as trying every combination of the space, the
// recompute settings included (r < L: checkpointing with the last r layers kept; r = L: off).
// One point of the planner's search space, as search() evaluates it: kept in `all` when it fits.
struct SpacePoint {
  int64_t context, chunk, page, resident, recomputed_from;  // recomputed_from == layers: no checkpointing
  Dtype kv_grad_dtype;
  Dtype param_grad_dtype;
  int64_t logits_chunk;
  step::Optimizer optimizer;
};
void add_if_fits(std::vector<Candidate>& all, const Request& r, int64_t L, const SpacePoint& p) {
  step::Config k = r.scenario.config;
  k.checkpointing = p.recomputed_from < L;
  k.kept_layers = p.recomputed_from < L ? p.recomputed_from : 0;
  k.optimizer = p.optimizer;
  k.context_tokens = p.context;
  k.chunk_tokens = p.chunk;
  k.page_tokens = p.page;
  k.resident_layers = std::min(p.resident, L);
  k.kv_grad_dtype = p.kv_grad_dtype;
  k.param_grad_dtype = p.param_grad_dtype;
  k.logits_chunk_tokens = p.logits_chunk;
  simulator::Scenario s = r.scenario;
  s.config = k;
  Candidate cand{k, simulator::evaluate(s), {}};
  cand.usage = usage_of(s, cand.summary, r.headroom);
  if (cand.fits()) all.push_back(cand);
}

TEST(Search, PrunedSearchMatchesBruteForce) {
  struct Case {
    const char* model;
    const char* gpu;
    int64_t n;
    double squeeze = 0;  // > 0: HBM between the chosen plan's full-checkpointing and no-checkpointing needs
  };
  int partial_picks = 0;
  for (const Case& c : {Case{"qwen2.5-7b", "h200", 1 * M}, Case{"qwen2.5-7b", "h200", 4 * M},
                        Case{"llama-3.2-1b", "rtx-4090", 512 * K}, Case{"qwen2.5-32b", "h200", 1 * M},
                        Case{"mistral-7b-v0.3", "l40s", 256 * K}, Case{"tiny", "h200", 3000},
                        Case{"qwen2.5-14b", "a100-80gb-sxm", 2 * M}, Case{"llama-3.2-1b", "rtx-4090", 512 * K, 0.5},
                        Case{"llama-3.2-1b", "rtx-4090", 512 * K, 0.2}, Case{"tiny", "rtx-4090", 4 * M, 0.5}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const Objective obj = variant % 2 == 0 ? Objective::time : Objective::memory;
      const bool adamw = variant >= 2;  // --optimizer auto: the placement is searched too
      Request r = request(c.model, c.gpu);
      r.objective = obj;
      r.optimizer_auto = adamw;
      if (adamw) r.scenario.config.optimizer = step::Optimizer::gpu;
      const int64_t L = r.scenario.model.layers;
      if (c.squeeze > 0) {
        // Device memory for which checkpointing off does not fit the unsqueezed pick but full
        // checkpointing does: the kept-layer counts in between decide.
        const SearchResult wide = search(r, c.n);
        ASSERT_TRUE(wide.best);
        simulator::Scenario s = r.scenario;
        s.config = wide.best->config;
        auto need = [&](int64_t kept) {
          s.config.checkpointing = kept < L;
          s.config.kept_layers = kept < L ? kept : 0;
          return usage_of(s, simulator::evaluate(s), r.headroom).device_need_bytes;
        };
        const double lo = static_cast<double>(need(0)), hi = static_cast<double>(need(L));
        ASSERT_LT(lo, hi);
        r.scenario.gpu.hbm_capacity_bytes =
            static_cast<int64_t>((lo + c.squeeze * (hi - lo)) / (1.0 - r.headroom));
      }
      SCOPED_TRACE(std::string(c.model) + " " + std::to_string(c.n) + " " + to_string(obj) + (adamw ? " adamw" : "") +
                   (c.squeeze > 0 ? " squeezed" : ""));
      const SearchResult res = search(r, c.n);
      std::vector<Candidate> all;
      const std::vector<step::Optimizer> placements =
          adamw ? std::vector<step::Optimizer>{step::Optimizer::gpu, step::Optimizer::host}
                : std::vector<step::Optimizer>{r.scenario.config.optimizer};
      const std::vector<int64_t> recomputes = recompute_settings(L);
      for (int64_t chunk : {512, 1024, 2048, 4096, 8192, 16384, 32768})
        for (int64_t page : {64, 128, 256})
          for (int64_t resident : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, L})
            for (Dtype kvg : {Dtype::bf16, Dtype::fp32})
              for (Dtype pg : {Dtype::bf16, Dtype::fp32})
                for (int64_t logits : {1024, 4096, 0})
                  for (int64_t rc : recomputes)
                    for (step::Optimizer opt : placements)
                      add_if_fits(all, r, L, {c.n, chunk, page, resident, rc, kvg, pg, logits, opt});
      const Candidate* brute = select_best(all, obj, &r.scenario.config);
      // The brute force tries dense attention; where nothing dense fits the search falls back to
      // sparse (qwen2.5-32b at 1M on an H200 since the CUDA backend's op scratch is planned).
      if (res.best && res.best->config.attention == step::Attention::sparse) {
        EXPECT_EQ(brute, nullptr);
        continue;
      }
      ASSERT_EQ(brute != nullptr, res.best.has_value());
      if (!brute) continue;
      const auto metric = [&](const Candidate& k) {
        return obj == Objective::time ? k.summary.step_s : static_cast<double>(k.summary.peak_device_bytes);
      };
      double best_metric = metric(all.front());
      for (const auto& k : all) best_metric = std::min(best_metric, metric(k));
      EXPECT_LE(metric(*res.best), best_metric * (1 + kTieTolerance));
      // Same exactness class as the brute-force choice (gradient precision is the first tie-break),
      // and as good on the other metric (the second).
      EXPECT_EQ(res.best->config.kv_grad_dtype, brute->config.kv_grad_dtype);
      const auto other = [&](const Candidate& k) {
        return obj == Objective::time ? static_cast<double>(k.summary.peak_device_bytes) : k.summary.step_s;
      };
      EXPECT_LE(other(*res.best), other(*brute) * (1 + kTieTolerance));
      // Where the brute force saw every setting, the search keeps the same number of layers.
      if (static_cast<int64_t>(recomputes.size()) == L + 1) {
        EXPECT_EQ(res.best->config.checkpointing, brute->config.checkpointing);
        EXPECT_EQ(res.best->config.kept_layers, brute->config.kept_layers);
      }
      if (res.best->config.checkpointing && res.best->config.kept_layers > 0) ++partial_picks;
      const int64_t combinations = 2520 * (L + 1) * static_cast<int64_t>(placements.size());
      EXPECT_LT(res.evaluations, combinations / 2) << "the pruned search should try at most half of the combinations";
    }
  }
  EXPECT_GT(partial_picks, 0) << "some case must pick partial checkpointing, or the enlarged space is untested";
}

// Where the defaults are as good as anything else (within the tie bands), they are kept: for the
// README command that is the published chunk, page, residency and fp32 KV-gradients.
TEST(Search, DefaultsWinTies) {
  const Request r = request("qwen2.5-7b", "h200");
  const SearchResult res = search(r, 4 * M);
  ASSERT_TRUE(res.best);
  EXPECT_EQ(res.best->config.chunk_tokens, 4096);
  // 64, 128 and 256 tie in time and memory (the CUDA executor stages its page tables per call in its
  // op scratch, whose largest op is the LM head's), so the default page is kept.
  EXPECT_EQ(res.best->config.page_tokens, 128);
  EXPECT_EQ(res.best->config.resident_layers, 2);
  EXPECT_EQ(res.best->config.kv_grad_dtype, Dtype::fp32);
  EXPECT_EQ(res.best->config.param_grad_dtype, Dtype::bf16);
}

TEST(Search, FixedKnobsAreRespected) {
  Request r = request("qwen2.5-7b", "h200", "", {"chunk", "page", "resident_layers", "kv_grad_dtype", "param_grad_dtype",
                                                 "logits_chunk", "optimizer"});
  step::Config& c = r.scenario.config;
  c.chunk_tokens = 8192;
  c.page_tokens = 64;
  c.resident_layers = 3;
  c.kv_grad_dtype = Dtype::bf16;
  c.param_grad_dtype = Dtype::fp32;
  c.logits_chunk_tokens = 4096;
  c.optimizer = step::Optimizer::host;
  const SearchResult res = search(r, 2 * M);
  ASSERT_TRUE(res.best);
  ASSERT_FALSE(res.feasible.empty());
  for (const auto& k : res.feasible) {
    EXPECT_EQ(k.config.chunk_tokens, 8192);
    EXPECT_EQ(k.config.page_tokens, 64);
    EXPECT_EQ(k.config.resident_layers, 3);
    EXPECT_EQ(k.config.kv_grad_dtype, Dtype::bf16);
    EXPECT_EQ(k.config.param_grad_dtype, Dtype::fp32);
    EXPECT_EQ(k.config.logits_chunk_tokens, 4096);
    EXPECT_EQ(k.config.optimizer, step::Optimizer::host);
  }
  // One knob fixed, the rest searched: the fixed one holds, the others move.
  Request one = request("qwen2.5-7b", "h200", "", {"chunk"});
  one.scenario.config.chunk_tokens = 1024;
  const SearchResult res1 = search(one, 4 * M);
  ASSERT_TRUE(res1.best);
  EXPECT_EQ(res1.best->config.chunk_tokens, 1024);
}

TEST(Search, OptimizerAutoPlacesTheState) {
  Request r = request("qwen2.5-7b", "h200");
  r.optimizer_auto = true;
  const SearchResult res = search(r, 1 * M);
  ASSERT_TRUE(res.best);
  EXPECT_NE(res.best->config.optimizer, step::Optimizer::none);
  // Without auto and without --optimizer, no optimizer state is planned.
  const SearchResult none = search(request("qwen2.5-7b", "h200"), 1 * M);
  ASSERT_TRUE(none.best);
  EXPECT_EQ(none.best->config.optimizer, step::Optimizer::none);
}

// ZeRO-1 is a searched dimension with data-parallel replicas and a full fine-tune's optimizer: the
// free search is as good as the better of the two fixed ones, and where the replicated state does
// not fit, the sharded one is what the planner picks.
TEST(Search, ShardedOptimizerIsSearchedWithReplicas) {
  // The AdamW state on the GPU (fixed): sharding it is what moves the device peak.
  auto req = [](int64_t replicas, std::set<std::string> fixed = {}) {
    fixed.insert("optimizer");
    Request r = request("qwen2.5-0.5b", "h200", "", std::move(fixed));
    r.scenario.config.optimizer = step::Optimizer::gpu;
    r.scenario.config.data_parallel = replicas;
    return r;
  };
  const SearchResult one = search(req(1), 64 * K);
  ASSERT_TRUE(one.best);
  for (const auto& k : one.feasible) EXPECT_FALSE(k.config.shard_optimizer);
  for (Objective obj : {Objective::time, Objective::memory}) {
    Request r = req(2);
    r.objective = obj;
    const SearchResult res = search(r, 64 * K);
    ASSERT_TRUE(res.best);
    std::set<bool> seen;
    for (const auto& k : res.feasible) seen.insert(k.config.shard_optimizer);
    EXPECT_EQ(seen.size(), 2u) << "both sharded and replicated state searched";
    auto metric = [&](const Candidate& k) {
      return obj == Objective::time ? k.summary.step_s : static_cast<double>(k.summary.peak_device_bytes);
    };
    for (bool shard : {false, true}) {
      Request f = req(2, {"shard_optimizer"});
      f.objective = obj;
      f.scenario.config.shard_optimizer = shard;
      const SearchResult fixed = search(f, 64 * K);
      ASSERT_TRUE(fixed.best);
      for (const auto& k : fixed.feasible) EXPECT_EQ(k.config.shard_optimizer, shard);
      EXPECT_LE(metric(*res.best), metric(*fixed.best) * (1 + kTieTolerance)) << to_string(obj) << " " << shard;
    }
    // The memory objective takes the sharded state: half of 0.49B parameters' 13 bytes, ~3 GiB less.
    if (obj == Objective::memory) {
      EXPECT_TRUE(res.best->config.shard_optimizer);
    }
  }
  // An HBM where the replicated state fits nowhere: the sharded plan is the answer.
  Request f = req(2, {"shard_optimizer"});
  f.objective = Objective::memory;
  const SearchResult replicated = search(f, 64 * K);
  ASSERT_TRUE(replicated.best);
  simulator::Scenario s = f.scenario;
  s.config = replicated.best->config;
  Request tight = req(2);
  tight.scenario.gpu.hbm_capacity_bytes = static_cast<int64_t>(
      static_cast<double>(usage_of(s, replicated.best->summary, f.headroom).device_need_bytes) * 0.95 /
      (1.0 - f.headroom));
  const SearchResult res = search(tight, 64 * K);
  ASSERT_TRUE(res.best);
  EXPECT_TRUE(res.best->config.shard_optimizer);
  EXPECT_TRUE(fits_under_evaluate(tight, res.best->config));
  // LoRA: nothing worth sharding, not searched.
  Request lora = req(2);
  lora.scenario.config.lora_rank = 16;
  const SearchResult lr = search(lora, 16 * K);
  ASSERT_TRUE(lr.best);
  for (const auto& k : lr.feasible) EXPECT_FALSE(k.config.shard_optimizer);
}

TEST(Search, ObjectivesOrderTheirMetric) {
  Request r = request("qwen2.5-7b", "h200");
  const SearchResult t = search(r, 2 * M);
  r.objective = Objective::memory;
  const SearchResult m = search(r, 2 * M);
  ASSERT_TRUE(t.best && m.best);
  EXPECT_LE(m.best->summary.peak_device_bytes, t.best->summary.peak_device_bytes);
  EXPECT_LE(t.best->summary.step_s, m.best->summary.step_s * (1 + kTieTolerance));
  EXPECT_LT(m.best->summary.peak_device_bytes, t.best->summary.peak_device_bytes);  // a real trade-off here
}

TEST(Search, HeadroomIsKept) {
  // Where device memory binds (the longest context on an A100-80GB), the headroom is what is left.
  int64_t last = int64_t{1} << 62;
  for (double h : {0.0, 0.1, 0.3}) {
    Request r = request("qwen2.5-7b", "a100-80gb-sxm");
    r.headroom = h;
    const MaxContext mc = max_context(r, step::Attention::dense);
    ASSERT_TRUE(mc.plan);
    const double cap = static_cast<double>(r.scenario.gpu.hbm_capacity_bytes);
    int64_t need = r.scenario.gpu.reserved_bytes;
    for (const auto& [category, bytes] : mc.plan->summary.device_breakdown_bytes)
      if (category != "runtime_reserve") need += bytes;
    EXPECT_LE(static_cast<double>(need), cap * (1 - h)) << h;
    EXPECT_GT(static_cast<double>(need), cap * (1 - h) * 0.97) << h;  // and the search went up to it
    EXPECT_LT(mc.tokens, last);
    last = mc.tokens;
  }
  for (double h : {0.0, 0.05, 0.3}) {
    Request r = request("qwen2.5-7b", "h200");
    r.headroom = h;
    const SearchResult res = search(r, 4 * M);
    ASSERT_TRUE(res.best);
    EXPECT_LE(static_cast<double>(res.best->usage.device_need_bytes),
              static_cast<double>(r.scenario.gpu.hbm_capacity_bytes) * (1 - h));
  }
}

// Known answer: 1M tokens of Qwen2.5-7B do not fit on an H200 with every layer's KV on the GPU,
// only with offload.
TEST(KnownAnswer, Qwen7bAt1MOnH200NeedsOffload) {
  Request all = request("qwen2.5-7b", "h200", "", {"resident_layers"});
  all.scenario.config.resident_layers = all.scenario.model.layers;
  const SearchResult none = search(all, 1 * M);
  EXPECT_FALSE(none.best);
  ASSERT_TRUE(none.closest);
  EXPECT_EQ(none.closest->usage.binding(), simulator::Binding::device_memory);
  const SearchResult res = search(request("qwen2.5-7b", "h200"), 1 * M);
  ASSERT_TRUE(res.best);
  EXPECT_TRUE(step::offloads(res.best->config, all.scenario.model));
  EXPECT_EQ(res.best->config.attention, step::Attention::dense);
}

// Known answer: Qwen2.5-32B at 2M on an H200 fits only with sparse attention (dense device pools
// grow with the context; sparse ones with the budget).
TEST(KnownAnswer, Qwen32bAt2MOnH200OnlyFitsSparse) {
  Request dense = request("qwen2.5-32b", "h200", "", {"attention"});
  dense.scenario.config.attention = step::Attention::dense;
  EXPECT_FALSE(search(dense, 2 * M).best);
  const SearchResult res = search(request("qwen2.5-32b", "h200"), 2 * M);
  ASSERT_TRUE(res.best);
  EXPECT_TRUE(res.sparse_fallback);
  EXPECT_EQ(res.best->config.attention, step::Attention::sparse);
  // The minimum budget counts attended tokens (64 pages of 128), whatever page the plan uses.
  EXPECT_GE(res.best->config.page_budget * res.best->config.page_tokens, kDefaultMinBudget * kDefaultMinBudgetPage);
  ASSERT_TRUE(res.closest);  // the dense attempt, for the diagnosis
  EXPECT_EQ(res.closest->config.attention, step::Attention::dense);
  // A minimum off the searched grid is itself a candidate, and is never undercut.
  Request odd = request("qwen2.5-7b", "h200");
  odd.allow_sparse = true;
  odd.min_budget = 100;
  const SearchResult s3 = search(odd, 4 * M);
  bool saw_100 = false;
  for (const auto& k : s3.feasible)
    if (k.config.attention == step::Attention::sparse) {
      EXPECT_GE(k.config.page_budget * k.config.page_tokens, 100 * kDefaultMinBudgetPage) << k.config.page_tokens;
      saw_100 = saw_100 || k.config.page_budget * k.config.page_tokens == 100 * kDefaultMinBudgetPage;
    }
  EXPECT_TRUE(saw_100);
  // --min-budget bounds the fallback too.
  Request strict = request("qwen2.5-32b", "h200");
  strict.min_budget = 256;
  const SearchResult s2 = search(strict, 2 * M);
  if (s2.best) {
    EXPECT_GE(s2.best->config.page_budget * s2.best->config.page_tokens, 256 * kDefaultMinBudgetPage);
  }
}

TEST(Search, AllowSparseLetsSparseCompeteAboveTheMinimumBudget) {
  Request r = request("qwen2.5-7b", "h200");
  r.allow_sparse = true;
  r.min_budget = 128;
  const SearchResult res = search(r, 4 * M);
  ASSERT_TRUE(res.best);
  EXPECT_FALSE(res.sparse_fallback);
  bool any_sparse = false;
  for (const auto& k : res.feasible)
    if (k.config.attention == step::Attention::sparse) {
      any_sparse = true;
      EXPECT_GE(k.config.page_budget * k.config.page_tokens, 128 * kDefaultMinBudgetPage);
    }
  EXPECT_TRUE(any_sparse);
  // Sparse is much faster at 4M, so it wins the time objective.
  EXPECT_EQ(res.best->config.attention, step::Attention::sparse);
}

TEST(Search, TensorParallelismOnPaper) {
  Request r = request("qwen2.5-7b", "h200");
  const SearchResult one = search(r, 4 * M);
  r.scenario.config.gpus = 2;
  const SearchResult two = search(r, 4 * M);
  ASSERT_TRUE(one.best && two.best);
  EXPECT_EQ(two.best->config.gpus, 2);
  EXPECT_LT(two.best->summary.step_s, one.best->summary.step_s);
  for (int64_t bad : {3, 8, 16, 0}) {
    r.scenario.config.gpus = bad;
    EXPECT_THROW(search(r, 4 * M), Error) << bad;  // 8 does not divide Qwen2.5-7B's 4 KV heads
  }
}

TEST(Search, BadInputIsAnErrorNotAnAbort) {
  {
    Request r = request("qwen2.5-7b", "h200", "", {"budget", "attention"});
    r.scenario.config.attention = step::Attention::sparse;
    r.scenario.config.page_budget = 1000;
    EXPECT_THROW(search(r, 16 * K), Error);  // 16K tokens have at most 256 pages
    r.scenario.config.page_budget = 0;
    EXPECT_THROW(search(r, 16 * K), Error);
  }
  {
    Request r = request("qwen2.5-7b", "h200", "", {"chunk", "page"});
    r.scenario.config.chunk_tokens = 128;
    r.scenario.config.page_tokens = 256;
    EXPECT_THROW(search(r, 1 * M), Error);
    r.scenario.config.chunk_tokens = 1000;
    r.scenario.config.page_tokens = 128;
    EXPECT_THROW(search(r, 1 * M), Error);
  }
  {
    Request r = request("qwen2.5-7b", "h200", "", {"page"});
    r.scenario.config.page_tokens = 64 * K;
    EXPECT_THROW(search(r, 1 * M), Error);
  }
  {
    Request r = request("qwen2.5-7b", "h200");
    EXPECT_THROW(search(r, 0), Error);
    EXPECT_THROW(search(r, -5), Error);
    r.headroom = 0.95;
    EXPECT_THROW(search(r, 1 * M), Error);
    r.headroom = -0.1;
    EXPECT_THROW(search(r, 1 * M), Error);
    r.headroom = 0.05;
    r.min_budget = 0;
    EXPECT_THROW(search(r, 1 * M), Error);
  }
  {
    // A dtype oomb does not know never reaches the search: refused where the request is written.
    Knobs k;
    k.kv_grad_dtype = "int3";
    EXPECT_THROW(k.resolve(), Error);
  }
}

TEST(Search, ParetoFrontierIsNonDominated) {
  const Request r = request("qwen2.5-7b", "h200");
  SearchOptions o;
  o.exhaustive = true;
  const SearchResult res = search(r, 4 * M, o);
  const auto front = pareto_frontier(res.feasible, res.best ? &*res.best : nullptr);
  ASSERT_GE(front.size(), 3u);
  // By increasing memory overall; within one exactness class (KV-gradient dtype here) time falls
  // strictly as memory grows.
  std::map<Dtype, std::vector<const Candidate*>> by_dtype;
  for (size_t i = 0; i < front.size(); ++i) {
    if (i) {
      EXPECT_GE(front[i].summary.peak_device_bytes, front[i - 1].summary.peak_device_bytes);
    }
    by_dtype[front[i].config.kv_grad_dtype].push_back(&front[i]);
  }
  EXPECT_EQ(by_dtype.size(), 2u) << "the frontier spans KV-gradient dtypes";
  for (const auto& [dtype, pts] : by_dtype)
    for (size_t i = 1; i < pts.size(); ++i) {
      EXPECT_GT(pts[i]->summary.peak_device_bytes, pts[i - 1]->summary.peak_device_bytes) << dtype;
      EXPECT_LT(pts[i]->summary.step_s, pts[i - 1]->summary.step_s) << dtype;
    }
  // No candidate at least as exact is no larger and no slower and better in one.
  for (const auto& p : front)
    for (const auto& k : res.feasible) {
      const bool as_exact = dtype_bytes(k.config.kv_grad_dtype) >= dtype_bytes(p.config.kv_grad_dtype);
      EXPECT_FALSE(as_exact && k.summary.peak_device_bytes <= p.summary.peak_device_bytes &&
                   k.summary.step_s <= p.summary.step_s &&
                   (k.summary.peak_device_bytes < p.summary.peak_device_bytes || k.summary.step_s < p.summary.step_s));
    }
  // The exhaustive search agrees with the pruned one on the best step time.
  const SearchResult quick = search(r, 4 * M);
  ASSERT_TRUE(quick.best && res.best);
  EXPECT_LE(quick.best->summary.step_s, res.best->summary.step_s * (1 + kTieTolerance));
}

// The frontier over the space the planner searches (search.h) is complete: a brute force over
// every dense configuration of that space (every recompute setting included) finds no
// non-dominated point that the frontier lacks, and none that dominates a frontier point. Issue 24:
// the search kept only the two ends of each point's kept-layer counts, so the settings between
// them, often non-dominated, were missing (qwen2.5-72b at 1M on 8 H200s: 12 points of 140).
TEST(Search, ParetoFrontierMatchesBruteForce) {
  int partial = 0;  // true frontier points with some layers kept (the settings that were missing)
  struct Case {
    const char* model;
    const char* gpu;
    int64_t layers;  // the first N layers (0: all)
    int64_t n;
    double squeeze;  // > 0: HBM part-way between the unsqueezed frontier's least and largest need
  };
  for (const Case& c : {Case{"qwen2.5-0.5b", "h200", 8, 64 * K, 0}, Case{"qwen2.5-0.5b", "h200", 8, 64 * K, 0.4},
                        Case{"llama-3.2-1b", "rtx-4090", 0, 24 * K, 0.6}, Case{"tiny", "h200", 0, 3000, 0}}) {
    Request r = request(c.model, c.gpu);
    r.optimizer_auto = true;
    r.scenario.config.optimizer = step::Optimizer::gpu;
    r.scenario.config.layers_override = c.layers;
    const int64_t L = c.layers > 0 ? c.layers : r.scenario.model.layers;
    SearchOptions o;
    o.exhaustive = true;
    if (c.squeeze > 0) {
      const SearchResult wide = search(r, c.n, o);
      const auto f = pareto_frontier(wide.feasible);
      ASSERT_GE(f.size(), 2u);
      const double lo = static_cast<double>(f.front().usage.device_need_bytes),
                   hi = static_cast<double>(f.back().usage.device_need_bytes);
      r.scenario.gpu.hbm_capacity_bytes = static_cast<int64_t>((lo + c.squeeze * (hi - lo)) / (1.0 - r.headroom));
    }
    SCOPED_TRACE(std::string(c.model) + " " + std::to_string(c.n) + (c.squeeze > 0 ? " squeezed" : ""));
    const SearchResult res = search(r, c.n, o);
    const auto front = pareto_frontier(res.feasible, res.best ? &*res.best : nullptr);
    ASSERT_FALSE(front.empty());
    // The space of search.h: chunks up to the first that covers the context, pages dividing them,
    // resident layers 1..4 and all, both dtypes of each gradient, three loss tilings, every
    // recompute setting, both optimizer placements.
    std::vector<Candidate> all;
    std::vector<int64_t> chunks;
    for (int64_t chunk : {512, 1024, 2048, 4096, 8192, 16384, 32768}) {
      chunks.push_back(chunk);
      if (chunk >= c.n) break;
    }
    std::vector<int64_t> residents;
    for (int64_t x = 1; x <= 4 && x < L; ++x) residents.push_back(x);
    residents.push_back(L);
    for (int64_t chunk : chunks)
      for (int64_t page : {64, 128, 256})
        for (int64_t resident : residents)
          for (Dtype kvg : {Dtype::bf16, Dtype::fp32})
            for (Dtype pg : {Dtype::bf16, Dtype::fp32})
              for (int64_t logits : {1024, 4096, 0})
                for (int64_t rc = 0; rc <= L; ++rc)
                  for (step::Optimizer opt : {step::Optimizer::gpu, step::Optimizer::host})
                    add_if_fits(all, r, L, {c.n, chunk, page, resident, rc, kvg, pg, logits, opt});
    ASSERT_FALSE(all.empty());
    // The brute-force frontier, by hand: per KV-gradient dtype the 2-D staircase (memory
    // ascending, time strictly falling); a bf16 point also falls to an fp32 point (more exact)
    // that is no larger and no slower.
    auto by_metrics = [](const Candidate& a, const Candidate& b) {
      return std::make_pair(a.summary.peak_device_bytes, a.summary.step_s) <
             std::make_pair(b.summary.peak_device_bytes, b.summary.step_s);
    };
    std::sort(all.begin(), all.end(), by_metrics);
    std::map<Dtype, std::vector<const Candidate*>> stair;
    for (const auto& k : all) {
      auto& v = stair[k.config.kv_grad_dtype];
      if (v.empty() || k.summary.step_s < v.back()->summary.step_s) v.push_back(&k);
    }
    std::vector<const Candidate*> truth = stair[Dtype::fp32];
    for (const Candidate* k : stair[Dtype::bf16]) {
      bool beaten = false;
      for (const Candidate* q : stair[Dtype::fp32])
        beaten = beaten || (q->summary.peak_device_bytes <= k->summary.peak_device_bytes &&
                            q->summary.step_s <= k->summary.step_s);
      if (!beaten) truth.push_back(k);
    }
    ASSERT_GE(truth.size(), 3u);
    // Every true frontier point is on the planner's (the same memory, time and exactness) ...
    for (const Candidate* t : truth) {
      bool found = false;
      for (const auto& p : front)
        found = found || (p.summary.peak_device_bytes == t->summary.peak_device_bytes &&
                          p.summary.step_s == t->summary.step_s && p.config.kv_grad_dtype == t->config.kv_grad_dtype);
      EXPECT_TRUE(found) << "missing from the frontier: " << t->config.to_json().dump() << " ("
                         << t->summary.peak_device_bytes << " B, " << t->summary.step_s << " s)";
      if (t->config.checkpointing && t->config.kept_layers > 0) ++partial;
    }
    // ... and no frontier point is dominated by any configuration of the space, nor fails to fit.
    EXPECT_EQ(front.size(), truth.size());
    for (const auto& p : front) {
      EXPECT_TRUE(fits_under_evaluate(r, p.config));
      for (const auto& k : all) ASSERT_FALSE(dominated_by(p, k)) << p.config.to_json().dump();
    }
  }
  EXPECT_GT(partial, 0) << "no partial-checkpointing point on any true frontier: the cases test nothing new";
}

TEST(Search, AlternativesDifferAndFit) {
  const Request r = request("qwen2.5-7b", "h200");
  const SearchResult res = search(r, 4 * M);
  ASSERT_TRUE(res.best);
  ASSERT_FALSE(res.alternatives.empty());
  // Every searched knob that has a fitting other value shows up, the second-phase ones included.
  bool param_grad = false, logits = false, page = false;
  for (const auto& a : res.alternatives) {
    param_grad = param_grad || a.config.param_grad_dtype != res.best->config.param_grad_dtype;
    logits = logits || a.config.logits_chunk_tokens != res.best->config.logits_chunk_tokens;
    page = page || a.config.page_tokens != res.best->config.page_tokens;
  }
  EXPECT_TRUE(param_grad);
  EXPECT_TRUE(logits);
  EXPECT_TRUE(page);
  for (const auto& a : res.alternatives) {
    EXPECT_TRUE(fits_under_evaluate(r, a.config));
    EXPECT_NE(a.config.to_json(), res.best->config.to_json());
    EXPECT_NE(describe_difference(res.best->config, a.config, r.scenario.model), "same settings");
  }
  // No two rows say the same thing: each pair differs by the tie tolerance in time or memory
  // (at 4M, chunk 2K with page 128 and with page 64 were two rows of one step and one peak).
  for (size_t i = 0; i < res.alternatives.size(); ++i)
    for (size_t j = i + 1; j < res.alternatives.size(); ++j) {
      const auto& x = res.alternatives[i].summary;
      const auto& y = res.alternatives[j].summary;
      const bool same_time = std::abs(x.step_s - y.step_s) < kTieTolerance * y.step_s;
      const bool same_peak = std::abs(static_cast<double>(x.peak_device_bytes - y.peak_device_bytes)) <
                             kTieTolerance * static_cast<double>(y.peak_device_bytes);
      EXPECT_FALSE(same_time && same_peak) << describe_difference(res.best->config, res.alternatives[i].config,
                                                                   r.scenario.model)
                                           << " and "
                                           << describe_difference(res.best->config, res.alternatives[j].config,
                                                                  r.scenario.model);
    }
}

// Offload concerns the global layers: with a host too small for any offloaded page, a model with
// sliding layers still plans with its 12 global layers all resident (no offload), which an early
// host failure of an offloading setting must not rule out.
TEST(Search, NoOffloadOfAStackWithLocalLayersSurvivesAHostThatFitsNoOffload) {
  Request r = request("gpt-oss-20b", "h200", "", {"lora_rank", "lora_targets"});
  r.scenario.config.lora_rank = 16;
  r.scenario.config.lora_targets = {"q_proj", "v_proj"};
  r.scenario.host.pinnable_bytes = int64_t{64} << 20;
  r.scenario.host.ram_bytes = int64_t{4} << 30;
  const SearchResult res = search(r, 64 * 1024);
  ASSERT_TRUE(res.best.has_value());
  EXPECT_FALSE(step::offloads(res.best->config, r.scenario.model));
  EXPECT_GE(res.best->config.resident_layers, 12);
}

}  // namespace
}  // namespace oomb::planner
