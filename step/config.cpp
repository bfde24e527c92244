#include "step/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace oomb::step {

namespace {
template <class E, size_t N>
E from_string(const std::string& s, const std::string& where, const char* const (&names)[N]) {
  std::string valid;
  for (size_t i = 0; i < N; ++i) {
    if (s == names[i]) return static_cast<E>(i);
    valid += (i ? ", " : "") + std::string(names[i]);
  }
  throw Error(where, s, "unknown value", "one of " + valid);
}
const char* const kSchedule[] = {"oomb", "standard"};
const char* const kAttention[] = {"dense", "sparse"};
const char* const kOptimizer[] = {"none", "gpu", "host"};
const char* const kSelectionMemory[] = {"device", "bounded"};
const char* const kPeakMeasure[] = {"reserved", "allocated"};
const char* const kImplementation[] = {"oomb", "published"};
const char* const kSelections[] = {"published", "per-kv-head", "quest", "moba", "local"};
}  // namespace

const char* to_string(Schedule v) { return kSchedule[static_cast<int>(v)]; }
const char* to_string(Attention v) { return kAttention[static_cast<int>(v)]; }
const char* to_string(Optimizer v) { return kOptimizer[static_cast<int>(v)]; }
const char* to_string(SelectionMemory v) { return kSelectionMemory[static_cast<int>(v)]; }
const char* to_string(PeakMeasure v) { return kPeakMeasure[static_cast<int>(v)]; }
const char* to_string(Implementation v) { return kImplementation[static_cast<int>(v)]; }
Implementation implementation_from_string(const std::string& s, const std::string& w) {
  return from_string<Implementation>(s, w, kImplementation);
}
Schedule schedule_from_string(const std::string& s, const std::string& w) { return from_string<Schedule>(s, w, kSchedule); }
Attention attention_from_string(const std::string& s, const std::string& w) { return from_string<Attention>(s, w, kAttention); }
Optimizer optimizer_from_string(const std::string& s, const std::string& w) { return from_string<Optimizer>(s, w, kOptimizer); }
SelectionMemory selection_memory_from_string(const std::string& s, const std::string& w) {
  return from_string<SelectionMemory>(s, w, kSelectionMemory);
}
PeakMeasure peak_measure_from_string(const std::string& s, const std::string& w) {
  return from_string<PeakMeasure>(s, w, kPeakMeasure);
}

bool is_known_selection(const std::string& s) {
  for (const char* n : kSelections)
    if (s == n) return true;
  return false;
}

Json Config::to_json() const {
  Json j = {{"schedule", to_string(schedule)},
          {"attention", to_string(attention)},
          {"context_tokens", context_tokens},
          {"chunk_tokens", chunk_tokens},
          {"page_tokens", page_tokens},
          {"page_budget", page_budget},
          {"selection", selection},
          {"selection_overlap", selection_overlap},
          {"resident_layers", resident_layers},
          {"kv_dtype", kv_dtype},
          {"kv_grad_dtype", kv_grad_dtype},
          {"param_dtype", param_dtype},
          {"param_grad_dtype", param_grad_dtype},
          {"activation_dtype", activation_dtype},
          {"optimizer", to_string(optimizer)},
          {"checkpointing", checkpointing},
          {"kept_layers", kept_layers},
          {"logits_chunk_tokens", logits_chunk_tokens},
          {"loss_dtype", loss_dtype},
          {"selection_memory", to_string(selection_memory)},
          {"selection_tile_pages", selection_tile_pages},
          {"peak_measure", to_string(peak_measure)},
          {"implementation", to_string(implementation)},
          {"gpus", gpus},
          {"data_parallel", data_parallel},
          {"nodes", nodes},
          {"shard_optimizer", shard_optimizer},
          {"sequence_parallel", sequence_parallel},
          {"lora_rank", lora_rank},
          {"lora_alpha", lora_alpha},
          {"lora_targets", lora_targets},
          {"lora_train_embeddings", lora_train_embeddings},
          {"layers_override", layers_override}};
  if (implementation == Implementation::published) {
    j["page_copy_latency_s"] = page_copy_latency_s;
    j["sweep_first_context"] = sweep_first_context;
  }
  if (router_aux_loss_coef > 0) j["router_aux_loss_coef"] = router_aux_loss_coef;
  return j;
}

