// The cost model and the closed-form fast path (docs/model.md).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/format.h"
#include "step/buffers.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"

namespace oomb::simulator {
namespace detail {

int64_t param_count(const Scenario& s) { return step::param_count(s.model, s.config); }

WorkTerms& WorkTerms::operator+=(const WorkTerms& o) {
  gemm_s += o.gemm_s;
  expert_gemm_s += o.expert_gemm_s;
  attn_s += o.attn_s;
  attn_bwd_s += o.attn_bwd_s;
  attn_bytes_s += o.attn_bytes_s;
  mb_s += o.mb_s;
  allreduce_s += o.allreduce_s;
  allreduce_bytes += o.allreduce_bytes;
  allreduces += o.allreduces;
  kernels += o.kernels;
  return *this;
}

namespace {

// Kernels launched per layer pass (order of magnitude of a fused implementation).
constexpr int kKernelsLayerFwd = 14;
constexpr int kKernelsLayerBwd = 28;
constexpr int kKernelsHead = 12;
// Flash-attention backward does 5 matmuls per tile against the forward's 2.
constexpr double kAttentionBackwardFactor = 2.5;
// Query tile of the attention kernel: K/V are re-read once per query tile.
constexpr int64_t kQueryTile = 128;

struct LayerWork {
  double gemm_flops = 0;
  // LoRA: the frozen base's GEMM flops (a forward's worth): its weight gradients are not computed,
  // so a backward skips them (Mult::skip_dw).
  double frozen_gemm_flops = 0;
  // A MoE layer's routed experts' GEMMs (their own efficiency, Efficiency::expert_gemm), and under
  // LoRA their frozen share (all of them) as above.
  double expert_gemm_flops = 0;
  double frozen_expert_gemm_flops = 0;
  double attn_flops = 0;
  double attn_bytes = 0;  // K/V reads
  double mb_bytes = 0;    // memory-bound elementwise traffic
  // Tensor parallelism: the bytes each rank gives one all-reduce of the pass (Mult::allreduces
  // counts them; allreduce_s prices them), and the part of them stored in bf16.
  double allreduce_bytes = 0;
  double allreduce_bf16_bytes = 0;
  double allreduce_bf16_calls = 0;  // the share of the pass's calls that carry the bf16 part
};

double peak(const Scenario& s) { return s.gpu.bf16_flops_per_s; }

}  // namespace

double allreduce_latency_s(const Scenario& s, int64_t ranks, int64_t nodes) {
  if (ranks <= 1) return 0;
  const double steps = 2.0 * static_cast<double>(ranks - 1);
  const double across = nodes > 1 ? 2.0 * static_cast<double>(nodes - 1) : 0.0;
  return s.gpu.collective_latency_s + (steps - across) * s.gpu.collective_step_latency_s +
         across * s.host.network_step_latency_s;
}

double allreduce_link_bytes_per_s(const Scenario& s, int64_t nodes) {
  const double link = s.gpu.interconnect_bytes_per_s > 0 ? s.gpu.interconnect_bytes_per_s : s.gpu.h2d_bytes_per_s;
  return nodes > 1 && s.host.network_bytes_per_s > 0 ? std::min(link, s.host.network_bytes_per_s) : link;
}

namespace {
// The profile's measured collective of `bytes` per rank (`field`: an fp32 all-reduce, a bf16 one as
// a run sums it, an all-gather): log-log between the points, the smallest's time below them, the
// largest's rate beyond.
double curve_s(const std::vector<models::GpuSpec::AllReducePoint>& curve, double bytes,
               double models::GpuSpec::AllReducePoint::*field) {
  auto t = [field](const models::GpuSpec::AllReducePoint& p) { return p.*field; };
  const auto& lo = curve.front();
  if (bytes <= static_cast<double>(lo.bytes)) return t(lo);
  for (size_t i = 1; i < curve.size(); ++i) {
    const auto& a = curve[i - 1];
    const auto& b = curve[i];
    if (bytes > static_cast<double>(b.bytes)) continue;
    const double x = std::log(bytes / static_cast<double>(a.bytes)) /
                     std::log(static_cast<double>(b.bytes) / static_cast<double>(a.bytes));
    return t(a) * std::pow(t(b) / t(a), x);
  }
  return t(curve.back()) * bytes / static_cast<double>(curve.back().bytes);
}
}  // namespace

double allreduce_s(const Scenario& s, const Collective& c, int64_t ranks, int64_t nodes) {
  if (ranks <= 1 || c.calls <= 0) return 0;
  const double n = static_cast<double>(ranks);
  // MPI (the CPU backend) sums bf16 data in an fp32 copy: twice its bytes on the wire, converted on
  // the way in and out (2 + 4 and 4 + 2 bytes of memory traffic per element: 6 per bf16 byte).
  const bool staged = s.gpu.kind == "cpu";
  const double wire = c.bytes + (staged ? c.bf16_bytes : 0.0);
  const double convert_s =
      staged ? 6.0 * c.bf16_bytes / (s.gpu.hbm_bytes_per_s * s.gpu.efficiency.memory_bound) : 0.0;
  const auto& curve = s.gpu.allreduce_curve;
  if (!curve.empty() && s.gpu.allreduce_curve_ranks == ranks && nodes <= 1) {
    // Each kind of call at its own size: bf16 on the bf16 curve (measured through the run's
    // staging: conversions included), the rest on the fp32 one.
    const double bf16_calls = c.bf16_bytes > 0 ? std::clamp(c.bf16_calls, 1e-9, c.calls) : 0.0;
    const double other_calls = c.calls - bf16_calls, other_bytes = c.bytes - c.bf16_bytes;
    double t = other_calls > 1e-9 ? other_calls * curve_s(curve, other_bytes / other_calls, &models::GpuSpec::AllReducePoint::seconds) : 0.0;
    if (bf16_calls > 0) {
      t += curve.front().bf16_seconds > 0 ? bf16_calls * curve_s(curve, c.bf16_bytes / bf16_calls,
                                                                    &models::GpuSpec::AllReducePoint::bf16_seconds)
                                          : bf16_calls * curve_s(curve, 2.0 * c.bf16_bytes / bf16_calls,
                                                                     &models::GpuSpec::AllReducePoint::seconds) +
                                                (staged ? convert_s : 0.0);
    }
    return t;
  }
  return c.calls * allreduce_latency_s(s, ranks, nodes) + 2.0 * (n - 1) / n * wire / allreduce_link_bytes_per_s(s, nodes) +
         convert_s;
}

namespace {

// The pass's all-reduces: Mult::allreduces of the layer work's per-call bytes.
Collective pass_collective(const LayerWork& w, double calls) {
  return {calls, w.allreduce_bytes * calls, w.allreduce_bf16_bytes * calls, w.allreduce_bf16_calls * calls};
}

// How many times a pass runs a layer's work of each class: GEMMs, attention forward (incl. a
// recompute inside the backward), attention backward (in forward-flop units), memory-bound ops.
struct Mult {
  double gemm = 0, attn_fwd = 0, attn_bwd = 0, mb = 0;
  int kernels = 0;
  double skip_dw = 0;  // passes whose frozen dW GEMMs are skipped (a backward: 1)
  // Tensor-parallel all-reduces of the pass (docs/model.md "Tensor parallelism"): a forward 2 (the
  // o and down projections' outputs), a backward 2 (the column-parallel input gradients) plus its
  // recompute's 1 (the recompute stops before the down projection).
  double allreduces = 0;
};

double gemm_work(const LayerWork& w, const Mult& m) { return w.gemm_flops * m.gemm - w.frozen_gemm_flops * m.skip_dw; }
double expert_gemm_work(const LayerWork& w, const Mult& m) {
  return w.expert_gemm_flops * m.gemm - w.frozen_expert_gemm_flops * m.skip_dw;
}

double time_of(const Scenario& s, const LayerWork& w, const Mult& m) {
  const auto& e = s.gpu.efficiency;
  double t_gemm = gemm_work(w, m) / (peak(s) * e.gemm) + expert_gemm_work(w, m) / (peak(s) * e.expert_gemm);
  double t_attn = std::max(w.attn_flops * m.attn_fwd / (peak(s) * e.attention) +
                               w.attn_flops * m.attn_bwd / (peak(s) * e.attention_backward),
                           w.attn_bytes * (m.attn_fwd + m.attn_bwd) / (s.gpu.hbm_bytes_per_s * e.memory_bound));
  double t_mb = w.mb_bytes * m.mb / (s.gpu.hbm_bytes_per_s * e.memory_bound);
  // Tensor parallelism only (allreduce_s is 0 for one rank; the fast path calls this per pass).
  const double t_ar = s.config.gpus > 1 ? allreduce_s(s, pass_collective(w, m.allreduces), s.config.gpus) : 0.0;
  return t_gemm + t_attn + t_mb + t_ar + m.kernels * s.gpu.launch_overhead_s;
}

// time_of's terms at efficiency 1 (the same multipliers), for calibration.
WorkTerms terms_of(const Scenario& s, const LayerWork& w, const Mult& m) {
  WorkTerms t;
  t.gemm_s = gemm_work(w, m) / peak(s);
  t.expert_gemm_s = expert_gemm_work(w, m) / peak(s);
  t.attn_s = w.attn_flops * m.attn_fwd / peak(s);
  t.attn_bwd_s = w.attn_flops * m.attn_bwd / peak(s);
  t.attn_bytes_s = w.attn_bytes * (m.attn_fwd + m.attn_bwd) / s.gpu.hbm_bytes_per_s;
  t.mb_s = w.mb_bytes * m.mb / s.gpu.hbm_bytes_per_s;
  if (s.config.gpus > 1) {
    t.allreduce_s = allreduce_s(s, pass_collective(w, m.allreduces), s.config.gpus);
    t.allreduce_bytes = w.allreduce_bytes * m.allreduces;
    t.allreduces = m.allreduces;
  }
  t.kernels = m.kernels;
  return t;
}

// A pass's time and, unless skipped, its work terms.
void price(PassCost& p, const Scenario& s, const LayerWork& w, const Mult& m, Terms terms) {
  p.compute_s = time_of(s, w, m);
  if (terms == Terms::keep) p.work = terms_of(s, w, m);
}

// The kinds of layer a model's stack mixes (docs/model.md "Layer kinds and experts"): its
// attention (global, or sliding / chunked over `window` tokens) and its MLP (dense or experts), with
// their counts (step::Geometry::classes). The dense families have one class, global and dense.
using LayerClass = step::Geometry::LayerClass;

// Query-key pairs of a local layer over the `tokens` queries from position `start` (each query
// itself included): sliding, min(window, t + 1) keys at position t; chunked, t mod window + 1.
double local_pairs(const LayerClass& k, int64_t start, int64_t tokens) {
  const double W = static_cast<double>(k.window);
  auto upto = [&](int64_t x) {  // the pairs of positions [0, x)
    const double X = static_cast<double>(x);
    if (k.attention == models::LayerAttention::sliding)
      return X <= W ? X * (X + 1) / 2 : W * (W + 1) / 2 + (X - W) * W;
    const double blocks = static_cast<double>(x / k.window), r = static_cast<double>(x % k.window);
    return blocks * W * (W + 1) / 2 + r * (r + 1) / 2;
  };
  return upto(start + tokens) - upto(start);
}

// Work of one layer's forward over `tokens` query tokens that see `prefix_keys` earlier keys
// (all of them attended) plus themselves causally; a local layer (LayerClass) sees its reach
// from the chunk's first position `start` instead. qk_norm (Qwen3): an RMSNorm over every q and
// k head reads and writes q and k once more. A MoE layer's MLP: the router (hidden x experts), the
// top_k routed experts' and the shared experts' GEMMs (only the active experts' flops), the
// dispatch's gather (each routed copy's input read and written) and combine (each copy's output
// read, the sum written) as memory traffic, and the router's softmax and top-k over the logits.
// Sandwich norms: two more RMSNorms over hidden-wide outputs.
LayerWork layer_work(const step::Geometry& g, int64_t tokens, int64_t prefix_keys, bool qk_norm,
                     const LayerClass& k = LayerClass{}, int64_t start = 0, bool sandwich = false) {
  LayerWork w;
  const double T = static_cast<double>(tokens);
  const int64_t mlp = k.moe ? g.h * g.experts + 3 * g.h * g.fs : 3 * g.h * g.f;
  w.gemm_flops = 2.0 * T * static_cast<double>(g.h * g.qd + 2 * g.h * g.kvd + g.qd * g.h + mlp);
  if (k.moe) w.expert_gemm_flops = 2.0 * T * static_cast<double>(3 * g.top_k * g.h * g.fe);
  if (g.lora) {  // the adapters' two thin GEMMs per target (A x, then B (A x)): 2 flops per parameter and token
    w.frozen_gemm_flops = w.gemm_flops;
    w.frozen_expert_gemm_flops = w.expert_gemm_flops;
    w.gemm_flops += 2.0 * T * static_cast<double>(g.lora_layer_params);
  }
  const bool local = k.attention != models::LayerAttention::global;
  const double pairs = local ? local_pairs(k, start, tokens) : T * static_cast<double>(prefix_keys) + T * (T + 1) / 2.0;
  w.attn_flops = 4.0 * pairs * static_cast<double>(g.head_dim * g.q_heads);
  const double keys_avg = local ? (T > 0 ? pairs / T : 0.0) : static_cast<double>(prefix_keys) + T / 2.0;
  w.attn_bytes = std::ceil(T / kQueryTile) * keys_avg * static_cast<double>(2 * g.kvd * g.kv_b);
  const int64_t mlp_mb = k.moe ? 4 * g.top_k * g.fe + 4 * g.fs + 3 * g.top_k * g.h : 4 * g.f;
  w.mb_bytes = T * static_cast<double>((10 * g.h + 4 * g.qd + 4 * g.kvd + mlp_mb) * g.act_b);
  if (k.moe) w.mb_bytes += T * static_cast<double>(8 * g.experts);
  if (sandwich) w.mb_bytes += T * static_cast<double>(4 * g.h * g.act_b);
  if (qk_norm) w.mb_bytes += T * static_cast<double>(2 * (g.qd + g.kvd) * g.act_b);
  if (g.G > 1) {
    w.allreduce_bytes = T * static_cast<double>(g.h * g.act_b);
    if (g.act_b == 2) w.allreduce_bf16_bytes = w.allreduce_bytes, w.allreduce_bf16_calls = 1;
  }
  return w;
}

PassCost head_cost(const Scenario& s, const step::Geometry& g, int64_t tokens, Terms terms) {
  // Final norm + LM head forward and backward (3 GEMMs' worth) + cross-entropy over the vocab shard.
  LayerWork w;
  const double T = static_cast<double>(tokens);
  w.gemm_flops = 2.0 * T * static_cast<double>(g.h) * static_cast<double>(g.V / g.G);
  const double logit_bytes = g.fused_loss ? 6.0 : 10.0;
  w.mb_bytes = T * static_cast<double>(g.V / g.G) * logit_bytes + T * static_cast<double>(4 * g.h * g.act_b);
  PassCost p;
  // Under LoRA a frozen LM head computes no weight gradient: forward and input gradient only.
  const double gemms = g.lora && !s.config.lora_train_embeddings ? 2.0 : 3.0;
  Mult m{gemms, 0.0, 0.0, 1.0, kKernelsHead};
  if (g.G > 1) {
    // Tensor parallelism: the head's input gradient, [T, hidden], and per loss tile the
    // vocabulary-parallel loss's statistics (G x rows x 3 fp32): the pass's bytes spread over its
    // all-reduces. (The stage-2 embedding's output is that pass's own all-reduce: fill_head.)
    const double tiles = std::ceil(T / static_cast<double>(std::max<int64_t>(1, g.T)));
    m.allreduces = 1.0 + tiles;
    const double activations = T * static_cast<double>(g.h * g.act_b);
    w.allreduce_bytes = (activations + T * static_cast<double>(g.G) * 12.0) / m.allreduces;
    if (g.act_b == 2) w.allreduce_bf16_bytes = activations / m.allreduces, w.allreduce_bf16_calls = 1.0 / m.allreduces;
  }
  price(p, s, w, m, terms);
  p.flops = gemms * w.gemm_flops;
  return p;
}

}  // namespace

// The page selection of a sparse fill pass as the CUDA executor runs it (executor/cuda/selection.cu):
// the layer's prefix summaries staged into device scratch (a write and a read), then two fp32
// CUDA-core products of the summed queries [T x kv_heads, head_dim] with the summaries^T (the
// softmax normaliser, then the probabilities summed per query page): 4 T kvd pp flops at the fp32
// rate (expressed in bf16-peak units, so time_of's GEMM term at the gemm efficiency prices it), the
// summaries read once per 32-token tile and once per query page (per KV head of the group), the
// fp64 page scores written and read by the top-k; five launches (staging, group sum, two passes,
// top-k).
PassCost selection_cost(const Scenario& s, const step::Geometry& g, int64_t tokens, int64_t prefix, Terms terms) {
  PassCost p;
  if (prefix <= 0) return p;
  const double T = static_cast<double>(tokens), pp = static_cast<double>(prefix);
  const double summaries = pp * static_cast<double>(g.kvd) * 4.0;
  const double qpages = std::ceil(T / static_cast<double>(g.p));
  const double groups = s.config.selection == "per-kv-head" ? static_cast<double>(g.kv_heads) : 1.0;
  const double flops = 4.0 * T * static_cast<double>(g.kvd) * pp;
  LayerWork sel;
  sel.gemm_flops = flops * peak(s) / s.gpu.fp32_flops_per_s;
  sel.mb_bytes = 2.0 * summaries + std::ceil(T / 32.0) * summaries + qpages * summaries + 2.0 * qpages * groups * pp * 8.0;
  Mult once{1.0, 0.0, 0.0, 1.0, 5};
  if (g.G > 1 && s.config.selection == "published" && prefix > g.B) {
    // Tensor parallelism: the published rule's scores (fp64, query pages x prefix pages) summed
    // over the ranks before the top-k (the executor selects only beyond the budget).
    once.allreduces = 1.0;
    sel.allreduce_bytes = qpages * pp * 8.0;
  }
  price(p, s, sel, once, terms);
  p.flops = flops;
  return p;
}

PassCost PassCost::scaled(double f) const {
  PassCost p = *this;
  for (double* x : {&p.work.gemm_s, &p.work.expert_gemm_s, &p.work.attn_s, &p.work.attn_bwd_s, &p.work.attn_bytes_s, &p.work.mb_s,
                    &p.work.allreduce_s, &p.work.allreduce_bytes, &p.work.allreduces, &p.work.kernels, &p.compute_s,
                    &p.flops})
    *x *= f;
  p.in_bytes = in_bytes * f;
  p.out_bytes = out_bytes * f;
  return p;
}

PassCost& PassCost::operator+=(const PassCost& o) {
  work += o.work;
  compute_s += o.compute_s;
  flops += o.flops;
  in_bytes += o.in_bytes;
  out_bytes += o.out_bytes;
  return *this;
}

namespace {
// A layer's backward, with (checkpointing) or without the re-run of its forward; a kept layer's
// (partial checkpointing) is always the one without.
void backward_costs(const Scenario& s, const LayerWork& w, bool ckpt, Terms terms, ChunkCosts& cc) {
  for (PassCost* p : {&cc.backward, &cc.backward_kept}) {
    const bool recompute = ckpt && p == &cc.backward;
    const double r = recompute ? 1.0 : 0.0;
    Mult bwd{2.0 + r, r, kAttentionBackwardFactor, 2.0 + r,
             kKernelsLayerBwd + (recompute ? kKernelsLayerFwd : 0), 1.0};
    bwd.allreduces = 2.0 + r;
    price(*p, s, w, bwd, terms);
    p->flops = gemm_work(w, bwd) + expert_gemm_work(w, bwd) + (kAttentionBackwardFactor + r) * w.attn_flops;
  }
}
}  // namespace

const PassCost& backward_of(const ChunkCosts& cc, const step::Geometry& g, int64_t layer) {
  return layer < g.Lr ? cc.backward : cc.backward_kept;
}

namespace {
// The layer passes of chunk c for the layers of one class (a local layer never selects, copies nor
// offloads: its pages stay on the device).
void class_passes(const Scenario& s, const step::Geometry& g, int64_t c, Terms terms, const LayerClass& k,
                  ChunkCosts& cc) {
  const int64_t tokens = chunk_tokens_of(g, c);
  const int64_t attended_keys = step::attended_prefix_pages(g, c) * g.p;
  const LayerWork w = layer_work(g, tokens, attended_keys, s.model.qk_norm, k, g.chunk_start(c), s.model.sandwich_norms);
  const bool ckpt = s.config.checkpointing;

  Mult fwd{1.0, 1.0, 0.0, 1.0, kKernelsLayerFwd};
  fwd.allreduces = 2.0;
  price(cc.fill, s, w, fwd, terms);
  cc.fill.flops = w.gemm_flops + w.expert_gemm_flops + w.attn_flops;
  cc.recompute = cc.fill;  // the same forward, without the fill's selection
  backward_costs(s, w, ckpt, terms, cc);
  if (k.attention != models::LayerAttention::global) return;
  if (g.sparse) cc.fill += selection_cost(s, g, tokens, prefix_pages(g, c), terms);
  if (g.offload) {
    const int64_t u = step::union_pages(g, c);
    const int64_t own = own_pages(g, c);
    cc.fill.in_bytes = u * g.kv_page_bytes;
    cc.fill.out_bytes = own * g.kv_page_bytes;
    cc.recompute.in_bytes = u * g.kv_page_bytes;
    for (PassCost* p : {&cc.backward, &cc.backward_kept}) {
      p->in_bytes = u * g.kv_page_bytes + (u + own) * g.grad_page_bytes;
      p->out_bytes = u * g.grad_page_bytes;
    }
    if (s.config.implementation == step::Implementation::published) {
      // The published caches copy every loaded page whole (docs/model.md, pages in flight): the
      // fill's write-back is K and V of the layer's loaded pages (kv_cache.py offload L277-278,
      // topk_cache.py L220-222), the own chunk's included; in stage 2 an onload brings K, V and
      // their fp32 gradients (L257-262; topk_cache.py L192-195, L203-206) and a write-back returns
      // all four (L277-282; topk_cache.py L221-226), in the forward sweep as in the backward's.
      const int64_t page_bytes = g.kv_page_bytes + g.grad_page_bytes;
      cc.fill.out_bytes = (u + own) * g.kv_page_bytes;
      cc.recompute.in_bytes = (u + own) * page_bytes;
      cc.recompute.out_bytes = (u + own) * page_bytes;
      for (PassCost* p : {&cc.backward, &cc.backward_kept}) p->in_bytes = p->out_bytes = (u + own) * page_bytes;
    }
  }
  if (g.sparse && s.config.selection_memory == step::SelectionMemory::bounded) {
    // Page summaries live in the host tier: the prefix's are streamed in, the chunk's written out.
    cc.fill.in_bytes += prefix_pages(g, c) * g.summary_bytes;
    cc.fill.out_bytes += own_pages(g, c) * g.summary_bytes;
  }
}

// The stack's layer passes: its one class's (the dense families), or each class's weighted by its
// share of the layers (the fast path and the timeline price every layer of a mixed stack at this
// mean: docs/model.md "Layer kinds and experts").
template <class Passes>
void mean_passes(const step::Geometry& g, ChunkCosts& cc, Passes&& passes) {
  if (g.class_count == 1) return passes(g.classes[0], cc);
  for (PassCost* p : {&cc.fill, &cc.recompute, &cc.backward, &cc.backward_kept}) *p = PassCost{};
  for (int i = 0; i < g.class_count; ++i) {
    ChunkCosts one;
    passes(g.classes[i], one);
    const double share = static_cast<double>(g.classes[i].layers) / static_cast<double>(g.L);
    cc.fill += one.fill.scaled(share);
    cc.recompute += one.recompute.scaled(share);
    cc.backward += one.backward.scaled(share);
    cc.backward_kept += one.backward_kept.scaled(share);
  }
}
}  // namespace

ChunkCosts chunk_costs(const Scenario& s, const step::Geometry& g, int64_t c, Terms terms) {
  ChunkCosts cc;
  const int64_t tokens = chunk_tokens_of(g, c);
  mean_passes(g, cc, [&](const LayerClass& k, ChunkCosts& out) { class_passes(s, g, c, terms, k, out); });
  cc.head = head_cost(s, g, tokens, terms);
  LayerWork emb;
  emb.mb_bytes = static_cast<double>(tokens) * g.h * g.act_b * 2.0;
  Mult embedding{0.0, 0.0, 0.0, 1.0, 1};
  if (g.G > 1) {  // the vocabulary-parallel embedding's output
    embedding.allreduces = 1.0;
    emb.allreduce_bytes = static_cast<double>(tokens) * static_cast<double>(g.h * g.act_b);
    if (g.act_b == 2) emb.allreduce_bf16_bytes = emb.allreduce_bytes, emb.allreduce_bf16_calls = 1;
  }
  price(cc.fill_head, s, emb, embedding, terms);
  if (trains_embedding(s)) {
    // The embedding's gradient: the first layer's input gradient [tokens, hidden] (activation dtype)
    // read and added into the rows of its tokens (fp32, read and written); a vocabulary-parallel
    // rank adds the rows its shard holds, about 1/G of them. One scatter-add kernel.
    LayerWork bwd;
    bwd.mb_bytes = static_cast<double>(tokens) * static_cast<double>(g.h) *
                   (static_cast<double>(g.act_b) + 8.0 / static_cast<double>(g.G));
    price(cc.embedding_bwd, s, bwd, Mult{0.0, 0.0, 0.0, 1.0, 1}, terms);
  }
  return cc;
}

bool trains_embedding(const Scenario& s) { return s.config.lora_rank == 0 || s.config.lora_train_embeddings; }

ChunkCosts standard_costs(const Scenario& s, const step::Geometry& g, Terms terms) {
  ChunkCosts cc;
  auto passes = [&](const LayerClass& k, ChunkCosts& out) {
    const LayerWork w = layer_work(g, g.N, 0, s.model.qk_norm, k, 0, s.model.sandwich_norms);
    Mult fwd{1.0, 1.0, 0.0, 1.0, kKernelsLayerFwd};
    fwd.allreduces = 2.0;
    price(out.fill, s, w, fwd, terms);
    out.fill.flops = w.gemm_flops + w.expert_gemm_flops + w.attn_flops;
    backward_costs(s, w, s.config.checkpointing, terms, out);
  };
  mean_passes(g, cc, passes);
  cc.head = head_cost(s, g, g.N, terms);
  return cc;
}

double optimizer_update_s(const Scenario& s) {
  if (s.config.optimizer == step::Optimizer::none) return 0;
  // A replica's shard of the trained parameters (ZeRO-1), or all of them.
  const double params = static_cast<double>(step::optimizer_shard(s.model, s.config, geometry(s)).shard);
  // Read + write of master (4), m (4), v (4); read the gradient, write the parameter.
  const double bytes_per_param = 24.0 + static_cast<double>(dtype_bytes(s.config.param_grad_dtype)) +
                                 static_cast<double>(dtype_bytes(s.config.param_dtype));
  if (s.config.optimizer == step::Optimizer::gpu)
    return params * bytes_per_param / (s.gpu.hbm_bytes_per_s * s.gpu.efficiency.memory_bound);
  // The host is shared by all tensor-parallel GPUs' shards.
  return params * static_cast<double>(s.config.gpus) * bytes_per_param / s.host.mem_bytes_per_s;
}

WorkTerms tensor_parallel_comm(const Scenario& s) {
  WorkTerms out;
  if (s.config.gpus <= 1) return out;
  const step::Geometry g = geometry(s);
  auto add = [&](const WorkTerms& t, double times) {
    out.allreduce_s += times * t.allreduce_s;
    out.allreduce_bytes += times * t.allreduce_bytes;
    out.allreduces += times * t.allreduces;
  };
  const double L = static_cast<double>(g.L), Lr = static_cast<double>(g.Lr);
  if (g.oomb) {
    // A chunk's all-reduces depend on its tokens only (the full chunks' are the first's, the last,
    // maybe ragged, chunk's its own), except the published rule's score all-reduce, which a chunk
    // makes once its prefix exceeds the budget.
    auto chunk = [&](int64_t c, double times) {
      const ChunkCosts cc = chunk_costs(s, g, c);
      add(cc.fill.work, times * L);
      add(cc.recompute.work, times * L);
      add(cc.backward.work, times * Lr);
      add(cc.backward_kept.work, times * (L - Lr));
      add(cc.head.work, times);
      add(cc.fill_head.work, 2.0 * times);  // stage 1 and stage 2
      add(cc.embedding_bwd.work, times);
    };
    if (g.n > 1) chunk(0, static_cast<double>(g.n - 1));
    chunk(g.n - 1, 1);
    if (g.sparse && s.config.selection == "published" && g.n > 2) {
      // The full chunks 1 .. n-2 beyond the budget (chunk 0 has no prefix; the last was added whole):
      // per layer one all-reduce of q x prefix pages fp64 scores, prefix c q, in closed form (a
      // context of 2^40 tokens has 2^28 chunks).
      const int64_t q = g.q, first = std::max<int64_t>(1, g.B / std::max<int64_t>(q, 1) + 1), last = g.n - 2;
      if (first <= last) {
        const double count = static_cast<double>(last - first + 1);
        const double sum_c = (static_cast<double>(first) + static_cast<double>(last)) * count / 2.0;
        const double bytes = L * 8.0 * static_cast<double>(q) * static_cast<double>(q) * sum_c;
        out.allreduces += L * count;
        out.allreduce_bytes += bytes;
        out.allreduce_s += allreduce_s(s, {L * count, bytes, 0.0, 0.0}, g.G);
      }
    }
  } else {
    const ChunkCosts cc = standard_costs(s, g);
    add(cc.fill.work, L);
    add(cc.backward.work, Lr);
    add(cc.backward_kept.work, L - Lr);
    add(cc.head.work, 1);
  }
  return out;
}

int64_t gradient_allreduce_bytes(const Scenario& s) {
  if (s.config.data_parallel <= 1 || s.config.optimizer == step::Optimizer::none) return 0;
  const step::Geometry g = geometry(s);
  if (!step::shards_optimizer(s.config)) return step::trained_gradient_bytes(s.model, s.config, g);
  const ShardedComm z = sharded_comm(s, g);
  return static_cast<int64_t>(z.gradient_bytes + z.weight_bytes);
}

ShardedComm sharded_comm(const Scenario& s, const step::Geometry& g) {
  ShardedComm out;
  if (!step::shards_optimizer(s.config)) return out;
  const double padded = static_cast<double>(step::optimizer_shard(s.model, s.config, g).padded);
  const double gbytes = padded * static_cast<double>(dtype_bytes(s.config.param_grad_dtype));
  const double pbytes = padded * static_cast<double>(dtype_bytes(s.config.param_dtype));
  out.gradient_bytes = gbytes;
  out.weight_bytes = pbytes;
  const bool bf16 = s.config.param_grad_dtype == Dtype::bf16;
  const int64_t D = s.config.data_parallel, M = s.config.nodes;
  const Collective grads{1.0, gbytes, bf16 ? gbytes : 0.0, bf16 ? 1.0 : 0.0};
  // The reduce-scatter: NCCL's is half of a ring all-reduce (N - 1 steps, (N - 1) / N x the
  // buffer's bytes); MPI's (the CPU backend) is an all-reduce of the whole buffer, which Open MPI
  // runs faster than its reduce-scatter on one node (executor/mpi/mpi_comm.cpp).
  const bool mpi = s.gpu.kind == "cpu";
  out.reduce_scatter_s = (mpi ? 1.0 : 0.5) * allreduce_s(s, grads, D, M);
  // The all-gather sums nothing, so nothing of it is staged: the profile's measured all-gathers
  // where it has them (oomb calibrate under mpirun), else half a ring all-reduce of the buffer.
  const auto& curve = s.gpu.allreduce_curve;
  if (!curve.empty() && curve.front().all_gather_seconds > 0 && s.gpu.allreduce_curve_ranks == D && M <= 1)
    out.all_gather_s = curve_s(curve, pbytes, &models::GpuSpec::AllReducePoint::all_gather_seconds);
  else
    out.all_gather_s = 0.5 * allreduce_s(s, {1.0, pbytes, 0.0, 0.0}, D, M);
  return out;
}

std::vector<double> gradient_bucket_s(const Scenario& s, const step::Geometry& g) {
  std::vector<double> out;
  if (s.config.data_parallel <= 1 || s.config.optimizer == step::Optimizer::none || step::shards_optimizer(s.config))
    return out;
  for (const auto& b : step::gradient_buckets(s.model, s.config, g)) {
    const double bytes = static_cast<double>(b.bytes);
    out.push_back(
        allreduce_s(s, {1.0, bytes, b.bf16 ? bytes : 0.0, b.bf16 ? 1.0 : 0.0}, s.config.data_parallel, s.config.nodes));
  }
  return out;
}

double gradient_allreduce_s(const Scenario& s) {
  const step::Geometry g = geometry(s);
  double total = 0;
  for (double t : gradient_bucket_s(s, g)) total += t;
  const ShardedComm z = sharded_comm(s, g);
  return total + z.reduce_scatter_s + z.all_gather_s;
}

bool gradient_allreduce_overlaps(const Scenario& s) { return target_of(s).backend == step::BackendKind::cuda; }

double gradient_allreduce_exposed_s(const Scenario& s, const step::Geometry& g) {
  const ShardedComm z = sharded_comm(s, g);  // around the update: nothing to overlap
  const std::vector<double> buckets = gradient_bucket_s(s, g);
  double total = z.reduce_scatter_s + z.all_gather_s;
  for (double t : buckets) total += t;
  if (buckets.empty() || !gradient_allreduce_overlaps(s)) return total;
  // The last backward's passes (the last chunk's, or standard training's one): the head bucket is
  // final after the LM head's backward, each layer's after its own, the embedding's with the last.
  const ChunkCosts cc = g.oomb ? chunk_costs(s, g, 0) : standard_costs(s, g);
  std::vector<double> final_at;  // when each bucket is final, from the head pass's start
  double t = cc.head.compute_s;
  final_at.push_back(t);
  for (int64_t l = g.L - 1; l >= 0; --l) final_at.push_back(t += backward_of(cc, g, l).compute_s);
  if (g.oomb && trains_embedding(s)) final_at.push_back(t += cc.embedding_bwd.compute_s);  // the embedding's
  double comm_free = 0;
  const size_t lead = buckets.size() > static_cast<size_t>(g.L) + 1 ? 0 : 1;  // LoRA: no head bucket
  for (size_t b = 0; b < buckets.size(); ++b)
    comm_free = std::max(comm_free, final_at[std::min(b + lead, final_at.size() - 1)]) + buckets[b];
  return std::max(0.0, comm_free - t);
}

double h2d_rate(const Scenario& s, bool duplex) {
  return s.gpu.h2d_bytes_per_s * s.gpu.efficiency.copy * (duplex ? s.gpu.duplex_factor : 1.0);
}
double d2h_rate(const Scenario& s, bool duplex) {
  return s.gpu.d2h_bytes_per_s * s.gpu.efficiency.copy * (duplex ? s.gpu.duplex_factor : 1.0);
}

void finish_summary(const Scenario& s, MemoryFigures m, Summary& out) {
  const auto& c = s.config;
  // The peaks over phases (docs/model.md): the phase holding the device peak and what lives there.
  step::BufferTable::PhasePeak& dev = m.device;
  step::BufferTable::PhasePeak& host = m.host;
  // Device need always includes the runtime reserve, whatever the peak is reported as. The reserve
  // is alive in every phase, so the peak without it is at the same phase.
  const auto reserve_row = dev.breakdown.find("runtime_reserve");
  const int64_t device_need =
      dev.bytes - (reserve_row == dev.breakdown.end() ? 0 : reserve_row->second) + s.gpu.reserved_bytes;
  out.peak_device_bytes = dev.bytes;
  out.peak_phase = to_string(dev.phase);
  out.device_breakdown_bytes = std::move(dev.breakdown);
  out.peak_host_bytes = host.bytes;
  out.host_breakdown_bytes = std::move(host.breakdown);
  out.kv_pool_pages = m.pages.kv_pool_pages;
  out.grad_pool_pages = m.pages.grad_pool_pages;
  out.device_pool_pages = m.pages.kv_pool_pages + m.pages.grad_pool_pages;
  out.max_union_pages = m.pages.max_union_pages;
  out.pages_in_flight = m.pages.pages_in_flight;
  out.allreduce_bytes = gradient_allreduce_bytes(s);
  out.allreduce_s = gradient_allreduce_s(s);
  if (c.gpus > 1) {
    const WorkTerms tp = tensor_parallel_comm(s);
    out.tp_allreduces = std::llround(tp.allreduces);
    out.tp_allreduce_bytes = std::llround(tp.allreduce_bytes);
    out.tp_allreduce_s = tp.allreduce_s;
  }
  out.device_capacity_bytes = s.gpu.hbm_capacity_bytes;
  out.host_capacity_bytes = s.host.pinnable_bytes;
  out.tokens_per_s = out.step_s > 0 ? static_cast<double>(c.context_tokens) / out.step_s : 0;

  // The node's host holds the host rows of every rank on it (each row is one rank's).
  const int64_t pinned = step::node_host_bytes(m.pinned_host_bytes, c);
  const int64_t node_host = step::node_host_bytes(out.peak_host_bytes, c);
  const double dev_ratio = static_cast<double>(device_need) / static_cast<double>(s.gpu.hbm_capacity_bytes);
  const double pin_ratio = static_cast<double>(pinned) / static_cast<double>(s.host.pinnable_bytes);
  const double ram_ratio = static_cast<double>(node_host) / static_cast<double>(s.host.ram_bytes);
  out.feasible = dev_ratio <= 1.0 && pin_ratio <= 1.0 && ram_ratio <= 1.0;
  out.notes.clear();
  if (dev_ratio > 1.0)
    out.notes.push_back("device memory: needs " + format_bytes(device_need) + " of " +
                        format_bytes(s.gpu.hbm_capacity_bytes) + " (" + s.gpu.id + "), over by " +
                        format_bytes(device_need - s.gpu.hbm_capacity_bytes));
  if (pin_ratio > 1.0)
    out.notes.push_back("pinned host memory: needs " + format_bytes(pinned) + " of " +
                        format_bytes(s.host.pinnable_bytes) + " pinnable (" + s.host.id + "), over by " +
                        format_bytes(pinned - s.host.pinnable_bytes));
  if (ram_ratio > 1.0)
    out.notes.push_back("host RAM: needs " + format_bytes(node_host) + " of " + format_bytes(s.host.ram_bytes) +
                        (step::ranks_per_node(c) > 1 ? " (" + std::to_string(step::ranks_per_node(c)) +
                                                           " ranks' host tiers on the node)"
                                                     : ""));
  if (!out.feasible) {
    double worst = std::max({dev_ratio, pin_ratio, ram_ratio});
    out.binding = worst == dev_ratio ? Binding::device_memory
                  : worst == pin_ratio ? Binding::pinned_host_memory
                                       : Binding::host_ram;
    return;
  }
  // The direction that needs more of its link.
  const bool h2d = out.required_h2d_bytes_per_s / s.gpu.h2d_bytes_per_s >=
                   out.required_d2h_bytes_per_s / s.gpu.d2h_bytes_per_s;
  if (out.step_s > 0 && out.exposed_copy_s > 0.05 * out.step_s) {
    out.binding = h2d ? Binding::h2d_link : Binding::d2h_link;
    out.notes.push_back("copies expose " + format_duration_s(out.exposed_copy_s) + " of the step (" +
                        format_percent(out.exposed_copy_s / out.step_s) + ")");
  } else {
    out.binding = Binding::compute;
    // Under 5% exposed the step is compute's, but a link that cannot hide the copies is said, with
    // what it costs: "binding: compute" alone reads as "the copies are free".
    const bool h2d_short = out.required_h2d_bytes_per_s > s.gpu.h2d_bytes_per_s;
    const bool d2h_short = out.required_d2h_bytes_per_s > s.gpu.d2h_bytes_per_s;
    if (out.exposed_copy_s > 0 && (h2d_short || d2h_short)) {
      out.notes.push_back(std::string(h2d ? "h2d" : "d2h") + " link short: copies expose " +
                          format_duration_s(out.exposed_copy_s) + " (" +
                          format_percent(out.exposed_copy_s / out.step_s) + " of the step); hiding them needs " +
                          format_rate_bytes_per_s(h2d ? out.required_h2d_bytes_per_s : out.required_d2h_bytes_per_s) +
                          " of its " + format_rate_bytes_per_s(h2d ? s.gpu.h2d_bytes_per_s : s.gpu.d2h_bytes_per_s));
    }
  }
}

}  // namespace detail

namespace {
double pass_time(const detail::PassCost& p, double in_s, double out_s, int64_t R);
}

namespace detail {

PublishedWriteback published_writeback(const Scenario& s, const step::Geometry& g) {
  // kv_cache.py CacheManager.offload: per page, copy_ of K, V, K-grad and V-grad, each blocking. Every
  // stage-2 pass onloads its layer (the next layer's pages, issued at the same switches), so the
  // write-backs have the duplex share of the link.
  const double page_bytes = static_cast<double>(g.kv_page_bytes + g.grad_page_bytes);
  const double rate = d2h_rate(s, true);
  PublishedWriteback w;
  w.page_s = 4.0 * s.config.page_copy_latency_s + page_bytes / rate;
  w.link_pages_per_s = rate / page_bytes;
  return w;
}

std::vector<int64_t> published_writeback_held(const std::vector<double>& switches, int64_t S,
                                              const PublishedWriteback& w) {
  std::vector<int64_t> held(switches.size(), 0);
  if (w.page_s <= 0) return held;  // free copies: nothing outlives its switch
  const double alone = 1.0 / w.page_s;
  std::vector<double> left;  // pages left per write-back still running
  for (size_t k = 1; k < switches.size(); ++k) {
    // Drain from the previous switch to this one, piecewise: the rate changes when one ends. All
    // running write-backs drain alike, so the one with the fewest pages ends first, exactly when
    // every one has lost that many; each step either ends one or reaches the switch.
    double t = switches[k - 1];
    while (t < switches[k] && !left.empty()) {
      const double rate = std::min(alone, w.link_pages_per_s / static_cast<double>(left.size()));
      const double fewest = *std::min_element(left.begin(), left.end());
      if (t + fewest / rate >= switches[k]) {
        for (double& p : left) p = std::max(0.0, p - rate * (switches[k] - t));
        break;
      }
      for (double& p : left) p -= fewest;
      left.erase(std::remove_if(left.begin(), left.end(), [](double p) { return p <= 0; }), left.end());
      t += fewest / rate;
    }
    left.push_back(static_cast<double>(S));
    int64_t h = 0;
    for (double p : left) h += static_cast<int64_t>(std::ceil(p - 1e-9));
    held[k] = h;
  }
  return held;
}

double published_layer_period_s(const Scenario& s, const step::Geometry& g, int64_t c) {
  // The published sweep waits for no copy to land: the compute stream never waits on a manager's
  // stream, and the host waits only for the onload worker to have issued its copies (page_table
  // calls wait_onload, kv_cache.py L304-308; topk_cache.py L248-252), one non-blocking copy per
  // tensor of each page it loads, each at least a launch. The write-backs are waited for at the
  // chunk's end only (remove_last_update). So a layer's period is its compute or that issue.
  const double compute_s = chunk_costs(s, g, c, Terms::skip).recompute.compute_s;
  const double issue_s = 4.0 * static_cast<double>(published_slot_pages(g, c)) * s.gpu.launch_overhead_s;
  return std::max(compute_s, issue_s);
}

int64_t published_slot_pages(const step::Geometry& g, int64_t c) { return step::union_pages(g, c) + own_pages(g, c); }

std::vector<double> published_switches(const Scenario& s, const step::Geometry& g, int64_t c, double first_s) {
  const double period = published_layer_period_s(s, g, c);
  std::vector<double> switches(static_cast<size_t>(g.L));
  for (size_t k = 0; k < switches.size(); ++k) switches[k] = first_s + static_cast<double>(k) * period;
  return switches;
}

int64_t published_pages_in_flight(const Scenario& s, const step::Geometry& g, int64_t c) {
  // The closed form: the sweep from time 0; the last switch holds the most.
  const std::vector<int64_t> held =
      published_writeback_held(published_switches(s, g, c, 0.0), published_slot_pages(g, c), published_writeback(s, g));
  return held.empty() ? 0 : *std::max_element(held.begin(), held.end());
}

int64_t published_pages_in_flight(const Scenario& s, const step::Geometry& g) {
  if (s.config.implementation != step::Implementation::published || !g.oomb || !g.offload ||
      step::target_of(s.gpu).backend != step::BackendKind::cuda)
    return 0;
  int64_t best = 0;
  for (int64_t c = std::max<int64_t>(0, g.n - 2); c < g.n; ++c) best = std::max(best, published_pages_in_flight(s, g, c));
  return best;
}

}  // namespace detail

namespace {

// Steady-state time of one layer pass with R slots: bounded by compute, by each copy stream,
// and by the slots (each slot is busy for copy-in + compute + write-back).
double pass_time(const detail::PassCost& p, double in_s, double out_s, int64_t R) {
  if (R <= 1) return in_s + p.compute_s + out_s;
  return std::max({p.compute_s, in_s, out_s, (in_s + p.compute_s + out_s) / static_cast<double>(R)});
}

// Link speed-up needed so that this pass exposes no copy time (R >= 2).
double required_scale(const detail::PassCost& p, double in_s, double out_s, int64_t R) {
  if (p.compute_s <= 0) return 0;
  return std::max({in_s / p.compute_s, out_s / p.compute_s, (in_s + out_s) / (static_cast<double>(R - 1) * p.compute_s)});
}

// The per-chunk figures the fast path sums.
struct ChunkTotals {
  double step = 0, compute = 0, flops = 0, h2d = 0, d2h = 0, scale = 0, first_in = 0;
};

ChunkTotals chunk_totals(const Scenario& s, const step::Geometry& g, int64_t c) {
  using namespace detail;
  const ChunkCosts cc = chunk_costs(s, g, c, Terms::skip);  // times only
  ChunkTotals r;
  const double in_full = h2d_rate(s, false), out_full = d2h_rate(s, false);
  const double in_dup = h2d_rate(s, true), out_dup = d2h_rate(s, true);
  bool first = true;
  // Layers of each pass: every layer fills and recomputes; the backward re-runs the forward of the
  // first g.Lr layers only (partial checkpointing keeps the others' activations).
  const std::pair<const PassCost*, int64_t> passes[] = {
      {&cc.fill, g.L}, {&cc.recompute, g.L}, {&cc.backward, g.Lr}, {&cc.backward_kept, g.L - g.Lr}};
  for (const auto& [p, layers] : passes) {
    if (layers == 0) continue;
    // With one slot the copies of a pass are serialised with its compute: never both at once.
    const bool both = p->in_bytes > 0 && p->out_bytes > 0 && g.R >= 2;
    const double in_s = p->in_bytes / (both ? in_dup : in_full);
    const double out_s = p->out_bytes / (both ? out_dup : out_full);
    if (first) r.first_in = in_s;
    first = false;
    r.compute += layers * p->compute_s;
    r.flops += layers * p->flops;
    r.step += layers * (g.offload ? pass_time(*p, in_s, out_s, g.R) : p->compute_s);
    if (g.offload && g.R >= 2) r.scale = std::max(r.scale, required_scale(*p, in_s, out_s, g.R));
    r.h2d += static_cast<double>(layers * p->in_bytes);
    r.d2h += static_cast<double>(layers * p->out_bytes);
  }
  // The chunk's non-layer passes: its embedding in each stage, the LM head, the embedding's gradient.
  const double head_s = cc.head.compute_s + 2.0 * cc.fill_head.compute_s + cc.embedding_bwd.compute_s;
  r.compute += head_s;
  r.step += head_s;
  r.flops += cc.head.flops;
  return r;
}

// Sums chunk_totals over the full chunks c in [a, b]. Within a range where the page counts are
// affine in c, every summed quantity is a convex piecewise-linear function of c (a max of affine
// terms), so a midpoint equal to the chord proves the whole range linear and its integer sum is
// the trapezoid (b - a + 1)(f(a) + f(b)) / 2, exactly. Otherwise split at the midpoint.
// Over the chunks offset + i x stride instead (i the summed index), where the totals are periodic in
// the chunk (chunked local layers whose block is not a multiple of the chunk): affine within each
// residue class.
//
// A mixed stack (several layer classes) switches its mean pass between compute- and copy-bound at
// more chunks than a dense one (five kinks in gemma-3-27b's 4M step): there each quantity is summed
// by the sandwich of its end tangents instead. The tangents at both ends of a range meet where the
// only kink would be; the two points beside that meeting on the two lines prove both sides linear
// (convexity), else the range splits there. About two points per kink instead of a bisection's
// 2 log2(range). every_chunk: no shortcut at all (detail::evaluate_every_chunk, for tests).
class RangeSum {
 public:
  RangeSum(const Scenario& s, const step::Geometry& g, int64_t stride = 1, int64_t offset = 0, bool every_chunk = false)
      : s_(s), g_(g), stride_(stride), offset_(offset), every_chunk_(every_chunk), kinks_(g.class_count > 1) {}
  ChunkTotals eval(int64_t i) {
    const int64_t c = offset_ + i * stride_;
    ChunkTotals t = chunk_totals(s_, g_, c);
    if (c == 0) first_in = t.first_in;
    return t;
  }
  // The summed indices of the chunks of [a, b] in this progression.
  std::pair<int64_t, int64_t> indices(int64_t a, int64_t b) const {
    return {ceil_div(std::max<int64_t>(a - offset_, 0), stride_), b < offset_ ? -1 : (b - offset_) / stride_};
  }

