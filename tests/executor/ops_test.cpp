// Every CPU op's backward against central finite differences (fp32 ops, f accumulated in double),
// the paged attention against the masked full-sequence attention, selection and AdamW by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "executor/cpu/flash.h"
#include "executor/cpu/ops.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

using test::dot;
using test::fd_error;
using test::random_vec;

// fp32 central differences with h = 1e-2 on O(1) inputs: truncation ~1e-4, rounding ~1e-4.
constexpr double kFdTol = 5e-3;

TEST(Ops, RmsNormBackward) {
  const int64_t rows = 3, dim = 7;
  auto x = random_vec(rows * dim, 1), w = random_vec(dim, 2, 0.3f), r = random_vec(rows * dim, 3);
  for (auto& v : w) v += 1.0f;
  std::vector<float> y(x.size()), rstd(rows);
  auto f = [&] {
    cpu::rmsnorm_fwd(x.data(), w.data(), rows, dim, 1e-6f, y.data(), rstd.data());
    return dot(y, r);
  };
  f();
  std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f);
  cpu::rmsnorm_bwd(x.data(), w.data(), rstd.data(), r.data(), rows, dim, dx.data(), dw.data());
  EXPECT_LT(fd_error(x, dx, f), kFdTol);
  EXPECT_LT(fd_error(w, dw, f), kFdTol);
  // Forward semantics: x * rsqrt(mean(x^2) + eps) * w.
  double ms = 0;
  for (int i = 0; i < dim; ++i) ms += x[i] * x[i] / dim;
  EXPECT_NEAR(y[2], x[2] / std::sqrt(ms + 1e-6) * w[2], 1e-5);
}

TEST(Ops, LinearBackward) {
  const int64_t rows = 4, in = 5, out = 3;
  auto x = random_vec(rows * in, 4), w = random_vec(out * in, 5), b = random_vec(out, 6), r = random_vec(rows * out, 7);
  std::vector<float> y(rows * out);
  auto f = [&] {
    cpu::linear_fwd(x.data(), rows, in, w.data(), b.data(), out, y.data());
    return dot(y, r);
  };
  f();
  EXPECT_NEAR(y[1 * out + 2], dot({x.begin() + in, x.begin() + 2 * in}, {w.begin() + 2 * in, w.end()}) + b[2], 1e-5);
  std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  cpu::linear_bwd(x.data(), rows, in, w.data(), out, r.data(), dx.data(), false, dw.data(), db.data());
  EXPECT_LT(fd_error(x, dx, f), kFdTol);
  EXPECT_LT(fd_error(w, dw, f), kFdTol);
  EXPECT_LT(fd_error(b, db, f), kFdTol);
}

TEST(Ops, RopeForwardAndBackward) {
  const int64_t rows = 3, heads = 2, hd = 8, pos0 = 5;
  const double theta = 10000.0;
  auto x = random_vec(rows * heads * hd, 8), r = random_vec(x.size(), 9);
  const auto x0 = x;
  std::vector<float> y;
  auto f = [&] {
    y = x;
    cpu::rope_fwd(y.data(), rows, heads, hd, pos0, theta);
    return dot(y, r);
  };
  f();
  // Rotate-half at absolute position 6 (row 1), head 1, frequency i = 1: inv_freq = theta^(-2/8).
  const double a = 6 * std::pow(theta, -2.0 / 8);
  const float* v = x0.data() + (1 * heads + 1) * hd;
  EXPECT_NEAR(y[(1 * heads + 1) * hd + 1], v[1] * std::cos(a) - v[5] * std::sin(a), 1e-5);
  EXPECT_NEAR(y[(1 * heads + 1) * hd + 5], v[5] * std::cos(a) + v[1] * std::sin(a), 1e-5);
  auto dx = r;
  cpu::rope_bwd(dx.data(), rows, heads, hd, pos0, theta);
  EXPECT_LT(fd_error(x, dx, f), kFdTol);
}

