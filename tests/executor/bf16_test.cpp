// bf16 page storage (backend.h PageDtype::bf16): the conversions of executor/runtime/bf16.h are
// exact round-to-nearest-even (edge cases by hand, random bit patterns against an independent
// rounding in double, every bf16 value round-trips), and the CPU backend's page ops with bf16
// pages are exactly the fp32 ops on the rounded values: write_kv_pages stores bf16(x), attention
// reads bf16 pages as their exact fp32 values, and bf16 gradient pages receive bf16(g + the
// call's fp32 contribution) (one rounding per element and call).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/ops.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/rng.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

using test::random_vec;

uint16_t to_bf16_bits(uint32_t f32_pattern) { return f32_to_bf16(f32_from_bits(f32_pattern)); }

TEST(Bf16, PageDtypeNamesAndSizes) {
  EXPECT_EQ(page_dtype_bytes(PageDtype::f32), 4);
  EXPECT_EQ(page_dtype_bytes(PageDtype::bf16), 2);
  EXPECT_STREQ(to_string(PageDtype::f32), "fp32");
  EXPECT_STREQ(to_string(PageDtype::bf16), "bf16");
  EXPECT_EQ(page_dtype_of(Dtype::fp32, "--kv-dtype"), PageDtype::f32);
  EXPECT_EQ(page_dtype_of(Dtype::bf16, "--kv-dtype"), PageDtype::bf16);
  EXPECT_EQ(dtype_of(PageDtype::bf16), Dtype::bf16);
  EXPECT_EQ(dtype_of(PageDtype::f32), Dtype::fp32);
  for (Dtype bad : {Dtype::fp8, Dtype::fp16}) {  // modelled by plan and simulate, not stored
    try {
      page_dtype_of(bad, "--kv-grad-dtype");
      ADD_FAILURE() << to_string(bad) << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "--kv-grad-dtype");
      EXPECT_EQ(e.key(), to_string(bad));
      EXPECT_NE(std::string(e.what()).find("fp32 or bf16"), std::string::npos) << e.what();
    }
  }
  // A name that is no storage dtype (f32, int32) never reaches the executor: core/dtype.h refuses it.
}

TEST(Bf16, RoundsToNearestEvenAtTies) {
  // 1 + 2^-8 lies halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): to the even one.
  EXPECT_EQ(to_bf16_bits(0x3f808000u), 0x3f80);
  // 1 + 3 * 2^-8: halfway between 0x3f81 (odd) and 0x3f82 (even).
  EXPECT_EQ(to_bf16_bits(0x3f818000u), 0x3f82);
  EXPECT_EQ(to_bf16_bits(0x3f808001u), 0x3f81);  // just above a tie: up
  EXPECT_EQ(to_bf16_bits(0x3f807fffu), 0x3f80);  // just below: down
  EXPECT_EQ(to_bf16_bits(0x3f80ffffu), 0x3f81);
  EXPECT_EQ(to_bf16_bits(0xbf818000u), 0xbf82);  // sign-symmetric
  EXPECT_EQ(to_bf16_bits(0xbf808000u), 0xbf80);
  // Carry into the exponent: 2 - 2^-23 rounds up to 2.
  EXPECT_EQ(to_bf16_bits(0x3fffffffu), 0x4000);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xc020);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
}

TEST(Bf16, Subnormals) {
  EXPECT_EQ(to_bf16_bits(0x00000001u), 0x0000);  // smallest fp32 subnormal: below half a bf16 ulp
  EXPECT_EQ(to_bf16_bits(0x00008000u), 0x0000);  // tie with 0 (even)
  EXPECT_EQ(to_bf16_bits(0x00008001u), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(to_bf16_bits(0x00018000u), 0x0002);  // tie between 0x0001 and 0x0002
  EXPECT_EQ(to_bf16_bits(0x00010000u), 0x0001);
  EXPECT_EQ(to_bf16_bits(0x007fffffu), 0x0080);  // largest fp32 subnormal -> smallest normal
  EXPECT_EQ(to_bf16_bits(0x807fffffu), 0x8080);
  EXPECT_EQ(to_bf16_bits(0x007f7fffu), 0x007f);  // largest bf16 subnormal
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));
}