Config config_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  // Every key is one a configuration has (a typo or an invented knob would be ignored).
  if (j.is_object()) {
    Config all;
    all.implementation = Implementation::published;  // the only case writing page_copy_latency_s, sweep_first_context
    all.router_aux_loss_coef = 1;                    // written when on
    const Json known = all.to_json();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!known.contains(it.key())) {
        std::string list;
        for (auto k = known.begin(); k != known.end(); ++k) list += (list.empty() ? "" : ", ") + k.key();
        r.fail(it.key(), "unknown configuration key", "one of " + list);
      }
  }
  Config c;
  c.schedule = schedule_from_string(r.str("schedule"), where + ": schedule");
  c.attention = attention_from_string(r.str("attention"), where + ": attention");
  c.context_tokens = r.i64_positive("context_tokens");
  c.chunk_tokens = r.i64_positive("chunk_tokens");
  c.page_tokens = r.i64_positive("page_tokens");
  c.page_budget = r.i64("page_budget");
  c.selection = r.str("selection");
  c.selection_overlap = r.f64("selection_overlap");
  c.resident_layers = r.i64_positive("resident_layers");
  // Dtypes are refused by the flag that sets them (as a command line would be).
  c.kv_dtype = storage_dtype_from_string(r.str("kv_dtype"), "--kv-dtype");
  c.kv_grad_dtype = storage_dtype_from_string(r.str("kv_grad_dtype"), "--kv-grad-dtype");
  c.param_dtype = storage_dtype_from_string(r.str("param_dtype"), "--param-dtype");
  c.param_grad_dtype = storage_dtype_from_string(r.str("param_grad_dtype"), "--param-grad-dtype");
  c.activation_dtype = storage_dtype_from_string(r.str_or("activation_dtype", "bf16"), "--activation-dtype");
  c.optimizer = optimizer_from_string(r.str("optimizer"), where + ": optimizer");
  c.checkpointing = r.boolean("checkpointing");
  c.kept_layers = r.i64_or("kept_layers", 0);  // documents written before partial checkpointing: full
  c.logits_chunk_tokens = r.i64("logits_chunk_tokens");
  // Plans written before the knob: the fp32 upcast.
  c.loss_dtype = storage_dtype_from_string(r.str_or("loss_dtype", "fp32"), "--loss-dtype");
  c.selection_memory = selection_memory_from_string(r.str("selection_memory"), where + ": selection_memory");
  c.selection_tile_pages = r.i64_positive("selection_tile_pages");
  c.peak_measure = peak_measure_from_string(r.str("peak_measure"), where + ": peak_measure");
  // Documents written before the key: the published preset was the only source of its rows.
  c.implementation = implementation_from_string(r.str_or("implementation", "oomb"), where + ": implementation");
  c.gpus = r.i64_positive("gpus");
  c.data_parallel = r.i64_or("data_parallel", 1);  // documents before the key: one replica
  c.nodes = r.i64_or("nodes", 1);                  // documents before the key: one node
  c.shard_optimizer = r.boolean_or("shard_optimizer", false);
  c.sequence_parallel = r.boolean_or("sequence_parallel", false);  // documents before the key: off
  // Documents before LoRA: full fine-tuning.
  c.lora_rank = r.i64_or("lora_rank", 0);
  if (r.has("lora_alpha")) c.lora_alpha = r.f64("lora_alpha");
  if (r.has("lora_targets")) {
    c.lora_targets.clear();
    for (const auto& t : r.array("lora_targets")) {
      if (!t.is_string()) r.fail("lora_targets", "must be a list of module names", "e.g. [\"q_proj\", \"v_proj\"]");
      c.lora_targets.push_back(t.get<std::string>());
    }
  }
  c.lora_train_embeddings = r.boolean_or("lora_train_embeddings", false);
  c.router_aux_loss_coef = r.f64_or("router_aux_loss_coef", 0);
  c.layers_override = r.i64_or("layers_override", 0);
  c.page_copy_latency_s = r.f64_or("page_copy_latency_s", Config{}.page_copy_latency_s);
  c.sweep_first_context = r.i64_or("sweep_first_context", 0);
  return c;
}

