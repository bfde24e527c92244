// Sliding-window and chunked local attention on the CPU backend (issue 43, part 4): the paged
// kernel's mask against the full-sequence masked attention, and the chunk-recurrent step of models
// with local layers against the full-sequence reference, with the local page pools' use measured
// against the buffer table's rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/flash.h"
#include "executor/cpu/ops.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "models/specs.h"
#include "step/buffers.h"
#include "step/capability.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

using models::LayerAttention;

constexpr double kGradRelTol = 1e-5;
constexpr double kLossRelTol = 1e-6;
constexpr float kInitStd = 0.1f;

// ---- The kernel --------------------------------------------------------------------------------

struct MaskCase {
  const char* name;
  LayerAttention kind;
  int64_t window, p, T, q_pos0;
  int64_t extra_pages;  // pages before the reach handed to the kernel too (masked inside the prefix)
  bool baseline;        // the baseline kernels instead of AVX2/FMA
};
void PrintTo(const MaskCase& k, std::ostream* os) { *os << k.name; }

class LocalMaskKernel : public ::testing::TestWithParam<MaskCase> {
 protected:
  void SetUp() override { cpu::flash_force_baseline(GetParam().baseline); }
  void TearDown() override { cpu::flash_force_baseline(false); }
};

// The chunk at q_pos0 with its reach's pages (and extra_pages more) equals rows q_pos0.. of the
// masked attention over the whole sequence: outputs, log-sum-exp's effect, dQ, the own rows' dK / dV
// and the prefix pages' gradients.
TEST_P(LocalMaskKernel, EqualsTheFullSequenceMaskedAttention) {
  const MaskCase k = GetParam();
  const int64_t qh = 4, kvh = 2, hd = 16, qd = qh * hd, kvd = kvh * hd, p = k.p, T = k.T, S = k.q_pos0 + T;
  ASSERT_EQ(k.q_pos0 % p, 0);
  const int64_t reach = models::first_key(k.kind, k.window, k.q_pos0) / p;
  std::vector<int64_t> ids;
  for (int64_t u = std::max<int64_t>(0, reach - k.extra_pages); u < k.q_pos0 / p; ++u) ids.push_back(u);
  const auto U = static_cast<int64_t>(ids.size());
  // The whole sequence's keys and values; the chunk's queries.
  const std::vector<float> K = test::random_vec(static_cast<size_t>(S * kvd), 31);
  const std::vector<float> V = test::random_vec(static_cast<size_t>(S * kvd), 32);
  const std::vector<float> q = test::random_vec(static_cast<size_t>(T * qd), 33);
  const std::vector<float> dout = test::random_vec(static_cast<size_t>(T * qd), 34);
  std::vector<float> pages(static_cast<size_t>(U * 2 * p * kvd)), dpages(pages.size(), 0.0f);
  for (int64_t u = 0; u < U; ++u)
    for (int64_t r = 0; r < p; ++r)
      for (int64_t d = 0; d < kvd; ++d) {
        const auto src = static_cast<size_t>((ids[static_cast<size_t>(u)] * p + r) * kvd + d);
        pages[static_cast<size_t>(u * 2 * p * kvd + r * kvd + d)] = K[src];
        pages[static_cast<size_t>(u * 2 * p * kvd + (p + r) * kvd + d)] = V[src];
      }
  PagedAttention a;
  a.rows = T;
  a.q_heads = qh;
  a.kv_heads = kvh;
  a.head_dim = hd;
  a.page_tokens = p;
  a.q = q.data();
  a.k_own = K.data() + k.q_pos0 * kvd;
  a.v_own = V.data() + k.q_pos0 * kvd;
  for (int64_t u = 0; u < U; ++u) a.prefix_pages.push_back(pages.data() + u * 2 * p * kvd);
  a.local = k.kind;
  a.window = k.window;
  a.q_pos0 = k.q_pos0;
  a.prefix_ids = ids;
  std::vector<float> o(static_cast<size_t>(T * qd)), lse(static_cast<size_t>(T * qh)), dq(o.size());
  std::vector<float> dk(static_cast<size_t>(T * kvd)), dv(dk.size());
  cpu::attention_fwd(a, o.data(), lse.data());
  std::vector<float*> gp;
  for (int64_t u = 0; u < U; ++u) gp.push_back(dpages.data() + u * 2 * p * kvd);
  cpu::attention_bwd(a, o.data(), lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), gp);

  cpu::MaskedAttention m;
  m.n = S;
  m.q_heads = qh;
  m.kv_heads = kvh;
  m.head_dim = hd;
  m.allowed.assign(1, std::vector<uint8_t>(static_cast<size_t>(S * S), 0));
  int64_t masked_in_prefix = 0;  // keys of the handed pages the mask hides (the test's reach)
  for (int64_t i = 0; i < S; ++i)
    for (int64_t t = models::first_key(k.kind, k.window, i); t <= i; ++t) m.allowed[0][static_cast<size_t>(i * S + t)] = 1;
  for (int64_t i = k.q_pos0; i < S; ++i)
    for (int64_t t = U > 0 ? ids[0] * p : k.q_pos0; t < models::first_key(k.kind, k.window, i); ++t) ++masked_in_prefix;
  std::vector<float> Q(static_cast<size_t>(S * qd), 0.0f), R(Q.size(), 0.0f), O(Q.size()), dQ(Q.size());
  std::vector<float> dK(K.size()), dV(V.size()), probs;
  std::copy(q.begin(), q.end(), Q.begin() + k.q_pos0 * qd);
  std::copy(dout.begin(), dout.end(), R.begin() + k.q_pos0 * qd);
  cpu::masked_attention_fwd(m, Q.data(), K.data(), V.data(), O.data(), probs);
  cpu::masked_attention_bwd(m, Q.data(), K.data(), V.data(), probs, R.data(), dQ.data(), dK.data(), dV.data());
  const double tol = 2e-5;
  for (int64_t i = 0; i < T * qd; ++i) {
    ASSERT_NEAR(o[static_cast<size_t>(i)], O[static_cast<size_t>(k.q_pos0 * qd + i)], tol) << "o " << i;
    ASSERT_NEAR(dq[static_cast<size_t>(i)], dQ[static_cast<size_t>(k.q_pos0 * qd + i)], tol) << "dq " << i;
  }
  for (int64_t i = 0; i < T * kvd; ++i) {
    ASSERT_NEAR(dk[static_cast<size_t>(i)], dK[static_cast<size_t>(k.q_pos0 * kvd + i)], tol) << "dk " << i;
    ASSERT_NEAR(dv[static_cast<size_t>(i)], dV[static_cast<size_t>(k.q_pos0 * kvd + i)], tol) << "dv " << i;
  }
  for (int64_t u = 0; u < U; ++u)
    for (int64_t r = 0; r < p; ++r)
      for (int64_t d = 0; d < kvd; ++d) {
        const auto at = static_cast<size_t>((ids[static_cast<size_t>(u)] * p + r) * kvd + d);
        ASSERT_NEAR(dpages[static_cast<size_t>(u * 2 * p * kvd + r * kvd + d)], dK[at], tol) << "page " << u;
        ASSERT_NEAR(dpages[static_cast<size_t>(u * 2 * p * kvd + (p + r) * kvd + d)], dV[at], tol) << "page " << u;
      }
  // Not a vacuous mask: the window hides keys the kernel was handed, or within the chunk itself.
  int64_t hidden_in_chunk = 0;
  for (int64_t i = k.q_pos0; i < S; ++i) hidden_in_chunk += std::max<int64_t>(0, models::first_key(k.kind, k.window, i) - k.q_pos0);
  EXPECT_GT(masked_in_prefix + hidden_in_chunk, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LocalMaskKernel,
    ::testing::Values(
        // name, kind, window, p, T, q_pos0, extra pages, baseline
        MaskCase{"sliding_inside_a_page", LayerAttention::sliding, 5, 8, 40, 32, 1, false},
        MaskCase{"sliding_across_pages", LayerAttention::sliding, 21, 8, 40, 48, 2, false},
        MaskCase{"sliding_longer_than_the_chunk", LayerAttention::sliding, 70, 8, 32, 64, 1, false},
        MaskCase{"sliding_ragged_chunk_baseline", LayerAttention::sliding, 13, 8, 29, 24, 1, true},
        MaskCase{"chunked_block_inside_the_chunk", LayerAttention::chunked, 16, 8, 48, 48, 1, false},
        MaskCase{"chunked_block_across_the_boundary", LayerAttention::chunked, 40, 8, 32, 56, 1, false},
        MaskCase{"chunked_large_block_baseline", LayerAttention::chunked, 96, 8, 40, 72, 0, true}),
    [](const auto& i) { return std::string(i.param.name); });

