// Layer kinds and experts in the step's description (docs/model.md "Layer kinds and experts"): the
// local layers' pages (Geometry::local_reach against a brute-force union), the expert rows, the MoE
// dispatch rows, the active experts' flops and the fast path's sums over chunked layers' periodic
// chunks.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "models/specs.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"
#include "step/buffers.h"
#include "step/geometry.h"
#include "simulator_test_util.h"

namespace oomb::simulator {
namespace {

using models::LayerAttention;
using testing::scenario;
constexpr int64_t K = 1024, M = 1024 * 1024;

// The pages before each boundary b = cC (c = 1 .. n-1) that the first query after it attends, by
// enumeration: sliding, tokens [b - window + 1, b); chunked, [floor(b / window) window, b).
step::LocalReach brute_reach(LayerAttention kind, int64_t window, int64_t C, int64_t p, int64_t n) {
  std::set<int64_t> all;
  step::LocalReach r;
  for (int64_t c = 1; c < n; ++c) {
    const int64_t b = c * C;
    const int64_t first = kind == LayerAttention::sliding ? std::max<int64_t>(0, b - window + 1) : b / window * window;
    std::set<int64_t> pages;
    for (int64_t t = first; t < b; ++t) pages.insert(t / p);
    r.max_pages = std::max<int64_t>(r.max_pages, static_cast<int64_t>(pages.size()));
    all.insert(pages.begin(), pages.end());
  }
  r.union_pages = static_cast<int64_t>(all.size());
  return r;
}

TEST(LocalReach, EqualsTheEnumeratedPages) {
  for (LayerAttention kind : {LayerAttention::sliding, LayerAttention::chunked})
    for (int64_t window : {1, 2, 100, 128, 129, 1024, 3000, 8192})
      for (int64_t p : {16, 128})
        for (int64_t q : {1, 2, 3, 8})
          for (int64_t n : {1, 2, 5, 17, 100}) {
            const int64_t C = q * p;
            const step::LocalReach got = step::local_reach(kind, window, C, p, n);
            const step::LocalReach want = brute_reach(kind, window, C, p, n);
            EXPECT_EQ(got.union_pages, want.union_pages) << to_string(kind) << " " << window << " C " << C << " p " << p << " n " << n;
            EXPECT_EQ(got.max_pages, want.max_pages) << to_string(kind) << " " << window << " C " << C << " p " << p << " n " << n;
          }
}

const step::BufferRow& row(const step::BufferTable& t, const char* name) {
  const step::BufferRow* r = t.find(name, step::Tier::device);
  if (!r) r = t.find(name, step::Tier::host);
  EXPECT_NE(r, nullptr) << name;
  static const step::BufferRow none;
  return r ? *r : none;
}

// gpt-oss-20b at 1M, chunk 4K, page 128, 2 resident layers: the 12 global layers' pools and host
// pages as a dense model's of 12 layers; the 12 sliding layers (window 128) keep one page before
// each of the 255 boundaries on the device, and their gradients one page each (+ one chunk's own).
TEST(LayerKinds, WindowLayersKeepTheirReachOnly) {
  Scenario s = scenario("gpt-oss-20b", "h200", M);
  s.config.chunk_tokens = 4 * K;
  s.config.page_tokens = 128;
  s.config.resident_layers = 2;
  const step::Geometry g = detail::geometry(s);
  EXPECT_EQ(g.Lg, 12);
  EXPECT_EQ(g.Ll, 12);
  EXPECT_EQ(g.local_kv_pages, 12 * 255 + 32);
  EXPECT_EQ(g.local_grad_pages, 12 * 1 + 32);
  const step::BufferTable t = detail::memory_table(s, g, true);
  const int64_t page = 128 * 2 * 8 * 64 * 2;  // 128 tokens x K,V x 8 heads x 64 x bf16
  EXPECT_EQ(g.kv_page_bytes, page);
  EXPECT_EQ(row(t, step::row::kLocalKvPool).bytes, (12 * 255 + 32) * page);
  EXPECT_EQ(row(t, step::row::kHostKvPages).bytes, 12 * 8192 * page);
  EXPECT_EQ(row(t, step::row::kKvPool).bytes, 2 * (8192 - 32 + 32) * page);  // 2 slots of the last chunk's prefix + own
  // The same stack with every layer global: 24 layers of host pages, no local pool.
  Scenario dense = s;
  dense.model.layer_attention.clear();
  const step::BufferTable d = detail::memory_table(dense, detail::geometry(dense), true);
  EXPECT_EQ(row(d, step::row::kHostKvPages).bytes, 24 * 8192 * page);
  EXPECT_EQ(d.find(step::row::kLocalKvPool, step::Tier::device), nullptr);
  // Offload and resident layers count the global layers: 12 of them resident = no offload.
  s.config.resident_layers = 12;
  const step::Geometry all = detail::geometry(s);
  EXPECT_FALSE(all.offload);
  EXPECT_EQ(step::page_counts(all).kv_pool_pages, 12 * 8192);
}

// The routed experts are a row of their own: bf16 when trained (full fine-tuning), MXFP4 as stored
// (17 bytes per 32 weights) when LoRA keeps them frozen; the AdamW state covers what is trained.
TEST(LayerKinds, ExpertWeightsInTheirStoredFormatWhenFrozen) {
  Scenario s = scenario("gpt-oss-120b", "h200", 64 * K);
  const int64_t experts = 36 * 128 * s.model.expert_params();
  EXPECT_EQ(experts, s.model.routed_expert_params());
  const step::BufferTable full = detail::memory_table(s, detail::geometry(s), true);
  EXPECT_EQ(row(full, step::row::kExpertWeights).bytes, experts * 2);
  EXPECT_EQ(row(full, step::row::kWeights).bytes, (s.model.param_count() - experts) * 2);
  EXPECT_EQ(row(full, step::row::kParameterGradients).bytes, s.model.param_count() * 2);
  s.config.lora_rank = 16;
  s.config.lora_targets = {"q_proj", "v_proj"};
  const step::BufferTable lora = detail::memory_table(s, detail::geometry(s), true);
  EXPECT_EQ(row(lora, step::row::kExpertWeights).bytes, (experts + 31) / 32 * 17);
  EXPECT_EQ(row(lora, step::row::kExpertWeights).dtype, Dtype::uint8);
  EXPECT_EQ(row(lora, step::row::kWeights).bytes, (s.model.param_count() - experts) * 2);
  // Tensor parallelism splits each expert's columns: a rank holds half of every expert.
  s.config.lora_rank = 0;
  s.config.gpus = 2;
  EXPECT_EQ(step::rank_expert_param_count(s.model, s.config), 36 * 128 * step::tensor_parallel_shard(s.model, 2).expert_params());
  EXPECT_LT(step::rank_expert_param_count(s.model, s.config), experts / 2 + 36 * 128 * 2880);
}

// The MoE layer's working set: per token the router's logits, top-k routes and packed rows; per
// routed copy the gathered input, the expert's three activations and its output; whatever the
// routing (packed dispatch), so the bytes are exact, not a worst case.
TEST(LayerKinds, DispatchRowsArePackedPerRoutedCopy) {
  Scenario s = scenario("qwen3-30b-a3b", "h200", 64 * K);
  s.config.chunk_tokens = 4 * K;
  const step::Geometry g = detail::geometry(s);
  const step::BufferTable t = detail::memory_table(s, g, true);
  const step::BufferRow& acts = row(t, step::row::kLayerActivations);
  const int64_t T = 4 * K, k = 8, E = 128, h = 2048, fe = 768;
  EXPECT_EQ(acts.tensor("router_logits")->elements, T * E);
  EXPECT_EQ(acts.tensor("route_experts")->elements, T * k);
  EXPECT_EQ(acts.tensor("expert_in")->elements, T * k * h);
  EXPECT_EQ(acts.tensor("expert_gate")->elements, T * k * fe);
  EXPECT_EQ(acts.tensor("expert_offsets")->elements, E + 1);
  EXPECT_EQ(acts.tensor("gate"), nullptr);  // no dense MLP in this stack
  const int64_t base = T * (4 * h + 2 * 4096 + 2 * 512 + 4096 + 512) * 2;  // h1 x2 h2 tmp, q o, k v, q/k pre-norm
  const int64_t moe = T * ((2 * k * h + 3 * k * fe) * 2 + 4 * E + 12 * k) + 4 * (E + 1);
  EXPECT_EQ(acts.bytes, base + moe);
  const step::BufferRow& bwd = row(t, step::row::kLayerBackwardTemporaries);
  EXPECT_EQ(bwd.tensor("d_expert_in")->elements, T * k * h);
  EXPECT_EQ(bwd.tensor("d_router_logits")->elements, T * E);
  EXPECT_EQ(bwd.tensor("dgate"), nullptr);
  // Every catalog model's table builds with its tensors adding up to its rows (RowSink asserts it),
  // checkpointing on, partial and off.
  for (const auto& id : models::model_ids()) {
    Scenario m = scenario(id, "h200", 16 * K);
    m.config.chunk_tokens = 2 * K;
    for (int mode = 0; mode < 3; ++mode) {
      m.config.checkpointing = mode != 2;
      m.config.kept_layers = mode == 1 ? m.model.layers / 2 : 0;
      EXPECT_NO_THROW(detail::memory_table(m, detail::geometry(m), true)) << id << " mode " << mode;
    }
  }
}

// Time: only the active experts' GEMMs (top-k of n, the router), and a sliding layer's attention
// over its window; a mixed stack's pass is the mean over its layers.
TEST(LayerKinds, FlopsOfTheActiveExpertsAndTheWindow) {
  Scenario s = scenario("qwen3-30b-a3b", "h200", 64 * K);
  s.config.chunk_tokens = 4 * K;
  const step::Geometry g = detail::geometry(s);
  const double T = 4096, h = 2048, qd = 4096, kvd = 512;
  const double gemm = 2 * T * (h * qd + 2 * h * kvd + qd * h + h * 128 + 8 * 3 * h * 768);
  const double attn0 = 4 * (T * (T + 1) / 2) * 128 * 32;
  EXPECT_NEAR(detail::chunk_costs(s, g, 0).fill.flops, gemm + attn0, 1e-6 * gemm);

  Scenario w = scenario("gpt-oss-20b", "h200", 64 * K);
  w.config.chunk_tokens = 4 * K;
  const step::Geometry gw = detail::geometry(w);
  const double hw = 2880, qw = 4096, kw = 512;
  const double gemm_w = 2 * T * (hw * qw + 2 * hw * kw + qw * hw + hw * 32 + 4 * 3 * hw * 2880);
  const int64_t c = 5;
  const double prefix = static_cast<double>(c) * T;
  const double global = 4 * (T * prefix + T * (T + 1) / 2) * 64 * 64;
  const double sliding = 4 * (T * 128) * 64 * 64;  // every query sees 128 keys past the window's ramp
  EXPECT_NEAR(detail::chunk_costs(w, gw, c).fill.flops, gemm_w + (global + sliding) / 2, 1e-6 * gemm_w);
}

// The routed experts' GEMMs are priced at their own efficiency (Efficiency::expert_gemm, measured
// on expert shapes by oomb calibrate): their work is its own term, halving that efficiency adds
// exactly their time once more, and a dense model's cost does not move.
TEST(LayerKinds, ExpertGemmsArePricedAtTheirOwnEfficiency) {
  Scenario s = scenario("qwen3-30b-a3b", "h200", 64 * K);
  s.config.chunk_tokens = 4 * K;
  const step::Geometry g = detail::geometry(s);
  const double T = 4096, h = 2048;
  const detail::ChunkCosts base = detail::chunk_costs(s, g, 1);
  EXPECT_NEAR(base.fill.work.expert_gemm_s, 2 * T * 8 * 3 * h * 768 / s.gpu.bf16_flops_per_s, 1e-15);
  const double e = s.gpu.efficiency.gemm;
  ASSERT_EQ(s.gpu.efficiency.expert_gemm, e);  // a datasheet profile: the large-GEMM figure
  Scenario half = s;
  half.gpu.efficiency.expert_gemm = e / 2;
  const detail::ChunkCosts slow = detail::chunk_costs(half, g, 1);
  for (auto [p, q] : {std::pair{&base.fill, &slow.fill}, {&base.backward, &slow.backward}}) {
    EXPECT_GT(p->work.expert_gemm_s, 0);
    EXPECT_NEAR(q->compute_s - p->compute_s, p->work.expert_gemm_s / e, 1e-9 * p->compute_s);
  }
  Scenario dense = scenario("qwen2.5-7b", "h200", 64 * K);
  dense.config.chunk_tokens = 4 * K;
  const step::Geometry gd = detail::geometry(dense);
  const double t = detail::chunk_costs(dense, gd, 1).backward.compute_s;
  dense.gpu.efficiency.expert_gemm = e / 2;
  EXPECT_EQ(detail::chunk_costs(dense, gd, 1).backward.compute_s, t);
  // Under LoRA the frozen experts compute no weight gradient: the backward's expert work is a
  // forward's (recompute) and an input gradient's.
  Scenario lora = s;
  lora.config.lora_rank = 16;
  lora.config.lora_targets = {"q_proj", "v_proj"};
  const step::Geometry gl = detail::geometry(lora);
  const detail::ChunkCosts lc = detail::chunk_costs(lora, gl, 1);
  EXPECT_NEAR(lc.backward.work.expert_gemm_s, 2 * lc.fill.work.expert_gemm_s, 1e-12);
  EXPECT_NEAR(base.backward.work.expert_gemm_s, 3 * base.fill.work.expert_gemm_s, 1e-12);
}

// The fast path sums chunked layers' totals per residue class (a block of two chunks repeats every
// two chunks): equal to the sum over every chunk's costs.
TEST(LayerKinds, FastPathSumsPeriodicChunksExactly) {
  for (int64_t chunk : {2 * K, 4 * K, 8 * K, 3 * K}) {
    Scenario s = scenario("llama-4-scout", "h200", 96 * K + 512);
    s.config.chunk_tokens = chunk;
    s.config.resident_layers = 48;  // no offload: the step is the compute
    const step::Geometry g = detail::geometry(s);
    double flops = 0, compute = 0;
    for (int64_t c = 0; c < g.n; ++c) {
      const detail::ChunkCosts cc = detail::chunk_costs(s, g, c);
      flops += g.L * (cc.fill.flops + cc.recompute.flops) + g.Lr * cc.backward.flops +
               (g.L - g.Lr) * cc.backward_kept.flops + cc.head.flops;
      compute += g.L * (cc.fill.compute_s + cc.recompute.compute_s) + g.Lr * cc.backward.compute_s +
                 (g.L - g.Lr) * cc.backward_kept.compute_s + cc.head.compute_s + 2 * cc.fill_head.compute_s +
                 cc.embedding_bwd.compute_s;
    }
    const Summary fast = evaluate(s);
    EXPECT_NEAR(fast.flops / flops, 1.0, 1e-9) << chunk;
    EXPECT_NEAR(fast.compute_s / (compute + detail::optimizer_update_s(s)), 1.0, 1e-9) << chunk;
  }
}

}  // namespace
}  // namespace oomb::simulator

