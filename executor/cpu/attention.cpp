// Paged causal attention on the CPU. The chunk's attended keys (union pages, then the chunk's own
// rows) are gathered once per KV head into key-major and dim-major buffers; each (query page, KV
// head) then runs the blocked kernels of flash.h over its segments of those rows: one segment for
// dense attention, runs of selected pages plus the own rows for sparse. dK/dV accumulate in the
// gathered layout and are scattered back to the gradient pages and the own rows at the end.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "executor/cpu/eigen_util.h"
#include "executor/cpu/flash.h"
#include "executor/cpu/gemm.h"
#include "executor/cpu/ops.h"
#include "executor/cpu/parallel.h"

namespace oomb::executor::cpu {

namespace {

struct Geometry {
  int64_t T, hd, qd, kvd, group, p, U, Tk, ld;
  explicit Geometry(const PagedAttention& a)
      : T(a.rows),
        hd(a.head_dim),
        qd(a.q_heads * a.head_dim),
        kvd(a.kv_heads * a.head_dim),
        group(a.q_heads / a.kv_heads),
        p(a.page_tokens),
        U(static_cast<int64_t>(a.prefix_pages.size())),
        Tk(U * a.page_tokens + a.rows),
        ld(Tk + kFlashPad) {
    OOMB_ASSERT(a.q_heads % a.kv_heads == 0 && a.head_dim > 0 && a.page_tokens > 0);
  }
};

// Per KV head g: k [Tk][hd] and kt [hd][ld] (and the same for v): gathered row u * p + r = union
// slot u, token r; row U * p + t = own token t.
struct Gathered {
  std::vector<float> k, kt, v, vt;
  Gathered(const PagedAttention& a, const Geometry& G, bool transposed_v) {
    k.assign(static_cast<size_t>(a.kv_heads * G.Tk * G.hd), 0.0f);
    v.assign(k.size(), 0.0f);
    kt.assign(static_cast<size_t>(a.kv_heads * G.hd * G.ld), 0.0f);
    if (transposed_v) vt.assign(kt.size(), 0.0f);
    parallel_items(a.kv_heads, static_cast<double>(a.kv_heads * G.Tk * G.hd) * 8, [&](int64_t g) {
      float* kd = k.data() + g * G.Tk * G.hd;
      float* vd = v.data() + g * G.Tk * G.hd;
      for (int64_t u = 0; u < G.U; ++u) {
        const float* page = a.prefix_pages[static_cast<size_t>(u)];
        block(kd + u * G.p * G.hd, G.p, G.hd, G.hd) = block(page + g * G.hd, G.p, G.hd, G.kvd);
        block(vd + u * G.p * G.hd, G.p, G.hd, G.hd) = block(page + G.p * G.kvd + g * G.hd, G.p, G.hd, G.kvd);
      }
      block(kd + G.U * G.p * G.hd, G.T, G.hd, G.hd) = block(a.k_own.f32() + g * G.hd, G.T, G.hd, G.kvd);
      block(vd + G.U * G.p * G.hd, G.T, G.hd, G.hd) = block(a.v_own.f32() + g * G.hd, G.T, G.hd, G.kvd);
      block(kt.data() + g * G.hd * G.ld, G.hd, G.Tk, G.ld) = mat(kd, G.Tk, G.hd).transpose();
      if (transposed_v) block(vt.data() + g * G.hd * G.ld, G.hd, G.Tk, G.ld) = mat(vd, G.Tk, G.hd).transpose();
    });
  }
};

// A local layer's mask: per chunk row, the gathered row of the first key it attends (prefix slot u
// token r is u * p + r, own token t is U * p + t). Empty for a global layer.
std::vector<int64_t> first_rows(const PagedAttention& a, const Geometry& G) {
  if (a.local == models::LayerAttention::global) return {};
  OOMB_ASSERT(static_cast<int64_t>(a.prefix_ids.size()) == G.U && a.select_groups == 0 && a.window > 0,
              "a local layer attends its reach's pages densely");
  std::vector<int64_t> first(static_cast<size_t>(G.T));
  for (int64_t r = 0; r < G.T; ++r) {
    const int64_t kp = models::first_key(a.local, a.window, a.q_pos0 + r);
    if (kp >= a.q_pos0) {
      first[static_cast<size_t>(r)] = G.U * G.p + (kp - a.q_pos0);
      continue;
    }
    const auto it = std::lower_bound(a.prefix_ids.begin(), a.prefix_ids.end(), kp / G.p);
    const int64_t u = it - a.prefix_ids.begin();
    first[static_cast<size_t>(r)] = u * G.p + (it != a.prefix_ids.end() && *it == kp / G.p ? kp % G.p : 0);
  }
  return first;
}

// The segments of gathered rows query page j (last own row r1 - 1) attends for KV head g; a local
// layer's begin at its first row's first key (`from`: the rows' firsts are non-decreasing).
void segments(const PagedAttention& a, const Geometry& G, int64_t j, int64_t g, int64_t r1, int64_t from,
              std::vector<int64_t>& start, std::vector<int64_t>& len) {
  start.clear();
  len.clear();
  const std::vector<int32_t>* slots =
      a.select_groups == 0 ? nullptr
                           : &a.select[static_cast<size_t>(j * a.select_groups + (a.select_groups == 1 ? 0 : g))];
  if (!slots || static_cast<int64_t>(slots->size()) == G.U) {  // dense: one run up to the causal end
    start.push_back(from);
    len.push_back(G.U * G.p + r1 - from);
    return;
  }
  for (int32_t u : *slots) {
    if (!start.empty() && start.back() + len.back() == u * G.p) len.back() += G.p;  // merge runs
    else {
      start.push_back(u * G.p);
      len.push_back(G.p);
    }
  }
  start.push_back(G.U * G.p);
  len.push_back(r1);
}

// Contiguous, scaled query rows of KV head g's query heads for chunk rows [r0, r1).
void gather_rows(const float* src, const Geometry& G, int64_t g, int64_t r0, int64_t r1, float scale, float* dst) {
  const int64_t nq = r1 - r0;
  for (int64_t h = 0; h < G.group; ++h)
    mat(dst + h * nq * G.hd, nq, G.hd) = scale * block(src + r0 * G.qd + (g * G.group + h) * G.hd, nq, G.hd, G.qd);
}

void scatter_rows(const float* src, const Geometry& G, int64_t g, int64_t r0, int64_t r1, float* dst) {
  const int64_t nq = r1 - r0;
  for (int64_t h = 0; h < G.group; ++h)
    block(dst + r0 * G.qd + (g * G.group + h) * G.hd, nq, G.hd, G.qd) = mat(src + h * nq * G.hd, nq, G.hd);
}

FlashKeys keys_of(const Gathered& ga, const Geometry& G, int64_t g, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& len) {
  FlashKeys k;
  k.hd = G.hd;
  k.ld = G.ld;
  k.k = ga.k.data() + g * G.Tk * G.hd;
  k.v = ga.v.data() + g * G.Tk * G.hd;
  k.kt = ga.kt.data() + g * G.hd * G.ld;
  k.vt = ga.vt.empty() ? nullptr : ga.vt.data() + g * G.hd * G.ld;
  k.seg_start = start.data();
  k.seg_len = len.data();
  k.segs = static_cast<int64_t>(start.size());
  k.own_start = G.U * G.p;
  return k;
}

}  // namespace

// Every (query page, KV head) writes its own rows of o and lse: all of them in parallel.
void attention_fwd(const PagedAttention& a, float* o, float* lse) {
  const Geometry G(a);
  const Gathered ga(a, G, false);
  const std::vector<int64_t> first = first_rows(a, G);
  const float sc = 1.0f / std::sqrt(static_cast<float>(G.hd));
  const int64_t qpages = (G.T + G.p - 1) / G.p;
  // ~4 flops per (query row, head, attended key, dim): the causal half of the own chunk and the prefix.
  const double flops = 4.0 * static_cast<double>(G.T * a.q_heads * G.hd) * static_cast<double>(G.U * G.p + G.T / 2);
  parallel_items(qpages * a.kv_heads, flops, [&](int64_t item) {
    const int64_t j = item / a.kv_heads, g = item % a.kv_heads;
    const int64_t r0 = j * G.p, r1 = std::min(G.T, r0 + G.p), nq = r1 - r0;
    FlashRows rows;
    rows.nq = nq;
    rows.heads = G.group;
    rows.q_first = r0;
    std::vector<int64_t> start, len;
    std::vector<float> qb(static_cast<size_t>(G.group * nq * G.hd)), ob(qb.size()),
        lb(static_cast<size_t>(G.group * nq)), scratch(static_cast<size_t>(flash_scratch_floats(rows, G.hd)));
    segments(a, G, j, g, r1, first.empty() ? 0 : first[static_cast<size_t>(r0)], start, len);
    gather_rows(a.q.f32(), G, g, r0, r1, sc, qb.data());
    rows.q = qb.data();
    rows.first = first.empty() ? nullptr : first.data() + r0;
    flash_fwd(keys_of(ga, G, g, start, len), rows, ob.data(), lb.data(), scratch.data());
    scatter_rows(ob.data(), G, g, r0, r1, o);
    for (int64_t h = 0; h < G.group; ++h)
      for (int64_t i = 0; i < nq; ++i) lse[(r0 + i) * a.q_heads + g * G.group + h] = lb[static_cast<size_t>(h * nq + i)];
  });
}

// dQ rows belong to one (query page, KV head); dK / dV rows are shared by the query pages. The
// pages of KV head g are dealt to S slices (page j to slice j % S), S fixed by the shapes; each
// (slice, head) accumulates its pages in order into its own dK / dV, and the slices are added in
// slice order: no atomics, and the same sums whatever the thread count.
void attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout, float* dq,
                   float* dk_own, float* dv_own, const std::vector<float*>& prefix_grad_pages) {
  const Geometry G(a);
  OOMB_ASSERT(static_cast<int64_t>(prefix_grad_pages.size()) == G.U);
  const Gathered ga(a, G, true);
  const std::vector<int64_t> first = first_rows(a, G);
  const int64_t qpages = (G.T + G.p - 1) / G.p;
  const int64_t slices = std::clamp<int64_t>((8 + a.kv_heads - 1) / a.kv_heads, 1, qpages);
  const auto per_slice = static_cast<size_t>(a.kv_heads * G.Tk * G.hd);
  std::vector<float> dkh(per_slice * static_cast<size_t>(slices), 0.0f), dvh(dkh.size(), 0.0f);
  const float sc = 1.0f / std::sqrt(static_cast<float>(G.hd));
  const double flops = 10.0 * static_cast<double>(G.T * a.q_heads * G.hd) * static_cast<double>(G.U * G.p + G.T / 2);
  parallel_items(slices * a.kv_heads, flops, [&](int64_t item) {
    const int64_t sl = item / a.kv_heads, g = item % a.kv_heads;
    float* dkg = dkh.data() + static_cast<size_t>(sl) * per_slice + g * G.Tk * G.hd;
    float* dvg = dvh.data() + static_cast<size_t>(sl) * per_slice + g * G.Tk * G.hd;
    std::vector<int64_t> start, len;
    std::vector<float> qb, ob, dob, dqb, lb, scratch;
    for (int64_t j = sl; j < qpages; j += slices) {
      const int64_t r0 = j * G.p, r1 = std::min(G.T, r0 + G.p), nq = r1 - r0;
      FlashRows rows;
      rows.nq = nq;
      rows.heads = G.group;
      rows.q_first = r0;
      qb.resize(static_cast<size_t>(G.group * nq * G.hd));
      ob.resize(qb.size());
      dob.resize(qb.size());
      dqb.resize(qb.size());
      lb.resize(static_cast<size_t>(G.group * nq));
      scratch.resize(static_cast<size_t>(flash_scratch_floats(rows, G.hd)));
      segments(a, G, j, g, r1, first.empty() ? 0 : first[static_cast<size_t>(r0)], start, len);
      rows.first = first.empty() ? nullptr : first.data() + r0;
      gather_rows(a.q.f32(), G, g, r0, r1, sc, qb.data());
      gather_rows(o, G, g, r0, r1, 1.0f, ob.data());
      gather_rows(dout, G, g, r0, r1, 1.0f, dob.data());
      for (int64_t h = 0; h < G.group; ++h)
        for (int64_t i = 0; i < nq; ++i) lb[static_cast<size_t>(h * nq + i)] = lse[(r0 + i) * a.q_heads + g * G.group + h];
      rows.q = qb.data();
      flash_bwd(keys_of(ga, G, g, start, len), rows, ob.data(), lb.data(), dob.data(), dqb.data(), dkg, dvg,
                scratch.data());
      scatter_rows(dqb.data(), G, g, r0, r1, dq);
    }
  });
  // Slice 0 += slices 1.., in slice order (pieces of the elements in parallel).
  parallel_pieces(static_cast<int64_t>(per_slice), 8192, static_cast<int64_t>(per_slice * slices),
                  [&](int64_t i0, int64_t i1) {
                    for (int64_t sl = 1; sl < slices; ++sl) {
                      const size_t off = static_cast<size_t>(sl) * per_slice;
                      for (int64_t i = i0; i < i1; ++i) {
                        dkh[static_cast<size_t>(i)] += dkh[off + static_cast<size_t>(i)];
                        dvh[static_cast<size_t>(i)] += dvh[off + static_cast<size_t>(i)];
                      }
                    }
                  });
  for (int64_t g = 0; g < a.kv_heads; ++g) {
    const float* dkg = dkh.data() + g * G.Tk * G.hd;
    const float* dvg = dvh.data() + g * G.Tk * G.hd;
    for (int64_t u = 0; u < G.U; ++u) {
      float* page = prefix_grad_pages[static_cast<size_t>(u)];
      block(page + g * G.hd, G.p, G.hd, G.kvd) += mat(dkg + u * G.p * G.hd, G.p, G.hd);
      block(page + G.p * G.kvd + g * G.hd, G.p, G.hd, G.kvd) += mat(dvg + u * G.p * G.hd, G.p, G.hd);
    }
    block(dk_own + g * G.hd, G.T, G.hd, G.kvd) = mat(dkg + G.U * G.p * G.hd, G.T, G.hd);
    block(dv_own + g * G.hd, G.T, G.hd, G.kvd) = mat(dvg + G.U * G.p * G.hd, G.T, G.hd);
  }
}

