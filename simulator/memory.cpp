// The memory model: every buffer is a row; totals are derived from the rows (docs/model.md).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/units.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"

namespace oomb::simulator {

using models::dtype_bytes;

int64_t MemoryTable::device_bytes(bool include_reserve) const {
  int64_t total = 0;
  for (const auto& r : rows)
    if (r.tier == Tier::device && (include_reserve || r.category != "runtime_reserve")) total = checked_add(total, r.bytes);
  return total;
}

int64_t MemoryTable::host_bytes() const {
  int64_t total = 0;
  for (const auto& r : rows)
    if (r.tier == Tier::host) total = checked_add(total, r.bytes);
  return total;
}

std::map<std::string, int64_t> MemoryTable::device_breakdown() const {
  std::map<std::string, int64_t> m;
  for (const auto& r : rows)
    if (r.tier == Tier::device) m[r.category] += r.bytes;
  return m;
}

std::map<std::string, int64_t> MemoryTable::host_breakdown() const {
  std::map<std::string, int64_t> m;
  for (const auto& r : rows)
    if (r.tier == Tier::host) m[r.category] += r.bytes;
  return m;
}

namespace detail {

Geometry geometry(const Scenario& s) {
  const auto& m = s.model;
  const auto& c = s.config;
  validate(c, m);
  Geometry g;
  g.L = effective_layers(c, m);
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
  g.p = c.page_tokens;
  g.n = ceil_div(g.N, g.C);
  g.P = ceil_div(g.N, g.p);
  g.q = g.C / g.p;
  g.R = std::min(c.resident_layers, g.L);
  g.offload = g.oomb && c.resident_layers < g.L;
  g.B = c.page_budget;
  g.overlap = c.selection_overlap;
  g.kv_page_bytes = checked_mul(g.p, 2 * g.kv_heads * g.head_dim * g.kv_b, "KV page");
  g.grad_page_bytes = checked_mul(g.p, 2 * g.kv_heads * g.head_dim * g.grad_b, "gradient page");
  g.summary_bytes = g.kv_heads * g.head_dim * g.kv_b;
  g.T = c.logits_chunk_tokens > 0 ? std::min(c.logits_chunk_tokens, g.oomb ? g.C : g.N) : (g.oomb ? g.C : g.N);
  g.fused_loss = c.logits_chunk_tokens > 0;
  return g;
}

int64_t prefix_pages(const Geometry& g, int64_t c) { return (c * g.C) / g.p; }

int64_t own_pages(const Geometry& g, int64_t c) {
  int64_t end = std::min(g.N, (c + 1) * g.C);
  return ceil_div(end, g.p) - prefix_pages(g, c);
}

int64_t chunk_tokens_of(const Geometry& g, int64_t c) { return std::min(g.N, (c + 1) * g.C) - c * g.C; }

int64_t union_pages(const Geometry& g, int64_t c) {
  int64_t pp = prefix_pages(g, c);
  if (!g.sparse || pp <= g.B) return pp;
  int64_t qc = own_pages(g, c);
  double u = static_cast<double>(g.B) * (1.0 + static_cast<double>(qc - 1) * (1.0 - g.overlap));
  return std::min(pp, static_cast<int64_t>(std::llround(u)));
}

int64_t attended_prefix_pages(const Geometry& g, int64_t c) {
  int64_t pp = prefix_pages(g, c);
  return g.sparse ? std::min(pp, g.B) : pp;
}

}  // namespace detail

PageCounts page_counts(const Scenario& s) {
  auto g = detail::geometry(s);
  PageCounts pc;
  pc.layers = g.L;
  pc.chunks = g.oomb ? g.n : 1;
  pc.pages_per_layer = g.P;
  pc.pages_per_chunk = g.q;
  pc.kv_page_bytes = g.kv_page_bytes;
  pc.grad_page_bytes = g.grad_page_bytes;
  if (!g.oomb) return pc;
  int64_t slot_max = 0, union_max = 0;
  // Over the full chunks the union is non-decreasing in c (dense: the prefix; sparse: the prefix
  // capped at a constant), so the largest slot is that of one of the last two chunks (the last
  // one may be ragged, with fewer query pages and so a smaller sparse union).
  for (int64_t c = std::max<int64_t>(0, g.n - 2); c < g.n; ++c) {
    int64_t u = detail::union_pages(g, c);
    union_max = std::max(union_max, u);
    slot_max = std::max(slot_max, u + detail::own_pages(g, c));
  }
  pc.max_union_pages = union_max;
  if (g.offload) {
    pc.kv_pool_pages = checked_mul(g.R, slot_max, "KV pool pages");
    pc.grad_pool_pages = checked_mul(g.R, slot_max, "gradient pool pages");
    pc.host_kv_pages = checked_mul(g.L, g.P, "host KV pages");
    pc.host_grad_pages = pc.host_kv_pages;
  } else {
    pc.kv_pool_pages = checked_mul(g.L, g.P, "KV pool pages");
    pc.grad_pool_pages = pc.kv_pool_pages;
  }
  return pc;
}

namespace {

// Only called when describing (the strings are built lazily through DIMS below).
std::string dims_text(std::initializer_list<int64_t> v, const std::string& dtype) {
  std::string s = "[";
  bool first = true;
  for (auto x : v) {
    s += (first ? "" : ", ") + std::to_string(x);
    first = false;
  }
  return s + "] " + dtype;
}

}  // namespace

#define OOMB_SHAPE(...) (describe ? dims_text(__VA_ARGS__) : std::string())

MemoryTable memory_table(const Scenario& s) { return detail::memory_table(s, true); }

MemoryTable detail::memory_table(const Scenario& s, bool describe) {
  auto g = detail::geometry(s);
  const auto& c = s.config;
  const auto& m = s.model;
  MemoryTable t;
  t.pages = page_counts(s);
  t.rows.reserve(24);
  // Shapes, lifetimes and formulas are text for people; the planner's inner loop skips them.
  auto add = [&](const char* name, const char* category, Tier tier, auto&& shape, int64_t bytes, auto&& lifetime,
                 auto&& formula) {
    Buffer b;
    b.name = name;
    b.category = category;
    b.tier = tier;
    b.bytes = bytes;
    if (describe) {
      b.shape = shape;
      b.lifetime = lifetime;
      b.formula = formula;
    }
    t.rows.push_back(std::move(b));
  };
  const int64_t params = detail::param_count(s) / g.G;
  const int64_t pb = dtype_bytes(c.param_dtype, "--param-dtype");
  const int64_t gb = dtype_bytes(c.param_grad_dtype, "--param-grad-dtype");
  add("weights", "weights", Tier::device, OOMB_SHAPE({params}, c.param_dtype), checked_mul(params, pb), "run",
      "params / gpus x param dtype");
  add("parameter_gradients", "parameter_gradients", Tier::device, OOMB_SHAPE({params}, c.param_grad_dtype),
      checked_mul(params, gb), "step", "params / gpus x param-grad dtype");
  if (c.optimizer != Optimizer::none) {
    // AdamW: m and v in fp32, plus fp32 master weights when the parameters are not fp32.
    int64_t per_param = 8 + (pb == 4 ? 0 : 4);
    add("adamw_state", "optimizer_state", c.optimizer == Optimizer::gpu ? Tier::device : Tier::host,
        OOMB_SHAPE({params, per_param / 4}, "fp32"), checked_mul(params, per_param) * (c.optimizer == Optimizer::host ? g.G : 1),
        "run", "params x (m, v fp32" + std::string(pb == 4 ? ")" : " + fp32 master)"));
  }

  const int64_t T = g.oomb ? g.C : g.N;  // tokens whose activations live at once
  const std::string tok = g.oomb ? "chunk" : "sequence";
  // Per-token activations of one layer kept for its backward (bf16 unless stated):
  // input norm (h), q, k, v, attention output (q), post-attention residual (h), post norm (h),
  // gate, up, silu(gate)*up (f each).
  const int64_t layer_act_per_token = (3 * g.h + 2 * g.qd + 2 * g.kvd + 3 * g.f) * g.act_b;
  if (c.checkpointing) {
    add("layer_input_checkpoints", "checkpoints", Tier::device, OOMB_SHAPE({g.L, T, g.h}, c.activation_dtype),
        checked_mul(checked_mul(g.L, T), g.h * g.act_b), "stage 2 (per " + tok + ")",
        "layers x " + tok + " tokens x hidden x activation dtype");
    add("layer_activations", "layer_working_set", Tier::device, OOMB_SHAPE({T, layer_act_per_token / g.act_b}, c.activation_dtype),
        checked_mul(T, layer_act_per_token), "one layer's recompute",
        tok + " tokens x (3 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype");
  } else {
    add("all_layer_activations", "checkpoints", Tier::device, OOMB_SHAPE({g.L, T, layer_act_per_token / g.act_b}, c.activation_dtype),
        checked_mul(checked_mul(g.L, T), layer_act_per_token), "stage 2 (per " + tok + ")",
        "layers x " + tok + " tokens x per-layer activations");
  }
  // Backward temporaries of one layer: gradient of the hidden state and of gate/up (bf16), the
  // fp32 dQ accumulator of the attention backward.
  add("layer_backward_temporaries", "layer_working_set", Tier::device, OOMB_SHAPE({T, g.h + 2 * g.f}, c.activation_dtype),
      checked_mul(T, (g.h + 2 * g.f) * g.act_b + g.qd * 4), "one layer's backward",
      tok + " tokens x ((hidden + 2 ffn) x activation dtype + q_dim x 4)");
  add("attention_lse", "attention_workspace", Tier::device, OOMB_SHAPE({T, g.q_heads}, "fp32"), checked_mul(T, g.q_heads * 4),
      "one layer", tok + " tokens x q_heads x 4 (log-sum-exp saved for the backward)");
  // Loss: unfused = bf16 logits + fp32 upcast + fp32 gradient over the tile; fused = fp32 tile + bf16 gradient.
  const int64_t vocab_shard = g.V / g.G;
  const int64_t logit_bytes = g.fused_loss ? 4 + 2 : 2 + 4 + 4;
  add("logits_and_loss", "logits", Tier::device, OOMB_SHAPE({g.T, vocab_shard}, g.fused_loss ? "fp32+bf16" : "bf16+fp32+fp32"),
      checked_mul(checked_mul(g.T, vocab_shard), logit_bytes), "LM head + cross-entropy",
      std::to_string(g.T) + " tokens x vocab x " + std::to_string(logit_bytes) + " bytes" +
          (g.fused_loss ? " (fused chunked loss)" : " (unfused, whole " + tok + ")"));
  add("final_hidden", "logits", Tier::device, OOMB_SHAPE({T, g.h}, c.activation_dtype), checked_mul(T, g.h * g.act_b),
      "LM head input", tok + " tokens x hidden x activation dtype");

  if (g.oomb) {
    const auto& pc = t.pages;
    add("kv_pool", "kv_pages", Tier::device, OOMB_SHAPE({pc.kv_pool_pages, g.p, 2, g.kv_heads, g.head_dim}, c.kv_dtype),
        checked_mul(pc.kv_pool_pages, g.kv_page_bytes), "step",
        g.offload ? "resident layers x largest slot (pages) x page bytes" : "layers x pages per layer x page bytes");
    add("kv_grad_pool", "kv_grad_pages", Tier::device,
        OOMB_SHAPE({pc.grad_pool_pages, g.p, 2, g.kv_heads, g.head_dim}, c.kv_grad_dtype),
        checked_mul(pc.grad_pool_pages, g.grad_page_bytes), "step",
        g.offload ? "resident layers x largest slot (pages) x page bytes" : "layers x pages per layer x page bytes");
    const int64_t table_entries = g.offload ? checked_mul(g.R, 2 * (pc.kv_pool_pages / std::max<int64_t>(g.R, 1)))
                                            : checked_mul(g.L, 2 * g.P);
    add("page_tables", "page_tables", Tier::device, OOMB_SHAPE({table_entries}, "int32"), checked_mul(table_entries, 4), "step",
        g.offload ? "per-slot tables (KV and gradient)" : "layers x pages x 2 tables x 4 bytes");
    if (g.offload) {
      add("host_kv_pages", "kv_pages", Tier::host, OOMB_SHAPE({pc.host_kv_pages, g.p, 2, g.kv_heads, g.head_dim}, c.kv_dtype),
          checked_mul(checked_mul(pc.host_kv_pages, g.kv_page_bytes), g.G), "step (peak at end of stage 1)",
          "layers x pages x KV page bytes (x gpus: the host is shared)");
      add("host_kv_grad_pages", "kv_grad_pages", Tier::host,
          OOMB_SHAPE({pc.host_grad_pages, g.p, 2, g.kv_heads, g.head_dim}, c.kv_grad_dtype),
          checked_mul(checked_mul(pc.host_grad_pages, g.grad_page_bytes), g.G), "step (peak at end of stage 1)",
          "layers x pages x gradient page bytes (x gpus)");
      add("host_page_tables", "page_tables", Tier::host, OOMB_SHAPE({g.L, g.P, 2}, "int32"), checked_mul(g.L * 2, g.P * 4), "step",
          "layers x pages x 2 tables x 4 bytes");
    }
    if (g.sparse) {
      const int64_t summaries = checked_mul(checked_mul(g.L, g.P), g.summary_bytes);
      const int64_t record = checked_mul(checked_mul(g.L, g.P), g.B * 4);
      if (c.selection_memory == SelectionMemory::device) {
        add("page_summaries", "page_summaries", Tier::device, OOMB_SHAPE({g.L, g.P, g.kv_heads, g.head_dim}, c.kv_dtype),
            summaries, "step (grows with N)", "layers x pages x kv_heads x head_dim x KV dtype");
        add("selection_scores", "selection_scores", Tier::device, OOMB_SHAPE({g.C, g.kv_heads, g.P}, "fp32"),
            checked_mul(checked_mul(g.C, g.kv_heads), g.P * 4), "one layer's selection (grows with N)",
            "chunk tokens x kv_heads x pages x 4");
        add("selection_record", "page_tables", Tier::device, OOMB_SHAPE({g.L, g.P, g.B}, "int32"), record, "stage 1 -> stage 2",
            "layers x query pages x budget x 4");
      } else {
        const int64_t tile = std::min(c.selection_tile_pages, g.P);
        add("summary_tiles", "page_summaries", Tier::device, OOMB_SHAPE({2, tile, g.kv_heads, g.head_dim}, c.kv_dtype),
            checked_mul(2 * tile, g.summary_bytes), "selection (bounded)", "2 x tile pages x kv_heads x head_dim x KV dtype");
        add("selection_scores", "selection_scores", Tier::device, OOMB_SHAPE({g.C, g.kv_heads, tile}, "fp32"),
            checked_mul(checked_mul(g.C, g.kv_heads), tile * 4) + checked_mul(g.q, g.B * 8), "one layer's selection (bounded)",
            "chunk tokens x kv_heads x tile pages x 4 + running top-k");
        add("selection_record_slot", "page_tables", Tier::device, OOMB_SHAPE({g.q, g.B}, "int32"), checked_mul(g.q * g.B, 4) * g.R,
            "per slot", "query pages x budget x 4 x resident layers");
        add("host_page_summaries", "page_summaries", Tier::host, OOMB_SHAPE({g.L, g.P, g.kv_heads, g.head_dim}, c.kv_dtype),
            summaries * g.G, "step", "layers x pages x kv_heads x head_dim x KV dtype (x gpus)");
        add("host_selection_record", "page_tables", Tier::host, OOMB_SHAPE({g.L, g.P, g.B}, "int32"), record * g.G,
            "stage 1 -> stage 2", "layers x query pages x budget x 4 (x gpus)");
      }
    }
  }
  if (c.peak_measure == PeakMeasure::reserved)
    add("runtime_reserve", "runtime_reserve", Tier::device, "-", s.gpu.reserved_bytes, "run",
        "CUDA context + library workspaces (GPU profile)");
  (void)m;
  return t;
}
#undef OOMB_SHAPE

}  // namespace oomb::simulator