namespace oomb::simulator {
namespace {

// The fast path's closed-form sums over chunks (the bisection, the one-kink ranges of mixed stacks,
// the residue classes of chunked layers) equal pricing every chunk.
TEST(FastPath, ClosedFormSumsEqualEveryChunk) {
  struct Case {
    const char* model;
    int64_t context, chunk, resident;
    step::Attention attention;
  };
  const Case cases[] = {
      {"gemma-3-27b", 4 * M, 4 * K, 2, step::Attention::dense},   {"gemma-3-27b", M, 2 * K, 1, step::Attention::dense},
      {"gemma-3-27b", M, 4 * K, 4, step::Attention::sparse},      {"gpt-oss-20b", 4 * M, 2 * K, 2, step::Attention::dense},
      {"gpt-oss-120b", M, 8 * K, 3, step::Attention::dense},      {"llama-4-scout", 4 * M, 2 * K, 2, step::Attention::dense},
      {"llama-4-scout", M, 3 * K, 2, step::Attention::sparse},    {"qwen3-30b-a3b", M, 4 * K, 2, step::Attention::sparse},
      {"qwen2.5-7b", 4 * M, 4 * K, 2, step::Attention::dense},    {"qwen2.5-7b", M, 512, 1, step::Attention::sparse},
      {"gpt-oss-20b", 4 * M, 512, 1, step::Attention::dense},     {"gemma-3-27b", 4 * M, 512, 2, step::Attention::dense},
      {"gpt-oss-20b", 4 * M, K, 3, step::Attention::sparse},      {"llama-4-scout", 4 * M, 512, 4, step::Attention::dense},
  };
  for (const Case& k : cases) {
    Scenario s = scenario(k.model, "h200", k.context);
    s.config.chunk_tokens = k.chunk;
    s.config.resident_layers = k.resident;
    s.config.attention = k.attention;
    if (k.attention == step::Attention::sparse) s.config.page_budget = 64;
    const Summary fast = evaluate(s), all = detail::evaluate_every_chunk(s);
    const std::string what = std::string(k.model) + " " + std::to_string(k.context) + " chunk " + std::to_string(k.chunk) +
                             " resident " + std::to_string(k.resident) + " " + to_string(k.attention);
    EXPECT_NEAR(fast.step_s / all.step_s, 1.0, 1e-9) << what;
    EXPECT_NEAR(fast.compute_s / all.compute_s, 1.0, 1e-9) << what;
    EXPECT_NEAR(fast.flops / all.flops, 1.0, 1e-9) << what;
    EXPECT_NEAR(static_cast<double>(fast.h2d_bytes), static_cast<double>(all.h2d_bytes), 2.0 + 1e-9 * static_cast<double>(all.h2d_bytes)) << what;
    EXPECT_NEAR(static_cast<double>(fast.d2h_bytes), static_cast<double>(all.d2h_bytes), 2.0 + 1e-9 * static_cast<double>(all.d2h_bytes)) << what;
  }
}

}  // namespace
}  // namespace oomb::simulator
