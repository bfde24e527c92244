#include "planner/defaults.h"

#include <algorithm>

#include "core/format.h"
#include "step/buffers.h"
#include "planner/search.h"

namespace oomb::planner {

using step::Optimizer;

step::Optimizer place_optimizer(const simulator::Scenario& s0, double headroom) {
  simulator::Scenario s = s0;
  auto judge = [&](step::Optimizer o) {
    s.config.optimizer = o;
    Candidate k;
    k.config = s.config;
    k.summary = simulator::evaluate(s);
    k.usage = usage_of(s, k.summary, headroom);
    return k;
  };
  const Candidate gpu = judge(step::Optimizer::gpu), host = judge(step::Optimizer::host);
  if (gpu.fits() && host.fits()) {
    // The planner's ranking: the faster, and within the tie band the smaller device peak.
    const double t = std::min(gpu.summary.step_s, host.summary.step_s) * (1.0 + kTieTolerance);
    if (gpu.summary.step_s <= t && host.summary.step_s <= t)
      return gpu.summary.peak_device_bytes < host.summary.peak_device_bytes ? step::Optimizer::gpu : step::Optimizer::host;
    return gpu.summary.step_s < host.summary.step_s ? step::Optimizer::gpu : step::Optimizer::host;
  }
  if (gpu.fits()) return step::Optimizer::gpu;
  if (host.fits()) return step::Optimizer::host;
  // Neither fits: keep the one that is less over its limits, so the report shows the nearer miss.
  return gpu.usage.worst_ratio() <= host.usage.worst_ratio() ? step::Optimizer::gpu : step::Optimizer::host;
}

std::string context_warning(const models::ModelSpec& m, int64_t n) {
  // A yarn or linear scaling reaches past max_position (Qwen3 at 128K): no warning within its reach.
  if (m.max_position <= 0 || n <= m.rope_reach()) return "";
  std::string scaling = "the spec has no rope_scaling (plain RoPE, theta " + format_count(m.rope_theta) + ")";
  if (m.rope_scaling.is_object()) {
    scaling = "the spec has rope_scaling " + m.rope_scaling.dump();
    if (m.rope_scaling.contains("original_max_position_embeddings"))
      scaling += " (already extended from " + m.rope_scaling["original_max_position_embeddings"].dump() +
                 (m.rope_reach() > m.max_position ? " to " + format_tokens(m.rope_reach()) : std::string()) + ")";
  }
  const int64_t reach = m.rope_reach();
  return "context " + format_tokens(n) + " is beyond " + m.id + "'s " +
         (reach > m.max_position ? "RoPE reach " + format_tokens(reach) : "max_position " + format_tokens(m.max_position)) +
         " (" + format_count(static_cast<double>(n) / static_cast<double>(reach)) +
         "x): training it needs RoPE scaling that reaches that length (e.g. YaRN, a larger factor or rope theta); " + scaling;
}

int64_t optimizer_bytes(const simulator::Scenario& s) {
  int64_t b = 0;
  for (const auto& r : simulator::memory_table(s).rows)
    if (r.category == "optimizer_state") b += r.bytes;
  return b;
}

std::string optimizer_text(const simulator::Scenario& s) {
  const auto& c = s.config;
  if (c.optimizer == step::Optimizer::none) return "none (no AdamW state: a measurement setting, not a training run)";
  const bool master = dtype_bytes(c.param_dtype) != 4 && (c.lora_rank == 0 || c.lora_train_embeddings);
  const std::string what = std::string(master ? "AdamW (fp32 master + m + v" : "AdamW (fp32 m + v") +
                           (c.lora_rank > 0 ? " of the trained parameters)" : ")") +
                           (c.shard_optimizer ? " sharded over the " + std::to_string(c.data_parallel) +
                                                    " data-parallel replicas (ZeRO-1: each holds and updates 1/" +
                                                    std::to_string(c.data_parallel) + ")"
                                              : "");
  if (c.optimizer == step::Optimizer::gpu)
    return what + ", " + format_bytes(optimizer_bytes(s)) + (c.gpus > 1 ? " per GPU" : "") + " on the GPU";
  // The host's rows are one rank's; the node holds every tensor-parallel rank's shard.
  return what + ", " + format_bytes(step::node_host_bytes(optimizer_bytes(s), c)) +
         (c.gpus > 1 ? " per node (all GPUs' shards)" : "") + " on the host (updated there)";
}

}  // namespace oomb::planner