TEST(Ops, SwigluBackward) {
  const int64_t n = 13;
  auto g = random_vec(n, 10, 2.0f), u = random_vec(n, 11), r = random_vec(n, 12);
  std::vector<float> y(n);
  auto f = [&] {
    cpu::swiglu_fwd(g.data(), u.data(), n, y.data());
    return dot(y, r);
  };
  f();
  EXPECT_NEAR(y[3], g[3] / (1 + std::exp(-g[3])) * u[3], 1e-5);
  std::vector<float> dg(n), du(n);
  cpu::swiglu_bwd(g.data(), u.data(), r.data(), n, dg.data(), du.data());
  EXPECT_LT(fd_error(g, dg, f), kFdTol);
  EXPECT_LT(fd_error(u, du, f), kFdTol);
}

// gpt-oss's clamped SwiGLU (transformers' GptOssExperts): gate clamped above at the limit, up to
// [-limit, limit], out = gate sigmoid(1.702 gate) (up + 1). Values on both sides of every clamp (and
// none exactly on a bound, where the derivative jumps); central differences see the clamps' zero
// gradients.
TEST(Ops, GptOssSwigluIsItsDefinitionAndItsDerivative) {
  const int64_t n = 40;
  const float limit = 0.7f;
  auto g = random_vec(n, 20, 2.0f), u = random_vec(n, 21, 2.0f), r = random_vec(n, 22);
  for (auto* v : {&g, &u})
    for (float& x : *v)
      if (std::abs(std::abs(x) - limit) < 0.02f) x += 0.05f;
  int64_t clamped_g = 0, clamped_u = 0;
  for (int64_t i = 0; i < n; ++i) clamped_g += g[i] > limit, clamped_u += std::abs(u[i]) > limit;
  ASSERT_GT(clamped_g, 0);
  ASSERT_GT(clamped_u, 0);
  ASSERT_LT(clamped_g, n);
  std::vector<float> y(n);
  auto f = [&] {
    cpu::swiglu_fwd(g.data(), u.data(), n, y.data(), limit);
    return dot(y, r);
  };
  f();
  for (int64_t i = 0; i < n; ++i) {
    const double gc = std::min(double{g[i]}, double{limit}), uc = std::clamp(double{u[i]}, -double{limit}, double{limit});
    EXPECT_NEAR(y[i], gc / (1 + std::exp(-1.702 * gc)) * (uc + 1), 1e-5) << i;
  }
  std::vector<float> dg(n), du(n);
  cpu::swiglu_bwd(g.data(), u.data(), r.data(), n, dg.data(), du.data(), limit);
  EXPECT_LT(fd_error(g, dg, f), kFdTol);
  EXPECT_LT(fd_error(u, du, f), kFdTol);
  for (int64_t i = 0; i < n; ++i) {
    if (g[i] > limit) EXPECT_EQ(dg[i], 0.0f) << i;
    if (std::abs(u[i]) > limit) EXPECT_EQ(du[i], 0.0f) << i;
  }
}

// GeGLU (Gemma's MLP): gelu_tanh(gate) * up against PyTorch's formula in double, and its backward
// against central differences.
TEST(Ops, GegluIsItsDefinitionAndItsDerivative) {
  const int64_t n = 40;
  const auto g = random_vec(n, 23, 3.0f), u = random_vec(n, 24, 2.0f), r = random_vec(n, 25);
  auto gv = g, uv = u;
  std::vector<float> y(n);
  auto f = [&] {
    cpu::geglu_fwd(gv.data(), uv.data(), n, y.data());
    return dot(y, r);
  };
  f();
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i], c = std::sqrt(2.0 / 3.14159265358979323846);
    EXPECT_NEAR(y[i], 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x))) * u[i], 1e-5) << i;
  }
  std::vector<float> dg(n), du(n);
  cpu::geglu_bwd(g.data(), u.data(), r.data(), n, dg.data(), du.data());
  EXPECT_LT(fd_error(gv, dg, f), kFdTol);
  EXPECT_LT(fd_error(uv, du, f), kFdTol);
}