  void add(const ChunkTotals& t, double k) {
    total.step += k * t.step;
    total.compute += k * t.compute;
    total.flops += k * t.flops;
    total.h2d += k * t.h2d;
    total.d2h += k * t.d2h;
    total.scale = std::max(total.scale, t.scale);
  }
  void add_range(int64_t a, int64_t b) {
    if (a > b) return;
    ChunkTotals fa = eval(a);
    if (a == b) return add(fa, 1.0);
    ChunkTotals fb = eval(b);
    add(fa, 1.0);
    add(fb, 1.0);
    interior(a, fa, b, fb);
  }
  ChunkTotals total;
  // Chunk 0's first copy-in, once eval(0) has run (every sum of a step evaluates chunk 0).
  std::optional<double> first_in;

 private:
  // Adds the sum over the open range (a, b).
  void interior(int64_t a, const ChunkTotals& fa, int64_t b, const ChunkTotals& fb) {
    if (b - a <= 1) return;
    if (every_chunk_) {
      for (int64_t i = a + 1; i < b; ++i) add(eval(i), 1.0);
      return;
    }
    const int64_t m = a + (b - a) / 2;
    ChunkTotals fm = eval(m);
    const double w = static_cast<double>(m - a) / static_cast<double>(b - a);
    auto on_chord = [&](double va, double vm, double vb) {
      const double chord = va + (vb - va) * w;
      return std::fabs(vm - chord) <= 1e-12 * std::max({std::fabs(va), std::fabs(vb), 1e-300});
    };
    if (on_chord(fa.step, fm.step, fb.step) && on_chord(fa.compute, fm.compute, fb.compute)) {
      // Linear on [a, b]: sum over the open interval = (b - a - 1) * mean of the ends.
      ChunkTotals mean;
      const double k = static_cast<double>(b - a - 1);
      mean.step = (fa.step + fb.step) / 2;
      mean.compute = (fa.compute + fb.compute) / 2;
      mean.flops = (fa.flops + fb.flops) / 2;
      mean.h2d = (fa.h2d + fb.h2d) / 2;
      mean.d2h = (fa.d2h + fb.d2h) / 2;
      add(mean, k);
      total.scale = std::max(total.scale, fm.scale);
      return;
    }
    if (kinks_ && b - a > 8) return sandwich_interior(a, b, m, fm);
    add(fm, 1.0);
    interior(a, fa, m, fm);
    interior(m, fm, b, fb);
  }

