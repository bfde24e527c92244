#pragma once
// Which planned settings the executor (`oomb run`) can follow today (step::capability for a GPU's
// CUDA backend). The planner searches every setting that matters and labels the ones the executor
// does not run yet as "on paper"; `oomb run --plan` refuses them instead of running something else
// than the plan says.
#include <string>

#include "step/config.h"

namespace oomb::planner {

// True when the executor runs model `m` with `c` as planned; otherwise false with the reason in *why
// (if given). Not executed: a model the executor does not compute (step::model_capability: yarn or
// linear RoPE, sinks, ...), the standard schedule, the quest / moba / local selection rules, fp16 /
// fp8 storage. Checkpointing on, off and partial (--kept-layers) all run (off: no recompute in
// backward; partial: none for the kept layers).
bool executable(const models::ModelSpec& m, const step::Config& c, std::string* why = nullptr);

}  // namespace oomb::planner