TEST(Ops, CrossEntropyBackward) {
  const int64_t rows = 4, vocab = 9;
  auto logits = random_vec(rows * vocab, 13, 2.0f);
  const std::vector<int32_t> targets = {3, -1, 0, 8};
  const float scale = 0.25f;
  auto f = [&] {
    auto l = logits;
    return scale * cpu::cross_entropy(l.data(), rows, vocab, targets.data(), scale);
  };
  // Row 0 by hand: logsumexp - logit[target].
  double se = 0;
  for (int i = 0; i < vocab; ++i) se += std::exp(static_cast<double>(logits[i]));
  auto l0 = logits;
  EXPECT_NEAR(cpu::cross_entropy(l0.data(), 1, vocab, targets.data(), 1.0f), std::log(se) - logits[3], 1e-5);
  auto l = logits;
  cpu::cross_entropy(l.data(), rows, vocab, targets.data(), scale);
  for (int i = 0; i < vocab; ++i) EXPECT_EQ(l[vocab + i], 0.0f) << "rows without a target have no gradient";
  EXPECT_LT(fd_error(logits, l, f), kFdTol);
}

// A target logit 200 below the row's max: exp(-200) underflows fp32 (and log of it would be
// -inf), but the loss is logsumexp - logit[target] = about 200, finite, and the gradient is
// softmax - onehot (the target's entry -scale, up to exp(-200)).
TEST(Ops, CrossEntropyTargetFarBelowTheMaxIsFinite) {
  const int64_t vocab = 5;
  const std::vector<float> logits = {3.0f, -197.0f, 1.0f, 0.5f, -2.0f};
  const std::vector<int32_t> target = {1};
  double se = 0;
  for (float x : logits) se += std::exp(static_cast<double>(x) - 3.0);
  const double want = 3.0 + std::log(se) - (-197.0);  // ~200.13
  auto l = logits;
  const double loss = cpu::cross_entropy(l.data(), 1, vocab, target.data(), 0.5f);
  ASSERT_TRUE(std::isfinite(loss)) << loss;
  EXPECT_NEAR(loss, want, 1e-9 * want);
  EXPECT_NEAR(l[1], -0.5f, 1e-7f);
  EXPECT_NEAR(l[0], 0.5 * std::exp(0.0) / se, 1e-6);
}

TEST(Ops, EmbeddingBackward) {
  const int64_t rows = 5, hidden = 3, vocab = 4;
  auto table = random_vec(vocab * hidden, 14), r = random_vec(rows * hidden, 15);
  const std::vector<int32_t> ids = {1, 3, 1, 0, 2};
  std::vector<float> y(rows * hidden);
  auto f = [&] {
    cpu::embedding_fwd(ids.data(), rows, table.data(), hidden, y.data());
    return dot(y, r);
  };
  f();
  std::vector<float> dt(table.size(), 0.0f);
  cpu::embedding_bwd(ids.data(), rows, r.data(), hidden, dt.data());
  EXPECT_LT(fd_error(table, dt, f), kFdTol);
}

