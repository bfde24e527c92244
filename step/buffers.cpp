// The buffer table: every buffer of the step is a row sized here (docs/model.md).
#include "step/buffers.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "step/allocator.h"
#include "step/cuda_scratch.h"

namespace oomb::step {

const char* to_string(BackendKind b) { return b == BackendKind::cpu ? "cpu" : "cuda"; }

Target target_of(const models::GpuSpec& gpu) {
  Target t;
  t.backend = gpu.kind == "cpu" ? BackendKind::cpu : BackendKind::cuda;
  t.runtime_reserve_bytes = gpu.reserved_bytes;
  t.nccl_channels = gpu.nccl_channels > 0 ? gpu.nccl_channels : cuda_scratch::kDefaultNcclChannels;
  return t;
}

namespace {
constexpr Phase kOombPhases[] = {Phase::fill, Phase::recompute, Phase::loss, Phase::backward, Phase::optimizer};
constexpr Phase kStandardPhases[] = {Phase::forward, Phase::loss, Phase::backward, Phase::optimizer};

template <class Row>  // BufferRow or RowSize
bool counted(const Row& r, Tier tier, bool include_reserve) {
  return r.tier == tier && (include_reserve || !reserved_only(r.category));
}

// The bytes by category of the rows of one tier alive in the phases of `bit`.
std::map<std::string, int64_t> breakdown_at(const std::vector<BufferRow>& rows, PhaseMask bit, Tier tier,
                                            bool include_reserve) {
  std::map<std::string, int64_t> out;
  for (const auto& r : rows)
    if (counted(r, tier, include_reserve) && (r.phases & bit)) out[r.category] += r.bytes;
  return out;
}
// The same from the rows' figures: summed per category first (no string per row), then one entry
// per category present, appended in key order (the enum's).
std::map<std::string, int64_t> breakdown_at(std::span<const RowSize> rows, PhaseMask bit, Tier tier,
                                            bool include_reserve) {
  int64_t bytes[kCategoryCount] = {};
  bool present[kCategoryCount] = {};
  for (const auto& r : rows) {
    if (!counted(r, tier, include_reserve) || !(r.phases & bit)) continue;
    bytes[static_cast<int>(r.category)] += r.bytes;
    present[static_cast<int>(r.category)] = true;
  }
  std::map<std::string, int64_t> out;
  for (int c = 0; c < kCategoryCount; ++c)
    if (present[c]) out.emplace_hint(out.end(), kCategoryNames[c], bytes[c]);
  return out;
}

constexpr bool category_names_sorted() {
  for (int c = 1; c < kCategoryCount; ++c)
    if (!(std::string_view(kCategoryNames[c - 1]) < std::string_view(kCategoryNames[c]))) return false;
  return true;
}
static_assert(category_names_sorted(), "Category lists the categories in the order of their names");

// The peak over the schedule's phases of the rows of one tier; the breakdown only for the winner.
// One pass over the rows sums every phase at once (the planner evaluates this in its inner loop).
// Rows: the table's (BufferRow) or their figures (RowSize).
template <class Rows>
BufferTable::PhasePeak peak_of(const Rows& rows, Schedule schedule, Tier tier, bool include_reserve) {
  int64_t totals[kPhaseCount] = {};
  for (const auto& r : rows) {
    if (!counted(r, tier, include_reserve)) continue;
    for (PhaseMask m = r.phases & 0x3Fu; m != 0; m &= m - 1) {  // the six phases
      int64_t& total = totals[__builtin_ctz(m)];
      int64_t sum = 0;
      if (__builtin_add_overflow(total, r.bytes, &sum)) checked_add(total, r.bytes, "memory of a phase");  // throws
      total = sum;
    }
  }
  BufferTable::PhasePeak best;
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
  if (schedule == Schedule::oomb) each(kOombPhases);
  else each(kStandardPhases);
  best.breakdown = breakdown_at(rows, phase_bit(best.phase), tier, include_reserve);
  return best;
}
}  // namespace

BufferTable::PhasePeak BufferTable::device_peak(bool include_reserve) const {
  return peak_of(rows, schedule, Tier::device, include_reserve);
}
BufferTable::PhasePeak BufferTable::host_peak() const { return peak_of(rows, schedule, Tier::host, true); }

BufferTable::PhasePeak TableSizes::device_peak(bool include_reserve) const {
  return peak_of(rows(), schedule, Tier::device, include_reserve);
}
BufferTable::PhasePeak TableSizes::host_peak() const { return peak_of(rows(), schedule, Tier::host, true); }

int64_t BufferTable::device_bytes_in(Phase p, bool include_reserve) const {
  int64_t total = 0;
  for (const auto& r : rows)
    if (counted(r, Tier::device, include_reserve) && (r.phases & phase_bit(p))) total = checked_add(total, r.bytes);
  return total;
}

int64_t BufferTable::device_bytes(bool include_reserve) const { return device_peak(include_reserve).bytes; }
int64_t BufferTable::host_bytes() const { return host_peak().bytes; }

const BufferRow* BufferTable::find(const std::string& name, Tier tier) const {
  for (const auto& r : rows)
    if (r.tier == tier && r.name == name) return &r;
  return nullptr;
}

const RowTensor* BufferRow::tensor(std::string_view tensor_name) const {
  for (const RowTensor& t : tensors)
    if (t.name == tensor_name) return &t;
  return nullptr;
}

Json to_json(const BufferRow& r) {
  return {{"name", r.name},   {"category", r.category}, {"tier", to_string(r.tier)}, {"shape", r.shape},
          {"dtype", r.dtype}, {"bytes", r.bytes},       {"phases", phase_names(r.phases)}};
}

BufferRow buffer_row_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  if (!j.is_object())
    r.fail("", "is not an object", "{\"name\", \"category\", \"tier\", \"shape\", \"dtype\", \"bytes\", \"phases\"}");
  BufferRow b;
  b.name = r.str("name");
  b.category = r.str("category");
  const std::string tier = r.str("tier");
  if (tier != "device" && tier != "host") r.fail("tier", "'" + tier + "' is not a tier", "device or host");
  b.tier = tier == "device" ? Tier::device : Tier::host;
  b.shape = r.str_or("shape", "");
  const std::string dtype = r.str("dtype");
  const std::optional<Dtype> d = find_dtype(dtype);
  if (!d) r.fail("dtype", "'" + dtype + "' is not a dtype", "fp32, bf16, fp16, fp8, int32, uint8 or fp64");
  b.dtype = *d;
  b.bytes = r.i64("bytes");
  const Json& phases = r.array("phases");
  if (phases.empty()) r.fail("phases", "is empty", "the phases in which the buffer is alive, e.g. [\"loss\"]");
  for (const auto& p : phases) {
    if (!p.is_string()) r.fail("phases", "must be an array of phase names");
    b.phases |= phase_bit(phase_from_string(p.get<std::string>(), where + ": phases"));
  }
  return b;
}

int64_t union_pages(const Geometry& g, int64_t c) {
  const int64_t pp = g.prefix_pages(c);
  if (!g.sparse || pp <= g.B) return pp;
  const int64_t qc = g.own_pages(c);
  const double u = static_cast<double>(g.B) * (1.0 + static_cast<double>(qc - 1) * (1.0 - g.overlap));
  return std::min(pp, static_cast<int64_t>(std::llround(u)));
}

ImpliedOverlap implied_overlap(const Geometry& g, const std::vector<MeasuredUnion>& unions) {
  ImpliedOverlap r;
  if (!g.sparse || g.B <= 0) return r;
  double sum = 0;
  for (const MeasuredUnion& u : unions) {
    if (u.chunk < 0 || u.chunk >= g.n) continue;
    const int64_t qc = g.own_pages(u.chunk);
    if (qc <= 1 || g.prefix_pages(u.chunk) <= g.B * qc) continue;
    const double ov = std::clamp(
        1.0 - (static_cast<double>(u.pages) / static_cast<double>(g.B) - 1.0) / static_cast<double>(qc - 1), 0.0, 1.0);
    r.at_largest = r.pairs == 0 ? ov : std::min(r.at_largest, ov);
    sum += ov;
    ++r.pairs;
  }
  // Two decimals, rounded down: the formula at that overlap reaches at least the largest union.
  if (r.pairs > 0) {
    r.at_largest = std::floor(r.at_largest * 100.0 + 1e-9) / 100.0;
    r.mean = sum / static_cast<double>(r.pairs);
  }
  return r;
}

int64_t attended_prefix_pages(const Geometry& g, int64_t c) {
  const int64_t pp = g.prefix_pages(c);
  return g.sparse ? std::min(pp, g.B) : pp;
}

