#pragma once
// The configuration is part of the description of one step (step/config.h); the simulator names
// it as it always has.
#include "step/config.h"

namespace oomb::simulator {

using step::Schedule;
using step::Attention;
using step::Optimizer;
using step::SelectionMemory;
using step::PeakMeasure;
using step::Implementation;
using step::to_string;
using step::schedule_from_string;
using step::attention_from_string;
using step::optimizer_from_string;
using step::selection_memory_from_string;
using step::peak_measure_from_string;
using step::implementation_from_string;
using step::is_known_selection;
using step::Config;
using step::config_from_json;
using step::published_preset;
using step::apply_preset;
using step::validate;
using step::validate_document;
using step::kMaxPageBudget;
using step::effective_layers;
using step::offloads;
using step::recomputed_layers;

}  // namespace oomb::simulator