// A chunk of T = 11 query rows (pages of p = 4: the last query page is ragged) over U = 3 earlier
// pages; GQA ratio 2.
struct AttentionCase {
  int64_t T = 11, qh = 4, kvh = 2, hd = 4, p = 4, U = 3;
  int64_t qd() const { return qh * hd; }
  int64_t kvd() const { return kvh * hd; }
  std::vector<float> q, k, v, pages;  // pages: U x [2][p][kvd]
  AttentionCase() {
    q = random_vec(T * qd(), 20);
    k = random_vec(T * kvd(), 21);
    v = random_vec(T * kvd(), 22);
    pages = random_vec(U * 2 * p * kvd(), 23);
  }
  PagedAttention args(int64_t groups, std::vector<std::vector<int32_t>> select) const {
    PagedAttention a;
    a.rows = T;
    a.q_heads = qh;
    a.kv_heads = kvh;
    a.head_dim = hd;
    a.page_tokens = p;
    a.q = q.data();
    a.k_own = k.data();
    a.v_own = v.data();
    for (int64_t u = 0; u < U; ++u) a.prefix_pages.push_back(pages.data() + u * 2 * p * kvd());
    a.select_groups = groups;
    a.select = std::move(select);
    return a;
  }
  // The same attention as a full sequence [U pages; own rows] with an explicit mask.
  cpu::MaskedAttention mask(const PagedAttention& a) const {
    const int64_t n = U * p + T;
    cpu::MaskedAttention m;
    m.n = n;
    m.q_heads = qh;
    m.kv_heads = kvh;
    m.head_dim = hd;
    m.groups = a.select_groups == 0 ? 1 : a.select_groups;
    m.allowed.assign(static_cast<size_t>(m.groups), std::vector<uint8_t>(static_cast<size_t>(n * n), 0));
    // Rows of the earlier pages (zero queries, zero output gradient) attend causally.
    for (int64_t g = 0; g < m.groups; ++g)
      for (int64_t i = 0; i < U * p; ++i)
        for (int64_t t = 0; t <= i; ++t) m.allowed[static_cast<size_t>(g)][static_cast<size_t>(i * n + t)] = 1;
    for (int64_t g = 0; g < m.groups; ++g)
      for (int64_t i = U * p; i < n; ++i) {
        const int64_t j = (i - U * p) / p;
        for (int64_t t = 0; t <= i; ++t) {
          bool ok = t >= U * p;
          if (!ok) {
            if (a.select_groups == 0) ok = true;
            else {
              const auto& s = a.select[static_cast<size_t>(j * a.select_groups + g)];
              ok = std::find(s.begin(), s.end(), static_cast<int32_t>(t / p)) != s.end();
            }
          }
          m.allowed[static_cast<size_t>(g)][static_cast<size_t>(i * n + t)] = ok;
        }
      }
    return m;
  }
  // Full-sequence K/V rows: pages then own rows.
  void full_kv(std::vector<float>& K, std::vector<float>& V) const {
    const int64_t n = U * p + T;
    K.assign(static_cast<size_t>(n * kvd()), 0.0f);
    V.assign(K.size(), 0.0f);
    for (int64_t u = 0; u < U; ++u) {
      std::copy_n(pages.data() + u * 2 * p * kvd(), p * kvd(), K.data() + u * p * kvd());
      std::copy_n(pages.data() + u * 2 * p * kvd() + p * kvd(), p * kvd(), V.data() + u * p * kvd());
    }
    std::copy(k.begin(), k.end(), K.begin() + U * p * kvd());
    std::copy(v.begin(), v.end(), V.begin() + U * p * kvd());
  }
};

