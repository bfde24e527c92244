#include "models/specs.h"

#include <filesystem>

#include "core/error.h"
#include "models/catalog.h"
#include "models/hf_config.h"
#include "models/lookup.h"

namespace oomb::models {

int64_t ModelSpec::params_per_layer() const {
  int64_t attn = hidden * q_dim() + 2 * hidden * kv_dim() + q_dim() * hidden;
  if (qkv_bias) attn += q_dim() + 2 * kv_dim();
  int64_t mlp = 3 * hidden * ffn_hidden;
  int64_t norms = 2 * hidden + (qk_norm ? 2 * head_dim : 0);
  return attn + mlp + norms;
}

int64_t ModelSpec::param_count() const {
  return embedding_params() + lm_head_params() + layers * params_per_layer() + hidden;
}

int64_t ModelSpec::kv_bytes_per_token(int64_t dtype_bytes) const {
  return 2 * layers * kv_dim() * dtype_bytes;
}

double ModelSpec::dense_forward_flops_per_token() const {
  double matmul = static_cast<double>(hidden * q_dim() + 2 * hidden * kv_dim() + q_dim() * hidden +
                                      3 * hidden * ffn_hidden) *
                  static_cast<double>(layers);
  matmul += static_cast<double>(vocab * hidden);  // LM head
  return 2.0 * matmul;
}

Json ModelSpec::to_json() const {
  Json j = {{"schema", "oomb.model/1"}, {"id", id}, {"family", family}, {"source", source},
            {"layers", layers}, {"hidden", hidden}, {"q_heads", q_heads}, {"kv_heads", kv_heads},
            {"head_dim", head_dim}, {"ffn_hidden", ffn_hidden}, {"vocab", vocab},
            {"tied_embeddings", tied_embeddings}, {"qkv_bias", qkv_bias}, {"rope_theta", rope_theta},
            {"norm_eps", norm_eps}, {"max_position", max_position}};
  if (qk_norm) j["qk_norm"] = true;  // absent = false: older files and plans stay byte-identical
  if (!rope_scaling.is_null()) j["rope_scaling"] = rope_scaling;
  return j;
}

ModelSpec model_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema("oomb.model/1");
  ModelSpec m;
  m.id = r.str("id");
  m.family = r.str("family");
  m.source = r.str("source");
  m.layers = r.i64_positive("layers");
  m.hidden = r.i64_positive("hidden");
  m.q_heads = r.i64_positive("q_heads");
  m.kv_heads = r.i64_positive("kv_heads");
  m.head_dim = r.i64_positive("head_dim");
  m.ffn_hidden = r.i64_positive("ffn_hidden");
  m.vocab = r.i64_positive("vocab");
  m.tied_embeddings = r.boolean("tied_embeddings");
  m.qkv_bias = r.boolean("qkv_bias");
  m.qk_norm = r.boolean_or("qk_norm", false);
  m.rope_theta = r.f64_positive("rope_theta");
  m.norm_eps = r.f64_positive("norm_eps");
  m.max_position = r.i64_positive("max_position");
  if (r.has("rope_scaling")) m.rope_scaling = r.object("rope_scaling");
  if (m.q_heads % m.kv_heads != 0)
    r.fail("kv_heads", "kv_heads (" + std::to_string(m.kv_heads) + ") does not divide q_heads (" +
                           std::to_string(m.q_heads) + ")",
           "grouped-query attention needs q_heads % kv_heads == 0");
  if (m.head_dim % 2 != 0) r.fail("head_dim", "must be even for rotary embeddings");
  if (m.hidden % m.q_heads != 0)
    r.fail("q_heads", "q_heads (" + std::to_string(m.q_heads) + ") does not divide hidden (" +
                          std::to_string(m.hidden) + ")", "hidden % q_heads == 0");
  return m;
}

Json GpuSpec::to_json() const {
  Json j = {{"schema", "oomb.gpu/1"}, {"id", id}, {"name", name}, {"kind", kind}, {"source", source},
            {"hbm_capacity_bytes", hbm_capacity_bytes}, {"hbm_bytes_per_s", hbm_bytes_per_s},
            {"bf16_flops_per_s", bf16_flops_per_s}, {"fp32_flops_per_s", fp32_flops_per_s},
            {"h2d_bytes_per_s", h2d_bytes_per_s}, {"d2h_bytes_per_s", d2h_bytes_per_s},
            {"duplex_factor", duplex_factor}, {"copy_engines", copy_engines}, {"sm_count", sm_count},
            {"reserved_bytes", reserved_bytes}, {"interconnect_bytes_per_s", interconnect_bytes_per_s},
            {"launch_overhead_s", launch_overhead_s}, {"default_host", default_host},
            {"efficiency", {{"gemm", efficiency.gemm}, {"attention", efficiency.attention},
                            {"attention_backward", efficiency.attention_backward},
                            {"memory_bound", efficiency.memory_bound}, {"copy", efficiency.copy}}}};
  if (!sources.empty()) j["sources"] = sources;
  if (!calibrated_from.empty()) j["calibrated_from"] = calibrated_from;
  return j;
}

