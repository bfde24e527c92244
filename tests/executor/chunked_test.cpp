// The central property (ALGORITHM.md section 2): the chunk-recurrent step with paged KV and
// KV-gradient pages gives the full-sequence loss and gradients; offload changes nothing; sparse
// mode gives the exact gradient of the sparse forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

// fp32, different summation orders (chunks, pages, blocked attention) against the reference.
constexpr double kGradRelTol = 1e-5;
constexpr double kLossRelTol = 1e-6;
// A sparse selection that drops pages must move the gradient by far more than rounding.
constexpr double kSparseDiffersMin = 1e-3;
constexpr float kInitStd = 0.1f;  // large enough for non-uniform attention in small models

struct RunOut {
  double loss = 0;
  Gradients grads;
  SelectionLog log;
  Measured measured;
};

RunOut run(const models::ModelSpec& m, const step::Config& c, const Weights& w, const std::vector<int32_t>& t) {
  CpuBackend backend;
  Engine e(backend, m, c, w);
  RunOut r;
  r.loss = e.step(t).loss;
  r.grads = e.gradients();
  r.log = e.selections();
  r.measured = e.measured();
  return r;
}

// The chunked step against the full-sequence reference: the loss and every gradient.
struct Checked {
  RunOut run;
  cpu::ReferenceResult ref;
};
Checked expect_equals_reference(const models::ModelSpec& m, const step::Config& c, const Weights& w,
                                const std::vector<int32_t>& t) {
  Checked out{run(m, c, w, t), cpu::full_sequence_reference(m, w, t)};
  EXPECT_NEAR(out.run.loss, out.ref.loss, kLossRelTol * out.ref.loss);
  const auto [err, name] = worst_relative_l2(out.run.grads, out.ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  return out;
}

struct DenseCase {
  const char* name;
  int64_t layers, q_heads, kv_heads, head_dim, hidden;
  bool tied, bias;
  int64_t N, C, p;
};

void PrintTo(const DenseCase& k, std::ostream* os) {
  *os << k.name << " (L " << k.layers << ", heads " << k.q_heads << "/" << k.kv_heads << ", N " << k.N << ", C " << k.C
      << ", p " << k.p << ")";
}

class DenseEqualsFullSequence : public ::testing::TestWithParam<DenseCase> {};

TEST_P(DenseEqualsFullSequence, LossAndEveryParameterGradient) {
  const DenseCase k = GetParam();
  const auto m = test::small_model(k.layers, k.q_heads, k.kv_heads, k.head_dim, k.hidden, k.tied, k.bias);
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  const cpu::ReferenceResult ref = expect_equals_reference(m, test::small_config(k.N, k.C, k.p, 64), w, tokens).ref;
  // The test can fail: the gradient is not trivially zero.
  EXPECT_GT(relative_l2(ref.grads.data.data(), std::vector<float>(ref.grads.data.size(), 0.0f).data(),
                        static_cast<int64_t>(ref.grads.data.size())),
            0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DenseEqualsFullSequence,
    ::testing::Values(
        // name, L, q, kv, hd, hidden, tied, bias, N, C, p
        DenseCase{"gqa1_ragged_chunk_and_page", 2, 2, 2, 16, 32, false, true, 37, 16, 8},
        DenseCase{"gqa2_many_chunks_tied", 3, 4, 2, 8, 32, true, false, 64, 16, 4},
        DenseCase{"gqa7_ragged_single_page", 1, 7, 1, 8, 56, false, true, 17, 8, 8},
        DenseCase{"single_chunk", 2, 4, 2, 8, 32, false, false, 20, 32, 8},
        DenseCase{"four_layers_ragged", 4, 4, 1, 8, 32, true, true, 33, 8, 4},
        DenseCase{"two_tokens", 2, 2, 1, 8, 32, false, true, 2, 8, 4}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

// A RoPE scaling of `scaled` (plain: the same small Llama with plain RoPE) on 37 tokens: the chunked
// step with and without it equals the full-sequence reference, and the scaling moves the loss by more
// than loss_factor x the chunked-vs-reference tolerance and the gradients by 100x theirs (it is
// applied, not ignored).
void expect_scaling_applied(const models::ModelSpec& plain, const models::ModelSpec& scaled, double loss_factor) {
  const Weights w = random_weights(plain, 4321, kInitStd);
  const int64_t N = 37;
  const auto tokens = TokenSource::synthetic(plain.vocab, 11).sequence(0, N);
  const RunOut r = expect_equals_reference(scaled, test::small_config(N, 16, 8, 64), w, tokens).run;
  const RunOut p = expect_equals_reference(plain, test::small_config(N, 16, 8, 64), w, tokens).run;
  EXPECT_GT(std::fabs(r.loss - p.loss), loss_factor * kLossRelTol * p.loss) << r.loss << " vs " << p.loss;
  EXPECT_GT(relative_l2(r.grads.data.data(), p.grads.data.data(), static_cast<int64_t>(p.grads.data.size())),
            1e2 * kGradRelTol);
}

models::ModelSpec small_llama() {
  auto m = test::small_model(2, 4, 2, 8, 32, false, false);
  m.family = "llama";
  return m;
}

// ---- Llama 3.1 rope_scaling (rope_type llama3), scaled so that a 37-token sequence sees it: with
// head_dim 8 and theta 1e4 the wavelengths are 6.3, 63, 628, 6283 tokens against original 64 / 4
// and 64 / 1, so one frequency is kept, one interpolated and two divided by 8.
TEST(RopeScaling, Llama3ChunkedEqualsFullSequenceAndDiffersFromPlainRope) {
  auto scaled = small_llama();
  scaled.rope_scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  ASSERT_TRUE(models::rope_of(scaled).llama3());
  expect_scaling_applied(small_llama(), scaled, 1e3);
}

// Linear scaling (position interpolation; Gemma 3's global layers, long-context Llama 2 fine-tunes):
// every frequency divided by the factor (here 4). The small model's 37 positions turn slowly at
// this theta, so the loss moves by 4e-4 of itself: 100x the tolerance.
TEST(RopeScaling, LinearChunkedEqualsFullSequenceAndDiffersFromPlainRope) {
  auto scaled = small_llama();
  scaled.rope_scaling = {{"rope_type", "linear"}, {"factor", 4.0}};
  const models::Rope r = models::rope_of(scaled);
  ASSERT_TRUE(r.linear);
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_DOUBLE_EQ(models::rope_inv_freq(r, i, 8), models::rope_inv_freq(models::rope_of(small_llama()), i, 8) / 4.0);
  expect_scaling_applied(small_llama(), scaled, 1e2);
}

// GeGLU (Gemma's MLP, models::Mlp::geglu_tanh) on a dense model: the chunked step with offload
// equals the full-sequence reference, and the activation is applied (the loss differs from SwiGLU's).
TEST(GatedMlp, GegluChunkedEqualsFullSequenceAndDiffersFromSwiglu) {
  auto geglu = small_llama();
  geglu.mlp = models::Mlp::geglu_tanh;
  const Weights w = random_weights(geglu, 4321, 0.2f);
  const int64_t N = 45;
  const auto tokens = TokenSource::synthetic(geglu.vocab, 11).sequence(0, N);
  const RunOut g = expect_equals_reference(geglu, test::small_config(N, 16, 8, 1), w, tokens).run;
  const RunOut s = expect_equals_reference(small_llama(), test::small_config(N, 16, 8, 1), w, tokens).run;
  EXPECT_GT(std::fabs(g.loss - s.loss), 1e2 * kLossRelTol * s.loss) << g.loss << " vs " << s.loss;
}

// Sandwich norms (Gemma: the attention's and the MLP's outputs normalised before their residual
// adds; post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm): the
// chunked step with offload, and with the last layer kept, equals the full-sequence reference, with
// norm weights away from 1 so that a wrong one shows; the norms get gradients and move the loss.
TEST(SandwichNorms, ChunkedEqualsFullSequence) {
  auto m = small_llama();
  m.sandwich_norms = true;
  m.mlp = models::Mlp::geglu_tanh;
  Weights w = random_weights(m, 4321, 0.2f);
  EXPECT_EQ(w.layout.total(), m.param_count());
  uint64_t seed = 50;
  int64_t norms = 0;
  for (const char* name : {"post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"})
    for (int64_t l = 0; l < m.layers; ++l) {
      const ParamInfo* p = w.layout.find("model.layers." + std::to_string(l) + "." + name + ".weight");
      ASSERT_NE(p, nullptr) << name;
      const std::vector<float> r = test::random_vec(static_cast<size_t>(p->numel), ++seed, 0.5f);
      for (int64_t i = 0; i < p->numel; ++i) w.at(*p)[i] = 1.0f + r[static_cast<size_t>(i)];
      ++norms;
    }
  EXPECT_EQ(norms, 3 * m.layers);
  const int64_t N = 45;
  const auto tokens = TokenSource::synthetic(m.vocab, 11).sequence(0, N);
  step::Config c = test::small_config(N, 16, 8, 1);
  const RunOut s = expect_equals_reference(m, c, w, tokens).run;
  c.kept_layers = 1;
  expect_equals_reference(m, c, w, tokens);
  for (const char* name : {"model.layers.0.post_attention_layernorm.weight", "model.layers.1.post_feedforward_layernorm.weight"}) {
    const ParamInfo* p = s.grads.layout.find(name);
    ASSERT_NE(p, nullptr);
    const std::vector<float> zero(static_cast<size_t>(p->numel), 0.0f);
    EXPECT_GT(relative_l2(s.grads.at(*p), zero.data(), p->numel), 0) << name;
  }
  // The MLP output's norm doubled: each layer's MLP adds twice as much, and the loss moves.
  Weights doubled = w;
  for (int64_t l = 0; l < m.layers; ++l) {
    const ParamInfo* p = doubled.layout.find("model.layers." + std::to_string(l) + ".post_feedforward_layernorm.weight");
    for (int64_t i = 0; i < p->numel; ++i) doubled.at(*p)[i] *= 2.0f;
  }
  EXPECT_GT(std::fabs(cpu::full_sequence_reference(m, doubled, tokens).loss - s.loss), 1e2 * kLossRelTol * s.loss);
}

// YaRN (Qwen3 at 128K, gpt-oss), with an original length of 16 so that a 37-token sequence sees
// it: the chunked step equals the full-sequence reference with the scaled frequencies and the
// attention factor, and the scaling changes the loss.
TEST(RopeScaling, YarnChunkedEqualsFullSequenceAndDiffersFromPlainRope) {
  auto plain = test::small_model(2, 4, 2, 8, 32, false, false);
  plain.family = "qwen3";
  auto scaled = plain;
  scaled.rope_scaling = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 16}};
  ASSERT_TRUE(models::rope_of(scaled).yarn());
  const Weights w = random_weights(plain, 4321, kInitStd);
  const int64_t N = 37;
  const auto tokens = TokenSource::synthetic(plain.vocab, 11).sequence(0, N);
  const RunOut r = expect_equals_reference(scaled, test::small_config(N, 16, 8, 1), w, tokens).run;
  const cpu::ReferenceResult pref = cpu::full_sequence_reference(plain, w, tokens);
  // A hundred times the chunked-vs-reference tolerance (small random weights keep the attention
  // near uniform, so any RoPE moves the loss little), and every gradient moves.
  EXPECT_GT(std::fabs(r.loss - pref.loss), 1e2 * kLossRelTol * pref.loss) << r.loss << " vs " << pref.loss;
  EXPECT_GT(relative_l2(r.grads.data.data(), pref.grads.data.data(), static_cast<int64_t>(pref.grads.data.size())),
            1e2 * kGradRelTol);
  // The attention factor alone (frequencies unchanged: factor 1 keeps every one) moves the loss too.
  auto scale_only = plain;
  scale_only.rope_scaling = {{"rope_type", "yarn"}, {"factor", 1.0}, {"attention_factor", 1.5},
                             {"original_max_position_embeddings", 16}};
  EXPECT_GT(std::fabs(cpu::full_sequence_reference(scale_only, w, tokens).loss - pref.loss), 1e2 * kLossRelTol * pref.loss);
}

// ---- the LM head and loss in row tiles (config logits_chunk_tokens): the same loss and gradients
// as the whole chunk at once (only dW's summation order changes), and the fp32 logits buffer is
// [tile, vocab] instead of [chunk, vocab].
TEST(LogitsTiles, RaggedTilesGiveTheFullSequenceGradientsWithATileSizedBuffer) {
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 99, kInitStd);
  const int64_t N = 37, C = 16, tile = 5;  // tiles of 5, 5, 5, 1 rows per chunk (ragged)
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, N);
  const RunOut whole = run(m, test::small_config(N, C, 8, 64), w, tokens);
  auto c = test::small_config(N, C, 8, 64);
  c.logits_chunk_tokens = tile;
  const RunOut tiled = run(m, c, w, tokens);
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  EXPECT_NEAR(tiled.loss, ref.loss, kLossRelTol * ref.loss);
  EXPECT_NEAR(tiled.loss, whole.loss, kLossRelTol * whole.loss);
  const auto [err, name] = worst_relative_l2(tiled.grads, ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  // The loss path's buffers (rows of the executor's buffer table, alive in the loss phase only):
  // whole chunk unfused = fp32 logits [C, vocab] + a separate gradient [C, vocab] (the framework
  // path); tiled = one fp32 [tile, vocab] buffer, the gradient in place.
  auto row = [](const Measured& me, const std::string& row_name) -> int64_t {
    for (const auto& b : me.buffers)
      if (b.name == row_name) return b.bytes;
    return -1;
  };
  EXPECT_EQ(row(whole.measured, "logits"), C * m.vocab * 4);
  EXPECT_EQ(row(whole.measured, "logits_gradient"), C * m.vocab * 4);
  EXPECT_EQ(row(tiled.measured, "logits"), tile * m.vocab * 4);
  EXPECT_EQ(row(tiled.measured, "logits_gradient"), -1);
}

// ---- bf16 page storage (kv_dtype / kv_grad_dtype "bf16")
//
// Tolerance: a bf16 store keeps 8 significant bits (7 stored), so it rounds with a relative error
// of at most 2^-8 = 3.9e-3 (half the 2^-7 spacing), about 2^-8 / sqrt(3) = 2.3e-3 RMS at worst.
// Only the pages are rounded: the prefix K/V the attention reads (the own chunk's K/V stay fp32),
// and with bf16 gradient pages the accumulated dK/dV, rounded once by each chunk that adds into
// them, so at most n - 1 roundings compound (n <= 5 chunks here): (n - 1) 2^-8 = 1.6e-2 if they all
// aligned, about sqrt(n - 1) 2.3e-3 = 4.6e-3 when independent. The attention, the layers and the
// backward carry that through with O(1) gains; 2e-2 (~5 x 2^-8) bounds it with margin and is still
// 2000 x the fp32 tolerance above (measured: 1.8e-3 .. 3.3e-3). The loss sums N - 1 token losses
// whose rounding errors largely cancel: 1e-3 (measured <= 3e-5).
constexpr double kBf16GradRelTol = 2e-2;
constexpr double kBf16LossRelTol = 1e-3;
// The bf16 run must differ from the fp32 run by far more than fp32 summation order does (the
// fp32 runs agree with the reference to ~1e-7): proof that bf16 values were stored and read.
constexpr double kBf16DiffersMin = 1e-4;

class Bf16PagesNearFullSequence : public ::testing::TestWithParam<DenseCase> {};

TEST_P(Bf16PagesNearFullSequence, LossAndEveryParameterGradient) {
  const DenseCase k = GetParam();
  const auto m = test::small_model(k.layers, k.q_heads, k.kv_heads, k.head_dim, k.hidden, k.tied, k.bias);
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  const auto base = test::small_config(k.N, k.C, k.p, 64);
  const RunOut fp32 = run(m, base, w, tokens);
  const RunOut kv = run(m, test::with_pages(base, Dtype::bf16, Dtype::fp32), w, tokens);
  const RunOut both = run(m, test::with_pages(base, Dtype::bf16, Dtype::bf16), w, tokens);
  EXPECT_EQ(kv.measured.kv_page_bytes * 2, fp32.measured.kv_page_bytes);
  EXPECT_EQ(kv.measured.grad_page_bytes, fp32.measured.grad_page_bytes);
  EXPECT_EQ(both.measured.grad_page_bytes * 2, fp32.measured.grad_page_bytes);
  for (const auto* r : {&kv, &both}) {
    const char* what = r == &kv ? "bf16 KV pages" : "bf16 KV and gradient pages";
    EXPECT_NEAR(r->loss, ref.loss, kBf16LossRelTol * ref.loss) << what;
    const auto [err, name] = worst_relative_l2(r->grads, ref.grads);
    EXPECT_LE(err, kBf16GradRelTol) << what << ", worst tensor " << name;
    const double vs_fp32 = worst_relative_l2(r->grads, fp32.grads).rel_l2;
    EXPECT_GT(vs_fp32, kBf16DiffersMin) << what << ": no different from fp32 pages";
    std::printf("[bf16 pages] %s, %s: loss rel. error %.2e, max gradient rel. L2 error %.2e (%s), %.2e from the "
                "fp32-page run\n",
                k.name, what, std::abs(r->loss - ref.loss) / ref.loss, err, name.c_str(), vs_fp32);
  }
  // bf16 gradient pages are rounded too: the two bf16 runs differ.
  EXPECT_GT(worst_relative_l2(both.grads, kv.grads).rel_l2, kBf16DiffersMin);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Bf16PagesNearFullSequence,
    ::testing::Values(
        // Several chunks each, so that earlier pages are read (a single chunk reads none).
        DenseCase{"gqa1_ragged_chunk_and_page", 2, 2, 2, 16, 32, false, true, 37, 16, 8},
        DenseCase{"gqa2_many_chunks_tied", 3, 4, 2, 8, 32, true, false, 64, 16, 4},
        DenseCase{"gqa7_ragged_single_page", 1, 7, 1, 8, 56, false, true, 17, 8, 8},
        DenseCase{"four_layers_ragged", 4, 4, 1, 8, 32, true, true, 33, 8, 4}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Offload, Bf16PagesWithResidentOneAndTwoAreBitIdenticalToNoOffload) {
  const auto m = test::small_model(3, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 99, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, 45);
  for (Dtype grads : {Dtype::fp32, Dtype::bf16}) {
    const RunOut off = run(m, test::with_pages(test::small_config(45, 16, 4, 3), Dtype::bf16, grads), w, tokens);
    for (int64_t r : {1, 2}) {
      const RunOut on = run(m, test::with_pages(test::small_config(45, 16, 4, r), Dtype::bf16, grads), w, tokens);
      EXPECT_GT(on.measured.h2d_bytes, 0);
      EXPECT_EQ(on.loss, off.loss);
      ASSERT_EQ(on.grads.data.size(), off.grads.data.size());
      EXPECT_EQ(std::memcmp(on.grads.data.data(), off.grads.data.data(), off.grads.data.size() * 4), 0)
          << "resident " << r << ", gradient pages " << grads;
    }
  }
}

TEST(Offload, ResidentOneAndTwoAreBitIdenticalToNoOffload) {
  const auto m = test::small_model(3, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 99, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, 45);
  const RunOut off = run(m, test::small_config(45, 16, 4, 3), w, tokens);
  EXPECT_EQ(off.measured.h2d_bytes, 0);
  for (int64_t r : {1, 2}) {
    const RunOut on = run(m, test::small_config(45, 16, 4, r), w, tokens);
    EXPECT_GT(on.measured.h2d_bytes, 0);
    EXPECT_EQ(on.loss, off.loss);
    ASSERT_EQ(on.grads.data.size(), off.grads.data.size());
    EXPECT_EQ(std::memcmp(on.grads.data.data(), off.grads.data.data(), off.grads.data.size() * 4), 0)
        << "resident " << r;
  }
}

step::Config sparse_config(int64_t N, int64_t C, int64_t p, int64_t budget, int64_t resident,
                                const char* rule = "published") {
  auto c = test::small_config(N, C, p, resident);
  c.attention = step::Attention::sparse;
  c.page_budget = budget;
  c.selection = rule;
  return c;
}

TEST(Sparse, BudgetCoveringAllPagesEqualsDense) {
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 5, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, 64);
  const RunOut dense = run(m, test::small_config(64, 16, 4, 8), w, tokens);
  const RunOut sparse = run(m, sparse_config(64, 16, 4, 16, 8), w, tokens);
  EXPECT_EQ(sparse.loss, dense.loss);
  EXPECT_EQ(std::memcmp(sparse.grads.data.data(), dense.grads.data.data(), dense.grads.data.size() * 4), 0);
}

TEST(Sparse, Bf16PagesBudgetCoveringAllPagesEqualsDense) {
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 5, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, 64);
  const RunOut dense = run(m, test::with_pages(test::small_config(64, 16, 4, 8), Dtype::bf16, Dtype::bf16), w, tokens);
  const RunOut sparse = run(m, test::with_pages(sparse_config(64, 16, 4, 16, 8), Dtype::bf16, Dtype::bf16), w, tokens);
  EXPECT_EQ(sparse.loss, dense.loss);
  EXPECT_EQ(std::memcmp(sparse.grads.data.data(), dense.grads.data.data(), dense.grads.data.size() * 4), 0);
}