void check_paged_attention(int64_t groups, std::vector<std::vector<int32_t>> select) {
  AttentionCase c;
  auto r = random_vec(c.T * c.qd(), 24);
  std::vector<float> o(c.T * c.qd()), lse(c.T * c.qh);
  auto f = [&] {
    const PagedAttention a = c.args(groups, select);
    cpu::attention_fwd(a, o.data(), lse.data());
    return dot(o, r);
  };
  f();
  const PagedAttention a = c.args(groups, select);
  std::vector<float> dq(c.q.size()), dk(c.k.size()), dv(c.v.size()), dpages(c.pages.size(), 0.0f);
  std::vector<float*> gp;
  for (int64_t u = 0; u < c.U; ++u) gp.push_back(dpages.data() + u * 2 * c.p * c.kvd());
  cpu::attention_bwd(a, o.data(), lse.data(), r.data(), dq.data(), dk.data(), dv.data(), gp);
  EXPECT_LT(fd_error(c.q, dq, f), kFdTol);
  EXPECT_LT(fd_error(c.k, dk, f), kFdTol);
  EXPECT_LT(fd_error(c.v, dv, f), kFdTol);
  EXPECT_LT(fd_error(c.pages, dpages, f), kFdTol);

  // Same numbers as the masked full-sequence attention (the reference's attention).
  f();  // o of the unperturbed inputs
  const cpu::MaskedAttention m = c.mask(a);
  std::vector<float> K, V, Q(static_cast<size_t>(m.n * c.qd()), 0.0f);
  c.full_kv(K, V);
  std::copy(c.q.begin(), c.q.end(), Q.begin() + c.U * c.p * c.qd());
  std::vector<float> O(Q.size()), probs, R(Q.size(), 0.0f), dQ(Q.size()), dK(K.size()), dV(V.size());
  std::copy(r.begin(), r.end(), R.begin() + c.U * c.p * c.qd());
  cpu::masked_attention_fwd(m, Q.data(), K.data(), V.data(), O.data(), probs);
  cpu::masked_attention_bwd(m, Q.data(), K.data(), V.data(), probs, R.data(), dQ.data(), dK.data(), dV.data());
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], O[c.U * c.p * c.qd() + i], 1e-5) << i;
  for (size_t i = 0; i < dk.size(); ++i) ASSERT_NEAR(dk[i], dK[c.U * c.p * c.kvd() + i], 1e-5) << i;
  for (int64_t u = 0; u < c.U; ++u)
    for (int64_t i = 0; i < c.p * c.kvd(); ++i)
      ASSERT_NEAR(dpages[u * 2 * c.p * c.kvd() + c.p * c.kvd() + i], dV[u * c.p * c.kvd() + i], 1e-5);
}

// Both kernel builds: AVX2/FMA (where the CPU has it) and the baseline.
class PagedAttentionKernels : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { cpu::flash_force_baseline(GetParam()); }
  void TearDown() override { cpu::flash_force_baseline(false); }
};

TEST_P(PagedAttentionKernels, DenseBackward) { check_paged_attention(0, {}); }
TEST_P(PagedAttentionKernels, SharedSelectionBackward) { check_paged_attention(1, {{0, 2}, {1}, {}}); }
TEST_P(PagedAttentionKernels, PerKvHeadSelectionBackward) {
  check_paged_attention(2, {{0}, {2}, {1, 2}, {0, 1, 2}, {}, {1}});
}
// A NaN or an overflowing key reaches the output as NaN (never a finite number, so the run's
// non-finite loss check sees it), through the kernels' exp without undefined behaviour.
TEST_P(PagedAttentionKernels, NonFiniteInputsReachTheOutput) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), 3e38f}) {
    AttentionCase c;
    std::fill_n(c.k.begin(), c.kvd(), bad);  // own row 0: every row attends it
    std::fill_n(c.q.begin(), c.T * c.qd(), bad == bad ? 1.0f : bad);
    std::vector<float> o(c.T * c.qd()), lse(c.T * c.qh);
    cpu::attention_fwd(c.args(0, {}), o.data(), lse.data());
    int64_t finite = 0;
    for (float v : o) finite += std::isfinite(v);
    EXPECT_EQ(finite, 0) << "key " << bad << ": " << finite << " of " << o.size() << " outputs finite";
  }
}
INSTANTIATE_TEST_SUITE_P(Kernels, PagedAttentionKernels, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "baseline" : "native"; });

