// Blocked attention kernels (see flash.h). Every product is one of two register-tiled shapes:
// rows x 16 columns (scores, dP, and dK / dV as x^T P) or rows x head_dim (P V, dS K); head_dim is a
// template constant for the common sizes (0 = any, a plain loop).
#include "executor/cpu/flash.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"


// The kernels are inlined into two entry points: one compiled for x86-64-v3 (AVX2, FMA), chosen at
// run time when the CPU has it, and one for the baseline. (Not target_clones: GCC lowers generic
// vectors for the baseline before cloning, which loses the AVX code.)
#if defined(__x86_64__) && defined(__GNUC__)
#define OOMB_HAVE_V3 1
#define OOMB_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define OOMB_HAVE_V3 0
#endif
#define OOMB_INLINE inline __attribute__((always_inline))
// v8 values only cross always-inlined helpers, never an ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace oomb::executor::cpu {

namespace {

constexpr int64_t BK = kFlashBlock;
constexpr int64_t BKS = kFlashBlock + kFlashPad;  // score row stride: tiles of 16 may pass bk
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp for x <= 88 (Cephes polynomial, ~1 ulp), written to vectorise; x < -87 gives ~1e-38, so
// callers select 0 explicitly for masked entries.
OOMB_INLINE float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 88.0f ? 88.0f : x;
  const float t = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23 + round(x * log2(e))
  const float n = t - 12582912.0f;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // 2^n from t's low mantissa bits (the integer n, as static_cast<int32_t>(n) would give it), in
  // unsigned arithmetic: defined for a NaN x too (a cast of NaN to int is undefined behaviour, found
  // by UBSan in a run whose weights overflow), whose NaN then reaches the result through y.
  uint32_t tb;
  std::memcpy(&tb, &t, 4);
  const uint32_t bits = (tb - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// Max and sum of x[0, n) with 16 independent lanes (vectorisable without reassociation flags).
OOMB_INLINE float row_max(const float* x, int64_t n) {
  float part[16];
  std::fill_n(part, 16, kNegInf);
  int64_t c0 = 0;
  for (; c0 + 16 <= n; c0 += 16)
    for (int c = 0; c < 16; ++c) part[c] = part[c] > x[c0 + c] ? part[c] : x[c0 + c];
  float m = kNegInf;
  for (float v : part) m = std::max(m, v);
  for (; c0 < n; ++c0) m = std::max(m, x[c0]);
  return m;
}

OOMB_INLINE float row_sum(const float* x, int64_t n) {
  float part[16] = {};
  int64_t c0 = 0;
  for (; c0 + 16 <= n; c0 += 16)
    for (int c = 0; c < 16; ++c) part[c] += x[c0 + c];
  float s = 0;
  for (float v : part) s += v;
  for (; c0 < n; ++c0) s += x[c0];
  return s;
}


// 8-lane float vectors (GCC vector extension): AVX registers in the x86-64-v3 clone, pairs of
// SSE registers in the baseline one. Named accumulators keep register tiles out of memory.
typedef float v8 __attribute__((vector_size(32)));
OOMB_INLINE v8 load8(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
OOMB_INLINE void store8(float* p, const v8& v) { std::memcpy(p, &v, sizeof v); }
// Broadcast of p[0]. The AVX version is one instruction that GCC's SLP pass cannot merge with its
// neighbours into a gather-and-shuffle (which it does to the plain version, at half the speed).
struct IsaBase {
  static OOMB_INLINE v8 splat(const float* p) {
    const float x = *p;
    return v8{x, x, x, x, x, x, x, x};
  }
};
#if OOMB_HAVE_V3
struct IsaV3 {
  static OOMB_INLINE v8 splat(const float* p) {
    v8 r;
    asm("vbroadcastss %1, %0" : "=x"(r) : "m"(*p));
    return r;
  }
};
#endif

// s[i][c] = sum_k x[i][k] * y[k][t0 + c] for i < m, c < ceil16(n): x row-major [m][kk], y with row
// stride ld and readable up to column t0 + ceil16(n). Tiles of 4 rows x 16 columns.
template <class ISA>
OOMB_INLINE void gemm_rows(const float* x, int64_t m, int64_t kk, const float* y, int64_t ld, int64_t t0, int64_t n,
                           float* s) {
  int64_t i = 0;
  for (; i + 4 <= m; i += 4)
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
      v8 a00 = {}, a01 = {}, a10 = {}, a11 = {}, a20 = {}, a21 = {}, a30 = {}, a31 = {};
      const float* yr = y + t0 + c0;
      const float* x0 = x + i * kk;
      for (int64_t k = 0; k < kk; ++k, yr += ld) {
        const v8 y0 = load8(yr), y1 = load8(yr + 8);
        v8 b = ISA::splat(x0 + k);
        a00 += b * y0;
        a01 += b * y1;
        b = ISA::splat(x0 + kk + k);
        a10 += b * y0;
        a11 += b * y1;
        b = ISA::splat(x0 + 2 * kk + k);
        a20 += b * y0;
        a21 += b * y1;
        b = ISA::splat(x0 + 3 * kk + k);
        a30 += b * y0;
        a31 += b * y1;
      }
      float* o = s + i * BKS + c0;
      store8(o, a00);
      store8(o + 8, a01);
      store8(o + BKS, a10);
      store8(o + BKS + 8, a11);
      store8(o + 2 * BKS, a20);
      store8(o + 2 * BKS + 8, a21);
      store8(o + 3 * BKS, a30);
      store8(o + 3 * BKS + 8, a31);
    }
  for (; i < m; ++i)
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
      v8 a0 = {}, a1 = {};
      const float* yr = y + t0 + c0;
      for (int64_t k = 0; k < kk; ++k, yr += ld) {
        const v8 b = ISA::splat(x + i * kk + k);
        a0 += b * load8(yr);
        a1 += b * load8(yr + 8);
      }
      store8(s + i * BKS + c0, a0);
      store8(s + i * BKS + c0 + 8, a1);
    }
}

// acc[i][:] += sum_{c < bk} p[i][c] * y[t0 + c][:]  (acc and y row-major [.][hd]). HD % 8 == 0 uses
// register tiles of RB rows x HD; other head sizes a plain loop.
template <int HD, class ISA>
OOMB_INLINE void rows_times_block(const float* p, int64_t rows, int64_t hd_rt, const float* y, int64_t t0, int64_t bk,
                                  float* acc_out) {
  if constexpr (HD > 0 && HD % 8 == 0) {
    constexpr int V = HD / 8 < 8 ? HD / 8 : 8;  // vectors per d-chunk
    constexpr int RB = V <= 2 ? 4 : V <= 4 ? 2 : 1;
    int64_t i = 0;
    for (; i + RB <= rows; i += RB)
      for (int d0 = 0; d0 < HD; d0 += 8 * V) {
        v8 acc[RB][V];
        for (int r = 0; r < RB; ++r)
          for (int v = 0; v < V; ++v) acc[r][v] = load8(acc_out + (i + r) * HD + d0 + 8 * v);
        for (int64_t c = 0; c < bk; ++c) {
          const float* yr = y + (t0 + c) * HD + d0;
          v8 yv[V];
          for (int v = 0; v < V; ++v) yv[v] = load8(yr + 8 * v);
          for (int r = 0; r < RB; ++r) {
            const v8 b = ISA::splat(p + (i + r) * BKS + c);
            for (int v = 0; v < V; ++v) acc[r][v] += b * yv[v];
          }
        }
        for (int r = 0; r < RB; ++r)
          for (int v = 0; v < V; ++v) store8(acc_out + (i + r) * HD + d0 + 8 * v, acc[r][v]);
      }
    for (; i < rows; ++i)
      for (int d0 = 0; d0 < HD; d0 += 8 * V) {
        v8 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = load8(acc_out + i * HD + d0 + 8 * v);
        for (int64_t c = 0; c < bk; ++c) {
          const v8 b = ISA::splat(p + i * BKS + c);
          for (int v = 0; v < V; ++v) acc[v] += b * load8(y + (t0 + c) * HD + d0 + 8 * v);
        }
        for (int v = 0; v < V; ++v) store8(acc_out + i * HD + d0 + 8 * v, acc[v]);
      }
  } else {
    const int64_t hd = HD > 0 ? HD : hd_rt;
    for (int64_t i = 0; i < rows; ++i) {
      float* a = acc_out + i * hd;
      for (int64_t c = 0; c < bk; ++c) {
        const float* yr = y + (t0 + c) * hd;
        const float pv = p[i * BKS + c];
        for (int64_t d = 0; d < hd; ++d) a[d] += pv * yr[d];
      }
    }
  }
}

// out[t0 + c][:] += sum_i p[i][c] * x[i][:] for c < bk (dK, dV): tmp = x^T p by gemm_rows
// (xt = x^T [hd][rows]), then a transposed add.
template <class ISA>
OOMB_INLINE void block_t_times_rows(const float* p, int64_t rows, int64_t hd, const float* xt, int64_t t0, int64_t bk,
                                    float* out, float* tmp) {
  gemm_rows<ISA>(xt, hd, rows, p, BKS, 0, bk, tmp);
  for (int64_t c = 0; c < bk; ++c)
    for (int64_t d = 0; d < hd; ++d) out[(t0 + c) * hd + d] += tmp[d * BKS + c];
}

// Valid columns of query row i in the key block starting at gathered row t0 (causal inside the
// chunk: own key t may be seen by chunk row q_first + i' when t - own_start <= it).
OOMB_INLINE int64_t visible(const FlashKeys& k, const FlashRows& r, int64_t i, int64_t t0, int64_t bk) {
  if (t0 + bk <= k.own_start) return bk;
  const int64_t qi = r.q_first + i % r.nq;
  return std::min(bk, k.own_start + qi + 1 - t0);
}

// The first valid column of query row i in that block (a local layer's mask; 0 without one).
OOMB_INLINE int64_t first_visible(const FlashRows& r, int64_t i, int64_t t0, int64_t bk) {
  if (!r.first) return 0;
  return std::clamp<int64_t>(r.first[i % r.nq] - t0, 0, bk);
}

template <int HD, class ISA>
OOMB_INLINE void fwd_impl(const FlashKeys& k, const FlashRows& r, float* o, float* lse, float* scratch) {
  const int64_t hd = HD > 0 ? HD : k.hd, rows = r.nq * r.heads;
  float* s = scratch;
  float* m = s + rows * BKS;
  float* l = m + rows;
  std::fill_n(m, rows, kNegInf);
  std::fill_n(l, rows, 0.0f);
  std::fill_n(o, rows * hd, 0.0f);
  for (int64_t seg = 0; seg < k.segs; ++seg) {
    const int64_t end = k.seg_start[seg] + k.seg_len[seg];
    for (int64_t t0 = k.seg_start[seg]; t0 < end; t0 += BK) {
      const int64_t bk = std::min(BK, end - t0);
      gemm_rows<ISA>(r.q, rows, hd, k.kt, k.ld, t0, bk, s);
      for (int64_t i = 0; i < rows; ++i) {
        float* srow = s + i * BKS;
        const int64_t lim = visible(k, r, i, t0, bk), lo = first_visible(r, i, t0, bk);
        if (lim <= lo) {
          std::fill_n(srow, bk, 0.0f);
          continue;
        }
        const float m_new = std::max(m[i], row_max(srow + lo, lim - lo));
        const float alpha = m[i] == kNegInf ? 0.0f : fast_exp(m[i] - m_new);
        for (int64_t c = 0; c < bk; ++c) {
          const float e = fast_exp(srow[c] - m_new);
          srow[c] = c >= lo && c < lim ? e : 0.0f;
        }
        const float sum = row_sum(srow, lim);
        l[i] = l[i] * alpha + sum;
        m[i] = m_new;
        if (alpha != 1.0f)
          for (int64_t d = 0; d < hd; ++d) o[i * hd + d] *= alpha;
      }
      rows_times_block<HD, ISA>(s, rows, hd, k.v, t0, bk, o);
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float inv = 1.0f / l[i];
    for (int64_t d = 0; d < hd; ++d) o[i * hd + d] *= inv;
    lse[i] = m[i] + std::log(l[i]);
  }
}

template <int HD, class ISA>
OOMB_INLINE void bwd_impl(const FlashKeys& k, const FlashRows& r, const float* o, const float* lse, const float* dout,
                          float* dq, float* dk, float* dv, float* scratch) {
  const int64_t hd = HD > 0 ? HD : k.hd, rows = r.nq * r.heads;
  float* s = scratch;               // P block
  float* dp = s + rows * BKS;       // dP, then dS block
  float* drow = dp + rows * BKS;    // D_i = dout_i . o_i
  float* qt = drow + rows;          // q^T, dout^T [hd][rows]
  float* dot = qt + hd * rows;
  float* tmp = dot + hd * rows;     // [hd][BKS]
  for (int64_t i = 0; i < rows; ++i) {
    float acc = 0;
    for (int64_t d = 0; d < hd; ++d) {
      acc += dout[i * hd + d] * o[i * hd + d];
      qt[d * rows + i] = r.q[i * hd + d];
      dot[d * rows + i] = dout[i * hd + d];
    }
    drow[i] = acc;
  }
  std::fill_n(dq, rows * hd, 0.0f);
  for (int64_t seg = 0; seg < k.segs; ++seg) {
    const int64_t end = k.seg_start[seg] + k.seg_len[seg];
    for (int64_t t0 = k.seg_start[seg]; t0 < end; t0 += BK) {
      const int64_t bk = std::min(BK, end - t0);
      gemm_rows<ISA>(r.q, rows, hd, k.kt, k.ld, t0, bk, s);
      gemm_rows<ISA>(dout, rows, hd, k.vt, k.ld, t0, bk, dp);
      for (int64_t i = 0; i < rows; ++i) {
        float* srow = s + i * BKS;
        float* drow_s = dp + i * BKS;
        const int64_t lim = visible(k, r, i, t0, bk), lo = first_visible(r, i, t0, bk);
        const float li = lse[i], di = drow[i];
        for (int64_t c = 0; c < bk; ++c) {
          const float e = fast_exp(srow[c] - li);
          const float pv = c >= lo && c < lim ? e : 0.0f;
          srow[c] = pv;
          drow_s[c] = pv * (drow_s[c] - di);
        }
      }
      rows_times_block<HD, ISA>(dp, rows, hd, k.k, t0, bk, dq);   // dq += dS K
      block_t_times_rows<ISA>(dp, rows, hd, qt, t0, bk, dk, tmp);   // dK += dS^T q (q pre-scaled)
      block_t_times_rows<ISA>(s, rows, hd, dot, t0, bk, dv, tmp);   // dV += P^T dout
    }
  }
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t i = 0; i < rows * hd; ++i) dq[i] *= sc;
}

}  // namespace

