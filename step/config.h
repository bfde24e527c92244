#pragma once
// The knobs of one training configuration: what the simulator predicts, the planner searches and
// the executor runs (part of the description of one step, step/README.md). Defaults are oomb's own (exact dense gradients, bounded selection memory; the
// loss over the whole chunk unless --logits-chunk or the planner picks fused tiles);
// `published_preset()` reproduces the published OOMB configuration.
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"
#include "models/specs.h"

namespace oomb::step {

enum class Schedule { oomb, standard };
enum class Attention { dense, sparse };
enum class Optimizer { none, gpu, host };  // AdamW state placement (none = no optimizer state)
// Where the sparse-selection state lives: "device" (published: page summaries and the full
// query x page score matrix on the GPU, both growing with N) or "bounded" (summaries in the host
// tier, scores computed in fixed-size tiles with a running top-k: flat in N).
enum class SelectionMemory { device, bounded };
// What "peak device bytes" means: "reserved" counts the runtime reserve (context, workspaces) as
// a real GPU user would see it; "allocated" leaves it out, as the published measurement does.
enum class PeakMeasure { reserved, allocated };
// Whose memory the buffer table describes on a GPU: "oomb" (this project's executor: what its CUDA
// backend allocates, docs/model.md) or "published" (the published PyTorch implementation, for
// `--preset oomb-published`: its device score matrix and page tables; modelled, never run).
enum class Implementation { oomb, published };

const char* to_string(Schedule v);
const char* to_string(Attention v);
const char* to_string(Optimizer v);
const char* to_string(SelectionMemory v);
const char* to_string(PeakMeasure v);
const char* to_string(Implementation v);
Schedule schedule_from_string(const std::string& s, const std::string& where);
Attention attention_from_string(const std::string& s, const std::string& where);
Optimizer optimizer_from_string(const std::string& s, const std::string& where);
SelectionMemory selection_memory_from_string(const std::string& s, const std::string& where);
PeakMeasure peak_measure_from_string(const std::string& s, const std::string& where);
Implementation implementation_from_string(const std::string& s, const std::string& where);

// Page-selection rules of ALGORITHM.md section 5 (names as used on the command line).
// "published" (GQA-summed query vs page mean key, one set per query page), "per-kv-head",
// "quest" (min/max key bounds), "moba" (mean-pooled block keys per head), "local" (window only).
bool is_known_selection(const std::string& s);

struct Config {
  Schedule schedule = Schedule::oomb;
  Attention attention = Attention::dense;
  int64_t context_tokens = 0;
  int64_t chunk_tokens = 4096;  // oomb: tokens per chunk (multiple of page_tokens)
  int64_t page_tokens = 128;
  int64_t page_budget = 64;     // sparse: selected earlier pages per query page
  std::string selection = "published";
  // Sparse only: share of a query page's selection already selected by earlier query pages of the
  // same chunk. The union of a chunk's selections is modelled as
  //   min(prefix_pages, B * (1 + (q - 1) * (1 - overlap))), q = chunk_tokens / page_tokens.
  // 0 = disjoint selections (worst case, union = q * B); 1 = all query pages pick the same B.
  double selection_overlap = 0.75;
  // Layers whose KV (and KV-gradient) pages may be on the GPU at once: the layer being computed
  // plus (resident_layers - 1) being prefetched. >= model layers means no offload (all on GPU).
  int64_t resident_layers = 2;
  Dtype kv_dtype = Dtype::bf16;
  Dtype kv_grad_dtype = Dtype::fp32;
  Dtype param_dtype = Dtype::bf16;
  Dtype param_grad_dtype = Dtype::bf16;
  Dtype activation_dtype = Dtype::bf16;
  Optimizer optimizer = Optimizer::none;
  bool checkpointing = true;           // per-layer checkpointing (inside the chunk for oomb)
  // Partial checkpointing: with checkpointing on, the last kept_layers layers of the (effective)
  // layer stack keep their activations from the forward that computes them (oomb: the chunk's
  // stage-2 recompute pass) to their backward, which then does not re-run their forward; the other
  // layers are recomputed from their input checkpoints. 0 = full checkpointing; valid: 0 <= k < L
  // with checkpointing on (k = L is checkpointing off: say so), 0 with it off.
  int64_t kept_layers = 0;
  // Tokens per tile of the LM-head + cross-entropy. 0 = one tile of the whole chunk (oomb) or the
  // whole sequence (standard), unfused (bf16 logits, fp32 upcast and fp32 gradient, as PyTorch's
  // cross-entropy does); > 0 = fused chunked loss (fp32 tile + bf16 gradient tile only).
  int64_t logits_chunk_tokens = 0;
  // Storage of the logits' softmax and gradient: "fp32" (upcast, as many frameworks do) or "bf16"
  // (the published code: no upcast). Fused tiles hold the logits in it; unfused, the LM head writes
  // activation-dtype logits and an upcast copy exists when it differs (docs/model.md).
  Dtype loss_dtype = Dtype::fp32;
  SelectionMemory selection_memory = SelectionMemory::bounded;
  int64_t selection_tile_pages = 4096;  // bounded selection: pages scored per tile
  PeakMeasure peak_measure = PeakMeasure::reserved;
  Implementation implementation = Implementation::oomb;
  // The published implementation only (docs/model.md, pages in flight): the fixed cost of one of
  // the blocking page copies its write-back worker issues one after another (a copy to pinned host
  // memory and the wait for it), on top of the bytes at the GPU profile's d2h rate. A page is four
  // copies (K, V and their gradients). Written to documents only with "implementation": "published".
  double page_copy_latency_s = 10e-6;
  // The published implementation only (docs/model.md, "How it measures"): the first context of the
  // measuring process's sweep. The published test runs its contexts in ascending order in one
  // process and never frees a parameter gradient, so only a step at (or below) this context starts
  // without them: they are made by its first backward. 0 = every step finds them allocated. Written
  // to documents only with "implementation": "published".
  int64_t sweep_first_context = 0;
  int64_t gpus = 1;                    // tensor parallelism degree (docs/model.md "Tensor parallelism") (planning only)
  // Data parallelism: replicas (one process and GPU each, the same buffer table per rank) train on
  // different sequences, their parameter gradients all-reduced (summed, then averaged) before every
  // optimizer step. Run under MPI (`mpirun -np N oomb run`): the CPU backend's collectives are MPI's,
  // the CUDA backend's NCCL's.
  int64_t data_parallel = 1;
  // Nodes the job's gpus x data_parallel processes spread over, evenly, each tensor-parallel group
  // inside one node (data_parallel divisible by nodes): the replicas on a node share its host RAM,
  // pinnable memory and memory bandwidth, and with more than one node the replicas' gradient
  // all-reduce crosses the host profile's network (network_bytes_per_s, network_step_latency_s).
  int64_t nodes = 1;
  // ZeRO-1 (DeepSpeed's stage 1): the AdamW state (master weights, moments, decay mask; with the
  // optimizer on the host, its gradient and weight copies too) sharded over the data-parallel
  // replicas, each updating 1/data_parallel of the trained parameters: the gradients reduce-scattered
  // instead of all-reduced, the updated weights all-gathered. Full fine-tuning with an optimizer and
  // data_parallel > 1 only.
  bool shard_optimizer = false;
  // With tensor parallelism: the hidden-wide activations (layer inputs, norms, residuals) are split
  // over the gpus along the sequence, as Megatron-LM's sequence parallelism does (the head- and
  // ffn-wide ones are split by tensor parallelism itself). The context-parallel layouts use it.
  bool sequence_parallel = false;
  // LoRA (parameter-efficient fine-tuning as Hugging Face PEFT does it): rank r > 0 trains low-rank
  // adapters y = W x + (alpha / r) B A x (A: [r, in], B: [out, r], fp32) on the targeted projections
  // of a frozen base; the embeddings and the LM head are frozen unless lora_train_embeddings (PEFT's
  // modules_to_save). 0 = full fine-tuning. Defaults: PEFT's LoraConfig (lora_alpha 8) and its
  // target modules for llama / qwen2 (q_proj, v_proj).
  int64_t lora_rank = 0;
  double lora_alpha = 8;
  std::vector<std::string> lora_targets = {"q_proj", "v_proj"};
  bool lora_train_embeddings = false;
  // A mixture of experts: the weight of the load-balancing auxiliary loss added to the cross-entropy
  // (Hugging Face's router_aux_loss_coef with output_router_logits: E x sum_e f_e P_e over every MoE
  // layer's tokens, f_e the share of routed copies sent to expert e, P_e its mean router
  // probability; docs/model.md "Layer kinds and experts"). 0 = off (default; absent from the JSON).
  double router_aux_loss_coef = 0;
  int64_t layers_override = 0;         // > 0: run/predict only the first N layers (validation runs)

