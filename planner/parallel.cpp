#include "planner/parallel.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "planner/search.h"
#include "step/buffers.h"

namespace oomb::planner {

using simulator::Scenario;

const char* to_string(ContextParallelism k) { return k == ContextParallelism::ring ? "ring" : "ulysses"; }

Json ParallelPlan::to_json() const {
  Json r = Json::array();
  for (const auto& x : rows) r.push_back({{"name", x.name}, {"bytes", x.bytes}, {"formula", x.formula}});
  return {{"label", label},
          {"kind", replicas > 1 ? "data_parallel" : to_string(kind)},
          {"cp", cp},
          {"tp", tp},
          {"replicas", replicas},
          {"gpus", gpus},
          {"nodes", nodes},
          {"fsdp", fsdp},
          {"offload", offload_checkpoints},
          {"tiled_mlp", tiled_mlp},
          {"recipe", recipe},
          {"checkpointing", checkpointing},
          {"context_tokens", context_tokens},
          {"rows_per_gpu", r},
          {"device_bytes_per_gpu", device_bytes},
          {"device_limit_bytes_per_gpu", device_limit_bytes},
          {"host_bytes_per_node", host_bytes},
          {"host_limit_bytes_per_node", host_limit_bytes},
          {"host_pinned_bytes_per_node", host_pinned_bytes},
          {"offload_bytes_per_gpu", offload_bytes},
          {"offload_s", offload_s},
          {"fsdp_comm_s", fsdp_comm_s},
          {"fits", fits},
          {"binding", binding},
          {"compute_s", compute_s},
          {"comm_s", comm_s},
          {"exposed_comm_s", exposed_comm_s},
          {"step_s", step_s},
          {"tokens_per_s", tokens_per_s},
          {"gpu_hours_per_billion_tokens", gpu_hours_per_billion_tokens},
          {"notes", notes}};
}

namespace {

int64_t device_limit(const Scenario& s, double headroom) {
  return static_cast<int64_t>(std::floor(static_cast<double>(s.gpu.hbm_capacity_bytes) * (1.0 - headroom)));
}

// GPU-GPU bandwidth per direction; a GPU without NVLink talks over its host link (as cost.cpp).
double link_bytes_per_s(const Scenario& s) {
  return s.gpu.interconnect_bytes_per_s > 0 ? s.gpu.interconnect_bytes_per_s : s.gpu.h2d_bytes_per_s;
}

}  // namespace

void finish_rates(ParallelPlan& p) {
  p.tokens_per_s = p.step_s > 0 ? static_cast<double>(p.context_tokens) * static_cast<double>(p.replicas) / p.step_s : 0;
  p.gpu_hours_per_billion_tokens =
      p.tokens_per_s > 0 ? static_cast<double>(p.gpus) / p.tokens_per_s * 1e9 / 3600.0 : 0;
}

namespace {

step::BufferRow device_row(std::string name, std::string category, Dtype dtype, int64_t bytes, step::PhaseMask phases,
                           std::string formula) {
  step::BufferRow r;
  r.name = std::move(name);
  r.category = std::move(category);
  r.tier = step::Tier::device;
  r.dtype = dtype;
  r.bytes = bytes;
  r.phases = phases;
  r.formula = std::move(formula);
  return r;
}

}  // namespace

ParallelPlan context_parallel(const Scenario& s, ContextParallelism kind, int64_t cp, int64_t tp, bool checkpointing,
                              double headroom) {
  return context_parallel(s, CpLayout{.kind = kind, .cp = cp, .tp = tp, .checkpointing = checkpointing}, headroom);
}

ParallelPlan context_parallel(const Scenario& s, const CpLayout& lay, double headroom) {
  const auto& m = s.model;
  const auto& c = s.config;
  const ContextParallelism kind = lay.kind;
  const int64_t cp = lay.cp, tp = lay.tp;
  const bool checkpointing = lay.checkpointing;
  if (cp < 1 || tp < 1) throw Error("--gpus", std::to_string(cp * tp), "must be positive", "e.g. 8");
  if (lay.nodes < 1 || (cp * tp) % lay.nodes != 0)
    throw Error("--nodes", std::to_string(lay.nodes), "does not divide the layout's " + std::to_string(cp * tp) + " GPUs",
                "a divisor of the GPUs");
  if (lay.offload_checkpoints && !checkpointing)
    throw Error("--gpus", std::to_string(cp * tp), "offloading checkpoints needs checkpointing on",
                "a layout with checkpointing");
  if (m.q_heads % tp != 0 || m.kv_heads % tp != 0)
    throw Error("--gpus", std::to_string(tp), "tensor parallelism does not divide " + m.id + "'s heads",
                "a divisor of " + std::to_string(m.kv_heads) + " KV heads");
  if (kind == ContextParallelism::ulysses && m.q_heads % (tp * cp) != 0)
    throw Error("--gpus", std::to_string(tp * cp),
                "Ulysses shards heads: " + std::to_string(tp * cp) + " GPUs do not divide " + m.id + "'s " +
                    std::to_string(m.q_heads) + " query heads",
                "a divisor of " + std::to_string(m.q_heads));
  const int64_t N = c.context_tokens;
  if (N < cp) throw Error("--context", std::to_string(N), "is shorter than the context-parallel degree", "more tokens");
  // Accelerate refuses its context parallelism for sliding-window or chunked attention layers
  // (accelerate PR 4177): PyTorch's ring runs causal SDPA over the whole sequence only.
  if (lay.fsdp && kind == ContextParallelism::ring && cp > 1 &&
      (m.layers_of(models::LayerAttention::sliding) > 0 || m.layers_of(models::LayerAttention::chunked) > 0))
    throw Error("--model", m.id,
                "has sliding-window or chunked attention layers, which Accelerate's FSDP2 context parallelism refuses",
                "a model whose every layer attends globally, or Ulysses (heads split, each over the whole sequence)");
  ParallelPlan p;
  p.kind = kind;
  p.cp = cp;
  p.tp = tp;
  p.gpus = cp * tp;
  p.nodes = lay.nodes;
  p.checkpointing = checkpointing;
  p.fsdp = lay.fsdp;
  p.offload_checkpoints = lay.offload_checkpoints;
  p.tiled_mlp = lay.tiled_mlp;
  p.context_tokens = N;
  const bool torch_cp = lay.fsdp && kind == ContextParallelism::ring;  // PyTorch's context_parallel under FSDP2
  if (lay.fsdp)
    p.label = std::string(torch_cp ? "FSDP2 ring attention" : "ZeRO-3 Ulysses") + " CP " + std::to_string(cp) +
              (tp > 1 ? " x TP " + std::to_string(tp) : std::string()) +
              (lay.offload_checkpoints ? ", checkpoints on host" : checkpointing ? ", checkpoints on GPU" : ", no checkpointing");
  else
    p.label = std::string(kind == ContextParallelism::ring ? "ring attention" : "Ulysses") + " CP " +
              std::to_string(cp) + " x TP " + std::to_string(tp) + (checkpointing ? "" : ", no checkpointing");
  if (lay.tiled_mlp) p.label += ", tiled MLP";
  if (lay.nodes > 1) p.label += " (" + std::to_string(lay.nodes) + " nodes)";

  const int64_t T = ceil_div(N, cp);  // tokens per context-parallel rank
  const int64_t L = step::effective_layers(c, m);
  const int64_t qd = m.q_dim(), kvd = m.kv_dim(), h = m.hidden;
  const int64_t ab = dtype_bytes(c.activation_dtype), kvb = dtype_bytes(c.kv_dtype);
  const int64_t P = m.param_count();
  const int64_t head_params = m.embedding_params();  // the LM head (the embedding when tied)
  // The largest layer FSDP gathers (a mixture of experts' layer with all its experts; dense first
  // layers are smaller), per TP rank.
  int64_t layer = 0;
  for (int64_t l = 0; l < m.layers; ++l) layer = std::max(layer, m.layer_params(l));
  layer = ceil_div(layer, tp);

  // Standard full-sequence training on one TP group (sequence parallelism with TP, fused loss tiles,
  // AdamW state on the GPUs), the configuration both the compute and the memory below are of.
  Scenario whole = s;
  whole.config.schedule = step::Schedule::standard;
  whole.config.attention = step::Attention::dense;
  whole.config.gpus = tp;
  whole.config.sequence_parallel = tp > 1;  // as Megatron-LM runs tensor with context parallelism
  whole.config.checkpointing = checkpointing;
  whole.config.kept_layers = 0;  // context parallelism on paper: checkpointing on or off only
  // The loss in tiles: 1K-token fused tiles, or TRL's chunked NLL (256-token chunks, fp32 logits:
  // trl/trainer/sft_trainer.py _CHUNKED_LM_HEAD_CHUNK_SIZE) under FSDP.
  whole.config.logits_chunk_tokens = lay.fsdp ? 256 : 1024;
  if (lay.fsdp) whole.config.loss_dtype = Dtype::fp32;
  whole.config.optimizer = step::Optimizer::gpu;

  // Memory per GPU: the one buffer table (step/buffers.h) of that step over this rank's N/cp tokens,
  // with the changes each layout makes (formulas in the rows and in parallel.h).
  step::Config rank = whole.config;
  rank.context_tokens = T;
  step::BufferTable table = step::buffer_table(m, rank, step::target_of(s.gpu));
  const step::PhaseMask fwd = step::phase_bit(step::Phase::forward), loss = step::phase_bit(step::Phase::loss),
                        bwd = step::phase_bit(step::Phase::backward), opt = step::phase_bit(step::Phase::optimizer);
  const step::PhaseMask all = fwd | loss | bwd | opt;
  const std::string cps = std::to_string(cp);
  if (!lay.fsdp) {
    for (step::BufferRow& r : table.rows)
      if (r.tier == step::Tier::device && r.category == "optimizer_state") {
        r.bytes = ceil_div(r.bytes, cp);
        r.formula += " / cp (sharded over the context-parallel ranks)";
      }
  } else {
    // FSDP2 as Accelerate applies it (accelerate utils/fsdp_utils.py fsdp2_prepare_model): every
    // trainable parameter upcast to fp32 before fully_shard, so the sharded parameters, their
    // gradients and AdamW's two moments are fp32 shards over the cp ranks (16 bytes per parameter /
    // cp); compute gathers bf16 copies (MixedPrecisionPolicy param_dtype bf16). ZeRO-3 (DeepSpeed)
    // holds the same 16: bf16 parameter and gradient shards, fp32 master and moments.
    std::vector<step::BufferRow> kept;
    for (step::BufferRow& r : table.rows) {
      if (r.tier == step::Tier::device && (r.category == "weights" || r.category == "parameter_gradients" ||
                                           r.category == "optimizer_state"))
        continue;
      kept.push_back(std::move(r));
    }
    table.rows = std::move(kept);
    const int64_t shard = ceil_div(ceil_div(P, tp), cp);
    table.rows.push_back(device_row("sharded_parameters", "weights", Dtype::fp32, checked_mul(shard, 4), all,
                                    "params / tp / cp x 4 (fp32 shards: Accelerate upcasts before fully_shard)"));
    table.rows.push_back(device_row("sharded_gradients", "parameter_gradients", Dtype::fp32, checked_mul(shard, 4),
                                    bwd | opt, "params / tp / cp x 4 (fp32 gradient shards)"));
    table.rows.push_back(device_row("adamw_moments", "optimizer_state", Dtype::fp32, checked_mul(shard, 8), all,
                                    "2 x params / tp / cp x 4 (m, v of the fp32 shards)"));
    table.rows.push_back(device_row(
        "gathered_layers", "weights", c.param_dtype, checked_mul(2 * layer, dtype_bytes(c.param_dtype)), fwd | bwd,
        "2 layers' params / tp x param dtype (the layer computing and the next, gathered ahead)"));
    table.rows.push_back(device_row("gathered_lm_head", "weights", c.param_dtype,
                                    checked_mul(ceil_div(head_params, tp) + h, dtype_bytes(c.param_dtype)), loss,
                                    "(vocab x hidden / tp + hidden) x param dtype (the final norm and LM head unit, "
                                    "not resharded between the forward and the backward)"));
    table.rows.push_back(device_row("unsharded_layer_gradients", "parameter_gradients", c.param_dtype,
                                    checked_mul(layer, dtype_bytes(c.param_dtype)), bwd,
                                    "one layer's params / tp x param dtype (its gradients before the reduce-scatter)"));
    // TRL's chunked NLL computes each chunk's logits as h.float() @ w.float().T: an fp32 copy of the
    // whole LM head per chunk, and in the chunk's backward the gradient of that copy (fp32) beside
    // the head's gradient being accumulated (param dtype).
    table.rows.push_back(device_row(
        "chunked_loss_head_upcast", "logits", Dtype::fp32,
        checked_mul(ceil_div(head_params, tp), 4 + 4 + dtype_bytes(c.param_dtype)), loss,
        "vocab x hidden / tp x (4 + 4 + param dtype) (the head upcast to fp32 per chunk, its fp32 gradient, the "
        "accumulated head gradient)"));
  }
  if (lay.offload_checkpoints) {
    // save_on_cpu(pin_memory=True): each checkpointed layer input is copied to pinned host memory
    // as the forward saves it and copied back when the backward's recompute unpacks it.
    for (step::BufferRow& r : table.rows)
      if (r.tier == step::Tier::device && r.category == "checkpoints") {
        p.offload_bytes += r.bytes;
        r.tier = step::Tier::host;
        r.formula += " (in pinned host memory)";
      }
    table.rows.push_back(device_row("checkpoint_unpacked", "checkpoints", c.activation_dtype,
                                    checked_mul(checked_mul(T, ceil_div(h, tp)), ab), bwd,
                                    "tokens / cp x hidden x act (the layer input copied back for its recompute)"));
  }
  // The attention's exchange buffers: not a row of the table, they are counted at the attention's
  // moment below.
  ParallelRow exchange{"attention_exchange", 0, ""};
  int64_t kv_heads_local = 0;
  if (torch_cp) {
    // PyTorch's context_parallel with SDPA (torch/distributed/tensor/experimental/_context_parallel/
    // _attention.py), per attention call, the larger of its two moments:
    //  forward (_templated_ring_attention, _SDPAMerger): the whole sequence's K and V gathered (the
    //    default all-gather rotation), the local K and V concatenated for it, a step's output (act)
    //    and, in fp32, the merged output, the step's output upcast, their difference and its scaled
    //    product (4 x N/cp x q_dim x 4);
    //  backward (_templated_ring_attention_backward): K and V gathered again and the local copy, fp32
    //    accumulators dq, dk, dv, the copy of dq a partial update concatenates, dK/dV in fp32 three
    //    times (the buffer received, the one sent, the next one received: an all-to-all rotation),
    //    and a step's dq, dk, dv from the SDPA backward (act).
    const int64_t gathered = checked_mul(N, 2 * kvd / tp) * kvb + checked_mul(T, 2 * kvd / tp) * kvb;
    const int64_t fwd_moment = gathered + checked_mul(T, qd / tp) * (ab + 4 * 4);
    const int64_t bwd_moment = gathered + checked_mul(T, (qd + 2 * kvd) / tp) * (4 + ab) + checked_mul(T, qd / tp) * 4 +
                               checked_mul(T, 2 * kvd / tp) * 4 * 3;
    exchange.bytes = std::max(fwd_moment, bwd_moment);
    exchange.formula =
        bwd_moment >= fwd_moment
            ? "(N + N/cp) x 2 kv_dim / tp x KV dtype (K, V gathered; the local copy) + N/cp x (q_dim + 2 kv_dim) / tp "
              "x (4 + act) (fp32 dq, dk, dv; a step's) + N/cp x q_dim / tp x 4 (dq's partial update) + 3 x N/cp x 2 "
              "kv_dim / tp x 4 (dK/dV received, sent, next)"
            : "(N + N/cp) x 2 kv_dim / tp x KV dtype (K, V gathered; the local copy) + N/cp x q_dim / tp x (act + 4 "
              "x 4) (a step's output; the fp32 merge: output, upcast step, difference, product)";
  } else if (kind == ContextParallelism::ring) {
    exchange.bytes = checked_mul(T, 2 * kvd / tp) * (2 * kvb + 2 * 4);
    exchange.formula = "2 remote K/V blocks (N/cp x 2 kv_dim / tp x KV dtype) + dK/dV send and receive (fp32)";
  } else {
    kv_heads_local = std::max<int64_t>(1, m.kv_heads / (tp * cp));
    const int64_t per_token = (2 * qd / (tp * cp) + 2 * kv_heads_local * m.head_dim) * ab;
    exchange.bytes = checked_mul(N, per_token) * 2;
    exchange.formula = "N x (q + o of heads/(tp x cp) + K, V of " + std::to_string(kv_heads_local) +
                       " KV head(s)) x act, send and receive buffers";
    if (m.kv_heads < tp * cp)
      p.notes.push_back(std::to_string(m.kv_heads) + " KV heads over " + std::to_string(tp * cp) +
                        " GPUs: each KV head is replicated on " + std::to_string(tp * cp / m.kv_heads) + " GPUs");
  }
  // The exchange is alive only while a layer's attention runs, and a pre-norm block runs its
  // attention before its MLP in the forward and after the MLP's backward in the backward: at that
  // moment the layer's ffn-wide tensors (3 saved activations and 3 backward temporaries per
  // layer_activations / layer_backward_temporaries) are not yet made (forward) or already freed
  // (backward). So the per-GPU peak is the larger of the table's peak without the exchange and,
  // per phase, the attention's moment: that phase's rows less their ffn-wide part, plus the exchange.
  // Tiled MLP: the layer's ffn-wide tensors (3 saved activations, 3 backward temporaries) are one
  // tile's of ceil(T / ceil(T / hidden)) tokens (DeepSpeed ALST's TiledMLP: ceil(seqlen / hidden) shards).
  const int64_t mlp_tokens = lay.tiled_mlp ? ceil_div(T, ceil_div(T, h)) : T;
  if (lay.tiled_mlp) {
    const int64_t saved = checked_mul(checked_mul(T - mlp_tokens, 3 * ceil_div(m.ffn_hidden, tp)), ab);
    for (step::BufferRow& r : table.rows)
      if (r.tier == step::Tier::device &&
          (r.name == "layer_activations" || r.name == "layer_backward_temporaries") && r.bytes > saved) {
        r.bytes -= saved;
        r.formula += ", its 3 ffn-wide tensors over a tile of " + std::to_string(mlp_tokens) + " tokens (tiled MLP)";
      }
  }
  const step::BufferTable::PhasePeak peak = table.device_peak(true);
  const int64_t ffn_row = checked_mul(checked_mul(mlp_tokens, 3 * ceil_div(m.ffn_hidden, tp)), ab);
  auto ffn_part = [&](const step::BufferRow& r) -> int64_t {
    if (r.tier != step::Tier::device || r.category != "layer_working_set") return 0;
    if (r.name == "layer_activations" || r.name == "layer_backward_temporaries") return std::min(r.bytes, ffn_row);
    return 0;
  };
  step::Phase attn_phase = step::Phase::backward;
  int64_t attn_bytes = -1;
  for (step::Phase ph : {step::Phase::forward, step::Phase::backward}) {
    int64_t b = table.device_bytes_in(ph, true) + exchange.bytes;
    for (const step::BufferRow& r : table.rows)
      if (r.phases & step::phase_bit(ph)) b -= ffn_part(r);
    if (b > attn_bytes) attn_bytes = b, attn_phase = ph;
  }
  const bool attention_peak = attn_bytes > peak.bytes;
  const step::PhaseMask at_peak = step::phase_bit(attention_peak ? attn_phase : peak.phase);
  for (const step::BufferRow& r : table.rows)
    if (r.tier == step::Tier::device && (r.phases & at_peak)) {
      const int64_t b = attention_peak ? r.bytes - ffn_part(r) : r.bytes;
      if (b > 0)
        p.rows.push_back({r.name, b, r.formula + (attention_peak && ffn_part(r) > 0 ? " (less its 3 ffn-wide "
                                                                                       "tensors at the attention)"
                                                                                     : "")});
    }
  if (attention_peak) p.rows.push_back(exchange);
  p.device_bytes = std::max(peak.bytes, attn_bytes);
  p.device_limit_bytes = device_limit(s, headroom);
  p.host_limit_bytes = s.host.ram_bytes;
  const int64_t gpus_per_node = p.gpus / lay.nodes;
  p.host_pinned_bytes = checked_mul(p.offload_bytes, gpus_per_node);
  p.host_bytes = p.host_pinned_bytes;
  const bool device_ok = p.device_bytes <= p.device_limit_bytes;
  const bool pinned_ok = p.host_pinned_bytes <= s.host.pinnable_bytes;
  p.fits = device_ok && pinned_ok;

  // Compute: the simulator's standard step for the whole sequence on one TP group, shared by cp.
  const simulator::Summary sum = simulator::evaluate(whole);
  p.compute_s = sum.step_s / static_cast<double>(cp);
  if (lay.tiled_mlp) {
    // One more MLP forward per layer (each tile's, recomputed in its backward): 2 x 3 x hidden x ffn
    // FLOPs per token and layer, at the profile's GEMM rate.
    const double flops = 6.0 * static_cast<double>(T) * static_cast<double>(h) *
                         static_cast<double>(ceil_div(m.ffn_hidden, tp)) * static_cast<double>(L);
    p.compute_s += flops / (s.gpu.bf16_flops_per_s * s.gpu.efficiency.gemm);
  }

  // Communication per layer and pass, per GPU (bytes each GPU sends; links are full duplex). Across
  // nodes the slowest hop of a ring or an all-to-all is the host network's share per GPU.
  const double link = lay.nodes > 1 && s.host.network_bytes_per_s > 0
                          ? std::min(link_bytes_per_s(s), s.host.network_bytes_per_s)
                          : link_bytes_per_s(s);
  const double passes_fwd = checkpointing ? 2.0 : 1.0;  // forward, and its recompute in the backward
  const double Td = static_cast<double>(T);
  const double frac = static_cast<double>(cp - 1) / static_cast<double>(cp);
  // Attention of one rank's queries against one block of keys, the work a ring step hides its
  // transfer behind: with causal load balancing a rank's N/cp x N/2 pairs spread evenly over the cp
  // steps, T x T / 2 pairs each.
  const double attn_flops_rank = 4.0 * Td * Td / 2.0 * static_cast<double>(m.head_dim * m.q_heads) / tp;
  const double attn_fwd_s = attn_flops_rank / (s.gpu.bf16_flops_per_s * s.gpu.efficiency.attention);
  const double attn_bwd_s = 2.5 * attn_flops_rank / (s.gpu.bf16_flops_per_s * s.gpu.efficiency.attention_backward);
  double comm = 0, exposed = 0;
  if (cp > 1) {
    if (torch_cp) {
      // The all-gather of K and V before each attention call (forward, recompute, backward) is
      // waited for; dK/dV travel the ring behind the backward's attention of each step.
      const double gather = frac * static_cast<double>(N) * 2.0 * static_cast<double>(kvd / tp) *
                            static_cast<double>(kvb) / link;
      const double dkv = Td * 2.0 * static_cast<double>(kvd / tp) * 4.0 / link;  // one step's fp32 dK/dV
      const double steps = static_cast<double>(cp - 1);
      comm = static_cast<double>(L) * ((passes_fwd + 1.0) * gather + steps * dkv);
      exposed = static_cast<double>(L) * ((passes_fwd + 1.0) * gather + steps * std::max(0.0, dkv - attn_bwd_s));
    } else if (kind == ContextParallelism::ring) {
      const double kv_block = Td * 2.0 * static_cast<double>(kvd / tp) * static_cast<double>(kvb);
      const double fwd_s = static_cast<double>(cp - 1) * kv_block / link;
      const double bwd_s = static_cast<double>(cp - 1) * (kv_block + kv_block) / link;  // K/V in, dK/dV on (bf16)
      const double steps = static_cast<double>(cp - 1);
      comm = static_cast<double>(L) * (passes_fwd * fwd_s + bwd_s);
      exposed = static_cast<double>(L) * steps *
                (passes_fwd * std::max(0.0, fwd_s / steps - attn_fwd_s) + std::max(0.0, bwd_s / steps - attn_bwd_s));
    } else {
      const double per_token =
          static_cast<double>((2 * qd / tp + 2 * std::max<int64_t>(kvd / tp, kv_heads_local * m.head_dim)) * ab);
      const double a2a = frac * Td * per_token / link;
      comm = static_cast<double>(L) * (passes_fwd + 1.0) * a2a;  // backward: the same volume of gradients
      exposed = comm;
    }
  }
  if (lay.fsdp && cp > 1) {
    // FSDP: each layer's weights gathered before its forward and again before its backward (the
    // recompute uses the backward's copy), its gradients reduce-scattered after (param dtype: the
    // mixed-precision policy's reduce dtype is bf16), (cp - 1) / cp of each per GPU; the gather of
    // the next layer overlaps the current one's compute, so only what a layer's share of the compute
    // does not cover waits. The LM head unit and the embedding likewise.
    const double pb = static_cast<double>(dtype_bytes(c.param_dtype));
    const double layer_bytes = static_cast<double>(layer) * pb;
    const double per_layer = frac * 3.0 * layer_bytes / link;  // gather, gather, reduce-scatter
    const double tables = m.tied_embeddings ? 1.0 : 2.0;       // the embedding and, untied, the LM head
    const double head = frac * 3.0 * tables * static_cast<double>(ceil_div(head_params, tp)) * pb / link;
    p.fsdp_comm_s = static_cast<double>(L) * per_layer + head;
    const double layer_compute = p.compute_s / static_cast<double>(L);
    comm += p.fsdp_comm_s;
    exposed += static_cast<double>(L) * std::max(0.0, per_layer - layer_compute) + head;
  }
  if (lay.offload_checkpoints) {
    // save_on_cpu's pack copies with a blocking copy_; the unpack's copy back is issued when the
    // recompute needs it: both directions wait, at the profile's host-link rates.
    p.offload_s = static_cast<double>(p.offload_bytes) / s.gpu.d2h_bytes_per_s +
                  static_cast<double>(p.offload_bytes) / s.gpu.h2d_bytes_per_s;
    exposed += p.offload_s;
  }
  p.comm_s = comm;
  p.exposed_comm_s = exposed;
  p.step_s = p.compute_s + exposed;
  p.binding = !device_ok ? "device memory"
              : !pinned_ok ? "pinned host memory"
              : exposed > 0.05 * p.step_s ? (p.offload_s > exposed / 2 ? "host link" : "interconnect")
                                          : "compute";
  if (s.gpu.interconnect_bytes_per_s <= 0)
    p.notes.push_back(s.gpu.id + " has no NVLink in its profile: GPU-GPU traffic priced at the host link");
  if (lay.offload_checkpoints)
    p.notes.push_back("checkpoints on the host: " + format_bytes(p.host_pinned_bytes) + " pinned per node, " +
                      format_bytes(p.offload_bytes) + " each way per GPU and step (" + format_duration_s(p.offload_s) +
                      " of blocking copies)");
  finish_rates(p);
  return p;
}

std::optional<ParallelPlan> best_context_parallel(const Scenario& s, ContextParallelism kind, int64_t gpus,
                                                  double headroom, std::vector<std::string>* skipped) {
  std::optional<ParallelPlan> best;
  auto better = [](const ParallelPlan& a, const ParallelPlan& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return std::make_tuple(a.step_s, a.device_bytes) < std::make_tuple(b.step_s, b.device_bytes);
    return a.device_bytes < b.device_bytes;
  };
  for (int64_t tp = 1; tp <= gpus; tp *= 2) {
    if (gpus % tp != 0) continue;
    const int64_t cp = gpus / tp;
    if (cp < 2) continue;  // cp 1 is plain tensor parallelism, not context parallelism
    for (bool ckpt : {true, false}) {
      try {
        const ParallelPlan p = context_parallel(s, kind, cp, tp, ckpt, headroom);
        if (!best || better(p, *best)) best = p;
      } catch (const Error& e) {
        if (skipped && ckpt) skipped->push_back("CP " + std::to_string(cp) + " x TP " + std::to_string(tp) + ": " + e.what());
      }
    }
  }
  return best;
}

std::optional<ParallelPlan> best_fsdp_layout(const Scenario& s, int64_t gpus, int64_t nodes, double headroom) {
  std::optional<ParallelPlan> best;
  auto better = [](const ParallelPlan& a, const ParallelPlan& b) {
    if (a.fits != b.fits) return a.fits;
    if (a.fits) return std::make_tuple(a.step_s, a.device_bytes) < std::make_tuple(b.step_s, b.device_bytes);
    return a.device_bytes < b.device_bytes;
  };
  for (int64_t tp = 1; tp <= gpus; tp *= 2) {  // tensor parallelism stays inside a node
    if (gpus % tp != 0) continue;
    const int64_t cp = gpus / tp * nodes;
    if (cp < 2) continue;
    for (auto kind : {ContextParallelism::ring, ContextParallelism::ulysses})
      for (bool offload : {false, true})
        for (bool tiled : {false, true}) {
          const CpLayout l{.kind = kind, .cp = cp, .tp = tp, .fsdp = true, .offload_checkpoints = offload,
                           .tiled_mlp = tiled, .nodes = nodes};
          try {
            ParallelPlan p = context_parallel(s, l, headroom);
            if (!best || better(p, *best)) best = std::move(p);
          } catch (const Error&) {
            // degrees that do not suit the model (heads): not a layout
          }
        }
  }
  return best;
}

std::vector<ParallelPlan> stock_recipes(const Scenario& s, int64_t gpus, int64_t nodes, double headroom,
                                        std::vector<std::string>* skipped) {
  std::vector<ParallelPlan> out;
  const int64_t all = gpus * nodes;
  for (auto kind : {ContextParallelism::ring, ContextParallelism::ulysses}) {
    for (bool offload : {true, false}) {
      const CpLayout l{.kind = kind, .cp = all, .tp = 1, .checkpointing = true, .fsdp = true,
                       .offload_checkpoints = offload, .nodes = nodes};
      try {
        ParallelPlan p = context_parallel(s, l, headroom);
        p.recipe = kind == ContextParallelism::ring
                       ? "the stock Hugging Face recipe (TRL's long-context example: Accelerate FSDP2, cp_size " +
                             std::to_string(all) + ", SDPA, chunked NLL" + (offload ? ", checkpoint offload)" : ")")
                       : std::string("DeepSpeed ALST (ZeRO-3, Ulysses sequence parallelism") +
                             (offload ? ", checkpoint offload)" : ")");
        out.push_back(std::move(p));
      } catch (const Error& e) {
        if (skipped && offload) skipped->push_back(std::string(kind == ContextParallelism::ring ? "FSDP2 ring" : "ZeRO-3 Ulysses") +
                                                   " CP " + std::to_string(all) + ": " + e.what());
      }
    }
  }
  return out;
}

std::vector<ParallelPlan> long_context_layouts(const Scenario& s, int64_t gpus, int64_t nodes, double headroom,
                                               std::vector<std::string>* skipped) {
  std::vector<ParallelPlan> out = stock_recipes(s, gpus, nodes, headroom, skipped);
  std::optional<ParallelPlan> best = best_fsdp_layout(s, gpus, nodes, headroom);
  if (!best) return out;
  for (const auto& p : out)
    if (p.kind == best->kind && p.cp == best->cp && p.tp == best->tp &&
        p.offload_checkpoints == best->offload_checkpoints && p.tiled_mlp == best->tiled_mlp)
      return out;
  best->label += " (best FSDP layout)";
  out.push_back(std::move(*best));
  return out;
}

ParallelPlan data_parallel(const Scenario& s, const simulator::Summary& one, int64_t replicas, double headroom) {
  ParallelPlan p;
  p.tp = s.config.gpus;
  p.replicas = replicas;
  p.gpus = replicas * p.tp;
  p.checkpointing = s.config.checkpointing;
  p.context_tokens = s.config.context_tokens;
  p.label = "oomb" + std::string(p.tp > 1 ? " TP " + std::to_string(p.tp) : "") + " x " + std::to_string(replicas) +
            " data-parallel replica" + (replicas == 1 ? "" : "s");
  const Usage u = usage_of(s, one, headroom);
  p.rows.push_back({"one replica's device peak", one.peak_device_bytes, "as planned"});
  p.device_bytes = u.device_need_bytes;
  p.device_limit_bytes = u.device_limit_bytes;
  p.host_bytes = checked_mul(u.host_need_bytes, replicas);
  p.host_limit_bytes = s.host.ram_bytes;
  const int64_t pinned = checked_mul(u.pinned_need_bytes, replicas);
  p.compute_s = one.compute_s;
  p.step_s = one.step_s;
  // The replicas' gradient all-reduce before each update (the simulator's ring over the profile's
  // interconnect, as a data-parallel plan predicts it), not hidden behind the backward.
  if (replicas > 1) {
    Scenario sd = s;
    sd.config.data_parallel = replicas;
    const simulator::Summary d = simulator::evaluate(sd);
    const double ar = d.allreduce_s;
    p.comm_s = ar;
    p.step_s += ar;
    if (ar > 0)
      p.rows.push_back({"gradient all-reduce (per rank)", d.allreduce_bytes,
                        "trained gradients, ring over " + std::to_string(replicas) + " replicas: " +
                            format_duration_s(ar) + " per step"});
  }
  const double own_step_s = p.step_s;
  // Every replica's copies go through the host's DRAM.
  const double traffic = static_cast<double>(one.h2d_bytes + one.d2h_bytes) * static_cast<double>(replicas);
  if (s.host.mem_bytes_per_s > 0 && p.step_s > 0 && traffic / own_step_s > s.host.mem_bytes_per_s) {
    p.step_s = std::max(own_step_s, traffic / s.host.mem_bytes_per_s);
    p.notes.push_back("the replicas' copies need " + format_rate_bytes_per_s(traffic / one.step_s) + " of host memory " +
                      "bandwidth, more than " + s.host.id + "'s " + format_rate_bytes_per_s(s.host.mem_bytes_per_s) +
                      ": the step stretches to " + format_duration_s(p.step_s));
  }
  p.exposed_comm_s = p.step_s - one.step_s;  // the all-reduce and any host-bandwidth stretch
  const bool device_ok = u.device_ok(), host_ok = p.host_bytes <= p.host_limit_bytes,
             pinned_ok = pinned <= s.host.pinnable_bytes;
  p.fits = one.feasible && device_ok && host_ok && pinned_ok;
  p.binding = !device_ok ? "device memory"
              : !pinned_ok ? "pinned host memory (all replicas)"
              : !host_ok ? "host RAM (all replicas)"
              : p.step_s > own_step_s ? "host memory bandwidth"
              : p.comm_s > 0.05 * p.step_s ? "gradient all-reduce"
                                          : to_string(one.binding);
  if (!pinned_ok || !host_ok) {
    const int64_t fit = std::min(s.host.ram_bytes / std::max<int64_t>(1, u.host_need_bytes),
                                 s.host.pinnable_bytes / std::max<int64_t>(1, u.pinned_need_bytes));
    p.notes.push_back("the node's host memory holds " + std::to_string(fit) + " replica" + (fit == 1 ? "" : "s") +
                      ", not " + std::to_string(replicas));
  }
  finish_rates(p);
  return p;
}

}  // namespace oomb::planner