int64_t flash_scratch_floats(const FlashRows& r, int64_t hd) {
  const int64_t rows = r.nq * r.heads;
  return 2 * rows * BKS + 2 * rows + 2 * hd * rows + hd * BKS;
}

namespace {

#define OOMB_FLASH_DISPATCH(IMPL, ISA, ...)      \
  switch (k.hd) {                                \
    case 8: return IMPL<8, ISA>(__VA_ARGS__);     \
    case 16: return IMPL<16, ISA>(__VA_ARGS__);   \
    case 32: return IMPL<32, ISA>(__VA_ARGS__);   \
    case 64: return IMPL<64, ISA>(__VA_ARGS__);   \
    case 128: return IMPL<128, ISA>(__VA_ARGS__); \
    default: return IMPL<0, ISA>(__VA_ARGS__);    \
  }

void fwd_base(const FlashKeys& k, const FlashRows& r, float* o, float* lse, float* scratch) {
  OOMB_FLASH_DISPATCH(fwd_impl, IsaBase, k, r, o, lse, scratch)
}
void bwd_base(const FlashKeys& k, const FlashRows& r, const float* o, const float* lse, const float* dout, float* dq,
              float* dk, float* dv, float* scratch) {
  OOMB_FLASH_DISPATCH(bwd_impl, IsaBase, k, r, o, lse, dout, dq, dk, dv, scratch)
}
#if OOMB_HAVE_V3
OOMB_TARGET_V3 void fwd_v3(const FlashKeys& k, const FlashRows& r, float* o, float* lse, float* scratch) {
  OOMB_FLASH_DISPATCH(fwd_impl, IsaV3, k, r, o, lse, scratch)
}
OOMB_TARGET_V3 void bwd_v3(const FlashKeys& k, const FlashRows& r, const float* o, const float* lse,
                           const float* dout, float* dq, float* dk, float* dv, float* scratch) {
  OOMB_FLASH_DISPATCH(bwd_impl, IsaV3, k, r, o, lse, dout, dq, dk, dv, scratch)
}
#endif

std::atomic<bool> g_force_baseline{false};

bool cpu_has_v3() {
#if OOMB_HAVE_V3
  static const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return v3 && !g_force_baseline.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// Row kernels of the full-sequence reference's attention (see flash.h), 16 independent lanes per
// reduction in a fixed order.
OOMB_INLINE void softmax_masked_impl(float* p, const uint8_t* allowed, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    float* x = p + r * n;
    const uint8_t* al = allowed + r * n;
    float part[16];
    std::fill_n(part, 16, kNegInf);
    int64_t c0 = 0;
    for (; c0 + 16 <= n; c0 += 16)
      for (int c = 0; c < 16; ++c) {
        const float v = al[c0 + c] ? x[c0 + c] : kNegInf;
        part[c] = part[c] > v ? part[c] : v;
      }
    float mx = kNegInf;
    for (float v : part) mx = std::max(mx, v);
    for (int64_t t = c0; t < n; ++t)
      if (al[t]) mx = std::max(mx, x[t]);
    if (mx == kNegInf) {  // nothing allowed: no probability anywhere
      std::fill_n(x, n, 0.0f);
      continue;
    }
    std::fill_n(part, 16, 0.0f);
    for (c0 = 0; c0 + 16 <= n; c0 += 16)
      for (int c = 0; c < 16; ++c) {
        const float e = fast_exp(x[c0 + c] - mx);
        const float v = al[c0 + c] ? e : 0.0f;
        x[c0 + c] = v;
        part[c] += v;
      }
    float sum = 0;
    for (float v : part) sum += v;
    for (int64_t t = c0; t < n; ++t) {
      x[t] = al[t] ? fast_exp(x[t] - mx) : 0.0f;
      sum += x[t];
    }
    const float inv = 1.0f / sum;
    for (int64_t t = 0; t < n; ++t) x[t] *= inv;
  }
}

OOMB_INLINE void softmax_bwd_impl(const float* p, float* dp, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = p + r * n;
    float* dr = dp + r * n;
    float part[16] = {};
    int64_t c0 = 0;
    for (; c0 + 16 <= n; c0 += 16)
      for (int c = 0; c < 16; ++c) part[c] += pr[c0 + c] * dr[c0 + c];
    float rs = 0;
    for (float v : part) rs += v;
    for (int64_t t = c0; t < n; ++t) rs += pr[t] * dr[t];
    for (int64_t t = 0; t < n; ++t) dr[t] = pr[t] * (dr[t] - rs);
  }
}

