// Inputs: model / GPU / host from the catalog, context on a log slider (8K..16M), every knob of
// step::Config, presets. Edits a copy of the inputs and hands it to the view-model once.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "step/capability.h"
#include "step/config.h"
#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

namespace {

using step::Config;

// note(item): a suffix shown after the item in the list and the item's tooltip ({"", ""}: none).
using ItemNote = std::function<std::pair<std::string, std::string>(const std::string&)>;

bool combo_strings(const char* label, std::string& value, const std::vector<std::string>& items, const char* help,
                   const ItemNote& note = {}) {
  bool changed = false;
  if (ImGui::BeginCombo(label, value.c_str())) {
    for (const auto& it : items) {
      const bool sel = it == value;
      const auto [suffix, tip] = note ? note(it) : std::pair<std::string, std::string>{};
      if (ImGui::Selectable((it + suffix).c_str(), sel)) {
        value = it;
        changed = true;
      }
      chart::formula_tooltip(tip);
      if (sel) ImGui::SetItemDefaultFocus();
    }
    ImGui::EndCombo();
  }
  chart::formula_tooltip(help);
  return changed;
}

template <typename E>
bool combo_enum(const char* label, E& value, std::initializer_list<E> items, const char* help) {
  bool changed = false;
  if (ImGui::BeginCombo(label, to_string(value))) {
    for (E it : items)
      if (ImGui::Selectable(to_string(it), it == value)) {
        value = it;
        changed = true;
      }
    ImGui::EndCombo();
  }
  chart::formula_tooltip(help);
  return changed;
}

bool combo_tokens(const char* label, int64_t& value, std::initializer_list<int64_t> items, const char* zero_name,
                  const char* help) {
  auto name = [&](int64_t v) { return v == 0 && zero_name ? std::string(zero_name) : format_tokens(v); };
  bool changed = false;
  if (ImGui::BeginCombo(label, name(value).c_str())) {
    for (int64_t it : items)
      if (ImGui::Selectable(name(it).c_str(), it == value)) {
        value = it;
        changed = true;
      }
    ImGui::EndCombo();
  }
  chart::formula_tooltip(help);
  return changed;
}

bool combo_count(const char* label, int64_t& value, const std::vector<int64_t>& items, const char* help) {
  bool changed = false;
  if (ImGui::BeginCombo(label, std::to_string(value).c_str())) {
    for (int64_t it : items)
      if (ImGui::Selectable(std::to_string(it).c_str(), it == value)) {
        value = it;
        changed = true;
      }
    ImGui::EndCombo();
  }
  chart::formula_tooltip(help);
  return changed;
}


}  // namespace

