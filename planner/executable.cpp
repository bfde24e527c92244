#include "planner/executable.h"

namespace oomb::planner {

bool executable(const simulator::Config& c, std::string* why) {
  std::string reason;
  auto storable = [](const std::string& d) { return d == "fp32" || d == "bf16"; };
  if (c.schedule != simulator::Schedule::oomb)
    reason = "the standard schedule is a baseline on paper: the executor runs the oomb schedule";
  else if (c.implementation == simulator::Implementation::published)
    reason = "it describes the published implementation's memory (--preset oomb-published), which is modelled, not "
             "run: plan without the preset for this project's executor";
  else if (c.attention == simulator::Attention::sparse && c.selection != "published" && c.selection != "per-kv-head")
    reason = "selection rule " + c.selection + " is modelled, not executed (the executor runs published and per-kv-head)";
  else if (c.lora_rank > 0 && c.lora_train_embeddings)
    reason = "LoRA with trained embeddings and LM head (--lora-train-embeddings) is planned on paper: the executor "
             "trains adapters on a wholly frozen base";
  else if (!storable(c.kv_dtype) || !storable(c.kv_grad_dtype))
    reason = "the executor stores KV and KV-gradient pages as fp32 or bf16 (the plan says " + c.kv_dtype + " / " +
             c.kv_grad_dtype + ")";
  else if (!storable(c.param_dtype) || !storable(c.param_grad_dtype) || !storable(c.activation_dtype) ||
           !storable(c.loss_dtype))
    reason = "the executor stores weights, gradients, activations and the loss as fp32 or bf16";
  else if (c.gpus > 1 && c.lora_rank > 0)
    reason = "LoRA under tensor parallelism is planned on paper: the executor runs it on one GPU";
  if (why) *why = reason.empty() ? std::string() : reason + "; re-plan with settings the executor runs";
  return reason.empty();
}

}  // namespace oomb::planner
