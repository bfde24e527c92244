#include "executor/cpu/reference.h"

#include <algorithm>
#include <cmath>

#include <Eigen/Core>

#include "core/error.h"

namespace oomb::executor::cpu {

namespace {
using Vec = std::vector<float>;
Vec zeros(int64_t n) { return Vec(static_cast<size_t>(n), 0.0f); }

struct LayerActs {
  Vec x, h1, rstd1, q, k, v, o, x2, h2, rstd2, g, u, m;
  Vec q_pre, k_pre, rstd_q, rstd_k;  // q/k RMSNorm (Qwen3): the projections before it, per-head rstd
  std::vector<float> probs;
  // A MoE layer, token by token (no packing): the router's logits [n, E], each token's k experts
  // and weights [n, k], and per (token, j) the expert's gate, up, product [fe] and output [H].
  Vec logits, weights, eg, eu, em, eo;
  Vec sg, su, sm;  // the shared experts' gate, up and product [n, fs] (as one MLP)
  Vec ao, mo, rstd_ao, rstd_mo;  // sandwich norms: the attention's and the MLP's outputs before them, rstd
  std::vector<int32_t> experts;
  Vec aux_dlogits;  // the load-balancing loss's gradient into the logits (empty without it)
};

// A MoE layer's MLP, one token at a time (independent of the executor's packed dispatch): the k
// largest logits (descending, equal ones by ascending expert), weighted by the softmax of the k
// selected (renormalize) or of every expert; y [n, H] = the weighted sum of the experts' outputs,
// plus the shared experts' SwiGLU MLP of every token.
float swiglu_limit(const models::ModelSpec& m) { return static_cast<float>(m.mlp_clamp()); }  // the ops' float
// The model's gated activation (Engine::gated_fwd's): SwiGLU (gpt-oss's clamped) or GeGLU.
void gated_fwd(const models::ModelSpec& m, const float* g, const float* u, int64_t n, float* out) {
  if (m.mlp == models::Mlp::geglu_tanh) geglu_fwd(g, u, n, out);
  else swiglu_fwd(g, u, n, out, swiglu_limit(m));
}
void gated_bwd(const models::ModelSpec& m, const float* g, const float* u, const float* d, int64_t n, float* dg, float* du) {
  if (m.mlp == models::Mlp::geglu_tanh) geglu_bwd(g, u, d, n, dg, du);
  else swiglu_bwd(g, u, d, n, dg, du, swiglu_limit(m));
}

void moe_reference_fwd(const models::ModelSpec& m, const ParamLayout& L, const LayerOffsets& o, const float* P,
                       int64_t n, const std::vector<int32_t>* routes, LayerActs& A, float* y) {
  const int64_t H = m.hidden, E = m.moe.experts, K = m.moe.experts_per_token, Fe = m.moe.expert_ffn_hidden;
  const int64_t S = L.expert_stride();
  A.logits = zeros(n * E), A.weights = zeros(n * K), A.experts.assign(static_cast<size_t>(n * K), 0);
  A.eg = zeros(n * K * Fe), A.eu = zeros(n * K * Fe), A.em = zeros(n * K * Fe), A.eo = zeros(n * K * H);
  linear_fwd(A.h2.data(), n, H, P + o.router, o.router_bias >= 0 ? P + o.router_bias : nullptr, E, A.logits.data());
  const int64_t b0 = L.expert_bias();  // an expert's biases (gate, up, down) inside its stride
  std::fill_n(y, n * H, 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    const float* l = A.logits.data() + t * E;
    std::vector<bool> taken(static_cast<size_t>(E), false);
    for (int64_t j = 0; j < K; ++j) {
      int64_t best = -1;
      if (routes) {
        best = (*routes)[static_cast<size_t>(t * K + j)];
        OOMB_ASSERT(best >= 0 && best < E && !taken[static_cast<size_t>(best)], "a route names no new expert");
      } else {
        for (int64_t e = 0; e < E; ++e)
          if (!taken[static_cast<size_t>(e)] && (best < 0 || l[e] > l[best])) best = e;
      }
      taken[static_cast<size_t>(best)] = true;
      A.experts[static_cast<size_t>(t * K + j)] = static_cast<int32_t>(best);
    }
    double denom = 0;
    for (int64_t e = 0; e < E; ++e)
      if (m.moe.routing != models::Routing::softmax_topk || taken[static_cast<size_t>(e)])
        denom += std::exp(static_cast<double>(l[e]));
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = A.experts[static_cast<size_t>(t * K + j)], r = t * K + j;
      A.weights[static_cast<size_t>(r)] = static_cast<float>(std::exp(static_cast<double>(l[e])) / denom);
      const float* W = P + o.experts + e * S;
      linear_fwd(A.h2.data() + t * H, 1, H, W, b0 < 0 ? nullptr : W + b0, Fe, A.eg.data() + r * Fe);
      linear_fwd(A.h2.data() + t * H, 1, H, W + Fe * H, b0 < 0 ? nullptr : W + b0 + Fe, Fe, A.eu.data() + r * Fe);
      gated_fwd(m, A.eg.data() + r * Fe, A.eu.data() + r * Fe, Fe, A.em.data() + r * Fe);
      linear_fwd(A.em.data() + r * Fe, 1, Fe, W + 2 * Fe * H, b0 < 0 ? nullptr : W + b0 + 2 * Fe, H, A.eo.data() + r * H);
      for (int64_t i = 0; i < H; ++i)
        y[t * H + i] += A.weights[static_cast<size_t>(r)] * A.eo[static_cast<size_t>(r * H + i)];
    }
  }
  if (const int64_t Fs = m.moe.shared_width(); Fs > 0) {
    A.sg = zeros(n * Fs), A.su = zeros(n * Fs), A.sm = zeros(n * Fs);
    Vec ys = zeros(n * H);
    linear_fwd(A.h2.data(), n, H, P + o.shared_gate, nullptr, Fs, A.sg.data());
    linear_fwd(A.h2.data(), n, H, P + o.shared_up, nullptr, Fs, A.su.data());
    gated_fwd(m, A.sg.data(), A.su.data(), n * Fs, A.sm.data());
    linear_fwd(A.sm.data(), n, Fs, P + o.shared_down, nullptr, H, ys.data());
    for (int64_t i = 0; i < n * H; ++i) y[i] += ys[static_cast<size_t>(i)];
  }
}

// Its backward from dy [n, H] into dh2 [n, H] (overwritten) and the router's and experts' gradients.
void moe_reference_bwd(const models::ModelSpec& m, const ParamLayout& L, const LayerOffsets& o, const float* P, float* G,
                       int64_t n, const LayerActs& A, const float* dy, float* dh2) {
  const int64_t H = m.hidden, E = m.moe.experts, K = m.moe.experts_per_token, Fe = m.moe.expert_ffn_hidden;
  const int64_t S = L.expert_stride(), b0 = L.expert_bias();
  std::fill_n(dh2, n * H, 0.0f);
  Vec dlogits = zeros(n * E), deo = zeros(H), dem = zeros(Fe), deg = zeros(Fe), deu = zeros(Fe);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> dw(static_cast<size_t>(K));
    for (int64_t j = 0; j < K; ++j) {
      const int64_t e = A.experts[static_cast<size_t>(t * K + j)], r = t * K + j;
      const float w = A.weights[static_cast<size_t>(r)];
      double dot = 0;
      for (int64_t i = 0; i < H; ++i) {
        deo[static_cast<size_t>(i)] = w * dy[t * H + i];
        dot += static_cast<double>(dy[t * H + i]) * A.eo[static_cast<size_t>(r * H + i)];
      }
      dw[static_cast<size_t>(j)] = dot;
      const float* W = P + o.experts + e * S;
      float* GW = G + o.experts + e * S;
      linear_bwd(A.em.data() + r * Fe, 1, Fe, W + 2 * Fe * H, H, deo.data(), dem.data(), false, GW + 2 * Fe * H,
                 b0 < 0 ? nullptr : GW + b0 + 2 * Fe);
      gated_bwd(m, A.eg.data() + r * Fe, A.eu.data() + r * Fe, dem.data(), Fe, deg.data(), deu.data());
      linear_bwd(A.h2.data() + t * H, 1, H, W, Fe, deg.data(), dh2 + t * H, true, GW, b0 < 0 ? nullptr : GW + b0);
      linear_bwd(A.h2.data() + t * H, 1, H, W + Fe * H, Fe, deu.data(), dh2 + t * H, true, GW + Fe * H,
                 b0 < 0 ? nullptr : GW + b0 + Fe);
    }
    // The weights' Jacobian written out: w_j = exp(l_{e_j}) / Z, Z over the selected or every expert.
    const float* l = A.logits.data() + t * E;
    double Z = 0;
    std::vector<bool> taken(static_cast<size_t>(E), false);
    for (int64_t j = 0; j < K; ++j) taken[static_cast<size_t>(A.experts[static_cast<size_t>(t * K + j)])] = true;
    for (int64_t e = 0; e < E; ++e)
      if (m.moe.routing != models::Routing::softmax_topk || taken[static_cast<size_t>(e)])
        Z += std::exp(static_cast<double>(l[e]));
    for (int64_t e = 0; e < E; ++e) {
      if (m.moe.routing == models::Routing::softmax_topk && !taken[static_cast<size_t>(e)]) continue;
      const double pe = std::exp(static_cast<double>(l[e])) / Z;
      double d = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t ej = A.experts[static_cast<size_t>(t * K + j)];
        const double wj = A.weights[static_cast<size_t>(t * K + j)];
        d += dw[static_cast<size_t>(j)] * wj * ((ej == e ? 1.0 : 0.0) - pe);
      }
      dlogits[static_cast<size_t>(t * E + e)] = static_cast<float>(d);
    }
  }
  for (size_t i = 0; i < A.aux_dlogits.size(); ++i) dlogits[i] += A.aux_dlogits[i];
  linear_bwd(A.h2.data(), n, H, P + o.router, E, dlogits.data(), dh2, true, G + o.router,
             o.router_bias >= 0 ? G + o.router_bias : nullptr);
  if (const int64_t Fs = m.moe.shared_width(); Fs > 0) {
    Vec dsm = zeros(n * Fs), dsg = zeros(n * Fs), dsu = zeros(n * Fs);
    linear_bwd(A.sm.data(), n, Fs, P + o.shared_down, H, dy, dsm.data(), false, G + o.shared_down, nullptr);
    gated_bwd(m, A.sg.data(), A.su.data(), dsm.data(), n * Fs, dsg.data(), dsu.data());
    linear_bwd(A.h2.data(), n, H, P + o.shared_gate, Fs, dsg.data(), dh2, true, G + o.shared_gate, nullptr);
    linear_bwd(A.h2.data(), n, H, P + o.shared_up, Fs, dsu.data(), dh2, true, G + o.shared_up, nullptr);
  }
}
}  // namespace

