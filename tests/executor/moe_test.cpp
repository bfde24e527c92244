// Mixtures of experts on the CPU backend (issue 43, part 4): the routing and packed-dispatch ops
// against direct computations and finite differences, and the chunk-recurrent step of MoE models
// against the full-sequence reference (which routes token by token, without packing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "step/capability.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

constexpr double kGradRelTol = 1e-5;
constexpr double kLossRelTol = 1e-6;
constexpr float kInitStd = 0.1f;

// ---- The ops -----------------------------------------------------------------------------------

struct Routed {
  std::vector<int32_t> experts, rows, offsets;
  std::vector<float> weights;
};

Routed route(CpuBackend& b, const std::vector<float>& logits, int64_t T, int64_t E, int64_t K, bool renormalize) {
  Routed r;
  r.experts.resize(static_cast<size_t>(T * K));
  r.rows.resize(static_cast<size_t>(T * K));
  r.weights.resize(static_cast<size_t>(T * K));
  r.offsets.resize(static_cast<size_t>(E + 1));
  b.moe_route(logits.data(), T, E, K, renormalize, r.experts.data(), r.weights.data(), r.rows.data(), r.offsets.data());
  return r;
}

TEST(MoeOps, RouteSelectsTheLargestLogitsAndPacksByExpertThenToken) {
  CpuBackend b;
  const int64_t T = 23, E = 6, K = 3;
  std::vector<float> logits = test::random_vec(static_cast<size_t>(T * E), 5);
  logits[0] = logits[1] = 3.0f;  // a tie: the lower expert first
  for (const bool renormalize : {true, false}) {
    const Routed r = route(b, logits, T, E, K, renormalize);
    for (int64_t t = 0; t < T; ++t) {
      const float* l = logits.data() + t * E;
      std::vector<int32_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t c) { return l[a] > l[c]; });
      double z_all = 0, z_sel = 0;
      for (int64_t e = 0; e < E; ++e) z_all += std::exp(static_cast<double>(l[e]));
      for (int64_t j = 0; j < K; ++j) z_sel += std::exp(static_cast<double>(l[order[static_cast<size_t>(j)]]));
      double sum = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = r.experts[static_cast<size_t>(t * K + j)];
        EXPECT_EQ(e, order[static_cast<size_t>(j)]) << "token " << t << " rank " << j;
        const double want = std::exp(static_cast<double>(l[e])) / (renormalize ? z_sel : z_all);
        EXPECT_NEAR(r.weights[static_cast<size_t>(t * K + j)], want, 1e-6);
        sum += r.weights[static_cast<size_t>(t * K + j)];
        // The packed row lies in its expert's block.
        const int32_t row = r.rows[static_cast<size_t>(t * K + j)];
        EXPECT_GE(row, r.offsets[static_cast<size_t>(e)]);
        EXPECT_LT(row, r.offsets[static_cast<size_t>(e + 1)]);
      }
      if (renormalize) {
        EXPECT_NEAR(sum, 1.0, 1e-6);
      }
    }
    // The rows are a permutation of 0 .. T K - 1, ascending by token inside each block.
    EXPECT_EQ(r.offsets.front(), 0);
    EXPECT_EQ(r.offsets.back(), T * K);
    std::set<int32_t> rows(r.rows.begin(), r.rows.end());
    EXPECT_EQ(static_cast<int64_t>(rows.size()), T * K);
    std::vector<int64_t> token_of(static_cast<size_t>(T * K));
    for (int64_t i = 0; i < T * K; ++i) token_of[static_cast<size_t>(r.rows[static_cast<size_t>(i)])] = i / K;
    for (int64_t e = 0; e < E; ++e)
      for (int32_t row = r.offsets[static_cast<size_t>(e)] + 1; row < r.offsets[static_cast<size_t>(e + 1)]; ++row)
        EXPECT_LT(token_of[static_cast<size_t>(row - 1)], token_of[static_cast<size_t>(row)]);
  }
  EXPECT_EQ(route(b, logits, T, E, K, true).experts[0], 0);
}

