#include "cli/report.h"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/format.h"
#include "step/buffers.h"
#include "step/describe.h"

namespace oomb::cli {

using namespace simulator;

void print_scenario_header(const Scenario& s) {
  const auto& c = s.config;
  const bool projected = s.gpu.calibrated_from.rfind("projected", 0) == 0;
  std::printf("%s on %s%s (host %s), context %s tokens\n", s.model.id.c_str(), s.gpu.id.c_str(),
              projected ? " (projected profile)" : "", s.host.id.c_str(), format_tokens(c.context_tokens).c_str());
  // The configuration in step/describe.h's words, one knob per line.
  for (const step::ConfigFact& f : step::describe(c, s.model)) {
    std::string text = f.text;
    if (f.knob == "attention" && c.attention == step::Attention::sparse)
      text += ", overlap " + format_fixed(c.selection_overlap, 2) + ", selection memory " + to_string(c.selection_memory);
    std::printf("  %-14s %s\n", f.knob.c_str(), text.c_str());
  }
}

namespace {

// One letter per phase of the schedule, '.' where the row is not alive: "F R L B O".
std::string phase_marks(const step::BufferTable& t, step::PhaseMask m) {
  std::string out;
  for (step::Phase p : step::phases_of(t.schedule)) {
    if (!out.empty()) out += ' ';
    out += (m & step::phase_bit(p)) ? static_cast<char>(std::toupper(to_string(p)[0])) : '.';
  }
  return out;
}

}  // namespace

void print_memory_report(const Scenario& s, const step::BufferTable& t, const Summary& sum) {
  const step::BufferTable::PhasePeak peak = t.device_peak();
  std::string legend;
  for (step::Phase p : step::phases_of(t.schedule))
    legend += (legend.empty() ? "" : ", ") + std::string(1, static_cast<char>(std::toupper(to_string(p)[0]))) + " " +
              to_string(p);
  std::printf("\nDevice memory (per GPU)                       bytes  peak share  phases (%s)\n", legend.c_str());
  for (const auto& r : t.rows) {
    if (r.tier != step::Tier::device || r.bytes == 0) continue;
    // The share of the peak for rows alive at the peak phase; the others are freed by then.
    const bool at_peak = (r.phases & step::phase_bit(peak.phase)) != 0;
    std::printf("  %-34s %14s  %10s  %s   %s %s\n", r.name.c_str(), format_bytes(r.bytes).c_str(),
                at_peak ? format_percent(static_cast<double>(r.bytes) / static_cast<double>(sum.peak_device_bytes)).c_str()
                        : "-",
                phase_marks(t, r.phases).c_str(), r.shape.c_str(), to_string(r.dtype));
  }
  std::printf("  %-34s %14s  of %s (%s), in phase %s%s\n", "peak", format_bytes(sum.peak_device_bytes).c_str(),
              format_bytes(s.gpu.hbm_capacity_bytes).c_str(),
              format_percent(static_cast<double>(sum.peak_device_bytes) / static_cast<double>(s.gpu.hbm_capacity_bytes)).c_str(),
              to_string(peak.phase),
              s.config.peak_measure == step::PeakMeasure::allocated ? " [allocated; runtime reserve not counted]" : "");
  std::string by_phase;
  for (step::Phase p : step::phases_of(t.schedule))
    by_phase += std::string(by_phase.empty() ? "" : ", ") + to_string(p) + " " + format_bytes(t.device_bytes_in(p)) +
                (p == peak.phase ? " (peak)" : "");
  std::printf("  live by phase: %s\n", by_phase.c_str());
  bool any_host = false;
  for (const auto& r : t.rows) any_host |= r.tier == step::Tier::host && r.bytes > 0;
  if (any_host) {
    if (s.config.gpus > 1)
      std::printf("\nHost memory (per rank; the node holds all %lld GPUs' host tiers: %s)\n",
                  static_cast<long long>(s.config.gpus),
                  format_bytes(step::node_host_bytes(t.host_peak().bytes, s.config)).c_str());
    else
      std::printf("\nHost memory\n");
    for (const auto& r : t.rows)
      if (r.tier == step::Tier::host && r.bytes > 0)
        std::printf("  %-34s %14s   %s %s\n", r.name.c_str(), format_bytes(r.bytes).c_str(), r.shape.c_str(),
                    to_string(r.dtype));
    std::printf("  %-34s %14s  of %s pinnable, %s RAM (%s)\n", "peak", format_bytes(sum.peak_host_bytes).c_str(),
                format_bytes(s.host.pinnable_bytes).c_str(), format_bytes(s.host.ram_bytes).c_str(), s.host.id.c_str());
  } else {
    std::printf("\nHost memory: none needed\n");
  }
  if (sum.device_pool_pages > 0)
    std::printf("\nDevice page pools: %lld KV pages + %lld gradient pages (%s + %s per page)", static_cast<long long>(sum.kv_pool_pages),
                static_cast<long long>(sum.grad_pool_pages), format_bytes(t.pages.kv_page_bytes).c_str(),
                format_bytes(t.pages.grad_page_bytes).c_str());
  if (s.config.attention == step::Attention::sparse)
    std::printf("; largest selection union %lld pages", static_cast<long long>(sum.max_union_pages));
  if (sum.pages_in_flight > 0)
    std::printf("; %lld pages of each kind still being written back at the peak (published write-backs)",
                static_cast<long long>(sum.pages_in_flight));
  if (sum.device_pool_pages > 0) std::printf("\n");
}

void print_time_report(const Scenario& s, const Summary& sum) {
  std::printf("\nStep time %s (%s tokens/s), compute %s, %s\n", format_duration_s(sum.step_s).c_str(),
              format_count(sum.tokens_per_s).c_str(), format_duration_s(sum.compute_s).c_str(),
              format_flops_per_s(sum.flops / std::max(sum.step_s, 1e-12)).c_str());
  if (sum.h2d_bytes > 0 || sum.d2h_bytes > 0) {
    std::printf("Transfers: h2d %s, d2h %s; exposed copy time %s (%s of the step)\n", format_bytes(sum.h2d_bytes).c_str(),
                format_bytes(sum.d2h_bytes).c_str(), format_duration_s(sum.exposed_copy_s).c_str(),
                format_percent(sum.exposed_copy_s / std::max(sum.step_s, 1e-12)).c_str());
    if (std::isfinite(sum.required_h2d_bytes_per_s))
      std::printf("Link needed to hide all copies: h2d %s, d2h %s (have %s, %s)\n",
                  format_rate_bytes_per_s(sum.required_h2d_bytes_per_s).c_str(),
                  format_rate_bytes_per_s(sum.required_d2h_bytes_per_s).c_str(),
                  format_rate_bytes_per_s(s.gpu.h2d_bytes_per_s).c_str(),
                  format_rate_bytes_per_s(s.gpu.d2h_bytes_per_s).c_str());
    else
      std::printf("Copies cannot hide behind compute with 1 resident layer (use --resident-layers 2 or more)\n");
  }
  if (sum.allreduce_bytes > 0 && s.config.shard_optimizer)
    std::printf("Gradient reduce-scatter and weight all-gather (data parallel x%lld, AdamW state sharded: ZeRO-1%s): "
                "%s per rank, %s per step around the update\n",
                static_cast<long long>(s.config.data_parallel),
                s.config.nodes > 1 ? (", across " + std::to_string(s.config.nodes) + " nodes").c_str() : "",
                format_bytes(sum.allreduce_bytes).c_str(), format_duration_s(sum.allreduce_s).c_str());
  else if (sum.allreduce_bytes > 0)
    std::printf("Gradient all-reduce (data parallel x%lld, ring%s): %s per rank, %s per step before the update\n",
                static_cast<long long>(s.config.data_parallel),
                s.config.nodes > 1 ? (" across " + std::to_string(s.config.nodes) + " nodes").c_str() : "",
                format_bytes(sum.allreduce_bytes).c_str(), format_duration_s(sum.allreduce_s).c_str());
  if (sum.tp_allreduce_s > 0)
    std::printf("Tensor-parallel all-reduces (x%lld): %lld of %s per rank, %s per step (in the passes)\n",
                static_cast<long long>(s.config.gpus), static_cast<long long>(sum.tp_allreduces),
                format_bytes(sum.tp_allreduce_bytes).c_str(), format_duration_s(sum.tp_allreduce_s).c_str());
  std::printf("%s; binding: %s\n", sum.feasible ? "FITS" : "DOES NOT FIT", to_string(sum.binding));
  for (const auto& n : sum.notes) std::printf("  - %s\n", n.c_str());
}

}  // namespace oomb::cli
