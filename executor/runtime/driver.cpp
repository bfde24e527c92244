#include "executor/runtime/driver.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>

#include <Eigen/Core>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "core/utc_time.h"
#include "executor/runtime/bf16.h"
#include "step/buffers.h"
#include "step/cuda_layout.h"
#include "step/capability.h"

namespace oomb::executor {

using step::Attention;

models::ModelSpec effective_model(const models::ModelSpec& m, const step::Config& c) {
  models::ModelSpec e = m;
  e.layers = step::effective_layers(c, m);
  return e;
}

// The buffers of one chunk's step, each a tensor of a row of the run's table (step/buffers.cpp
// names them and sizes them; shapes below in Cm = min(C, N) rows). The working set (the device rows
// alive in some phases only) is carved by enter() from the rows alive in the phase it begins.
// One layer's forward activations over the chunk.
struct Engine::LayerSet {
  Buffer h1, x2, h2, tmp, q, o, k, v, g, u, m;  // layer_activations (act; g, u, m: gate, up, swiglu)
  Buffer rstd1, rstd2;                          // layer_norm_rstd: fp32 [Cm]
  Buffer lse;                                   // attention_lse: fp32 [Cm, q_heads]
  Buffer q_pre, k_pre;                          // q/k norm (Qwen3): the projections before it (act)
  Buffer rstd_q, rstd_k;                        // and its per-head rstd: fp32 [Cm, heads]
  // LoRA: per targeted projection, u = scale * x A^T [Cm, r] (act; the row's rank-r share)
  std::array<Buffer, kLoraTargets> lora_u;
  // A MoE layer (packed dispatch): the router's logits fp32 [Cm, E]; routes int32 / fp32 / int32
  // [Cm, k]; each expert's first packed row int32 [E + 1]; per packed row (Cm x k) the gathered
  // input [H], the expert's gate, up and product [fe] and its output [H] (act).
  Buffer router_logits, route_experts, route_weights, route_rows, expert_offsets;
  Buffer expert_in, expert_gate, expert_up, expert_act, expert_out;
  Buffer shared_gate, shared_up, shared_act;  // its shared experts' gate, up and product [Cm, fs] (act)
  // Sandwich norms (Gemma): the attention's and the MLP's outputs before their norms [Cm, H] (act)
  // and the norms' rstd fp32 [Cm].
  Buffer attn_out, mlp_out, rstd_attn_out, rstd_mlp_out;
};

struct Engine::Work {
  Buffer ids, targets;            // token_ids: int32 [Cm] each (all phases)
  Buffer x, y;                    // hidden_states: [Cm, H] act (stage 1 ping-pong; stage 2 final)
  // stage 2 (recompute, loss, backward)
  Buffer ckpt;                    // layer_input_checkpoints: [L][Cm, H] act
  Buffer dy, dx;                  // hidden_gradients: [Cm, H] act
  // layer passes: one set (layer_activations) shared by every layer, or one per layer
  // (all_layer_activations: the backward reuses the stage-2 forward's instead of recomputing)
  std::vector<LayerSet> sets;
  // partial checkpointing: one set per kept layer (the last ones), alive as checkpointing off's
  std::vector<LayerSet> kept;
  // backward
  Buffer dx2, dh2, dh1, dout, dq, dk, dv, dm, dg, du;  // layer_backward_temporaries (act)
  Buffer dq_pre, dk_pre;                               // + with q/k norm: gradients before it
  std::array<Buffer, kLoraTargets> lora_du;  // LoRA: du [Cm, r] per target, layer_backward_temporaries
  // A MoE layer's backward (layer_backward_temporaries): the logits' and the weights' gradients
  // (fp32) and those of the packed rows' tensors (act).
  Buffer d_router_logits, d_route_weights, d_expert_in, d_expert_gate, d_expert_up, d_expert_act, d_expert_out;
  Buffer d_shared_gate, d_shared_up, d_shared_act;  // and its shared experts' (act)
  Buffer d_sublayer_out;  // sandwich norms: a sublayer's output gradient before its norm [Cm, H] (act)
  // loss
  Buffer hf, dhf;                 // final_norm: [Cm, H] act
  Buffer rstdf;                   // final_norm_rstd: fp32 [Cm]
  Buffer logits;                  // fused: [tile, V] loss dtype (gradient in place); unfused: [Cm, V] act
  Buffer logits_upcast;           // unfused, loss dtype != act: [Cm, V] loss dtype
  Buffer logits_grad;             // unfused: [Cm, V] loss dtype
};

namespace {
// The row of `rows` with this name and tier (BufferTable::find over a run's rows), or null.
const step::BufferRow* find_row(const std::vector<step::BufferRow>& rows, const std::string& name, Tier tier) {
  for (const auto& r : rows)
    if (r.tier == tier && r.name == name) return &r;
  return nullptr;
}

// Which LoRA target a tensor's suffix names ("q_proj" ...: LoraTarget's order).
size_t lora_index(const std::string& target) {
  const auto& names = step::lora_target_names();
  const auto it = std::find(names.begin(), names.end(), target);
  OOMB_ASSERT(it != names.end(), "no LoRA target " + target);
  return static_cast<size_t>(it - names.begin());
}
}  // namespace

Buffer& Engine::work_slot(const std::string& row, const std::string& tensor) {
  Work& w = *w_;
  namespace r = step::row;
  Buffer* slot = nullptr;
  if (row == r::kLayerActivations || row == r::kAllLayerActivations || row == r::kLayerNormRstd ||
      row == r::kAttentionLse || row == r::kKeptLayerActivations || row == r::kKeptLayerNormRstd ||
      row == r::kKeptAttentionLse) {
    // "layers.<l>.<name>": layer l's set of a row of several layers; "<name>": the shared set.
    std::string name = tensor;
    int64_t layer = -1;
    if (name.rfind("layers.", 0) == 0) {
      const size_t dot = name.find('.', 7);
      layer = std::stoll(name.substr(7, dot - 7));
      name = name.substr(dot + 1);
    }
    const bool kept = row == r::kKeptLayerActivations || row == r::kKeptLayerNormRstd || row == r::kKeptAttentionLse;
    std::vector<LayerSet>& sets = kept ? w.kept : w.sets;
    const int64_t index = layer < 0 ? 0 : kept ? layer - recomputed_ : layer;
    OOMB_ASSERT(index >= 0, "kept layer " + std::to_string(layer) + " is recomputed");
    if (static_cast<int64_t>(sets.size()) <= index) sets.resize(static_cast<size_t>(index + 1));
    LayerSet& set = sets[static_cast<size_t>(index)];
    static const std::pair<const char*, Buffer LayerSet::*> fields[] = {
        {"h1", &LayerSet::h1},       {"x2", &LayerSet::x2},        {"h2", &LayerSet::h2},
        {"tmp", &LayerSet::tmp},     {"q", &LayerSet::q},          {"o", &LayerSet::o},
        {"k", &LayerSet::k},         {"v", &LayerSet::v},          {"gate", &LayerSet::g},
        {"up", &LayerSet::u},        {"swiglu", &LayerSet::m},     {"rstd1", &LayerSet::rstd1},
        {"rstd2", &LayerSet::rstd2}, {"lse", &LayerSet::lse},      {"q_pre", &LayerSet::q_pre},
        {"k_pre", &LayerSet::k_pre}, {"rstd_q", &LayerSet::rstd_q}, {"rstd_k", &LayerSet::rstd_k},
        {"router_logits", &LayerSet::router_logits}, {"route_experts", &LayerSet::route_experts},
        {"route_weights", &LayerSet::route_weights}, {"route_rows", &LayerSet::route_rows},
        {"expert_offsets", &LayerSet::expert_offsets}, {"expert_in", &LayerSet::expert_in},
        {"expert_gate", &LayerSet::expert_gate}, {"expert_up", &LayerSet::expert_up},
        {"expert_act", &LayerSet::expert_act}, {"expert_out", &LayerSet::expert_out},
        {"shared_gate", &LayerSet::shared_gate}, {"shared_up", &LayerSet::shared_up},
        {"shared_act", &LayerSet::shared_act}, {"attn_out", &LayerSet::attn_out},
        {"mlp_out", &LayerSet::mlp_out}, {"rstd_attn_out", &LayerSet::rstd_attn_out},
        {"rstd_mlp_out", &LayerSet::rstd_mlp_out}};
    for (const auto& [n, f] : fields)
      if (name == n) slot = &(set.*f);
    if (name.rfind("lora_u.", 0) == 0) slot = &set.lora_u[lora_index(name.substr(7))];
  } else if (row == r::kLayerInputCheckpoints) {
    if (tensor == "checkpoints") slot = &w.ckpt;
  } else if (row == r::kHiddenGradients) {
    slot = tensor == "dy" ? &w.dy : tensor == "dx" ? &w.dx : nullptr;
  } else if (row == r::kLayerBackwardTemporaries) {
    static const std::pair<const char*, Buffer Work::*> fields[] = {
        {"dx2", &Work::dx2},   {"dh2", &Work::dh2},       {"dh1", &Work::dh1},     {"dout", &Work::dout},
        {"dq", &Work::dq},     {"dk", &Work::dk},         {"dv", &Work::dv},       {"dswiglu", &Work::dm},
        {"dgate", &Work::dg},  {"dup", &Work::du},        {"dq_pre", &Work::dq_pre}, {"dk_pre", &Work::dk_pre},
        {"d_router_logits", &Work::d_router_logits}, {"d_route_weights", &Work::d_route_weights},
        {"d_expert_in", &Work::d_expert_in}, {"d_expert_gate", &Work::d_expert_gate},
        {"d_expert_up", &Work::d_expert_up}, {"d_expert_act", &Work::d_expert_act},
        {"d_expert_out", &Work::d_expert_out}, {"d_shared_gate", &Work::d_shared_gate},
        {"d_shared_up", &Work::d_shared_up}, {"d_shared_act", &Work::d_shared_act},
        {"d_sublayer_out", &Work::d_sublayer_out}};
    for (const auto& [n, f] : fields)
      if (tensor == n) slot = &(w.*f);
    if (tensor.rfind("lora_du.", 0) == 0) slot = &w.lora_du[lora_index(tensor.substr(8))];
  } else if (row == r::kFinalNorm) {
    slot = tensor == "normed" ? &w.hf : tensor == "normed_grad" ? &w.dhf : nullptr;
  } else if (row == r::kFinalNormRstd) {
    if (tensor == "rstd") slot = &w.rstdf;
  } else if (row == r::kLogits) {
    if (tensor == "logits") slot = &w.logits;
  } else if (row == r::kLogitsUpcast) {
    if (tensor == "logits_upcast") slot = &w.logits_upcast;
  } else if (row == r::kLogitsGradient) {
    if (tensor == "logits_grad") slot = &w.logits_grad;
  }
  OOMB_ASSERT(slot, "the step's row " + row + " holds a tensor " + tensor + " the executor has no place for");
  return *slot;
}

struct Engine::LayerPtrs {
  ConstTensor ln1, wq, bq, wk, bk, wv, bv, wo, ln2, wg, wu, wd, qn, kn;
  Tensor d_ln1, d_wq, d_bq, d_wk, d_bk, d_wv, d_bv, d_wo, d_ln2, d_wg, d_wu, d_wd, d_qn, d_kn;
  // A MoE layer: the router [E, H], expert 0's gate (expert e's at e x ParamLayout::expert_stride(),
  // its up and down after it) and their gradients.
  ConstTensor router, experts;
  Tensor d_router, d_experts;
  ConstTensor sinks;  // attention sinks [q_heads] (null without)
  Tensor d_sinks;
  ConstTensor bo;  // the o_proj bias [H] (null without)
  Tensor d_bo;
  ConstTensor router_bias;  // a MoE router's bias [E] (null without)
  Tensor d_router_bias;
  ConstTensor ws_g, ws_u, ws_d;  // a MoE layer's shared experts: gate, up [fs, H], down [H, fs] (null without)
  Tensor d_ws_g, d_ws_u, d_ws_d;
  ConstTensor ln_ao, ln_mo;  // sandwich norms: the attention output's and the MLP output's [H] (null without)
  Tensor d_ln_ao, d_ln_mo;
  // LoRA: per target, A and B and their gradients (null where the projection has no adapter)
  std::array<ConstTensor, kLoraTargets> la{}, lb{};
  std::array<Tensor, kLoraTargets> d_la{}, d_lb{};
  std::array<LoraSlot, kLoraTargets> slot{};
};

Engine::LayerPtrs Engine::layer_ptrs(int64_t l) const {
  const LayerOffsets& o = layout_.layer(l);
  const ConstTensor P = params_.ct();
  const Tensor G = grads_.t();
  const int64_t eb = layout_.experts_begin();
  auto p = [&](int64_t off) -> ConstTensor {
    return off < 0 ? ConstTensor{} : off < eb ? P.at(off) : experts_.ct().at(off - eb);
  };
  // Under LoRA the base is frozen: no parameter of it has a gradient.
  auto d = [&](int64_t off) -> Tensor { return off >= 0 && !lora_ ? G.at(off) : Tensor{}; };
  LayerPtrs r{p(o.input_norm), p(o.q), p(o.q_bias), p(o.k), p(o.k_bias), p(o.v), p(o.v_bias), p(o.o), p(o.post_norm),
              p(o.gate), p(o.up), p(o.down), p(o.q_norm), p(o.k_norm),
              d(o.input_norm), d(o.q), d(o.q_bias), d(o.k), d(o.k_bias), d(o.v), d(o.v_bias), d(o.o), d(o.post_norm),
              d(o.gate), d(o.up), d(o.down), d(o.q_norm), d(o.k_norm),
              p(o.router), p(o.experts), d(o.router), d(o.experts), p(o.sinks), d(o.sinks), p(o.o_bias), d(o.o_bias),
              p(o.router_bias), d(o.router_bias), p(o.shared_gate), p(o.shared_up), p(o.shared_down),
              d(o.shared_gate), d(o.shared_up), d(o.shared_down), p(o.attn_out_norm), p(o.mlp_out_norm),
              d(o.attn_out_norm), d(o.mlp_out_norm)};
  if (lora_) {
    const ConstTensor A = adapters_.ct();
    for (int k = 0; k < kLoraTargets; ++k) {
      const LoraSlot& s = lora_layout_.lora_slot(l, static_cast<LoraTarget>(k));
      r.slot[k] = s;
      if (s.a < 0) continue;
      r.la[k] = A.at(s.a), r.lb[k] = A.at(s.b);
      r.d_la[k] = G.at(s.a), r.d_lb[k] = G.at(s.b);
    }
  }
  return r;
}

namespace {
// The runtime reserve (the CUDA context) and the allocator's blocks beyond the buffers are on the
// GPU but not allocated by the executor.
step::BufferTable without_reserve(step::BufferTable t) {
  std::erase_if(t.rows, [](const step::BufferRow& r) { return step::reserved_only(r.category); });
  return t;
}
}  // namespace

std::vector<step::BufferRow> run_rows(const models::ModelSpec& model, const step::Config& config,
                                      const step::Target& target) {
  return without_reserve(step::buffer_table(model, config, target, false)).rows;
}

step::BufferTable run_table(const models::ModelSpec& model, const step::Config& config, const step::Target& target) {
  return without_reserve(step::buffer_table(model, config, target, true));
}

std::vector<std::string> check_plan_rows(const std::vector<step::BufferRow>& planned,
                                         const std::vector<step::BufferRow>& needed, const std::string& backend_name) {
  std::vector<std::string> notes;
  if (planned.empty()) return notes;
  std::vector<bool> used(planned.size(), false);
  for (const step::BufferRow& r : needed) {
    size_t k = 0;
    while (k < planned.size() && !(planned[k].name == r.name && planned[k].tier == r.tier)) ++k;
    if (k == planned.size())
      throw Error("--plan", r.name, "the run needs this " + std::string(to_string(r.tier)) + " buffer (" +
                                        format_bytes(r.bytes) + ") and the plan's buffer table has no row for it",
                  "re-make the plan with this version of oomb (`oomb plan ... --out`)");
    used[k] = true;
    const int64_t budget = planned[k].bytes;
    if (budget < r.bytes)
      throw Error("--plan", r.name, "the plan budgets " + format_bytes(budget) + " (" + std::to_string(budget) +
                                        " bytes) for this row and the run needs " + format_bytes(r.bytes) + " (" +
                                        std::to_string(r.bytes) + " bytes)",
                  "re-make the plan for this model and configuration");
    if (budget > r.bytes)
      notes.push_back("buffer " + r.name + ": the plan budgets " + format_bytes(budget) + ", the run uses " +
                      format_bytes(r.bytes));
  }
  for (size_t k = 0; k < used.size(); ++k)
    if (!used[k] && !step::reserved_only(planned[k].category))
      notes.push_back("buffer " + planned[k].name + " (" + format_bytes(planned[k].bytes) + ", " +
                      to_string(planned[k].tier) + "): planned, not allocated by the " + backend_name + " backend");
  return notes;
}

// One tensor of a row of the run's table, as the table sizes it, allocated under that row: the
// memory account refuses it when its rows have no such row, or the row cannot hold it, or the row
// is not alive in the current phase.
Buffer Engine::allocate(const step::BufferRow& row, const step::RowTensor& t) {
  const DType storage = t.dtype == Dtype::bf16 ? DType::bf16 : DType::f32;  // a view's element type
  return Buffer(backend_, row.tier, checked_mul(t.elements, oomb::dtype_bytes(t.dtype), row.name.c_str()), &account_,
                row.name, storage);
}

Buffer Engine::row_tensor(const char* row, Tier tier, const char* tensor) {
  for (const step::BufferRow& r : table_)
    if (r.name == row && r.tier == tier) {
      const step::RowTensor* t = r.tensor(tensor);
      OOMB_ASSERT(t, std::string("row ") + row + " of the step's table holds no tensor " + tensor);
      return allocate(r, *t);
    }
  OOMB_ASSERT(false, std::string("the step's table has no ") + to_string(tier) + " row " + row);
  return {};
}

namespace {
// Data parallelism's gradient buckets over the trained layout, in the order they become final in
// the last chunk's backward (step::gradient_buckets): the head (the final norm, an untied LM head),
// each layer from the last, the embedding. Each is one contiguous range of the layout (ParamLayout
// lays out the embedding, the layers in order, then the head).
std::vector<Engine::GradientRange> gradient_ranges(const ParamLayout& layout, int64_t layers) {
  std::vector<Engine::GradientRange> out;
  int64_t first_layer_offset = INT64_MAX;
  auto layer_of = [](const std::string& name) -> int64_t {
    const size_t at = name.find("layers.");
    if (at == std::string::npos) return -1;
    return std::stoll(name.substr(at + 7));
  };
  for (const ParamInfo& p : layout.params())
    if (layer_of(p.name) >= 0) first_layer_offset = std::min(first_layer_offset, p.offset);
  for (const ParamInfo& p : layout.params()) {
    const int64_t l = layer_of(p.name);
    // Final after the head (0), after layer l's backward (layers - l), after the embedding's (layers + 1).
    const int64_t final_at = l >= 0 ? layers - l : p.offset < first_layer_offset ? layers + 1 : 0;
    if (!out.empty() && out.back().final_at == final_at && out.back().offset + out.back().count == p.offset) {
      out.back().count += p.numel;
      continue;
    }
    // One range per bucket, but a MoE layer's experts (after every other tensor of the layout).
    if (p.offset < layout.experts_begin())
      for (const auto& r : out) OOMB_ASSERT(r.final_at != final_at, "a gradient bucket is not contiguous: " + p.name);
    out.push_back({p.offset, p.numel, final_at});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.final_at < b.final_at; });
  return out;
}

}  // namespace

