#pragma once
// One description of a configuration as text, for people. `oomb plan` (its settings, its one-line
// knobs and what differs between two plans), `oomb simulate` (its header and the HTML report's
// facts) and `oomb run` word each knob with these functions, so a knob reads the same everywhere.
// Machines read the configuration's JSON (config.h), never these words.
#include <string>
#include <vector>

#include "models/specs.h"
#include "step/config.h"

namespace oomb::step {

// "all 28 layers resident (no offload)" | "2 of 28 layers resident (offload)"
std::string residency_text(const Config& c, const models::ModelSpec& m);
// "budget 64 pages of 128 = 8K attended tokens"
std::string budget_text(const Config& c);
// "dense" | "sparse (budget 64 pages of 128 = 8K attended tokens, published)"
std::string attention_text(const Config& c);
// "logits in fused 1K tiles" | "logits unfused (whole chunk)"
std::string logits_text(const Config& c);
// "checkpointing off" | "checkpointing on" | "checkpointing on, last 2 of 28 layers kept"
std::string checkpointing_text(const Config& c, const models::ModelSpec& m);
// checkpointing_text with what it means for the backward's recompute.
std::string recompute_text(const Config& c, const models::ModelSpec& m);
// "KV bf16, KV-grad fp32, params bf16, param-grad bf16"
std::string dtypes_text(const Config& c);
// "" (one GPU, one replica) | "tensor parallel x2" | "4 data-parallel replicas on 2 nodes, AdamW state
// sharded over the 4 data-parallel replicas (ZeRO-1)", joined by ", ".
std::string parallelism_text(const Config& c);

// The configuration as (knob, words) lines, in one order: schedule, attention, chunk / page,
// residency (oomb schedule), storage dtypes, loss, optimizer, checkpointing, parallelism, layers.
struct ConfigFact {
  std::string knob, text;
};
std::vector<ConfigFact> describe(const Config& c, const models::ModelSpec& m);

}  // namespace oomb::step
