#include "models/specs.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "models/catalog.h"
#include "models/hf_config.h"
#include "models/lookup.h"

namespace oomb::models {

namespace {
// Each enum's names, in declaration order: written once, read (enum_named) and written (to_string)
// from here.
const char* const kLayerAttention[] = {"global", "sliding", "chunked"};
const char* const kRouting[] = {"softmax_topk", "softmax_all", "sigmoid_topk"};
const char* const kWeightFormat[] = {"native", "mxfp4"};
const char* const kMlp[] = {"swiglu", "geglu_tanh", "gpt_oss"};

// "a, b or c" (quoted: "\"a\", \"b\" or \"c\"").
template <size_t N>
std::string names_text(const char* const (&names)[N], bool quoted = false) {
  std::string s;
  for (size_t i = 0; i < N; ++i) {
    // append, not "\"" + std::string: GCC 12 warns -Wrestrict on that form (a false positive).
    const std::string n = quoted ? std::string("\"").append(names[i]).append("\"") : std::string(names[i]);
    s += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + n;
  }
  return s;
}

// The value named `name`; nullopt when none is.
template <class E, size_t N>
std::optional<E> enum_named(const std::string& name, const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<E>(i);
  return std::nullopt;
}

// The value a JSON key names (`fallback` when absent); refused naming the key and the valid names.
template <class E, size_t N>
E read_named(const JsonReader& r, const std::string& key, E fallback, const char* const (&names)[N], const char* what) {
  const std::string name = r.str_or(key, names[static_cast<size_t>(fallback)]);
  if (const std::optional<E> e = enum_named<E>(name, names)) return *e;
  r.fail(key, "'" + name + "' is not " + what + " oomb knows", names_text(names));
}
}  // namespace

const char* to_string(LayerAttention a) { return kLayerAttention[static_cast<size_t>(a)]; }
const char* to_string(Routing r) { return kRouting[static_cast<size_t>(r)]; }
const char* to_string(WeightFormat f) { return kWeightFormat[static_cast<size_t>(f)]; }
const char* to_string(Mlp m) { return kMlp[static_cast<size_t>(m)]; }

int64_t weight_bytes(WeightFormat f, int64_t params, int64_t native_bytes) {
  if (f == WeightFormat::native) return checked_mul(params, native_bytes, "weight bytes");
  // MXFP4: 16 bytes of 4-bit values and one scale byte per block of 32 (a last partial block whole).
  return checked_mul(ceil_div(params, int64_t{32}), 17, "MXFP4 weight bytes");
}

int64_t ModelSpec::layers_of(LayerAttention a) const {
  if (layer_attention.empty()) return a == LayerAttention::global ? layers : 0;
  return static_cast<int64_t>(std::count(layer_attention.begin(), layer_attention.end(), a));
}

bool ModelSpec::uniform_layers() const {
  return layers_of(LayerAttention::global) == layers && !moe.present();
}

bool ModelSpec::moe_layer(int64_t layer) const {
  return moe.present() && !std::binary_search(moe.dense_layers.begin(), moe.dense_layers.end(), layer);
}

namespace {
// A gated MLP of width f: gate, up and down projections.
int64_t mlp_params(int64_t hidden, int64_t f) { return checked_mul(3, checked_mul(hidden, f, "mlp parameters"), "mlp parameters"); }
}  // namespace

int64_t ModelSpec::expert_params() const {
  int64_t expert = mlp_params(hidden, moe.expert_ffn_hidden);
  if (moe.expert_bias) expert = checked_add(expert, 2 * moe.expert_ffn_hidden + hidden, "expert parameters");
  return expert;
}

// Checked: a spec built in code (not through the bounded loader) must not wrap around.
int64_t ModelSpec::layer_params(int64_t layer) const {
  const int64_t qd = checked_mul(q_heads, head_dim, "q_heads x head_dim");
  const int64_t kvd = checked_mul(kv_heads, head_dim, "kv_heads x head_dim");
  int64_t attn = checked_mul(hidden, checked_add(checked_mul(2, qd, "q_dim"), checked_mul(2, kvd, "kv_dim"), "qkvo"),
                             "attention parameters");
  if (qkv_bias) attn = checked_add(attn, qd + 2 * kvd, "attention parameters");
  if (o_bias) attn = checked_add(attn, hidden, "attention parameters");
  if (attention_sinks) attn = checked_add(attn, q_heads, "attention parameters");
  int64_t mlp_n = 0;
  if (moe_layer(layer)) {
    const int64_t e = moe.experts;
    mlp_n = checked_mul(hidden, e, "router parameters") + (moe.router_bias ? e : 0);
    mlp_n = checked_add(mlp_n, checked_mul(e, expert_params(), "expert parameters"), "mlp parameters");
    mlp_n = checked_add(mlp_n, checked_mul(moe.shared_experts, mlp_params(hidden, moe.shared_ffn_hidden), "shared experts"),
                      "mlp parameters");
  } else {
    mlp_n = mlp_params(hidden, ffn_hidden);
  }
  const int64_t norms = (sandwich_norms ? 4 : 2) * hidden + (qk_norm ? 2 * head_dim : 0);
  return checked_add(checked_add(attn, mlp_n, "layer parameters"), norms, "layer parameters");
}

int64_t ModelSpec::params_per_layer() const {
  OOMB_ASSERT(moe.dense_layers.empty(), "params_per_layer of " + id + ", whose layers differ: use layer_params");
  return layer_params(0);
}

int64_t ModelSpec::param_count() const {
  const int64_t emb = checked_mul(vocab, hidden, "embedding parameters");
  int64_t n = checked_add(emb, tied_embeddings ? 0 : emb, "embedding parameters");
  for (int64_t l = 0; l < layers; ++l) n = checked_add(n, layer_params(l), "layer parameters");
  return checked_add(n, hidden, "parameters");
}

int64_t ModelSpec::routed_expert_params() const {
  if (!moe.present()) return 0;
  int64_t n = 0;
  for (int64_t l = 0; l < layers; ++l)
    if (moe_layer(l)) n = checked_add(n, checked_mul(moe.experts, expert_params(), "expert parameters"), "expert parameters");
  return n;
}

int64_t ModelSpec::active_param_count() const {
  if (!moe.present()) return param_count();
  // The routed experts' share a token does not use: (experts - k) / experts of them.
  const int64_t unused = routed_expert_params() / moe.experts * (moe.experts - moe.experts_per_token);
  return param_count() - unused;
}

int64_t ModelSpec::kv_bytes_per_token(int64_t dtype_bytes) const {
  return checked_mul(checked_mul(2 * layers, kv_dim(), "KV per token"), dtype_bytes, "KV bytes per token");
}

int64_t ModelSpec::growing_kv_bytes_per_token(int64_t dtype_bytes) const {
  return checked_mul(checked_mul(2 * layers_of(LayerAttention::global), kv_dim(), "KV per token"), dtype_bytes,
                     "KV bytes per token");
}

int64_t ModelSpec::window_tokens(LayerAttention a) const {
  switch (a) {
    case LayerAttention::sliding: return sliding_window;
    case LayerAttention::chunked: return attention_chunk;
    case LayerAttention::global: break;
  }
  return 0;
}

int64_t ModelSpec::bounded_kv_bytes(int64_t dtype_bytes) const {
  int64_t n = 0;
  for (LayerAttention a : {LayerAttention::sliding, LayerAttention::chunked})
    n = checked_add(n, checked_mul(checked_mul(2 * layers_of(a), kv_dim(), "KV"), checked_mul(window_tokens(a), dtype_bytes, "KV"),
                                   "bounded KV bytes"), "bounded KV bytes");
  return n;
}

int64_t ModelSpec::rope_reach() const {
  // The type and its keys as rope_scaling_type checks them (factor and, for yarn, the original length).
  const std::string type = rope_scaling_type(*this);
  if (type != "yarn" && type != "linear") return max_position;  // llama3 configs state the extended length
  const double base = rope_scaling.value("original_max_position_embeddings", static_cast<double>(max_position));
  const double reach = base * rope_scaling.value("factor", 1.0);
  return reach > static_cast<double>(max_position) && reach < 1e15 ? static_cast<int64_t>(reach) : max_position;
}

std::string ModelSpec::experts_text() const {
  if (!moe.present()) return "-";
  std::string s = std::to_string(moe.experts) + " x top-" + std::to_string(moe.experts_per_token);
  if (moe.shared_experts > 0) s += " + " + std::to_string(moe.shared_experts) + " shared";
  if (moe.expert_weights != WeightFormat::native) s += std::string(" (") + to_string(moe.expert_weights) + ")";
  return s;
}

std::string ModelSpec::layer_kinds_text() const {
  if (layers_of(LayerAttention::global) == layers) return "global";
  std::string s;
  for (LayerAttention a : {LayerAttention::sliding, LayerAttention::chunked, LayerAttention::global}) {
    const int64_t n = layers_of(a);
    if (n == 0) continue;
    s += (s.empty() ? "" : " + ") + std::to_string(n) + " " + to_string(a);
    if (a != LayerAttention::global) s += " (" + std::to_string(window_tokens(a)) + ")";
  }
  return s;
}

Json ModelSpec::to_json() const {
  Json j = {{"schema", "oomb.model/1"}, {"id", id}, {"family", family}, {"source", source},
            {"layers", layers}, {"hidden", hidden}, {"q_heads", q_heads}, {"kv_heads", kv_heads},
            {"head_dim", head_dim}, {"ffn_hidden", ffn_hidden}, {"vocab", vocab},
            {"tied_embeddings", tied_embeddings}, {"qkv_bias", qkv_bias}, {"rope_theta", rope_theta},
            {"norm_eps", norm_eps}, {"max_position", max_position}};
  if (qk_norm) j["qk_norm"] = true;  // absent = false: older files and plans stay byte-identical
  if (!rope_scaling.is_null()) j["rope_scaling"] = rope_scaling;
  // Layer kinds and experts: written only when present (the dense defaults are absent keys).
  if (!layer_attention.empty()) {
    Json kinds = Json::array();
    for (LayerAttention a : layer_attention) kinds.push_back(to_string(a));
    j["layer_attention"] = kinds;
  }
  if (sliding_window > 0) j["sliding_window"] = sliding_window;
  if (attention_chunk > 0) j["attention_chunk"] = attention_chunk;
  if (!nope_layers.empty()) j["nope_layers"] = nope_layers;
  if (attention_sinks) j["attention_sinks"] = true;
  if (o_bias) j["o_bias"] = true;
  if (sandwich_norms) j["sandwich_norms"] = true;
  if (mlp != Mlp::swiglu) j["mlp"] = to_string(mlp);
  if (swiglu_limit > 0) j["swiglu_limit"] = swiglu_limit;
  if (moe.present()) {
    Json e = {{"experts", moe.experts}, {"experts_per_token", moe.experts_per_token},
              {"expert_ffn_hidden", moe.expert_ffn_hidden}, {"routing", to_string(moe.routing)}};
    if (moe.shared_experts > 0) {
      e["shared_experts"] = moe.shared_experts;
      e["shared_ffn_hidden"] = moe.shared_ffn_hidden;
    }
    if (!moe.dense_layers.empty()) e["dense_layers"] = moe.dense_layers;
    if (moe.router_bias) e["router_bias"] = true;
    if (moe.expert_bias) e["expert_bias"] = true;
    if (moe.expert_weights != WeightFormat::native) e["expert_weights"] = to_string(moe.expert_weights);
    j["moe"] = e;
  }
  return j;
}

std::string rope_scaling_type(const ModelSpec& m, const std::string& where, const std::string& key) {
  if (m.rope_scaling.is_null()) return "default";
  if (!m.rope_scaling.is_object())
    throw Error(where, key, "expected an object or null, got " + json_excerpt(m.rope_scaling),
                "null or {\"rope_type\": \"llama3\" | \"linear\" | \"yarn\", ...}");
  const Json& rs = m.rope_scaling;
  const std::string supported = "null, \"default\", \"llama3\" (Llama 3.1/3.2; with factor, low_freq_factor, "
                                "high_freq_factor and original_max_position_embeddings), \"linear\" (factor) or "
                                "\"yarn\" (factor, original_max_position_embeddings; optionally beta_fast, beta_slow, "
                                "attention_factor, mscale, mscale_all_dim, truncate)";
  // Hugging Face's key is rope_type; older configs say type (transformers reads either).
  std::string type;
  for (const char* k : {"rope_type", "type"}) {
    if (!rs.contains(k) || rs[k].is_null()) continue;
    if (!rs[k].is_string())
      throw Error(where, key + "." + k, "expected a string, got " + json_excerpt(rs[k]), supported);
    const std::string t = rs[k].get<std::string>();
    if (!type.empty() && t != type)
      throw Error(where, key, "rope_type '" + type + "' and type '" + t + "' disagree", supported);
    type = t;
  }
  if (type.empty()) throw Error(where, key + ".rope_type", "missing: the scaling's type is not given", supported);
  if (type == "default") return type;  // transformers' name for plain RoPE
  std::vector<std::string> keys;
  if (type == "llama3") keys = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  else if (type == "linear") keys = {"factor"};
  else if (type == "yarn")
    keys = {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "mscale",
            "mscale_all_dim", "truncate"};
  else
    throw Error(where, key + ".rope_type", key + " of type '" + type + "' is not supported", supported);
  std::string known = "rope_type";
  for (const auto& k : keys) known += ", " + k;
  for (auto it = rs.begin(); it != rs.end(); ++it) {
    const std::string& k = it.key();
    if (k != "rope_type" && k != "type" && std::find(keys.begin(), keys.end(), k) == keys.end())
      throw Error(where, key + "." + k, "unknown key of a " + type + " " + key, known);
  }
  JsonReader r(rs, where + " " + key);
  (void)r.f64_in("factor", 1.0, 1e6);
  if (type == "yarn") {
    (void)r.i64_in("original_max_position_embeddings", 1, int64_t{1} << 40);
    for (const char* k : {"beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim"})
      if (r.has(k)) (void)r.f64_in(k, 0.0, 1e6);
    if (r.has("truncate")) (void)r.boolean("truncate");
  }
  if (type != "llama3") return type;
  const double low = r.f64_in("low_freq_factor", 1e-6, 1e6);
  const double high = r.f64_in("high_freq_factor", 1e-6, 1e6);
  // Equal factors leave no band to interpolate (Llama-4-Scout-Instruct: 1 and 1).
  if (high < low)
    r.fail("high_freq_factor", "must be at least low_freq_factor (" + format_count(low) + ")",
           "Llama 3.1 uses low_freq_factor 1, high_freq_factor 4");
  (void)r.i64_in("original_max_position_embeddings", 1, int64_t{1} << 40);
  return type;
}

Rope rope_of(const ModelSpec& m, const std::string& where, const std::string& key) {
  Rope rope(m.rope_theta);
  const std::string type = rope_scaling_type(m, where, key);
  if (type == "default") return rope;
  if (type != "llama3" && type != "yarn" && type != "linear")
    throw Error(where, key + ".rope_type",
                key + " of type '" + type + "' is planned, not run: the executor computes plain RoPE, llama3, linear and yarn scaling",
                "a model with plain RoPE, llama3, linear or yarn scaling to run it (plans price any RoPE alike)");
  JsonReader r(m.rope_scaling, where + " " + key);
  if (type == "linear") {  // Hugging Face's _compute_linear_scaling_rope_parameters
    rope.linear = true;
    rope.factor = r.f64_in("factor", 1.0, 1e6);
    return rope;
  }
  if (type == "yarn") {
    // Hugging Face's _compute_yarn_parameters (transformers/modeling_rope_utils.py).
    rope.factor = r.f64_in("factor", 1.0, 1e6);
    rope.yarn_original_max_position =
        static_cast<double>(r.i64_in("original_max_position_embeddings", 1, int64_t{1} << 40));
    auto opt = [&](const char* k, double fallback) { return r.has(k) ? r.f64_in(k, 0.0, 1e6) : fallback; };
    rope.beta_fast = opt("beta_fast", 32.0);
    rope.beta_slow = opt("beta_slow", 1.0);
    rope.truncate = r.has("truncate") ? r.boolean("truncate") : true;
    auto mscale = [](double scale, double ms) { return scale <= 1.0 ? 1.0 : 0.1 * ms * std::log(scale) + 1.0; };
    const double ms = opt("mscale", 0.0), ms_all = opt("mscale_all_dim", 0.0);
    rope.attention_factor = r.has("attention_factor")   ? r.f64_in("attention_factor", 0.0, 1e6)
                            : ms > 0 && ms_all > 0 ? mscale(rope.factor, ms) / mscale(rope.factor, ms_all)
                                                   : mscale(rope.factor, 1.0);
    return rope;
  }
  rope.factor = r.f64_in("factor", 1.0, 1e6);
  rope.low_freq_factor = r.f64_in("low_freq_factor", 1e-6, 1e6);
  rope.high_freq_factor = r.f64_in("high_freq_factor", 1e-6, 1e6);
  rope.original_max_position =
      static_cast<double>(r.i64_in("original_max_position_embeddings", 1, int64_t{1} << 40));
  return rope;
}

namespace {
constexpr int64_t kMaxLayers = 4096, kMaxWidth = int64_t{1} << 18, kMaxHeads = 4096, kMaxHeadDim = 4096;
constexpr int64_t kMaxFfn = int64_t{1} << 21, kMaxVocab = int64_t{1} << 24, kMaxExperts = int64_t{1} << 14;
constexpr int64_t kMaxWindow = int64_t{1} << 40;

// Layer indices (nope_layers, moe.dense_layers): ascending, distinct, each in [0, layers).
std::vector<int64_t> layer_list(const JsonReader& r, const std::string& key, int64_t layers) {
  const Json& a = r.array(key);
  std::vector<int64_t> v;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer() || a[i].get<int64_t>() < 0 || a[i].get<int64_t>() >= layers ||
        (!v.empty() && a[i].get<int64_t>() <= v.back()))
      r.fail(key, "entry " + std::to_string(i) + " (" + json_excerpt(a[i]) + ") is not a layer index above the one before",
             "ascending layer indices in [0, " + std::to_string(layers) + ")");
    v.push_back(a[i].get<int64_t>());
  }
  return v;
}