// Head sizes with register-tiled kernels (8 .. 128) and the generic one (4, 12), several pages,
// forward and backward against the masked full-sequence attention.
TEST(Ops, PagedAttentionHeadSizesAgreeWithMasked) {
  for (int64_t hd : {4, 8, 12, 16, 32, 64, 128}) {
    AttentionCase c;
    c.hd = hd;
    c.T = 37;
    c.p = 8;
    c.U = 5;
    c.q = random_vec(c.T * c.qd(), 50, 0.5f);
    c.k = random_vec(c.T * c.kvd(), 51, 0.5f);
    c.v = random_vec(c.T * c.kvd(), 52);
    c.pages = random_vec(c.U * 2 * c.p * c.kvd(), 53, 0.5f);
    const auto r = random_vec(c.T * c.qd(), 54);
    const PagedAttention a = c.args(1, {{0, 2, 4}, {1}, {}, {0, 1, 2, 3, 4}, {3}});
    std::vector<float> o(c.T * c.qd()), lse(c.T * c.qh), dq(o.size()), dk(c.k.size()), dv(c.v.size()),
        dpages(c.pages.size(), 0.0f);
    std::vector<float*> gp;
    for (int64_t u = 0; u < c.U; ++u) gp.push_back(dpages.data() + u * 2 * c.p * c.kvd());
    cpu::attention_fwd(a, o.data(), lse.data());
    cpu::attention_bwd(a, o.data(), lse.data(), r.data(), dq.data(), dk.data(), dv.data(), gp);
    const cpu::MaskedAttention m = c.mask(a);
    const int64_t off = c.U * c.p;
    std::vector<float> K, V, Q(static_cast<size_t>(m.n * c.qd()), 0.0f), O(Q.size()), R(Q.size(), 0.0f), probs;
    c.full_kv(K, V);
    std::copy(c.q.begin(), c.q.end(), Q.begin() + off * c.qd());
    std::copy(r.begin(), r.end(), R.begin() + off * c.qd());
    std::vector<float> dQ(Q.size()), dK(K.size()), dV(V.size());
    cpu::masked_attention_fwd(m, Q.data(), K.data(), V.data(), O.data(), probs);
    cpu::masked_attention_bwd(m, Q.data(), K.data(), V.data(), probs, R.data(), dQ.data(), dK.data(), dV.data());
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], O[off * c.qd() + i], 1e-5) << "hd " << hd << " " << i;
    for (size_t i = 0; i < dq.size(); ++i) ASSERT_NEAR(dq[i], dQ[off * c.qd() + i], 2e-5) << "hd " << hd << " " << i;
    for (size_t i = 0; i < dv.size(); ++i) ASSERT_NEAR(dv[i], dV[off * c.kvd() + i], 2e-5) << "hd " << hd << " " << i;
    for (int64_t u = 0; u < c.U; ++u)
      for (int64_t i = 0; i < c.p * c.kvd(); ++i)
        ASSERT_NEAR(dpages[u * 2 * c.p * c.kvd() + i], dK[u * c.p * c.kvd() + i], 2e-5) << "hd " << hd;
  }
}

