// The memory model: every buffer is a row; totals are derived from the rows (docs/model.md).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/units.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"

namespace oomb::simulator {

using models::dtype_bytes;

namespace {
const char* const kPhaseNames[] = {"fill", "recompute", "loss", "backward", "optimizer", "forward"};
constexpr Phase kOombPhases[] = {Phase::fill, Phase::recompute, Phase::loss, Phase::backward, Phase::optimizer};
constexpr Phase kStandardPhases[] = {Phase::forward, Phase::loss, Phase::backward, Phase::optimizer};

// The peak over the schedule's phases of the rows of one tier; the breakdown only for the winner.
// One pass over the rows sums every phase at once (the planner evaluates this in its inner loop).
MemoryTable::PhasePeak peak_of(const MemoryTable& t, Tier tier, bool include_reserve) {
  int64_t totals[6] = {};
  for (const auto& r : t.rows) {
    if (r.tier != tier || (!include_reserve && r.category == "runtime_reserve")) continue;
    for (PhaseMask m = r.phases & 0x3Fu; m != 0; m &= m - 1) {  // the six phases
      int64_t& total = totals[__builtin_ctz(m)];
      int64_t sum = 0;
      if (__builtin_add_overflow(total, r.bytes, &sum)) checked_add(total, r.bytes, "memory of a phase");  // throws
      total = sum;
    }
  }
  MemoryTable::PhasePeak best;
  bool first = true;
  auto each = [&](auto&& phases) {
    for (Phase p : phases) {
      const int64_t total = totals[static_cast<int>(p)];
      if (first || total > best.bytes) {  // ties: the earlier phase
        best.phase = p;
        best.bytes = total;
        first = false;
      }
    }
  };
  if (t.schedule == Schedule::oomb) each(kOombPhases);
  else each(kStandardPhases);
  const PhaseMask bit = phase_bit(best.phase);
  for (const auto& r : t.rows)
    if (r.tier == tier && (r.phases & bit) && (include_reserve || r.category != "runtime_reserve"))
      best.breakdown[r.category] += r.bytes;
  return best;
}
}  // namespace

const char* to_string(Phase p) { return kPhaseNames[static_cast<int>(p)]; }

Phase phase_from_string(const std::string& s, const std::string& where) {
  for (int i = 0; i < 6; ++i)
    if (s == kPhaseNames[i]) return static_cast<Phase>(i);
  throw Error(where, s, "unknown phase", "one of fill, recompute, loss, backward, optimizer, forward");
}

std::vector<Phase> phases_of(Schedule s) {
  if (s == Schedule::oomb) return {std::begin(kOombPhases), std::end(kOombPhases)};
  return {std::begin(kStandardPhases), std::end(kStandardPhases)};
}

PhaseMask all_phases(Schedule s) {
  PhaseMask m = 0;
  for (Phase p : phases_of(s)) m |= phase_bit(p);
  return m;
}

std::vector<std::string> phase_names(PhaseMask m) {
  // Step order of both schedules (fill and recompute never share a mask with forward).
  constexpr Phase kStepOrder[] = {Phase::fill,     Phase::recompute, Phase::forward,
                                  Phase::loss,     Phase::backward,  Phase::optimizer};
  std::vector<std::string> v;
  for (Phase p : kStepOrder)
    if (m & phase_bit(p)) v.emplace_back(to_string(p));
  return v;
}

MemoryTable::PhasePeak MemoryTable::device_peak(bool include_reserve) const {
  return peak_of(*this, Tier::device, include_reserve);
}
MemoryTable::PhasePeak MemoryTable::host_peak() const { return peak_of(*this, Tier::host, true); }

int64_t MemoryTable::device_bytes_in(Phase p, bool include_reserve) const {
  int64_t total = 0;
  for (const auto& r : rows)
    if (r.tier == Tier::device && (r.phases & phase_bit(p)) && (include_reserve || r.category != "runtime_reserve"))
      total = checked_add(total, r.bytes);
  return total;
}

int64_t MemoryTable::device_bytes(bool include_reserve) const { return device_peak(include_reserve).bytes; }
int64_t MemoryTable::host_bytes() const { return host_peak().bytes; }
std::map<std::string, int64_t> MemoryTable::device_breakdown() const { return device_peak().breakdown; }
std::map<std::string, int64_t> MemoryTable::host_breakdown() const { return host_peak().breakdown; }

namespace detail {

Geometry geometry(const Scenario& s) {
  const auto& m = s.model;
  const auto& c = s.config;
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
  g.p = c.page_tokens;
  g.n = ceil_div(g.N, g.C);
  g.P = ceil_div(g.N, g.p);
  g.q = g.C / g.p;
  g.R = std::min(c.resident_layers, g.L);
  g.offload = g.oomb && c.resident_layers < g.L;
  g.B = c.page_budget;
  g.overlap = c.selection_overlap;
  g.select_groups = c.selection == "per-kv-head" ? g.kv_heads : 1;
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

namespace {

PageCounts page_counts_of(const detail::Geometry& g) {
  PageCounts pc;
  pc.layers = g.L;
  pc.chunks = g.oomb ? g.n : 1;
  pc.pages_per_layer = g.P;
  pc.pages_per_chunk = g.q;
  pc.kv_page_bytes = g.kv_page_bytes;
  pc.grad_page_bytes = g.grad_page_bytes;
  if (!g.oomb) return pc;
  int64_t slot_max = 0, union_max = 0, bound_slot_max = 0;
  // Over the full chunks the union is non-decreasing in c (dense: the prefix; sparse: the prefix
  // capped at a constant), so the largest slot is that of one of the last two chunks (the last
  // one may be ragged, with fewer query pages and so a smaller sparse union).
  for (int64_t c = std::max<int64_t>(0, g.n - 2); c < g.n; ++c) {
    int64_t u = detail::union_pages(g, c);
    union_max = std::max(union_max, u);
    slot_max = std::max(slot_max, u + detail::own_pages(g, c));
    // The pool is allocated before any selection is known: for the union's bound, B pages per
    // query page (and selection group), not for the modelled overlap.
    const int64_t pp = detail::prefix_pages(g, c);
    const int64_t bound = g.sparse && pp > g.B
                              ? std::min(pp, checked_mul(checked_mul(detail::own_pages(g, c), g.B), g.select_groups))
                              : pp;
    bound_slot_max = std::max(bound_slot_max, bound + detail::own_pages(g, c));
  }
  pc.max_union_pages = union_max;
  if (g.offload) {
    pc.kv_pool_pages = checked_mul(g.R, slot_max, "KV pool pages");
    pc.grad_pool_pages = checked_mul(g.R, slot_max, "gradient pool pages");
    pc.kv_pool_capacity_pages = checked_mul(g.R, bound_slot_max, "KV pool pages");
    pc.grad_pool_capacity_pages = pc.kv_pool_capacity_pages;
    pc.host_kv_pages = checked_mul(g.L, g.P, "host KV pages");
    pc.host_grad_pages = pc.host_kv_pages;
  } else {
    pc.kv_pool_pages = checked_mul(g.L, g.P, "KV pool pages");
    pc.grad_pool_pages = pc.kv_pool_pages;
    pc.kv_pool_capacity_pages = pc.grad_pool_capacity_pages = pc.kv_pool_pages;
  }
  return pc;
}

}  // namespace

PageCounts page_counts(const Scenario& s) { return page_counts_of(detail::geometry(s)); }

namespace {

// Only called when describing (the strings are built lazily through DIMS below).
std::string dims_text(std::initializer_list<int64_t> v) {
  std::string s = "[";
  bool first = true;
  for (auto x : v) {
    s += (first ? "" : ", ") + std::to_string(x);
    first = false;
  }
  return s + "]";
}

// The CUDA backend's cuBLASLt workspace (executor/cuda), one allocation for the run.
constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

}  // namespace

#define OOMB_SHAPE(...) (describe ? dims_text(__VA_ARGS__) : std::string())
#define OOMB_TEXT(...) (describe ? std::string(__VA_ARGS__) : std::string())

MemoryTable memory_table(const Scenario& s) { return detail::memory_table(s, true); }

MemoryTable detail::memory_table(const Scenario& s, bool describe) { return memory_table(s, geometry(s), describe); }

MemoryTable detail::memory_table(const Scenario& s, const Geometry& g, bool describe) {
  const auto& c = s.config;
  MemoryTable t;
  t.pages = page_counts_of(g);
  t.schedule = c.schedule;
  t.rows.reserve(32);
  // Phases of the step (docs/model.md); `all` = every phase of the schedule.
  const PhaseMask all = all_phases(c.schedule);
  const PhaseMask fill = phase_bit(Phase::fill), rec = phase_bit(Phase::recompute), loss = phase_bit(Phase::loss),
                  bwd = phase_bit(Phase::backward), fwd = phase_bit(Phase::forward);
  // Shapes, lifetimes and formulas are text for people; the planner's inner loop skips them.
  auto add = [&](const char* name, const char* category, Tier tier, auto&& shape, const std::string& dtype,
                 int64_t bytes, PhaseMask phases, auto&& formula) {
    Buffer& b = t.rows.emplace_back();
    b.name = name;
    b.category = category;
    b.tier = tier;
    b.dtype = dtype;
    b.bytes = bytes;
    b.phases = phases;
    if (describe) {
      b.shape = shape;
      b.formula = formula;
      if (phases == all) {
        b.lifetime = "all phases";
      } else {
        for (const auto& n : phase_names(phases)) b.lifetime += (b.lifetime.empty() ? "" : ", ") + n;
      }
    }
  };
  // The rows that only the CUDA backend allocates (selection scores, page tables, library
  // workspaces, the context reserve): a "cpu" profile plans for the CPU backend, which keeps
  // those in host vectors of the emulator.
  const bool gpu_rows = s.gpu.kind != "cpu";
  const std::string& act = c.activation_dtype;
  const int64_t A = g.act_b;
  const int64_t params = detail::param_count(s) / g.G;
  const int64_t pb = dtype_bytes(c.param_dtype, "--param-dtype");
  const int64_t gb = dtype_bytes(c.param_grad_dtype, "--param-grad-dtype");
  const int64_t lb = dtype_bytes(c.loss_dtype, "--loss-dtype");
  add("weights", "weights", Tier::device, OOMB_SHAPE({params}), c.param_dtype, checked_mul(params, pb), all,
      "params / gpus x param dtype");
  add("parameter_gradients", "parameter_gradients", Tier::device, OOMB_SHAPE({params}), c.param_grad_dtype,
      checked_mul(params, gb), all, "params / gpus x param-grad dtype");
  if (c.optimizer != Optimizer::none) {
    // AdamW in fp32: master weights (when the parameters are not fp32), m and v, the decay mask.
    // The host tier is shared by the tensor-parallel GPUs.
    const Tier tier = c.optimizer == Optimizer::gpu ? Tier::device : Tier::host;
    const int64_t shards = c.optimizer == Optimizer::host ? g.G : 1;
    if (pb != 4)
      add("master_weights", "optimizer_state", tier, OOMB_SHAPE({params}), "fp32", checked_mul(params, 4) * shards, all,
          "params x 4 (fp32 master weights of non-fp32 parameters)");
    add("adamw_moments", "optimizer_state", tier, OOMB_SHAPE({2, params}), "fp32", checked_mul(params, 8) * shards, all,
        "2 x params x 4 (m, v)");
    add("adamw_decay_mask", "optimizer_state", tier, OOMB_SHAPE({params}), "uint8", params * shards, all,
        "params x 1 (weight decay on or off per parameter)");
    if (c.optimizer == Optimizer::host) {
      // The host update's operands: the gradients copied out, the working weights copied back in.
      add("host_parameter_gradients", "optimizer_state", Tier::host, OOMB_SHAPE({params}), c.param_grad_dtype,
          checked_mul(params, gb) * shards, all, "params x param-grad dtype (copied out for the host update)");
      add("host_weights", "optimizer_state", Tier::host, OOMB_SHAPE({params}), c.param_dtype,
          checked_mul(params, pb) * shards, all, "params x param dtype (the updated working weights, copied in)");
    }
  }

  // Tokens whose activations are alive at once: the chunk's rows (not page-aligned) or the sequence.
  const int64_t T = g.oomb ? std::min(c.chunk_tokens, g.N) : g.N;
  const int64_t tile = c.logits_chunk_tokens > 0 ? std::min(c.logits_chunk_tokens, T) : T;
  const std::string tok = g.oomb ? "chunk" : "sequence";
  // Per token of one layer: h1, x2, h2, tmp (hidden); q, o (q_dim); k, v (kv_dim); gate, up,
  // silu(gate)*up (ffn). Its backward: dx2, dh2, dh1; dout, dq; dk, dv; dm, dgate, dup.
  // q/k RMSNorm (Qwen3) adds the projections before it (q_dim + kv_dim) and, to the backward, their
  // gradients; its per-head rstd joins the norms' (q_heads + kv_heads per token).
  const int64_t qkn = s.model.qk_norm ? g.qd + g.kvd : 0;
  const int64_t rstd_per_token = 2 + (s.model.qk_norm ? g.q_heads + g.kv_heads : 0);
  const int64_t layer_act_width = 4 * g.h + 2 * g.qd + 2 * g.kvd + 3 * g.f + qkn;
  const int64_t layer_bwd_width = 3 * g.h + 2 * g.qd + 2 * g.kvd + 3 * g.f + qkn;
  // Stage 1 and stage 2 forward/backward of a layer (oomb); forward/backward of a layer (standard).
  const PhaseMask layer_phases = g.oomb ? (fill | rec | bwd) : (fwd | bwd);
  // From the first forward that keeps them to the last backward.
  const PhaseMask kept = g.oomb ? (rec | loss | bwd) : (fwd | loss | bwd);

  add("token_ids", "inputs", Tier::device, OOMB_SHAPE({2, T}), "int32", checked_mul(T, 8), all,
      OOMB_TEXT(tok + " tokens x 2 (ids, targets) x 4"));
  if (g.oomb) {
    add("hidden_states", "hidden_states", Tier::device, OOMB_SHAPE({2, T, g.h}), act, checked_mul(T, 2 * g.h * A), all,
        "2 (x, y ping-pong) x chunk tokens x hidden x activation dtype");
  } else {
    // The layer inputs are the checkpoints; the last layer's output is the final norm's input.
    add("hidden_states", "hidden_states", Tier::device, OOMB_SHAPE({g.N, g.h}), act, checked_mul(g.N, g.h * A),
        fwd | loss, "sequence tokens x hidden x activation dtype (the last layer's output)");
  }
  // The executor keeps the layer inputs also without checkpointing (the input norm's backward reads
  // them); a framework's standard step keeps them inside the activations.
  if (c.checkpointing || g.oomb) {
    add("layer_input_checkpoints", "checkpoints", Tier::device, OOMB_SHAPE({g.L, T, g.h}), act,
        checked_mul(checked_mul(g.L, T), g.h * A), kept, OOMB_TEXT("layers x " + tok + " tokens x hidden x activation dtype"));
  }
  if (!c.checkpointing) {
    // No recompute: every layer's activations are kept, and a layer computes in its own slice.
    const PhaseMask all_layers = g.oomb ? (fill | kept) : kept;
    add("all_layer_activations", "checkpoints", Tier::device, OOMB_SHAPE({g.L, T, layer_act_width}), act,
        checked_mul(checked_mul(g.L, T), layer_act_width * A), all_layers,
        OOMB_TEXT("layers x " + tok + " tokens x (4 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype"));
    add("layer_norm_rstd", "layer_working_set", Tier::device, OOMB_SHAPE({g.L, rstd_per_token, T}), "fp32",
        checked_mul(checked_mul(g.L, T), 4 * rstd_per_token), all_layers, OOMB_TEXT("layers x 2 norms x " + tok + " tokens x 4"));
    add("attention_lse", "attention_workspace", Tier::device, OOMB_SHAPE({g.L, T, g.q_heads}), "fp32",
        checked_mul(checked_mul(g.L, T), g.q_heads * 4), all_layers, OOMB_TEXT("layers x " + tok + " tokens x q_heads x 4"));
  }
  add("hidden_gradients", "layer_working_set", Tier::device, OOMB_SHAPE({2, T, g.h}), act, checked_mul(T, 2 * g.h * A),
      g.oomb ? (rec | loss | bwd) : (loss | bwd), OOMB_TEXT("2 (dy, dx) x " + tok + " tokens x hidden x activation dtype"));
  if (c.checkpointing && c.kept_layers > 0) {
    // Partial checkpointing: the last k layers keep their activations as checkpointing off keeps
    // all of them (same lifetime), and the recomputed layers share the one-layer set below.
    const int64_t k = c.kept_layers;
    const PhaseMask all_layers = g.oomb ? (fill | kept) : kept;
    add("kept_layer_activations", "checkpoints", Tier::device, OOMB_SHAPE({k, T, layer_act_width}), act,
        checked_mul(checked_mul(k, T), layer_act_width * A), all_layers,
        OOMB_TEXT("kept layers x " + tok + " tokens x (4 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype"));
    add("kept_layer_norm_rstd", "layer_working_set", Tier::device, OOMB_SHAPE({k, rstd_per_token, T}), "fp32",
        checked_mul(checked_mul(k, T), 4 * rstd_per_token), all_layers,
        OOMB_TEXT("kept layers x 2 norms x " + tok + " tokens x 4"));
    add("kept_attention_lse", "attention_workspace", Tier::device, OOMB_SHAPE({k, T, g.q_heads}), "fp32",
        checked_mul(checked_mul(k, T), g.q_heads * 4), all_layers,
        OOMB_TEXT("kept layers x " + tok + " tokens x q_heads x 4"));
  }
  if (c.checkpointing) {
    add("layer_activations", "layer_working_set", Tier::device, OOMB_SHAPE({T, layer_act_width}), act,
        checked_mul(T, layer_act_width * A), layer_phases,
        OOMB_TEXT(tok + " tokens x (4 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype (one layer)"));
    add("layer_norm_rstd", "layer_working_set", Tier::device, OOMB_SHAPE({rstd_per_token, T}), "fp32",
        checked_mul(T, 4 * rstd_per_token),
        layer_phases, OOMB_TEXT("2 norms x " + tok + " tokens x 4 (one layer)"));
    add("attention_lse", "attention_workspace", Tier::device, OOMB_SHAPE({T, g.q_heads}), "fp32",
        checked_mul(T, g.q_heads * 4), layer_phases, OOMB_TEXT(tok + " tokens x q_heads x 4 (log-sum-exp saved for the backward)"));
  }
  add("layer_backward_temporaries", "layer_working_set", Tier::device, OOMB_SHAPE({T, layer_bwd_width}), act,
      checked_mul(T, layer_bwd_width * A), bwd,
      OOMB_TEXT(tok + " tokens x (3 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype (one layer)"));
  // Final norm, LM head and cross-entropy (the loss phase).
  const int64_t V = g.V / g.G;
  add("final_norm", "logits", Tier::device, OOMB_SHAPE({2, T, g.h}), act, checked_mul(T, 2 * g.h * A), loss,
      OOMB_TEXT("2 (normed final hidden, its gradient) x " + tok + " tokens x hidden x activation dtype"));
  add("final_norm_rstd", "logits", Tier::device, OOMB_SHAPE({T}), "fp32", checked_mul(T, 4), loss,
      OOMB_TEXT(tok + " tokens x 4"));
  if (g.fused_loss) {
    add("logits", "logits", Tier::device, OOMB_SHAPE({tile, V}), c.loss_dtype, checked_mul(checked_mul(tile, V), lb), loss,
        "tile tokens x vocab x loss dtype (fused: the gradient is written in place)");
  } else {
    add("logits", "logits", Tier::device, OOMB_SHAPE({T, V}), act, checked_mul(checked_mul(T, V), A), loss,
        OOMB_TEXT(tok + " tokens x vocab x activation dtype (LM head output)"));
    if (c.loss_dtype != act)
      add("logits_upcast", "logits", Tier::device, OOMB_SHAPE({T, V}), c.loss_dtype,
          checked_mul(checked_mul(T, V), lb), loss, OOMB_TEXT(tok + " tokens x vocab x loss dtype (the upcast copy)"));
    add("logits_gradient", "logits", Tier::device, OOMB_SHAPE({T, V}), c.loss_dtype, checked_mul(checked_mul(T, V), lb),
        loss, OOMB_TEXT(tok + " tokens x vocab x loss dtype"));
  }

  if (g.oomb) {
    const auto& pc = t.pages;
    const char* pool_formula = !g.offload ? "layers x pages per layer x page bytes"
                               : g.sparse ? "resident layers x largest slot (union bound: B pages per query page, + own) "
                                            "x page bytes"
                                          : "resident layers x largest slot (pages) x page bytes";
    add("kv_pool", "kv_pages", Tier::device, OOMB_SHAPE({pc.kv_pool_capacity_pages, g.p, 2, g.kv_heads, g.head_dim}),
        c.kv_dtype, checked_mul(pc.kv_pool_capacity_pages, g.kv_page_bytes), all, pool_formula);
    add("kv_grad_pool", "kv_grad_pages", Tier::device,
        OOMB_SHAPE({pc.grad_pool_capacity_pages, g.p, 2, g.kv_heads, g.head_dim}), c.kv_grad_dtype,
        checked_mul(pc.grad_pool_capacity_pages, g.grad_page_bytes), all, pool_formula);
    if (gpu_rows) {
      const int64_t table_entries = g.offload ? checked_mul(g.R, 2 * (pc.kv_pool_pages / std::max<int64_t>(g.R, 1)))
                                              : checked_mul(g.L, 2 * g.P);
      add("page_tables", "page_tables", Tier::device, OOMB_SHAPE({table_entries}), "int32", checked_mul(table_entries, 4),
          all, g.offload ? "per-slot tables (KV and gradient)" : "layers x pages x 2 tables x 4 bytes");
    }
    if (g.offload) {
      add("host_kv_pages", "kv_pages", Tier::host, OOMB_SHAPE({pc.host_kv_pages, g.p, 2, g.kv_heads, g.head_dim}),
          c.kv_dtype, checked_mul(checked_mul(pc.host_kv_pages, g.kv_page_bytes), g.G), all,
          "layers x pages x KV page bytes (x gpus: the host is shared)");
      add("host_kv_grad_pages", "kv_grad_pages", Tier::host,
          OOMB_SHAPE({pc.host_grad_pages, g.p, 2, g.kv_heads, g.head_dim}), c.kv_grad_dtype,
          checked_mul(checked_mul(pc.host_grad_pages, g.grad_page_bytes), g.G), all,
          "layers x pages x gradient page bytes (x gpus)");
      add("host_page_tables", "page_tables", Tier::host, OOMB_SHAPE({g.L, g.P, 2}), "int32", checked_mul(g.L * 2, g.P * 4),
          all, "layers x pages x 2 tables x 4 bytes");
    }
    if (g.sparse) {
      const int64_t summaries = checked_mul(checked_mul(g.L, g.P), g.summary_bytes);
      const int64_t record = checked_mul(checked_mul(g.L, g.P), g.B * 4);
      if (c.selection_memory == SelectionMemory::device) {
        add("page_summaries", "page_summaries", Tier::device, OOMB_SHAPE({g.L, g.P, g.kvd}), c.kv_dtype, summaries, all,
            "layers x pages x kv_dim x KV dtype (grows with N)");
        if (gpu_rows) {
          add("selection_scores", "selection_scores", Tier::device, OOMB_SHAPE({g.C, g.kv_heads, g.P}), "fp32",
              checked_mul(checked_mul(g.C, g.kv_heads), g.P * 4), all, "chunk tokens x kv_heads x pages x 4 (grows with N)");
          add("selection_record", "page_tables", Tier::device, OOMB_SHAPE({g.L, g.P, g.B}), "int32", record, all,
              "layers x query pages x budget x 4");
        }
      } else {
        const int64_t tile_pages = std::min(c.selection_tile_pages, g.P);
        if (gpu_rows) {
          add("summary_tiles", "page_summaries", Tier::device, OOMB_SHAPE({2, tile_pages, g.kv_heads, g.head_dim}),
              c.kv_dtype, checked_mul(2 * tile_pages, g.summary_bytes), all,
              "2 x tile pages x kv_heads x head_dim x KV dtype");
          add("selection_scores", "selection_scores", Tier::device, OOMB_SHAPE({g.C, g.kv_heads, tile_pages}), "fp32",
              checked_mul(checked_mul(g.C, g.kv_heads), tile_pages * 4) + checked_mul(g.q, g.B * 8), all,
              OOMB_TEXT("chunk tokens x kv_heads x tile pages x 4 + running top-k"));
          add("selection_record_slot", "page_tables", Tier::device, OOMB_SHAPE({g.R, g.q, g.B}), "int32",
              checked_mul(g.q * g.B, 4) * g.R, all, "query pages x budget x 4 x resident layers");
        }
        add("host_page_summaries", "page_summaries", Tier::host, OOMB_SHAPE({g.L, g.P, g.kvd}), c.kv_dtype,
            summaries * g.G, all, "layers x pages x kv_dim x KV dtype (x gpus)");
        if (gpu_rows)
          add("host_selection_record", "page_tables", Tier::host, OOMB_SHAPE({g.L, g.P, g.B}), "int32", record * g.G, all,
              "layers x query pages x budget x 4 (x gpus)");
      }
    }
  }
  if (gpu_rows) {
    add("gemm_workspace", "backend_scratch", Tier::device, OOMB_SHAPE({kGemmWorkspaceBytes}), "uint8",
        kGemmWorkspaceBytes, all, "the CUDA backend's cuBLASLt workspace (32 MiB)");
    if (c.peak_measure == PeakMeasure::reserved)
      add("runtime_reserve", "runtime_reserve", Tier::device, OOMB_SHAPE({s.gpu.reserved_bytes}), "uint8",
          s.gpu.reserved_bytes, all, OOMB_TEXT("CUDA context + library workspaces (GPU profile)"));
  }
  return t;
}
#undef OOMB_SHAPE
#undef OOMB_TEXT

}  // namespace oomb::simulator
