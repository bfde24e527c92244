#include "cli/scenario_flags.h"

#include "core/error.h"
#include "core/units.h"

namespace oomb::cli {

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
                 "2 resident layers, fp32 KV-grad, bf16 param-grad, per-chunk full-vocab logits, selection state on "
                 "the GPU, peak as allocated bytes) or oomb (our defaults)");
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
  app.add_option("--optimizer", optimizer, "AdamW state: none (default), gpu, host");
  app.add_option("--checkpointing", checkpointing, "Per-layer checkpointing inside the chunk: true (default) or false");
  app.add_option("--logits-chunk", logits_chunk,
                 "Tokens per fused LM-head/loss tile (e.g. 1K); 0 = whole chunk, unfused (default)");
  app.add_option("--peak-measure", peak_measure,
                 "reserved (include the runtime reserve, default) or allocated (as PyTorch's max_memory_allocated)");
  app.add_option("--gpus", gpus, "Tensor-parallel GPUs (planning only; execution is single-GPU)");
  app.add_option("--layers", layers, "Only the first N layers (quick validation runs)");
}

simulator::Scenario ScenarioFlags::resolve() const {
  using namespace simulator;
  Scenario s;
  s.model = models::load_model(model);
  s.gpu = models::load_gpu(gpu);
  std::string host_id = host.empty() ? s.gpu.default_host : host;
  if (host_id.empty()) throw Error("--host", "", "the GPU profile names no default host", "give --host ID (see `oomb models`)");
  s.host = models::load_host(host_id);
  Config& c = s.config;
  if (!context.empty()) c.context_tokens = parse_tokens(context, "--context");
  if (layers) c.layers_override = *layers;
  if (gpus) c.gpus = *gpus;
  if (attention) c.attention = attention_from_string(*attention, "--attention");
  if (!preset.empty() && !apply_preset(preset, c))
    throw Error("--preset", preset, "unknown preset", "oomb-published or oomb");
  if (schedule) c.schedule = schedule_from_string(*schedule, "--schedule");
  if (chunk) c.chunk_tokens = parse_tokens(*chunk, "--chunk");
  if (page) c.page_tokens = parse_tokens(*page, "--page");
  if (budget) c.page_budget = *budget;
  if (selection) c.selection = *selection;
  if (selection_overlap) c.selection_overlap = *selection_overlap;
  if (selection_memory) c.selection_memory = selection_memory_from_string(*selection_memory, "--selection-memory");
  if (resident_layers) {
    if (*resident_layers == "all") c.resident_layers = s.model.layers;
    else c.resident_layers = parse_tokens(*resident_layers, "--resident-layers");
  }
  if (kv_dtype) c.kv_dtype = *kv_dtype;
  if (kv_grad_dtype) c.kv_grad_dtype = *kv_grad_dtype;
  if (param_dtype) c.param_dtype = *param_dtype;
  if (param_grad_dtype) c.param_grad_dtype = *param_grad_dtype;
  if (optimizer) c.optimizer = optimizer_from_string(*optimizer, "--optimizer");
  if (checkpointing) c.checkpointing = *checkpointing;
  if (logits_chunk) c.logits_chunk_tokens = *logits_chunk == "0" ? 0 : parse_tokens(*logits_chunk, "--logits-chunk");
  if (peak_measure) c.peak_measure = peak_measure_from_string(*peak_measure, "--peak-measure");
  if (c.context_tokens > 0) validate(c, s.model);
  return s;
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
  note("optimizer", optimizer.has_value());
  note("checkpointing", checkpointing.has_value());
  note("logits_chunk", logits_chunk.has_value());
  note("peak_measure", peak_measure.has_value());
  return k;
}

}  // namespace oomb::cli