  // Mixed stacks: the sum over the open range (a, b) of each quantity by the sandwich of its end
  // tangents (each quantity is convex and piecewise linear in the chunk).
  void sandwich_interior(int64_t a, int64_t b, int64_t m, const ChunkTotals& fm) {
    std::vector<std::pair<int64_t, ChunkTotals>> seen{{m, fm}};  // sorted by chunk
    auto at = [&](int64_t i) -> const ChunkTotals& {
      auto it = std::lower_bound(seen.begin(), seen.end(), i, [](const auto& p, int64_t x) { return p.first < x; });
      if (it == seen.end() || it->first != i) it = seen.insert(it, {i, eval(i)});
      return it->second;
    };
    const int64_t L = a + 1, R = b - 1;
    for (double ChunkTotals::*q : {&ChunkTotals::step, &ChunkTotals::compute, &ChunkTotals::flops, &ChunkTotals::h2d,
                                   &ChunkTotals::d2h}) {
      // Sum of f over [lo, hi], given f at lo, lo + 1, hi - 1 and hi.
      auto sum = [&](auto&& self, int64_t lo, int64_t hi) -> double {
        const int64_t n = hi - lo + 1;
        if (n <= 4) {
          double t = 0;
          for (int64_t i = lo; i <= hi; ++i) t += at(i).*q;
          return t;
        }
        const double fl = at(lo).*q, fl1 = at(lo + 1).*q, fh1 = at(hi - 1).*q, fh = at(hi).*q;
        const double sa = fl1 - fl, sb = fh - fh1;
        const double tol = 1e-12 * std::max({std::fabs(fl), std::fabs(fh), 1e-300});
        const double N = static_cast<double>(n);
        if (std::fabs(sb - sa) <= tol / N) return N * (fl + fh) / 2;  // one line
        if (sb < sa) {  // not convex over the range (an end in a regime of its own): halves
          const int64_t mid = lo + (hi - lo) / 2;
          return self(self, lo, mid) + self(self, mid + 1, hi);
        }
        const double x = (fh - fl + sa * static_cast<double>(lo) - sb * static_cast<double>(hi)) / (sa - sb);
        const int64_t i0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(x)), lo + 1, hi - 2), i1 = i0 + 1;
        const double f0 = at(i0).*q, f1 = at(i1).*q;
        const double line_a = fl + sa * static_cast<double>(i0 - lo), line_b = fh - sb * static_cast<double>(hi - i1);
        if (std::fabs(f0 - line_a) <= tol && std::fabs(f1 - line_b) <= tol) {
          // Convex, with three points of each side on its line: linear on [lo, i0] and [i1, hi].
          const double n1 = static_cast<double>(i0 - lo), n2 = static_cast<double>(hi - i1);
          return (n1 + 1) * fl + sa * n1 * (n1 + 1) / 2 + (n2 + 1) * fh - sb * n2 * (n2 + 1) / 2;
        }
        return self(self, lo, i1) + self(self, i0, hi) - f0 - f1;
      };
      total.*q += sum(sum, L, R);
    }
    for (const auto& [i, t] : seen) total.scale = std::max(total.scale, t.scale);
  }