PageCounts page_counts(const Geometry& g) {
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
  // capped at a constant), so the largest slot is that of one of the last two chunks (the last one
  // may be ragged, with fewer query pages and so a smaller sparse union).
  for (int64_t c = std::max<int64_t>(0, g.n - 2); c < g.n; ++c) {
    const int64_t u = union_pages(g, c);
    union_max = std::max(union_max, u);
    slot_max = std::max(slot_max, u + g.own_pages(c));
  }
  pc.max_union_pages = union_max;
  if (g.offload) {
    pc.kv_pool_pages = checked_mul(g.R, slot_max, "KV pool pages");
    pc.grad_pool_pages = checked_mul(g.R, slot_max, "gradient pool pages");
    // The pool is allocated before any selection is known: for the union's bound, B pages per
    // query page (and selection group), not for the modelled overlap.
    pc.kv_pool_capacity_pages = checked_mul(g.R, g.max_slot_pages(), "KV pool pages");
    pc.grad_pool_capacity_pages = pc.kv_pool_capacity_pages;
    pc.host_kv_pages = checked_mul(g.Lg, g.P, "host KV pages");
    pc.host_grad_pages = pc.host_kv_pages;
  } else {
    pc.kv_pool_pages = checked_mul(g.Lg, g.P, "KV pool pages");
    pc.grad_pool_pages = pc.kv_pool_pages;
    pc.kv_pool_capacity_pages = pc.grad_pool_capacity_pages = pc.kv_pool_pages;
  }
  return pc;
}

namespace {

// Only called when describing (the strings are built lazily through OOMB_SHAPE below).
std::string dims_text(std::initializer_list<int64_t> v) {
  std::string s = "[";
  bool first = true;
  for (auto x : v) {
    s += (first ? "" : ", ") + std::to_string(x);
    first = false;
  }
  return s + "]";
}

}  // namespace

#define OOMB_SHAPE(...) (describe ? dims_text(__VA_ARGS__) : std::string())
#define OOMB_TEXT(...) (describe ? std::string(__VA_ARGS__) : std::string())
// A row's tensors, built only by a sink that keeps them (RowSink; the fast path's SizeSink never
// calls it).
#define OOMB_TENSORS(...) [&] { return Tensors{__VA_ARGS__}; }