MaskedAttention causal_mask(const models::ModelSpec& m, int64_t n) {
  MaskedAttention a;
  a.n = n;
  a.q_heads = m.q_heads;
  a.kv_heads = m.kv_heads;
  a.head_dim = m.head_dim;
  a.groups = 1;
  a.allowed.assign(1, std::vector<uint8_t>(static_cast<size_t>(n * n), 0));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t <= i; ++t) a.allowed[0][static_cast<size_t>(i * n + t)] = 1;
  return a;
}

MaskedAttention layer_mask(const models::ModelSpec& m, int64_t n, int64_t layer) {
  MaskedAttention a = causal_mask(m, n);
  const models::LayerAttention kind = m.attention_of(layer);
  if (kind == models::LayerAttention::global) return a;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < models::first_key(kind, m.window_tokens(kind), i); ++t)
      a.allowed[0][static_cast<size_t>(i * n + t)] = 0;
  return a;
}

MaskedAttention selection_mask(const models::ModelSpec& m, int64_t n, int64_t chunk_tokens, int64_t page_tokens,
                               const SelectionLog& log, int64_t layer) {
  MaskedAttention a = layer_mask(m, n, layer);
  int64_t groups = 1;
  for (int64_t c = 0; c < log.chunks(); ++c)
    if (!log.at(c, layer).dense) groups = std::max(groups, log.at(c, layer).groups);
  a.groups = groups;
  a.allowed.resize(static_cast<size_t>(groups), a.allowed[0]);
  for (int64_t g = 0; g < groups; ++g) {
    auto& al = a.allowed[static_cast<size_t>(g)];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = i / chunk_tokens, start = c * chunk_tokens;
      const ChunkSelection& s = log.at(c, layer);
      if (s.dense) continue;
      const auto& sel = s.pages[static_cast<size_t>(((i - start) / page_tokens) * s.groups + (s.groups == 1 ? 0 : g))];
      for (int64_t t = 0; t < start; ++t)
        al[static_cast<size_t>(i * n + t)] = std::binary_search(sel.begin(), sel.end(), static_cast<int32_t>(t / page_tokens));
    }
  }
  return a;
}