  const Scenario& s_;
  const step::Geometry& g_;
  int64_t stride_ = 1, offset_ = 0;
  bool every_chunk_ = false, kinks_ = false;
};

// The period in chunks of a stack's per-chunk totals beyond the ramps (1: affine between the cuts):
// a chunked layer whose block is not a multiple of the chunk repeats every lcm(block, C) / C chunks.
int64_t chunk_period(const step::Geometry& g) {
  int64_t period = 1;
  for (int i = 0; i < g.class_count; ++i)
    if (g.classes[i].attention == models::LayerAttention::chunked && g.C % g.classes[i].window != 0)
      period = std::lcm(period, std::lcm(g.classes[i].window, g.C) / g.C);
  return period;
}

}  // namespace

namespace {
Summary evaluate_impl(const Scenario& s, bool every_chunk) {
  using namespace detail;
  const step::Geometry g = geometry(s);
  // The table's figures only: the summary needs its peaks, not its rows' text.
  const step::TableSizes t = detail::table_sizes(s, g);
  Summary out;
  double compute = 0, step = 0, flops = 0, scale = 0;
  int64_t h2d = 0, d2h = 0;
  if (!g.oomb) {
    const ChunkCosts cc = standard_costs(s, g, Terms::skip);
    compute = g.L * cc.fill.compute_s + g.Lr * cc.backward.compute_s + (g.L - g.Lr) * cc.backward_kept.compute_s +
              cc.head.compute_s;
    flops = g.L * cc.fill.flops + g.Lr * cc.backward.flops + (g.L - g.Lr) * cc.backward_kept.flops + cc.head.flops;
    step = compute;
  } else {
    // Full chunks split where the page counts change form: sparse attention is dense until the
    // prefix exceeds the budget, and the union stops growing once it reaches its cap.
    RangeSum sum(s, g, 1, 0, every_chunk);
    const int64_t last_full = g.n - 2;  // the last chunk (maybe ragged) is added on its own
    std::vector<int64_t> cuts = {0};
    // A sliding layer's work grows until its window lies wholly in the prefix, then is constant.
    for (int i = 0; i < g.class_count; ++i)
      if (g.classes[i].attention == models::LayerAttention::sliding)
        cuts.push_back(std::min(ceil_div(g.classes[i].window, g.C), last_full + 1));
    if (g.sparse) {
      cuts.push_back(g.B / g.q + 1);  // first c with prefix pages > B
      for (int64_t c = cuts.back(); c <= last_full; ++c) {
        if (step::union_pages(g, c) < prefix_pages(g, c)) {
          cuts.push_back(c);
          break;
        }
        if (c > cuts.back() + 64) {  // the cap is reached within a few chunks; bisect otherwise
          int64_t lo = c, hi = last_full + 1;
          while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (step::union_pages(g, mid) < prefix_pages(g, mid)) hi = mid;
            else lo = mid + 1;
          }
          cuts.push_back(lo);
          break;
        }
      }
    }
    cuts.push_back(last_full + 1);
    std::sort(cuts.begin(), cuts.end());
    const int64_t period = chunk_period(g);
    if (period == 1) {
      for (size_t i = 0; i + 1 < cuts.size(); ++i)
        sum.add_range(std::max(cuts[i], i ? cuts[i] : 0), std::min(cuts[i + 1] - 1, last_full));
    } else {
      // One progression per residue class (chunked layers' blocks), each affine between the cuts.
      for (int64_t r = 0; r < period; ++r) {
        RangeSum part(s, g, period, r, every_chunk);
        for (size_t i = 0; i + 1 < cuts.size(); ++i) {
          const auto [a, b] = part.indices(cuts[i], std::min(cuts[i + 1] - 1, last_full));
          part.add_range(a, b);
        }
        sum.add(part.total, 1.0);
        if (part.first_in) sum.first_in = part.first_in;
      }
    }
    const ChunkTotals& tot = sum.total;
    ChunkTotals last = sum.eval(g.n - 1);
    step = tot.step + last.step;
    compute = tot.compute + last.compute;
    flops = tot.flops + last.flops;
    h2d = std::llround(tot.h2d) + std::llround(last.h2d);
    d2h = std::llround(tot.d2h) + std::llround(last.d2h);
    scale = std::max(tot.scale, last.scale);
    // Pipeline fill: the very first copy-in cannot hide behind anything.
    if (g.offload && g.R >= 2) step += sum.first_in ? *sum.first_in : sum.eval(0).first_in;
  }
  // Data parallelism: the gradients' all-reduce, in buckets from the last backward: on the compute
  // stream (MPI), or on its own stream and only what runs past the backward in the step (NCCL).
  // (The wait counts with the compute: the stream is held, not by copies.)
  const double allreduce_exposed = gradient_allreduce_exposed_s(s, g);
  step += allreduce_exposed;
  compute += allreduce_exposed;
  if (s.config.optimizer == step::Optimizer::gpu) {
    compute += optimizer_update_s(s);
    step += optimizer_update_s(s);
  } else if (s.config.optimizer == step::Optimizer::host) {
    // Gradients go to the host optimizer, it updates, and the parameters come back, once per step.
    const int64_t gbytes = step::optimizer_gradient_bytes(s.model, s.config, g);
    const int64_t pbytes = step::optimizer_weight_bytes(s.model, s.config, g);
    d2h += gbytes;
    h2d += pbytes;
    step += gbytes / d2h_rate(s, false) + optimizer_update_s(s) + pbytes / h2d_rate(s, false);
  }
  out.step_s = step;
  out.compute_s = compute;
  out.flops = flops;
  out.h2d_bytes = h2d;
  out.d2h_bytes = d2h;
  out.exposed_copy_s = std::max(0.0, step - compute);
  if (g.offload) {
    if (g.R >= 2) {
      out.required_h2d_bytes_per_s = scale * s.gpu.h2d_bytes_per_s;
      out.required_d2h_bytes_per_s = scale * s.gpu.d2h_bytes_per_s;
    } else {
      out.required_h2d_bytes_per_s = std::numeric_limits<double>::infinity();
      out.required_d2h_bytes_per_s = std::numeric_limits<double>::infinity();
    }
  }
  finish_summary(s, memory_figures(t), out);
  return out;
}
}  // namespace

