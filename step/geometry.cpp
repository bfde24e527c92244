#include "step/geometry.h"

#include <numeric>
#include <span>

#include "core/error.h"

namespace oomb::step {

int64_t Geometry::union_bound(int64_t c) const {
  const int64_t pp = prefix_pages(c);
  if (!sparse || pp <= B) return pp;
  return std::min(pp, checked_mul(checked_mul(own_pages(c), B, "union bound"), select_groups, "union bound"));
}

int64_t Geometry::max_slot_pages() const {
  int64_t m = 0;
  for (int64_t c = std::max<int64_t>(0, n - 2); c < n; ++c) m = std::max(m, union_bound(c) + own_pages(c));
  return m;
}

LocalReach local_reach(models::LayerAttention kind, int64_t window, int64_t C, int64_t p, int64_t n) {
  LocalReach r;
  if (n <= 1) return r;
  if (kind == models::LayerAttention::sliding) {
    // The boundary b = cC is page-aligned; its first query sees the window - 1 tokens before it:
    // ceil((window - 1) / p) pages, the earliest straddled. Consecutive reaches end C apart, so
    // their union is (n - 1) x min(reach, C / p) pages; a reach longer than the prefix is cut at 0.
    const int64_t reach = ceil_div(window - 1, p), q = C / p;
    r.union_pages = checked_mul(n - 1, std::min(reach, q), "local pages");
    r.max_pages = std::min(reach, checked_mul(n - 1, q, "local pages"));
    return r;
  }
  // Chunked: the first query after b sees its block's tokens before b, [floor(b / A) A, b). The
  // reaches of the boundaries of one block share their start (nested), so the union grows by each
  // boundary's pages past the previous boundary or its block's start, whichever is later.
  // A boundary's growth repeats every lcm(window, C) / C boundaries (both its start and its end move
  // by lcm / p pages), so one period is summed and multiplied: a context of 2^40 tokens has 2^31
  // boundaries at chunk 512.
  if (C % window == 0) return r;  // every boundary starts a block: nothing reaches back
  auto growth = [&](int64_t c) {
    const int64_t b = c * C, start = b / window * window / p, end = b / p, prev_end = (c - 1) * C / p;
    r.max_pages = std::max(r.max_pages, end - start);
    return end - std::max(start, prev_end);
  };
  const int64_t boundaries = n - 1, period = window / std::gcd(window, C);
  int64_t one_period = 0, part = 0;
  for (int64_t c = 1; c <= std::min(boundaries, period); ++c) {
    const int64_t x = growth(c);
    if (c <= boundaries % period) part += x;
    one_period += x;
  }
  r.union_pages = boundaries <= period ? one_period
                                       : checked_add(checked_mul(boundaries / period, one_period, "local pages"), part, "local pages");
  return r;
}

Geometry geometry(const models::ModelSpec& m, const Config& c) {
  validate(c, m);
  Geometry g;
  g.L = effective_layers(c, m);
  g.Lr = recomputed_layers(c, m);
  g.N = c.context_tokens;
  g.G = c.gpus;
  g.h = m.hidden;
  g.qd = m.q_dim() / g.G;
  g.kvd = m.kv_dim() / g.G;
  g.f = m.ffn_hidden / g.G;
  g.V = m.vocab;
  g.q_heads = m.q_heads / g.G;
  g.kv_heads = m.kv_heads / g.G;
  g.head_dim = m.head_dim;
  g.act_b = dtype_bytes(c.activation_dtype);
  g.kv_b = dtype_bytes(c.kv_dtype);
  g.grad_b = dtype_bytes(c.kv_grad_dtype);
  g.oomb = c.schedule == Schedule::oomb;
  g.sparse = c.attention == Attention::sparse;
  g.C = g.oomb ? std::min(c.chunk_tokens, g.N) : g.N;
  // The chunk may exceed N (one chunk); keep it page-aligned for the page geometry.
  if (g.oomb && c.chunk_tokens > g.N) g.C = ceil_div(g.N, c.page_tokens) * c.page_tokens;
  g.Cm = g.oomb ? std::min(c.chunk_tokens, g.N) : g.N;
  g.p = c.page_tokens;
  g.n = ceil_div(g.N, g.C);
  g.P = ceil_div(g.N, g.p);
  g.q = g.C / g.p;
  // The stack's layer classes (attention kind x MLP kind), counted once; what follows reads them.
  for (int64_t l = 0; l < g.L; ++l) {
    const models::LayerAttention a = m.attention_of(l);
    const bool moe = m.moe_layer(l);
    int i = 0;
    while (i < g.class_count && !(g.classes[i].attention == a && g.classes[i].moe == moe)) ++i;
    if (i == g.class_count) g.classes[g.class_count++] = {a, m.window_tokens(a), moe, 0};
    ++g.classes[i].layers;
  }
  // Layer kinds: the global layers hold the pools (and offload), the local ones their reach.
  g.Lg = global_layers(c, m);
  g.Ll = g.L - g.Lg;
  if (g.oomb && g.Ll > 0) {
    int64_t persistent = 0;
    for (const Geometry::LayerClass& k : std::span(g.classes.data(), static_cast<size_t>(g.class_count))) {
      if (k.attention == models::LayerAttention::global) continue;
      const LocalReach r = local_reach(k.attention, k.window, g.C, c.page_tokens, g.n);
      g.local_kv_pages = checked_add(g.local_kv_pages, checked_mul(k.layers, r.union_pages, "local pages"), "local pages");
      persistent = checked_add(persistent, checked_mul(k.layers, r.max_pages, "local pages"), "local pages");
    }
    g.local_kv_pages = checked_add(g.local_kv_pages, g.q, "local pages");
    // A layer's backward of chunk c holds its own pages and the reach of boundary c; the reach of
    // boundary c + 1 it found pending lies within those (reaches end at their boundary and start no
    // later than the previous one's), so each layer needs at most its largest reach + one chunk.
    g.local_grad_pages = checked_add(persistent, g.q, "local pages");
  }
  g.R = std::min(c.resident_layers, g.Lg);
  g.offload = g.oomb && c.resident_layers < g.Lg;
  if (m.moe.present()) {
    for (int i = 0; i < g.class_count; ++i) g.Lmoe += g.classes[i].moe ? g.classes[i].layers : 0;
    g.experts = m.moe.experts;
    g.top_k = m.moe.experts_per_token;
    g.fe = m.moe.expert_ffn_hidden / g.G;
    g.fs = m.moe.shared_width() / g.G;
  }
  g.B = c.page_budget;
  g.overlap = c.selection_overlap;
  g.select_groups = g.sparse && c.selection == "per-kv-head" ? g.kv_heads : 1;
  g.kv_page_bytes = checked_mul(g.p, 2 * g.kv_heads * g.head_dim * g.kv_b, "KV page");
  g.grad_page_bytes = checked_mul(g.p, 2 * g.kv_heads * g.head_dim * g.grad_b, "gradient page");
  g.summary_bytes = g.kv_heads * g.head_dim * g.kv_b;
  g.fused_loss = c.logits_chunk_tokens > 0;
  g.T = g.fused_loss ? std::min(c.logits_chunk_tokens, g.Cm) : g.Cm;
  g.lora = c.lora_rank > 0;
  if (g.lora) {
    const int64_t r = c.lora_rank, h = m.hidden, G = g.G;
    for (const std::string& t : c.lora_targets) {
      // (in, out) of the projection; column-parallel ones split out, row-parallel ones split in.
      const bool row_parallel = t == "o_proj" || t == "down_proj";
      const int64_t in = t == "o_proj" ? m.q_dim() : t == "down_proj" ? m.ffn_hidden : h;
      const int64_t out = t == "q_proj"                     ? m.q_dim()
                          : t == "k_proj" || t == "v_proj"   ? m.kv_dim()
                          : t == "gate_proj" || t == "up_proj" ? m.ffn_hidden
                                                             : h;
      g.lora_layer_params += row_parallel ? r * (in / G) + r * out : r * in + r * (out / G);
      g.lora_width += r;
    }
  }
  return g;
}

int64_t param_count(const models::ModelSpec& m, const Config& c) {
  const int64_t L = effective_layers(c, m);
  int64_t layers = 0;
  if (m.uniform_layers() && m.moe.dense_layers.empty()) {
    layers = checked_mul(L, m.layer_params(0), "parameters");
  } else {
    for (int64_t l = 0; l < L; ++l) layers = checked_add(layers, m.layer_params(l), "parameters");
  }
  return m.embedding_params() + m.lm_head_params() + layers + m.hidden;
}

models::ModelSpec tensor_parallel_shard(const models::ModelSpec& m, int64_t tp) {
  OOMB_ASSERT(tp >= 1 && m.q_heads % tp == 0 && m.kv_heads % tp == 0 && m.ffn_hidden % tp == 0 && m.vocab % tp == 0 &&
                  m.moe.expert_ffn_hidden % tp == 0 && m.moe.shared_ffn_hidden % tp == 0,
              "tensor_parallel_shard: tp does not divide the model");
  models::ModelSpec s = m;
  s.q_heads = m.q_heads / tp;
  s.kv_heads = m.kv_heads / tp;
  s.ffn_hidden = m.ffn_hidden / tp;
  s.vocab = m.vocab / tp;
  // Each expert's columns split as a dense MLP's; the router (hidden x experts) whole on every rank.
  s.moe.expert_ffn_hidden = m.moe.expert_ffn_hidden / tp;
  s.moe.shared_ffn_hidden = m.moe.shared_ffn_hidden / tp;
  return s;
}

int64_t rank_param_count(const models::ModelSpec& m, const Config& c) {
  return c.gpus == 1 ? param_count(m, c) : param_count(tensor_parallel_shard(m, c.gpus), c);
}

int64_t rank_expert_param_count(const models::ModelSpec& m, const Config& c) {
  if (!m.moe.present()) return 0;
  const int64_t L = effective_layers(c, m);
  int64_t layers = 0;
  for (int64_t l = 0; l < L; ++l) layers += m.moe_layer(l);
  const int64_t one = c.gpus == 1 ? m.expert_params() : tensor_parallel_shard(m, c.gpus).expert_params();
  return checked_mul(checked_mul(layers, m.moe.experts, "expert parameters"), one, "expert parameters");
}

int64_t lora_param_count(const Geometry& g) { return checked_mul(g.L, g.lora_layer_params, "LoRA parameters"); }

int64_t trainable_param_count(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  if (!g.lora) return rank_param_count(m, c);
  const int64_t embeddings = c.lora_train_embeddings ? (m.embedding_params() + m.lm_head_params()) / g.G : 0;
  return lora_param_count(g) + embeddings;
}

int64_t trained_gradient_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  const int64_t adapters = lora_param_count(g), base = trainable_param_count(m, c, g) - adapters;
  return checked_add(checked_mul(adapters, 4), checked_mul(base, dtype_bytes(c.param_grad_dtype)));
}