// d_logits of L = sum_j g_j w_j (the selection held) against central differences.
TEST(MoeOps, RouteBackwardIsTheWeightsJacobian) {
  CpuBackend b;
  const int64_t T = 5, E = 7, K = 3;
  for (const bool renormalize : {true, false}) {
    std::vector<float> logits = test::random_vec(static_cast<size_t>(T * E), 11);
    const std::vector<float> g = test::random_vec(static_cast<size_t>(T * K), 12);
    const Routed r = route(b, logits, T, E, K, renormalize);
    std::vector<float> d(static_cast<size_t>(T * E), -1.0f);
    b.moe_route_bwd(logits.data(), T, E, K, renormalize, r.experts.data(), r.weights.data(), g.data(), d.data());
    const auto f = [&] {
      const Routed q = route(b, logits, T, E, K, renormalize);
      EXPECT_EQ(q.experts, r.experts) << "a step of the differences changed the selection";
      double s = 0;
      for (size_t i = 0; i < g.size(); ++i) s += static_cast<double>(g[i]) * q.weights[i];
      return s;
    };
    EXPECT_LE(test::fd_error(logits, d, f, 1e-3f), 1e-3) << (renormalize ? "renormalised" : "softmax over all");
  }
}

TEST(MoeOps, GatherCombineAndTheCombinesBackwardAreTheirDefinitions) {
  CpuBackend b;
  const int64_t T = 9, E = 4, K = 2, D = 5;
  const std::vector<float> logits = test::random_vec(static_cast<size_t>(T * E), 21);
  const Routed r = route(b, logits, T, E, K, true);
  const std::vector<float> x = test::random_vec(static_cast<size_t>(T * D), 22);
  std::vector<float> packed(static_cast<size_t>(T * K * D), 0.0f);
  b.moe_gather(x.data(), T, D, K, r.rows.data(), packed.data());
  const std::vector<float> out = test::random_vec(static_cast<size_t>(T * K * D), 23);
  std::vector<float> y(static_cast<size_t>(T * D), 7.0f), sum(static_cast<size_t>(T * D), 1.0f);
  b.moe_combine(out.data(), T, D, K, r.rows.data(), r.weights.data(), y.data(), false);
  b.moe_combine(out.data(), T, D, K, r.rows.data(), nullptr, sum.data(), true);
  const std::vector<float> dy = test::random_vec(static_cast<size_t>(T * D), 24);
  std::vector<float> d_packed(static_cast<size_t>(T * K * D), 0.0f), d_w(static_cast<size_t>(T * K), 0.0f);
  b.moe_combine_bwd(dy.data(), out.data(), T, D, K, r.rows.data(), r.weights.data(), d_packed.data(), d_w.data());
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> want(static_cast<size_t>(D), 0.0), plain(static_cast<size_t>(D), 1.0);
    for (int64_t j = 0; j < K; ++j) {
      const int64_t row = r.rows[static_cast<size_t>(t * K + j)];
      const float w = r.weights[static_cast<size_t>(t * K + j)];
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) {
        EXPECT_EQ(packed[static_cast<size_t>(row * D + i)], x[static_cast<size_t>(t * D + i)]);
        want[static_cast<size_t>(i)] += w * out[static_cast<size_t>(row * D + i)];
        plain[static_cast<size_t>(i)] += out[static_cast<size_t>(row * D + i)];
        EXPECT_FLOAT_EQ(d_packed[static_cast<size_t>(row * D + i)], w * dy[static_cast<size_t>(t * D + i)]);
        dot += static_cast<double>(dy[static_cast<size_t>(t * D + i)]) * out[static_cast<size_t>(row * D + i)];
      }
      EXPECT_NEAR(d_w[static_cast<size_t>(t * K + j)], dot, 1e-5);
    }
    for (int64_t i = 0; i < D; ++i) {
      EXPECT_NEAR(y[static_cast<size_t>(t * D + i)], want[static_cast<size_t>(i)], 1e-6);
      EXPECT_NEAR(sum[static_cast<size_t>(t * D + i)], plain[static_cast<size_t>(i)], 1e-6);
    }
  }
}