namespace {

using Tensors = std::vector<RowTensor>;

// Keeps the rows as BufferRows (buffer_table) with their tensors; shapes, lifetimes and formulas
// only when describing.
struct RowSink {
  BufferTable& t;
  bool describe;
  PhaseMask all;  // every phase of the schedule
  template <class Shape, class Formula, class MakeTensors>
  void add(const char* name, Category category, Tier tier, Shape&& shape, Dtype dtype, int64_t bytes,
           PhaseMask phases, Formula&& formula, MakeTensors&& tensors) {
    BufferRow& b = t.rows.emplace_back();
    b.name = name;
    b.category = to_string(category);
    b.tier = tier;
    b.dtype = dtype;
    b.bytes = bytes;
    b.phases = phases;
    b.tensors = tensors();
    int64_t held = 0;
    for (const RowTensor& x : b.tensors) held = checked_add(held, checked_mul(x.elements, dtype_bytes(x.dtype)));
    OOMB_ASSERT(held == bytes, "row " + b.name + ": its tensors hold " + std::to_string(held) + " bytes, the row " +
                                   std::to_string(bytes));
    if (describe) {
      b.shape = shape;
      b.formula = formula;
      if (phases == all) {
        b.lifetime = "all phases";
      } else {
        for (const auto& n : phase_names(phases)) b.lifetime += (b.lifetime.empty() ? "" : ", ") + n;
      }
    }
  }
  allocator::ArenaLayout arena_layout() const { return allocator::cuda_arena_layout(t.rows, false); }
};

// Keeps only the figures (table_sizes): no string, no allocation.
struct SizeSink {
  TableSizes& t;
  template <class Shape, class Formula, class MakeTensors>
  void add(const char* name, Category category, Tier tier, Shape&&, Dtype, int64_t bytes,
           PhaseMask phases, Formula&&, MakeTensors&&) {
    OOMB_ASSERT(t.row_count < TableSizes::kMaxRows, "a buffer table with more than TableSizes::kMaxRows rows");
    t.row_storage[static_cast<size_t>(t.row_count++)] = {name, category, tier, bytes, phases};
  }
  allocator::ArenaLayout arena_layout() const { return allocator::cuda_arena_layout(t.rows()); }
};

// Every row of the step, in table order, each sized here and nowhere else; `sink` keeps them
// (RowSink or SizeSink). Names are literals (TableSizes keeps pointers to them).
template <class Sink>
void add_rows(const models::ModelSpec& m, const Config& c, const Target& target, const Geometry& g, bool describe,
              PageCounts& pages, Sink& sink) {
  pages = page_counts(g);
  // Phases of the step (docs/model.md); `all` = every phase of the schedule.
  const PhaseMask all = all_phases(c.schedule);
  const PhaseMask fill = phase_bit(Phase::fill), rec = phase_bit(Phase::recompute), loss = phase_bit(Phase::loss),
                  bwd = phase_bit(Phase::backward), fwd = phase_bit(Phase::forward);
  // Shapes and formulas are text for people (OOMB_SHAPE, OOMB_TEXT build them only when describing).
  // Each row's tensors (OOMB_TENSORS) are emitted beside its bytes, from the same figures.
  auto add = [&](const char* name, Category category, Tier tier, auto&& shape, Dtype dtype,
                 int64_t bytes, PhaseMask phases, auto&& formula, auto&& tensors) {
    sink.add(name, category, tier, shape, dtype, bytes, phases, formula, tensors);
  };
  const bool cuda = target.backend == BackendKind::cuda;
  // The published implementation's own GPU buffers (device score matrix, page tables): modelled
  // for --preset oomb-published on a GPU profile, never allocated by this project's executor.
  const bool published = cuda && c.implementation == Implementation::published;
  const Dtype act = c.activation_dtype;
  const int64_t A = g.act_b;
  const int64_t params = rank_param_count(m, c);  // norms whole on every rank
  const int64_t pb = dtype_bytes(c.param_dtype);
  (void)dtype_bytes(c.param_grad_dtype);  // a bad dtype is refused by flag
  const int64_t lb = dtype_bytes(c.loss_dtype);
  // ZeRO-1: the trained parameters padded to a multiple of the replicas (full fine-tuning: all of
  // them), the AdamW state one replica's shard.
  const OptimizerShard zero = optimizer_shard(m, c, g);
  const bool sharded = zero.sharded;
  // A mixture of experts' routed experts are a row of their own (unless ZeRO-1 pads every trained
  // parameter into one buffer): in the parameter dtype when trained (a full fine-tune trains them
  // dequantized), in their stored format when frozen (LoRA: MXFP4 stays MXFP4).
  const int64_t experts = sharded ? 0 : rank_expert_param_count(m, c);
  const int64_t weights = sharded ? zero.padded : params - experts;
  add(row::kWeights, Category::weights, Tier::device, OOMB_SHAPE({weights}), c.param_dtype, checked_mul(weights, pb), all,
      g.lora ? (experts > 0 ? "params per rank but the routed experts x param dtype (the frozen base)"
                            : "params per rank x param dtype (the frozen base)")
      : sharded     ? "params per rank (sharded; norms whole), padded to a multiple of the replicas, x param dtype"
      : experts > 0 ? "params per rank but the routed experts (sharded; norms whole) x param dtype"
                    : "params per rank (sharded; norms whole) x param dtype",
      OOMB_TENSORS({"weights", weights, c.param_dtype}));
  if (experts > 0) {
    const bool packed = g.lora && m.moe.expert_weights == models::WeightFormat::mxfp4;
    const int64_t bytes = models::weight_bytes(packed ? m.moe.expert_weights : models::WeightFormat::native, experts, pb);
    const Dtype dtype = packed ? Dtype::uint8 : c.param_dtype;
    add(row::kExpertWeights, Category::weights, Tier::device, OOMB_SHAPE({experts}), dtype, bytes, all,
        packed  ? "MoE layers x experts x expert params per rank, MXFP4 as stored (17 bytes per 32 weights; frozen)"
        : g.lora ? "MoE layers x experts x expert params per rank x param dtype (frozen)"
        : m.moe.expert_weights == models::WeightFormat::mxfp4
            ? "MoE layers x experts x expert params per rank x param dtype (trained: the MXFP4 checkpoint dequantized)"
            : "MoE layers x experts x expert params per rank x param dtype (trained)",
        OOMB_TENSORS({"experts", packed ? bytes : experts, dtype}));
  }
  // What the step trains: every parameter, or under LoRA the adapters (fp32, as PEFT creates them
  // on a bf16 base) and, with lora_train_embeddings, the embeddings and the LM head.
  const int64_t adapters = lora_param_count(g);
  const int64_t trained_base = g.lora ? trainable_param_count(m, c, g) - adapters : params;
  if (g.lora)
    add(row::kLoraAdapters, Category::weights, Tier::device, OOMB_SHAPE({adapters}), Dtype::fp32, checked_mul(adapters, 4), all,
        "layers x targets x r x (in + out) per GPU x 4 (A and B, fp32)", OOMB_TENSORS({"adapters", adapters, Dtype::fp32}));
  const int64_t grad_bytes = sharded ? checked_mul(zero.padded, dtype_bytes(c.param_grad_dtype))
                                     : trained_gradient_bytes(m, c, g);
  // The trained parameters' gradients (or, for the host update, the trained parameters): one
  // tensor, or under LoRA the adapters' (fp32) and the trained embeddings' (in `base_dtype`).
  auto trained_tensors = [&](const char* name, int64_t elements, Dtype base_dtype) {
    if (sharded || !g.lora) return Tensors{{name, elements, base_dtype}};
    Tensors t{{std::string("adapter_") + name, adapters, Dtype::fp32}};
    if (trained_base > 0) t.push_back({std::string("embedding_") + name, trained_base, base_dtype});
    return t;
  };
  // The measuring process's first step (the published implementation, docs/model.md "How it
  // measures"): the published test never frees a parameter gradient, so only the step at its sweep's
  // first context starts without them. With one backward (standard, or a single chunk) they appear
  // as the backward goes down the layers while the layers' checkpoints are freed: at layer i's
  // backward the LM head's, the final norm's and those of layers i..L-1 exist (layer i's counted
  // whole) beside the checkpoints of layers 0..i, and the input embedding's comes last, when no
  // layer's activations are left. The backward's peak is the largest of those moments. A chunked
  // step's later chunks find every gradient made by the first chunk's backward (their rows as
  // always). Dense full fine-tuning on one GPU with checkpointing (the published baseline).
  const PhaseMask opt = phase_bit(Phase::optimizer);
  const bool first_step = published && c.sweep_first_context > 0 && g.N <= c.sweep_first_context &&
                          (!g.oomb || g.n == 1) && !g.lora && !sharded && g.G == 1 && experts == 0 &&
                          c.checkpointing && c.kept_layers == 0;
  const int64_t gb = dtype_bytes(c.param_grad_dtype);
  // Elements: the gradients held at the backward's largest moment; bytes: the checkpoints then.
  int64_t first_step_grads = 0, first_step_checkpoints = 0;
  if (first_step) {
    const int64_t checkpoint = checked_mul(g.Cm, g.h * g.act_b);
    int64_t grads = checked_add(m.tied_embeddings ? m.embedding_params() : m.lm_head_params(), m.hidden), best = -1;
    for (int64_t i = g.L - 1; i >= 0; --i) {
      grads = checked_add(grads, m.layer_params(i));
      const int64_t checkpoints = checked_mul(i + 1, checkpoint), moment = checked_add(checked_mul(grads, gb), checkpoints);
      if (moment > best) best = moment, first_step_grads = grads, first_step_checkpoints = checkpoints;
    }
    OOMB_ASSERT(first_step_grads <= params, "first-step gradients above the step's");
  }
  add(row::kParameterGradients, Category::parameter_gradients, Tier::device,
      OOMB_SHAPE({sharded ? zero.padded : first_step ? first_step_grads : adapters + trained_base}),
      g.lora && trained_base == 0 ? Dtype::fp32 : c.param_grad_dtype, first_step ? first_step_grads * gb : grad_bytes,
      first_step ? (bwd | opt) : all,
      g.lora      ? "adapters x 4 + trained embeddings / gpus x param-grad dtype (the frozen base has none)"
      : sharded   ? "params per rank, padded to a multiple of the replicas, x param-grad dtype"
      : first_step ? "(LM head + final norm + layers i..L-1 params) x param-grad dtype, at the backward's largest moment "
                     "(the first step of the measuring process: made by its backward)"
                  : "params per rank x param-grad dtype",
      [&] {
        return trained_tensors("gradients", sharded ? zero.padded : first_step ? first_step_grads : params, c.param_grad_dtype);
      });
  if (first_step)
    add("later_parameter_gradients", Category::parameter_gradients, Tier::device,
        OOMB_SHAPE({params - first_step_grads}), c.param_grad_dtype, checked_mul(params - first_step_grads, gb), opt,
        "(embedding + layers 0..i-1 params) x param-grad dtype (the first step's gradients made after the backward's largest moment)",
        OOMB_TENSORS({"later_gradients", params - first_step_grads, c.param_grad_dtype}));
  if (c.optimizer != Optimizer::none) {
    // AdamW in fp32: master weights (of trained parameters that are not fp32), m and v, the decay
    // mask. Per rank, as every row (the node's host holds its tensor-parallel ranks' rows:
    // step::node_host_bytes).
    const Tier tier = c.optimizer == Optimizer::gpu ? Tier::device : Tier::host;
    // Sharded (ZeRO-1): each of these holds one replica's shard of the trained parameters.
    const int64_t trained = sharded ? zero.shard : adapters + trained_base;
    const int64_t master = sharded ? zero.shard : trained_base;
    if (pb != 4 && trained_base > 0)
      add(row::kMasterWeights, Category::optimizer_state, tier, OOMB_SHAPE({master}), Dtype::fp32, checked_mul(master, 4), all,
          g.lora    ? "trained embeddings x 4 (fp32 master weights; the adapters are fp32)"
          : sharded ? "a replica's shard of the params x 4 (fp32 master weights of non-fp32 parameters)"
                    : "params x 4 (fp32 master weights of non-fp32 parameters)",
          OOMB_TENSORS({"master", master, Dtype::fp32}));
    add(row::kAdamwMoments, Category::optimizer_state, tier, OOMB_SHAPE({2, trained}), Dtype::fp32, checked_mul(trained, 8),
        all, g.lora    ? "2 x trained params x 4 (m, v)"
             : sharded ? "2 x a replica's shard of the params x 4 (m, v)"
                       : "2 x params x 4 (m, v)",
        OOMB_TENSORS({"m", trained, Dtype::fp32}, {"v", trained, Dtype::fp32}));
    add(row::kAdamwDecayMask, Category::optimizer_state, tier, OOMB_SHAPE({trained}), Dtype::uint8, trained, all,
        sharded ? "a replica's shard of the trained params x 1 (weight decay on or off per parameter)"
                : "trained params x 1 (weight decay on or off per parameter)",
        OOMB_TENSORS({"mask", trained, Dtype::uint8}));
    if (c.optimizer == Optimizer::host) {
      // The host update's operands: the gradients copied out, the working weights copied back in.
      add(row::kHostParameterGradients, Category::optimizer_state, Tier::host, OOMB_SHAPE({trained}),
          g.lora && trained_base == 0 ? Dtype::fp32 : c.param_grad_dtype, optimizer_gradient_bytes(m, c, g), all,
          sharded ? "a replica's shard of the params x param-grad dtype (copied out for the host update)"
                  : "trained params x param-grad dtype (copied out for the host update)",
          [&] { return trained_tensors("gradients", trained, c.param_grad_dtype); });
      add(row::kHostWeights, Category::optimizer_state, Tier::host, OOMB_SHAPE({trained}), g.lora ? Dtype::fp32 : c.param_dtype,
          optimizer_weight_bytes(m, c, g), all,
          sharded ? "a replica's shard of the params x param dtype (the updated working weights, copied in)"
                  : "trained params x their dtype (the updated working weights, copied in)",
          [&] { return trained_tensors("weights", trained, c.param_dtype); });
    }
    // Data parallelism on the CPU backend: MPI sums bf16 gradients in fp32 (executor/mpi), in a
    // staging buffer alive from the last chunk's LM-head backward, where the first gradient bucket
    // is final, to the update (step::gradient_buckets; NCCL sums bf16 itself).
    // Sharded, the gradients are reduce-scattered at the update, all at once: staged then only.
    const Dtype grad_dtype = g.lora && trained_base == 0 ? Dtype::fp32 : c.param_grad_dtype;
    if (!cuda && c.data_parallel > 1 && grad_dtype == Dtype::bf16)
      add(row::kGradientAllreduceStaging, Category::optimizer_state, Tier::host,
          OOMB_SHAPE({sharded ? zero.padded : adapters + trained_base}), Dtype::fp32,
          checked_mul(sharded ? zero.padded : adapters + trained_base, 4),
          sharded ? phase_bit(Phase::optimizer)
                  : phase_bit(Phase::loss) | phase_bit(Phase::backward) | phase_bit(Phase::optimizer),
          sharded ? "params per rank, padded, x 4 (the MPI reduce-scatter sums bf16 gradients in fp32)"
                  : "trained params x 4 (the MPI all-reduce sums bf16 gradients in fp32, bucket by bucket from the "
                    "last backward)",
          OOMB_TENSORS({"staging", sharded ? zero.padded : adapters + trained_base, Dtype::fp32}));
  }

  // Tokens whose activations are alive at once: the chunk's rows (not page-aligned) or the sequence.
  const int64_t T = g.Cm;
  const int64_t tile = g.T;
  const std::string tok = g.oomb ? "chunk" : "sequence";
  // Per token of one layer: h1, x2, h2, tmp (hidden); q, o (q_dim); k, v (kv_dim); gate, up,
  // silu(gate)*up (ffn). Its backward: dx2, dh2, dh1; dout, dq; dk, dv; dm, dgate, dup.
  // q/k RMSNorm (Qwen3) adds the projections before it (q_dim + kv_dim) and, to the backward, their
  // gradients; its per-head rstd joins the norms' (q_heads + kv_heads per token).
  const int64_t qkn = m.qk_norm ? g.qd + g.kvd : 0;
  // Hidden-wide activations per token: the hidden size, or its share of it under sequence
  // parallelism (each of the tensor-parallel GPUs holds 1/G of the tokens of those tensors).
  const int64_t hs = c.sequence_parallel ? ceil_div(g.h, g.G) : g.h;
  const int64_t rstd_share = c.sequence_parallel ? g.G : 1;  // norms run on the split sequence too
  const int64_t norms = m.sandwich_norms ? 4 : 2;  // Gemma 3 normalises each sublayer's output too
  const int64_t rstd_per_token = norms + (m.qk_norm ? g.q_heads + g.kv_heads : 0);
  // The sandwich norms' inputs (the o and down projections' outputs, hidden-wide) join the forward
  // set, and one hidden-wide gradient the backward's.
  const int64_t sandwich = m.sandwich_norms ? hs : 0;
  // LoRA adds its rank-r intermediates (A x of every target) to the forward's and their gradients to
  // the backward's. The MLP's part (3 ffn: gate, up, the gated product; their gradients) is a dense
  // layer's; a MoE layer's is below.
  const int64_t layer_act_width = 4 * hs + 2 * sandwich + 2 * g.qd + 2 * g.kvd + 3 * g.f + qkn + g.lora_width;
  const int64_t layer_bwd_width = 3 * hs + sandwich + 2 * g.qd + 2 * g.kvd + 3 * g.f + qkn + g.lora_width;
  // A MoE layer's MLP (packed dispatch, docs/model.md "Layer kinds and experts"): per token the
  // router's logits (experts, fp32), its top-k experts (int32), their weights (fp32) and each routed
  // copy's row in the packed order (int32); per routed copy (top_k per token) the gathered input
  // (hidden), the expert's gate, up and gated product (fe each) and its output before the weighted
  // combine (hidden); the shared experts' gate, up and product (fs each); per layer the packed rows'
  // offsets of each expert (experts + 1, int32). The backward: the same shapes' gradients, the
  // logits' (fp32) and the weights' (fp32), no indices.
  const bool moe = g.Lmoe > 0, dense_mlp = g.Lmoe < g.L;
  const int64_t moe_mlp_width = 2 * g.top_k * g.h + 3 * g.top_k * g.fe + 3 * g.fs;  // activation elements per token
  const int64_t moe_fwd_extra = 4 * g.experts + 12 * g.top_k, moe_bwd_extra = 4 * g.experts + 4 * g.top_k;  // bytes
  const int64_t moe_set_bytes = 4 * (g.experts + 1);
  // Bytes of the forward sets of `count` layers from `first` (each its own MLP's kind), and of the
  // one set every recomputed layer shares (both kinds' tensors where the model mixes them).
  auto fwd_set_bytes = [&](bool moe_layer) {
    const int64_t width = layer_act_width - (moe_layer ? 3 * g.f - moe_mlp_width : 0);
    return checked_add(checked_mul(T, checked_add(checked_mul(width, A), moe_layer ? moe_fwd_extra : 0)),
                       moe_layer ? moe_set_bytes : 0);
  };
  auto layers_fwd_bytes = [&](int64_t first, int64_t count) {
    if (!moe) return checked_mul(checked_mul(count, T), layer_act_width * A);
    int64_t total = 0;
    for (int64_t l = first; l < first + count; ++l) total = checked_add(total, fwd_set_bytes(m.moe_layer(l)));
    return total;
  };
  const int64_t shared_fwd_bytes =
      !moe ? checked_mul(T, layer_act_width * A)
           : checked_add(fwd_set_bytes(true), dense_mlp ? checked_mul(T, 3 * g.f * A) : 0);
  const int64_t bwd_bytes =
      !moe ? checked_mul(T, layer_bwd_width * A)
           : checked_mul(T, checked_add(checked_mul(layer_bwd_width - (dense_mlp ? 0 : 3 * g.f) + moe_mlp_width, A),
                                        moe_bwd_extra));
  // Stage 1 and stage 2 forward/backward of a layer (oomb); forward/backward of a layer (standard).
  const PhaseMask layer_phases = g.oomb ? (fill | rec | bwd) : (fwd | bwd);
  // From the first forward that keeps them to the last backward.
  const PhaseMask kept = g.oomb ? (rec | loss | bwd) : (fwd | loss | bwd);
  // The tensors of one layer's sets (prefix "" for the one set every layer shares, else
  // "layers.<l>."), in the widths above. Forward: h1, x2, h2, tmp; q, o; k, v; gate, up, swiglu; with
  // q/k norm the projections before it; with LoRA each target's rank-r intermediate (lora_u.<target>).
  // Backward: dx2, dh2, dh1; dout, dq; dk, dv; dswiglu, dgate, dup; dq_pre, dk_pre; lora_du.<target>.
  auto lora_tensors = [&](Tensors& out, const std::string& prefix, const char* kind) {
    for (const std::string& t : lora_target_names())
      if (std::find(c.lora_targets.begin(), c.lora_targets.end(), t) != c.lora_targets.end())
        out.push_back({prefix + kind + t, checked_mul(T, c.lora_rank), act});
  };
  auto moe_tensors = [&](Tensors& out, const std::string& prefix, bool backward) {
    const int64_t routed = checked_mul(T, g.top_k);
    if (!backward) {
      out.push_back({prefix + "router_logits", checked_mul(T, g.experts), Dtype::fp32});
      out.push_back({prefix + "route_experts", routed, Dtype::int32});
      out.push_back({prefix + "route_weights", routed, Dtype::fp32});
      out.push_back({prefix + "route_rows", routed, Dtype::int32});
      out.push_back({prefix + "expert_offsets", g.experts + 1, Dtype::int32});
    } else {
      out.push_back({prefix + "d_router_logits", checked_mul(T, g.experts), Dtype::fp32});
      out.push_back({prefix + "d_route_weights", routed, Dtype::fp32});
    }
    const std::string d = backward ? "d_" : "";
    out.push_back({prefix + d + "expert_in", checked_mul(routed, g.h), act});
    for (const char* n : {"expert_gate", "expert_up", "expert_act"}) out.push_back({prefix + d + n, checked_mul(routed, g.fe), act});
    out.push_back({prefix + d + "expert_out", checked_mul(routed, g.h), act});
    if (g.fs > 0)
      for (const char* n : {"shared_gate", "shared_up", "shared_act"}) out.push_back({prefix + d + n, checked_mul(T, g.fs), act});
  };
  // The MLP's tensors of a layer set: a dense layer's, a MoE layer's, or (the set every recomputed
  // layer shares, layer -1) those of each kind the model has.
  auto mlp_tensors = [&](Tensors& out, const std::string& prefix, int64_t layer, bool backward) {
    const bool with_dense = layer < 0 ? dense_mlp : !m.moe_layer(layer);
    const bool with_moe = layer < 0 ? moe : m.moe_layer(layer);
    if (with_dense) {
      if (backward) {
        for (const char* n : {"dswiglu", "dgate", "dup"}) out.push_back({n, checked_mul(T, g.f), act});
      } else {
        for (const char* n : {"gate", "up", "swiglu"}) out.push_back({prefix + n, checked_mul(T, g.f), act});
      }
    }
    if (with_moe) moe_tensors(out, prefix, backward);
  };
  auto activation_set = [&](Tensors& out, const std::string& prefix, int64_t layer) {
    for (const char* n : {"h1", "x2", "h2", "tmp"}) out.push_back({prefix + n, checked_mul(T, hs), act});
    if (m.sandwich_norms)
      for (const char* n : {"attn_out", "mlp_out"}) out.push_back({prefix + n, checked_mul(T, hs), act});
    for (const char* n : {"q", "o"}) out.push_back({prefix + n, checked_mul(T, g.qd), act});
    for (const char* n : {"k", "v"}) out.push_back({prefix + n, checked_mul(T, g.kvd), act});
    mlp_tensors(out, prefix, layer, false);
    if (m.qk_norm) {
      out.push_back({prefix + "q_pre", checked_mul(T, g.qd), act});
      out.push_back({prefix + "k_pre", checked_mul(T, g.kvd), act});
    }
    if (g.lora) lora_tensors(out, prefix, "lora_u.");
  };
  // The norms' rstd: fp32 per token (2, + q_heads + kv_heads with q/k norm). Under sequence
  // parallelism each GPU holds its share of them, one tensor per set.
  auto rstd_set = [&](Tensors& out, const std::string& prefix, int64_t) {
    if (rstd_share > 1) {
      out.push_back({prefix + "rstd", ceil_div(checked_mul(T, rstd_per_token), rstd_share), Dtype::fp32});
      return;
    }
    for (const char* n : {"rstd1", "rstd2"}) out.push_back({prefix + n, T, Dtype::fp32});
    if (m.sandwich_norms)
      for (const char* n : {"rstd_attn_out", "rstd_mlp_out"}) out.push_back({prefix + n, T, Dtype::fp32});
    if (m.qk_norm) {
      out.push_back({prefix + "rstd_q", checked_mul(T, g.q_heads), Dtype::fp32});
      out.push_back({prefix + "rstd_k", checked_mul(T, g.kv_heads), Dtype::fp32});
    }
  };
  auto rstd_bytes = [&](int64_t sets) {
    const int64_t per_set = rstd_share > 1 ? ceil_div(checked_mul(T, rstd_per_token), rstd_share)
                                           : checked_mul(T, rstd_per_token);
    return checked_mul(checked_mul(sets, per_set), 4);
  };
  auto lse_set = [&](Tensors& out, const std::string& prefix, int64_t) {
    out.push_back({prefix + "lse", checked_mul(T, g.q_heads), Dtype::fp32});
  };
  auto backward_set = [&](Tensors& out) {
    for (const char* n : {"dx2", "dh2", "dh1"}) out.push_back({n, checked_mul(T, hs), act});
    if (m.sandwich_norms) out.push_back({"d_sublayer_out", checked_mul(T, hs), act});
    for (const char* n : {"dout", "dq"}) out.push_back({n, checked_mul(T, g.qd), act});
    for (const char* n : {"dk", "dv"}) out.push_back({n, checked_mul(T, g.kvd), act});
    mlp_tensors(out, "", -1, true);
    if (m.qk_norm) {
      out.push_back({"dq_pre", checked_mul(T, g.qd), act});
      out.push_back({"dk_pre", checked_mul(T, g.kvd), act});
    }
    if (g.lora) lora_tensors(out, "", "lora_du.");
  };
  // Layers [first, first + count) of one kind of set, each under its "layers.<l>." prefix.
  auto sets_of = [&](int64_t first, int64_t count, auto&& set) {
    Tensors out;
    for (int64_t l = first; l < first + count; ++l) set(out, "layers." + std::to_string(l) + ".", l);
    return out;
  };
  auto one_set = [&](auto&& set) {
    Tensors out;
    set(out, "", int64_t{-1});
    return out;
  };

  add(row::kTokenIds, Category::inputs, Tier::device, OOMB_SHAPE({2, T}), Dtype::int32, checked_mul(T, 8), all,
      OOMB_TEXT(tok + " tokens x 2 (ids, targets) x 4"), OOMB_TENSORS({"ids", T, Dtype::int32}, {"targets", T, Dtype::int32}));
  // The load-balancing loss (Config::router_aux_loss_coef): stage 1's routed copies and router
  // probabilities per expert, summed over every MoE layer's tokens, and their shares for stage 2.
  if (c.router_aux_loss_coef > 0 && g.experts > 0)
    add(row::kRouterAuxStatistics, Category::logits, Tier::device, OOMB_SHAPE({g.experts}), Dtype::fp64,
        checked_mul(g.experts, 20), all,
        "experts x (8 + 8 + 4): routed copies and router probabilities summed over stage 1 (fp64), the copies' shares (fp32)",
        OOMB_TENSORS({"counts", g.experts, Dtype::fp64}, {"prob_sums", g.experts, Dtype::fp64},
                     {"shares", g.experts, Dtype::fp32}));
  // Tensor parallelism (docs/model.md "Tensor parallelism"). Both backends: the vocabulary-parallel
  // loss's per-row statistics of every rank (max, sum of exponentials, target logit), all-reduced
  // and combined in place into each row's max and sum over the vocabulary. The CPU backend (MPI)
  // only: the all-reduced activations (o/down projection outputs, the column-parallel input
  // gradients, the vocabulary-parallel embedding and LM-head input gradient, all [rows, hidden])
  // summed in fp32 when stored bf16 (NCCL sums bf16 itself).
  if (g.G > 1) {
    if (!cuda && A != 4)
      add(row::kTensorParallelStaging, Category::hidden_states, Tier::device, OOMB_SHAPE({T, g.h}), Dtype::fp32,
          checked_mul(checked_mul(T, g.h), 4), all,
          OOMB_TEXT(tok + " tokens x hidden x 4 (the MPI all-reduce sums bf16 activations in fp32)"),
          OOMB_TENSORS({"staging", checked_mul(T, g.h), Dtype::fp32}));
    add(row::kTensorParallelLossStatistics, Category::logits, Tier::device, OOMB_SHAPE({g.G, tile, 3}), Dtype::fp32,
        checked_mul(checked_mul(g.G, tile), 12), all,
        "gpus x loss tile x 3 x 4 (each rank's row max, sum of exponentials, target logit)",
        OOMB_TENSORS({"statistics", checked_mul(checked_mul(g.G, tile), 3), Dtype::fp32}));
  }
  if (g.oomb) {
    add(row::kHiddenStates, Category::hidden_states, Tier::device, OOMB_SHAPE({2, T, hs}), act, checked_mul(T, 2 * hs * A),
        all, "2 (x, y ping-pong) x chunk tokens x hidden x activation dtype",
        OOMB_TENSORS({"x", checked_mul(T, hs), act}, {"y", checked_mul(T, hs), act}));
  } else {
    // The layer inputs are the checkpoints; the last layer's output is the final norm's input.
    add(row::kHiddenStates, Category::hidden_states, Tier::device, OOMB_SHAPE({g.N, hs}), act, checked_mul(g.N, hs * A),
        fwd | loss, "sequence tokens x hidden x activation dtype (the last layer's output)",
        OOMB_TENSORS({"output", checked_mul(g.N, hs), act}));
  }
  // The executor keeps the layer inputs also without checkpointing (the input norm's backward reads
  // them); a framework's standard step keeps them inside the activations.
  if (c.checkpointing || g.oomb) {
    add(row::kLayerInputCheckpoints, Category::checkpoints, Tier::device, OOMB_SHAPE({g.L, T, hs}), act,
        checked_mul(checked_mul(g.L, T), hs * A), first_step ? (kept & ~bwd) : kept,
        OOMB_TEXT("layers x " + tok + " tokens x hidden x activation dtype"),
        OOMB_TENSORS({"checkpoints", checked_mul(checked_mul(g.L, T), hs), act}));
    if (first_step)
      add("layer_input_checkpoints_left", Category::checkpoints, Tier::device,
          OOMB_SHAPE({first_step_checkpoints / (T * hs * A), T, hs}), act, first_step_checkpoints, bwd,
          OOMB_TEXT("(i + 1) x " + tok + " tokens x hidden x activation dtype (layers 0..i's, at the first step's backward peak)"),
          OOMB_TENSORS({"checkpoints_left", first_step_checkpoints / A, act}));
  }
  if (!c.checkpointing) {
    // No recompute: every layer's activations are kept, and a layer computes in its own slice.
    const PhaseMask all_layers = g.oomb ? (fill | kept) : kept;
    add(row::kAllLayerActivations, Category::checkpoints, Tier::device, OOMB_SHAPE({g.L, T, layer_act_width}), act,
        layers_fwd_bytes(0, g.L), all_layers,
        OOMB_TEXT("layers x " + tok + " tokens x (4 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype"),
        [&] { return sets_of(0, g.L, activation_set); });
    add(row::kLayerNormRstd, Category::layer_working_set, Tier::device, OOMB_SHAPE({g.L, rstd_per_token, T}), Dtype::fp32,
        rstd_bytes(g.L), all_layers, OOMB_TEXT("layers x 2 norms x " + tok + " tokens x 4"),
        [&] { return sets_of(0, g.L, rstd_set); });
    add(row::kAttentionLse, Category::attention_workspace, Tier::device, OOMB_SHAPE({g.L, T, g.q_heads}), Dtype::fp32,
        checked_mul(checked_mul(g.L, T), g.q_heads * 4), all_layers,
        OOMB_TEXT("layers x " + tok + " tokens x q_heads x 4"), [&] { return sets_of(0, g.L, lse_set); });
  }
  add(row::kHiddenGradients, Category::layer_working_set, Tier::device, OOMB_SHAPE({2, T, hs}), act,
      checked_mul(T, 2 * hs * A), g.oomb ? (rec | loss | bwd) : (loss | bwd),
      OOMB_TEXT("2 (dy, dx) x " + tok + " tokens x hidden x activation dtype"),
      OOMB_TENSORS({"dy", checked_mul(T, hs), act}, {"dx", checked_mul(T, hs), act}));
  if (c.checkpointing && c.kept_layers > 0) {
    // Partial checkpointing: the last k layers keep their activations as checkpointing off keeps
    // all of them (same lifetime), and the recomputed layers share the one-layer set below.
    const int64_t k = c.kept_layers;
    const PhaseMask all_layers = g.oomb ? (fill | kept) : kept;
    add(row::kKeptLayerActivations, Category::checkpoints, Tier::device, OOMB_SHAPE({k, T, layer_act_width}), act,
        layers_fwd_bytes(g.L - k, k), all_layers,
        OOMB_TEXT("kept layers x " + tok + " tokens x (4 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype"),
        [&] { return sets_of(g.L - k, k, activation_set); });
    add(row::kKeptLayerNormRstd, Category::layer_working_set, Tier::device, OOMB_SHAPE({k, rstd_per_token, T}), Dtype::fp32,
        rstd_bytes(k), all_layers, OOMB_TEXT("kept layers x 2 norms x " + tok + " tokens x 4"),
        [&] { return sets_of(g.L - k, k, rstd_set); });
    add(row::kKeptAttentionLse, Category::attention_workspace, Tier::device, OOMB_SHAPE({k, T, g.q_heads}), Dtype::fp32,
        checked_mul(checked_mul(k, T), g.q_heads * 4), all_layers,
        OOMB_TEXT("kept layers x " + tok + " tokens x q_heads x 4"), [&] { return sets_of(g.L - k, k, lse_set); });
  }
  if (c.checkpointing) {
    add(row::kLayerActivations, Category::layer_working_set, Tier::device, OOMB_SHAPE({T, layer_act_width}), act,
        shared_fwd_bytes, layer_phases,
        OOMB_TEXT(tok + " tokens x (4 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype (one layer)"),
        [&] { return one_set(activation_set); });
    add(row::kLayerNormRstd, Category::layer_working_set, Tier::device, OOMB_SHAPE({rstd_per_token, T}), Dtype::fp32,
        rstd_bytes(1), layer_phases, OOMB_TEXT("2 norms x " + tok + " tokens x 4 (one layer)"),
        [&] { return one_set(rstd_set); });
    add(row::kAttentionLse, Category::attention_workspace, Tier::device, OOMB_SHAPE({T, g.q_heads}), Dtype::fp32,
        checked_mul(T, g.q_heads * 4), layer_phases,
        OOMB_TEXT(tok + " tokens x q_heads x 4 (log-sum-exp saved for the backward)"), [&] { return one_set(lse_set); });
  }
  add(row::kLayerBackwardTemporaries, Category::layer_working_set, Tier::device, OOMB_SHAPE({T, layer_bwd_width}), act,
      bwd_bytes, bwd,
      OOMB_TEXT(tok + " tokens x (3 hidden + 2 q_dim + 2 kv_dim + 3 ffn) x activation dtype (one layer)"), [&] {
        Tensors out;
        backward_set(out);
        return out;
      });
  // Final norm, LM head and cross-entropy (the loss phase).
  const int64_t V = g.V / g.G;
  add(row::kFinalNorm, Category::logits, Tier::device, OOMB_SHAPE({2, T, hs}), act, checked_mul(T, 2 * hs * A), loss,
      OOMB_TEXT("2 (normed final hidden, its gradient) x " + tok + " tokens x hidden x activation dtype"),
      OOMB_TENSORS({"normed", checked_mul(T, hs), act}, {"normed_grad", checked_mul(T, hs), act}));
  add(row::kFinalNormRstd, Category::logits, Tier::device, OOMB_SHAPE({T}), Dtype::fp32, checked_mul(ceil_div(T, rstd_share), 4),
      loss, OOMB_TEXT(tok + " tokens x 4"), OOMB_TENSORS({"rstd", ceil_div(T, rstd_share), Dtype::fp32}));
  if (g.fused_loss) {
    add(row::kLogits, Category::logits, Tier::device, OOMB_SHAPE({tile, V}), c.loss_dtype,
        checked_mul(checked_mul(tile, V), lb), loss, "tile tokens x vocab x loss dtype (fused: the gradient is written in place)",
        OOMB_TENSORS({"logits", checked_mul(tile, V), c.loss_dtype}));
  } else {
    add(row::kLogits, Category::logits, Tier::device, OOMB_SHAPE({T, V}), act, checked_mul(checked_mul(T, V), A), loss,
        OOMB_TEXT(tok + " tokens x vocab x activation dtype (LM head output)"), OOMB_TENSORS({"logits", checked_mul(T, V), act}));
    if (c.loss_dtype != act)
      add(row::kLogitsUpcast, Category::logits, Tier::device, OOMB_SHAPE({T, V}), c.loss_dtype,
          checked_mul(checked_mul(T, V), lb), loss, OOMB_TEXT(tok + " tokens x vocab x loss dtype (the upcast copy)"),
          OOMB_TENSORS({"logits_upcast", checked_mul(T, V), c.loss_dtype}));
    add(row::kLogitsGradient, Category::logits, Tier::device, OOMB_SHAPE({T, V}), c.loss_dtype,
        checked_mul(checked_mul(T, V), lb), loss, OOMB_TEXT(tok + " tokens x vocab x loss dtype"),
        OOMB_TENSORS({"logits_grad", checked_mul(T, V), c.loss_dtype}));
    if (published)
      // The published code's unchunked cross-entropy (docs/model.md): inside the log-softmax
      // backward its saved output (the row above), the NLL gradient and the log-softmax gradient
      // are live at once, three logits-sized tensors.
      add(row::kLogSoftmaxGradient, Category::logits, Tier::device, OOMB_SHAPE({T, V}), c.loss_dtype,
          checked_mul(checked_mul(T, V), lb), loss,
          OOMB_TEXT(tok + " tokens x vocab x loss dtype (the log-softmax gradient, published cross-entropy)"),
          OOMB_TENSORS({"log_softmax_grad", checked_mul(T, V), c.loss_dtype}));
  }

  if (g.oomb) {
    const auto& pc = pages;
    const int64_t page_elements = checked_mul(g.p, 2 * g.kv_heads * g.head_dim);  // K and V of p tokens
    const char* pool_formula = !g.offload ? "layers x pages per layer x page bytes"
                               : g.sparse ? "resident layers x largest slot (union bound: B pages per query page, + own) "
                                            "x page bytes"
                                          : "resident layers x largest slot (pages) x page bytes";
    // The published code allocates each page as it is copied in (kv_cache.py, onload: one tensor
    // per page), not a pool sized before the selection is known: its high-water mark is the
    // modelled union's, not the bound's.
    int64_t kv_pool_pages = published ? pc.kv_pool_pages : pc.kv_pool_capacity_pages;
    int64_t grad_pool_pages = published ? pc.grad_pool_pages : pc.grad_pool_capacity_pages;
    // The published sparse cache onloads a layer only when its attention selects (topk_cache.py,
    // SparseKVCache.visit: forward visits offload the layers outside the window and onload none;
    // SparseCacheManager.select onloads the visited layer): one slot in the fill, the stage-2
    // forward and the loss after it. Only the backward's reverse visits select the next layer too
    // (docs/model.md), so the other resident slots are live in the backward alone.
    const bool published_sparse_slots = published && g.sparse && g.offload && g.R > 1;
    const int64_t backward_slots = published_sparse_slots ? g.R - 1 : 0;
    if (published_sparse_slots) {
      pool_formula = "one slot (the selecting layer's modelled union + own, allocated per page) x page bytes";
      kv_pool_pages /= g.R;
      grad_pool_pages /= g.R;
    }
    if (published) {
      // What the published program allocates for its pools is what these rows hold (a tensor per
      // page copied in), never a pool sized for the union's bound: the plan's allocation
      // (planner::make_plan) reads it from the capacity, as it does this project's pools.
      pages.kv_pool_capacity_pages = kv_pool_pages;
      pages.grad_pool_capacity_pages = grad_pool_pages;
    }
    add(row::kKvPool, Category::kv_pages, Tier::device, OOMB_SHAPE({kv_pool_pages, g.p, 2, g.kv_heads, g.head_dim}),
        c.kv_dtype, checked_mul(kv_pool_pages, g.kv_page_bytes), all, pool_formula,
        OOMB_TENSORS({"pages", checked_mul(kv_pool_pages, page_elements), c.kv_dtype}));
    add(row::kKvGradPool, Category::kv_grad_pages, Tier::device, OOMB_SHAPE({grad_pool_pages, g.p, 2, g.kv_heads, g.head_dim}),
        c.kv_grad_dtype, checked_mul(grad_pool_pages, g.grad_page_bytes), all, pool_formula,
        OOMB_TENSORS({"pages", checked_mul(grad_pool_pages, page_elements), c.kv_grad_dtype}));
    if (backward_slots > 0) {
      const int64_t kv_slots = checked_mul(backward_slots, kv_pool_pages), grad_slots = checked_mul(backward_slots, grad_pool_pages);
      add(row::kKvPoolBackwardSlot, Category::kv_pages, Tier::device, OOMB_SHAPE({kv_slots, g.p, 2, g.kv_heads, g.head_dim}),
          c.kv_dtype, checked_mul(kv_slots, g.kv_page_bytes), bwd,
          "(resident layers - 1) x largest slot x page bytes (the backward's reverse visits select the next layer too)",
          OOMB_TENSORS({"pages", checked_mul(kv_slots, page_elements), c.kv_dtype}));
      add(row::kKvGradPoolBackwardSlot, Category::kv_grad_pages, Tier::device,
          OOMB_SHAPE({grad_slots, g.p, 2, g.kv_heads, g.head_dim}), c.kv_grad_dtype, checked_mul(grad_slots, g.grad_page_bytes),
          bwd, "(resident layers - 1) x largest slot x gradient page bytes (the backward's reverse visits)",
          OOMB_TENSORS({"pages", checked_mul(grad_slots, page_elements), c.kv_grad_dtype}));
    }
    if (g.Ll > 0) {
      // The sliding and chunked layers' pages (docs/model.md "Layer kinds and experts"): on the
      // device, never offloaded, never sparse; the geometry counts them (Geometry::local_kv_pages).
      add(row::kLocalKvPool, Category::kv_pages, Tier::device, OOMB_SHAPE({g.local_kv_pages, g.p, 2, g.kv_heads, g.head_dim}),
          c.kv_dtype, checked_mul(g.local_kv_pages, g.kv_page_bytes), all,
          "local layers x the pages before the chunk boundaries their next chunk reaches back to + one chunk's own "
          "pages, x page bytes",
          OOMB_TENSORS({"pages", checked_mul(g.local_kv_pages, page_elements), c.kv_dtype}));
      add(row::kLocalKvGradPool, Category::kv_grad_pages, Tier::device,
          OOMB_SHAPE({g.local_grad_pages, g.p, 2, g.kv_heads, g.head_dim}), c.kv_grad_dtype,
          checked_mul(g.local_grad_pages, g.grad_page_bytes), all,
          "local layers x their largest reach (gradients pending until the chunk's backward) + one chunk's own pages "
          "+ one reach, x gradient page bytes",
          OOMB_TENSORS({"pages", checked_mul(g.local_grad_pages, page_elements), c.kv_grad_dtype}));
    }
    if (published && g.offload && target.pages_in_flight > 0) {
      pages.pages_in_flight = target.pages_in_flight;
      // Pages in flight (docs/model.md): the published onload allocates a layer's pages as soon as
      // it is issued while the write-back of the layer it replaces frees each page only when that
      // page's blocking copy ends; the simulator counts the pages not yet written back at the peak.
      add(row::kKvPagesInFlight, Category::kv_pages, Tier::device,
          OOMB_SHAPE({target.pages_in_flight, g.p, 2, g.kv_heads, g.head_dim}), c.kv_dtype, checked_mul(target.pages_in_flight, g.kv_page_bytes), all,
          "pages whose write-back has not finished (copy rate vs layer pass time) x page bytes",
          OOMB_TENSORS({"pages", checked_mul(target.pages_in_flight, page_elements), c.kv_dtype}));
      add(row::kKvGradPagesInFlight, Category::kv_grad_pages, Tier::device,
          OOMB_SHAPE({target.pages_in_flight, g.p, 2, g.kv_heads, g.head_dim}), c.kv_grad_dtype,
          checked_mul(target.pages_in_flight, g.grad_page_bytes), all,
          "pages whose write-back has not finished (copy rate vs layer pass time) x gradient page bytes",
          OOMB_TENSORS({"pages", checked_mul(target.pages_in_flight, page_elements), c.kv_grad_dtype}));
    }
    if (published) {
      const int64_t table_entries = g.offload ? checked_mul(g.R, 2 * (pc.kv_pool_pages / std::max<int64_t>(g.R, 1)))
                                              : checked_mul(g.L, 2 * g.P);
      add("page_tables", Category::page_tables, Tier::device, OOMB_SHAPE({table_entries}), Dtype::int32,
          checked_mul(table_entries, 4), all,
          g.offload ? "per-slot tables (KV and gradient)" : "layers x pages x 2 tables x 4 bytes",
          OOMB_TENSORS({"entries", table_entries, Dtype::int32}));
    }
    if (g.offload) {
      add(row::kHostKvPages, Category::kv_pages, Tier::host, OOMB_SHAPE({pc.host_kv_pages, g.p, 2, g.kv_heads, g.head_dim}),
          c.kv_dtype, checked_mul(pc.host_kv_pages, g.kv_page_bytes), all, "layers x pages x KV page bytes",
          OOMB_TENSORS({"pages", checked_mul(pc.host_kv_pages, page_elements), c.kv_dtype}));
      add(row::kHostKvGradPages, Category::kv_grad_pages, Tier::host,
          OOMB_SHAPE({pc.host_grad_pages, g.p, 2, g.kv_heads, g.head_dim}), c.kv_grad_dtype,
          checked_mul(pc.host_grad_pages, g.grad_page_bytes), all, "layers x pages x gradient page bytes",
          OOMB_TENSORS({"pages", checked_mul(pc.host_grad_pages, page_elements), c.kv_grad_dtype}));
      if (published)
        add("host_page_tables", Category::page_tables, Tier::host, OOMB_SHAPE({g.L, g.P, 2}), Dtype::int32,
            checked_mul(g.L * 2, g.P * 4), all, "layers x pages x 2 tables x 4 bytes",
            OOMB_TENSORS({"entries", checked_mul(g.L * 2, g.P), Dtype::int32}));
    }
    if (g.sparse) {
      // The global layers select (a local layer attends its reach densely).
      const int64_t summary_elements = checked_mul(checked_mul(g.Lg, g.P), g.kvd);
      const int64_t summaries = checked_mul(checked_mul(g.Lg, g.P), g.summary_bytes);
      const int64_t record_entries = checked_mul(checked_mul(g.Lg, g.P), g.B);
      const int64_t record = checked_mul(checked_mul(g.Lg, g.P), g.B * 4);
      if (c.selection_memory == SelectionMemory::device) {
        add(row::kPageSummaries, Category::page_summaries, Tier::device, OOMB_SHAPE({g.Lg, g.P, g.kvd}), c.kv_dtype, summaries,
            all, "layers x pages x kv_dim x KV dtype (grows with N)",
            OOMB_TENSORS({"summaries", summary_elements, c.kv_dtype}));
        if (published) {
          add("selection_scores", Category::selection_scores, Tier::device, OOMB_SHAPE({g.C, g.kv_heads, g.P}), Dtype::fp32,
              checked_mul(checked_mul(g.C, g.kv_heads), g.P * 4), all,
              "chunk tokens x kv_heads x pages x 4 (grows with N)",
              OOMB_TENSORS({"scores", checked_mul(checked_mul(g.C, g.kv_heads), g.P), Dtype::fp32}));
          add("selection_record", Category::page_tables, Tier::device, OOMB_SHAPE({g.Lg, g.P, g.B}), Dtype::int32, record, all,
              "layers x query pages x budget x 4", OOMB_TENSORS({"pages", record_entries, Dtype::int32}));
        }
      } else {
        const int64_t tile_pages = std::min(c.selection_tile_pages, g.P);
        if (published) {
          add("summary_tiles", Category::page_summaries, Tier::device, OOMB_SHAPE({2, tile_pages, g.kv_heads, g.head_dim}),
              c.kv_dtype, checked_mul(2 * tile_pages, g.summary_bytes), all,
              "2 x tile pages x kv_heads x head_dim x KV dtype",
              OOMB_TENSORS({"tiles", checked_mul(2 * tile_pages, g.kvd), c.kv_dtype}));
          add("selection_scores", Category::selection_scores, Tier::device, OOMB_SHAPE({g.C, g.kv_heads, tile_pages}), Dtype::fp32,
              checked_mul(checked_mul(g.C, g.kv_heads), tile_pages * 4) + checked_mul(g.q, g.B * 8), all,
              OOMB_TEXT("chunk tokens x kv_heads x tile pages x 4 + running top-k"),
              OOMB_TENSORS({"scores", checked_mul(checked_mul(g.C, g.kv_heads), tile_pages), Dtype::fp32},
                           {"top_k_scores", checked_mul(g.q, g.B), Dtype::fp32}, {"top_k_pages", checked_mul(g.q, g.B), Dtype::int32}));
          add("selection_record_slot", Category::page_tables, Tier::device, OOMB_SHAPE({g.R, g.q, g.B}), Dtype::int32,
              checked_mul(g.q * g.B, 4) * g.R, all, "query pages x budget x 4 x resident layers",
              OOMB_TENSORS({"pages", checked_mul(g.q * g.B, g.R), Dtype::int32}));
        }
        add(row::kHostPageSummaries, Category::page_summaries, Tier::host, OOMB_SHAPE({g.Lg, g.P, g.kvd}), c.kv_dtype,
            summaries, all, "layers x pages x kv_dim x KV dtype", OOMB_TENSORS({"summaries", summary_elements, c.kv_dtype}));
        if (published)
          add("host_selection_record", Category::page_tables, Tier::host, OOMB_SHAPE({g.Lg, g.P, g.B}), Dtype::int32, record,
              all, "layers x query pages x budget x 4", OOMB_TENSORS({"pages", record_entries, Dtype::int32}));
      }
    }
  }
  if (cuda) {
    add(row::kGemmWorkspace, Category::backend_scratch, Tier::device, OOMB_SHAPE({cuda_scratch::kGemmWorkspaceBytes}),
        Dtype::uint8, cuda_scratch::kGemmWorkspaceBytes, all, "the CUDA backend's cuBLASLt workspace (32 MiB)",
        OOMB_TENSORS({"workspace", cuda_scratch::kGemmWorkspaceBytes, Dtype::uint8}));
    if (!published && g.oomb) {
      // The CUDA backend's op scratch, allocated once at its declared size (step/cuda_scratch.h).
      const cuda_scratch::StepScratch s = cuda_scratch::step_op_scratch(m, c, g, target.bf16_gemm);
      add(row::kOpScratch, Category::backend_scratch, Tier::device, OOMB_SHAPE({s.bytes}), Dtype::uint8, s.bytes, all,
          OOMB_TEXT("the CUDA backend's op scratch: its largest op (" + s.op + ", step/cuda_scratch.h)"),
          OOMB_TENSORS({"scratch", s.bytes, Dtype::uint8}));
    }
    if (!published && g.oomb) {
      // The backend's pinned host buffers (step/cuda_layout.h).
      using namespace cuda_scratch;
      const int64_t ring = kStagingSlots * kStagingSlotBytes, slots = loss_slots(g.n);
      add(row::kStagingRing, Category::backend_scratch, Tier::host, OOMB_SHAPE({kStagingSlots, kStagingSlotBytes}),
          Dtype::uint8, ring, all, "the CUDA backend's pinned staging ring for uploads: 8 slots x 4 MiB",
          OOMB_TENSORS({"slots", ring, Dtype::uint8}));
      add(row::kReadback, Category::backend_scratch, Tier::host, OOMB_SHAPE({kReadbackBytes}), Dtype::uint8, kReadbackBytes,
          all, "the CUDA backend's pinned read-back buffer: downloads go through it in 4 MiB pieces",
          OOMB_TENSORS({"readback", kReadbackBytes, Dtype::uint8}));
      add(row::kLossSlots, Category::backend_scratch, Tier::host, OOMB_SHAPE({slots}), Dtype::fp64, slots * 8, all,
          "the CUDA backend's mapped loss slots: max(4096, chunks) x 8 (the kernels add each chunk's loss to one)",
          OOMB_TENSORS({"losses", slots, Dtype::fp64}));
      if (target.cupti) {
        const int64_t pool = kCuptiPoolBuffers * kCuptiBufferBytes;
        add(row::kCuptiActivityBuffers, Category::backend_scratch, Tier::host,
            OOMB_SHAPE({kCuptiPoolBuffers, kCuptiBufferBytes}), Dtype::uint8, pool, all,
            "the CUPTI collector's activity buffers: 4 x 8 MiB, each decoded and handed back to CUPTI as it fills "
            "(executor/cupti)",
            OOMB_TENSORS({"buffers", pool, Dtype::uint8}));
      }
    }
    // NCCL's buffers: one communicator per parallel degree > 1 (tensor parallelism's group, the
    // data-parallel replicas'; the job's world communicator only where it is one of them), each
    // created and connected before the device block is reserved (runner).
    const int64_t communicators = (c.gpus > 1 ? 1 : 0) + (c.data_parallel > 1 ? 1 : 0);
    if (!published && g.oomb && communicators > 0) {
      const int64_t each = cuda_scratch::nccl_communicator_bytes(target.nccl_channels);
      const int64_t bytes = checked_mul(communicators, each);
      add(row::kCommunicatorBuffers, Category::communication, Tier::device, OOMB_SHAPE({communicators, each}), Dtype::uint8,
          bytes, all,
          OOMB_TEXT("NCCL's buffers: " + std::to_string(communicators) + " communicator" +
                    (communicators > 1 ? "s" : "") + " x (" + std::to_string(target.nccl_channels) +
                    " channels x 2 ring neighbours x 9.19 MiB of protocol buffers + 1 MiB work FIFO) "
                    "(step/cuda_layout.h; channels: the GPU profile's nccl_channels)"),
          OOMB_TENSORS({"nccl", bytes, Dtype::uint8}));
    }
    if (c.peak_measure == PeakMeasure::reserved) {
      add(row::kRuntimeReserve, Category::runtime_reserve, Tier::device, OOMB_SHAPE({target.runtime_reserve_bytes}),
          Dtype::uint8, target.runtime_reserve_bytes, all, OOMB_TEXT("CUDA context + library workspaces (GPU profile)"),
          OOMB_TENSORS({"context", target.runtime_reserve_bytes, Dtype::uint8}));
      // The device arena: one block for the executor's buffers at their peak, reserved before the
      // first (step/allocator.h); what it holds beyond them is this row.
      if (!published && g.oomb) {
        const allocator::ArenaLayout a = sink.arena_layout();
        const int64_t beyond = a.block_bytes - a.buffer_peak_bytes;
        add(row::kAllocatorBlocks, Category::allocator, Tier::device, OOMB_SHAPE({beyond}), Dtype::uint8, beyond, all,
            OOMB_TEXT("the CUDA arena's one block beyond the buffers' peak: the rows' layout (" +
                      format_bytes(a.layout_bytes) + ") + 8 MiB for 256-byte rounding, in 2 MiB units (step/allocator.h)"),
            OOMB_TENSORS({"beyond_buffers", beyond, Dtype::uint8}));
      }
    }
  }
}

}  // namespace

BufferTable buffer_table(const models::ModelSpec& m, const Config& c, const Target& target, bool describe) {
  return buffer_table(m, c, target, geometry(m, c), describe);
}

BufferTable buffer_table(const models::ModelSpec& m, const Config& c, const Target& target, const Geometry& g,
                         bool describe) {
  BufferTable t;
  t.schedule = c.schedule;
  t.rows.reserve(32);
  RowSink sink{t, describe, all_phases(c.schedule)};
  add_rows(m, c, target, g, describe, t.pages, sink);
  return t;
}

TableSizes table_sizes(const models::ModelSpec& m, const Config& c, const Target& target, const Geometry& g) {
  TableSizes t;
  t.schedule = c.schedule;
  SizeSink sink{t};
  add_rows(m, c, target, g, false, t.pages, sink);
  return t;
}
#undef OOMB_SHAPE
#undef OOMB_TEXT
#undef OOMB_TENSORS

}  // namespace oomb::step
