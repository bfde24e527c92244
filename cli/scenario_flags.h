#pragma once
// The flags shared by simulate, sweep, plan and run: model, GPU, host, context and every knob.
// Flags left unset keep the config's defaults (or the preset's); `explicit_knobs` lists the ones
// the user set, so the planner can treat them as fixed.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "simulator/simulator.h"

namespace oomb::cli {

struct ScenarioFlags {
  std::string model = "qwen2.5-7b";
  std::string gpu = "h200";
  std::string host;  // default: the GPU's default host
  std::string context;
  std::string preset;
  std::optional<std::string> schedule, attention, chunk, page, selection, resident_layers, kv_dtype, kv_grad_dtype,
      param_dtype, param_grad_dtype, activation_dtype, optimizer, logits_chunk, selection_memory, peak_measure,
      loss_dtype;
  std::optional<int64_t> budget, gpus, layers;
  std::optional<double> selection_overlap;
  std::optional<bool> checkpointing;

  // require_context: --context is mandatory (simulate, run) or optional (sweep, plan --max-context).
  void add_to(CLI::App& app, bool require_context);
  // Loads specs and applies the preset, then the explicit flags; validates. Context may be 0
  // when not given (callers that need it check).
  simulator::Scenario resolve() const;
  // Names of the knobs given explicitly ("chunk", "page", "budget", ...).
  std::set<std::string> explicit_knobs() const;
};

}  // namespace oomb::cli
