#include "step/describe.h"

#include "core/format.h"

namespace oomb::step {

std::string residency_text(const Config& c, const models::ModelSpec& m) {
  // Offload concerns the global layers; a sliding or chunked layer's pages stay on the device.
  const int64_t L = effective_layers(c, m), Lg = global_layers(c, m);
  const std::string layers = Lg == L ? std::to_string(L) + " layers" : std::to_string(Lg) + " global layers";
  if (c.resident_layers >= Lg) return "all " + layers + " resident (no offload)";
  return std::to_string(c.resident_layers) + " of " + layers + " resident (offload)";
}

std::string budget_text(const Config& c) {
  return "budget " + std::to_string(c.page_budget) + " pages of " + std::to_string(c.page_tokens) + " = " +
         format_tokens(c.page_budget * c.page_tokens) + " attended tokens";
}

std::string attention_text(const Config& c) {
  return c.attention == Attention::sparse ? "sparse (" + budget_text(c) + ", " + c.selection + ")" : "dense";
}

std::string logits_text(const Config& c) {
  return c.logits_chunk_tokens > 0 ? "logits in fused " + format_tokens(c.logits_chunk_tokens) + " tiles"
                                   : "logits unfused (whole chunk)";
}

namespace {
// "off" | "on" | "on, last 2 of 28 layers kept": the knob's state, which checkpointing_text names.
std::string checkpointing_state(const Config& c, const models::ModelSpec& m) {
  if (!c.checkpointing) return "off";
  if (c.kept_layers == 0) return "on";
  return "on, last " + std::to_string(c.kept_layers) + " of " + std::to_string(effective_layers(c, m)) + " layers kept";
}
}  // namespace

std::string checkpointing_text(const Config& c, const models::ModelSpec& m) {
  return "checkpointing " + checkpointing_state(c, m);
}

std::string recompute_text(const Config& c, const models::ModelSpec& m) {
  const std::string what = checkpointing_text(c, m);
  if (!c.checkpointing) return what + " (every layer's activations kept: no recompute)";
  if (c.kept_layers == 0) return what + " (each layer recomputed from its input in the backward)";
  return what + " (their activations live from the forward to their backward; the other " +
         std::to_string(effective_layers(c, m) - c.kept_layers) + " are recomputed from their inputs)";
}

std::string dtypes_text(const Config& c) {
  std::string s;
  if (c.schedule == Schedule::oomb)
    s = std::string("KV ") + to_string(c.kv_dtype) + ", KV-grad " + to_string(c.kv_grad_dtype) + ", ";
  return s + "params " + to_string(c.param_dtype) + ", param-grad " + to_string(c.param_grad_dtype);
}

std::string parallelism_text(const Config& c) {
  std::string s;
  if (c.gpus > 1) s = "tensor parallel x" + std::to_string(c.gpus);
  if (c.data_parallel > 1) {
    s += (s.empty() ? "" : ", ") + std::to_string(c.data_parallel) + " data-parallel replicas" +
         (c.nodes > 1 ? " on " + std::to_string(c.nodes) + " nodes" : std::string());
    if (c.shard_optimizer)
      s += ", AdamW state sharded over the " + std::to_string(c.data_parallel) + " data-parallel replicas (ZeRO-1)";
  }
  return s;
}

std::vector<ConfigFact> describe(const Config& c, const models::ModelSpec& m) {
  std::vector<ConfigFact> f;
  const bool oomb = c.schedule == Schedule::oomb;
  f.push_back({"schedule", oomb ? "oomb (chunk-recurrent)" : "standard (full-sequence training)"});
  f.push_back({"attention", attention_text(c)});
  if (oomb) {
    f.push_back({"chunk / page", format_tokens(c.chunk_tokens) + " / " + std::to_string(c.page_tokens) + " tokens"});
    f.push_back({"residency", residency_text(c, m)});
  }
  f.push_back({"dtypes", dtypes_text(c)});
  f.push_back({"loss", logits_text(c) + ", loss " + to_string(c.loss_dtype)});
  f.push_back({"optimizer", c.optimizer == Optimizer::none  ? "none (no optimizer step)"
                            : c.optimizer == Optimizer::gpu ? "AdamW on the GPU"
                                                            : "AdamW on the host (updated there)"});
  f.push_back({"checkpointing", checkpointing_state(c, m)});
  if (const std::string p = parallelism_text(c); !p.empty()) f.push_back({"parallelism", p});
  if (c.layers_override > 0) f.push_back({"layers", "the first " + std::to_string(c.layers_override) + " only"});
  return f;
}

}  // namespace oomb::step