Config published_preset(Config c) {
  c.schedule = Schedule::oomb;
  c.chunk_tokens = 4096;
  c.page_tokens = 128;
  c.page_budget = 64;
  c.selection = "published";
  c.resident_layers = 2;
  c.kv_dtype = Dtype::bf16;
  c.kv_grad_dtype = Dtype::fp32;
  c.param_dtype = Dtype::bf16;
  c.param_grad_dtype = Dtype::bf16;
  c.optimizer = Optimizer::none;
  c.checkpointing = true;
  c.kept_layers = 0;
  c.logits_chunk_tokens = 0;
  c.loss_dtype = Dtype::bf16;
  c.selection_memory = SelectionMemory::device;
  c.peak_measure = PeakMeasure::allocated;
  c.implementation = Implementation::published;
  // The published figure's first context (its memory panel's first point, docs/model.md).
  c.sweep_first_context = 8192;
  return c;
}

bool apply_preset(const std::string& name, Config& c) {
  if (name == "oomb-published") {
    c = published_preset(c);
    return true;
  }
  if (name == "oomb") {  // our defaults
    Config d;
    d.context_tokens = c.context_tokens;
    d.attention = c.attention;
    d.gpus = c.gpus;
    d.data_parallel = c.data_parallel;
    d.nodes = c.nodes;
    d.shard_optimizer = c.shard_optimizer;
    d.layers_override = c.layers_override;
    c = d;
    return true;
  }
  return false;
}

const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                 "gate_proj", "up_proj", "down_proj"};
  return names;
}