// ---- The step ----------------------------------------------------------------------------------

struct MoeCase {
  const char* name;
  int64_t experts, top_k, expert_ffn;
  std::vector<int64_t> dense_layers;
  models::Routing routing;
  int64_t N, C, p, resident;
  int64_t kept_layers = 0;  // layers whose stage-2 forward activations are kept (no recompute)
};

void PrintTo(const MoeCase& k, std::ostream* os) { *os << k.name; }

models::ModelSpec moe_model(const MoeCase& k) {
  models::ModelSpec m = test::small_model(3, 4, 2, 8, 32, false, false, 61, 48);
  m.family = "qwen3_moe";
  m.qk_norm = true;
  m.moe.experts = k.experts;
  m.moe.experts_per_token = k.top_k;
  m.moe.expert_ffn_hidden = k.expert_ffn;
  m.moe.dense_layers = k.dense_layers;
  m.moe.routing = k.routing;
  return m;
}

class MoeEqualsFullSequence : public ::testing::TestWithParam<MoeCase> {};

TEST_P(MoeEqualsFullSequence, LossAndEveryParameterGradient) {
  const MoeCase k = GetParam();
  const models::ModelSpec m = moe_model(k);
  step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
  c.kept_layers = k.kept_layers;
  ASSERT_TRUE(step::capability(m, c, {}).executable()) << step::capability(m, c, {}).reason;
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  CpuBackend backend;
  Engine e(backend, m, c, w);
  const double loss = e.step(tokens).loss;
  const Gradients g = e.gradients();
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  EXPECT_NEAR(loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(g, ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  // Not an empty check: the router and every expert that received a token have gradients, and the
  // tokens spread over most experts.
  int64_t trained_experts = 0;
  for (const auto& p : ref.grads.layout.params()) {
    const bool zero =
        relative_l2(ref.grads.at(p), std::vector<float>(static_cast<size_t>(p.numel), 0.0f).data(), p.numel) == 0;
    if (p.name.find(".gate.weight") != std::string::npos) {
      EXPECT_FALSE(zero) << p.name;
    }
    if (p.name.find(".experts.") != std::string::npos && p.name.find("down_proj") != std::string::npos)
      trained_experts += zero ? 0 : 1;
  }
  const int64_t moe_layers = m.layers - static_cast<int64_t>(k.dense_layers.size());
  EXPECT_GE(trained_experts, moe_layers * std::min(k.experts, k.N * k.top_k) * 3 / 4);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeEqualsFullSequence,
    ::testing::Values(
        // name, experts, top-k, expert ffn, dense layers, routing, N, C, p, resident[, kept]
        MoeCase{"top2_of_8_first_layer_dense", 8, 2, 24, {0}, models::Routing::softmax_topk, 64, 16, 8, 64},
        MoeCase{"softmax_over_all_ragged", 6, 2, 16, {}, models::Routing::softmax_all, 45, 16, 8, 64},
        // Top-1 renormalised weighs every token's expert 1 (no router gradient): the softmax over all.
        MoeCase{"top1_offload", 4, 1, 32, {1}, models::Routing::softmax_all, 48, 16, 4, 1},
        MoeCase{"top3_kept_layer", 5, 3, 16, {}, models::Routing::softmax_topk, 40, 16, 8, 2, 1},
        MoeCase{"single_chunk", 8, 2, 16, {2}, models::Routing::softmax_topk, 24, 32, 8, 64}),
    [](const auto& i) { return std::string(i.param.name); });

// One CPU step against the full-sequence reference: the loss and every gradient (returned).
cpu::ReferenceResult expect_step_equals_reference(const models::ModelSpec& m, const step::Config& c, const Weights& w,
                                                  const std::vector<int32_t>& tokens) {
  CpuBackend backend;
  Engine e(backend, m, c, w);
  const double loss = e.step(tokens).loss;
  cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  EXPECT_NEAR(loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(e.gradients(), ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  return ref;
}

// gpt-oss's biases: the router's [experts] and each expert's gate, up [fe] and down [hidden] (after
// its weights inside its stride). Random biases large enough to move the routing; the step with
// offload against the reference: loss, every gradient, the biases' own (every router's, and the
// experts' that took a token), and the biases change the loss.
TEST(Moe, RouterAndExpertBiasesEqualFullSequence) {
  MoeCase k{"biases", 4, 2, 16, {}, models::Routing::softmax_topk, 64, 16, 8, 1};
  models::ModelSpec m = moe_model(k);
  m.moe.router_bias = m.moe.expert_bias = true;
  const step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
  ASSERT_TRUE(step::capability(m, c, {}).executable()) << step::capability(m, c, {}).reason;
  Weights w = random_weights(m, 4321, kInitStd);
  EXPECT_EQ(w.layout.total(), m.param_count());
  EXPECT_EQ(w.layout.expert_stride(), 3 * 16 * m.hidden + 2 * 16 + m.hidden);
  int64_t router_biases = 0, expert_biases = 0;
  uint64_t seed = 70;
  for (const auto& p : w.layout.params()) {
    const bool router = p.name.find("mlp.gate.bias") != std::string::npos;
    const bool expert = p.name.find(".experts.") != std::string::npos && p.name.find(".bias") != std::string::npos;
    if (!router && !expert) continue;
    (router ? router_biases : expert_biases) += 1;
    const std::vector<float> b = test::random_vec(static_cast<size_t>(p.numel), ++seed, 0.3f);
    std::copy(b.begin(), b.end(), w.at(p));
  }
  EXPECT_EQ(router_biases, m.layers);
  EXPECT_EQ(expert_biases, m.layers * k.experts * 3);
  ASSERT_NE(w.layout.find("model.layers.0.mlp.experts.3.down_proj.bias"), nullptr);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  const cpu::ReferenceResult ref = expect_step_equals_reference(m, c, w, tokens);
  int64_t trained = 0;
  for (const auto& p : ref.grads.layout.params()) {
    if (p.name.find(".bias") == std::string::npos || p.name.find("mlp.") == std::string::npos) continue;
    const std::vector<float> zero(static_cast<size_t>(p.numel), 0.0f);
    const bool moved = relative_l2(ref.grads.at(p), zero.data(), p.numel) > 0;
    if (p.name.find("mlp.gate.bias") != std::string::npos) EXPECT_TRUE(moved) << p.name;
    trained += moved ? 1 : 0;
  }
  EXPECT_GE(trained, m.layers + m.layers * k.experts * 3 * 3 / 4);
  Weights unbiased = w;
  for (const auto& p : unbiased.layout.params())
    if (p.name.find("mlp.") != std::string::npos && p.name.find(".bias") != std::string::npos)
      std::fill(unbiased.at(p), unbiased.at(p) + p.numel, 0.0f);
  EXPECT_GT(std::abs(cpu::full_sequence_reference(m, unbiased, tokens).loss - ref.loss), 1e-4);
}

// gpt-oss's experts: its clamped SwiGLU (a limit the experts' pre-activations cross, so the clamps
// act) with its biases, softmax over the selected logits; the step against the reference.
TEST(Moe, GptOssExpertsEqualFullSequence) {
  MoeCase k{"gpt_oss", 4, 2, 16, {}, models::Routing::softmax_topk, 64, 16, 8, 1};
  models::ModelSpec m = moe_model(k);
  m.moe.router_bias = m.moe.expert_bias = true;
  m.mlp = models::Mlp::gpt_oss;
  m.swiglu_limit = 0.05;
  const step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
  ASSERT_TRUE(step::capability(m, c, {}).executable()) << step::capability(m, c, {}).reason;
  const Weights w = random_weights(m, 4321, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  const cpu::ReferenceResult ref = expect_step_equals_reference(m, c, w, tokens);
  // The clamp acts: without it (plain SwiGLU) the loss is another.
  models::ModelSpec plain = m;
  plain.mlp = models::Mlp::swiglu;
  EXPECT_GT(std::abs(cpu::full_sequence_reference(plain, w, tokens).loss - ref.loss), 1e-5);
}

// Shared experts (Llama 4's, DeepSeek's): SwiGLU MLPs every token uses, added to the routed
// combine; two of width 12 are one MLP of 24 columns (mlp.shared_expert.*). The step against the
// reference with offload, and with the last layer's activations kept: the loss, every gradient,
// the shared experts' own, and the loss moves without them.
TEST(Moe, SharedExpertsEqualFullSequence) {
  MoeCase k{"shared", 6, 2, 16, {0}, models::Routing::softmax_all, 64, 16, 8, 1};
  models::ModelSpec m = moe_model(k);
  m.moe.shared_experts = 2;
  m.moe.shared_ffn_hidden = 12;
  const Weights w = random_weights(m, 2468, kInitStd);
  EXPECT_EQ(w.layout.total(), m.param_count());
  const ParamInfo* gate = w.layout.find("model.layers.1.mlp.shared_expert.gate_proj.weight");
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(gate->shape, (std::vector<int64_t>{24, m.hidden}));
  EXPECT_LT(gate->offset, w.layout.experts_begin());  // in the weights row, not the routed experts'
  EXPECT_EQ(w.layout.find("model.layers.0.mlp.shared_expert.gate_proj.weight"), nullptr);  // the dense layer
  ASSERT_NE(w.layout.find("model.layers.2.mlp.shared_expert.down_proj.weight"), nullptr);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  for (const int64_t kept : {0, 1}) {
    SCOPED_TRACE("kept layers " + std::to_string(kept));
    step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
    c.kept_layers = kept;
    ASSERT_TRUE(step::capability(m, c, {}).executable()) << step::capability(m, c, {}).reason;
    const cpu::ReferenceResult ref = expect_step_equals_reference(m, c, w, tokens);
    for (const auto& p : ref.grads.layout.params()) {
      if (p.name.find("shared_expert") == std::string::npos) continue;
      const std::vector<float> zero(static_cast<size_t>(p.numel), 0.0f);
      EXPECT_GT(relative_l2(ref.grads.at(p), zero.data(), p.numel), 0) << p.name;
    }
  }
  Weights without = w;
  for (const auto& p : without.layout.params())
    if (p.name.find("shared_expert.down_proj") != std::string::npos) std::fill(without.at(p), without.at(p) + p.numel, 0.0f);
  EXPECT_GT(std::abs(cpu::full_sequence_reference(m, without, tokens).loss - cpu::full_sequence_reference(m, w, tokens).loss),
            1e-5);
}

// The catalog's test model, as `oomb run --model tiny-moe` runs it.
TEST(Moe, TheCatalogsTinyMoeEqualsFullSequence) {
  const models::ModelSpec m = models::load_model("tiny-moe");
  ASSERT_TRUE(m.moe.present());
  const step::Config c = test::small_config(96, 32, 16, 1);
  const Weights w = random_weights(m, 99, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, c.context_tokens);
  expect_step_equals_reference(m, c, w, tokens);
}

// The load-balancing auxiliary loss (--router-aux-loss): its shares are stage 1's routing of every
// layer, held constant as the one-hot top-k is, so the chunk-recurrent step's loss and gradients
// equal the reference's, which computes it from its definition over the whole sequence at once. It
// moves the loss by coef x aux and every gradient upstream of a router, none past the last one.
TEST(Moe, LoadBalancingLossEqualsItsDefinition) {
  const MoeCase k{"aux", 6, 2, 16, {1}, models::Routing::softmax_topk, 64, 16, 8, 1};
  const models::ModelSpec m = moe_model(k);
  const Weights w = random_weights(m, 77, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, k.N);
  auto run = [&](double coef) {
    step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
    c.router_aux_loss_coef = coef;
    CpuBackend backend;
    Engine e(backend, m, c, w);
    const double loss = e.step(tokens).loss;
    return std::pair{loss, e.gradients()};
  };
  const double coef = 0.5;
  const auto [loss, g] = run(coef);
  const auto [plain_loss, plain] = run(0);
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens, nullptr, nullptr, coef);
  EXPECT_NEAR(loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(g, ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  // aux >= k (E sum f_e P_e is k for perfectly balanced routing and more otherwise; the shares sum to k).
  EXPECT_GE((loss - plain_loss) / coef, 2.0 - 1e-6);
  for (const auto& p : g.layout.params()) {
    const double d = relative_l2(g.at(p), plain.at(p), p.numel);
    if (p.name.find(".gate.weight") != std::string::npos) {
      EXPECT_GT(d, 1e-4) << p.name;  // the routers feel it
    } else if (p.name.find("layers.2.mlp.experts.") != std::string::npos || p.name == "model.norm.weight" ||
               p.name == "lm_head.weight") {
      EXPECT_EQ(d, 0) << p.name;  // past the last router: the loss term does not reach them
    }
  }
}

// LoRA on the attention with the experts frozen (what the planner suggests for a MoE model that
// does not fit): the adapters' gradients are the reference's, and no base weight moves.
TEST(Moe, LoraOnTheAttentionWithFrozenExperts) {
  const MoeCase k{"lora", 8, 2, 24, {0}, models::Routing::softmax_topk, 64, 16, 8, 1};
  const models::ModelSpec m = moe_model(k);
  step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
  c.lora_rank = 4;
  c.lora_alpha = 8;
  c.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  const Weights w = random_weights(m, 1234, kInitStd);
  EngineOptions o;
  o.adapters = init_adapters(m, c, 99, 0.2f);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  CpuBackend backend;
  Engine e(backend, m, c, w, o);
  const double loss = e.step(tokens).loss;
  const Gradients g = e.gradients();
  ASSERT_TRUE(g.layout.is_lora());
  const cpu::ReferenceResult ref = cpu::lora_reference(m, w, o.adapters, 2.0, tokens);
  EXPECT_NEAR(loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(g, ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  // With AdamW (which zeroes the gradients after its update): the adapters move, the base not.
  c.optimizer = step::Optimizer::gpu;
  Engine trained(backend, m, c, w, o);
  trained.step(tokens);
  EXPECT_EQ(trained.weights().data, w.data) << "a frozen base weight moved";
  EXPECT_NE(trained.adapters().data, o.adapters.data) << "the adapters did not train";
}

// Full fine-tuning with AdamW updates both weight rows (the experts' and the rest) and only them.
TEST(Moe, AdamWUpdatesTheExpertsAndTheRest) {
  const MoeCase k{"adamw", 4, 2, 16, {}, models::Routing::softmax_topk, 32, 16, 8, 64};
  const models::ModelSpec m = moe_model(k);
  step::Config c = test::small_config(k.N, k.C, k.p, k.resident);
  c.optimizer = step::Optimizer::gpu;
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  CpuBackend backend;
  Engine e(backend, m, c, w);
  e.step(tokens);
  const Weights after = e.weights();
  const ParamLayout& L = after.layout;
  ASSERT_LT(L.experts_begin(), L.total());
  int64_t moved_before = 0, moved_experts = 0;
  for (int64_t i = 0; i < L.total(); ++i)
    if (after.data[static_cast<size_t>(i)] != w.data[static_cast<size_t>(i)])
      ++(i < L.experts_begin() ? moved_before : moved_experts);
  EXPECT_GT(moved_before, L.experts_begin() / 2);
  EXPECT_GT(moved_experts, (L.total() - L.experts_begin()) / 2);
}

// AdamW's state on the host (the round trip: gradients out, the two weight rows in) updates as on
// the device, bit for bit, over two steps; bf16 working weights from fp32 master weights too.
TEST(Moe, AdamWOnTheHostEqualsOnTheDevice) {
  const models::ModelSpec m = models::load_model("tiny-moe");
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, 48);
  for (const Dtype storage : {Dtype::fp32, Dtype::bf16}) {
    std::vector<float> after[2];
    for (const step::Optimizer where : {step::Optimizer::gpu, step::Optimizer::host}) {
      step::Config c = test::small_config(48, 16, 8, 1);
      c.param_dtype = c.activation_dtype = storage;
      c.optimizer = where;
      CpuBackend backend;
      Engine e(backend, m, c, w);
      e.step(tokens);
      e.step(tokens);
      after[where == step::Optimizer::host] = e.weights().data;
    }
    EXPECT_EQ(after[1], after[0]) << to_string(storage);
    EXPECT_NE(after[0], w.data) << to_string(storage);
  }
}

// The layout: Hugging Face's names (Qwen3-MoE's, Mixtral's), the routed experts after every other
// tensor, and a checkpoint that round-trips through safetensors.
TEST(Moe, LayoutNamesAndSafetensorsRoundTrip) {
  const models::ModelSpec q = models::load_model("tiny-moe");
  const ParamLayout L(q);
  EXPECT_EQ(L.total(), q.param_count());
  EXPECT_TRUE(L.find("model.layers.0.mlp.gate_proj.weight"));  // the dense first layer
  EXPECT_TRUE(L.find("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(L.find("model.layers.2.mlp.experts.7.down_proj.weight"));
  EXPECT_FALSE(L.find("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_EQ(L.find("model.layers.1.mlp.experts.0.gate_proj.weight")->offset, L.experts_begin());
  EXPECT_EQ(L.total() - L.experts_begin(), q.routed_expert_params());
  models::ModelSpec mx = q;
  mx.family = "mixtral";
  const ParamLayout X(mx);
  EXPECT_TRUE(X.find("model.layers.1.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(X.find("model.layers.1.block_sparse_moe.experts.3.w2.weight"));
  const Weights w = random_weights(q, 5);
  const std::string path = ::testing::TempDir() + "/tiny-moe.safetensors";
  write_safetensors(w, path);
  EXPECT_EQ(read_safetensors(path, q).data, w.data);
}

// bf16 storage (weights, gradients, activations, pages; the router's logits and routes fp32) against
// the fp32 reference on the same bf16-rounded weights, within storage_test.cpp's bf16 bounds (5e-2
// on the worst gradient, 5e-3 on the loss: each stored tensor rounded once per op). The routing is
// discrete: here bf16's rounding moves a token of layer 1 between experts 3 and 5 (their gradients
// 12-24% from a reference that routes by its own fp32 logits), so the reference routes as the run
// did (Engine::routes(), as a sparse run's selection is held): worst 2.9e-2, loss 1.9e-4 (printed).
TEST(Moe, Bf16StorageNearTheFullSequence) {
  const models::ModelSpec m = models::load_model("tiny-moe");
  step::Config c = test::small_config(64, 16, 8, 1);
  c.param_dtype = c.param_grad_dtype = c.activation_dtype = c.loss_dtype = c.kv_dtype = c.kv_grad_dtype = Dtype::bf16;
  Weights w = random_weights(m, 1234, kInitStd);
  std::vector<uint16_t> h(w.data.size());
  f32_to_bf16(w.data.data(), h.data(), static_cast<int64_t>(h.size()));
  bf16_to_f32(h.data(), w.data.data(), static_cast<int64_t>(h.size()));
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, c.context_tokens);
  CpuBackend b16, b32;
  EngineOptions o;
  o.record_routes = true;
  Engine e16(b16, m, c, w, o);
  const double loss16 = e16.step(tokens).loss;
  Engine e32(b32, m, test::small_config(64, 16, 8, 1), w);
  e32.step(tokens);
  ASSERT_EQ(e16.routes().size(), 3u);
  EXPECT_TRUE(e16.routes()[0].empty());  // the dense first layer
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens, nullptr, &e16.routes());
  EXPECT_NEAR(loss16, ref.loss, 5e-3 * ref.loss);
  // The reference routing by its own logits is this seed's flip: the test would fail without routes.
  const cpu::ReferenceResult own = cpu::full_sequence_reference(m, w, tokens);
  EXPECT_GT(worst_relative_l2(e16.gradients(), own.grads).rel_l2, 0.1);
  const WorstTensor worst = worst_relative_l2(e16.gradients(), ref.grads);
  std::printf("MoE bf16 storage: loss rel %.2e, worst gradient rel L2 %.2e (%s)\n", std::abs(loss16 - ref.loss) / ref.loss,
              worst.rel_l2, worst.name.c_str());
  EXPECT_LE(worst.rel_l2, 5e-2) << worst.name;
  EXPECT_GE(worst_relative_l2(e16.gradients(), e32.gradients()).rel_l2, 1e-4) << "bf16 was not stored";
  // The routed experts' row is bf16 too (half its fp32 twin), and reads back as the weights given.
  auto row_bytes = [](const Measured& me, const std::string& row) {
    const auto it = me.device_breakdown_bytes.find(row);
    return it == me.device_breakdown_bytes.end() ? int64_t{-1} : it->second;
  };
  EXPECT_EQ(e16.weights().data, w.data);
  EXPECT_GT(row_bytes(e16.measured(), "weights"), 0);
  EXPECT_EQ(2 * row_bytes(e16.measured(), "weights"), row_bytes(e32.measured(), "weights"));
}

// What runs: one process, the AdamW state on the device, on either backend; the rest refused by its key.
TEST(Moe, CapabilityNamesWhatItDoesNotRun) {
  const models::ModelSpec m = models::load_model("tiny-moe");
  const step::Config c = test::small_config(64, 16, 8, 1);
  EXPECT_TRUE(step::capability(m, c, {}).executable());
  step::Target cuda;
  cuda.backend = step::BackendKind::cuda;
  EXPECT_TRUE(step::capability(m, c, cuda).executable());
  step::Config bf = c;
  bf.param_dtype = bf.activation_dtype = Dtype::bf16;
  EXPECT_TRUE(step::capability(m, bf, {}).executable());
  step::Config dp = c;
  dp.data_parallel = 2;
  EXPECT_EQ(step::capability(m, dp, {}).key, "data_parallel");
  step::Config tp = c;
  tp.gpus = 2;
  EXPECT_EQ(step::capability(m, tp, {}).key, "gpus");
  step::Config host = c;
  host.optimizer = step::Optimizer::host;
  EXPECT_TRUE(step::capability(m, host, {}).executable());
  models::ModelSpec shared = m;  // shared experts run (SharedExpertsEqualFullSequence)
  shared.moe.shared_experts = 1;
  shared.moe.shared_ffn_hidden = 32;
  EXPECT_TRUE(step::capability(shared, c, {}).executable());
  models::ModelSpec sigmoid = m;
  sigmoid.moe.routing = models::Routing::sigmoid_topk;
  EXPECT_EQ(step::capability(sigmoid, c, {}).key, "model");
  // The Engine refuses what the capability refuses, before it allocates.
  CpuBackend backend;
  EXPECT_THROW(Engine(backend, m, dp, random_weights(m, 1)), Error);
}

}  // namespace
}  // namespace oomb::executor