void read_layer_kinds(const JsonReader& r, ModelSpec& m) {
  if (r.has("layer_attention")) {
    const Json& a = r.array("layer_attention");
    if (static_cast<int64_t>(a.size()) != m.layers)
      r.fail("layer_attention", "has " + std::to_string(a.size()) + " entries for " + std::to_string(m.layers) + " layers",
             "one of " + names_text(kLayerAttention, true) + " per layer");
    for (size_t i = 0; i < a.size(); ++i) {
      const std::optional<LayerAttention> k =
          a[i].is_string() ? enum_named<LayerAttention>(a[i].get<std::string>(), kLayerAttention) : std::nullopt;
      if (!k) r.fail("layer_attention", "layer " + std::to_string(i) + " is " + json_excerpt(a[i]), names_text(kLayerAttention, true));
      m.layer_attention.push_back(*k);
    }
    if (m.layers_of(LayerAttention::global) == m.layers) m.layer_attention.clear();  // the default, spelled out
  }
  for (auto [kind, key, field] : {std::tuple{LayerAttention::sliding, "sliding_window", &m.sliding_window},
                                  std::tuple{LayerAttention::chunked, "attention_chunk", &m.attention_chunk}}) {
    const bool used = m.layers_of(kind) > 0;
    if (used && !r.has(key))
      r.fail(key, std::string("missing: layer_attention has ") + to_string(kind) + " layers", "their window in tokens");
    if (!used && r.has(key))
      r.fail(key, std::string("is given but no layer is ") + to_string(kind),
             std::string("layer_attention with \"") + to_string(kind) + "\" layers, or no " + key);
    if (used) *field = r.i64_in(key, 1, kMaxWindow);
  }
  if (r.has("nope_layers")) m.nope_layers = layer_list(r, "nope_layers", m.layers);
  m.attention_sinks = r.boolean_or("attention_sinks", false);
  m.o_bias = r.boolean_or("o_bias", false);
  m.sandwich_norms = r.boolean_or("sandwich_norms", false);
  m.mlp = read_named(r, "mlp", Mlp::swiglu, kMlp, "an MLP");
  if (m.mlp == Mlp::gpt_oss) m.swiglu_limit = r.f64_in("swiglu_limit", 1e-6, 1e6);
  else if (r.has("swiglu_limit")) r.fail("swiglu_limit", "is gpt-oss's clamp", "\"mlp\": \"gpt_oss\", or no swiglu_limit");
}