void draw_inputs_panel(ViewModel& vm, UiState& ui) {
  Inputs in = vm.inputs();
  step::Config& c = in.config;
  ImGui::PushItemWidth(-ImGui::GetFontSize() * 7.5f);

  static const std::vector<std::string> models = models::model_ids(), gpus = models::gpu_ids();
  static const std::vector<std::string> hosts = [] {
    std::vector<std::string> h = {"(GPU default)"};
    for (auto& id : models::host_ids()) h.push_back(id);
    return h;
  }();
  // A model given as a path (oomb.model/1 JSON, Hugging Face config.json or folder) stays selectable.
  static std::vector<std::string> model_items = models;
  if (std::find(model_items.begin(), model_items.end(), in.model) == model_items.end()) model_items.push_back(in.model);
  // Each catalog model's layer kinds, experts and parameters in its tooltip; those the executor does
  // not run yet (experts, window layers) marked, as oomb models marks them.
  static const std::map<std::string, std::pair<std::string, std::string>> model_notes = [] {
    std::map<std::string, std::pair<std::string, std::string>> notes;
    for (const auto& id : models::model_ids()) {
      const models::ModelSpec m = models::load_model(id);
      const bool runs = step::model_capability(m).executable();
      notes[id] = {runs ? "" : "  *",
                   "attention " + m.layer_kinds_text() + ", experts " + m.experts_text() + ", " +
                       format_params(m.param_count()) + " parameters (" + format_params(m.active_param_count()) +
                       " active)" +
                       (!runs             ? "\n* planned, not yet run: oomb run refuses it by name"
                        : m.moe.present() ? "\nruns in one process (no tensor or data parallelism yet)"
                                          : "")};
    }
    return notes;
  }();
  combo_strings("model", in.model, model_items,
                "models/llm/<id>.json: the published config of the model (or the file / Hugging Face folder given)",
                [](const std::string& id) {
                  const auto it = model_notes.find(id);
                  return it == model_notes.end() ? std::pair<std::string, std::string>{} : it->second;
                });
  combo_strings("GPU", in.gpu, gpus, "models/gpu/<id>.json: capacity, bandwidths, FLOP/s, link rates");
  std::string host = in.host.empty() ? hosts[0] : in.host;
  if (combo_strings("host", host, hosts, "models/host/<id>.json: RAM and pinnable bytes for offloaded pages"))
    in.host = host == hosts[0] ? "" : host;

  // Context: log2 slider, snapped to quarter octaves and whole K; or typed ("4M", "300K").
  float lg = static_cast<float>(std::log2(static_cast<double>(std::max<int64_t>(c.context_tokens, 1))));
  const std::string ctx_label = format_tokens(c.context_tokens) + " tokens";
  if (ImGui::SliderFloat("context", &lg, 13.0f, 24.0f, ctx_label.c_str())) {
    lg = std::round(lg * 4.0f) / 4.0f;
    c.context_tokens = std::max<int64_t>(1024, std::llround(std::exp2(static_cast<double>(lg)) / 1024.0) * 1024);
  }
  chart::formula_tooltip("sequence length of one training step, 8K .. 16M on a log scale (K = 1024, M = 1048576)");
  if (ImGui::InputText("type context", ui.context_text, sizeof(ui.context_text), ImGuiInputTextFlags_EnterReturnsTrue)) {
    try {
      c.context_tokens = parse_tokens(ui.context_text, "context");
    } catch (const Error&) {
      // An unparsable entry keeps the old value; the field shows what was typed.
    }
  }
  chart::formula_tooltip("e.g. 4M, 300K or 100000, then Enter");

  ImGui::Separator();
  for (const auto& p : ViewModel::presets()) {
    if (ImGui::Button(p.c_str())) {
      step::apply_preset(p, c);
    }
    chart::formula_tooltip(p == "oomb" ? "oomb's defaults: fp32 KV-grad, bounded selection memory, peak incl. reserve"
                                       : "the published OOMB configuration: chunk 4096, page 128, budget 64, 2 resident "
                                         "layers, per-chunk full-vocab logits, selection state on the GPU, peak as "
                                         "allocated bytes");
    ImGui::SameLine();
  }
  ImGui::TextDisabled("presets");
  if (ImGui::Button("plan for me")) {
    vm.set_inputs(in);
    ui.plan_message = vm.plan_for_me();
    in = vm.inputs();
  }
  chart::formula_tooltip("run the planner (oomb plan) for this model, GPU, host and context and load its settings; "
                         "sparse competes only when attention is sparse");
  ImGui::SameLine();
  if (ImGui::Button("export plan")) {
    const std::string err = vm.export_plan(ui.plan_path);
    ui.plan_message = err.empty() ? std::string("plan written to ") + ui.plan_path : err;
  }
  chart::formula_tooltip("write the current settings and their prediction as oomb.plan/1 JSON (oomb run --plan)");
  ImGui::SameLine();
  ImGui::SetNextItemWidth(-1);
  ImGui::InputText("##plan_path", ui.plan_path, sizeof(ui.plan_path));
  if (!ui.plan_message.empty()) ImGui::TextWrapped("%s", ui.plan_message.c_str());

  combo_enum("schedule", c.schedule, {step::Schedule::oomb, step::Schedule::standard},
             "oomb: chunk-recurrent; standard: full-sequence training with per-layer checkpointing");
  combo_enum("attention", c.attention, {step::Attention::dense, step::Attention::sparse},
             "dense: exact gradients; sparse: top-B page selection per query page");
  combo_tokens("chunk", c.chunk_tokens, {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}, nullptr,
               "tokens per chunk (a multiple of the page)");
  combo_tokens("page", c.page_tokens, {16, 32, 64, 128, 256, 512}, nullptr, "tokens per KV page");
  if (c.attention == step::Attention::sparse) {
    int budget = static_cast<int>(c.page_budget);
    if (ImGui::InputInt("budget", &budget, 8, 64)) c.page_budget = std::max(1, budget);
    chart::formula_tooltip("earlier pages selected per query page (B)");
    static const std::vector<std::string> sel = {"published", "per-kv-head", "quest", "moba", "local"};
    combo_strings("selection", c.selection, sel, "page-selection rule (ALGORITHM.md section 5)");
    float ov = static_cast<float>(c.selection_overlap);
    if (ImGui::SliderFloat("overlap", &ov, 0.0f, 1.0f, "%.2f")) c.selection_overlap = ov;
    chart::formula_tooltip("union of a chunk's selections = min(prefix, B x (1 + (q - 1) x (1 - overlap))), "
                           "q = chunk / page");
    combo_enum("sel. memory", c.selection_memory,
               {step::SelectionMemory::bounded, step::SelectionMemory::device},
               "bounded: summaries in the host tier, scores in tiles (flat in N); device: all on the GPU (grows with N)");
  }
  int64_t layers = 0;
  try {
    layers = models::load_model(in.model).layers;
  } catch (const std::exception&) {
    layers = 0;
  }
  if (layers > 0) {
    int resident = static_cast<int>(std::min<int64_t>(c.resident_layers, layers));
    const std::string fmt = resident >= layers ? "all (no offload)" : "%d";
    if (ImGui::SliderInt("resident", &resident, 1, static_cast<int>(layers), fmt.c_str())) c.resident_layers = resident;
    chart::formula_tooltip("layers whose KV pages may be on the GPU at once (computed + prefetched); all = no offload");
  }
  combo_enum("KV dtype", c.kv_dtype, {Dtype::bf16, Dtype::fp16, Dtype::fp32, Dtype::fp8}, "dtype of KV pages");
  combo_enum("KV-grad dtype", c.kv_grad_dtype, {Dtype::fp32, Dtype::bf16}, "dtype of KV-gradient pages (accumulated)");
  combo_enum("param dtype", c.param_dtype, {Dtype::bf16, Dtype::fp32}, "dtype of the weights");
  combo_enum("grad dtype", c.param_grad_dtype, {Dtype::bf16, Dtype::fp32}, "dtype of the parameter gradients");
  combo_enum("optimizer", c.optimizer, {step::Optimizer::none, step::Optimizer::gpu, step::Optimizer::host},
             "AdamW state: none, on the GPU, or on the host (gradients go down, parameters come back)");
  ImGui::Checkbox("checkpointing", &c.checkpointing);
  chart::formula_tooltip("per-layer checkpointing (inside the chunk for oomb)");
  // Partial checkpointing: 0 .. L-1 kept layers, only with checkpointing on (config.h).
  const int64_t eff_layers = c.layers_override > 0 ? c.layers_override : layers;
  if (!c.checkpointing || eff_layers <= 1) c.kept_layers = 0;
  else c.kept_layers = std::min(c.kept_layers, eff_layers - 1);
  if (c.checkpointing && eff_layers > 1) {
    int kept = static_cast<int>(c.kept_layers);
    if (ImGui::SliderInt("kept layers", &kept, 0, static_cast<int>(eff_layers - 1))) c.kept_layers = kept;
    chart::formula_tooltip("partial checkpointing: the last K layers keep their activations from the forward to their "
                           "backward (K more activation sets, K fewer layer recomputes); 0 = every layer recomputed");
  }
  // LoRA (PEFT): rank 0 = full fine-tuning; the targets as PEFT names them.
  int rank = static_cast<int>(c.lora_rank);
  if (ImGui::InputInt("LoRA rank", &rank, 4, 16)) c.lora_rank = std::clamp(rank, 0, 4096);
  chart::formula_tooltip("LoRA adapters of rank r on a frozen base (Hugging Face PEFT); 0 = full fine-tuning. The base "
                         "keeps no gradients or optimizer state; the adapters are fp32 with their own AdamW state");
  if (c.lora_rank > 0) {
    float alpha = static_cast<float>(c.lora_alpha);
    if (ImGui::InputFloat("LoRA alpha", &alpha, 1.0f, 8.0f, "%.1f") && alpha > 0) c.lora_alpha = alpha;
    chart::formula_tooltip("scale = alpha / r (PEFT's default alpha is 8)");
    std::vector<std::string> targets;
    for (const std::string& t : step::lora_target_names()) {
      bool on = std::find(c.lora_targets.begin(), c.lora_targets.end(), t) != c.lora_targets.end();
      ImGui::Checkbox(t.c_str(), &on);
      if (t != "o_proj" && t != "down_proj") ImGui::SameLine();
      if (on) targets.push_back(t);
    }
    c.lora_targets = targets;
    ImGui::Checkbox("train embeddings + LM head", &c.lora_train_embeddings);
    chart::formula_tooltip("PEFT's modules_to_save: the embeddings and the LM head trained too (planned; the executor "
                           "runs adapters on a wholly frozen base)");
  } else {
    c.lora_train_embeddings = false;
  }
  combo_tokens("loss tile", c.logits_chunk_tokens, {0, 512, 1024, 2048, 4096, 8192}, "whole, unfused",
               "tokens per fused LM-head + cross-entropy tile; whole = bf16 logits + fp32 upcast, as PyTorch");
  combo_enum("peak as", c.peak_measure, {step::PeakMeasure::reserved, step::PeakMeasure::allocated},
             "reserved: include the runtime reserve (what a user sees); allocated: as max_memory_allocated");
  // Parallelism: per-rank figures. oomb run executes both under mpirun (MPI on the CPU backend,
  // NCCL on the CUDA backend).
  int g = static_cast<int>(c.gpus);
  if (ImGui::SliderInt("TP GPUs", &g, 1, 8)) c.gpus = g;
  chart::formula_tooltip("tensor-parallel degree: each layer sharded over this many GPUs of a node (per-rank figures; "
                         "oomb run executes it under mpirun -np N)");
  int dp = static_cast<int>(c.data_parallel);
  if (ImGui::InputInt("DP replicas", &dp, 1, 4)) c.data_parallel = std::clamp(dp, 1, 4096);
  chart::formula_tooltip("data-parallel replicas: each trains its own sequence, the gradients all-reduced before every "
                         "update (per-rank figures; the job runs TP x DP processes under mpirun)");
  if (c.data_parallel > 1) {
    // Nodes must divide the replicas (each tensor-parallel group inside one node): step through the divisors.
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= c.data_parallel; ++d)
      if (c.data_parallel % d == 0) divisors.push_back(d);
    if (c.data_parallel % c.nodes != 0) c.nodes = 1;
    combo_count("nodes", c.nodes, divisors,
                "nodes the replicas spread over (a divisor of the replicas): beyond one, the gradients' all-reduce "
                "crosses the host profile's network and the replicas on a node share its host");
    if (c.optimizer != step::Optimizer::none && c.lora_rank == 0) {
      ImGui::Checkbox("ZeRO-1", &c.shard_optimizer);
      chart::formula_tooltip("shard the AdamW state over the replicas (DeepSpeed stage 1): gradients reduce-scattered, "
                             "updated weights all-gathered");
    } else {
      c.shard_optimizer = false;
      ImGui::TextDisabled("ZeRO-1: needs an optimizer and full fine-tuning");
    }
  } else {
    c.nodes = 1;
    c.shard_optimizer = false;
  }
  ImGui::PopItemWidth();

  vm.set_inputs(in);
}

}  // namespace oomb::gui