TEST(Bf16, InfinityNanAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x7f80), inf);
  // The largest finite bf16 (0x7f7f = (2 - 2^-7) 2^127) stays; past half its ulp -> inf.
  EXPECT_EQ(to_bf16_bits(0x7f7f0000u), 0x7f7f);
  EXPECT_EQ(to_bf16_bits(0x7f7f7fffu), 0x7f7f);
  EXPECT_EQ(to_bf16_bits(0x7f7f8000u), 0x7f80);  // tie, 0x7f7f is odd: up, to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(to_bf16_bits(0x7f7e8000u), 0x7f7e);  // tie below, 0x7f7e even: down
  // NaN stays NaN, including NaNs whose payload sits only in the dropped low bits (rounding them
  // as numbers would carry into inf) and signalling NaNs; the sign is kept.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fbfffffu, 0x7fffffffu, 0xff800001u, 0xffc00000u}) {
    const uint16_t h = to_bf16_bits(nan);
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << nan << " -> " << h;
    EXPECT_EQ(h & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
  EXPECT_EQ(to_bf16_bits(0x7fc00000u), 0x7fc0);
}

// Nearest bf16 by comparing the two neighbours in double (no bit tricks), ties to the even one;
// beyond the largest finite value the upper neighbour is 2^128 (inf), as IEEE rounding does.
uint16_t reference_bf16(uint32_t u) {
  const uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  const uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
  const double x = static_cast<double>(f32_from_bits(mag));
  const double dlo = static_cast<double>(f32_from_bits(lo));
  const double dhi = hi >= 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(f32_from_bits(hi));
  const double below = x - dlo, above = dhi - x;
  uint32_t r = below < above ? lo : above < below ? hi : ((lo >> 16) & 1u) ? hi : lo;
  return static_cast<uint16_t>((sign | r) >> 16);
}

TEST(Bf16, MatchesAnIndependentRoundingOnRandomPatterns) {
  Rng rng(2024);
  int64_t checked = 0;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng.next());
    if (i % 4 == 1) u = (u & 0x8000ffffu) | (static_cast<uint32_t>(i) % 0xff) << 23;  // every exponent
    if (i % 4 == 2) u = (u & 0xffff0000u) | 0x8000u;                                  // exact ties
    if ((u & 0x7fffffffu) >= 0x7f800000u) continue;                                    // inf, NaN: above
    ASSERT_EQ(to_bf16_bits(u), reference_bf16(u)) << std::hex << u;
    ++checked;
  }
  EXPECT_GT(checked, 1900000);
}

TEST(Bf16, EveryBf16ValueRoundTripsExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
    ASSERT_EQ(f32_bits(f), h << 16);
  }
}

TEST(Bf16, ArrayHelpers) {
  const auto x = random_vec(37, 1), y = random_vec(37, 2, 1e-3f);
  std::vector<uint16_t> h(x.size());
  f32_to_bf16(x.data(), h.data(), 37);
  std::vector<float> back(x.size());
  bf16_to_f32(h.data(), back.data(), 37);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(h[i], f32_to_bf16(x[i]));
    EXPECT_EQ(back[i], round_to_bf16(x[i]));
    // Relative rounding error at most 2^-8: half the 2^-7 spacing of an 8-bit significand.
    EXPECT_LE(std::fabs(back[i] - x[i]), std::ldexp(std::fabs(x[i]), -8));
  }
  std::vector<uint16_t> acc = h;
  bf16_add_f32(acc.data(), y.data(), 37);
  std::vector<float> sum = y;
  f32_add_bf16(sum.data(), h.data(), 37);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(acc[i], f32_to_bf16(back[i] + y[i]));
    EXPECT_EQ(sum[i], y[i] + back[i]);
  }
}

// ---- the CPU backend's page ops with bf16 pages

constexpr uint16_t kSentinel = 0xabcd;