void read_moe(const JsonReader& parent, ModelSpec& m) {
  if (!parent.has("moe")) return;
  const JsonReader r(parent.object("moe"), parent.where() + " moe");
  MoeSpec& e = m.moe;
  e.experts = r.i64_in("experts", 2, kMaxExperts);
  e.experts_per_token = r.i64_in("experts_per_token", 1, e.experts);
  e.expert_ffn_hidden = r.i64_in("expert_ffn_hidden", 1, kMaxFfn);
  e.shared_experts = r.i64_in_or("shared_experts", 0, 64, 0);
  if (e.shared_experts > 0) e.shared_ffn_hidden = r.i64_in("shared_ffn_hidden", 1, kMaxFfn);
  else if (r.has("shared_ffn_hidden")) r.fail("shared_ffn_hidden", "is given without shared_experts", "shared_experts >= 1");
  if (r.has("dense_layers")) e.dense_layers = layer_list(r, "dense_layers", m.layers);
  if (static_cast<int64_t>(e.dense_layers.size()) == m.layers)
    r.fail("dense_layers", "names every layer: no layer is a mixture", "the layers with a dense MLP only (or no moe)");
  e.routing = read_named(r, "routing", Routing::softmax_topk, kRouting, "a routing");
  e.router_bias = r.boolean_or("router_bias", false);
  e.expert_bias = r.boolean_or("expert_bias", false);
  e.expert_weights = read_named(r, "expert_weights", WeightFormat::native, kWeightFormat, "a weight format");
}
}  // namespace