  Json to_json() const;
};

Config config_from_json(const Json& j, const std::string& where);
// chunk 4096, page 128, budget 64, resident 2, bf16 KV, fp32 KV-grad, bf16 param-grad, no
// optimizer, checkpointing, per-chunk unfused full-vocabulary bf16 logits and bf16 cross-entropy
// (no upcast), device selection memory, peak as allocated bytes.
Config published_preset(Config base);
// Names accepted by --preset.
bool apply_preset(const std::string& name, Config& c);  // false when unknown

// Checks the config against a model (page divides chunk, budget > 0 in sparse mode, heads
// divisible by gpus, known dtypes and selection, context within int64 sizes). Throws oomb::Error
// naming the flag (`--chunk`, ...) and what would be valid.
void validate(const Config& c, const models::ModelSpec& m);
// validate() for a configuration read from a document (a trace's or a plan's config): errors name
// `where` and the config key (context_tokens) instead of a flag nobody passed (--context).
void validate_document(const Config& c, const models::ModelSpec& m, const std::string& where);
// The flag that sets a configuration key ("kv_dtype" -> "--kv-dtype"; the key itself when none does):
// the one vocabulary validate_document reads the other way.
std::string config_flag(const std::string& key);
// The projections LoRA may target (PEFT's module names), in layer order; "all-linear" (PEFT's
// spelling) names them all.
const std::vector<std::string>& lora_target_names();
// "q_proj,v_proj" or "all-linear" -> the list; Error naming `flag` for an unknown or repeated name.
std::vector<std::string> lora_targets_from_string(const std::string& text, const std::string& flag);
std::string lora_targets_text(const std::vector<std::string>& targets);  // "q_proj, v_proj"
// Largest page budget validate() accepts (keeps budget x pages within int64).
constexpr int64_t kMaxPageBudget = int64_t{1} << 20;

// Effective layer count (layers_override or model layers) and resident layer count (clamped).
int64_t effective_layers(const Config& c, const models::ModelSpec& m);
// Of the effective layers, those with global attention: the paged pools and the offload are theirs
// (sliding and chunked layers keep the pages of their reach on the device: docs/model.md "Layer
// kinds and experts"). All of them for the dense families.
int64_t global_layers(const Config& c, const models::ModelSpec& m);
bool offloads(const Config& c, const models::ModelSpec& m);  // resident_layers < global layers
// Layers whose backward re-runs their forward: L - kept_layers with checkpointing on, 0 off. They
// are the first ones of the stack (0 .. recomputed - 1); the rest keep their activations.
int64_t recomputed_layers(const Config& c, const models::ModelSpec& m);

}  // namespace oomb::step