void check_op_scratch(Backend& backend, const std::vector<step::cuda_scratch::LinearCall>& calls, int64_t row_bytes,
                      bool bf16_gemm) {
  for (const step::cuda_scratch::LinearCall& call : calls) {
    const int64_t planned = backend.planned_op_scratch(call);
    if (planned < 0) return;  // a backend without an op scratch
    if (planned <= row_bytes) continue;
    const int64_t declared = call.bytes(bf16_gemm);
    throw Error("op_scratch", call.name(),
                "its GEMMs (" + std::to_string(call.rows) + " rows, " + std::to_string(call.in) + " -> " +
                    std::to_string(call.out) + ") would need " + format_bytes(planned) + " (" +
                    std::to_string(planned) + " bytes) of op scratch on this device and the op_scratch row holds " +
                    format_bytes(row_bytes) + " (this op's declared need: " + format_bytes(declared) +
                    "): the row is declared for the GEMM paths cuBLASLt is expected to offer (bf16 where both "
                    "operands are bf16" + (bf16_gemm ? " or the GEMM precision is bf16" : "") +
                    "), and this device's cuBLASLt has no bf16 algorithm for one of them; its fp32 fallback "
                    "converts the operands in the scratch",
                "fp32 storage (param_dtype, activation_dtype and loss_dtype fp32) with fp32 GEMM precision, whose "
                "table declares the fp32 paths, or a device whose cuBLASLt offers bf16 algorithms for these shapes");
  }
}

Engine::Engine(Backend& backend, const models::ModelSpec& model, const step::Config& config,
               const Weights& weights, EngineOptions options)
    : backend_(backend),
      model_(effective_model(model, config)),
      rope_(models::rope_of(model_)),
      config_(config),
      options_(std::move(options)),
      recorder_(options_.record_trace, options_.detail) {
  check_config(model, config);
  join_ranks(config);
  choose_storage(model, config);
  const step::BufferTable table = bind_table(model, config);
  allocate_parameters(weights, model, config);
  allocate_pages(table, config);
  account_backend_buffers(model, config);
  allocate_step_state(config);
}

// What the configuration may ask is refused by step/ (validate, capability: the flag that sets the
// knob, from step's one vocabulary); the Engine's own refusals name the keys, and the runner names
// the flags before (check_run).
void Engine::check_config(const models::ModelSpec& model, const step::Config& config) {
  step::validate(config, model);
  if (const step::Capability cap = step::model_capability(model); !cap.executable())
    throw step::model_capability_error(cap, model);
  if (const step::Capability cap = step::moe_capability(model, config); !cap.executable())
    throw step::capability_error(cap, config);
  if (const step::Capability cap = step::attention_capability(model, config); !cap.executable())
    throw step::capability_error(cap, config);
  if (const step::Capability cap = step::capability(config, backend_.target()); !cap.executable())
    throw step::capability_error(cap, config);
  if (config.context_tokens < 2)
    throw Error("context_tokens", std::to_string(config.context_tokens),
                "needs at least 2 tokens (one next-token prediction)");
  if (model_.head_dim % 2 != 0) throw Error(model_.id, "head_dim", "must be even for RoPE");
  if (options_.measure_recall && config.attention != Attention::sparse)
    throw Error("--measure-recall", "", "measures what sparse page selections capture of the dense attention",
                "add --attention sparse");
}

// The run's ranks: tensor parallelism's shard of the model (one process per GPU of a group) and the
// groups this rank trains with.
void Engine::join_ranks(const step::Config& config) {
  const int world = options_.comm ? options_.comm->size() : 1;
  full_model_ = model_;
  tp_ = config.gpus;
  if (tp_ > 1) {
    // Tensor parallelism (docs/model.md "Tensor parallelism"): one process per GPU of the group,
    // each holding its shard of the model and of the KV heads.
    const std::string gpus = std::to_string(tp_);
    if (world != tp_ * config.data_parallel)
      throw Error("gpus", gpus,
                  "tensor parallelism over " + gpus + " GPUs runs as " + gpus + " processes and the run has " +
                      std::to_string(world),
                  "a communicator of one rank per GPU (EngineOptions::comm)");
    // Rank r: tensor-parallel rank r % tp of replica r / tp (the runner trains that replica's sequence).
    tp_rank_ = options_.comm->rank() % tp_;
    model_ = step::tensor_parallel_shard(full_model_, tp_);
    vocab0_ = tp_rank_ * model_.vocab;
  } else if (config.data_parallel != world)
    throw Error("data_parallel", std::to_string(config.data_parallel),
                "the run has " + std::to_string(world) + " rank" + (world == 1 ? "" : "s") +
                    " and the configuration " + std::to_string(config.data_parallel) + " data-parallel replicas",
                "a communicator of one rank per replica (EngineOptions::comm)");
  if (world > 1) {
    // The groups the caller made (the CUDA runner: before the device block, so that NCCL's buffers
    // are set up first), else split here.
    if (options_.groups) {
      tp_comm_ = options_.groups->tp;
      dp_comm_ = options_.groups->dp;
    } else {
      groups_ = parallel_groups(*options_.comm, tp_, config.data_parallel);
      tp_comm_ = groups_.tp;
      dp_comm_ = groups_.dp;
    }
    OOMB_ASSERT((tp_comm_ != nullptr) == (tp_ > 1) && (dp_comm_ != nullptr) == (config.data_parallel > 1),
                "the communicator groups do not match the configuration's degrees");
  }
}

// The storage dtypes, the step's geometry, the parameters' layouts (LoRA's adapters) and the loss's tiles.
void Engine::choose_storage(const models::ModelSpec& model, const step::Config& config) {
  // Storage as the config says: fp32 or bf16 (anything else is refused above, by the capability).
  kv_dtype_ = page_dtype_of(config.kv_dtype, "kv_dtype");
  grad_page_dtype_ = page_dtype_of(config.kv_grad_dtype, "kv_grad_dtype");
  param_dtype_ = storage_dtype_of(config.param_dtype, "param_dtype");
  grad_dtype_ = storage_dtype_of(config.param_grad_dtype, "param_grad_dtype");
  act_dtype_ = storage_dtype_of(config.activation_dtype, "activation_dtype");
  loss_dtype_ = storage_dtype_of(config.loss_dtype, "loss_dtype");
  g_ = step::geometry(model, config);

  layout_ = ParamLayout(model_);
  lora_ = config.lora_rank > 0;
  if (lora_) {
    lora_layout_ = ParamLayout::lora(model_, config.lora_rank, config.lora_targets);
    lora_scale_ = static_cast<float>(config.lora_alpha / static_cast<double>(config.lora_rank));
    OOMB_ASSERT(options_.adapters.layout.total() == lora_layout_.total() &&
                    options_.adapters.layout.params().size() == lora_layout_.params().size(),
                "LoRA: EngineOptions::adapters does not have the adapters' layout");
    grad_dtype_ = DType::f32;  // the adapters' gradients (fp32, as the adapters)
  }
  // The LM head and the loss run over tiles of g.T rows (logits_chunk_tokens, or the whole chunk:
  // the framework path keeps the logits, an upcast when the loss dtype differs, and a gradient).
  head_rows_ = g_.T;
  fused_loss_ = g_.fused_loss;
  recomputed_ = g_.Lr;
}

step::BufferTable Engine::bind_table(const models::ModelSpec& model, const step::Config& config) {
  // The run's buffer table: every buffer below is one of its rows' tensors, and the memory account
  // measures each row's use against its bytes and phases (an allocation outside every row, beyond
  // its row or outside its phases is refused). The runner's, checked against the plan, or the step's.
  step::BufferTable table =
      options_.table.table.rows.empty() ? run_table(model, config, backend_.target()) : std::move(options_.table.table);
  table_ = table.rows;
  rows_ = options_.table_override.empty() ? table_ : options_.table_override;
  notes_ = options_.planned.empty() ? std::move(options_.table.notes)
                                     : check_plan_rows(options_.planned, rows_, backend_.name());
  account_.bind(rows_);
  return table;
}