TEST(Ops, MaskedAttentionBackward) {
  const int64_t n = 6;
  cpu::MaskedAttention a;
  a.n = n;
  a.q_heads = 4;
  a.kv_heads = 2;
  a.head_dim = 4;
  a.groups = 2;
  a.allowed.assign(2, std::vector<uint8_t>(n * n, 0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t <= i; ++t) {
      a.allowed[0][i * n + t] = 1;
      a.allowed[1][i * n + t] = (t % 2 == 0) || t == i;
    }
  auto q = random_vec(n * 16, 30), k = random_vec(n * 8, 31), v = random_vec(n * 8, 32), r = random_vec(n * 16, 33);
  std::vector<float> o(n * 16), probs;
  auto f = [&] {
    cpu::masked_attention_fwd(a, q.data(), k.data(), v.data(), o.data(), probs);
    return dot(o, r);
  };
  f();
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  cpu::masked_attention_bwd(a, q.data(), k.data(), v.data(), probs, r.data(), dq.data(), dk.data(), dv.data());
  EXPECT_LT(fd_error(q, dq, f), kFdTol);
  EXPECT_LT(fd_error(k, dk, f), kFdTol);
  EXPECT_LT(fd_error(v, dv, f), kFdTol);
}

TEST(Ops, PageSummariesAreKeyMeans) {
  const int64_t rows = 5, kvd = 3, p = 2;
  auto k = random_vec(rows * kvd, 40);
  std::vector<float> s(3 * kvd);
  cpu::page_summaries(k.data(), rows, kvd, p, s.data());
  EXPECT_NEAR(s[1 * kvd + 2], (k[2 * kvd + 2] + k[3 * kvd + 2]) / 2, 1e-6);
  EXPECT_NEAR(s[2 * kvd + 1], k[4 * kvd + 1], 1e-6) << "a ragged page averages its valid rows";
}

TEST(Ops, SelectionPicksTheAlignedPages) {
  // 2 KV heads x 2 query heads, head_dim 2; 4 earlier pages. Page 2's summary points along the
  // GQA-summed query of query page 0, page 1's along query page 1's.
  const int64_t qh = 4, kvh = 2, hd = 2, p = 2, rows = 4;
  std::vector<float> q(rows * qh * hd, 0.0f), sum(4 * kvh * hd, 0.0f);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < qh; ++h) q[(t * qh + h) * hd + (t < 2 ? 0 : 1)] = 1.0f;
  for (int64_t g = 0; g < kvh; ++g) {
    sum[(2 * kvh + g) * hd + 0] = 5.0f;
    sum[(1 * kvh + g) * hd + 1] = 5.0f;
    sum[(3 * kvh + g) * hd + 0] = 4.0f;  // second best for query page 0
  }
  SelectionArgs a;
  a.q = q.data();
  a.rows = rows;
  a.q_heads = qh;
  a.kv_heads = kvh;
  a.head_dim = hd;
  a.page_tokens = p;
  a.summaries = sum.data();
  a.prefix_pages = 4;
  a.budget = 2;
  const auto sel = cpu::select_pages(a);
  ASSERT_EQ(sel.size(), 2u);
  EXPECT_EQ(sel[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(sel[1], (std::vector<int32_t>{0, 1})) << "page 1, then the tie broken to the lowest page";
  a.per_kv_head = true;
  const auto per_head = cpu::select_pages(a);
  ASSERT_EQ(per_head.size(), 4u);  // [query page][kv head]
  EXPECT_EQ(per_head[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(per_head[1], (std::vector<int32_t>{2, 3}));
}

TEST(Ops, AdamWMatchesPyTorchFormula) {
  std::vector<float> p = {1.0f, -2.0f}, g = {0.5f, 0.25f}, m = {0, 0}, v = {0, 0};
  const std::vector<uint8_t> decay = {1, 0};
  const float lr = 0.1f, b1 = 0.9f, b2 = 0.99f, eps = 1e-8f, wd = 0.01f;
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), decay.data(), 2, lr, b1, b2, eps, wd, 1);
  // Step 1: m_hat = g, v_hat = g^2, update = lr * sign(g) (up to eps); decay only on element 0.
  EXPECT_NEAR(p[0], 1.0f * (1 - lr * wd) - lr, 1e-6);
  EXPECT_NEAR(p[1], -2.0f - lr, 1e-6);
  // Step 2 with the gradient scaled (the mean over 4 contributions), against the formula in double.
  const float scale = 0.25f;
  const double m0 = 0.1 * 0.5, v0 = 0.01 * 0.25, g1 = 0.5 * scale;
  const double m1 = 0.9 * m0 + 0.1 * g1, v1 = 0.99 * v0 + 0.01 * g1 * g1;
  const double expect = (static_cast<double>(p[0]) * (1 - 0.1 * 0.01)) -
                        0.1 / (1 - 0.9 * 0.9) * m1 / (std::sqrt(v1) / std::sqrt(1 - 0.99 * 0.99) + 1e-8);
  cpu::adamw(p.data(), g.data(), m.data(), v.data(), decay.data(), 2, lr, b1, b2, eps, wd, 2, scale);
  EXPECT_NEAR(p[0], expect, 1e-6);
  EXPECT_NEAR(m[0], m1, 1e-7);
  EXPECT_NEAR(v[0], v1, 1e-8);
}

}  // namespace
}  // namespace oomb::executor