void check_small_budget(const char* rule, int64_t resident, int64_t layers = 2) {
  const auto m = test::small_model(layers, 4, 2, 8, 32, true, true);
  const int64_t N = 64, C = 16, p = 4, B = 2;
  const Weights w = random_weights(m, 6, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 6).sequence(0, N);
  const RunOut dense = run(m, test::small_config(N, C, p, 8), w, tokens);
  const RunOut sparse = run(m, sparse_config(N, C, p, B, resident, rule), w, tokens);
  EXPECT_GT(worst_relative_l2(sparse.grads, dense.grads).rel_l2, kSparseDiffersMin) << "dropping pages must matter";

  // The reference with the recorded selection as a mask: the exact gradient of the sparse forward.
  std::vector<cpu::MaskedAttention> masks;
  for (int64_t l = 0; l < m.layers; ++l) masks.push_back(cpu::selection_mask(m, N, C, p, sparse.log, l));
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens, &masks);
  EXPECT_NEAR(sparse.loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(sparse.grads, ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;

  // Union sizes: chunks with more than B earlier pages select; the union is bounded by q * B.
  for (const UnionSize& u : sparse.measured.union_pages) {
    const int64_t prefix = u.chunk * C / p, qpages = C / p;
    if (prefix <= B) EXPECT_EQ(u.pages, prefix);
    else {
      EXPECT_GE(u.pages, B);
      EXPECT_LE(u.pages, std::min(prefix, qpages * B * (std::string(rule) == "per-kv-head" ? m.kv_heads : 1)));
    }
  }
}

TEST(Sparse, SmallBudgetEqualsSparseReference) { check_small_budget("published", 8); }
TEST(Sparse, PerKvHeadSmallBudgetEqualsSparseReference) { check_small_budget("per-kv-head", 8); }
TEST(Sparse, SmallBudgetWithOffloadEqualsSparseReference) { check_small_budget("published", 1); }
TEST(Sparse, SmallBudgetWithPrefetchEqualsSparseReference) { check_small_budget("per-kv-head", 2, 3); }

TEST(Optimizer, AdamWOverAccumulatedStepsMatchesManualUpdate) {
  const auto m = test::small_model(1, 2, 1, 8, 16, false, true, 23, 16);
  const Weights w = random_weights(m, 8, kInitStd);
  auto src = TokenSource::synthetic(m.vocab, 8);
  auto c = test::small_config(20, 8, 4, 4);
  // Gradients of two steps without an optimizer.
  CpuBackend backend;
  Engine plain(backend, m, c, w);
  plain.step(src.sequence(0, 20));
  plain.step(src.sequence(1, 20));
  Gradients g = plain.gradients();  // sum of both
  // AdamW step on the mean, by hand.
  c.optimizer = step::Optimizer::gpu;
  EngineOptions o;
  o.adamw.grad_accum = 2;
  o.adamw.lr = 0.01f;
  Engine trained(backend, m, c, w, o);
  trained.step(src.sequence(0, 20));
  const Weights unchanged = trained.weights();
  EXPECT_EQ(std::memcmp(unchanged.data.data(), w.data.data(), w.data.size() * 4), 0) << "no update before 2 steps";
  trained.step(src.sequence(1, 20));
  const Weights after = trained.weights();
  Weights expect = w;
  std::vector<float> mm(w.data.size(), 0.0f), vv(w.data.size(), 0.0f);
  std::vector<uint8_t> decay(w.data.size(), 0);
  for (const auto& p : w.layout.params())
    if (p.decay) std::fill_n(decay.begin() + p.offset, p.numel, uint8_t{1});
  for (auto& x : g.data) x *= 0.5f;
  cpu::adamw(expect.data.data(), g.data.data(), mm.data(), vv.data(), decay.data(),
             static_cast<int64_t>(w.data.size()), o.adamw.lr, o.adamw.beta1, o.adamw.beta2, o.adamw.eps,
             o.adamw.weight_decay, 1);
  EXPECT_LE(relative_l2(after.data.data(), expect.data.data(), static_cast<int64_t>(w.data.size())), 1e-6);
  EXPECT_GT(relative_l2(after.data.data(), w.data.data(), static_cast<int64_t>(w.data.size())), 1e-4);
}

}  // namespace
}  // namespace oomb::executor