// Rows in parallel; the sinks' gradient per head in row order (the same sums whatever the threads).
void attention_sinks_fwd(const float* sinks, int64_t rows, int64_t q_heads, int64_t head_dim, float* o, float* lse) {
  parallel_pieces(rows, 64, rows * q_heads * head_dim, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < q_heads; ++h) {
        float& l = lse[t * q_heads + h];
        const float s = sinks[h], m = std::max(l, s);
        const float merged = m + std::log(std::exp(l - m) + std::exp(s - m));
        const float scale = std::exp(l - merged);
        float* row = o + (t * q_heads + h) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) row[d] *= scale;
        l = merged;
      }
  });
}

void attention_sinks_bwd(const float* sinks, int64_t rows, int64_t q_heads, int64_t head_dim, const float* o,
                         const float* lse, const float* dout, float* d_sinks) {
  for (int64_t h = 0; h < q_heads; ++h) {
    double acc = 0;
    for (int64_t t = 0; t < rows; ++t) {
      const float* orow = o + (t * q_heads + h) * head_dim;
      const float* drow = dout + (t * q_heads + h) * head_dim;
      float dot = 0;
      for (int64_t d = 0; d < head_dim; ++d) dot += orow[d] * drow[d];
      acc += static_cast<double>(std::exp(sinks[h] - lse[t * q_heads + h]) * dot);
    }
    d_sinks[h] -= static_cast<float>(acc);
  }
}