Summary evaluate(const Scenario& s) { return evaluate_impl(s, false); }

namespace detail {
Summary evaluate_every_chunk(const Scenario& s) { return evaluate_impl(s, true); }
}  // namespace detail

Json to_json(const Summary& s) {
  auto rate = [](double v) { return std::isfinite(v) ? Json(v) : Json(nullptr); };
  Json j = Json::object();
  j["peak_device_bytes"] = s.peak_device_bytes;
  j["peak_host_bytes"] = s.peak_host_bytes;
  j["step_s"] = s.step_s;
  j["tokens_per_s"] = s.tokens_per_s;
  j["h2d_bytes"] = s.h2d_bytes;
  j["d2h_bytes"] = s.d2h_bytes;
  j["exposed_copy_s"] = s.exposed_copy_s;
  j["required_h2d_bytes_per_s"] = rate(s.required_h2d_bytes_per_s);
  j["required_d2h_bytes_per_s"] = rate(s.required_d2h_bytes_per_s);
  j["device_pool_pages"] = s.device_pool_pages;
  j["device_breakdown_bytes"] = s.device_breakdown_bytes;
  j["feasible"] = s.feasible;
  j["binding_constraint"] = to_string(s.binding);
  j["peak_phase"] = s.peak_phase;
  j["host_breakdown_bytes"] = s.host_breakdown_bytes;
  j["compute_s"] = s.compute_s;
  j["flops"] = s.flops;
  j["device_capacity_bytes"] = s.device_capacity_bytes;
  j["host_pinnable_bytes"] = s.host_capacity_bytes;
  j["kv_pool_pages"] = s.kv_pool_pages;
  j["grad_pool_pages"] = s.grad_pool_pages;
  j["max_union_pages"] = s.max_union_pages;
  if (s.pages_in_flight > 0) j["pages_in_flight"] = s.pages_in_flight;
  if (s.allreduce_bytes > 0) {
    j["allreduce_bytes"] = s.allreduce_bytes;
    j["allreduce_s"] = s.allreduce_s;
  }
  if (s.tp_allreduce_bytes > 0) {
    j["tp_allreduces"] = s.tp_allreduces;
    j["tp_allreduce_bytes"] = s.tp_allreduce_bytes;
    j["tp_allreduce_s"] = s.tp_allreduce_s;
  }
  j["notes"] = s.notes;
  return j;
}

const char* to_string(Binding b) {
  switch (b) {
    case Binding::device_memory: return "device memory";
    case Binding::pinned_host_memory: return "pinned host memory";
    case Binding::host_ram: return "host RAM";
    case Binding::h2d_link: return "h2d link";
    case Binding::d2h_link: return "d2h link";
    case Binding::compute: return "compute";
    case Binding::search_cap: return "search cap";
    case Binding::step_time_limit: return "step time limit";
    case Binding::throughput_limit: return "throughput limit";
  }
  return "compute";
}

std::optional<Binding> find_binding(const std::string& name) {
  for (Binding b : kBindings)
    if (name == to_string(b)) return b;
  return std::nullopt;
}

std::string binding_names() {
  std::string s;
  for (Binding b : kBindings) s += (s.empty() ? "" : ", ") + std::string(to_string(b));
  return s;
}

bool is_memory(Binding b) {
  return b == Binding::device_memory || b == Binding::pinned_host_memory || b == Binding::host_ram;
}

}  // namespace oomb::simulator
