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
          {"checkpointing", checkpointing},
          {"context_tokens", context_tokens},
          {"rows_per_gpu", r},
          {"device_bytes_per_gpu", device_bytes},
          {"device_limit_bytes_per_gpu", device_limit_bytes},
          {"host_bytes_per_node", host_bytes},
          {"host_limit_bytes_per_node", host_limit_bytes},
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

ParallelPlan context_parallel(const Scenario& s, ContextParallelism kind, int64_t cp, int64_t tp, bool checkpointing,
                              double headroom) {
  const auto& m = s.model;
  const auto& c = s.config;
  if (cp < 1 || tp < 1) throw Error("--gpus", std::to_string(cp * tp), "must be positive", "e.g. 8");
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
  ParallelPlan p;
  p.kind = kind;
  p.cp = cp;
  p.tp = tp;
  p.gpus = cp * tp;
  p.checkpointing = checkpointing;
  p.context_tokens = N;
  p.label = std::string(kind == ContextParallelism::ring ? "ring attention" : "Ulysses") + " CP " +
            std::to_string(cp) + " x TP " + std::to_string(tp) + (checkpointing ? "" : ", no checkpointing");

  const int64_t T = ceil_div(N, cp);  // tokens per context-parallel rank
  const int64_t L = step::effective_layers(c, m);
  const int64_t qd = m.q_dim(), kvd = m.kv_dim();
  const int64_t ab = dtype_bytes(c.activation_dtype), kvb = dtype_bytes(c.kv_dtype);

  // Standard full-sequence training on one TP group (sequence parallelism with TP, fused 1K loss
  // tiles, AdamW state on the GPUs), the configuration both the compute and the memory below are of.
  Scenario whole = s;
  whole.config.schedule = step::Schedule::standard;
  whole.config.attention = step::Attention::dense;
  whole.config.gpus = tp;
  whole.config.sequence_parallel = tp > 1;  // as Megatron-LM runs tensor with context parallelism
  whole.config.checkpointing = checkpointing;
  whole.config.kept_layers = 0;  // context parallelism on paper: checkpointing on or off only
  whole.config.logits_chunk_tokens = 1024;
  whole.config.optimizer = step::Optimizer::gpu;

  // Memory per GPU: the one buffer table (step/buffers.h) of that step over this rank's N/cp tokens,
  // with its AdamW state sharded over the cp ranks (ZeRO-1 in the context-parallel group), plus the
  // buffers context parallelism adds to the attention (its only rows written here).
  step::Config rank = whole.config;
  rank.context_tokens = T;
  step::BufferTable table = step::buffer_table(m, rank, step::target_of(s.gpu));
  for (step::BufferRow& r : table.rows)
    if (r.tier == step::Tier::device && r.category == "optimizer_state") {
      r.bytes = ceil_div(r.bytes, cp);
      r.formula += " / cp (sharded over the context-parallel ranks)";
    }
  step::BufferRow exchange;
  exchange.name = "attention_exchange";
  exchange.category = "attention_workspace";
  exchange.tier = step::Tier::device;
  exchange.dtype = c.kv_dtype;
  exchange.phases = step::phase_bit(step::Phase::forward) | step::phase_bit(step::Phase::backward);
  int64_t kv_heads_local = 0;
  if (kind == ContextParallelism::ring) {
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
  table.rows.push_back(exchange);
  // The rows alive at the table's device peak (what the per-GPU total is).
  const step::BufferTable::PhasePeak peak = table.device_peak(true);
  const step::PhaseMask at_peak = step::phase_bit(peak.phase);
  for (const step::BufferRow& r : table.rows)
    if (r.tier == step::Tier::device && r.bytes > 0 && (r.phases & at_peak))
      p.rows.push_back({r.name, r.bytes, r.formula});
  p.device_bytes = peak.bytes;
  p.device_limit_bytes = device_limit(s, headroom);
  p.host_limit_bytes = s.host.ram_bytes;
  p.fits = p.device_bytes <= p.device_limit_bytes;

  // Compute: the simulator's standard step for the whole sequence on one TP group, shared by cp.
  const simulator::Summary sum = simulator::evaluate(whole);
  p.compute_s = sum.step_s / static_cast<double>(cp);

  // Communication per layer and pass, per GPU (bytes each GPU sends; links are full duplex).
  const double link = link_bytes_per_s(s);
  const double passes_fwd = checkpointing ? 2.0 : 1.0;  // forward, and its recompute in the backward
  const double Td = static_cast<double>(T);
  // Attention of one rank's queries against one block of keys, the work a ring step hides its
  // transfer behind: with causal load balancing a rank's N/cp x N/2 pairs spread evenly over the cp
  // steps, T x T / 2 pairs each.
  const double attn_flops_rank = 4.0 * Td * Td / 2.0 * static_cast<double>(m.head_dim * m.q_heads) / tp;
  const double attn_fwd_s = attn_flops_rank / (s.gpu.bf16_flops_per_s * s.gpu.efficiency.attention);
  const double attn_bwd_s = 2.5 * attn_flops_rank / (s.gpu.bf16_flops_per_s * s.gpu.efficiency.attention_backward);
  double comm = 0, exposed = 0;
  if (cp > 1) {
    if (kind == ContextParallelism::ring) {
      const double kv_block = Td * 2.0 * static_cast<double>(kvd / tp) * static_cast<double>(kvb);
      const double fwd = static_cast<double>(cp - 1) * kv_block / link;
      const double bwd = static_cast<double>(cp - 1) * (kv_block + kv_block) / link;  // K/V in, dK/dV on (bf16)
      const double steps = static_cast<double>(cp - 1);
      comm = static_cast<double>(L) * (passes_fwd * fwd + bwd);
      exposed = static_cast<double>(L) * steps *
                (passes_fwd * std::max(0.0, fwd / steps - attn_fwd_s) + std::max(0.0, bwd / steps - attn_bwd_s));
    } else {
      const double per_token =
          static_cast<double>((2 * qd / tp + 2 * std::max<int64_t>(kvd / tp, kv_heads_local * m.head_dim)) * ab);
      const double a2a = static_cast<double>(cp - 1) / static_cast<double>(cp) * Td * per_token / link;
      comm = static_cast<double>(L) * (passes_fwd + 1.0) * a2a;  // backward: the same volume of gradients
      exposed = comm;
    }
  }
  p.comm_s = comm;
  p.exposed_comm_s = exposed;
  p.step_s = p.compute_s + exposed;
  p.binding = !p.fits ? "device memory" : exposed > 0.05 * p.step_s ? "interconnect" : "compute";
  if (s.gpu.interconnect_bytes_per_s <= 0)
    p.notes.push_back(s.gpu.id + " has no NVLink in its profile: GPU-GPU traffic priced at the host link");
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
