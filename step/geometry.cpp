#include "step/geometry.h"

namespace oomb::step {

using models::dtype_bytes;

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
  g.act_b = dtype_bytes(c.activation_dtype, "--activation-dtype");
  g.kv_b = dtype_bytes(c.kv_dtype, "--kv-dtype");
  g.grad_b = dtype_bytes(c.kv_grad_dtype, "--kv-grad-dtype");
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
  g.R = std::min(c.resident_layers, g.L);
  g.offload = g.oomb && c.resident_layers < g.L;
  g.B = c.page_budget;
  g.overlap = c.selection_overlap;
  g.select_groups = g.sparse && c.selection == "per-kv-head" ? g.kv_heads : 1;
  g.kv_page_bytes = checked_mul(g.p, 2 * g.kv_heads * g.head_dim * g.kv_b, "KV page");
  g.grad_page_bytes = checked_mul(g.p, 2 * g.kv_heads * g.head_dim * g.grad_b, "gradient page");
  g.summary_bytes = g.kv_heads * g.head_dim * g.kv_b;
  g.fused_loss = c.logits_chunk_tokens > 0;
  g.T = g.fused_loss ? std::min(c.logits_chunk_tokens, g.Cm) : g.Cm;
  return g;
}

int64_t param_count(const models::ModelSpec& m, const Config& c) {
  const int64_t L = effective_layers(c, m);
  return m.embedding_params() + m.lm_head_params() + L * m.params_per_layer() + m.hidden;
}

}  // namespace oomb::step
