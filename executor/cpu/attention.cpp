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
#include "executor/cpu/ops.h"

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
    for (int64_t g = 0; g < a.kv_heads; ++g) {
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
    }
  }
};

// The segments of gathered rows query page j (last own row r1 - 1) attends for KV head g.
void segments(const PagedAttention& a, const Geometry& G, int64_t j, int64_t g, int64_t r1,
              std::vector<int64_t>& start, std::vector<int64_t>& len) {
  start.clear();
  len.clear();
  const std::vector<int32_t>* slots =
      a.select_groups == 0 ? nullptr
                           : &a.select[static_cast<size_t>(j * a.select_groups + (a.select_groups == 1 ? 0 : g))];
  if (!slots || static_cast<int64_t>(slots->size()) == G.U) {  // dense: one run up to the causal end
    start.push_back(0);
    len.push_back(G.U * G.p + r1);
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

void attention_fwd(const PagedAttention& a, float* o, float* lse) {
  const Geometry G(a);
  const Gathered ga(a, G, false);
  const float sc = 1.0f / std::sqrt(static_cast<float>(G.hd));
  std::vector<int64_t> start, len;
  std::vector<float> qb, ob, lb, scratch;
  for (int64_t j = 0, r0 = 0; r0 < G.T; ++j, r0 += G.p) {
    const int64_t r1 = std::min(G.T, r0 + G.p), nq = r1 - r0;
    FlashRows rows;
    rows.nq = nq;
    rows.heads = G.group;
    rows.q_first = r0;
    qb.resize(static_cast<size_t>(G.group * nq * G.hd));
    ob.resize(qb.size());
    lb.resize(static_cast<size_t>(G.group * nq));
    scratch.resize(static_cast<size_t>(flash_scratch_floats(rows, G.hd)));
    for (int64_t g = 0; g < a.kv_heads; ++g) {
      segments(a, G, j, g, r1, start, len);
      gather_rows(a.q.f32(), G, g, r0, r1, sc, qb.data());
      rows.q = qb.data();
      flash_fwd(keys_of(ga, G, g, start, len), rows, ob.data(), lb.data(), scratch.data());
      scatter_rows(ob.data(), G, g, r0, r1, o);
      for (int64_t h = 0; h < G.group; ++h)
        for (int64_t i = 0; i < nq; ++i) lse[(r0 + i) * a.q_heads + g * G.group + h] = lb[static_cast<size_t>(h * nq + i)];
    }
  }
}

void attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout, float* dq,
                   float* dk_own, float* dv_own, const std::vector<float*>& prefix_grad_pages) {
  const Geometry G(a);
  OOMB_ASSERT(static_cast<int64_t>(prefix_grad_pages.size()) == G.U);
  const Gathered ga(a, G, true);
  std::vector<float> dkh(ga.k.size(), 0.0f), dvh(ga.k.size(), 0.0f);
  const float sc = 1.0f / std::sqrt(static_cast<float>(G.hd));
  std::vector<int64_t> start, len;
  std::vector<float> qb, ob, dob, dqb, lb, scratch;
  for (int64_t j = 0, r0 = 0; r0 < G.T; ++j, r0 += G.p) {
    const int64_t r1 = std::min(G.T, r0 + G.p), nq = r1 - r0;
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
    for (int64_t g = 0; g < a.kv_heads; ++g) {
      segments(a, G, j, g, r1, start, len);
      gather_rows(a.q.f32(), G, g, r0, r1, sc, qb.data());
      gather_rows(o, G, g, r0, r1, 1.0f, ob.data());
      gather_rows(dout, G, g, r0, r1, 1.0f, dob.data());
      for (int64_t h = 0; h < G.group; ++h)
        for (int64_t i = 0; i < nq; ++i) lb[static_cast<size_t>(h * nq + i)] = lse[(r0 + i) * a.q_heads + g * G.group + h];
      rows.q = qb.data();
      flash_bwd(keys_of(ga, G, g, start, len), rows, ob.data(), lb.data(), dob.data(), dqb.data(),
                dkh.data() + g * G.Tk * G.hd, dvh.data() + g * G.Tk * G.hd, scratch.data());
      scatter_rows(dqb.data(), G, g, r0, r1, dq);
    }
  }
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

void masked_attention_fwd(const MaskedAttention& a, const float* q, const float* k, const float* v, float* o,
                          std::vector<float>& probs) {
  const int64_t n = a.n, hd = a.head_dim, qd = a.q_heads * hd, kvd = a.kv_heads * hd, group = a.q_heads / a.kv_heads;
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  probs.assign(static_cast<size_t>(a.q_heads * n * n), 0.0f);
  for (int64_t h = 0; h < a.q_heads; ++h) {
    const int64_t g = h / group;
    const auto& allowed = a.allowed[static_cast<size_t>(a.groups == 1 ? 0 : g)];
    auto P = mat(probs.data() + h * n * n, n, n);
    P.noalias() = sc * (block(q + h * hd, n, hd, qd) * block(k + g * hd, n, hd, kvd).transpose());
    for (int64_t i = 0; i < n; ++i) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < n; ++t)
        if (allowed[static_cast<size_t>(i * n + t)]) mx = std::max(mx, P(i, t));
      double sum = 0;
      for (int64_t t = 0; t < n; ++t) {
        P(i, t) = allowed[static_cast<size_t>(i * n + t)] ? std::exp(P(i, t) - mx) : 0.0f;
        sum += P(i, t);
      }
      P.row(i) /= static_cast<float>(sum);
    }
    block(o + h * hd, n, hd, qd).noalias() = P * block(v + g * hd, n, hd, kvd);
  }
}

void masked_attention_bwd(const MaskedAttention& a, const float* q, const float* k, const float* v,
                          const std::vector<float>& probs, const float* dout, float* dq, float* dk, float* dv) {
  const int64_t n = a.n, hd = a.head_dim, qd = a.q_heads * hd, kvd = a.kv_heads * hd, group = a.q_heads / a.kv_heads;
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  RowMat dP(n, n);
  std::fill_n(dk, n * kvd, 0.0f);
  std::fill_n(dv, n * kvd, 0.0f);
  for (int64_t h = 0; h < a.q_heads; ++h) {
    const int64_t g = h / group;
    const auto P = mat(probs.data() + h * n * n, n, n);
    const auto dO = block(dout + h * hd, n, hd, qd);
    dP.noalias() = dO * block(v + g * hd, n, hd, kvd).transpose();
    // dS = P * (dP - rowsum(P * dP))
    const Eigen::VectorXf rs = (P.array() * dP.array()).rowwise().sum();
    dP.array() = P.array() * (dP.array().colwise() - rs.array());
    block(dq + h * hd, n, hd, qd).noalias() = sc * (dP * block(k + g * hd, n, hd, kvd));
    block(dk + g * hd, n, hd, kvd).noalias() += sc * (dP.transpose() * block(q + h * hd, n, hd, qd));
    block(dv + g * hd, n, hd, kvd).noalias() += P.transpose() * dO;
  }
}

}  // namespace oomb::executor::cpu