// The weights (this rank's shard), their gradients and, with an optimizer, its state (ZeRO-1: this
// replica's shard of it), each a tensor of its row, uploaded.
void Engine::allocate_parameters(const Weights& weights, const models::ModelSpec& model, const step::Config& config) {
  // Tensor parallelism: the rank's shard of the model's weights.
  const Weights local = tp_ > 1 ? shard_params(weights, layout_, tp_rank_) : Weights{};
  const Weights& w0 = tp_ > 1 ? local : weights;
  OOMB_ASSERT(w0.layout.total() == layout_.total() && w0.layout.params().size() == layout_.params().size(),
              "weights do not have the model's layout");
  const int64_t n_params = layout_.total();
  const bool optimizer = config.optimizer != step::Optimizer::none;
  const Tier opt_tier = config.optimizer == step::Optimizer::host ? Tier::host : Tier::device;

  // What the step trains: every parameter, or under LoRA the adapters (fp32).
  const int64_t n_trained = lora_ ? lora_layout_.total() : n_params;
  const DType trained_dtype = lora_ ? DType::f32 : param_dtype_;
  // ZeRO-1 (config.shard_optimizer): the weights and gradients padded to a multiple of the replicas,
  // the AdamW state this replica's shard of them (step::optimizer_shard, the table's sizes).
  zero_ = step::optimizer_shard(model, config, g_);
  sharded_ = zero_.sharded;
  OOMB_ASSERT(!sharded_ || (!lora_ && zero_.trained == n_params && dp_comm_ &&
                            dp_comm_->size() == static_cast<int>(config.data_parallel)),
              "a sharded optimizer is full fine-tuning over the data-parallel replicas");
  params_ = row_tensor(step::row::kWeights, Tier::device, "weights");
  if (layout_.experts_begin() < n_params) experts_ = row_tensor(step::row::kExpertWeights, Tier::device, "experts");
  grads_ = row_tensor(step::row::kParameterGradients, Tier::device, lora_ ? "adapter_gradients" : "gradients");
  buckets_ = gradient_ranges(lora_ ? lora_layout_ : layout_, g_.L);
  upload_weights(w0.data);
  if (lora_) {
    adapters_ = row_tensor(step::row::kLoraAdapters, Tier::device, "adapters");
    backend_.upload(adapters_.data(), options_.adapters.data.data(), adapters_.bytes());
  }
  if (optimizer) {
    // Sharded, this replica updates elements [shard0, shard0 + n_opt) of the padded buffers.
    const int64_t n_opt = sharded_ ? zero_.shard : n_trained;
    const int64_t shard0 = sharded_ ? dp_comm_->rank() * zero_.shard : 0;
    const int64_t real = std::clamp<int64_t>(n_trained - shard0, 0, n_opt);  // not padding
    if (trained_dtype != DType::f32) {
      master_ = row_tensor(step::row::kMasterWeights, opt_tier, "master");
      backend_.upload(master_.data(), w0.data.data() + shard0, real * 4);
    }
    if (opt_tier == Tier::host) {
      host_grads_ = row_tensor(step::row::kHostParameterGradients, Tier::host, lora_ ? "adapter_gradients" : "gradients");
      host_weights_ = row_tensor(step::row::kHostWeights, Tier::host, lora_ ? "adapter_weights" : "weights");
      const int64_t wb = dtype_bytes(trained_dtype);
      for_each_trained_piece(shard0, n_opt, [&](Tensor src, int64_t at, int64_t count) {
        backend_.download(static_cast<char*>(host_weights_.data()) + at * wb, src.data, count * wb);
      });
    }
    adam_m_ = row_tensor(step::row::kAdamwMoments, opt_tier, "m");
    adam_v_ = row_tensor(step::row::kAdamwMoments, opt_tier, "v");
    decay_mask_ = row_tensor(step::row::kAdamwDecayMask, opt_tier, "mask");
    std::vector<uint8_t> mask(static_cast<size_t>(std::max(n_trained, shard0 + n_opt)), 0);
    for (const auto& p : (lora_ ? lora_layout_ : layout_).params())
      if (p.decay) std::fill_n(mask.begin() + p.offset, p.numel, uint8_t{1});
    backend_.upload(decay_mask_.data(), mask.data() + shard0, n_opt);
  }
}

// The page pools' offload engine and, sparse, the page summaries.
void Engine::allocate_pages(const step::BufferTable& table, const step::Config& config) {
  // Sliding and chunked layers keep their pages in the local pools (offload.h LocalPages).
  for (int64_t l = 0; l < g_.L; ++l) {
    const models::LayerAttention kind = model_.attention_of(l);
    local_.layers.push_back({kind, model_.window_tokens(kind)});
    local_class_.push_back(-1);
    if (kind == models::LayerAttention::global) continue;
    for (int64_t m = 0; m < l && local_class_.back() < 0; ++m)
      if (model_.attention_of(m) == kind) local_class_.back() = local_class_[static_cast<size_t>(m)];
    if (local_class_.back() >= 0) continue;
    local_class_.back() = static_cast<int64_t>(reach_.size());
    std::vector<std::vector<int64_t>>& lists = reach_.emplace_back(static_cast<size_t>(g_.n));
    for (int64_t c = 1; c < g_.n; ++c)
      for (int64_t k = step::reach_first_page(kind, model_.window_tokens(kind), g_.C, g_.p, c); k < g_.prefix_pages(c); ++k)
        lists[static_cast<size_t>(c)].push_back(k);
  }
  if (g_.Ll == 0) local_.layers.clear();
  local_.kv_pages = g_.local_kv_pages;
  local_.grad_pages = g_.local_grad_pages;
  store_ = std::make_unique<OffloadEngine>(backend_, g_, table.pages.kv_pool_capacity_pages, account_, recorder_,
                                           options_.host_slab_bytes, options_.tagger, local_);
  if (config.attention == Attention::sparse) {
    // Page key means, stored in the KV page dtype (what the selection reads).
    const bool dev = config.selection_memory == step::SelectionMemory::device;
    summaries_ = row_tensor(dev ? step::row::kPageSummaries : step::row::kHostPageSummaries,
                            dev ? Tier::device : Tier::host, "summaries");
  }
}

void Engine::account_backend_buffers(const models::ModelSpec& model, const step::Config& config) {
  // What the backend holds for itself (the CUDA workspace and op scratch), under their rows: the op
  // scratch is sized to its row first (a larger request throws from then on).
  if (const step::BufferRow* r = find_row(rows_, step::row::kOpScratch, Tier::device)) {
    backend_.size_op_scratch(r->bytes);
    check_op_scratch(backend_, step::cuda_scratch::step_linear_calls(model, config, g_), r->bytes,
                     backend_.target().bf16_gemm);
  }
  for (const BackendBuffer& b : backend_.device_buffers()) account_.add(Tier::device, b.name, b.bytes);
  backend_.size_loss_slots(step::cuda_scratch::loss_slots(g_.n));
  for (const std::vector<BackendBuffer>& held : {backend_.host_buffers(), options_.host_buffers})
    for (const BackendBuffer& b : held)
      if (b.bytes > 0 && find_row(rows_, b.name, Tier::host)) account_.add(Tier::host, b.name, b.bytes);
  // What the communicators' library took of the device (NCCL's buffers, measured at their set-up),
  // under the table's row for them; a table without that row (a run of thread ranks sharing a GPU,
  // whose NCCL-free communicators take nothing) gets none.
  {
    int64_t comm_bytes = 0;
    for (Communicator* c : {tp_comm_, dp_comm_})
      if (c) comm_bytes += c->device_bytes();
    const bool has_row = find_row(rows_, step::row::kCommunicatorBuffers, Tier::device) != nullptr;
    if (comm_bytes > 0 && has_row) account_.add_measured(Tier::device, step::row::kCommunicatorBuffers, comm_bytes);
    else if (comm_bytes > 0)
      notes_.push_back("the communicators' library took " + format_bytes(comm_bytes) +
                       " of device memory, which the buffer table has no row for");
  }
}

// The state a step keeps: tensor parallelism's staging and loss statistics, the chunk's tokens and
// hidden states, the working set carved per phase, recall's keys, the dense selections, the run
// record's model and the chunks' relative work (for progress).
void Engine::allocate_step_state(const step::Config& config) {
  if (tp_ > 1) {
    // The activations' all-reduces sum bf16 in an fp32 copy (MPI), the loss's statistics of every
    // rank meet in one buffer: both under their rows, for the whole run.
    if (act_dtype_ == DType::bf16 && tp_comm_->stages_bf16_in_fp32())
      tp_staging_ = row_tensor(step::row::kTensorParallelStaging, Tier::device, "staging");
    tp_stats_ = row_tensor(step::row::kTensorParallelLossStatistics, Tier::device, "statistics");
  }

  w_ = std::make_unique<Work>();
  w_->ids = row_tensor(step::row::kTokenIds, Tier::device, "ids");
  w_->targets = row_tensor(step::row::kTokenIds, Tier::device, "targets");
  w_->x = row_tensor(step::row::kHiddenStates, Tier::device, "x");
  w_->y = row_tensor(step::row::kHiddenStates, Tier::device, "y");
  // The working set: the device rows alive in some phases only, carved by enter().
  for (const step::BufferRow& r : table_)
    if (r.tier == Tier::device && r.phases != step::all_phases(config.schedule)) working_set_.push_back({&r, false});

  if (options_.measure_recall) {
    const int64_t kvd = model_.kv_dim();
    const int64_t floats = checked_mul(checked_mul(g_.L, g_.N, "recall keys"), kvd, "recall keys");
    if (floats > (int64_t{1} << 30))
      throw Error("--measure-recall", "", "keeps a host copy of every layer's keys and computes dense scores over the "
                                          "whole prefix (" + format_bytes(checked_mul(floats, 4, "recall keys")) +
                                          " of keys here)",
                  "measure recall at a shorter --context or with fewer --layers");
    recall_keys_.assign(static_cast<size_t>(g_.L), std::vector<float>(static_cast<size_t>(g_.N * kvd), 0.0f));
  }

  if (config.router_aux_loss_coef > 0 && model_.moe.present()) {
    aux_counts_ = row_tensor(step::row::kRouterAuxStatistics, Tier::device, "counts");
    aux_prob_sums_ = row_tensor(step::row::kRouterAuxStatistics, Tier::device, "prob_sums");
    aux_shares_ = row_tensor(step::row::kRouterAuxStatistics, Tier::device, "shares");
  }
  dense_prefix_.resize(static_cast<size_t>(g_.n));
  if (options_.record_routes) routes_.resize(static_cast<size_t>(g_.L));
  for (int64_t c = 0; c < g_.n; ++c) dense_prefix_[static_cast<size_t>(c)] = dense_selection(c, 0, g_.prefix_pages(c)).union_pages;

  // What runs, in the run's record (the trace's metadata.extra): the model as run (this rank's
  // shard under tensor parallelism) and the configuration.
  measured_.model = model_.id;
  measured_.model_spec = model_.to_json();
  measured_.layers = model_.layers;
  measured_.config = config_;

  // Relative work per chunk for progress: tokens x (dense per-token cost in key units + keys seen).
  double layer_params = 0;  // the mean over the layers (a MoE model's differ)
  for (int64_t l = 0; l < model_.layers; ++l) layer_params += static_cast<double>(model_.layer_params(l));
  const double a = 2.0 * layer_params / static_cast<double>(model_.layers) / (4.0 * static_cast<double>(model_.q_dim()));
  for (int64_t c = 0; c < g_.n; ++c) {
    const double T = static_cast<double>(g_.chunk_len(c));
    const double prefix_keys = static_cast<double>(g_.union_bound(c) * g_.p);
    chunk_work_.push_back(T * (a + prefix_keys + T / 2));
  }
}

// Phase p's working set from the rows alive in it: frees the rows p does not keep first, then
// allocates the rows p needs, so the device holds exactly the table's live set of p.
void Engine::enter(StepPhase p, int stage, int64_t chunk, int64_t layer, Op op) {
  const TagScope tag(options_.tagger, stage, chunk, layer, op, "working_set");
  const step::PhaseMask bit = step::phase_bit(p);
  for (HeldRow& h : working_set_)
    if (h.held && !(h.row->phases & bit)) {
      for (const step::RowTensor& t : h.row->tensors) work_slot(h.row->name, t.name) = Buffer();
      h.held = false;
    }
  account_.enter_phase(p);  // what p allocates counts toward p's high-water mark
  for (HeldRow& h : working_set_)
    if (!h.held && (h.row->phases & bit)) {
      for (const step::RowTensor& t : h.row->tensors) work_slot(h.row->name, t.name) = allocate(*h.row, t);
      h.held = true;
    }
  phase_ = p;
}

Engine::LayerSet& Engine::layer_set(int64_t layer) const {
  auto& sets = w_->sets;
  if (config_.checkpointing && layer >= recomputed_) {
    OOMB_ASSERT(static_cast<int64_t>(w_->kept.size()) == g_.L - recomputed_ &&
                    w_->kept[static_cast<size_t>(layer - recomputed_)].h1.data(),
                "kept layer activations not allocated");
    return w_->kept[static_cast<size_t>(layer - recomputed_)];
  }
  const auto i = static_cast<size_t>(config_.checkpointing ? 0 : layer);
  OOMB_ASSERT(i < sets.size() && sets[i].h1.data(), "layer activations used outside a layer phase");
  return sets[i];
}

void Engine::upload_weights(const std::vector<float>& w) {
  // The working weights in their storage dtype (bf16: each fp32 value rounded once); a sharded
  // optimizer's padding beyond them stays zero.
  OOMB_ASSERT(!experts_.data() || !sharded_, "a mixture of experts' weights are unsharded");
  for_each_weight_piece(0, static_cast<int64_t>(w.size()), [&](Tensor dst, int64_t at, int64_t count) {
    if (param_dtype_ == DType::f32) {
      backend_.upload(dst.data, w.data() + at, count * 4);
      return;
    }
    std::vector<uint16_t> b(static_cast<size_t>(count));
    f32_to_bf16(w.data() + at, b.data(), count);
    backend_.upload(dst.data, b.data(), count * 2);
  });
}

void Engine::for_each_weight_piece(int64_t first, int64_t n,
                                   const std::function<void(Tensor, int64_t, int64_t)>& f) const {
  const int64_t eb = experts_.data() ? layout_.experts_begin() : INT64_MAX;
  const struct {
    const Buffer* rows;
    int64_t from, to;  // the flat elements the row holds, from its start
  } pieces[] = {{&params_, 0, eb}, {&experts_, eb, INT64_MAX}};
  for (const auto& p : pieces) {
    const int64_t lo = std::max(first, p.from), hi = std::min(first + n, p.to);
    if (lo < hi) f(p.rows->t().at(lo - p.from), lo - first, hi - lo);
  }
}