// ---- The step ----------------------------------------------------------------------------------

struct StepCase {
  const char* name;
  std::vector<LayerAttention> layers;
  int64_t window, block;  // sliding window, chunked block
  int64_t N, C, p, resident;
  int64_t kept_layers = 0;
  bool sparse = false;
};
void PrintTo(const StepCase& k, std::ostream* os) { *os << k.name; }

models::ModelSpec local_model(const StepCase& k) {
  models::ModelSpec m = test::small_model(static_cast<int64_t>(k.layers.size()), 4, 2, 8, 32, false, false, 61, 48);
  m.family = "qwen3";
  m.qkv_bias = false;
  m.qk_norm = true;
  m.layer_attention = k.layers;
  if (m.layers_of(LayerAttention::sliding) > 0) m.sliding_window = k.window;
  if (m.layers_of(LayerAttention::chunked) > 0) m.attention_chunk = k.block;
  return m;
}

class LocalEqualsFullSequence : public ::testing::TestWithParam<StepCase> {};

// Loss and every gradient equal the windowed full-sequence reference, and the local pools are used
// as the table sizes them: never beyond their rows (the memory account), and the KV pool's peak the
// row exactly where the last chunk is whole (every boundary's reach kept + one chunk's own pages).
TEST_P(LocalEqualsFullSequence, LossGradientsAndTheLocalPools) {
  const StepCase k = GetParam();
  const models::ModelSpec m = local_model(k);
  step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
  c.kept_layers = k.kept_layers;
  if (k.sparse) {
    c.attention = step::Attention::sparse;
    c.page_budget = 2;
  }
  ASSERT_TRUE(step::capability(m, c, {}).executable()) << step::capability(m, c, {}).reason;
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  CpuBackend backend;
  Engine e(backend, m, c, w);
  const double loss = e.step(tokens).loss;
  std::vector<cpu::MaskedAttention> masks;
  for (int64_t l = 0; l < m.layers; ++l) masks.push_back(cpu::selection_mask(m, k.N, k.C, k.p, e.selections(), l));
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens, k.sparse ? &masks : nullptr);
  EXPECT_NEAR(loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(e.gradients(), ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;

  const step::Geometry& g = e.geometry();
  const step::RunRecord& r = e.measured();
  EXPECT_EQ(r.local_kv_pool_pages, g.local_kv_pages);
  EXPECT_EQ(r.local_grad_pool_pages, g.local_grad_pages);
  EXPECT_LE(r.local_kv_high_water_pages, g.local_kv_pages);
  EXPECT_LE(r.local_grad_high_water_pages, g.local_grad_pages);
  if (k.N % k.C == 0) {
    EXPECT_EQ(r.local_kv_high_water_pages, g.local_kv_pages);
  }
  EXPECT_GT(r.local_grad_high_water_pages, 0);
  // The global layers' pools count the global layers only.
  EXPECT_EQ(r.kv_pool_pages, step::page_counts(g).kv_pool_capacity_pages);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LocalEqualsFullSequence,
    ::testing::Values(
        // name, layers, window, block, N, C, p, resident[, kept, sparse]
        StepCase{"sliding_window_under_a_page",
                 {LayerAttention::sliding, LayerAttention::global, LayerAttention::sliding}, 3, 0, 64, 16, 8, 64},
        StepCase{"sliding_window_over_the_chunk",
                 {LayerAttention::global, LayerAttention::sliding, LayerAttention::global}, 37, 0, 96, 16, 8, 64},
        StepCase{"chunked_block_divides_the_chunk",
                 {LayerAttention::chunked, LayerAttention::global, LayerAttention::chunked}, 0, 8, 64, 16, 8, 64},
        StepCase{"chunked_block_over_the_chunk_ragged",
                 {LayerAttention::global, LayerAttention::chunked, LayerAttention::global}, 0, 40, 90, 16, 8, 64},
        StepCase{"both_kinds_offload_of_the_global_layers",
                 {LayerAttention::global, LayerAttention::sliding, LayerAttention::chunked, LayerAttention::global,
                  LayerAttention::global},
                 21, 24, 96, 16, 8, 1},
        StepCase{"both_kinds_kept_layer_resident_two",
                 {LayerAttention::sliding, LayerAttention::global, LayerAttention::chunked, LayerAttention::global},
                 11, 32, 80, 16, 8, 2, 1},
        // Mistral 7B v0.1's shape: every layer sliding, no global pool at all.
        StepCase{"every_layer_sliding", {LayerAttention::sliding, LayerAttention::sliding}, 13, 0, 64, 16, 8, 1},
        StepCase{"sparse_global_layers_beside_local_ones",
                 {LayerAttention::global, LayerAttention::sliding, LayerAttention::global}, 19, 0, 128, 32, 8, 1, 0,
                 true}),
    [](const auto& i) { return std::string(i.param.name); });

// One step of m on the CPU backend against the full-sequence reference (loss and every gradient);
// the step's loss and gradients and the reference, for what a test checks beyond.
struct StepAndReference {
  double loss = 0;
  Gradients grads;
  cpu::ReferenceResult ref;
};
StepAndReference expect_step_equals_reference(const models::ModelSpec& m, const step::Config& c, const Weights& w,
                                              const std::vector<int32_t>& tokens) {
  CpuBackend backend;
  Engine e(backend, m, c, w);
  StepAndReference r;
  r.loss = e.step(tokens).loss;
  r.grads = e.gradients();
  r.ref = cpu::full_sequence_reference(m, w, tokens);
  EXPECT_NEAR(r.loss, r.ref.loss, kLossRelTol * r.ref.loss);
  const auto [err, name] = worst_relative_l2(r.grads, r.ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  return r;
}

// The catalog's test model, as `oomb run --model tiny-local` runs it.
TEST(LocalAttention, TheCatalogsTinyLocalEqualsFullSequence) {
  const models::ModelSpec m = models::load_model("tiny-local");
  ASSERT_EQ(m.layers_of(LayerAttention::sliding), 2);
  ASSERT_EQ(m.layers_of(LayerAttention::chunked), 1);
  const step::Config c = test::small_config(512, 128, 32, 1);
  const Weights w = random_weights(m, 99, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, c.context_tokens);
  const double loss = expect_step_equals_reference(m, c, w, tokens).loss;
  // The window matters: the same weights with every layer global give another loss.
  models::ModelSpec global = m;
  global.layer_attention.clear();
  global.sliding_window = global.attention_chunk = 0;
  EXPECT_GT(std::abs(cpu::full_sequence_reference(global, w, tokens).loss - loss), 1e-4);
}

// ---- Attention sinks -------------------------------------------------------------------------

// The forward is the merge of one more logit into each row's softmax; the backward is its
// derivative: central differences of f(s) = sum r . o'(s) over every sink.
TEST(AttentionSinks, TheOpsAreTheMergedSoftmaxAndItsDerivative) {
  const int64_t T = 7, qh = 3, hd = 5;
  const std::vector<float> o0 = test::random_vec(static_cast<size_t>(T * qh * hd), 41);
  const std::vector<float> lse0 = test::random_vec(static_cast<size_t>(T * qh), 42, 2.0f);
  const std::vector<float> r = test::random_vec(o0.size(), 43);
  std::vector<float> sinks = test::random_vec(static_cast<size_t>(qh), 44, 2.0f);
  auto forward = [&](const std::vector<float>& s, std::vector<float>& o, std::vector<float>& lse) {
    o = o0;
    lse = lse0;
    cpu::attention_sinks_fwd(s.data(), T, qh, hd, o.data(), lse.data());
  };
  std::vector<float> o, lse;
  forward(sinks, o, lse);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < qh; ++h) {
      const size_t i = static_cast<size_t>(t * qh + h);
      const double merged = std::log(std::exp(double{lse0[i]}) + std::exp(double{sinks[static_cast<size_t>(h)]}));
      EXPECT_NEAR(lse[i], merged, 1e-5);
      for (int64_t d = 0; d < hd; ++d)
        EXPECT_NEAR(o[i * hd + static_cast<size_t>(d)], o0[i * hd + static_cast<size_t>(d)] * std::exp(lse0[i] - merged), 1e-5);
    }
  std::vector<float> d_sinks(static_cast<size_t>(qh), 0.5f);  // accumulated onto
  cpu::attention_sinks_bwd(sinks.data(), T, qh, hd, o.data(), lse.data(), r.data(), d_sinks.data());
  for (int64_t h = 0; h < qh; ++h) {
    const float eps = 1e-3f;
    auto f = [&](float delta) {
      std::vector<float> s = sinks, oo, ll;
      s[static_cast<size_t>(h)] += delta;
      forward(s, oo, ll);
      double acc = 0;
      for (size_t i = 0; i < oo.size(); ++i) acc += static_cast<double>(oo[i]) * r[i];
      return acc;
    };
    const double fd = (f(eps) - f(-eps)) / (2.0 * eps);
    EXPECT_NEAR(d_sinks[static_cast<size_t>(h)] - 0.5, fd, 2e-3 * std::max(1.0, std::abs(fd))) << "head " << h;
  }
}

// The catalog's sink model (gpt-oss's attention: sinks, sliding layers beside global ones) with
// sinks large enough to take a real share of each softmax, against the reference with the sinks in
// its softmax: loss, every gradient, the sinks' own.
TEST(AttentionSinks, TheCatalogsTinySinksEqualsFullSequence) {
  const models::ModelSpec m = models::load_model("tiny-sinks");
  ASSERT_TRUE(m.attention_sinks);
  for (const int64_t resident : {1, 2}) {
    const step::Config c = test::small_config(384, 128, 32, resident);
    Weights w = random_weights(m, 5, kInitStd);
    for (const auto& p : w.layout.params())
      if (p.name.find("self_attn.sinks") != std::string::npos)
        for (int64_t h = 0; h < p.numel; ++h) w.at(p)[h] = 0.5f + 0.6f * static_cast<float>(h);
    const auto tokens = TokenSource::synthetic(m.vocab, 11).sequence(0, c.context_tokens);
    const StepAndReference r = expect_step_equals_reference(m, c, w, tokens);
    const Gradients& g = r.grads;
    const cpu::ReferenceResult& ref = r.ref;
    int64_t sink_tensors = 0;
    for (const auto& p : ref.grads.layout.params()) {
      if (p.name.find("self_attn.sinks") == std::string::npos) continue;
      ++sink_tensors;
      const std::vector<float> zero(static_cast<size_t>(p.numel), 0.0f);
      EXPECT_GT(relative_l2(ref.grads.at(p), zero.data(), p.numel), 0) << p.name;
      EXPECT_LE(relative_l2(g.at(p), ref.grads.at(p), p.numel), kGradRelTol) << p.name;
    }
    EXPECT_EQ(sink_tensors, m.layers);
  }
}

// gpt-oss's attention_bias: biases on q, k, v and the o projection (o_proj.bias [hidden], added once
// to the attention's output). The step against the reference with the biases in it: the loss, every
// gradient, each o_proj bias's own; the biases change the loss.
TEST(AttentionBias, TheOProjBiasEqualsFullSequence) {
  models::ModelSpec m = models::load_model("tiny-sinks");
  m.qkv_bias = m.o_bias = true;
  const step::Config c = test::small_config(384, 128, 32, 1);
  Weights w = random_weights(m, 17, kInitStd);
  int64_t biases = 0;
  for (const auto& p : w.layout.params())
    if (p.name.find("self_attn.o_proj.bias") != std::string::npos) {
      ++biases;
      EXPECT_EQ(p.shape, std::vector<int64_t>{m.hidden}) << p.name;
      const std::vector<float> b = test::random_vec(static_cast<size_t>(p.numel), 31 + static_cast<uint64_t>(biases), 0.5f);
      std::copy(b.begin(), b.end(), w.at(p));
    }
  EXPECT_EQ(biases, m.layers);
  EXPECT_EQ(w.layout.total(), m.param_count());  // the table's parameter count has them
  const auto tokens = TokenSource::synthetic(m.vocab, 13).sequence(0, c.context_tokens);
  const StepAndReference r = expect_step_equals_reference(m, c, w, tokens);
  for (const auto& p : r.ref.grads.layout.params()) {
    if (p.name.find("self_attn.o_proj.bias") == std::string::npos) continue;
    const std::vector<float> zero(static_cast<size_t>(p.numel), 0.0f);
    EXPECT_GT(relative_l2(r.ref.grads.at(p), zero.data(), p.numel), 0) << p.name;
    EXPECT_LE(relative_l2(r.grads.at(p), r.ref.grads.at(p), p.numel), kGradRelTol) << p.name;
  }
  Weights unbiased = w;
  for (const auto& p : unbiased.layout.params())
    if (p.name.find("self_attn.o_proj.bias") != std::string::npos) std::fill(unbiased.at(p), unbiased.at(p) + p.numel, 0.0f);
  EXPECT_GT(std::abs(cpu::full_sequence_reference(m, unbiased, tokens).loss - r.ref.loss), 1e-4);
}

TEST(AttentionSinks, UnderTensorParallelismAreRefusedByName) {
  const models::ModelSpec m = models::load_model("tiny-sinks");
  step::Config c = test::small_config(512, 128, 32, 1);
  c.gpus = 2;
  const step::Capability cap = step::capability(m, c, {});
  EXPECT_EQ(cap.key, "gpus");
  EXPECT_NE(cap.reason.find("sinks"), std::string::npos) << cap.reason;
}

// Both backends run local layers and sinks (the CUDA ones: tests/cuda/local_attention_test.cpp);
// a plan for a GPU is executable.
TEST(LocalAttention, ThePlansOfLocalAndSinkModelsAreExecutableOnEitherBackend) {
  const step::Config c = test::small_config(512, 128, 32, 1);
  step::Target cuda;
  cuda.backend = step::BackendKind::cuda;
  for (const char* id : {"tiny-local", "tiny-sinks"}) {
    const models::ModelSpec m = models::load_model(id);
    EXPECT_TRUE(step::capability(m, c, cuda).executable()) << id << ": " << step::capability(m, c, cuda).reason;
    EXPECT_TRUE(step::capability(m, c, {}).executable()) << id;
  }
}

}  // namespace
}  // namespace oomb::executor