ModelSpec model_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema("oomb.model/1");
  ModelSpec m;
  m.id = r.str("id");
  m.family = r.str("family");
  m.source = r.str("source");
  // Physical bounds, far beyond any published model, so that every derived count (parameters,
  // bytes per token) fits an int64 and an absurd file is refused by key, not by a failed allocation.
  m.layers = r.i64_in("layers", 1, kMaxLayers);
  m.hidden = r.i64_in("hidden", 1, kMaxWidth);
  m.q_heads = r.i64_in("q_heads", 1, kMaxHeads);
  m.kv_heads = r.i64_in("kv_heads", 1, kMaxHeads);
  m.head_dim = r.i64_in("head_dim", 1, kMaxHeadDim);
  m.ffn_hidden = r.i64_in("ffn_hidden", 1, kMaxFfn);
  m.vocab = r.i64_in("vocab", 1, kMaxVocab);
  m.tied_embeddings = r.boolean("tied_embeddings");
  m.qkv_bias = r.boolean("qkv_bias");
  m.qk_norm = r.boolean_or("qk_norm", false);
  m.rope_theta = r.f64_in("rope_theta", 1.0, 1e12);
  m.norm_eps = r.f64_in("norm_eps", 1e-12, 1.0);
  m.max_position = r.i64_in("max_position", 1, int64_t{1} << 40);
  if (r.has("rope_scaling")) {
    m.rope_scaling = r.object("rope_scaling");
    (void)rope_scaling_type(m, where);
  }
  read_layer_kinds(r, m);
  read_moe(r, m);
  if (m.q_heads % m.kv_heads != 0)
    r.fail("kv_heads", "kv_heads (" + std::to_string(m.kv_heads) + ") does not divide q_heads (" +
                           std::to_string(m.q_heads) + ")",
           "grouped-query attention needs q_heads % kv_heads == 0");
  if (m.head_dim % 2 != 0) r.fail("head_dim", "must be even for rotary embeddings");
  if (m.q_heads * m.head_dim > kMaxWidth)
    r.fail("head_dim", "q_heads x head_dim (" + std::to_string(m.q_heads * m.head_dim) + ") is out of range",
           "at most " + std::to_string(kMaxWidth));
  // q_heads x head_dim need not equal hidden (Qwen3 and Gemma give head_dim explicitly); every
  // projection is sized by q_dim().
  return m;
}