void Engine::for_each_trained_piece(int64_t first, int64_t n,
                                    const std::function<void(Tensor, int64_t, int64_t)>& f) const {
  if (lora_) f(adapters_.t().at(first), 0, n);
  else for_each_weight_piece(first, n, f);
}

Engine::~Engine() = default;

bool Engine::data_parallel_op(Op op) {
  return op == Op::gradient_allreduce || op == Op::gradient_reduce_scatter || op == Op::weight_all_gather;
}

void Engine::abort_communicators() {
  // The groups this rank trains with (the world, when it is one of them; aborting twice is a no-op).
  for (Communicator* c : {tp_comm_, dp_comm_})
    if (c) c->abort();
}

namespace {
// Sets the Engine's collective tag for a scope (restored on exit, exceptions included).
class CommTagScope {
 public:
  CommTagScope(CollectiveClock::Tag& slot, CollectiveClock::Tag tag) : slot_(slot), saved_(slot) { slot_ = tag; }
  ~CommTagScope() { slot_ = saved_; }
  CommTagScope(const CommTagScope&) = delete;
  CommTagScope& operator=(const CommTagScope&) = delete;

 private:
  CollectiveClock::Tag& slot_;
  CollectiveClock::Tag saved_;
};
}  // namespace

template <class F>
void Engine::timed(const char* name, const Pass& pass, double flops, F&& f) {
  const TagScope tag(options_.tagger, pass.stage(), pass.chunk, pass.layer, pass_op(pass.kind), name);
  const CommTagScope comm(comm_tag_, {pass_op(pass.kind), pass.stage(), pass.chunk, pass.layer});
  if (!recorder_.enabled()) return f();
  const int64_t t0 = steady_now_ns();
  f();
  recorder_.compute(name, pass_op(pass.kind), pass.stage(), pass.chunk, pass.layer, t0, steady_now_ns(), flops);
}

template <class F>
void Engine::timed(const char* name, Op op, int stage, int64_t chunk, double flops, F&& f) {
  const TagScope tag(options_.tagger, stage, chunk, -1, op, name);
  const CommTagScope comm(comm_tag_, {op, stage, chunk, -1});
  if (!recorder_.enabled()) return f();
  const int64_t t0 = steady_now_ns();
  f();
  recorder_.compute(name, op, stage, chunk, -1, t0, steady_now_ns(), flops);
}

void Engine::tp_all_reduce(Tensor t, int64_t n) {
  if (tp_ == 1) return;
  const int64_t t0 = steady_now_ns();
  tp_comm_->all_reduce_sum_staged(t, n, tp_staging_.f32());
  tp_counted(t0, n * dtype_bytes(t.dtype));
}

bool Engine::reduces_gradients() const {
  return dp_comm_ && dp_comm_->size() > 1 && config_.optimizer != step::Optimizer::none && !sharded_ &&
         accumulated_ + 1 >= options_.adamw.grad_accum;
}

void Engine::begin_gradient_buckets() {
  next_bucket_ = 0;
  // MPI sums bf16 gradients in an fp32 copy: allocated under the table's row, alive to the update.
  if (grads_.dtype() == DType::bf16 && dp_comm_->stages_bf16_in_fp32())
    dp_staging_ = row_tensor(step::row::kGradientAllreduceStaging, Tier::host, "staging");
}

void Engine::gradient_buckets_final(int64_t point) {
  for (; next_bucket_ < buckets_.size() && buckets_[next_bucket_].final_at <= point; ++next_bucket_) {
    const GradientRange& b = buckets_[next_bucket_];
    const int64_t bytes = b.count * dtype_bytes(grads_.dtype());
    // Timed as the replicas meet it: a faster rank's wait for the slowest is told apart from the
    // transfer after the step (resolve_collectives). Where the transport overlaps (NCCL) the call
    // only enqueues it.
    const int64_t t0 = steady_now_ns();
    timed("gradient_allreduce", Op::gradient_allreduce, 2, 0, 0, [&] {
      float* staging = dp_staging_.data() ? dp_staging_.f32() + b.offset : nullptr;
      // With tensor parallelism the bucket goes on the compute stream, after the layer's
      // tensor-parallel all-reduces, not on the replicas' stream beside the backward's: kernels of
      // two NCCL communicators in flight at once on one GPU can deadlock (each spins until its
      // peers arrive, and a device-synchronising call inside NCCL then waits for the other), as
      // NCCL's documentation warns. The overlap with the backward is given up for that case only.
      if (tp_ > 1) dp_comm_->all_reduce_sum_staged(grads_.t().at(b.offset), b.count, staging);
      else dp_comm_->all_reduce_sum_async(grads_.t().at(b.offset), b.count, staging);
    });
    allreduce_bytes_ += bytes;
    const int64_t layer = b.final_at >= 1 && b.final_at <= g_.L ? g_.L - b.final_at : -1;
    dp_clock_.record(t0, steady_now_ns(), bytes, {Op::gradient_allreduce, 2, 0, layer});
  }
}

void Engine::resolve_collectives() {
  auto resolve = [&](CollectiveClock& clock, Communicator* comm, const char* name) {
    if (!comm || comm->size() <= 1) return;
    clock.resolve(*comm);
    for (const auto& c : clock.calls())
      recorder_.collective(name ? name : to_string(c.tag.op), c.tag.op, c.tag.stage, c.tag.chunk, c.tag.layer, c.last_arrival_ns, c.exit_ns,
                           c.bytes);
  };
  resolve(tp_clock_, tp_ > 1 ? tp_comm_ : nullptr, "tp_allreduce");
  // Data parallelism's calls by their own names: the gradient buckets' all-reduces, or ZeRO-1's
  // gradient_reduce_scatter and weight_all_gather (as the simulator names them).
  resolve(dp_clock_, dp_comm_, nullptr);
}

void Engine::tp_counted(int64_t t0_ns, int64_t bytes) {
  tp_clock_.record(t0_ns, steady_now_ns(), bytes, comm_tag_);
  tp_allreduce_bytes_ += bytes;
  ++tp_allreduces_;
}

int32_t Engine::local_vocab_id(int64_t token, int32_t elsewhere) const {
  const int64_t v = token - vocab0_;
  return v >= 0 && v < model_.vocab ? static_cast<int32_t>(v) : elsewhere;
}

namespace {
// In place: n floats summed over comm's ranks in double (every rank gets the same sum), rounded once.
void sum_in_double(Communicator& comm, std::vector<float>& x) {
  std::vector<double> sum(x.begin(), x.end());
  comm.all_reduce_sum_host(sum.data(), static_cast<int64_t>(sum.size()));
  for (size_t i = 0; i < sum.size(); ++i) x[i] = static_cast<float>(sum[i]);
}
}  // namespace

void Engine::embed(int64_t c, int stage, Tensor x) {
  const int64_t T = g_.chunk_len(c), s = g_.chunk_start(c);
  timed("embedding", Op::embedding, stage, c, 0, [&] {
    if (tp_ == 1) {
      backend_.upload(w_->ids.data(), tokens_.data() + s, T * 4);
    } else {
      // The vocabulary-parallel embedding: this rank's rows of the table for its tokens, zero rows
      // for the others' (id -1), summed over the ranks.
      std::vector<int32_t> ids(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t)] = local_vocab_id(tokens_[static_cast<size_t>(s + t)], -1);
      backend_.upload(w_->ids.data(), ids.data(), T * 4);
    }
    backend_.embedding_fwd(w_->ids.i32(), T, params_.ct().at(layout_.embed()), model_.hidden, x);
  });
  if (tp_ > 1) timed("tp_allreduce", Op::embedding, stage, c, 0, [&] { tp_all_reduce(x, T * model_.hidden); });
}

PagedAttention Engine::attention_args(const Pass& pass, const PassPages& pages) const {
  PagedAttention a;
  a.rows = g_.chunk_len(pass.chunk);
  a.q_heads = model_.q_heads;
  a.kv_heads = model_.kv_heads;
  a.head_dim = model_.head_dim;
  a.page_tokens = g_.p;
  const LayerSet& acts = layer_set(pass.layer);
  a.q = acts.q.ct();
  a.k_own = acts.k.ct();
  a.v_own = acts.v.ct();
  a.prefix_pages.assign(pages.prefix_kv.begin(), pages.prefix_kv.end());
  a.kv_dtype = kv_dtype_;
  a.grad_dtype = grad_page_dtype_;
  if (local_layer(pass.layer)) {
    const LocalPages::Layer& k = local_.layers[static_cast<size_t>(pass.layer)];
    a.local = k.kind;
    a.window = k.window;
    a.q_pos0 = g_.chunk_start(pass.chunk);
    a.prefix_ids = *pages.prefix;
  }
  const ChunkSelection& s = log_.at(pass.chunk, pass.layer);
  if (!s.dense) {
    a.select_groups = s.groups;
    a.select.reserve(s.pages.size());
    for (const auto& list : s.pages) {
      std::vector<int32_t> slots;
      slots.reserve(list.size());
      for (int32_t page : list) {
        auto it = std::lower_bound(s.union_pages.begin(), s.union_pages.end(), static_cast<int64_t>(page));
        slots.push_back(static_cast<int32_t>(it - s.union_pages.begin()));
      }
      a.select.push_back(std::move(slots));
    }
  }
  return a;
}

namespace {
// Query-key pairs a chunk's attention computes (for the trace's FLOP counts).
double attention_pairs(const PagedAttention& a) {
  double pairs = 0;
  if (a.local != models::LayerAttention::global) {  // each row's keys from its first on
    for (int64_t r = 0; r < a.rows; ++r)
      pairs += static_cast<double>(a.q_pos0 + r - models::first_key(a.local, a.window, a.q_pos0 + r) + 1);
    return pairs;
  }
  const int64_t U = static_cast<int64_t>(a.prefix_pages.size());
  for (int64_t j = 0, r0 = 0; r0 < a.rows; ++j, r0 += a.page_tokens) {
    const int64_t nq = std::min(a.rows - r0, a.page_tokens);
    int64_t m = U;
    if (a.select_groups > 0) m = static_cast<int64_t>(a.select[static_cast<size_t>(j * a.select_groups)].size());
    pairs += static_cast<double>(nq) * static_cast<double>(m * a.page_tokens + r0) + nq * (nq + 1) / 2.0;
  }
  return pairs;
}
}  // namespace

void Engine::select(const Pass& pass, int64_t pass_index) {
  const int64_t c = pass.chunk, l = pass.layer, prefix = g_.prefix_pages(c);
  if (local_layer(l)) {  // its reach, densely (sparse budgets are the global layers')
    ChunkSelection& s = log_.at(c, l) = dense_selection(c, l, 0);
    s.union_pages = reach_[static_cast<size_t>(local_class_[static_cast<size_t>(l)])][static_cast<size_t>(c)];
    return;
  }
  if (!g_.sparse || prefix <= g_.B) {
    log_.at(c, l) = dense_selection(c, l, prefix);
    return;
  }
  SelectionArgs a;
  a.q = layer_set(l).q.ct();
  a.rows = g_.chunk_len(c);
  a.q_heads = model_.q_heads;
  a.kv_heads = model_.kv_heads;
  a.head_dim = model_.head_dim;
  a.page_tokens = g_.p;
  a.summaries = summaries_.ct().at(store_->global_index(l) * g_.P * model_.kv_dim());
  a.prefix_pages = prefix;
  a.budget = g_.B;
  a.per_kv_head = config_.selection == "per-kv-head";
  if (tp_ > 1 && !a.per_kv_head)
    // The published rule: one selection from the scores of every KV head, which the ranks share:
    // summed over them before the top-k (every rank then selects the same pages), where the backend
    // computes them (host memory on the CPU backend; device memory on the CUDA backend, which NCCL
    // reduces on its compute stream).
    a.reduce_scores = [this](double* scores, int64_t n) {
      const int64_t t0 = steady_now_ns();
      tp_comm_->all_reduce_sum_f64(scores, n);
      tp_counted(t0, n * 8);
    };
  const double flops = 2.0 * static_cast<double>(a.rows * prefix * model_.kv_dim());
  timed("select", pass, flops, [&] {
    log_.at(c, l) = sparse_selection(c, l, a.per_kv_head ? model_.kv_heads : 1, backend_.select_pages(a));
  });
  store_->load_prefix(pass_index);
}

// Recall of pass.chunk's selection at pass.layer (RecallSample). Needs the chunk's post-RoPE q and
// k (in the work buffers) and the keys of every earlier chunk (recall_keys_, filled here).
void Engine::measure_recall(const Pass& pass) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Strided = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  const int64_t c = pass.chunk, l = pass.layer, T = g_.chunk_len(c), s = g_.chunk_start(c);
  const int64_t qh = model_.q_heads, kh = model_.kv_heads, hd = model_.head_dim, qd = model_.q_dim();
  const int64_t kvd = model_.kv_dim(), group = qh / kh, Sk = s + T, prefix = g_.prefix_pages(c);
  std::vector<float>& keys = recall_keys_[static_cast<size_t>(l)];
  download_f32(layer_set(l).k.ct(), T * kvd, keys.data() + s * kvd);
  std::vector<float> q(static_cast<size_t>(T * qd));
  download_f32(layer_set(l).q.ct(), T * qd, q.data());

  // attended[(j * groups + g) * prefix + page]: query page j, selection group g attends `page`.
  const ChunkSelection& sel = log_.at(c, l);
  const int64_t groups = sel.dense ? 1 : sel.groups;
  std::vector<uint8_t> attended(static_cast<size_t>(g_.own_pages(c) * groups * prefix), sel.dense ? 1 : 0);
  if (!sel.dense)
    for (size_t i = 0; i < sel.pages.size(); ++i)
      for (int32_t page : sel.pages[i]) attended[i * static_cast<size_t>(prefix) + static_cast<size_t>(page)] = 1;

  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  double sum = 0;
  RowMat K, S;
  for (int64_t g = 0; g < kh; ++g) {
    K = Strided(keys.data() + g * hd, Sk, hd, Eigen::OuterStride<>(kvd));
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      S.noalias() = Strided(q.data() + h * hd, T, hd, Eigen::OuterStride<>(qd)) * K.transpose();
      for (int64_t t = 0; t < T; ++t) {
        const float* row = S.data() + t * Sk;
        const int64_t n = s + t + 1;  // causal: every earlier key and the own chunk up to t
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t key = 0; key < n; ++key) mx = std::max(mx, row[key]);
        const uint8_t* att = attended.data() + ((t / g_.p) * groups + (groups == 1 ? 0 : g)) * prefix;
        double total = 0, kept = 0;
        for (int64_t key = 0; key < n; ++key) {
          const double e = std::exp((static_cast<double>(row[key]) - mx) * scale);
          total += e;
          if (key >= s || att[key / g_.p]) kept += e;
        }
        sum += kept / total;
      }
    }
  }
  recall_.push_back({c, l, sum / static_cast<double>(T * qh)});
}