ReferenceResult full_sequence_reference(const models::ModelSpec& m, const Weights& w,
                                        const std::vector<int32_t>& tokens, const std::vector<MaskedAttention>* masks,
                                        const std::vector<std::vector<int32_t>>* routes, double router_aux_loss_coef) {
  const auto n = static_cast<int64_t>(tokens.size());
  OOMB_ASSERT(n >= 2 && w.layout.layers() == m.layers);
  const int64_t H = m.hidden, qd = m.q_dim(), kvd = m.kv_dim(), F = m.ffn_hidden, V = m.vocab;
  const auto eps = static_cast<float>(m.norm_eps);
  const ParamLayout& L = w.layout;
  const float* P = w.data.data();
  ReferenceResult res;
  res.grads = zero_params(m);
  float* G = res.grads.data.data();
  // Without masks, each layer's own (one per attention kind, built once).
  std::vector<MaskedAttention> kind_masks;
  std::vector<const MaskedAttention*> layer_masks;
  kind_masks.reserve(3);  // at most one per kind: the pointers stay valid
  for (int64_t l = 0; l < m.layers; ++l) {
    if (masks) {
      layer_masks.push_back(&(*masks)[static_cast<size_t>(l)]);
      continue;
    }
    int64_t same = l - 1;
    while (same >= 0 && m.attention_of(same) != m.attention_of(l)) --same;
    if (same >= 0) {
      layer_masks.push_back(layer_masks[static_cast<size_t>(same)]);
      continue;
    }
    kind_masks.push_back(layer_mask(m, n, l));
    layer_masks.push_back(&kind_masks.back());
  }
  const models::Rope rope = models::rope_of(m);

  std::vector<LayerActs> acts(static_cast<size_t>(m.layers));
  Vec x = zeros(n * H);
  embedding_fwd(tokens.data(), n, P + L.embed(), H, x.data());
  for (int64_t l = 0; l < m.layers; ++l) {
    const LayerOffsets& o = L.layer(l);
    LayerActs& A = acts[static_cast<size_t>(l)];
    const MaskedAttention& mask = *layer_masks[static_cast<size_t>(l)];
    A.x = x;
    A.h1 = zeros(n * H), A.rstd1 = zeros(n), A.q = zeros(n * qd), A.k = zeros(n * kvd), A.v = zeros(n * kvd);
    A.o = zeros(n * qd), A.x2 = zeros(n * H), A.h2 = zeros(n * H), A.rstd2 = zeros(n);
    A.g = zeros(n * F), A.u = zeros(n * F), A.m = zeros(n * F);
    rmsnorm_fwd(A.x.data(), P + o.input_norm, n, H, eps, A.h1.data(), A.rstd1.data());
    linear_fwd(A.h1.data(), n, H, P + o.q, o.q_bias >= 0 ? P + o.q_bias : nullptr, qd, A.q.data());
    linear_fwd(A.h1.data(), n, H, P + o.k, o.k_bias >= 0 ? P + o.k_bias : nullptr, kvd, A.k.data());
    linear_fwd(A.h1.data(), n, H, P + o.v, o.v_bias >= 0 ? P + o.v_bias : nullptr, kvd, A.v.data());
    if (m.qk_norm) {  // Hugging Face Qwen3: RMSNorm over each head's head_dim, before RoPE
      A.q_pre = A.q, A.k_pre = A.k, A.rstd_q = zeros(n * m.q_heads), A.rstd_k = zeros(n * m.kv_heads);
      rmsnorm_fwd(A.q_pre.data(), P + o.q_norm, n * m.q_heads, m.head_dim, eps, A.q.data(), A.rstd_q.data());
      rmsnorm_fwd(A.k_pre.data(), P + o.k_norm, n * m.kv_heads, m.head_dim, eps, A.k.data(), A.rstd_k.data());
    }
    rope_fwd(A.q.data(), n, m.q_heads, m.head_dim, 0, rope);
    rope_fwd(A.k.data(), n, m.kv_heads, m.head_dim, 0, rope);
    masked_attention_fwd(mask, A.q.data(), A.k.data(), A.v.data(), A.o.data(), A.probs,
                         o.sinks >= 0 ? P + o.sinks : nullptr);
    Vec a = zeros(n * H);
    linear_fwd(A.o.data(), n, qd, P + o.o, o.o_bias >= 0 ? P + o.o_bias : nullptr, H, a.data());
    if (m.sandwich_norms) {  // Gemma: the attention's output normalised before the residual add
      A.ao = a, A.rstd_ao = zeros(n);
      rmsnorm_fwd(A.ao.data(), P + o.attn_out_norm, n, H, eps, a.data(), A.rstd_ao.data());
    }
    for (int64_t i = 0; i < n * H; ++i) A.x2[static_cast<size_t>(i)] = A.x[static_cast<size_t>(i)] + a[static_cast<size_t>(i)];
    rmsnorm_fwd(A.x2.data(), P + o.post_norm, n, H, eps, A.h2.data(), A.rstd2.data());
    if (o.router >= 0) {
      Vec d = zeros(n * H);
      const std::vector<int32_t>* r = routes ? &(*routes)[static_cast<size_t>(l)] : nullptr;
      OOMB_ASSERT(!r || static_cast<int64_t>(r->size()) == n * m.moe.experts_per_token, "routes of another sequence");
      moe_reference_fwd(m, L, o, P, n, r, A, d.data());
      for (int64_t i = 0; i < n * H; ++i)
        x[static_cast<size_t>(i)] = A.x2[static_cast<size_t>(i)] + d[static_cast<size_t>(i)];
      continue;
    }
    linear_fwd(A.h2.data(), n, H, P + o.gate, nullptr, F, A.g.data());
    linear_fwd(A.h2.data(), n, H, P + o.up, nullptr, F, A.u.data());
    gated_fwd(m, A.g.data(), A.u.data(), n * F, A.m.data());
    Vec d = zeros(n * H);
    linear_fwd(A.m.data(), n, F, P + o.down, nullptr, H, d.data());
    if (m.sandwich_norms) {  // and the MLP's
      A.mo = d, A.rstd_mo = zeros(n);
      rmsnorm_fwd(A.mo.data(), P + o.mlp_out_norm, n, H, eps, d.data(), A.rstd_mo.data());
    }
    for (int64_t i = 0; i < n * H; ++i) x[static_cast<size_t>(i)] = A.x2[static_cast<size_t>(i)] + d[static_cast<size_t>(i)];
  }
  Vec hf = zeros(n * H), rstdf = zeros(n), logits = zeros(n * V);
  rmsnorm_fwd(x.data(), P + L.final_norm(), n, H, eps, hf.data(), rstdf.data());
  linear_fwd(hf.data(), n, H, P + L.lm_head(), nullptr, V, logits.data());
  std::vector<int32_t> targets(static_cast<size_t>(n), -1);
  for (int64_t t = 0; t + 1 < n; ++t) targets[static_cast<size_t>(t)] = tokens[static_cast<size_t>(t + 1)];
  const float scale = 1.0f / static_cast<float>(n - 1);
  res.loss = cross_entropy(logits.data(), n, V, targets.data(), scale) / static_cast<double>(n - 1);
  if (router_aux_loss_coef > 0 && m.moe.present()) {
    // Hugging Face's load_balancing_loss_func over every MoE layer's logits concatenated (M rows):
    // E sum_e f_e P_e, f_e the share of the M k routed copies' one-hot top-k sent to e (a constant of
    // the gradient), P_e the mean softmax probability; in double, from the definition.
    const int64_t E = m.moe.experts, K = m.moe.experts_per_token;
    std::vector<double> f(static_cast<size_t>(E), 0.0), Pm(static_cast<size_t>(E), 0.0);
    int64_t moe_layers = 0;
    auto softmax = [&](const float* l, std::vector<double>& p) {
      p.assign(static_cast<size_t>(E), 0.0);
      double mx = l[0], z = 0;
      for (int64_t e = 1; e < E; ++e) mx = std::max(mx, static_cast<double>(l[e]));
      for (int64_t e = 0; e < E; ++e) z += p[static_cast<size_t>(e)] = std::exp(static_cast<double>(l[e]) - mx);
      for (double& pe : p) pe /= z;
    };
    std::vector<double> p;
    for (int64_t l = 0; l < m.layers; ++l) {
      const LayerActs& A = acts[static_cast<size_t>(l)];
      if (L.layer(l).router < 0) continue;
      ++moe_layers;
      for (int64_t t = 0; t < n; ++t) {
        softmax(A.logits.data() + t * E, p);
        for (int64_t e = 0; e < E; ++e) Pm[static_cast<size_t>(e)] += p[static_cast<size_t>(e)];
        for (int64_t j = 0; j < K; ++j) f[static_cast<size_t>(A.experts[static_cast<size_t>(t * K + j)])] += 1;
      }
    }
    const double M = static_cast<double>(moe_layers * n);
    double aux = 0;
    for (int64_t e = 0; e < E; ++e) aux += (f[static_cast<size_t>(e)] / M) * (Pm[static_cast<size_t>(e)] / M);
    res.loss += router_aux_loss_coef * static_cast<double>(E) * aux;
    // d/d logit_te of coef E sum_e f_e (1/M) sum_t p_te = coef E / M p_te (f_e - sum_e' p_te' f_e').
    for (int64_t l = 0; l < m.layers; ++l) {
      LayerActs& A = acts[static_cast<size_t>(l)];
      if (L.layer(l).router < 0) continue;
      A.aux_dlogits = zeros(n * E);
      for (int64_t t = 0; t < n; ++t) {
        softmax(A.logits.data() + t * E, p);
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += p[static_cast<size_t>(e)] * f[static_cast<size_t>(e)] / M;
        for (int64_t e = 0; e < E; ++e)
          A.aux_dlogits[static_cast<size_t>(t * E + e)] = static_cast<float>(
              router_aux_loss_coef * static_cast<double>(E) / M * p[static_cast<size_t>(e)] *
              (f[static_cast<size_t>(e)] / M - dot));
      }
    }
  }

  // Backward.
  Vec dhf = zeros(n * H), dx = zeros(n * H);
  linear_bwd(hf.data(), n, H, P + L.lm_head(), V, logits.data(), dhf.data(), false, G + L.lm_head(), nullptr);
  rmsnorm_bwd(x.data(), P + L.final_norm(), rstdf.data(), dhf.data(), n, H, dx.data(), G + L.final_norm());
  // The gradient of a sublayer's output from d, the gradient after its sandwich norm (adding the
  // norm weight's gradient); d itself without sandwich norms.
  auto sublayer_out_grad = [&](const Vec& out, int64_t norm, const Vec& rstd, const Vec& d) {
    if (!m.sandwich_norms) return d;
    Vec g = zeros(n * H);
    rmsnorm_bwd(out.data(), P + norm, rstd.data(), d.data(), n, H, g.data(), G + norm);
    return g;
  };
  for (int64_t l = m.layers - 1; l >= 0; --l) {
    const LayerOffsets& o = L.layer(l);
    LayerActs& A = acts[static_cast<size_t>(l)];
    const MaskedAttention& mask = *layer_masks[static_cast<size_t>(l)];
    // dx holds d(layer output); it is also d(x2) through the residual.
    Vec dx2 = dx, dm = zeros(n * F), dg = zeros(n * F), du = zeros(n * F), dh2 = zeros(n * H);
    if (o.router >= 0) {
      moe_reference_bwd(m, L, o, P, G, n, A, dx.data(), dh2.data());
    } else {
      const Vec dmo = sublayer_out_grad(A.mo, o.mlp_out_norm, A.rstd_mo, dx);
      linear_bwd(A.m.data(), n, F, P + o.down, H, dmo.data(), dm.data(), false, G + o.down, nullptr);
      gated_bwd(m, A.g.data(), A.u.data(), dm.data(), n * F, dg.data(), du.data());
      linear_bwd(A.h2.data(), n, H, P + o.gate, F, dg.data(), dh2.data(), false, G + o.gate, nullptr);
      linear_bwd(A.h2.data(), n, H, P + o.up, F, du.data(), dh2.data(), true, G + o.up, nullptr);
    }
    rmsnorm_bwd(A.x2.data(), P + o.post_norm, A.rstd2.data(), dh2.data(), n, H, dx2.data(), G + o.post_norm);
    Vec dout = zeros(n * qd), dq = zeros(n * qd), dk = zeros(n * kvd), dv = zeros(n * kvd), dh1 = zeros(n * H);
    const Vec dao = sublayer_out_grad(A.ao, o.attn_out_norm, A.rstd_ao, dx2);
    linear_bwd(A.o.data(), n, qd, P + o.o, H, dao.data(), dout.data(), false, G + o.o,
               o.o_bias >= 0 ? G + o.o_bias : nullptr);
    masked_attention_bwd(mask, A.q.data(), A.k.data(), A.v.data(), A.probs, dout.data(), dq.data(), dk.data(),
                         dv.data(), o.sinks >= 0 ? G + o.sinks : nullptr);
    rope_bwd(dq.data(), n, m.q_heads, m.head_dim, 0, rope);
    rope_bwd(dk.data(), n, m.kv_heads, m.head_dim, 0, rope);
    if (m.qk_norm) {
      Vec dq_pre = zeros(n * qd), dk_pre = zeros(n * kvd);
      rmsnorm_bwd(A.q_pre.data(), P + o.q_norm, A.rstd_q.data(), dq.data(), n * m.q_heads, m.head_dim, dq_pre.data(),
                  G + o.q_norm);
      rmsnorm_bwd(A.k_pre.data(), P + o.k_norm, A.rstd_k.data(), dk.data(), n * m.kv_heads, m.head_dim, dk_pre.data(),
                  G + o.k_norm);
      dq = std::move(dq_pre), dk = std::move(dk_pre);
    }
    linear_bwd(A.h1.data(), n, H, P + o.q, qd, dq.data(), dh1.data(), false, G + o.q,
               o.q_bias >= 0 ? G + o.q_bias : nullptr);
    linear_bwd(A.h1.data(), n, H, P + o.k, kvd, dk.data(), dh1.data(), true, G + o.k,
               o.k_bias >= 0 ? G + o.k_bias : nullptr);
    linear_bwd(A.h1.data(), n, H, P + o.v, kvd, dv.data(), dh1.data(), true, G + o.v,
               o.v_bias >= 0 ? G + o.v_bias : nullptr);
    dx = dx2;
    rmsnorm_bwd(A.x.data(), P + o.input_norm, A.rstd1.data(), dh1.data(), n, H, dx.data(), G + o.input_norm);
  }
  embedding_bwd(tokens.data(), n, dx.data(), H, G + L.embed());
  return res;
}