int64_t trained_weight_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  const int64_t adapters = lora_param_count(g), base = trainable_param_count(m, c, g) - adapters;
  return checked_add(checked_mul(adapters, 4), checked_mul(base, dtype_bytes(c.param_dtype)));
}

bool shards_optimizer(const Config& c) {
  return c.shard_optimizer && c.data_parallel > 1 && c.optimizer != Optimizer::none;
}

OptimizerShard optimizer_shard(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  OptimizerShard o;
  o.trained = trainable_param_count(m, c, g);
  o.padded = o.shard = o.trained;
  if (shards_optimizer(c)) {
    o.sharded = true;
    o.shard = ceil_div(o.trained, c.data_parallel);
    o.padded = checked_mul(o.shard, c.data_parallel);
  }
  return o;
}

int64_t optimizer_gradient_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  if (!shards_optimizer(c)) return trained_gradient_bytes(m, c, g);
  return checked_mul(optimizer_shard(m, c, g).shard, dtype_bytes(c.param_grad_dtype));
}

int64_t optimizer_weight_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  if (!shards_optimizer(c)) return trained_weight_bytes(m, c, g);
  return checked_mul(optimizer_shard(m, c, g).shard, dtype_bytes(c.param_dtype));
}

std::vector<GradientBucket> gradient_buckets(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  const models::ModelSpec shard = c.gpus > 1 ? tensor_parallel_shard(m, c.gpus) : m;
  const int64_t gb = dtype_bytes(c.param_grad_dtype);
  const bool bf16 = c.param_grad_dtype == Dtype::bf16;
  std::vector<GradientBucket> out;
  auto push = [&](int64_t bytes, bool b) {
    if (bytes > 0) out.push_back({bytes, b});
  };
  if (g.lora) {
    // The adapters (fp32) per layer; the embeddings and the LM head only with lora_train_embeddings
    // (the final norm stays frozen).
    const bool emb = c.lora_train_embeddings;
    push(emb ? checked_mul(shard.lm_head_params(), gb) : 0, bf16);
    for (int64_t l = 0; l < g.L; ++l) push(checked_mul(g.lora_layer_params, 4), false);
    push(emb ? checked_mul(shard.embedding_params(), gb) : 0, bf16);
  } else {
    push(checked_mul(checked_add(shard.hidden, shard.lm_head_params()), gb), bf16);
    for (int64_t l = g.L - 1; l >= 0; --l) push(checked_mul(shard.layer_params(l), gb), bf16);
    push(checked_mul(shard.embedding_params(), gb), bf16);
  }
  return out;
}

}  // namespace oomb::step