// LoRA on projection t of a layer: u = scale x A^T (kept in the layer's set), y += u B^T; nothing
// where t has no adapter.
void Engine::adapter_fwd(const LayerPtrs& P, LayerSet& w, LoraTarget t, ConstTensor x, int64_t rows, Tensor y) {
  const auto k = static_cast<size_t>(t);
  if (!P.la[k]) return;
  backend_.lora_fwd(x, rows, P.slot[k].in, P.la[k], P.lb[k], config_.lora_rank, P.slot[k].out, lora_scale_,
                    w.lora_u[k].t(), y);
}

// Its backward: dA, dB accumulated, dx += the adapter's share (after the frozen base's linear_bwd).
void Engine::adapter_bwd(const LayerPtrs& P, LayerSet& w, LoraTarget t, ConstTensor x, int64_t rows, ConstTensor dy,
                         Tensor dx) {
  const auto k = static_cast<size_t>(t);
  if (!P.la[k]) return;
  backend_.lora_bwd(x, w.lora_u[k].ct(), rows, P.slot[k].in, P.la[k], P.lb[k], config_.lora_rank, P.slot[k].out,
                    lora_scale_, dy, w_->lora_du[k].t(), dx, P.d_la[k], P.d_lb[k]);
}

// FLOPs of the adapters on `targets` of a layer over `rows` tokens: per_mac x rows x r x (in + out)
// per adapter (2 forward: x A^T and u B^T; 4 backward: dB, du, dA, dx).
double Engine::adapter_flops(int64_t layer, std::initializer_list<LoraTarget> targets, int64_t rows,
                             double per_mac) const {
  if (!lora_) return 0;
  double f = 0;
  for (LoraTarget t : targets) {
    const LoraSlot& s = lora_layout_.lora_slot(layer, t);
    if (s.a >= 0) f += per_mac * static_cast<double>(rows * config_.lora_rank) * static_cast<double>(s.in + s.out);
  }
  return f;
}

// One layer's forward over chunk `pass.chunk`. fill: also selects pages (sparse), writes the own
// K/V pages and page summaries. out == nullptr: the backward's recompute (the MLP output is not
// needed, only the activations).
void Engine::layer_forward(const Pass& pass, int64_t pass_index, PassPages& pages, ConstTensor in, Tensor out) {
  const int64_t T = g_.chunk_len(pass.chunk), pos0 = g_.chunk_start(pass.chunk);
  const int64_t H = model_.hidden, qd = model_.q_dim(), kvd = model_.kv_dim(), F = model_.ffn_hidden;
  const auto eps = static_cast<float>(model_.norm_eps);
  const LayerPtrs P = layer_ptrs(pass.layer);
  LayerSet& w = layer_set(pass.layer);
  const double Td = static_cast<double>(T);
  timed("attn_norm", pass, 0, [&] { backend_.rmsnorm_fwd(in, P.ln1, T, H, eps, w.h1.t(), w.rstd1.f32()); });
  const bool qkn = model_.qk_norm;
  const int64_t l = pass.layer;
  using LT = LoraTarget;
  timed("qkv_proj", pass, 2 * Td * H * (qd + 2 * kvd) + adapter_flops(l, {LT::q, LT::k, LT::v}, T, 2), [&] {
    backend_.linear_fwd(w.h1.t(), T, H, P.wq, P.bq, qd, qkn ? w.q_pre.t() : w.q.t());
    backend_.linear_fwd(w.h1.t(), T, H, P.wk, P.bk, kvd, qkn ? w.k_pre.t() : w.k.t());
    backend_.linear_fwd(w.h1.t(), T, H, P.wv, P.bv, kvd, w.v.t());
    adapter_fwd(P, w, LT::q, w.h1.ct(), T, qkn ? w.q_pre.t() : w.q.t());
    adapter_fwd(P, w, LT::k, w.h1.ct(), T, qkn ? w.k_pre.t() : w.k.t());
    adapter_fwd(P, w, LT::v, w.h1.ct(), T, w.v.t());
  });
  if (qkn)  // Qwen3: RMSNorm over each head's head_dim, before RoPE
    timed("qk_norm", pass, 0, [&] {
      backend_.rmsnorm_fwd(w.q_pre.t(), P.qn, T * model_.q_heads, model_.head_dim, eps, w.q.t(), w.rstd_q.f32());
      backend_.rmsnorm_fwd(w.k_pre.t(), P.kn, T * model_.kv_heads, model_.head_dim, eps, w.k.t(), w.rstd_k.f32());
    });
  timed("rope", pass, 0, [&] {
    backend_.rope_fwd(w.q.t(), T, model_.q_heads, model_.head_dim, pos0, rope_);
    backend_.rope_fwd(w.k.t(), T, model_.kv_heads, model_.head_dim, pos0, rope_);
  });
  if (pass.kind == PassKind::fill) {
    select(pass, pass_index);
    if (options_.measure_recall && !local_layer(pass.layer)) {
      const TagScope tag(options_.tagger, pass.stage(), pass.chunk, pass.layer, pass_op(pass.kind), "recall");
      measure_recall(pass);
    }
    if (g_.sparse && !local_layer(pass.layer))
      timed("page_summaries", pass, 0, [&] {
        const int64_t layer = store_->global_index(pass.layer);
        backend_.page_summaries(w.k.t(), T, kvd, g_.p,
                                summaries_.t().at((layer * g_.P + g_.first_own_page(pass.chunk)) * kvd));
      });
  }
  const PagedAttention a = attention_args(pass, pages);
  timed("attention_fwd", pass, 4.0 * model_.head_dim * model_.q_heads * attention_pairs(a),
        [&] {
          backend_.attention_fwd(a, w.o.t(), w.lse.f32());
          if (P.sinks.data) backend_.attention_sinks_fwd(P.sinks, T, model_.q_heads, model_.head_dim, w.o.t(), w.lse.f32());
        });
  if (pass.kind == PassKind::fill)
    timed("kv_write", pass, 0, [&] {
      backend_.write_kv_pages(w.k.t(), w.v.t(), T, kvd, g_.p, pages.own_kv, kv_dtype_);
    });
  const bool sandwich = model_.sandwich_norms;
  timed("o_proj", pass, 2 * Td * qd * H + adapter_flops(l, {LT::o}, T, 2), [&] {
    // The o_proj bias (gpt-oss) is added once: refused under tensor parallelism (attention_capability).
    // Sandwich norms (Gemma): the output normalised before the residual add, kept for the backward.
    const Tensor ao = sandwich ? w.attn_out.t() : w.tmp.t();
    backend_.linear_fwd(w.o.t(), T, qd, P.wo, P.bo, H, ao);
    adapter_fwd(P, w, LT::o, w.o.ct(), T, ao);
    tp_all_reduce(ao, T * H);  // row-parallel: each rank's heads' share of the output
    if (sandwich) backend_.rmsnorm_fwd(ao, P.ln_ao, T, H, eps, w.tmp.t(), w.rstd_attn_out.f32());
    backend_.copy(w.x2.t(), in, T * H);
    backend_.add(w.x2.t(), w.tmp.t(), T * H);
  });
  timed("mlp_norm", pass, 0, [&] { backend_.rmsnorm_fwd(w.x2.t(), P.ln2, T, H, eps, w.h2.t(), w.rstd2.f32()); });
  if (P.router) {
    moe_forward(pass, P, w, out);
    return;
  }
  timed("mlp_fwd", pass, 2 * Td * H * F * (out || sandwich ? 3 : 2) + adapter_flops(l, {LT::gate, LT::up, LT::down}, T, 2), [&] {
    backend_.linear_fwd(w.h2.t(), T, H, P.wg, nullptr, F, w.g.t());
    backend_.linear_fwd(w.h2.t(), T, H, P.wu, nullptr, F, w.u.t());
    adapter_fwd(P, w, LT::gate, w.h2.ct(), T, w.g.t());
    adapter_fwd(P, w, LT::up, w.h2.ct(), T, w.u.t());
    gated_fwd(w.g.t(), w.u.t(), T * F, w.m.t());
    if (out || sandwich) {
      // A recompute runs the down projection too under sandwich norms: the MLP output's norm's
      // backward reads its input and rstd.
      const Tensor mo = sandwich ? w.mlp_out.t() : w.tmp.t();
      backend_.linear_fwd(w.m.t(), T, F, P.wd, nullptr, H, mo);
      adapter_fwd(P, w, LT::down, w.m.ct(), T, mo);
      tp_all_reduce(mo, T * H);  // row-parallel: each rank's MLP columns' share
      if (sandwich) backend_.rmsnorm_fwd(mo, P.ln_mo, T, H, eps, w.tmp.t(), w.rstd_mlp_out.f32());
      if (out) {
        backend_.copy(out, w.x2.t(), T * H);
        backend_.add(out, w.tmp.t(), T * H);
      }
    } else {
      // The recompute skips the down projection, but its adapter's backward needs u: computed here
      // (its update lands in tmp, which nothing reads after the o projection's residual add).
      adapter_fwd(P, w, LT::down, w.m.ct(), T, w.tmp.t());
    }
  });
}

namespace {
// f(expert, its first packed row, its rows) for each expert that received rows (offsets: E + 1).
template <class F>
void for_each_routed_expert(const std::vector<int32_t>& offsets, F&& f) {
  for (size_t e = 0; e + 1 < offsets.size(); ++e)
    if (const int64_t rows = offsets[e + 1] - offsets[e]; rows > 0)
      f(static_cast<int64_t>(e), int64_t{offsets[e]}, rows);
}
}  // namespace

void Engine::gated_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out) {
  if (model_.mlp == models::Mlp::geglu_tanh) backend_.geglu_fwd(gate, up, n, out);
  else backend_.swiglu_fwd(gate, up, n, out, swiglu_limit());
}

void Engine::gated_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup) {
  if (model_.mlp == models::Mlp::geglu_tanh) backend_.geglu_bwd(gate, up, dout, n, dgate, dup);
  else backend_.swiglu_bwd(gate, up, dout, n, dgate, dup, swiglu_limit());
}

std::vector<int32_t> Engine::host_expert_offsets(const LayerSet& w) const {
  std::vector<int32_t> off(static_cast<size_t>(model_.moe.experts + 1));
  backend_.download(off.data(), w.expert_offsets.data(), static_cast<int64_t>(off.size()) * 4);
  return off;
}

// Packed dispatch (docs/model.md "Layer kinds and experts"): route, gather each token's hidden
// state into its k experts' blocks, run each expert's SwiGLU MLP on its block, combine weighted,
// and add the shared experts' MLP of every token. The recompute (out null) runs the routed down
// projections too (the routing weights' gradients read them), not the shared one.
void Engine::moe_forward(const Pass& pass, const LayerPtrs& P, LayerSet& w, Tensor out) {
  const int64_t T = g_.chunk_len(pass.chunk), H = model_.hidden;
  const int64_t E = model_.moe.experts, K = model_.moe.experts_per_token, Fe = model_.moe.expert_ffn_hidden;
  const int64_t Fs = g_.fs;
  const int64_t stride = layout_.expert_stride();
  const bool renormalize = model_.moe.routing == models::Routing::softmax_topk;
  const double Td = static_cast<double>(T);
  const double shared_flops = 2 * Td * H * static_cast<double>(Fs) * (out ? 3 : 2);
  timed("mlp_fwd", pass, 2 * Td * H * E + 2 * Td * static_cast<double>(K) * H * Fe * 3 + shared_flops, [&] {
    backend_.linear_fwd(w.h2.t(), T, H, P.router, P.router_bias, E, w.router_logits.t());
    backend_.moe_route(w.router_logits.ct(), T, E, K, renormalize, w.route_experts.i32(), w.route_weights.f32(),
                       w.route_rows.i32(), w.expert_offsets.i32());
    backend_.moe_gather(w.h2.ct(), T, H, K, w.route_rows.i32(), w.expert_in.t());
    if (aux_loss_on() && pass.kind == PassKind::fill)
      backend_.moe_aux_statistics(w.router_logits.f32(), T, E, K, w.route_experts.i32(),
                                  static_cast<double*>(aux_counts_.data()), static_cast<double*>(aux_prob_sums_.data()));
    if (options_.record_routes && pass.kind == PassKind::fill) {
      auto& r = routes_.at(static_cast<size_t>(pass.layer));
      r.resize(static_cast<size_t>(g_.N * K));
      backend_.download(r.data() + g_.chunk_start(pass.chunk) * K, w.route_experts.data(), T * K * 4);
    }
    const std::vector<int32_t> off = host_expert_offsets(w);
    // An expert's biases (gpt-oss): gate, up and down from bias0 inside its stride.
    const int64_t bias0 = layout_.expert_bias();
    auto bias = [&](int64_t e, int64_t k) { return bias0 < 0 ? ConstTensor{} : P.experts.at(e * stride + bias0 + k); };
    for_each_routed_expert(off, [&](int64_t e, int64_t r0, int64_t n) {
      const ConstTensor x = w.expert_in.ct().at(r0 * H), ex = P.experts.at(e * stride);
      backend_.linear_fwd(x, n, H, ex, bias(e, 0), Fe, w.expert_gate.t().at(r0 * Fe));
      backend_.linear_fwd(x, n, H, ex.at(Fe * H), bias(e, Fe), Fe, w.expert_up.t().at(r0 * Fe));
    });
    gated_fwd(w.expert_gate.ct(), w.expert_up.ct(), T * K * Fe, w.expert_act.t());
    for_each_routed_expert(off, [&](int64_t e, int64_t r0, int64_t n) {
      backend_.linear_fwd(w.expert_act.ct().at(r0 * Fe), n, Fe, P.experts.at(e * stride + 2 * Fe * H), bias(e, 2 * Fe),
                          H, w.expert_out.t().at(r0 * H));
    });
    if (Fs > 0) {
      backend_.linear_fwd(w.h2.t(), T, H, P.ws_g, nullptr, Fs, w.shared_gate.t());
      backend_.linear_fwd(w.h2.t(), T, H, P.ws_u, nullptr, Fs, w.shared_up.t());
      gated_fwd(w.shared_gate.ct(), w.shared_up.ct(), T * Fs, w.shared_act.t());
    }
    if (out) {
      if (Fs > 0) backend_.linear_fwd(w.shared_act.t(), T, Fs, P.ws_d, nullptr, H, w.tmp.t());
      backend_.moe_combine(w.expert_out.ct(), T, H, K, w.route_rows.i32(), w.route_weights.f32(), w.tmp.t(), Fs > 0);
      backend_.copy(out, w.x2.t(), T * H);
      backend_.add(out, w.tmp.t(), T * H);
    }
  });
}