ReferenceResult lora_reference(const models::ModelSpec& m, const Weights& base, const ParamTensors& adapters,
                               double scale, const std::vector<int32_t>& tokens,
                               const std::vector<MaskedAttention>* masks,
                               const std::vector<std::vector<int32_t>>* routes, double router_aux_loss_coef) {
  OOMB_ASSERT(adapters.layout.is_lora() && adapters.layout.layers() == m.layers, "lora_reference needs m's adapters");
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using FMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t r = adapters.layout.lora_rank();
  // The base weight of each target, in LoraTarget order.
  auto base_offset = [&](const LayerOffsets& o, int k) {
    const int64_t offs[kLoraTargets] = {o.q, o.k, o.v, o.o, o.gate, o.up, o.down};
    return offs[k];
  };
  auto A_of = [&](const LoraSlot& s) { return Eigen::Map<const FMat>(adapters.data.data() + s.a, r, s.in).cast<double>(); };
  auto B_of = [&](const LoraSlot& s) { return Eigen::Map<const FMat>(adapters.data.data() + s.b, s.out, r).cast<double>(); };
  Weights merged = base;
  for (int64_t l = 0; l < m.layers; ++l)
    for (int k = 0; k < kLoraTargets; ++k) {
      const LoraSlot& s = adapters.layout.lora_slot(l, static_cast<LoraTarget>(k));
      if (s.a < 0) continue;
      Eigen::Map<FMat> W(merged.data.data() + base_offset(base.layout.layer(l), k), s.out, s.in);
      const Mat BA = B_of(s) * A_of(s);
      W = (W.cast<double>() + scale * BA).cast<float>();
    }
  ReferenceResult full = full_sequence_reference(m, merged, tokens, masks, routes, router_aux_loss_coef);
  ReferenceResult res;
  res.loss = full.loss;
  res.grads = zero_params(adapters.layout);
  for (int64_t l = 0; l < m.layers; ++l)
    for (int k = 0; k < kLoraTargets; ++k) {
      const LoraSlot& s = adapters.layout.lora_slot(l, static_cast<LoraTarget>(k));
      if (s.a < 0) continue;
      const Mat G =
          Eigen::Map<const FMat>(full.grads.data.data() + base_offset(base.layout.layer(l), k), s.out, s.in).cast<double>();
      Eigen::Map<FMat>(res.grads.data.data() + s.a, r, s.in) = (scale * B_of(s).transpose() * G).cast<float>();
      Eigen::Map<FMat>(res.grads.data.data() + s.b, s.out, r) = (scale * G * A_of(s).transpose()).cast<float>();
    }
  return res;
}

}  // namespace oomb::executor::cpu