Json GpuSpec::to_json() const {
  Json j = {{"schema", "oomb.gpu/1"}, {"id", id}, {"name", name}, {"kind", kind}, {"source", source},
            {"hbm_capacity_bytes", hbm_capacity_bytes}, {"hbm_bytes_per_s", hbm_bytes_per_s},
            {"bf16_flops_per_s", bf16_flops_per_s}, {"fp32_flops_per_s", fp32_flops_per_s},
            {"h2d_bytes_per_s", h2d_bytes_per_s}, {"d2h_bytes_per_s", d2h_bytes_per_s},
            {"duplex_factor", duplex_factor}, {"copy_engines", copy_engines}, {"sm_count", sm_count},
            {"reserved_bytes", reserved_bytes}, {"interconnect_bytes_per_s", interconnect_bytes_per_s},
            {"collective_latency_s", collective_latency_s}, {"collective_step_latency_s", collective_step_latency_s},
            {"launch_overhead_s", launch_overhead_s}, {"default_host", default_host},
            {"efficiency", {{"gemm", efficiency.gemm}, {"attention", efficiency.attention},
                            {"attention_backward", efficiency.attention_backward},
                            {"memory_bound", efficiency.memory_bound}, {"copy", efficiency.copy}}}};
  if (efficiency.expert_gemm != efficiency.gemm) j["efficiency"]["expert_gemm"] = efficiency.expert_gemm;
  if (!sources.empty()) j["sources"] = sources;
  if (!allreduce_curve.empty()) {
    Json points = Json::array();
    for (const auto& p : allreduce_curve) {
      Json q = {{"bytes", p.bytes}, {"seconds", p.seconds}};
      if (p.bf16_seconds > 0) q["bf16_seconds"] = p.bf16_seconds;
      if (p.all_gather_seconds > 0) q["all_gather_seconds"] = p.all_gather_seconds;
      points.push_back(q);
    }
    j["allreduce_curve"] = {{"ranks", allreduce_curve_ranks}, {"points", points}};
  }
  if (!calibrated_from.empty()) j["calibrated_from"] = calibrated_from;
  if (cpu_threads > 0) j["cpu_threads"] = cpu_threads;
  if (!cuda_device_names.empty()) j["cuda_device_names"] = cuda_device_names;
  if (nccl_channels > 0) j["nccl_channels"] = nccl_channels;
  return j;
}

