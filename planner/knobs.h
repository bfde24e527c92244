#pragma once
// A scenario as its knobs are written (model, GPU, host, context, preset and every knob as text or
// number, unset = the config's default or the preset's), resolved into a checked simulator::Scenario.
// The command line's flags (cli/scenario_flags.h) and calibration points (planner/points.h) are
// both read into this one struct, so a knob means the same in both. Errors name the flag
// ("--chunk"); callers that read another source rename them.
#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "simulator/simulator.h"

namespace oomb::planner {

// The most data-parallel replicas, and nodes, a job may have (--data-parallel, --nodes).
inline constexpr int64_t kMaxDataParallel = 4096;
inline constexpr int64_t kMaxNodes = 4096;

struct Knobs {
  std::string model = "qwen2.5-7b";
  std::string gpu = "h200";
  std::string host;  // default: the GPU's default host
  std::string context;
  std::string preset;
  std::optional<std::string> schedule, attention, chunk, page, selection, resident_layers, kv_dtype, kv_grad_dtype,
      param_dtype, param_grad_dtype, activation_dtype, optimizer, logits_chunk, selection_memory, peak_measure,
      loss_dtype, lora_targets;
  std::optional<int64_t> budget, gpus, layers, kept_layers, lora_rank, data_parallel, nodes;
  std::optional<double> selection_overlap, lora_alpha, router_aux_loss, page_copy_latency_s;
  std::optional<bool> checkpointing, lora_train_embeddings, shard_optimizer;
  // plan, simulate, sweep and calibration points: unset optimizer means auto (AdamW, placed on the
  // GPU or the host) and unset logits_chunk the fused 1K tiles, except under --preset
  // oomb-published (a measurement setting). `oomb run` keeps the config's defaults.
  bool training_defaults = false;

  // Loads specs and applies the preset, then the explicit knobs; validates. Context may be 0 when
  // not given (callers that need it check).
  simulator::Scenario resolve() const;
  // Names of the knobs given explicitly ("chunk", "page", "budget", ...).
  std::set<std::string> explicit_knobs() const;
  // optimizer auto, given or as the training default: AdamW state wanted, placement open.
  bool optimizer_auto() const;
};

// v when finite and in [lo, hi]; otherwise Error naming `flag` (NaN and inf fail every range).
double finite_in(double v, double lo, double hi, const std::string& flag, const std::string& hint = {});
std::string format_number(double v);  // "%g"

}  // namespace oomb::planner
