#include "planner/knobs.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/units.h"
#include "planner/defaults.h"

namespace oomb::planner {

double finite_in(double v, double lo, double hi, const std::string& flag, const std::string& hint) {
  if (!std::isfinite(v) || v < lo || v > hi) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", v);
    throw Error(flag, b, "must be a finite number in [" + format_number(lo) + ", " + format_number(hi) + "]", hint);
  }
  return v;
}

std::string format_number(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

simulator::Scenario Knobs::resolve() const {
  using namespace simulator;
  // The training defaults and --optimizer auto: resolve the rest as given, then apply them.
  if (training_defaults || (optimizer && *optimizer == "auto")) {
    if (optimizer && *optimizer != "auto" && *optimizer != "none" && *optimizer != "gpu" && *optimizer != "host")
      throw Error("--optimizer", *optimizer, "unknown value",
                  "one of auto (AdamW, placed on the GPU or the host), gpu, host, none");
    Knobs plain = *this;
    plain.training_defaults = false;
    if (plain.optimizer && *plain.optimizer == "auto") plain.optimizer.reset();
    Scenario s = plain.resolve();
    if (optimizer_auto()) s.config.optimizer = step::Optimizer::gpu;  // placed by the planner or place_optimizer
    if (training_defaults && !logits_chunk && preset != "oomb-published")
      s.config.logits_chunk_tokens = planner::kDefaultLogitsChunk;
    if (s.config.context_tokens > 0) validate(s.config, s.model);
    return s;
  }
  Scenario s;
  s.model = models::load_model(model);
  s.gpu = models::load_gpu(gpu);
  std::string host_id = host.empty() ? s.gpu.default_host : host;
  if (host_id.empty()) throw Error("--host", "", "the GPU profile names no default host", "give --host ID (see `oomb models`)");
  s.host = models::load_host(host_id);
  step::Config& c = s.config;
  if (!context.empty()) c.context_tokens = parse_tokens(context, "--context");
  if (layers) {
    if (*layers <= 0 || *layers > s.model.layers)
      throw Error("--layers", std::to_string(*layers), "must be between 1 and the model's " +
                  std::to_string(s.model.layers) + " layers");
    c.layers_override = *layers;
  }
  if (gpus) {
    if (*gpus <= 0 || *gpus > 1024) throw Error("--gpus", std::to_string(*gpus), "must be in [1, 1024]", "1, 2, 4 or 8");
    c.gpus = *gpus;
  }
  if (data_parallel) {
    if (*data_parallel <= 0 || *data_parallel > kMaxDataParallel)
      throw Error("--data-parallel", std::to_string(*data_parallel),
                  "must be in [1, " + std::to_string(kMaxDataParallel) + "]",
                  "replicas training on different sequences, e.g. 2");
    c.data_parallel = *data_parallel;
  }
  if (nodes) {
    if (*nodes <= 0 || *nodes > kMaxNodes)
      throw Error("--nodes", std::to_string(*nodes), "must be in [1, " + std::to_string(kMaxNodes) + "]",
                  "the nodes the job's GPUs are on, e.g. 2");
    c.nodes = *nodes;
  }
  if (attention) c.attention = step::attention_from_string(*attention, "--attention");
  if (!preset.empty() && !apply_preset(preset, c))
    throw Error("--preset", preset, "unknown preset", "oomb-published or oomb");
  if (schedule) c.schedule = step::schedule_from_string(*schedule, "--schedule");
  if (chunk) c.chunk_tokens = parse_tokens(*chunk, "--chunk");
  if (page) c.page_tokens = parse_tokens(*page, "--page");
  if (budget) {
    // A budget counts pages of the context: beyond 2^40 it selects more than any context holds.
    if (*budget <= 0 || *budget > (int64_t{1} << 40))
      throw Error("--budget", std::to_string(*budget), "must be in [1, 2^40] pages", "pages per query page, e.g. 64");
    c.page_budget = *budget;
  }
  if (selection) c.selection = *selection;
  if (selection_overlap)
    c.selection_overlap = finite_in(*selection_overlap, 0, 1, "--selection-overlap", "0 = disjoint selections, 1 = identical");
  if (page_copy_latency_s) {
    const double v = finite_in(*page_copy_latency_s, 0, 0.1, "--page-copy-latency",
                               "seconds per blocking copy, e.g. 1e-05 (the preset's 10 us)");
    // A term of the published implementation's write-backs (docs/model.md, pages in flight); this
    // project's executor waits for its copies and has no such term.
    if (c.implementation != step::Implementation::published)
      throw Error("--page-copy-latency", "", "models the published implementation's blocking page copies only",
                  "add --preset oomb-published");
    c.page_copy_latency_s = v;
  }
  if (selection_memory) c.selection_memory = step::selection_memory_from_string(*selection_memory, "--selection-memory");
  if (resident_layers) {
    const int64_t L = step::effective_layers(c, s.model);  // --layers counts: 'all' is all that run
    if (*resident_layers == "all") c.resident_layers = L;
    else c.resident_layers = parse_tokens(*resident_layers, "--resident-layers");
    if (c.resident_layers > L)
      throw Error("--resident-layers", *resident_layers,
                  "is more than the " + std::to_string(L) + " layers of " + s.model.id +
                      (c.layers_override > 0 ? " (--layers)" : ""),
                  "1.." + std::to_string(L) + " or 'all' (no offload)");
  }
  if (kv_dtype) c.kv_dtype = storage_dtype_from_string(*kv_dtype, "--kv-dtype");
  if (kv_grad_dtype) c.kv_grad_dtype = storage_dtype_from_string(*kv_grad_dtype, "--kv-grad-dtype");
  if (param_dtype) c.param_dtype = storage_dtype_from_string(*param_dtype, "--param-dtype");
  if (param_grad_dtype) c.param_grad_dtype = storage_dtype_from_string(*param_grad_dtype, "--param-grad-dtype");
  if (activation_dtype) c.activation_dtype = storage_dtype_from_string(*activation_dtype, "--activation-dtype");
  if (optimizer) c.optimizer = step::optimizer_from_string(*optimizer, "--optimizer");
  if (checkpointing) c.checkpointing = *checkpointing;
  if (shard_optimizer) c.shard_optimizer = *shard_optimizer;
  if (kept_layers) c.kept_layers = *kept_layers;
  if (logits_chunk) c.logits_chunk_tokens = *logits_chunk == "0" ? 0 : parse_tokens(*logits_chunk, "--logits-chunk");
  if (peak_measure) c.peak_measure = step::peak_measure_from_string(*peak_measure, "--peak-measure");
  if (loss_dtype) c.loss_dtype = storage_dtype_from_string(*loss_dtype, "--loss-dtype");
  if (lora_rank) c.lora_rank = *lora_rank;
  if (lora_alpha) c.lora_alpha = finite_in(*lora_alpha, 1e-6, 1e6, "--lora-alpha", "e.g. 16 (PEFT's default is 8)");
  if (router_aux_loss)
    c.router_aux_loss_coef = finite_in(*router_aux_loss, 0, 1e6, "--router-aux-loss", "e.g. 0.001 (Qwen3-MoE's)");
  if (lora_targets) c.lora_targets = step::lora_targets_from_string(*lora_targets, "--lora-targets");
  if (lora_train_embeddings) c.lora_train_embeddings = *lora_train_embeddings;
  if (c.lora_rank == 0 && (lora_alpha || lora_targets || lora_train_embeddings))
    throw Error(lora_alpha ? "--lora-alpha" : lora_targets ? "--lora-targets" : "--lora-train-embeddings", "",
                "sets up LoRA, and no --lora-rank is given", "add --lora-rank R (e.g. 16)");
  if (c.context_tokens > 0) validate(c, s.model);
  return s;
}

bool Knobs::optimizer_auto() const {
  if (optimizer) return *optimizer == "auto";
  return training_defaults && preset != "oomb-published";
}

std::set<std::string> Knobs::explicit_knobs() const {
  std::set<std::string> k;
  auto note = [&](const char* name, bool set) {
    if (set) k.insert(name);
  };
  note("schedule", schedule.has_value());
  note("attention", attention.has_value());
  note("chunk", chunk.has_value());
  note("page", page.has_value());
  note("budget", budget.has_value());
  note("selection", selection.has_value());
  note("selection_overlap", selection_overlap.has_value());
  note("page_copy_latency", page_copy_latency_s.has_value());
  note("selection_memory", selection_memory.has_value());
  note("resident_layers", resident_layers.has_value());
  note("kv_dtype", kv_dtype.has_value());
  note("kv_grad_dtype", kv_grad_dtype.has_value());
  note("param_dtype", param_dtype.has_value());
  note("param_grad_dtype", param_grad_dtype.has_value());
  note("activation_dtype", activation_dtype.has_value());
  note("optimizer", optimizer.has_value());
  note("checkpointing", checkpointing.has_value());
  note("kept_layers", kept_layers.has_value());
  note("logits_chunk", logits_chunk.has_value());
  note("peak_measure", peak_measure.has_value());
  note("loss_dtype", loss_dtype.has_value());
  note("data_parallel", data_parallel.has_value());
  note("nodes", nodes.has_value());
  note("shard_optimizer", shard_optimizer.has_value());
  note("lora_rank", lora_rank.has_value());
  note("lora_alpha", lora_alpha.has_value());
  note("router_aux_loss_coef", router_aux_loss.has_value());
  note("lora_targets", lora_targets.has_value());
  note("lora_train_embeddings", lora_train_embeddings.has_value());
  return k;
}

}  // namespace oomb::planner
