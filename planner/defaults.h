#pragma once
// Training defaults shared by plan, simulate and sweep, and the warnings a user needs about a
// configuration before trusting its numbers.
#include <cstdint>
#include <string>

#include "simulator/simulator.h"

namespace oomb::planner {

// The default loss of simulate/sweep/plan: fused chunked cross-entropy in 1K-token tiles (what
// the planner picks wherever the loss is searched, and what a real run uses).
inline constexpr int64_t kDefaultLogitsChunk = 1024;

// `--optimizer auto` outside the planner's search (simulate, sweep): AdamW with fp32 master weights
// and moments, placed where the planner would rank it first when nothing else differs: of the
// placements that fit, the faster one, and within kTieTolerance of each other the one with the
// smaller device peak.
step::Optimizer place_optimizer(const simulator::Scenario& s, double headroom);

// Non-empty when the context is beyond the model's max_position: RoPE scaling (or position
// interpolation) is needed to train it, and this says which scaling the spec has.
std::string context_warning(const models::ModelSpec& m, int64_t context_tokens);

// "AdamW (fp32 master + m + v): 85.2 GiB on the host" or "none (no AdamW state)"; bytes per GPU
// for gpu placement, per node (all tensor-parallel shards) for host placement.
std::string optimizer_text(const simulator::Scenario& s);
int64_t optimizer_bytes(const simulator::Scenario& s);  // from the memory table

}  // namespace oomb::planner
