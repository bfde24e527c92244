#include "cli/scenario_flags.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"

namespace oomb::cli {

CLI::Validator boolean_word() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        for (const char* w : {"true", "false", "on", "off", "yes", "no", "1", "0"})
          if (v == w) return {};
        return "'" + v + "' is not true or false";
      },
      "true|false");
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
          return "'" + v + "' is not a non-negative integer";
        if (v.size() == 20 && v > "18446744073709551615") return "'" + v + "' does not fit 64 bits";
        return {};
      },
      "UINT");
}

void ScenarioFlags::add_to(CLI::App& app, bool require_context) {
  app.add_option("--model", model, "Model: catalog id (see `oomb models`), a path to an oomb.model/1 JSON file, or a Hugging Face "
                 "config.json or model folder. A catalog id wins over a folder of that name: an argument is a path "
                 "only when it has a '/' or ends in .json (./tiny is the folder, tiny the catalog entry)")
      ->capture_default_str();
  app.add_option("--gpu", gpu, "GPU: catalog id or path to an oomb.gpu/1 JSON file (e.g. a calibrated profile)")
      ->capture_default_str();
  app.add_option("--host", host, "Host: catalog id or path to an oomb.host/1 JSON file (default: the GPU's usual host)");
  auto* ctx = app.add_option("--context", context, "Context length in tokens: 4096, 128K (x1024), 4M (x1048576)");
  if (require_context) ctx->required();
  app.add_option("--preset", preset,
                 "Start from a preset: oomb-published (the published configuration: chunk 4096, page 128, budget 64, "
                 "2 resident layers, fp32 KV-grad, bf16 param-grad, per-chunk full-vocab bf16 logits and loss, selection "
                 "state on the GPU, peak as allocated bytes) or oomb (our defaults)");
  app.add_option("--schedule", schedule, "oomb (chunk-recurrent, default) or standard (full-sequence training)");
  app.add_option("--attention", attention, "dense (exact gradients, default) or sparse (page-level top-B selection)");
  app.add_option("--chunk", chunk, "Tokens per chunk, a multiple of --page (default 4096)");
  app.add_option("--page", page, "Tokens per KV page (default 128)");
  app.add_option("--budget", budget, "Sparse: earlier pages selected per query page (default 64)");
  app.add_option("--selection", selection, "Sparse selection rule: published, per-kv-head, quest, moba, local");
  app.add_option("--selection-overlap", selection_overlap,
                 "Sparse: assumed share of a query page's selection already chosen by the chunk's other query pages, "
                 "0..1 (default 0.75); sets the modelled union of selections");
  app.add_option("--page-copy-latency", page_copy_latency_s,
                 "With --preset oomb-published: seconds each of the published write-back's blocking page copies "
                 "costs besides its bytes (default 1e-05; docs/model.md, pages in flight), for what-if runs of that "
                 "uncited term");
  app.add_option("--selection-memory", selection_memory,
                 "Sparse: device (published: summaries and scores on the GPU, grow with N) or bounded (host tier + "
                 "tiles, flat in N; default)");
  app.add_option("--resident-layers", resident_layers,
                 "Layers whose KV pages may be on the GPU at once (default 2); 'all' = no offload");
  app.add_option("--kv-dtype", kv_dtype, "KV page dtype: bf16 (default), fp16, fp32, fp8");
  app.add_option("--kv-grad-dtype", kv_grad_dtype, "KV-gradient page dtype: fp32 (default) or bf16");
  app.add_option("--param-dtype", param_dtype, "Parameter dtype: bf16 (default) or fp32");
  app.add_option("--param-grad-dtype", param_grad_dtype, "Parameter-gradient dtype: bf16 (default) or fp32");
  app.add_option("--activation-dtype", activation_dtype,
                 "Activation and checkpoint dtype: bf16 (default) or fp32 (oomb run: fp32 unless given or planned)");
  app.add_option("--optimizer", optimizer, "AdamW state: none (default), gpu, host");
  app.add_option("--checkpointing", checkpointing, "Per-layer checkpointing inside the chunk: true (default) or false")
      ->check(boolean_word());
  app.add_option("--kept-layers", kept_layers,
                 "Partial checkpointing: the last K layers keep their activations from the forward to their backward "
                 "(no recompute for them; K sets of activations more on the GPU), the others are recomputed from "
                 "their inputs. 0 = full checkpointing (default), at most layers - 1 (all kept is --checkpointing "
                 "false); needs checkpointing on")
      ->check(unsigned_integer());
  app.add_option("--logits-chunk", logits_chunk,
                 "Tokens per fused LM-head/loss tile (e.g. 1K); 0 = whole chunk, unfused (default)");
  app.add_option("--loss-dtype", loss_dtype,
                 "Logits softmax and gradient storage: fp32 (upcast, default) or bf16 (no upcast, as published)");
  app.add_option("--peak-measure", peak_measure,
                 "reserved (include the runtime reserve, default) or allocated (as PyTorch's max_memory_allocated)");
  app.add_option("--gpus", gpus,
                 "Tensor-parallel GPUs sharing each layer (heads, MLP columns and the vocabulary split over them; "
                 "KV pages per GPU 1/N). oomb run executes it one process per GPU under MPI: mpirun -np N oomb run "
                 "... --gpus N (--backend cuda: NCCL's collectives; --backend cpu: MPI's)");
  app.add_option("--data-parallel", data_parallel,
                 "Data-parallel replicas, 1..4096: each trains on its own sequence (one process and GPU each), the "
                 "parameter gradients all-reduced before every optimizer step; device memory per replica is the "
                 "one-GPU plan's (less with --shard-optimizer), the step adds what the backward does not hide of "
                 "the all-reduce. oomb run executes it under MPI: mpirun -np N oomb run ... "
                 "(CPU: MPI's collectives; CUDA: NCCL's)")
      ->check(unsigned_integer());
  app.add_option("--nodes", nodes,
                 "Nodes the job spreads over, evenly (default 1): each tensor-parallel group stays inside a node, "
                 "the replicas on a node share its host RAM, pinned memory and memory bandwidth, and the replicas' "
                 "gradient all-reduce crosses the host's network (network_bytes_per_s of the host profile). On "
                 "oomb plan, --gpus N --nodes M plans M nodes of N GPUs")
      ->check(unsigned_integer());
  app.add_option("--shard-optimizer", shard_optimizer,
                 "ZeRO-1: shard the AdamW state (master weights, moments; a host optimizer's copies) over the "
                 "data-parallel replicas, true or false (default false; oomb plan searches both): each replica "
                 "updates 1/D of the parameters, the gradients reduce-scattered and the weights all-gathered instead "
                 "of all-reduced. Full fine-tuning with --data-parallel 2 or more")
      ->check(boolean_word());
  app.add_option("--lora-rank", lora_rank,
                 "LoRA: train rank-R adapters (y = W x + (alpha / R) B A x, fp32 as PEFT makes them) on a frozen "
                 "base: no gradients or optimizer state for the base, no weight-gradient GEMMs for it in the "
                 "backward. 0 = full fine-tuning (default). oomb run trains them (--adapter / --save-adapter: PEFT folders)")
      ->check(unsigned_integer());
  app.add_option("--lora-alpha", lora_alpha, "LoRA scaling alpha (default 8, PEFT's; does not change memory or time)");
  app.add_option("--lora-targets", lora_targets,
                 "LoRA: the projections with adapters, PEFT's module names: q_proj, k_proj, v_proj, o_proj, gate_proj, "
                 "up_proj, down_proj (comma-separated) or all-linear (default q_proj,v_proj, PEFT's for llama and qwen2)");
  app.add_option("--lora-train-embeddings", lora_train_embeddings,
                 "LoRA: also train the embeddings and the LM head (PEFT's modules_to_save; default false: frozen)")
      ->check(boolean_word());
  app.add_option("--router-aux-loss", router_aux_loss,
                 "A mixture of experts: weight of the load-balancing auxiliary loss added to the loss (Hugging Face's "
                 "router_aux_loss_coef, e.g. 0.001 for Qwen3-MoE, 0.02 for Mixtral); 0 = off (default)");
  app.add_option("--layers", layers, "Only the first N layers (quick validation runs)");
  // plan, simulate and sweep: the training defaults (resolve() applies them).
  if (training_defaults) {
    app.get_option("--optimizer")
        ->description("AdamW state: auto (default: fp32 master weights + moments, on the GPU or the host as fits "
                      "best), gpu, host, none (no optimizer state: measurement settings such as --preset "
                      "oomb-published)");
    app.get_option("--logits-chunk")
        ->description("Tokens per fused LM-head/loss tile (default 1K); 0 = whole chunk, unfused (the published "
                      "baseline's loss)");
  }
}

}  // namespace oomb::cli
