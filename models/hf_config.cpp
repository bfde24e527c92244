#include "models/hf_config.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "models/catalog.h"
#include "models/lookup.h"

namespace oomb::models {

namespace {

struct Family {
  const char* architecture;
  const char* model_type;
  const char* family;
  bool dense;  // global attention and a dense MLP in every layer (read_family_layers reads the rest)
  bool moe;    // reads the mixture-of-experts keys
};
const Family kFamilies[] = {
    {"Qwen2ForCausalLM", "qwen2", "qwen2", true, false},
    {"LlamaForCausalLM", "llama", "llama", true, false},
    {"MistralForCausalLM", "mistral", "mistral", true, false},
    {"Qwen3ForCausalLM", "qwen3", "qwen3", true, false},
    {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3_moe", false, true},
    {"MixtralForCausalLM", "mixtral", "mixtral", false, true},
    {"GptOssForCausalLM", "gpt_oss", "gpt_oss", false, true},
    {"Gemma3ForCausalLM", "gemma3_text", "gemma3", false, false},
    {"Llama4ForCausalLM", "llama4_text", "llama4", false, true},
};

// Keys that mark an architecture oomb does not model, with what they mean. The mixture-of-experts
// keys mark a dense family's config only (the MoE families read them).
struct Marker {
  const char* key;
  const char* what;
  bool moe;
};
const Marker kUnsupported[] = {
    {"num_experts", "mixture of experts", true},
    {"num_local_experts", "mixture of experts", true},
    {"n_routed_experts", "mixture of experts", true},
    {"moe_intermediate_size", "mixture of experts", true},
    {"num_experts_per_tok", "mixture of experts", true},
    {"vision_config", "multimodal", false},
    {"audio_config", "multimodal", false},
    {"text_config", "multimodal (a nested text model)", false},
    {"kv_lora_rank", "multi-head latent attention", false},
    {"q_lora_rank", "multi-head latent attention", false},
    {"linear_num_key_heads", "linear-attention (Gated DeltaNet) layers", false},
    {"full_attention_interval", "linear-attention layers between full-attention ones", false},
    {"quantization_config", "a quantised checkpoint", false},
};

std::string supported_list() {
  std::string s;
  for (const auto& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.architecture);
  return s;
}

// What makes a config the same model as a catalog entry: its oomb.model/1 form but for the id, the
// source and max_position (the family, the shapes, the RoPE and norm constants, the layer kinds
// and experts; a Llama config with tiny's shapes is not tiny, which is Qwen2-shaped).
Json model_key(const ModelSpec& m) {
  Json j = m.to_json();
  for (const char* k : {"id", "source", "max_position"}) j.erase(k);
  return j;
}

// Layer indices a config lists (mlp_only_layers, moe_layers): integers.
std::vector<int64_t> index_list(const JsonReader& r, const std::string& key) {
  std::vector<int64_t> v;
  for (const Json& x : r.array(key)) {
    if (!x.is_number_integer()) r.fail(key, "entry " + json_excerpt(x) + " is not a layer index");
    v.push_back(x.get<int64_t>());
  }
  return v;
}

// The layer kinds, attention extras and experts of the families beyond the dense four, from their
// configs' keys (transformers' defaults where a key is absent, as its config classes apply them).
void read_family_layers(const JsonReader& r, const std::string& family, ModelSpec& m) {
  const int64_t L = m.layers;
  // Layer kinds: layer_types where given; else each family's rule.
  std::vector<LayerAttention> kinds(static_cast<size_t>(L), LayerAttention::global);
  if (r.has("layer_types")) {
    const Json& a = r.array("layer_types");
    if (static_cast<int64_t>(a.size()) != L)
      r.fail("layer_types", "has " + std::to_string(a.size()) + " entries for num_hidden_layers " + std::to_string(L),
             "one entry per layer");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string k = a[i].is_string() ? a[i].get<std::string>() : std::string();
      if (k == "full_attention") kinds[i] = LayerAttention::global;
      else if (k == "sliding_attention") kinds[i] = LayerAttention::sliding;
      else if (k == "chunked_attention") kinds[i] = LayerAttention::chunked;
      else
        r.fail("layer_types", "layer " + std::to_string(i) + " is " + json_excerpt(a[i]) + ", a layer kind oomb does not model",
               "\"full_attention\", \"sliding_attention\" or \"chunked_attention\" (linear attention and other kinds "
               "are not modelled)");
    }
  } else if (family == "gemma3") {
    // Gemma 3 before layer_types: every sliding_window_pattern-th layer is global, the rest sliding
    // (Gemma3TextConfig's default pattern: 6).
    const int64_t pattern = r.i64_in_or("sliding_window_pattern", 1, 1 << 20, 6);
    for (int64_t l = 0; l < L; ++l)
      kinds[static_cast<size_t>(l)] = (l + 1) % pattern == 0 ? LayerAttention::global : LayerAttention::sliding;
  } else if (family == "gpt_oss") {
    for (int64_t l = 0; l < L; ++l)  // transformers' GptOssConfig default: sliding, full, sliding, ...
      kinds[static_cast<size_t>(l)] = l % 2 == 0 ? LayerAttention::sliding : LayerAttention::global;
  } else if (family == "mixtral") {
    if (r.has("sliding_window")) kinds.assign(static_cast<size_t>(L), LayerAttention::sliding);
  } else if (family == "llama4") {
    // no_rope_layers: 1 = RoPE and chunked local attention, 0 = no RoPE and global attention
    // (default: every 4th layer NoPE, no_rope_layer_interval 4).
    const int64_t interval = r.i64_in_or("no_rope_layer_interval", 1, 1 << 20, 4);
    std::vector<int64_t> rope_on;
    // An empty list is transformers' "not given" (Llama-4-Scout-17B-16E-Instruct publishes []).
    if (r.has("no_rope_layers") && !r.array("no_rope_layers").empty()) {
      const Json& a = r.array("no_rope_layers");
      if (static_cast<int64_t>(a.size()) < L)
        r.fail("no_rope_layers", "has " + std::to_string(a.size()) + " entries for " + std::to_string(L) + " layers",
               "1 (RoPE) or 0 (NoPE) per layer");
      for (int64_t l = 0; l < L; ++l) {
        const Json& v = a[static_cast<size_t>(l)];
        if (!v.is_number_integer() || (v.get<int64_t>() != 0 && v.get<int64_t>() != 1))
          r.fail("no_rope_layers", "entry " + std::to_string(l) + " is " + json_excerpt(v), "1 (RoPE) or 0 (NoPE)");
        rope_on.push_back(v.get<int64_t>());
      }
    } else {
      for (int64_t l = 0; l < L; ++l) rope_on.push_back((l + 1) % interval != 0 ? 1 : 0);
    }
    const bool chunked = !r.json().contains("attention_chunk_size") || !r.json()["attention_chunk_size"].is_null();
    for (int64_t l = 0; l < L; ++l) {
      if (rope_on[static_cast<size_t>(l)] == 0) m.nope_layers.push_back(l);
      else if (chunked) kinds[static_cast<size_t>(l)] = LayerAttention::chunked;
    }
  }
  if (family == "qwen3_moe" && r.boolean_or("use_sliding_window", false))
    r.fail("use_sliding_window", "sliding-window attention is not supported for Qwen3-MoE",
           "use_sliding_window false (as every published Qwen3 model)");
  m.layer_attention = kinds;
  if (m.layers_of(LayerAttention::sliding) > 0) m.sliding_window = r.i64_positive("sliding_window");
  if (m.layers_of(LayerAttention::chunked) > 0)
    m.attention_chunk = family == "llama4" ? r.i64_in_or("attention_chunk_size", 1, int64_t{1} << 40, 8192)
                                           : r.i64_positive("attention_chunk_size");
  if (m.layers_of(LayerAttention::global) == L) m.layer_attention.clear();

  // Attention extras and the MLP.
  if (family == "gpt_oss") {
    m.attention_sinks = true;  // GptOssAttention's sinks: one learned logit per head
    m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", true);
    m.mlp = Mlp::gpt_oss;
    m.swiglu_limit = r.has("swiglu_limit") ? r.f64_positive("swiglu_limit") : 7.0;
  }
  if (family == "gemma3") {
    m.sandwich_norms = true;
    m.mlp = Mlp::geglu_tanh;
  }

  // Experts.
  if (family == "gemma3") return;
  MoeSpec& e = m.moe;
  const char* experts_key = family == "qwen3_moe" ? "num_experts" : "num_local_experts";
  e.experts = r.i64_positive(experts_key);
  if (e.experts < 2) r.fail(experts_key, "a mixture needs at least 2 experts");
  std::string k_key = "num_experts_per_tok";
  if (family == "gpt_oss" && r.has("experts_per_token")) {
    if (r.has("num_experts_per_tok") && r.i64_positive("num_experts_per_tok") != r.i64_positive("experts_per_token"))
      r.fail("experts_per_token", "disagrees with num_experts_per_tok", "one top-k");
    k_key = "experts_per_token";
  }
  e.experts_per_token = r.i64_positive(k_key);
  if (e.experts_per_token > e.experts)
    r.fail(k_key, "exceeds " + std::string(experts_key) + " (" + std::to_string(e.experts) + ")", "top-k of the experts");
  e.expert_ffn_hidden = r.i64_positive(family == "qwen3_moe" ? "moe_intermediate_size" : "intermediate_size");
  std::vector<int64_t> moe_layers;
  if (family == "qwen3_moe") {
    if (r.i64_or("shared_expert_intermediate_size", 0) > 0)
      r.fail("shared_expert_intermediate_size", "a shared expert is not part of Qwen3-MoE", "0 or absent");
    e.routing = r.boolean_or("norm_topk_prob", false) ? Routing::softmax_topk : Routing::softmax_all;
    const int64_t step = r.i64_in_or("decoder_sparse_step", 1, 1 << 20, 1);
    const std::vector<int64_t> mlp_only = r.has("mlp_only_layers") ? index_list(r, "mlp_only_layers") : std::vector<int64_t>{};
    for (int64_t l = 0; l < L; ++l)
      if (std::find(mlp_only.begin(), mlp_only.end(), l) == mlp_only.end() && (l + 1) % step == 0) moe_layers.push_back(l);
  } else if (family == "llama4") {
    e.routing = Routing::sigmoid_topk;
    e.shared_experts = 1;  // Llama4TextMoe's shared_expert, as wide as a routed one
    e.shared_ffn_hidden = e.expert_ffn_hidden;
    if (r.has("moe_layers")) {
      moe_layers = index_list(r, "moe_layers");
    } else {
      const int64_t step = r.i64_in_or("interleave_moe_layer_step", 1, 1 << 20, 1);
      for (int64_t l = step - 1; l < L; l += step) moe_layers.push_back(l);
    }
  } else {
    for (int64_t l = 0; l < L; ++l) moe_layers.push_back(l);
  }
  for (int64_t l = 0; l < L; ++l)
    if (std::find(moe_layers.begin(), moe_layers.end(), l) == moe_layers.end()) e.dense_layers.push_back(l);
  if (static_cast<int64_t>(e.dense_layers.size()) == L)
    r.fail(family == "qwen3_moe" ? "mlp_only_layers" : "moe_layers", "leave no layer with experts", "some MoE layers");
  if (family == "gpt_oss") {
    e.router_bias = e.expert_bias = true;
    if (r.has("quantization_config")) {
      const JsonReader q(r.object("quantization_config"), r.where() + " quantization_config");
      const std::string method = q.str_or("quant_method", "");
      if (method != "mxfp4")
        r.fail("quantization_config.quant_method", "'" + method + "' is not supported",
               "\"mxfp4\" (gpt-oss's experts) or no quantization_config");
      e.expert_weights = WeightFormat::mxfp4;
    }
  }
}

std::string fmt(double v) {
  Json j = v;
  return j.dump();
}

}  // namespace

bool is_hf_config(const Json& j) {
  return j.is_object() && !j.contains("schema") && (j.contains("architectures") || j.contains("model_type"));
}

ModelSpec model_from_hf_config(const Json& j, const std::string& where, const std::string& fallback_id) {
  JsonReader r(j, where);
  std::string arch, model_type = r.str_or("model_type", "");
  if (r.has("architectures")) {
    const Json& a = r.array("architectures");
    if (a.size() != 1 || !a[0].is_string())
      r.fail("architectures", "must name exactly one architecture (" + a.dump() + ")", supported_list());
    arch = a[0].get<std::string>();
  }
  const Family* fam = nullptr;
  for (const auto& f : kFamilies)
    if ((!arch.empty() && arch == f.architecture) || (arch.empty() && model_type == f.model_type)) fam = &f;
  const std::string named = arch.empty() ? "model_type '" + model_type + "'" : "architecture " + arch;
  std::string markers;
  for (const auto& m : kUnsupported) {
    if (!r.has(m.key) || (fam && fam->moe && m.moe)) continue;
    // gpt-oss ships its experts in MXFP4, which the spec states (moe.expert_weights).
    if (std::string(m.key) == "quantization_config" && fam && std::string(fam->family) == "gpt_oss") continue;
    markers += (markers.empty() ? "" : ", ") + std::string(m.key) + " (" + m.what + ")";
  }
  if (!markers.empty()) {
    std::string hint = "oomb models decoder-only transformers: " + supported_list();
    if (r.has("text_config") && r.json()["text_config"].is_object() && r.json()["text_config"].contains("model_type"))
      hint += "; the language model alone (text_config, model_type " + r.json()["text_config"]["model_type"].dump() +
              ") imports as a config of its own";
    r.fail(arch.empty() ? "model_type" : "architectures", named + " is not supported: it has " + markers, hint);
  }
  if (!fam)
    r.fail(arch.empty() ? "model_type" : "architectures", named + " is not supported",
           "one of " + supported_list() + " (write an oomb.model/1 JSON for other dense models)");
  const std::string family = fam->family;
  const bool dense_family = fam->dense;

  // The MLP's activation: silu (SwiGLU) for every family but Gemma 3 (gelu_pytorch_tanh, which
  // Gemma's configs call hidden_activation) and gpt-oss (its own clamped unit, whatever hidden_act says).
  const std::string act_key = family == "gemma3" && r.has("hidden_activation") ? "hidden_activation" : "hidden_act";
  const std::string want_act = family == "gemma3" ? "gelu_pytorch_tanh" : "silu";
  if (r.has(act_key) && r.str(act_key) != want_act)
    r.fail(act_key, "'" + r.str(act_key) + "' is not supported", "\"" + want_act + "\" for " + named);
  if (r.boolean_or("mlp_bias", false)) r.fail("mlp_bias", "MLP biases are not supported", "false");
  // Gemma 2's logit soft-capping changes every softmax; Gemma 3 has none (null).
  for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (r.has(k)) r.fail(k, "logit soft-capping is not supported", "null (as in Gemma 3)");
  // Sliding-window attention in the dense families (Qwen's use_sliding_window, Llama's and Mistral's
  // sliding_window) is refused: their windows are not what the catalog's models run. The other
  // families give their layer kinds below.
  const bool qwen = family == "qwen2" || family == "qwen3";
  const bool window_used = !dense_family ? false : qwen ? r.boolean_or("use_sliding_window", false) : r.has("sliding_window");
  if (window_used) {
    const std::string key = qwen ? "use_sliding_window" : "sliding_window";
    r.fail(key, "sliding-window attention" + (r.has("sliding_window") ? " of " + r.json()["sliding_window"].dump() + " tokens" : std::string()) +
                    " is not supported",
           "oomb models full causal attention (sliding_window null / use_sliding_window false)");
  }
  // transformers v5 writes the weights' type as dtype (v4: torch_dtype); either is read, both must agree.
  std::string dtype_key;
  for (const char* k : {"torch_dtype", "dtype"}) {
    if (!r.has(k)) continue;
    const std::string dt = r.str(k);
    if (dt != "bfloat16" && dt != "float16" && dt != "float32")
      r.fail(k, "'" + dt + "' is not supported", "bfloat16, float16 or float32");
    if (!dtype_key.empty() && r.str(dtype_key) != dt)
      r.fail(k, "'" + dt + "' disagrees with " + dtype_key + " '" + r.str(dtype_key) + "'",
             "one weight type (transformers v5 writes dtype, v4 torch_dtype)");
    dtype_key = k;
  }
  // Per-layer attention kinds (layer_types, written by recent transformers for Qwen2/Qwen3/Llama):
  // the dense families have full attention in every layer.
  if (dense_family && r.has("layer_types")) {
    const Json& kinds = r.array("layer_types");
    for (size_t i = 0; i < kinds.size(); ++i)
      if (!kinds[i].is_string() || kinds[i].get<std::string>() != "full_attention")
        r.fail("layer_types", "layer " + std::to_string(i) + " is " + kinds[i].dump() +
                                  ": only full attention is supported",
               "\"full_attention\" in every layer (sliding-window and other layer kinds are not modelled)");
  }

  ModelSpec m;
  m.family = family;
  m.layers = r.i64_positive("num_hidden_layers");
  m.hidden = r.i64_positive("hidden_size");
  m.q_heads = r.i64_positive("num_attention_heads");
  m.kv_heads = r.i64_or("num_key_value_heads", m.q_heads);
  if (m.kv_heads <= 0) r.fail("num_key_value_heads", "must be positive");
  if (m.hidden % m.q_heads != 0 && !r.has("head_dim"))
    r.fail("num_attention_heads", "does not divide hidden_size (" + std::to_string(m.hidden) + ")",
           "give head_dim explicitly");
  m.head_dim = r.has("head_dim") ? r.i64_positive("head_dim") : m.hidden / m.q_heads;
  m.ffn_hidden = r.i64_positive(family == "llama4" ? "intermediate_size_mlp" : "intermediate_size");
  // Gemma 3's published text_config leaves out what its config class defaults (transformers'
  // Gemma3TextConfig): those defaults apply, as transformers applies them, and the source says so.
  const bool gemma = family == "gemma3";
  std::string defaulted;
  auto gemma_default = [&](const char* key, const std::string& value) {
    if (!gemma || r.has(key)) return false;
    defaulted += (defaulted.empty() ? "" : ", ") + std::string(key) + " " + value;
    return true;
  };
  m.vocab = gemma_default("vocab_size", "262208") ? 262208 : r.i64_positive("vocab_size");
  // transformers' defaults: untied (Gemma 3: tied), theta 1e4, eps 1e-6.
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", family == "gemma3");
  m.rope_theta = gemma_default("rope_theta", "1000000") ? 1e6 : r.has("rope_theta") ? r.f64_positive("rope_theta") : 10000.0;
  // A rotary embedding on part of each head (partial_rotary_factor < 1) is not what oomb computes.
  auto check_partial = [&](const JsonReader& at, const std::string& key) {
    if (!at.has("partial_rotary_factor")) return;
    const Json& f = at.json()["partial_rotary_factor"];
    if (!f.is_number() || f.get<double>() != 1.0)
      r.fail(key, f.dump() + ": a rotary embedding on part of each head is not supported",
             "1.0 (oomb rotates the whole head_dim)");
  };
  check_partial(r, "partial_rotary_factor");
  m.norm_eps = r.has("rms_norm_eps") ? r.f64_positive("rms_norm_eps") : 1e-6;
  m.max_position = gemma_default("max_position_embeddings", "131072") ? 131072 : r.i64_positive("max_position_embeddings");
  if (gemma && !r.has("layer_types")) gemma_default("sliding_window_pattern", "6");
  // Qwen2 always has q/k/v biases and none on o_proj (no key); Mistral and Mixtral have none (their
  // attention ignores the key: a config that sets it true is refused rather than planned as something
  // transformers would not build). Llama's, Qwen3's (dense and MoE), Gemma 3's and Llama 4's
  // attention_bias gives q/k/v *and* o_proj biases (transformers' LlamaAttention, Qwen3Attention).
  const bool attention_bias = r.boolean_or("attention_bias", false);
  if ((family == "mistral" || family == "mixtral" || family == "qwen2") && attention_bias)
    r.fail("attention_bias", "true: this family's attention does not read the key (transformers builds its biases as "
                             "fixed: none for Mistral and Mixtral, q/k/v for Qwen2)",
           "attention_bias false or absent");
  m.qkv_bias = family == "qwen2" || attention_bias;
  m.o_bias = attention_bias;
  // Weighted q/k RMSNorms per head (Llama 4's use_qk_norm is a weightless L2 norm: its family's own).
  m.qk_norm = family == "qwen3" || family == "qwen3_moe" || family == "gemma3";
  if (!dense_family) read_family_layers(r, family, m);
  if (r.has("rope_scaling")) {
    // Validated (and any type but llama3 / default refused by name) as in oomb.model/1 files.
    m.rope_scaling = r.object("rope_scaling");
    if (rope_scaling_type(m, where) == "default") m.rope_scaling = Json();  // plain RoPE
  }
  // transformers v5 keeps every RoPE parameter in rope_parameters: rope_type, rope_theta and the
  // type's own keys (v4: rope_scaling and rope_theta). Read as those two are, and where a config has
  // both forms they must say the same. A dict per layer type (Gemma 3, ModernBERT) is refused.
  if (r.has("rope_parameters")) {
    const Json& rp = r.object("rope_parameters");
    const JsonReader pr(rp, where + " rope_parameters");
    for (auto it = rp.begin(); it != rp.end(); ++it)
      if (it.value().is_object())
        r.fail("rope_parameters." + it.key(), "RoPE parameters per layer type are not supported",
               "one rope_parameters object for every layer ({\"rope_type\": ..., \"rope_theta\": ...})");
    check_partial(pr, "rope_parameters.partial_rotary_factor");
    if (!pr.has("rope_theta"))
      r.fail("rope_parameters.rope_theta", "missing: transformers v5 keeps the RoPE base here",
             "the model's rope_theta, e.g. 1000000 for Qwen2.5 (oomb does not guess it)");
    const double theta = pr.f64_positive("rope_theta");
    if (r.has("rope_theta") && r.f64_positive("rope_theta") != theta)
      r.fail("rope_parameters.rope_theta",
             fmt(theta) + " disagrees with rope_theta " + fmt(r.f64_positive("rope_theta")),
             "one value (transformers v5 writes rope_parameters.rope_theta only)");
    m.rope_theta = theta;
    Json scaling = rp;
    scaling.erase("rope_theta");
    scaling.erase("partial_rotary_factor");
    if (!scaling.contains("rope_type") && !scaling.contains("type")) scaling["rope_type"] = "default";
    ModelSpec probe = m;
    probe.rope_scaling = scaling;
    const Json v5 = rope_scaling_type(probe, where, "rope_parameters") != "default" ? scaling : Json();
    if (r.has("rope_scaling") && m.rope_scaling != v5)
      r.fail("rope_parameters", "disagrees with rope_scaling " + r.json()["rope_scaling"].dump(),
             "one RoPE description (transformers v5 writes rope_parameters only)");
    m.rope_scaling = v5;
  }

  // The same validation as oomb.model/1 files, with this file's name in the message.
  Json as_oomb = m.to_json();
  as_oomb["id"] = fallback_id.empty() ? family : fallback_id;
  as_oomb["source"] = "x";
  ModelSpec checked = model_from_json(as_oomb, where + " (as oomb.model/1)");

  std::string detail = "Hugging Face config " + where + ": " + (arch.empty() ? model_type : arch) + ", hidden_size " +
                       std::to_string(m.hidden) + ", num_hidden_layers " + std::to_string(m.layers) +
                       ", num_attention_heads " + std::to_string(m.q_heads) + ", num_key_value_heads " +
                       std::to_string(m.kv_heads) + ", head_dim " + std::to_string(m.head_dim) + ", intermediate_size " +
                       std::to_string(m.ffn_hidden) + ", vocab_size " + std::to_string(m.vocab) + ", rope_theta " +
                       fmt(m.rope_theta) + ", rms_norm_eps " + fmt(m.norm_eps) + ", max_position_embeddings " +
                       std::to_string(m.max_position) + ", tie_word_embeddings " +
                       (m.tied_embeddings ? "true" : "false") +
                       (dtype_key.empty() ? std::string() : ", " + dtype_key + " " + r.str(dtype_key));
  if (!checked.layer_attention.empty()) detail += ", layers " + checked.layer_kinds_text();
  if (checked.moe.present())
    detail += ", " + std::to_string(checked.moe.experts) + " experts of " + std::to_string(checked.moe.expert_ffn_hidden) +
              ", top " + std::to_string(checked.moe.experts_per_token) +
              (checked.moe.shared_experts > 0 ? " + " + std::to_string(checked.moe.shared_experts) + " shared" : std::string()) +
              (checked.moe.dense_layers.empty() ? std::string()
                                                : ", " + std::to_string(checked.moe.dense_layers.size()) + " dense layers");
  // Keys of the family's own arithmetic that the spec does not carry (the executor does not run
  // these families; plans do not depend on them): stated, so the file says what it leaves out.
  std::string left_out;
  for (const char* k : {"query_pre_attn_scalar", "rope_local_base_freq", "attn_temperature_tuning", "floor_scale",
                        "attn_scale", "use_qk_norm", "router_aux_loss_coef", "router_jitter_noise"})
    if (r.has(k)) left_out += (left_out.empty() ? "" : ", ") + std::string(k) + " " + r.json()[k].dump();
  if (!left_out.empty()) detail += "; not in the spec: " + left_out;
  if (!defaulted.empty()) detail += "; absent, so transformers' Gemma3TextConfig defaults: " + defaulted;
  checked.id = as_oomb["id"].get<std::string>();
  const Json key = model_key(checked);
  for (const auto& id : catalog_ids("llm")) {
    const std::string* text = catalog_text("llm", id);
    const ModelSpec c = model_from_json(parse_json(*text, id), "catalog llm/" + id + ".json");
    if (model_key(c) == key) {
      checked.id = id;
      detail += " (the shapes of catalog model " + id + ")";
      break;
    }
  }
  checked.source = detail;
  return checked;
}

std::string hf_config_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return (std::filesystem::path(path) / "config.json").string();
  return path;
}