TEST(Bf16Pages, WriteAndAddFromGradPagesIncludingARaggedLastPage) {
  CpuBackend b;
  const int64_t kvd = 6, p = 4;
  for (int64_t rows : {1, 4, 7, 9}) {
    const int64_t np = (rows + p - 1) / p;
    const auto k = random_vec(static_cast<size_t>(rows * kvd), 10), v = random_vec(static_cast<size_t>(rows * kvd), 11);
    std::vector<uint16_t> store(static_cast<size_t>(np * 2 * p * kvd), kSentinel);
    std::vector<float*> pages;
    for (int64_t j = 0; j < np; ++j) pages.push_back(reinterpret_cast<float*>(store.data() + j * 2 * p * kvd));
    b.write_kv_pages(k.data(), v.data(), rows, kvd, p, pages, PageDtype::bf16);
    for (int64_t r = 0; r < np * p; ++r)
      for (int64_t d = 0; d < kvd; ++d) {
        const uint16_t* page = store.data() + (r / p) * 2 * p * kvd;
        const uint16_t ks = page[(r % p) * kvd + d], vs = page[p * kvd + (r % p) * kvd + d];
        if (r < rows) {
          ASSERT_EQ(ks, f32_to_bf16(k[static_cast<size_t>(r * kvd + d)])) << rows << " " << r;
          ASSERT_EQ(vs, f32_to_bf16(v[static_cast<size_t>(r * kvd + d)])) << rows << " " << r;
        } else {  // the ragged page's unused rows are not written
          ASSERT_EQ(ks, kSentinel);
          ASSERT_EQ(vs, kSentinel);
        }
      }
    // The pages as gradient pages: dk += their dK rows, dv += their dV rows (exact bf16 values).
    auto dk = random_vec(static_cast<size_t>(rows * kvd), 12), dv = random_vec(static_cast<size_t>(rows * kvd), 13);
    const auto dk0 = dk, dv0 = dv;
    b.add_from_grad_pages(pages, rows, kvd, p, dk.data(), dv.data(), PageDtype::bf16);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t d = 0; d < kvd; ++d) {
        const size_t i = static_cast<size_t>(r * kvd + d);
        ASSERT_EQ(dk[i], dk0[i] + round_to_bf16(k[i]));
        ASSERT_EQ(dv[i], dv0[i] + round_to_bf16(v[i]));
      }
  }
}