std::vector<std::string> lora_targets_from_string(const std::string& text, const std::string& flag) {
  if (text == "all-linear") return lora_target_names();
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    std::string name = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    const auto& known = lora_target_names();
    if (std::find(known.begin(), known.end(), name) == known.end())
      throw Error(flag, name.empty() ? text : name, "is not a projection LoRA can target",
                  "a comma-separated list of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or "
                  "all-linear");
    if (std::find(out.begin(), out.end(), name) != out.end()) throw Error(flag, name, "is named twice");
    out.push_back(name);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

std::string lora_targets_text(const std::vector<std::string>& targets) {
  std::string s;
  for (const auto& t : targets) s += (s.empty() ? "" : ", ") + t;
  return s;
}

void validate(const Config& c, const models::ModelSpec& m) {
  // Mixtures of experts, sliding and chunked layers and sandwich norms are priced (docs/model.md
  // "Layer kinds and experts"); the published implementation is modelled for the dense models it
  // was published with only.
  if (c.implementation == Implementation::published && !m.uniform_layers())
    throw Error("--preset", "oomb-published",
                "models the published implementation, which runs dense models with global attention; " + m.id +
                    " has " + (m.moe.present() ? "a mixture of experts" : "layers " + m.layer_kinds_text()),
                "plan " + m.id + " without the preset (this project's implementation prices its layer kinds and experts)");
  if (!(c.router_aux_loss_coef >= 0) || c.router_aux_loss_coef > 1e6)
    throw Error("--router-aux-loss", std::to_string(c.router_aux_loss_coef), "must be >= 0 and finite",
                "e.g. 0.001 (Qwen3-MoE's router_aux_loss_coef) or 0.02 (Mixtral's)");
  if (c.router_aux_loss_coef > 0 && !m.moe.present())
    throw Error("--router-aux-loss", std::to_string(c.router_aux_loss_coef),
                "weighs a mixture of experts' load-balancing loss, and " + m.id + " has no experts",
                "drop --router-aux-loss, or plan a mixture of experts (qwen3-30b-a3b, mixtral-8x7b, tiny-moe)");
  if (c.context_tokens <= 0) throw Error("--context", "", "must be positive", "e.g. 4M, 128K or 100000");
  if (c.context_tokens > (int64_t{1} << 40))
    throw Error("--context", std::to_string(c.context_tokens), "is beyond any size this tool models",
                "at most 2^40 tokens");
  if (c.page_tokens <= 0) throw Error("--page", "", "must be positive", "e.g. 64 or 128");
  if (c.chunk_tokens <= 0) throw Error("--chunk", "", "must be positive", "e.g. 4096");
  if (c.schedule == Schedule::oomb && c.chunk_tokens % c.page_tokens != 0)
    throw Error("--chunk", "", "chunk (" + std::to_string(c.chunk_tokens) + ") is not a multiple of the page (" +
                                   std::to_string(c.page_tokens) + ")",
                "choose a chunk that is a multiple of --page");
  if (c.schedule == Schedule::oomb && c.page_tokens > c.chunk_tokens)
    throw Error("--page", "", "page is larger than the chunk", "page <= chunk");
  if (c.attention == Attention::sparse) {
    if (c.schedule != Schedule::oomb)
      throw Error("--attention", "sparse", "sparse attention needs --schedule oomb");
    if (c.page_budget <= 0) throw Error("--budget", "", "must be positive in sparse mode", "pages per query page, e.g. 64");
    if (c.page_budget > kMaxPageBudget)
      throw Error("--budget", std::to_string(c.page_budget), "is beyond any budget this tool models",
                  "at most " + std::to_string(kMaxPageBudget) + " pages");
    if (!is_known_selection(c.selection))
      throw Error("--selection", c.selection, "unknown selection rule", "published, per-kv-head, quest, moba or local");
    if (!(c.selection_overlap >= 0 && c.selection_overlap <= 1))  // NaN fails too
      throw Error("--selection-overlap", "", "must be in [0, 1]", "0 = disjoint selections, 1 = identical");
  }
  if (c.resident_layers <= 0) throw Error("--resident-layers", "", "must be positive", "2 (published) or 'all'");
  if (c.selection_tile_pages <= 0) throw Error("--selection-tile", "", "must be positive");
  if (!(c.page_copy_latency_s >= 0 && c.page_copy_latency_s < 1))  // NaN fails too
    throw Error("page_copy_latency_s", "", "must be in [0, 1) seconds", "the published default is 1e-05");
  if (c.sweep_first_context < 0)
    throw Error("sweep_first_context", std::to_string(c.sweep_first_context), "must be >= 0 tokens",
                "0 = gradients allocated before every step; the published sweep starts at 8192");
  if (c.logits_chunk_tokens < 0) throw Error("--logits-chunk", "", "must be >= 0", "0 = whole chunk, unfused");
  if (c.loss_dtype != Dtype::bf16 && c.loss_dtype != Dtype::fp32)
    throw Error("--loss-dtype", to_string(c.loss_dtype), "unknown loss dtype", "bf16 (no upcast) or fp32 (upcast logits and gradient)");
  for (auto [flag, dt] : {std::pair{"--kv-dtype", c.kv_dtype}, {"--kv-grad-dtype", c.kv_grad_dtype},
                          {"--param-dtype", c.param_dtype}, {"--param-grad-dtype", c.param_grad_dtype},
                          {"--activation-dtype", c.activation_dtype}, {"--loss-dtype", c.loss_dtype}})
    if (!is_storage_dtype(dt)) throw Error(flag, to_string(dt), "unknown dtype", "one of fp32, bf16, fp16, fp8");
  if (c.gpus <= 0) throw Error("--gpus", "", "must be positive", "1, 2, 4 or 8");
  if (m.kv_heads % c.gpus != 0 || m.q_heads % c.gpus != 0)
    throw Error("--gpus", std::to_string(c.gpus), "does not divide the model's heads (q " + std::to_string(m.q_heads) +
                                                      ", kv " + std::to_string(m.kv_heads) + ")",
                "tensor parallelism shards KV heads: use a divisor of " + std::to_string(m.kv_heads));
  if (m.ffn_hidden % c.gpus != 0 || m.vocab % c.gpus != 0)
    throw Error("--gpus", std::to_string(c.gpus),
                "does not divide the model's MLP width (" + std::to_string(m.ffn_hidden) + ") and vocabulary (" +
                    std::to_string(m.vocab) + "), which tensor parallelism splits over the GPUs",
                "a --gpus that divides both");
  if (m.moe.present() && (m.moe.expert_ffn_hidden % c.gpus != 0 || m.moe.shared_ffn_hidden % c.gpus != 0))
    throw Error("--gpus", std::to_string(c.gpus),
                "does not divide the width of " + m.id + "'s experts (" + std::to_string(m.moe.expert_ffn_hidden) +
                    (m.moe.shared_experts > 0 ? ", shared " + std::to_string(m.moe.shared_ffn_hidden) : std::string()) +
                    "), which tensor parallelism splits over the GPUs as it splits a dense MLP",
                "a --gpus that divides it");
  if (c.data_parallel < 1 || c.data_parallel > 4096)
    throw Error("--data-parallel", std::to_string(c.data_parallel), "must be in [1, 4096]",
                "replicas training on different sequences, e.g. 2 (one process per GPU under mpirun)");
  if (c.nodes < 1 || c.nodes > 4096)
    throw Error("--nodes", std::to_string(c.nodes), "must be in [1, 4096]", "the nodes the job's GPUs are on, e.g. 2");
  if (c.data_parallel % c.nodes != 0)
    throw Error("--nodes", std::to_string(c.nodes),
                "does not divide the " + std::to_string(c.data_parallel) +
                    " data-parallel replica(s): every node holds the same number of replicas, and a tensor-parallel "
                    "group stays inside one node",
                "--data-parallel a multiple of --nodes (e.g. --data-parallel " + std::to_string(c.nodes) + ")");
  if (c.shard_optimizer) {
    const std::string why = c.data_parallel <= 1 ? "shards the AdamW state over data-parallel replicas, and there is one"
                            : c.optimizer == Optimizer::none ? "shards the AdamW state, and there is no optimizer"
                            : c.lora_rank > 0 ? "shards a full fine-tune's AdamW state; LoRA's adapters hold little of it"
                                              : "";
    if (!why.empty())
      throw Error("--shard-optimizer", "true", why,
                  "--data-parallel 2 or more with --optimizer gpu or host and full fine-tuning, or --shard-optimizer false");
  }
  if (c.lora_rank < 0 || c.lora_rank > 4096)
    throw Error("--lora-rank", std::to_string(c.lora_rank), "must be in [0, 4096]", "e.g. 16; 0 = full fine-tuning");
  if (c.lora_rank > 0) {
    if (!std::isfinite(c.lora_alpha) || c.lora_alpha <= 0)
      throw Error("--lora-alpha", "", "must be a positive number", "e.g. 16 (PEFT's default is 8)");
    if (c.lora_targets.empty())
      throw Error("--lora-targets", "", "names no projection", "e.g. q_proj,v_proj or all-linear");
    std::string joined;
    for (const auto& x : c.lora_targets) joined += (joined.empty() ? "" : ",") + x;
    (void)lora_targets_from_string(joined, "--lora-targets");  // known names, none twice
    if (m.moe.present())
      for (const std::string& t : c.lora_targets)
        if (t == "gate_proj" || t == "up_proj" || t == "down_proj")
          throw Error("--lora-targets", t,
                      "is an MLP projection, and " + m.id + "'s MLPs are experts: adapters on experts are not priced (the "
                      "experts stay frozen, in their stored format)",
                      "the attention projections: q_proj,k_proj,v_proj,o_proj");
    const int64_t smallest = std::min({m.hidden, m.kv_dim(), m.ffn_hidden});
    if (c.lora_rank > smallest)
      throw Error("--lora-rank", std::to_string(c.lora_rank),
                  "is larger than the smallest projection dimension of " + m.id + " (" + std::to_string(smallest) + ")",
                  "a rank well below it, e.g. 16");
  }
  if (c.layers_override < 0 || c.layers_override > m.layers)
    throw Error("--layers", "", "must be between 1 and the model's " + std::to_string(m.layers) + " layers");
  const int64_t L = effective_layers(c, m);
  if (!c.checkpointing && c.kept_layers != 0)
    throw Error("--kept-layers", std::to_string(c.kept_layers),
                "keeps layers' activations under checkpointing, and checkpointing is off (every layer keeps them)",
                "drop --kept-layers, or --checkpointing true with 0 <= K < " + std::to_string(L));
  if (c.kept_layers < 0 || c.kept_layers >= L)
    throw Error("--kept-layers", std::to_string(c.kept_layers),
                "must be between 0 and " + std::to_string(L - 1) + " (of the " + std::to_string(L) +
                    " layers, at least one is recomputed)",
                "0 = full checkpointing; keeping all " + std::to_string(L) + " is --checkpointing false");
}

namespace {
// The flags that set the configuration's keys.
constexpr std::pair<const char*, const char*> kFlagKeys[] = {
    {"--context", "context_tokens"},     {"--chunk", "chunk_tokens"},
    {"--page", "page_tokens"},           {"--budget", "page_budget"},
    {"--selection", "selection"},        {"--selection-overlap", "selection_overlap"},
    {"--resident-layers", "resident_layers"}, {"--selection-tile", "selection_tile_pages"},
    {"--logits-chunk", "logits_chunk_tokens"}, {"--kv-dtype", "kv_dtype"},
    {"--kv-grad-dtype", "kv_grad_dtype"}, {"--param-dtype", "param_dtype"},
    {"--param-grad-dtype", "param_grad_dtype"}, {"--activation-dtype", "activation_dtype"},
    {"--loss-dtype", "loss_dtype"},      {"--gpus", "gpus"},
    {"--data-parallel", "data_parallel"}, {"--nodes", "nodes"}, {"--shard-optimizer", "shard_optimizer"},
    {"--lora-rank", "lora_rank"},        {"--lora-alpha", "lora_alpha"},
    {"--lora-targets", "lora_targets"},
    {"--layers", "layers_override"},     {"--kept-layers", "kept_layers"},
    {"--attention", "attention"},        {"--schedule", "schedule"},
    {"--preset", "implementation"},      {"--lora-train-embeddings", "lora_train_embeddings"},
    {"--router-aux-loss", "router_aux_loss_coef"},
    {"--optimizer", "optimizer"}};
}  // namespace

void validate_document(const Config& c, const models::ModelSpec& m, const std::string& where) {
  try {
    validate(c, m);
  } catch (const Error& e) {
    // validate() names the flag that sets each knob; a document names the key.
    std::string key = e.where();
    for (const auto& [flag, k] : kFlagKeys)
      if (e.where() == flag) key = k;
    throw Error(where, key, e.problem() + (e.key().empty() ? "" : " (" + e.key() + ")"), e.hint());
  }
}

std::string config_flag(const std::string& key) {
  for (const auto& [flag, k] : kFlagKeys)
    if (key == k) return flag;
  return key;
}

int64_t effective_layers(const Config& c, const models::ModelSpec& m) {
  return c.layers_override > 0 ? c.layers_override : m.layers;
}

int64_t recomputed_layers(const Config& c, const models::ModelSpec& m) {
  return c.checkpointing ? effective_layers(c, m) - c.kept_layers : 0;
}

int64_t global_layers(const Config& c, const models::ModelSpec& m) {
  const int64_t L = effective_layers(c, m);
  if (m.layer_attention.empty()) return L;
  int64_t n = 0;
  for (int64_t l = 0; l < L; ++l) n += m.attention_of(l) == models::LayerAttention::global;
  return n;
}

bool offloads(const Config& c, const models::ModelSpec& m) {
  return c.schedule == Schedule::oomb && c.resident_layers < global_layers(c, m);
}

}  // namespace oomb::step
