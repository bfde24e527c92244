#include "cli/scenario_flags.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "planner/defaults.h"

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

void ScenarioFlags::add_to(CLI::App& app, bool require_context) {
  app.add_option("--model", model, "Model: catalog id (see `oomb models`), a path to an oomb.model/1 JSON file, or a Hugging Face "
                 "config.json or model folder")
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
  app.add_option("--gpus", gpus, "Tensor-parallel GPUs (planning only; execution is single-GPU)");
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

simulator::Scenario ScenarioFlags::resolve() const {
  using namespace simulator;
  // The training defaults and --optimizer auto: resolve the rest as given, then apply them.
  if (training_defaults || (optimizer && *optimizer == "auto")) {
    if (optimizer && *optimizer != "auto" && *optimizer != "none" && *optimizer != "gpu" && *optimizer != "host")
      throw Error("--optimizer", *optimizer, "unknown value",
                  "one of auto (AdamW, placed on the GPU or the host), gpu, host, none");
    ScenarioFlags plain = *this;
    plain.training_defaults = false;
    if (plain.optimizer && *plain.optimizer == "auto") plain.optimizer.reset();
    Scenario s = plain.resolve();
    if (optimizer_auto()) s.config.optimizer = Optimizer::gpu;  // placed by the planner or place_optimizer
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
  Config& c = s.config;
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
  if (attention) c.attention = attention_from_string(*attention, "--attention");
  if (!preset.empty() && !apply_preset(preset, c))
    throw Error("--preset", preset, "unknown preset", "oomb-published or oomb");
  if (schedule) c.schedule = schedule_from_string(*schedule, "--schedule");
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
  if (selection_memory) c.selection_memory = selection_memory_from_string(*selection_memory, "--selection-memory");
  if (resident_layers) {
    const int64_t L = effective_layers(c, s.model);  // --layers counts: 'all' is all that run
    if (*resident_layers == "all") c.resident_layers = L;
    else c.resident_layers = parse_tokens(*resident_layers, "--resident-layers");
    if (c.resident_layers > L)
      throw Error("--resident-layers", *resident_layers,
                  "is more than the " + std::to_string(L) + " layers of " + s.model.id +
                      (c.layers_override > 0 ? " (--layers)" : ""),
                  "1.." + std::to_string(L) + " or 'all' (no offload)");
  }
  if (kv_dtype) c.kv_dtype = *kv_dtype;
  if (kv_grad_dtype) c.kv_grad_dtype = *kv_grad_dtype;
  if (param_dtype) c.param_dtype = *param_dtype;
  if (param_grad_dtype) c.param_grad_dtype = *param_grad_dtype;
  if (activation_dtype) c.activation_dtype = *activation_dtype;
  if (optimizer) c.optimizer = optimizer_from_string(*optimizer, "--optimizer");
  if (checkpointing) c.checkpointing = *checkpointing;
  if (kept_layers) c.kept_layers = *kept_layers;
  if (logits_chunk) c.logits_chunk_tokens = *logits_chunk == "0" ? 0 : parse_tokens(*logits_chunk, "--logits-chunk");
  if (peak_measure) c.peak_measure = peak_measure_from_string(*peak_measure, "--peak-measure");
  if (loss_dtype) c.loss_dtype = *loss_dtype;
  if (c.context_tokens > 0) validate(c, s.model);
  return s;
}

bool ScenarioFlags::optimizer_auto() const {
  if (optimizer) return *optimizer == "auto";
  return training_defaults && preset != "oomb-published";
}

std::set<std::string> ScenarioFlags::explicit_knobs() const {
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
  return k;
}

}  // namespace oomb::cli