void softmax_masked_base(float* p, const uint8_t* a, int64_t rows, int64_t n) { softmax_masked_impl(p, a, rows, n); }
void softmax_bwd_base(const float* p, float* dp, int64_t rows, int64_t n) { softmax_bwd_impl(p, dp, rows, n); }
#if OOMB_HAVE_V3
OOMB_TARGET_V3 void softmax_masked_v3(float* p, const uint8_t* a, int64_t rows, int64_t n) {
  softmax_masked_impl(p, a, rows, n);
}
OOMB_TARGET_V3 void softmax_bwd_v3(const float* p, float* dp, int64_t rows, int64_t n) {
  softmax_bwd_impl(p, dp, rows, n);
}
#endif

}  // namespace

void masked_softmax_rows(float* p, const uint8_t* allowed, int64_t rows, int64_t n) {
#if OOMB_HAVE_V3
  if (cpu_has_v3()) return softmax_masked_v3(p, allowed, rows, n);
#endif
  softmax_masked_base(p, allowed, rows, n);
}

void softmax_bwd_rows(const float* p, float* dp, int64_t rows, int64_t n) {
#if OOMB_HAVE_V3
  if (cpu_has_v3()) return softmax_bwd_v3(p, dp, rows, n);
#endif
  softmax_bwd_base(p, dp, rows, n);
}

void flash_force_baseline(bool on) { g_force_baseline = on; }

void flash_fwd(const FlashKeys& k, const FlashRows& r, float* o, float* lse, float* scratch) {
#if OOMB_HAVE_V3
  if (cpu_has_v3()) return fwd_v3(k, r, o, lse, scratch);
#endif
  fwd_base(k, r, o, lse, scratch);
}

void flash_bwd(const FlashKeys& k, const FlashRows& r, const float* o, const float* lse, const float* dout, float* dq,
               float* dk, float* dv, float* scratch) {
#if OOMB_HAVE_V3
  if (cpu_has_v3()) return bwd_v3(k, r, o, lse, dout, dq, dk, dv, scratch);
#endif
  bwd_base(k, r, o, lse, dout, dq, dk, dv, scratch);
}

}  // namespace oomb::executor::cpu