namespace {
constexpr double kMinRate = 1e3, kMaxRate = 1e15;
constexpr double kMinFlops = 1e6, kMaxFlops = 1e18;
constexpr int64_t kMaxMemoryBytes = int64_t{1} << 50;

double fraction(const JsonReader& r, const std::string& key, double fallback) {
  double v = r.f64_or(key, fallback);
  if (v <= 0 || v > 1.0) r.fail(key, "must be in (0, 1]", "a fraction of the peak, e.g. 0.7");
  return v;
}
}  // namespace

GpuSpec gpu_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema("oomb.gpu/1");
  GpuSpec g;
  g.id = r.str("id");
  g.name = r.str_or("name", g.id);
  g.kind = r.str_or("kind", "gpu");
  if (g.kind != "gpu" && g.kind != "cpu") r.fail("kind", "unknown kind '" + g.kind + "'", "\"gpu\" or \"cpu\"");
  g.source = r.str("source");
  if (r.has("sources")) {
    for (auto& [k, v] : r.object("sources").items()) {
      if (!v.is_string()) r.fail("sources." + k, "must be a string");
      g.sources[k] = v.get<std::string>();
    }
  }
  // Physical bounds (1 kB/s .. 1 PB/s, 1 MFLOP/s .. 1 EFLOP/s, up to 1 PiB of memory): a rate
  // of 1e-300 would make every time infinite and every verdict meaningless.
  g.hbm_capacity_bytes = r.i64_in("hbm_capacity_bytes", 1, kMaxMemoryBytes);
  g.hbm_bytes_per_s = r.f64_in("hbm_bytes_per_s", kMinRate, kMaxRate);
  g.bf16_flops_per_s = r.f64_in("bf16_flops_per_s", kMinFlops, kMaxFlops);
  g.fp32_flops_per_s = r.f64_in("fp32_flops_per_s", kMinFlops, kMaxFlops);
  g.h2d_bytes_per_s = r.f64_in("h2d_bytes_per_s", kMinRate, kMaxRate);
  g.d2h_bytes_per_s = r.f64_in("d2h_bytes_per_s", kMinRate, kMaxRate);
  g.duplex_factor = fraction(r, "duplex_factor", 1.0);
  g.copy_engines = r.i64_in("copy_engines", 1, 64);
  g.sm_count = r.i64_in("sm_count", 0, 1 << 20);
  g.reserved_bytes = r.i64_in("reserved_bytes", 0, kMaxMemoryBytes);
  if (g.reserved_bytes >= g.hbm_capacity_bytes)
    r.fail("reserved_bytes", "is not below hbm_capacity_bytes", "the runtime reserve must leave room for the run");
  g.interconnect_bytes_per_s = r.f64_in_or("interconnect_bytes_per_s", 0.0, kMaxRate, 0.0);
  if (g.interconnect_bytes_per_s > 0 && g.interconnect_bytes_per_s < kMinRate)
    r.fail("interconnect_bytes_per_s", "is out of range", "0 (none) or at least 1000 bytes/s");
  g.collective_latency_s = r.f64_in_or("collective_latency_s", 0.0, 1.0, 0.0);
  g.collective_step_latency_s = r.f64_in_or("collective_step_latency_s", 0.0, 1.0, 0.0);
  g.launch_overhead_s = r.f64_in_or("launch_overhead_s", 0.0, 1.0, 5e-6);
  g.default_host = r.str_or("default_host", "");
  g.nccl_channels = r.i64_in_or("nccl_channels", 1, 64, 0);
  if (r.has("cuda_device_names")) {
    int64_t i = 0;
    for (const auto& n : r.array("cuda_device_names")) {
      if (!n.is_string() || n.get<std::string>().empty())
        r.fail("cuda_device_names[" + std::to_string(i) + "]", "is not a non-empty string",
               "the names cudaGetDeviceProperties reports, e.g. [\"NVIDIA H200\"]");
      g.cuda_device_names.push_back(n.get<std::string>());
      ++i;
    }
  }
  if (r.has("efficiency")) {
    JsonReader e(r.object("efficiency"), where + ": efficiency");
    g.efficiency.gemm = fraction(e, "gemm", g.efficiency.gemm);
    g.efficiency.expert_gemm = fraction(e, "expert_gemm", g.efficiency.gemm);
    g.efficiency.attention = fraction(e, "attention", g.efficiency.attention);
    g.efficiency.attention_backward = fraction(e, "attention_backward", g.efficiency.attention);
    g.efficiency.memory_bound = fraction(e, "memory_bound", g.efficiency.memory_bound);
    g.efficiency.copy = fraction(e, "copy", g.efficiency.copy);
  }
  if (r.has("allreduce_curve")) {
    JsonReader c(r.object("allreduce_curve"), where + ": allreduce_curve");
    g.allreduce_curve_ranks = c.i64_in("ranks", 2, 1 << 20);
    int64_t i = 0;
    for (const auto& p : c.array("points")) {
      JsonReader q(p, where + ": allreduce_curve.points[" + std::to_string(i++) + "]");
      GpuSpec::AllReducePoint point{q.i64_in("bytes", 1, kMaxMemoryBytes), q.f64_in("seconds", 1e-9, 3600.0),
                                    q.has("bf16_seconds") ? q.f64_in("bf16_seconds", 1e-9, 3600.0) : 0.0,
                                    q.has("all_gather_seconds") ? q.f64_in("all_gather_seconds", 1e-9, 3600.0) : 0.0};
      if (!g.allreduce_curve.empty() && point.bytes <= g.allreduce_curve.back().bytes)
        q.fail("bytes", "is not above the previous point's", "points in ascending order of bytes");
      if (!g.allreduce_curve.empty() && (point.bf16_seconds > 0) != (g.allreduce_curve.back().bf16_seconds > 0))
        q.fail("bf16_seconds", "is given for some points and not others", "every point or none");
      if (!g.allreduce_curve.empty() &&
          (point.all_gather_seconds > 0) != (g.allreduce_curve.back().all_gather_seconds > 0))
        q.fail("all_gather_seconds", "is given for some points and not others", "every point or none");
      g.allreduce_curve.push_back(point);
    }
    if (g.allreduce_curve.empty()) c.fail("points", "is empty", "at least one measured all-reduce");
  }
  g.calibrated_from = r.str_or("calibrated_from", "");
  g.cpu_threads = r.i64_or("cpu_threads", 0);
  if (g.cpu_threads < 0) r.fail("cpu_threads", "must be positive (or absent)", "the thread count it was calibrated at");
  return g;
}

