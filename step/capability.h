#pragma once
// What this project's executor runs (`oomb run`, both backends): one check of a configuration and a
// target, below the planner and the executor. The planner labels the rest "on paper", the runner
// refuses it naming the flag or the plan, the Engine before it allocates anything.
#include <string>

#include "core/error.h"
#include "step/config.h"
#include "step/target.h"

namespace oomb::step {

// Whether the executor runs a configuration on a target; when not, the configuration key that
// decides it ("schedule", "kv_dtype", ...) and why, in words. Builds no text when it runs (the
// planner's search asks for every candidate).
struct Capability {
  std::string key;     // empty: executable
  std::string reason;  // what is modelled and not run
  bool executable() const { return key.empty(); }
};
Capability capability(const Config& c, const Target& target);

// The refusal as an Error naming the flag that sets the key (config_flag) and the configuration's
// value of it.
Error capability_error(const Capability& cap, const Config& c);

// Whether the executor runs a model: the dense families' arithmetic (SwiGLU, plain or llama3 RoPE,
// Qwen2's q/k/v biases, Qwen3's q/k norms), global, sliding-window and chunked attention, attention
// sinks (attention_capability: on what), and routed experts with softmax routing, without shared
// experts or biases, stored natively (moe_capability: on what). When not, key "model"
// and what of the model it does not run. A plan of such a model is on paper.
Capability model_capability(const models::ModelSpec& m);
// The refusal as an Error naming --model and the model's id.
Error model_capability_error(const Capability& cap, const models::ModelSpec& m);
// What a mixture-of-experts model (one model_capability accepts) runs with, on either backend: one
// process and GPU; key: the configuration's key.
// Executable for a dense model.
Capability moe_capability(const models::ModelSpec& m, const Config& c);
// The attention's extras: attention sinks run on one GPU (key "gpus"); sliding and chunked layers
// run with every configuration.
Capability attention_capability(const models::ModelSpec& m, const Config& c);
// All four checks: the model's first, then its experts', its layer kinds', then the configuration's.
Capability capability(const models::ModelSpec& m, const Config& c, const Target& target);

}  // namespace oomb::step