void Engine::moe_backward(const Pass& pass, const LayerPtrs& P, LayerSet& a, ConstTensor dy) {
  Work& w = *w_;
  const int64_t T = g_.chunk_len(pass.chunk), H = model_.hidden;
  const int64_t E = model_.moe.experts, K = model_.moe.experts_per_token, Fe = model_.moe.expert_ffn_hidden;
  const int64_t stride = layout_.expert_stride();
  const bool renormalize = model_.moe.routing == models::Routing::softmax_topk;
  const int64_t Fs = g_.fs;
  const double Td = static_cast<double>(T), bw = lora_ ? 2 : 4;
  timed("mlp_bwd", pass, bw * Td * H * E + bw * Td * static_cast<double>(K) * H * Fe * 3 + bw * Td * H * Fs * 3, [&] {
    // The combine: each routed row's output gradient and each route weight's.
    backend_.moe_combine_bwd(dy, a.expert_out.ct(), T, H, K, a.route_rows.i32(), a.route_weights.f32(),
                             w.d_expert_out.t(), w.d_route_weights.f32());
    const std::vector<int32_t> off = host_expert_offsets(a);
    // Expert e's gradient (gate, up, down from e x stride; none when frozen) at element k of it.
    auto d_expert = [&](int64_t e, int64_t k) { return P.d_experts ? P.d_experts.at(e * stride + k) : Tensor{}; };
    const int64_t bias0 = layout_.expert_bias();  // its biases' gradients, with the biases
    auto d_bias = [&](int64_t e, int64_t k) { return bias0 < 0 ? Tensor{} : d_expert(e, bias0 + k); };
    for_each_routed_expert(off, [&](int64_t e, int64_t r0, int64_t n) {
      backend_.linear_bwd(a.expert_act.ct().at(r0 * Fe), n, Fe, P.experts.at(e * stride + 2 * Fe * H), H,
                          w.d_expert_out.ct().at(r0 * H), w.d_expert_act.t().at(r0 * Fe), false,
                          d_expert(e, 2 * Fe * H), d_bias(e, 2 * Fe));
    });
    gated_bwd(a.expert_gate.ct(), a.expert_up.ct(), w.d_expert_act.ct(), T * K * Fe, w.d_expert_gate.t(),
              w.d_expert_up.t());
    for_each_routed_expert(off, [&](int64_t e, int64_t r0, int64_t n) {
      const ConstTensor x = a.expert_in.ct().at(r0 * H), ex = P.experts.at(e * stride);
      const Tensor dx = w.d_expert_in.t().at(r0 * H);
      backend_.linear_bwd(x, n, H, ex, Fe, w.d_expert_gate.ct().at(r0 * Fe), dx, false, d_expert(e, 0), d_bias(e, 0));
      backend_.linear_bwd(x, n, H, ex.at(Fe * H), Fe, w.d_expert_up.ct().at(r0 * Fe), dx, true, d_expert(e, Fe * H),
                          d_bias(e, Fe));
    });
    // The gather's backward (each token's k rows summed), then the router's.
    backend_.moe_combine(w.d_expert_in.ct(), T, H, K, a.route_rows.i32(), nullptr, w.dh2.t(), false);
    backend_.moe_route_bwd(a.router_logits.ct(), T, E, K, renormalize, a.route_experts.i32(), a.route_weights.f32(),
                           w.d_route_weights.f32(), w.d_router_logits.t());
    if (aux_loss_on())
      backend_.moe_aux_grad(a.router_logits.f32(), T, E, aux_shares_.f32(), aux_scale_, w.d_router_logits.f32());
    backend_.linear_bwd(a.h2.ct(), T, H, P.router, E, w.d_router_logits.ct(), w.dh2.t(), true, P.d_router,
                        P.d_router_bias);
    if (Fs > 0) {  // the shared experts, as a dense MLP, their input gradient added
      backend_.linear_bwd(a.shared_act.t(), T, Fs, P.ws_d, H, dy, w.d_shared_act.t(), false, P.d_ws_d, nullptr);
      gated_bwd(a.shared_gate.ct(), a.shared_up.ct(), w.d_shared_act.ct(), T * Fs, w.d_shared_gate.t(),
                w.d_shared_up.t());
      backend_.linear_bwd(a.h2.t(), T, H, P.ws_g, Fs, w.d_shared_gate.t(), w.dh2.t(), true, P.d_ws_g, nullptr);
      backend_.linear_bwd(a.h2.t(), T, H, P.ws_u, Fs, w.d_shared_up.t(), w.dh2.t(), true, P.d_ws_u, nullptr);
    }
  });
}

// The load-balancing loss over the whole step (Hugging Face's load_balancing_loss_func on the
// concatenated logits of every MoE layer): stage 1 routed every token of every layer, so the shares
// f_e (constants of the gradient, as the one-hot top-k is) are known before stage 2 recomputes
// them; the loss term is coef E sum_e f_e P_e, its gradient in each router's backward (moe_aux_grad).
void Engine::aux_loss_from_statistics() {
  const int64_t E = model_.moe.experts;
  std::vector<double> counts(static_cast<size_t>(E)), probs(static_cast<size_t>(E));
  backend_.download(counts.data(), aux_counts_.data(), E * 8);
  backend_.download(probs.data(), aux_prob_sums_.data(), E * 8);
  const double M = static_cast<double>(g_.Lmoe) * static_cast<double>(g_.N);
  std::vector<float> shares(static_cast<size_t>(E));
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double f = counts[static_cast<size_t>(e)] / M;
    shares[static_cast<size_t>(e)] = static_cast<float>(f);
    sum += f * probs[static_cast<size_t>(e)] / M;
  }
  backend_.upload(aux_shares_.data(), shares.data(), E * 4);
  aux_loss_ = config_.router_aux_loss_coef * static_cast<double>(E) * sum;
  aux_scale_ = static_cast<float>(config_.router_aux_loss_coef * static_cast<double>(E) / M);
}

void Engine::layer_backward(const Pass& pass, PassPages& pages, ConstTensor in, ConstTensor dy, Tensor dx) {
  // Recompute from the checkpoint, unless the stage-2 forward kept this layer's activations.
  if (pass.layer < recomputed_) layer_forward(pass, -1, pages, in, Tensor{});
  const int64_t T = g_.chunk_len(pass.chunk), pos0 = g_.chunk_start(pass.chunk);
  const int64_t H = model_.hidden, qd = model_.q_dim(), kvd = model_.kv_dim(), F = model_.ffn_hidden;
  const LayerPtrs P = layer_ptrs(pass.layer);
  Work& w = *w_;
  LayerSet& a_ = layer_set(pass.layer);
  const double Td = static_cast<double>(T);
  // A frozen base (LoRA) computes only the input gradients: 2 FLOPs per MAC, not 4.
  const double bw = lora_ ? 2 : 4;
  const int64_t l = pass.layer;
  using LT = LoraTarget;
  // The gradient of a sublayer's output (the attention's, the MLP's) from d, the gradient after its
  // sandwich norm (Gemma): into d_sublayer_out, adding the norm weight's gradient; d itself without
  // sandwich norms.
  auto sublayer_out_grad = [&](Buffer& x, ConstTensor norm, Buffer& rstd, ConstTensor d, Tensor d_norm) -> ConstTensor {
    if (!model_.sandwich_norms) return d;
    backend_.fill_zero(w.d_sublayer_out.data(), w.d_sublayer_out.bytes());
    backend_.rmsnorm_bwd(x.t(), norm, rstd.f32(), d, T, H, w.d_sublayer_out.t(), d_norm);
    return w.d_sublayer_out.ct();
  };
  if (P.router) {
    moe_backward(pass, P, a_, dy);
  } else {
    timed("mlp_bwd", pass, bw * Td * H * F * 3 + adapter_flops(l, {LT::gate, LT::up, LT::down}, T, 4), [&] {
      const ConstTensor dmo = sublayer_out_grad(a_.mlp_out, P.ln_mo, a_.rstd_mlp_out, dy, P.d_ln_mo);
      backend_.linear_bwd(a_.m.t(), T, F, P.wd, H, dmo, w.dm.t(), false, P.d_wd, nullptr);
      adapter_bwd(P, a_, LT::down, a_.m.ct(), T, dmo, w.dm.t());
      gated_bwd(a_.g.t(), a_.u.t(), w.dm.t(), T * F, w.dg.t(), w.du.t());
      backend_.linear_bwd(a_.h2.t(), T, H, P.wg, F, w.dg.t(), w.dh2.t(), false, P.d_wg, nullptr);
      adapter_bwd(P, a_, LT::gate, a_.h2.ct(), T, w.dg.ct(), w.dh2.t());
      backend_.linear_bwd(a_.h2.t(), T, H, P.wu, F, w.du.t(), w.dh2.t(), true, P.d_wu, nullptr);
      adapter_bwd(P, a_, LT::up, a_.h2.ct(), T, w.du.ct(), w.dh2.t());
      tp_all_reduce(w.dh2.t(), T * H);  // column-parallel: the input gradient summed over the ranks
    });
  }
  timed("mlp_norm_bwd", pass, 0, [&] {
    backend_.copy(w.dx2.t(), dy, T * H);  // residual
    backend_.rmsnorm_bwd(a_.x2.t(), P.ln2, a_.rstd2.f32(), w.dh2.t(), T, H, w.dx2.t(), P.d_ln2);
  });
  timed("o_proj_bwd", pass, bw * Td * qd * H + adapter_flops(l, {LT::o}, T, 4), [&] {
    const ConstTensor dao = sublayer_out_grad(a_.attn_out, P.ln_ao, a_.rstd_attn_out, w.dx2.ct(), P.d_ln_ao);
    backend_.linear_bwd(a_.o.t(), T, qd, P.wo, H, dao, w.dout.t(), false, P.d_wo, P.d_bo);
    adapter_bwd(P, a_, LT::o, a_.o.ct(), T, dao, w.dout.t());
  });
  const PagedAttention a = attention_args(pass, pages);
  timed("attention_bwd", pass, 10.0 * model_.head_dim * model_.q_heads * attention_pairs(a), [&] {
    if (P.d_sinks.data)
      backend_.attention_sinks_bwd(P.sinks, T, model_.q_heads, model_.head_dim, a_.o.t(), a_.lse.f32(), w.dout.t(),
                                   P.d_sinks);
    backend_.attention_bwd(a, a_.o.t(), a_.lse.f32(), w.dout.t(), w.dq.t(), w.dk.t(), w.dv.t(),
                           pages.prefix_dkv);
  });
  // What later chunks accumulated into this chunk's gradient pages joins the own queries' part.
  timed("dkv_own", pass, 0,
        [&] { backend_.add_from_grad_pages(pages.own_dkv, T, kvd, g_.p, w.dk.t(), w.dv.t(), grad_page_dtype_); });
  timed("rope_bwd", pass, 0, [&] {
    backend_.rope_bwd(w.dq.t(), T, model_.q_heads, model_.head_dim, pos0, rope_);
    backend_.rope_bwd(w.dk.t(), T, model_.kv_heads, model_.head_dim, pos0, rope_);
  });
  const bool qkn = model_.qk_norm;
  if (qkn)
    timed("qk_norm_bwd", pass, 0, [&] {
      backend_.fill_zero(w.dq_pre.data(), w.dq_pre.bytes());
      backend_.fill_zero(w.dk_pre.data(), w.dk_pre.bytes());
      backend_.rmsnorm_bwd(a_.q_pre.t(), P.qn, a_.rstd_q.f32(), w.dq.t(), T * model_.q_heads, model_.head_dim,
                           w.dq_pre.t(), P.d_qn);
      backend_.rmsnorm_bwd(a_.k_pre.t(), P.kn, a_.rstd_k.f32(), w.dk.t(), T * model_.kv_heads, model_.head_dim,
                           w.dk_pre.t(), P.d_kn);
    });
  timed("qkv_proj_bwd", pass, bw * Td * H * (qd + 2 * kvd) + adapter_flops(l, {LT::q, LT::k, LT::v}, T, 4), [&] {
    const ConstTensor dq = qkn ? w.dq_pre.ct() : w.dq.ct(), dk = qkn ? w.dk_pre.ct() : w.dk.ct();
    backend_.linear_bwd(a_.h1.t(), T, H, P.wq, qd, dq, w.dh1.t(), false, P.d_wq, P.d_bq);
    adapter_bwd(P, a_, LT::q, a_.h1.ct(), T, dq, w.dh1.t());
    backend_.linear_bwd(a_.h1.t(), T, H, P.wk, kvd, dk, w.dh1.t(), true, P.d_wk, P.d_bk);
    adapter_bwd(P, a_, LT::k, a_.h1.ct(), T, dk, w.dh1.t());
    backend_.linear_bwd(a_.h1.t(), T, H, P.wv, kvd, w.dv.t(), w.dh1.t(), true, P.d_wv, P.d_bv);
    adapter_bwd(P, a_, LT::v, a_.h1.ct(), T, w.dv.ct(), w.dh1.t());
    tp_all_reduce(w.dh1.t(), T * H);
  });
  timed("attn_norm_bwd", pass, 0, [&] {
    backend_.copy(dx, w.dx2.t(), T * H);
    backend_.rmsnorm_bwd(in, P.ln1, a_.rstd1.f32(), w.dh1.t(), T, H, dx, P.d_ln1);
  });
}