Json HostSpec::to_json() const {
  Json j = {{"schema", "oomb.host/1"}, {"id", id}, {"name", name}, {"source", source},
            {"ram_bytes", ram_bytes}, {"pinnable_bytes", pinnable_bytes}, {"mem_bytes_per_s", mem_bytes_per_s}};
  if (nvme_bytes > 0) {
    j["nvme_bytes"] = nvme_bytes;
    j["nvme_bytes_per_s"] = nvme_bytes_per_s;
  }
  if (network_bytes_per_s > 0) {
    j["network_bytes_per_s"] = network_bytes_per_s;
    j["network_step_latency_s"] = network_step_latency_s;
  }
  if (!sources.empty()) j["sources"] = sources;
  return j;
}

HostSpec host_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema("oomb.host/1");
  HostSpec h;
  h.id = r.str("id");
  h.name = r.str_or("name", h.id);
  h.source = r.str("source");
  if (r.has("sources")) {
    for (auto& [k, v] : r.object("sources").items()) {
      if (!v.is_string()) r.fail("sources." + k, "must be a string");
      h.sources[k] = v.get<std::string>();
    }
  }
  h.ram_bytes = r.i64_in("ram_bytes", 1, kMaxMemoryBytes);
  h.pinnable_bytes = r.i64_in("pinnable_bytes", 1, kMaxMemoryBytes);
  if (h.pinnable_bytes > h.ram_bytes) r.fail("pinnable_bytes", "exceeds ram_bytes", "pinned memory is part of RAM");
  h.mem_bytes_per_s = r.f64_in("mem_bytes_per_s", kMinRate, kMaxRate);
  h.nvme_bytes = r.i64_in_or("nvme_bytes", 0, kMaxMemoryBytes, 0);
  h.nvme_bytes_per_s = r.f64_in_or("nvme_bytes_per_s", 0.0, kMaxRate, 0.0);
  if (h.nvme_bytes > 0 && h.nvme_bytes_per_s < kMinRate)
    r.fail("nvme_bytes_per_s", "must be at least 1000 bytes/s when nvme_bytes is set");
  h.network_bytes_per_s = r.f64_in_or("network_bytes_per_s", 0.0, kMaxRate, 0.0);
  if (h.network_bytes_per_s > 0 && h.network_bytes_per_s < kMinRate)
    r.fail("network_bytes_per_s", "is out of range", "0 (no network) or at least 1000 bytes/s");
  h.network_step_latency_s = r.f64_in_or("network_step_latency_s", 0.0, 1.0, 0.0);
  return h;
}

