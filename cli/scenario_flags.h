#pragma once
// The flags shared by simulate, sweep, plan and run: model, GPU, host, context and every knob.
// Flags left unset keep the config's defaults (or the preset's); `explicit_knobs` lists the ones
// the user set, so the planner can treat them as fixed.
#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "planner/knobs.h"
#include "simulator/simulator.h"

namespace oomb::cli {

// The knobs (planner/knobs.h: resolve, explicit_knobs, optimizer_auto) bound to flags.
struct ScenarioFlags : planner::Knobs {
  // require_context: --context is mandatory (simulate, run) or optional (sweep, plan --max-context).
  // Set training_defaults first (plan, simulate, sweep): the help then states them.
  void add_to(CLI::App& app, bool require_context);
};

// Flag checks shared by the subcommands. CLI11 would read "2" as true and "-1" as 2^64 - 1:
// these refuse both at parse time (exit 2).
CLI::Validator boolean_word();      // true|false|on|off|yes|no|1|0
CLI::Validator unsigned_integer();  // digits only, fits uint64
using planner::finite_in;
using planner::format_number;

// Event-level simulations hold every (chunk, layer) pass: bounded in the simulator (simulator.h).
using simulator::check_event_simulation_size;
using simulator::kMaxEventPairs;

}  // namespace oomb::cli