namespace {
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
  g.hbm_capacity_bytes = r.i64_positive("hbm_capacity_bytes");
  g.hbm_bytes_per_s = r.f64_positive("hbm_bytes_per_s");
  g.bf16_flops_per_s = r.f64_positive("bf16_flops_per_s");
  g.fp32_flops_per_s = r.f64_positive("fp32_flops_per_s");
  g.h2d_bytes_per_s = r.f64_positive("h2d_bytes_per_s");
  g.d2h_bytes_per_s = r.f64_positive("d2h_bytes_per_s");
  g.duplex_factor = fraction(r, "duplex_factor", 1.0);
  g.copy_engines = r.i64_positive("copy_engines");
  g.sm_count = r.i64("sm_count");
  g.reserved_bytes = r.i64("reserved_bytes");
  if (g.reserved_bytes >= g.hbm_capacity_bytes)
    r.fail("reserved_bytes", "is not below hbm_capacity_bytes", "the runtime reserve must leave room for the run");
  g.interconnect_bytes_per_s = r.f64_or("interconnect_bytes_per_s", 0.0);
  g.launch_overhead_s = r.f64_or("launch_overhead_s", 5e-6);
  g.default_host = r.str_or("default_host", "");
  if (r.has("efficiency")) {
    JsonReader e(r.object("efficiency"), where + ": efficiency");
    g.efficiency.gemm = fraction(e, "gemm", g.efficiency.gemm);
    g.efficiency.attention = fraction(e, "attention", g.efficiency.attention);
    g.efficiency.attention_backward = fraction(e, "attention_backward", g.efficiency.attention);
    g.efficiency.memory_bound = fraction(e, "memory_bound", g.efficiency.memory_bound);
    g.efficiency.copy = fraction(e, "copy", g.efficiency.copy);
  }
  g.calibrated_from = r.str_or("calibrated_from", "");
  return g;
}

Json HostSpec::to_json() const {
  Json j = {{"schema", "oomb.host/1"}, {"id", id}, {"name", name}, {"source", source},
            {"ram_bytes", ram_bytes}, {"pinnable_bytes", pinnable_bytes}, {"mem_bytes_per_s", mem_bytes_per_s}};
  if (nvme_bytes > 0) {
    j["nvme_bytes"] = nvme_bytes;
    j["nvme_bytes_per_s"] = nvme_bytes_per_s;
  }
  return j;
}

HostSpec host_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema("oomb.host/1");
  HostSpec h;
  h.id = r.str("id");
  h.name = r.str_or("name", h.id);
  h.source = r.str("source");
  h.ram_bytes = r.i64_positive("ram_bytes");
  h.pinnable_bytes = r.i64_positive("pinnable_bytes");
  if (h.pinnable_bytes > h.ram_bytes) r.fail("pinnable_bytes", "exceeds ram_bytes", "pinned memory is part of RAM");
  h.mem_bytes_per_s = r.f64_positive("mem_bytes_per_s");
  h.nvme_bytes = r.i64_or("nvme_bytes", 0);
  h.nvme_bytes_per_s = r.f64_or("nvme_bytes_per_s", 0.0);
  if (h.nvme_bytes > 0 && h.nvme_bytes_per_s <= 0)
    r.fail("nvme_bytes_per_s", "must be positive when nvme_bytes is set");
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
  // A folder with a config.json, or a config.json in the Hugging Face form; anything else (an
  // oomb.model/1 file, a catalog id) goes the usual way.
  std::error_code ec;
  if (!s.empty() && (looks_like_path(s) || std::filesystem::exists(std::filesystem::path(s) / "config.json", ec)))
    if (auto hf = load_hf_model(s)) return *hf;
  return load<ModelSpec>("llm", "--model", s, model_from_json);
}
GpuSpec load_gpu(const std::string& s) { return load<GpuSpec>("gpu", "--gpu", s, gpu_from_json); }
HostSpec load_host(const std::string& s) { return load<HostSpec>("host", "--host", s, host_from_json); }

std::vector<std::string> model_ids() { return catalog_ids("llm"); }
std::vector<std::string> gpu_ids() { return catalog_ids("gpu"); }
std::vector<std::string> host_ids() { return catalog_ids("host"); }

int64_t dtype_bytes(const std::string& dtype, const std::string& where) {
  if (dtype == "fp32") return 4;
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp8") return 1;
  throw Error(where, dtype, "unknown dtype", "one of fp32, bf16, fp16, fp8");
}

}  // namespace oomb::models
