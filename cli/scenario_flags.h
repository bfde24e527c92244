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
  std::optional<int64_t> budget, gpus, layers, kept_layers;
  std::optional<double> selection_overlap;
  std::optional<bool> checkpointing;
  // plan, simulate and sweep set this before add_to: unset --optimizer means auto (AdamW, placed on
  // the GPU or the host) and unset --logits-chunk the fused 1K tiles, except under
  // --preset oomb-published (a measurement setting). `oomb run` keeps the config's defaults.
  bool training_defaults = false;

  // require_context: --context is mandatory (simulate, run) or optional (sweep, plan --max-context).
  void add_to(CLI::App& app, bool require_context);
  // Loads specs and applies the preset, then the explicit flags; validates. Context may be 0
  // when not given (callers that need it check).
  simulator::Scenario resolve() const;
  // Names of the knobs given explicitly ("chunk", "page", "budget", ...).
  std::set<std::string> explicit_knobs() const;
  // --optimizer auto, given or as the training default: AdamW state wanted, placement open.
  bool optimizer_auto() const;
};

// Flag checks shared by the subcommands. CLI11 would read "2" as true and "-1" as 2^64 - 1:
// these refuse both at parse time (exit 2).
CLI::Validator boolean_word();      // true|false|on|off|yes|no|1|0
CLI::Validator unsigned_integer();  // digits only, fits uint64
// v when finite and in [lo, hi]; otherwise Error naming `flag` (NaN and inf fail every range).
double finite_in(double v, double lo, double hi, const std::string& flag, const std::string& hint = {});
std::string format_number(double v);  // "%g"

// Event-level simulations hold every (chunk, layer) pass: bounded in the simulator (simulator.h).
using simulator::check_event_simulation_size;
using simulator::kMaxEventPairs;

}  // namespace oomb::cli
