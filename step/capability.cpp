#include "step/capability.h"

#include <utility>

namespace oomb::step {

namespace {
bool storable(Dtype dtype) { return dtype == Dtype::fp32 || dtype == Dtype::bf16; }
}  // namespace

Capability capability(const Config& c, const Target& target) {
  auto no = [](const char* key, std::string reason) { return Capability{key, std::move(reason)}; };
  if (c.schedule != Schedule::oomb)
    return no("schedule", "the standard schedule is a baseline on paper: the executor runs the oomb schedule");
  // For the CUDA backend the table of the published implementation is that program's GPU buffers
  // (its score matrix and page tables, without this backend's op scratch; step/buffers.cpp); the
  // CPU backend's table is its own either way.
  if (c.implementation == Implementation::published && target.backend == BackendKind::cuda)
    return no("implementation",
              "it describes the published implementation's memory (--preset oomb-published), which is modelled, not "
              "run: plan without the preset for this project's executor");
  if (c.attention == Attention::sparse && c.selection != "published" && c.selection != "per-kv-head")
    return no("selection", "selection rule " + c.selection +
                               " is modelled, not executed (the executor runs published and per-kv-head)");
  if (c.lora_rank > 0 && c.lora_train_embeddings)
    return no("lora_train_embeddings",
              "LoRA with trained embeddings and LM head (--lora-train-embeddings) is planned on paper: the executor "
              "trains adapters on a wholly frozen base");
  if (!storable(c.kv_dtype) || !storable(c.kv_grad_dtype))
    return no(storable(c.kv_dtype) ? "kv_grad_dtype" : "kv_dtype",
              "the executor stores KV and KV-gradient pages as fp32 or bf16 (the plan says " + std::string(to_string(c.kv_dtype)) +
                  " / " + to_string(c.kv_grad_dtype) + ")");
  for (const auto& [key, dtype] : {std::pair{"param_dtype", &c.param_dtype}, {"param_grad_dtype", &c.param_grad_dtype},
                                   {"activation_dtype", &c.activation_dtype}, {"loss_dtype", &c.loss_dtype}})
    if (!storable(*dtype)) return no(key, "the executor stores weights, gradients, activations and the loss as fp32 or bf16");
  if (c.gpus > 1 && c.lora_rank > 0)
    return no("lora_rank", "LoRA under tensor parallelism is planned on paper: the executor runs it on one GPU");
  return {};
}

Capability model_capability(const models::ModelSpec& m) {
  auto no = [](std::string reason) { return Capability{"model", std::move(reason) + " is planned, not run"}; };
  // Families whose arithmetic lives in their conventions, not in the spec's fields (Gemma 3: scaled
  // embeddings, (1 + w) norms, its query scale and local RoPE base; Llama 4: weightless L2 q/k norms,
  // attention temperature on the NoPE layers).
  if (m.family == "gemma3" || m.family == "llama4") return no("the " + m.family + " family's arithmetic");
  if (m.moe.present()) {
    // The CPU backend runs routed experts (packed dispatch, softmax routing); moe_capability adds
    // what of the configuration and target they run with.
    if (m.moe.routing == models::Routing::sigmoid_topk) return no("sigmoid top-k routing");
    if (m.moe.expert_weights != models::WeightFormat::native)
      return no(std::string("experts stored as ") + to_string(m.moe.expert_weights));
  }
  if (!m.nope_layers.empty()) return no("layers without RoPE");
  if (m.sandwich_norms && m.moe.present()) return no("sandwich norms beside experts");
  return {};
}

Error model_capability_error(const Capability& cap, const models::ModelSpec& m) {
  return Error("--model", m.id, cap.reason, "the executor runs the dense Qwen2, Qwen3, Llama and Mistral models, sliding-window and chunked "
               "local layers, attention sinks and biases, and mixtures of routed experts with softmax routing (Qwen3-MoE, Mixtral; "
               "gpt-oss's router and expert biases and clamped SwiGLU too) and shared experts beside them, SwiGLU or "
               "GeGLU MLPs and sandwich norms");
}

Capability moe_capability(const models::ModelSpec& m, const Config& c) {
  if (!m.moe.present()) return {};
  auto no = [](const char* key, std::string reason) { return Capability{key, std::move(reason)}; };
  if (c.gpus > 1) return no("gpus", "a mixture of experts under tensor parallelism is planned on paper: the executor runs it on one GPU");
  if (c.data_parallel > 1)
    return no("data_parallel", "a mixture of experts under data parallelism is planned on paper: the executor runs it in one process");
  return {};
}

Capability attention_capability(const models::ModelSpec& m, const Config& c) {
  if (m.attention_sinks && c.gpus > 1)
    return {"gpus", "attention sinks under tensor parallelism are planned on paper: the executor runs them on one GPU"};
  if (m.o_bias && c.gpus > 1)
    return {"gpus", "an o_proj bias under tensor parallelism is planned on paper: the executor runs it on one GPU"};
  if (m.sandwich_norms && c.gpus > 1)
    return {"gpus", "sandwich norms under tensor parallelism are planned on paper: the executor runs them on one GPU"};
  return {};
}

Capability capability(const models::ModelSpec& m, const Config& c, const Target& target) {
  if (Capability cap = model_capability(m); !cap.executable()) return cap;
  if (Capability cap = moe_capability(m, c); !cap.executable()) return cap;
  if (Capability cap = attention_capability(m, c); !cap.executable()) return cap;
  return capability(c, target);
}

Error capability_error(const Capability& cap, const Config& c) {
  const Json j = c.to_json();
  std::string value;
  if (const auto it = j.find(cap.key); it != j.end()) value = it->is_string() ? it->get<std::string>() : it->dump();
  return Error(config_flag(cap.key), value, cap.reason);
}

}  // namespace oomb::step