// Per head: scores and P V as (multithreaded) GEMMs, the masked softmax rows in parallel.
void masked_attention_fwd(const MaskedAttention& a, const float* q, const float* k, const float* v, float* o,
                          std::vector<float>& probs, const float* sinks) {
  const int64_t n = a.n, hd = a.head_dim, qd = a.q_heads * hd, kvd = a.kv_heads * hd, group = a.q_heads / a.kv_heads;
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  probs.assign(static_cast<size_t>(a.q_heads * n * n), 0.0f);
  for (int64_t h = 0; h < a.q_heads; ++h) {
    const int64_t g = h / group;
    const auto& allowed = a.allowed[static_cast<size_t>(a.groups == 1 ? 0 : g)];
    float* P = probs.data() + h * n * n;
    gemm(false, true, n, n, hd, sc, q + h * hd, qd, k + g * hd, kvd, 0.0f, P, n);
    if (sinks)
      for (int64_t i = 0; i < n; ++i) {  // softmax over the allowed keys and the sink
        float* row = P + i * n;
        const uint8_t* al = allowed.data() + i * n;
        double mx = sinks[h], z = 0;
        for (int64_t t = 0; t < n; ++t)
          if (al[t]) mx = std::max(mx, static_cast<double>(row[t]));
        z = std::exp(static_cast<double>(sinks[h]) - mx);
        for (int64_t t = 0; t < n; ++t) z += al[t] ? std::exp(static_cast<double>(row[t]) - mx) : 0.0;
        for (int64_t t = 0; t < n; ++t)
          row[t] = al[t] ? static_cast<float>(std::exp(static_cast<double>(row[t]) - mx) / z) : 0.0f;
      }
    else
      parallel_pieces(n, 8, n * n * 8, [&](int64_t i0, int64_t i1) {
        masked_softmax_rows(P + i0 * n, allowed.data() + i0 * n, i1 - i0, n);
      });
    gemm(false, false, n, hd, n, 1.0f, P, n, v + g * hd, kvd, 0.0f, o + h * hd, qd);
  }
}