std::string hf_fallback_id(const std::string& file) {
  // The folder's name ("Qwen2.5-7B") when the shapes match no catalog entry; a pipe or a process
  // substitution (/dev/fd/63) has no folder of its own, so its id is the family's.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return "";
  std::filesystem::path p = std::filesystem::absolute(std::filesystem::path(file), ec);
  std::string id;
  for (char c : p.parent_path().filename().string())
    id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return id;
}

std::optional<ModelSpec> load_hf_model(const std::string& path) {
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(path, ec);
  if (dir && !std::filesystem::exists(std::filesystem::path(path) / "config.json", ec))
    throw Error("--model", path, "is a folder without config.json",
                "a Hugging Face model folder (config.json), a config.json, an oomb.model/1 JSON or a catalog id");
  const std::string file = hf_config_path(path);
  // Any file that exists is read once, whatever its kind: a pipe or <(cat config.json) cannot be
  // read a second time, so the caller gets its document back when it is not in the HF form.
  if (!dir && !std::filesystem::exists(file, ec)) return std::nullopt;
  const Json j = read_json_file(file);
  if (!is_hf_config(j)) {
    if (dir) throw Error(file, "", "is not a Hugging Face config (no architectures / model_type)");
    return model_from_json(j, path);
  }
  return model_from_hf_config(j, file, hf_fallback_id(file));
}

}  // namespace oomb::models