// One chunk's paged attention with U prefix pages, in fp32 (pages holding bf16-representable
// values) and with the same pages stored as bf16.
struct Case {
  int64_t T = 11, qh = 4, kvh = 2, hd = 8, p = 4, U = 5;
  int64_t kvd() const { return kvh * hd; }
  int64_t pf() const { return 2 * p * kvd(); }
  std::vector<float> q, k, v, pages;  // pages: fp32 copies of the bf16 values
  std::vector<uint16_t> pages_bf16;
  explicit Case(uint64_t seed) {
    q = random_vec(static_cast<size_t>(T * qh * hd), seed);
    k = random_vec(static_cast<size_t>(T * kvd()), seed + 1);
    v = random_vec(static_cast<size_t>(T * kvd()), seed + 2);
    pages = random_vec(static_cast<size_t>(U * pf()), seed + 3);
    pages_bf16.resize(pages.size());
    f32_to_bf16(pages.data(), pages_bf16.data(), static_cast<int64_t>(pages.size()));
    bf16_to_f32(pages_bf16.data(), pages.data(), static_cast<int64_t>(pages.size()));
  }
  PagedAttention args(PageDtype kv, std::vector<std::vector<int32_t>> select = {}) const {
    PagedAttention a;
    a.rows = T;
    a.q_heads = qh;
    a.kv_heads = kvh;
    a.head_dim = hd;
    a.page_tokens = p;
    a.q = q.data();
    a.k_own = k.data();
    a.v_own = v.data();
    for (int64_t u = 0; u < U; ++u)
      a.prefix_pages.push_back(kv == PageDtype::bf16 ? reinterpret_cast<const float*>(pages_bf16.data() + u * pf())
                                                     : pages.data() + u * pf());
    a.kv_dtype = kv;
    if (!select.empty()) {
      a.select_groups = 1;
      a.select = std::move(select);
    }
    return a;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Dense and a selection (query pages 0..2 attend different slots), twice on one backend so the
// scratch is reused, and after a larger call so it is not re-sized down.
const std::vector<std::vector<std::vector<int32_t>>>& selections() {
  static const std::vector<std::vector<std::vector<int32_t>>> s = {{}, {{0, 2}, {1, 3, 4}, {4}}};
  return s;
}

TEST(Bf16Pages, AttentionForwardReadsTheStoredValuesExactly) {
  CpuBackend b;
  for (uint64_t seed : {20u, 30u, 20u})
    for (const auto& sel : selections()) {
      const Case c(seed);
      std::vector<float> o32(c.q.size()), l32(static_cast<size_t>(c.T * c.qh)), o16(o32.size()), l16(l32.size());
      b.attention_fwd(c.args(PageDtype::f32, sel), o32.data(), l32.data());
      b.attention_fwd(c.args(PageDtype::bf16, sel), o16.data(), l16.data());
      EXPECT_TRUE(same_bits(o32, o16)) << seed;
      EXPECT_TRUE(same_bits(l32, l16)) << seed;
    }
}

TEST(Bf16Pages, AttentionBackwardAddsEachCallsContributionWithOneRounding) {
  CpuBackend b;
  for (uint64_t seed : {40u, 50u})
    for (const auto& sel : selections()) {
      const Case c(seed);
      const size_t nq = c.q.size(), nkv = c.k.size();
      std::vector<float> o(nq), lse(static_cast<size_t>(c.T * c.qh));
      const auto dout = random_vec(nq, seed + 7);
      b.attention_fwd(c.args(PageDtype::f32, sel), o.data(), lse.data());
      // The fp32 reference: this call's contribution to zeroed fp32 gradient pages.
      std::vector<float> contrib(c.pages.size(), 0.0f), dq(nq), dk(nkv), dv(nkv);
      std::vector<float*> cp;
      for (int64_t u = 0; u < c.U; ++u) cp.push_back(contrib.data() + u * c.pf());
      cpu::attention_bwd(c.args(PageDtype::f32, sel), o.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                         dv.data(), cp);
      // Gradient pages that already hold something (what later chunks accumulated).
      const auto g0 = random_vec(c.pages.size(), seed + 8, 0.1f);
      std::vector<uint16_t> g16(g0.size());
      f32_to_bf16(g0.data(), g16.data(), static_cast<int64_t>(g0.size()));
      std::vector<float> g32(g0.size());
      bf16_to_f32(g16.data(), g32.data(), static_cast<int64_t>(g0.size()));
      for (PageDtype kv : {PageDtype::f32, PageDtype::bf16})
        for (PageDtype gd : {PageDtype::f32, PageDtype::bf16}) {
          std::vector<uint16_t> gs16 = g16;
          std::vector<float> gs32 = g32, dq2(nq), dk2(nkv), dv2(nkv);
          std::vector<float*> gp;
          for (int64_t u = 0; u < c.U; ++u)
            gp.push_back(gd == PageDtype::bf16 ? reinterpret_cast<float*>(gs16.data() + u * c.pf())
                                               : gs32.data() + u * c.pf());
          PagedAttention a = c.args(kv, sel);
          a.grad_dtype = gd;
          b.attention_bwd(a, o.data(), lse.data(), dout.data(), dq2.data(), dk2.data(), dv2.data(), gp);
          const std::string what = std::string("kv ") + to_string(kv) + ", grads " + to_string(gd);
          EXPECT_TRUE(same_bits(dq, dq2)) << what;
          EXPECT_TRUE(same_bits(dk, dk2)) << what;
          EXPECT_TRUE(same_bits(dv, dv2)) << what;
          for (size_t i = 0; i < g0.size(); ++i) {
            const float want = g32[i] + contrib[i];
            if (gd == PageDtype::bf16) ASSERT_EQ(gs16[i], f32_to_bf16(want)) << what << " " << i;
            else ASSERT_EQ(gs32[i], want) << what << " " << i;
          }
        }
    }
}

}  // namespace
}  // namespace oomb::executor