// Heads in order (dK / dV of a KV head sum its query heads in head order); within a head the GEMMs
// are multithreaded and the dS rows run in parallel.
void masked_attention_bwd(const MaskedAttention& a, const float* q, const float* k, const float* v,
                          const std::vector<float>& probs, const float* dout, float* dq, float* dk, float* dv,
                          float* d_sinks) {
  const int64_t n = a.n, hd = a.head_dim, qd = a.q_heads * hd, kvd = a.kv_heads * hd, group = a.q_heads / a.kv_heads;
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> dP(static_cast<size_t>(n * n));
  std::fill_n(dk, n * kvd, 0.0f);
  std::fill_n(dv, n * kvd, 0.0f);
  for (int64_t h = 0; h < a.q_heads; ++h) {
    const int64_t g = h / group;
    const float* P = probs.data() + h * n * n;
    const float* dO = dout + h * hd;
    gemm(false, true, n, n, hd, 1.0f, dO, qd, v + g * hd, kvd, 0.0f, dP.data(), n);
    if (d_sinks) {  // d s_h = -sum_i p_sink(i) rowsum(P * dP)(i), p_sink = 1 - the keys' probabilities
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) {
        double mass = 0, rs = 0;
        for (int64_t t = 0; t < n; ++t) {
          mass += P[i * n + t];
          rs += static_cast<double>(P[i * n + t]) * dP[static_cast<size_t>(i * n + t)];
        }
        acc += (1.0 - mass) * rs;
      }
      d_sinks[h] -= static_cast<float>(acc);
    }
    // dS = P * (dP - rowsum(P * dP))
    parallel_pieces(n, 8, n * n * 4, [&](int64_t i0, int64_t i1) {
      softmax_bwd_rows(P + i0 * n, dP.data() + i0 * n, i1 - i0, n);
    });
    gemm(false, false, n, hd, n, sc, dP.data(), n, k + g * hd, kvd, 0.0f, dq + h * hd, qd);
    gemm(true, false, n, hd, n, sc, dP.data(), n, q + h * hd, qd, 1.0f, dk + g * hd, kvd);
    gemm(true, false, n, hd, n, 1.0f, P, n, dO, qd, 1.0f, dv + g * hd, kvd);
  }
}

}  // namespace oomb::executor::cpu