namespace {

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || (s.size() > 5 && s.substr(s.size() - 5) == ".json");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

template <class T, class F>
T load(const std::string& kind, const std::string& flag, const std::string& id_or_path, F from_json) {
  if (id_or_path.empty()) throw Error(flag, "", "empty", "a catalog id (see `oomb models`) or a path to a JSON file");
  if (looks_like_path(id_or_path)) return from_json(read_json_file(id_or_path), id_or_path);
  const std::string id = resolve_catalog_id(kind, id_or_path);
  const std::string* text = id.empty() ? nullptr : catalog_text(kind, id);
  if (!text) {
    const std::vector<std::string> near = closest_catalog_ids(kind, id_or_path);
    throw Error(flag, id_or_path, "unknown id" + (near.empty() ? std::string() : " (did you mean " + join(near) + "?)"),
                "known: " + join(catalog_ids(kind)) + "; or give a path to a JSON file" +
                    (kind == "llm" ? " or to a Hugging Face config.json / model folder" : ""));
  }
  std::string where = "catalog " + kind + "/" + id + ".json";
  return from_json(parse_json(*text, where), where);
}

}  // namespace

ModelSpec load_model(const std::string& s) {
  // The rule: a catalog id (as typed: "tiny", "Qwen2.5-7B") wins unless the argument looks like a
  // path (a '/' or a ".json" ending), so a folder ./tiny in the current directory never silently
  // replaces --model tiny (write ./tiny for it). A bare name that is no catalog id may still be a
  // model folder. A folder with a config.json, or a config.json in the Hugging Face form; anything
  // else (an oomb.model/1 file, a catalog id) goes the usual way.
  std::error_code ec;
  const bool path = looks_like_path(s);
  const std::string id = path || s.empty() ? std::string() : resolve_catalog_id("llm", s);
  const bool catalog = !id.empty() && catalog_text("llm", id) != nullptr;
  if (!s.empty() && !catalog && (path || std::filesystem::exists(std::filesystem::path(s) / "config.json", ec)))
    if (auto hf = load_hf_model(s)) return *hf;
  return load<ModelSpec>("llm", "--model", s, model_from_json);
}
GpuSpec load_gpu(const std::string& s) { return load<GpuSpec>("gpu", "--gpu", s, gpu_from_json); }
HostSpec load_host(const std::string& s) { return load<HostSpec>("host", "--host", s, host_from_json); }

std::vector<std::string> model_ids() { return catalog_ids("llm"); }
std::vector<std::string> gpu_ids() { return catalog_ids("gpu"); }
std::vector<std::string> host_ids() { return catalog_ids("host"); }

// Views, not strings: the simulator's fast path asks this several times per evaluation.

}  // namespace oomb::models