void Engine::head_forward_backward(int64_t c, ConstTensor x_last, Tensor dy) {
  const int64_t T = g_.chunk_len(c), s = g_.chunk_start(c), H = model_.hidden, V = model_.vocab;
  Work& w = *w_;
  std::vector<int32_t> targets(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    targets[static_cast<size_t>(t)] = s + t + 1 < g_.N ? tokens_[static_cast<size_t>(s + t + 1)] : -1;
  const float inv = 1.0f / static_cast<float>(g_.N - 1);
  const ConstTensor head = params_.ct().at(layout_.lm_head());
  // A frozen LM head and final norm (LoRA): no weight gradients, the head's input gradient only.
  const Tensor d_head = lora_ ? Tensor{} : grads_.t().at(layout_.lm_head());
  const Tensor d_final_norm = lora_ ? Tensor{} : grads_.t().at(layout_.final_norm());
  if (tp_ > 1)  // the vocabulary-parallel loss: targets as this rank's columns (-2: another rank's)
    for (int32_t& t : targets)
      if (t >= 0) t = local_vocab_id(t, -2);
  timed("lm_head", Op::lm_head, 2, c, (lora_ ? 4.0 : 6.0) * T * H * V, [&] {
    backend_.upload(w.targets.data(), targets.data(), T * 4);
    backend_.rmsnorm_fwd(x_last, params_.ct().at(layout_.final_norm()), T, H, static_cast<float>(model_.norm_eps),
                         w.hf.t(), w.rstdf.f32());
    // Row tiles: logits of a tile, the loss and its gradient (in place when fused; the framework
    // path keeps the logits, an upcast copy and a separate gradient), then the tile's share of dW
    // (accumulated) and of d(final norm output) (its own rows).
    for (int64_t r0 = 0; r0 < T; r0 += head_rows_) {
      const int64_t rows = std::min(head_rows_, T - r0);
      const ConstTensor hf = w.hf.ct().at(r0 * H);
      backend_.linear_fwd(hf, rows, H, head, nullptr, V, w.logits.t());
      ConstTensor logits = w.logits.ct();
      Tensor grad = w.logits.t();
      if (!fused_loss_) {
        if (w.logits_upcast.data()) {
          backend_.copy(w.logits_upcast.t(), logits, rows * V);
          logits = w.logits_upcast.ct();
        }
        grad = w.logits_grad.t();
      }
      if (tp_ == 1) {
        // The tile's loss stays with the backend (chunk c's slot): no read-back per tile.
        backend_.cross_entropy_acc(logits, rows, V, w.targets.i32() + r0, inv, grad, c);
      } else {
        tp_cross_entropy(logits, rows, V, r0, inv, grad, c);
      }
      backend_.linear_bwd(hf, rows, H, head, V, grad, w.dhf.t().at(r0 * H), false, d_head, nullptr);
    }
    tp_all_reduce(w.dhf.t(), T * H);  // the vocabulary-parallel head's input gradient
    backend_.fill_zero(dy.data, T * H * dtype_bytes(dy.dtype));
    backend_.rmsnorm_bwd(x_last, params_.ct().at(layout_.final_norm()), w.rstdf.f32(), w.dhf.ct(), T, H, dy,
                         d_final_norm);
  });
}

// One tile of the vocabulary-parallel cross-entropy: each rank's per-row max, sum of exponentials
// and target logit meet in one all-reduce (each rank writes its own block of the statistics, zero
// elsewhere); the backend combines them into each row's max and sum over the whole vocabulary (in
// place) and adds the tile's loss (the same on every rank) to chunk c's loss slot, then writes the
// gradient of this rank's columns. Nothing comes back to the host: the losses are read once per
// step (take_losses), as without tensor parallelism.
void Engine::tp_cross_entropy(ConstTensor logits, int64_t rows, int64_t V, int64_t r0, float scale, Tensor grad,
                              int64_t c) {
  const Work& w = *w_;
  const int64_t n = tp_ * rows * 3;
  const int32_t* targets = w.targets.i32() + r0;
  backend_.fill_zero(tp_stats_.data(), n * 4);
  backend_.cross_entropy_shard_stats(logits, rows, V, targets, tp_stats_.f32() + tp_rank_ * rows * 3);
  tp_all_reduce(tp_stats_.t(), n);
  backend_.cross_entropy_shard_combine(tp_stats_.f32(), tp_, rows, targets, c);
  backend_.cross_entropy_shard_grad(logits, rows, V, targets, tp_stats_.f32(), scale, grad);
}

void Engine::report(const Pass& pass) {
  const double units = pass.kind == PassKind::fill ? 1.0 : pass.kind == PassKind::recompute ? 1.0 : 3.5;
  work_done_ += units * chunk_work_[static_cast<size_t>(pass.chunk)] / static_cast<double>(g_.L);
  if (!options_.progress) return;
  Progress p;
  p.stage = pass.stage();
  p.chunk = pass.chunk;
  p.chunks = g_.n;
  p.fraction = std::min(1.0, work_done_ / work_total_);
  p.elapsed_s = static_cast<double>(steady_now_ns() - step_start_ns_) * 1e-9;
  p.eta_s = p.fraction > 0 ? p.elapsed_s * (1 - p.fraction) / p.fraction : 0;
  p.tokens_per_s = p.elapsed_s > 0 ? p.fraction * static_cast<double>(g_.N) / p.elapsed_s : 0;
  p.device_bytes = account_.in_use(Tier::device);
  options_.progress(p);
}

StepResult Engine::step(const std::vector<int32_t>& tokens) {
  if (static_cast<int64_t>(tokens.size()) != g_.N)
    throw Error("tokens", "", "got " + std::to_string(tokens.size()) + " tokens for a context of " +
                                  std::to_string(g_.N));
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= full_model_.vocab)
      throw Error("tokens", "", "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                                    " is out of range", "ids must be < vocab " + std::to_string(full_model_.vocab));
  tokens_ = tokens;
  step_start_ns_ = steady_now_ns();
  const int64_t syncs_before = backend_.host_syncs();
  optimizer_h2d_bytes_ = optimizer_d2h_bytes_ = 0;
  allreduce_bytes_ = 0;
  dp_clock_.clear();
  tp_clock_.clear();
  tp_allreduces_ = tp_allreduce_bytes_ = 0;
  work_done_ = 0;
  work_total_ = 0;
  for (double wk : chunk_work_) work_total_ += 5.5 * wk;
  log_.reset(g_.n, g_.L);
  recall_.clear();
  // The page store's set-up for the step (its first step allocates and zeroes tables on the
  // device), tagged with the step's first pass like that pass's own page work.
  {
    const TagScope tag(options_.tagger, 1, 0, 0, Op::layer_fwd, "pages");
    store_->begin_step([this](const Pass& p) -> const std::vector<int64_t>* {
      if (local_layer(p.layer))
        return &reach_[static_cast<size_t>(local_class_[static_cast<size_t>(p.layer)])][static_cast<size_t>(p.chunk)];
      if (p.kind == PassKind::fill && (!g_.sparse || g_.prefix_pages(p.chunk) <= g_.B))
        return &dense_prefix_[static_cast<size_t>(p.chunk)];
      if (!log_.recorded(p.chunk, p.layer)) return nullptr;
      return &log_.at(p.chunk, p.layer).union_pages;
    });
  }
  const auto& passes = store_->passes();
  const int64_t H = model_.hidden, Cm = g_.Cm;
  Work& w = *w_;
  size_t pi = 0;
  auto next = [&](PassKind kind, int64_t c, int64_t l) -> const Pass& {
    const Pass& p = passes[pi];
    OOMB_ASSERT(p.kind == kind && p.chunk == c && p.layer == l, "pass order");
    return p;
  };
  // A pass's page work (slot allocation, gradient pages zeroed, copy-in waits; write-back and
  // release), tagged with the pass (its copies carry their own pass's tag, see offload.cpp).
  auto acquire = [&](const Pass& p) -> PassPages& {
    const TagScope tag(options_.tagger, p.stage(), p.chunk, p.layer, pass_op(p.kind), "pages");
    return store_->acquire(static_cast<int64_t>(pi));
  };
  auto release = [&](const Pass& p) {
    const TagScope tag(options_.tagger, p.stage(), p.chunk, p.layer, pass_op(p.kind), "pages");
    store_->release(static_cast<int64_t>(pi));
  };

  // Stage 1: forward fill, chunks in order, no gradients.
  enter(StepPhase::fill, 1, 0, -1, Op::embedding);
  if (aux_loss_on()) {
    backend_.fill_zero(aux_counts_.data(), aux_counts_.bytes());
    backend_.fill_zero(aux_prob_sums_.data(), aux_prob_sums_.bytes());
  }
  for (int64_t c = 0; c < g_.n; ++c) {
    Tensor x = w.x.t();
    Tensor y = w.y.t();
    embed(c, 1, x);
    for (int64_t l = 0; l < g_.L; ++l, ++pi) {
      const Pass& p = next(PassKind::fill, c, l);
      PassPages& pages = acquire(p);
      layer_forward(p, static_cast<int64_t>(pi), pages, x, y);
      release(p);
      std::swap(x, y);
      report(p);
    }
  }

  if (aux_loss_on()) aux_loss_from_statistics();
  // Stage 2: chunks in reverse; recompute keeping each layer's input, then backward layer by layer.
  for (int64_t c = g_.n - 1; c >= 0; --c) {
    enter(StepPhase::recompute, 2, c, -1, Op::embedding);
    auto ckpt = [&](int64_t l) { return w.ckpt.t().at(l * Cm * H); };
    embed(c, 2, ckpt(0));
    for (int64_t l = 0; l < g_.L; ++l, ++pi) {
      const Pass& p = next(PassKind::recompute, c, l);
      PassPages& pages = acquire(p);
      layer_forward(p, static_cast<int64_t>(pi), pages, ckpt(l), l + 1 < g_.L ? ckpt(l + 1) : w.x.t());
      release(p);
      report(p);
    }
    enter(StepPhase::loss, 2, c, -1, Op::lm_head);
    // Data parallelism, on a step that updates: the last chunk's backward makes each gradient final
    // and its bucket is all-reduced at once (overlapping what follows where the transport can).
    const bool buckets = c == 0 && reduces_gradients();
    if (buckets) begin_gradient_buckets();
    Tensor dy = w.dy.t();
    Tensor dx = w.dx.t();
    head_forward_backward(c, w.x.ct(), dy);
    if (buckets) gradient_buckets_final(0);
    enter(StepPhase::backward, 2, c, g_.L - 1, Op::layer_bwd);
    for (int64_t l = g_.L - 1; l >= 0; --l, ++pi) {
      const Pass& p = next(PassKind::backward, c, l);
      PassPages& pages = acquire(p);
      layer_backward(p, pages, ckpt(l), dy, dx);
      release(p);
      std::swap(dy, dx);
      report(p);
      if (buckets) gradient_buckets_final(g_.L - l);
    }
    if (!lora_)  // a frozen embedding (LoRA) has no gradient
      timed("embedding_bwd", Op::embedding_bwd, 2, c, 0, [&] {
        backend_.embedding_bwd(w.ids.i32(), g_.chunk_len(c), dy, H, grads_.t().at(layout_.embed()));
      });
    if (buckets) gradient_buckets_final(g_.L + 1);
  }
  OOMB_ASSERT(pi == passes.size());
  // The loss: the chunks' sums (tensor parallelism: the vocabulary-parallel tiles' too), read back
  // once, added in the order stage 2 ran them.
  const std::vector<double> chunk_loss = backend_.take_losses(g_.n);
  double loss = 0;
  for (int64_t c = g_.n - 1; c >= 0; --c) loss += chunk_loss[static_cast<size_t>(c)] / static_cast<double>(g_.N - 1);
  if (aux_loss_on()) loss += aux_loss_;

  // A non-finite loss poisons the gradients and, through the optimizer, every later step: stop.
  if (!std::isfinite(loss))
    throw Error("run", "loss", std::string("is ") + (std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                                   std::to_string(steps_ + 1) + ": the run diverged; nothing more is computed or written",
                "finite --weights, a smaller --init-std, or a lower --lr");
  enter(StepPhase::optimizer, 2, -1, -1, Op::optimizer_step);
  if (config_.optimizer != step::Optimizer::none && ++accumulated_ >= options_.adamw.grad_accum)
    optimizer_step();

  // The host runs layer passes ahead of the device: the step ends when the device's work and every
  // copy (with its trace report) did.
  store_->finish_step();
  const int64_t step_end_ns = steady_now_ns();
  recorder_.phase(traces::kStepPhase, step_start_ns_, step_end_ns);
  resolve_collectives();  // after the step's end: the ranks' exchange is not part of the step
  StepResult r;
  r.loss = loss;
  r.seconds = static_cast<double>(step_end_ns - step_start_ns_) * 1e-9;
  ++steps_;
  total_s_ += r.seconds;
  Measured& m = measured_;
  m.kv_dtype = dtype_of(kv_dtype_);
  m.kv_grad_dtype = dtype_of(grad_page_dtype_);
  m.kv_page_bytes = store_->kv_page_bytes();
  m.grad_page_bytes = store_->grad_page_bytes();
  m.kv_pool_pages = store_->kv_pool().capacity();
  m.grad_pool_pages = store_->grad_pool().capacity();
  m.kv_pool_high_water_pages = store_->kv_pool().high_water();
  m.grad_pool_high_water_pages = store_->grad_pool().high_water();
  if (const PagePool* lk = store_->local_kv_pool()) {
    m.local_kv_pool_pages = lk->capacity();
    m.local_kv_high_water_pages = lk->high_water();
    m.local_grad_pool_pages = store_->local_grad_pool()->capacity();
    m.local_grad_high_water_pages = store_->local_grad_pool()->high_water();
  }
  m.host_kv_pages = store_->host_kv_pool() ? store_->host_kv_pool()->capacity() : 0;
  m.host_grad_pages = store_->host_grad_pool() ? store_->host_grad_pool()->capacity() : 0;
  m.peak_device_bytes = account_.peak(Tier::device);
  m.peak_host_bytes = account_.peak(Tier::host);
  m.device_breakdown_bytes = account_.peak_by_category(Tier::device);
  m.row_high_water_bytes = account_.row_high_water(Tier::device);
  m.phase_high_water_bytes = account_.phase_high_water();
  m.param_dtype = dtype_of(param_dtype_);
  m.param_grad_dtype = dtype_of(grad_dtype_);
  m.activation_dtype = dtype_of(act_dtype_);
  m.loss_dtype = dtype_of(loss_dtype_);
  m.backend = backend_.name();
  m.buffers = rows_;
  m.notes = notes_;
  m.h2d_bytes = store_->counters().h2d_bytes + optimizer_h2d_bytes_;
  m.d2h_bytes = store_->counters().d2h_bytes + optimizer_d2h_bytes_;
  m.copy_regions = store_->counters().regions;
  m.host_syncs = backend_.host_syncs() - syncs_before;
  m.rank = options_.comm ? options_.comm->rank() : 0;
  m.world = options_.comm ? options_.comm->size() : 1;
  m.comm = options_.comm ? options_.comm->name() : "self";
  m.allreduce_bytes = allreduce_bytes_;
  m.allreduce_s = dp_clock_.total_s();
  m.allreduce_wait_s = dp_clock_.wait_s();
  m.allreduce_transfer_s = dp_clock_.transfer_s();
  m.collective_split = dp_clock_.split() && tp_clock_.split();
  m.tp = tp_;
  m.tp_rank = tp_rank_;
  m.tp_allreduces = tp_allreduces_;
  m.tp_allreduce_bytes = tp_allreduce_bytes_;
  m.tp_allreduce_s = tp_clock_.total_s();
  m.tp_allreduce_wait_s = tp_clock_.wait_s();
  m.tp_allreduce_transfer_s = tp_clock_.transfer_s();
  m.step_times_s.push_back(r.seconds);
  m.union_pages.clear();
  for (int64_t c = 0; c < g_.n; ++c)
    for (int64_t l = 0; l < g_.L; ++l)
      if (!local_layer(l))  // what the selections of the global layers took (a local layer's is its reach)
        m.union_pages.push_back({c, l, static_cast<int64_t>(log_.at(c, l).union_pages.size())});
  m.recall = recall_;
  m.steps = steps_;
  m.step_s = total_s_ / static_cast<double>(steps_);
  m.tokens_per_s = total_s_ > 0 ? static_cast<double>(g_.N * steps_) / total_s_ : 0;
  m.loss = loss;
  return r;
}

void Engine::optimizer_step() {
  const AdamWOptions& o = options_.adamw;
  Buffer& trained = lora_ ? adapters_ : params_;
  const bool host = config_.optimizer == step::Optimizer::host;
  // The elements this rank updates: all, or (ZeRO-1) its shard of the padded buffers.
  const int64_t n = sharded_ ? zero_.shard : lora_ ? lora_layout_.total() : layout_.total();
  const int64_t first = sharded_ ? dp_comm_->rank() * zero_.shard : 0;
  const int64_t gb = dtype_bytes(grads_.dtype()), wb = dtype_bytes(trained.dtype());
  // The host optimizer's round trip: the gradients out to the host, the update there, the updated
  // working weights back in (the copies the simulator prices after the last backward).
  auto copy = [&](CopyDir dir, void* dst, const void* src, int64_t bytes) {
    const TagScope tag(options_.tagger, 2, -1, -1, Op::optimizer_step, dir == CopyDir::h2d ? "weights_in" : "gradients_out");
    CopyRequest r;
    r.dir = dir;
    r.regions.push_back({dst, src, bytes});
    backend_.wait(backend_.copy_async(std::move(r)));
    (dir == CopyDir::h2d ? optimizer_h2d_bytes_ : optimizer_d2h_bytes_) += bytes;
  };
  // A data-parallel collective, timed as the replicas meet it (resolve_collectives).
  auto collective = [&](Op op, int64_t bytes, auto&& f) {
    const int64_t t0 = steady_now_ns();
    timed(to_string(op), op, 2, -1, 0, f);
    allreduce_bytes_ += bytes;
    dp_clock_.record(t0, steady_now_ns(), bytes, {op, 2, -1, -1});
  };
  // Data parallelism: every replica's gradients summed (their mean below) before the update, so
  // that every replica applies the same one.
  // (Tensor parallelism: the ranks of one group hold different shards and the same replicated
  // norms' gradients; nothing to sum between them.)
  const int world = dp_comm_ ? dp_comm_->size() : 1;  // the replicas
  if (world > 1 && !sharded_) {
    // Every bucket was started in the last chunk's backward (begin_gradient_buckets); the update
    // waits for them (NCCL: the compute stream waits for their stream).
    OOMB_ASSERT(next_bucket_ == buckets_.size(), "gradient buckets not all-reduced before the update");
    dp_comm_->wait_all();
    dp_staging_ = Buffer();
  }
  if (sharded_) {
    // ZeRO-1: this rank's shard of the gradients summed over the replicas (MPI stages bf16 in fp32,
    // under the table's row, for the update only).
    Buffer staging;
    if (grads_.dtype() == DType::bf16 && dp_comm_->stages_bf16_in_fp32())
      staging = row_tensor(step::row::kGradientAllreduceStaging, Tier::host, "staging");
    collective(Op::gradient_reduce_scatter, grads_.bytes(),
               [&] { dp_comm_->reduce_scatter_sum(grads_.t(), zero_.shard, staging.f32()); });
  }
  const Tensor shard_grads = grads_.t().at(first);
  if (host) copy(CopyDir::d2h, host_grads_.data(), shard_grads.data, n * gb);
  const Tensor grads = host ? host_grads_.t() : shard_grads;
  const int64_t contributions = accumulated_ * world;
  const int64_t step_no = ++adam_steps_;
  // Elements [from, from + count) of the update; the weights' view starts at `from`.
  auto update = [&](Tensor w, int64_t from, int64_t count) {
    // The mean over the accumulated steps and the replicas, taken as the update reads the gradient.
    backend_.adamw(w, master_.data() ? master_.f32() + from : nullptr, grads.at(from), adam_m_.f32() + from,
                   adam_v_.f32() + from, static_cast<const uint8_t*>(decay_mask_.data()) + from, count, o.lr, o.beta1,
                   o.beta2, o.eps, o.weight_decay, step_no,
                   1.0f / static_cast<float>(std::max<int64_t>(1, contributions)));
  };
  timed("adamw", Op::optimizer_step, 2, -1, 12.0 * static_cast<double>(n), [&] {
    if (host) update(host_weights_.t(), 0, n);
    else for_each_trained_piece(first, n, update);  // a mixture of experts: its two weight rows in turn
  });
  if (host)
    for_each_trained_piece(first, n, [&](Tensor dst, int64_t at, int64_t count) {
      copy(CopyDir::h2d, dst.data, static_cast<const char*>(host_weights_.data()) + at * wb, count * wb);
    });
  // ZeRO-1: every replica's updated shard to every replica.
  if (sharded_)
    collective(Op::weight_all_gather, trained.bytes(), [&] { dp_comm_->all_gather(trained.t(), zero_.shard); });
  {
    const TagScope tag(options_.tagger, 2, -1, -1, Op::optimizer_step, "zero_gradients");
    zero_gradients();
  }
  accumulated_ = 0;
}

void Engine::zero_gradients() { backend_.fill_zero(grads_.data(), grads_.bytes()); }

void Engine::download_f32(ConstTensor src, int64_t n, float* dst) const {
  if (src.dtype == DType::f32) {
    backend_.download(dst, src.data, n * 4);
    return;
  }
  std::vector<uint16_t> b(static_cast<size_t>(n));
  backend_.download(b.data(), src.data, n * 2);
  bf16_to_f32(b.data(), dst, n);
}

ParamTensors Engine::gather_shards(const ParamTensors& local) const {
  ParamTensors full = zero_params(full_model_);
  unshard_params_into(local, tp_rank_, tp_rank_ == 0, full);  // the norms: rank 0's (the same on every rank)
  sum_in_double(*tp_comm_, full.data);
  return full;
}

Gradients Engine::gradients() const {
  Gradients g = lora_ ? zero_params(lora_layout_) : zero_params(model_);
  download_f32(grads_.ct(), g.layout.total(), g.data.data());
  // The replicas' sum (of this rank's shard under tensor parallelism).
  if (dp_comm_ && dp_comm_->size() > 1) sum_in_double(*dp_comm_, g.data);
  return tp_ > 1 ? gather_shards(g) : g;
}

ParamTensors Engine::adapters() const {
  if (!lora_) return {};
  ParamTensors a = zero_params(lora_layout_);
  download_f32(adapters_.ct(), a.layout.total(), a.data.data());
  return a;
}

Weights Engine::weights() const {
  Weights w = zero_params(model_);
  // The working weights as stored (an optimizer's fp32 master weights are what they round from).
  if (master_.data() && sharded_) {
    // ZeRO-1: each replica's master shard in its place, the replicas' summed (the others are zero).
    std::vector<float> all(static_cast<size_t>(zero_.padded), 0.0f);
    download_f32(master_.ct(), zero_.shard, all.data() + dp_comm_->rank() * zero_.shard);
    sum_in_double(*dp_comm_, all);
    std::copy_n(all.begin(), layout_.total(), w.data.begin());
  } else if (master_.data()) {
    download_f32(master_.ct(), layout_.total(), w.data.data());
  } else {
    for_each_weight_piece(0, layout_.total(),
                          [&](Tensor src, int64_t at, int64_t count) { download_f32(src, count, w.data.data() + at); });
  }
  return tp_ > 1 ? gather_shards(w) : w;
}

traces::Trace Engine::trace(const std::string& command) const {
  traces::Metadata md;
  // Compute times are host wall-clock around each op: true times on the cpu backend; on the cuda
  // backend they are enqueue times until a CUPTI collector supplies device times ("cuda-cupti").
  md.source = backend_.name() == "cuda" ? "cuda" : "cpu";
  md.device = backend_.name() == "cuda" ? "cuda (host-timed)" : backend_.name() + " (reference backend)";
  md.command = command;
  md.time = utc_timestamp();
  md.extra = step::to_json(measured_);
  return recorder_.finish(std::move(md));
}

traces::Trace Engine::device_timed_trace(traces::Trace device, const std::string& command) const {
  OOMB_ASSERT(recorder_.enabled(), "device_timed_trace needs EngineOptions::record_trace");
  traces::Trace host = trace(command);
  traces::Trace t = std::move(device);
  const std::string source = t.metadata.source, name = t.metadata.device;
  const int64_t dropped = t.metadata.dropped_records;
  const Json device_extra = t.metadata.extra;
  const traces::Detail detail = t.metadata.detail;
  t.metadata = std::move(host.metadata);
  t.metadata.source = source;
  if (!name.empty()) t.metadata.device = name;
  t.metadata.dropped_records = dropped;
  t.metadata.detail = detail;
  if (device_extra.is_object())
    for (const auto& [k, v] : device_extra.items()) t.metadata.extra[k] = v;
  t.memory = std::move(host.memory);
  // The intervals of the steps the device trace holds work of (host clock, each ending when the
  // device finished the step's work); steps left out of the decoding (a warm-up) stay out.
  std::vector<traces::Event> steps;
  for (traces::Event& ev : host.events) {
    if (ev.kind != traces::EventKind::phase || ev.name != traces::kStepPhase) continue;
    const bool has_work = std::any_of(t.events.begin(), t.events.end(), [&](const traces::Event& d) {
      return d.kind != traces::EventKind::phase && d.start_ns >= ev.start_ns && d.start_ns < ev.end_ns;
    });
    if (has_work) steps.push_back(std::move(ev));
  }
  t.events.insert(t.events.end(), std::make_move_iterator(steps.begin()), std::make_move_iterator(steps.end()));
  std::stable_sort(t.events.begin(), t.events.end(),
                   [](const traces::Event& a, const traces::Event& b) { return a.start_ns < b.start_ns; });
  t.summary = traces::summarize(t);
  return t;
}

Json DenseComparison::to_json() const {
  return {{"loss", loss}, {"dense_loss", dense_loss}, {"loss_diff", loss_diff},
          {"max_grad_rel_error", max_grad_rel_error}, {"worst_tensor", worst_tensor}};
}

DenseComparison compare_with_dense(Backend& backend, const models::ModelSpec& model, const step::Config& config,
                                   const Weights& weights, const std::vector<int32_t>& tokens, double loss,
                                   const Gradients& grads, const ParamTensors& adapters) {
  step::Config c = config;
  c.attention = Attention::dense;
  c.optimizer = step::Optimizer::none;
  EngineOptions o;
  o.adapters = adapters;
  Engine dense(backend, model, c, weights, std::move(o));
  DenseComparison r;
  r.loss = loss;
  r.dense_loss = dense.step(tokens).loss;
  r.loss_diff = loss - r.dense_loss;
  const Gradients d = dense.gradients();
  const WorstTensor worst = worst_relative_l2(grads, d);
  r.max_grad_rel_error = worst.rel_l2;
  r.worst_tensor = worst.name;
  return r;
}

}  // namespace oomb::executor
