#include "models/hf_config.h"

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
};
const Family kFamilies[] = {
    {"Qwen2ForCausalLM", "qwen2", "qwen2"},
    {"LlamaForCausalLM", "llama", "llama"},
    {"MistralForCausalLM", "mistral", "mistral"},
    {"Qwen3ForCausalLM", "qwen3", "qwen3"},
};

// Keys that mark an architecture oomb does not model, with what they mean.
struct Marker {
  const char* key;
  const char* what;
};
const Marker kUnsupported[] = {
    {"num_experts", "mixture of experts"},       {"num_local_experts", "mixture of experts"},
    {"n_routed_experts", "mixture of experts"},  {"moe_intermediate_size", "mixture of experts"},
    {"num_experts_per_tok", "mixture of experts"}, {"vision_config", "multimodal"},
    {"audio_config", "multimodal"},              {"text_config", "multimodal (a nested text model)"},
    {"kv_lora_rank", "multi-head latent attention"}, {"q_lora_rank", "multi-head latent attention"},
    {"quantization_config", "a quantised checkpoint"},
};

std::string supported_list() {
  std::string s;
  for (const auto& f : kFamilies) s += (s.empty() ? "" : ", ") + std::string(f.architecture);
  return s;
}

std::vector<int64_t> shape_of(const ModelSpec& m) {
  return {m.layers, m.hidden, m.q_heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab,
          m.tied_embeddings, m.qkv_bias, m.qk_norm};
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
  for (const auto& m : kUnsupported)
    if (r.has(m.key)) markers += (markers.empty() ? "" : ", ") + std::string(m.key) + " (" + m.what + ")";
  if (!markers.empty())
    r.fail(arch.empty() ? "model_type" : "architectures", named + " is not supported: it has " + markers,
           "oomb models dense decoder-only transformers: " + supported_list());
  if (!fam)
    r.fail(arch.empty() ? "model_type" : "architectures", named + " is not supported",
           "one of " + supported_list() + " (write an oomb.model/1 JSON for other dense models)");
  const std::string family = fam->family;

  if (r.has("hidden_act") && r.str("hidden_act") != "silu")
    r.fail("hidden_act", "'" + r.str("hidden_act") + "' is not supported", "\"silu\" (SwiGLU MLP)");
  if (r.boolean_or("mlp_bias", false)) r.fail("mlp_bias", "MLP biases are not supported", "false");
  // Sliding-window attention changes what every token attends; oomb models full causal attention.
  const bool qwen = family == "qwen2" || family == "qwen3";
  const bool window_used = qwen ? r.boolean_or("use_sliding_window", false) : r.has("sliding_window");
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
  // oomb models full attention in every layer.
  if (r.has("layer_types")) {
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
  m.ffn_hidden = r.i64_positive("intermediate_size");
  m.vocab = r.i64_positive("vocab_size");
  // transformers' defaults for these four families: untied, theta 1e4, eps 1e-6.
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", false);
  m.rope_theta = r.has("rope_theta") ? r.f64_positive("rope_theta") : 10000.0;
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
  m.max_position = r.i64_positive("max_position_embeddings");
  // Qwen2 always has q/k/v biases and none on o_proj (no key); Mistral has none. Llama and Qwen3's
  // attention_bias gives q/k/v *and* o_proj biases (transformers' LlamaAttention / Qwen3Attention):
  // oomb models q/k/v biases only, so such a config is refused here rather than its checkpoint
  // later as an "extra tensor" (or, without weights, planned a model it is not).
  if ((family == "llama" || family == "qwen3") && r.boolean_or("attention_bias", false))
    r.fail("attention_bias",
           "true gives q_proj, k_proj, v_proj and o_proj biases; an o_proj bias is not supported (oomb models "
           "q/k/v biases only, as in Qwen2)",
           "attention_bias false (as every published Llama 3 and Qwen3 model)");
  m.qkv_bias = family == "qwen2";
  m.qk_norm = family == "qwen3";
  if (r.has("rope_scaling")) {
    // Validated (and any type but llama3 / default refused by name) as in oomb.model/1 files.
    m.rope_scaling = r.object("rope_scaling");
    if (!rope_of(m, where).llama3()) m.rope_scaling = Json();  // "default": plain RoPE
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
    const Json v5 = rope_of(probe, where, "rope_parameters").llama3() ? scaling : Json();
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
  checked.id = as_oomb["id"].get<std::string>();
  for (const auto& id : catalog_ids("llm")) {
    const std::string* text = catalog_text("llm", id);
    const ModelSpec c = model_from_json(parse_json(*text, id), "catalog llm/" + id + ".json");
    // The same model: family, shapes and RoPE and norm constants (a Llama config with tiny's
    // shapes is not tiny, which is Qwen2-shaped).
    if (c.family == checked.family && shape_of(c) == shape_of(checked) && c.rope_theta == checked.rope_theta &&
        c.norm_eps == checked.norm_eps && c.rope_scaling == checked.rope_scaling) {
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
