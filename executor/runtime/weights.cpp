#include "executor/runtime/weights.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "core/files.h"
#include "core/units.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/rng.h"
#include "step/config.h"

namespace oomb::executor {

static_assert(std::endian::native == std::endian::little, "safetensors and token files are little-endian");

namespace {
std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
}  // namespace

int64_t ParamLayout::add(std::string name, std::vector<int64_t> shape, bool decay) {
  ParamInfo p;
  p.name = std::move(name);
  p.numel = 1;
  for (int64_t d : shape) p.numel = checked_mul(p.numel, d, "parameter count");
  p.shape = std::move(shape);
  p.offset = total_;
  p.decay = decay;
  total_ = checked_add(total_, p.numel, "parameter count");
  params_.push_back(std::move(p));
  return params_.back().offset;
}

namespace {
// The module holding a MoE layer's router and experts: Mixtral's "block_sparse_moe", the Qwen MoE
// families' "mlp" (model.layers.N.mlp.gate.weight, mlp.experts.E.gate_proj.weight).
std::string moe_module(const models::ModelSpec& m) { return m.family == "mixtral" ? "block_sparse_moe" : "mlp"; }
}  // namespace

ParamLayout::ParamLayout(const models::ModelSpec& m) {
  const int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden;
  embed_ = add("model.embed_tokens.weight", {m.vocab, h}, true);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    LayerOffsets o;
    o.input_norm = add(pre + "input_layernorm.weight", {h}, false);
    o.q = add(pre + "self_attn.q_proj.weight", {q, h}, true);
    if (m.qkv_bias) o.q_bias = add(pre + "self_attn.q_proj.bias", {q}, false);
    o.k = add(pre + "self_attn.k_proj.weight", {kv, h}, true);
    if (m.qkv_bias) o.k_bias = add(pre + "self_attn.k_proj.bias", {kv}, false);
    o.v = add(pre + "self_attn.v_proj.weight", {kv, h}, true);
    if (m.qkv_bias) o.v_bias = add(pre + "self_attn.v_proj.bias", {kv}, false);
    o.o = add(pre + "self_attn.o_proj.weight", {h, q}, true);
    if (m.o_bias) o.o_bias = add(pre + "self_attn.o_proj.bias", {h}, false);
    if (m.qk_norm) {
      o.q_norm = add(pre + "self_attn.q_norm.weight", {m.head_dim}, false);
      o.k_norm = add(pre + "self_attn.k_norm.weight", {m.head_dim}, false);
    }
    if (m.attention_sinks) o.sinks = add(pre + "self_attn.sinks", {m.q_heads}, false);
    if (m.sandwich_norms) {
      o.attn_out_norm = add(pre + "post_attention_layernorm.weight", {h}, false);
      o.post_norm = add(pre + "pre_feedforward_layernorm.weight", {h}, false);
      o.mlp_out_norm = add(pre + "post_feedforward_layernorm.weight", {h}, false);
    } else {
      o.post_norm = add(pre + "post_attention_layernorm.weight", {h}, false);
    }
    if (m.moe_layer(l)) {
      o.router = add(pre + moe_module(m) + ".gate.weight", {m.moe.experts, h}, true);
      if (m.moe.router_bias) o.router_bias = add(pre + moe_module(m) + ".gate.bias", {m.moe.experts}, false);
      if (const int64_t fs = m.moe.shared_width(); fs > 0) {
        const std::string shared = pre + moe_module(m) + ".shared_expert.";
        o.shared_gate = add(shared + "gate_proj.weight", {fs, h}, true);
        o.shared_up = add(shared + "up_proj.weight", {fs, h}, true);
        o.shared_down = add(shared + "down_proj.weight", {h, fs}, true);
      }
    } else {
      o.gate = add(pre + "mlp.gate_proj.weight", {f, h}, true);
      o.up = add(pre + "mlp.up_proj.weight", {f, h}, true);
      o.down = add(pre + "mlp.down_proj.weight", {h, f}, true);
    }
    layers_.push_back(o);
  }
  final_norm_ = add("model.norm.weight", {h}, false);
  lm_head_ = m.tied_embeddings ? embed_ : add("lm_head.weight", {m.vocab, h}, true);
  // The routed experts, layer by layer, after everything else (their own row of the buffer table).
  experts_begin_ = total_;
  const int64_t fe = m.moe.expert_ffn_hidden;
  expert_stride_ = m.moe.present() ? 3 * fe * h + (m.moe.expert_bias ? 2 * fe + h : 0) : 0;
  if (m.moe.present() && m.moe.expert_bias) expert_bias_ = 3 * fe * h;
  const bool mixtral = m.family == "mixtral";  // w1 = gate, w3 = up, w2 = down
  for (int64_t l = 0; l < m.layers; ++l) {
    if (!m.moe_layer(l)) continue;
    const std::string pre = "model.layers." + std::to_string(l) + "." + moe_module(m) + ".experts.";
    for (int64_t e = 0; e < m.moe.experts; ++e) {
      const std::string x = pre + std::to_string(e) + ".";
      const int64_t gate = add(x + (mixtral ? "w1.weight" : "gate_proj.weight"), {fe, h}, true);
      add(x + (mixtral ? "w3.weight" : "up_proj.weight"), {fe, h}, true);
      add(x + (mixtral ? "w2.weight" : "down_proj.weight"), {h, fe}, true);
      if (m.moe.expert_bias) {
        add(x + (mixtral ? "w1.bias" : "gate_proj.bias"), {fe}, false);
        add(x + (mixtral ? "w3.bias" : "up_proj.bias"), {fe}, false);
        add(x + (mixtral ? "w2.bias" : "down_proj.bias"), {h}, false);
      }
      if (e == 0) layers_[static_cast<size_t>(l)].experts = gate;
    }
  }
}

ParamLayout ParamLayout::lora(const models::ModelSpec& m, int64_t rank, const std::vector<std::string>& targets) {
  OOMB_ASSERT(rank > 0, "a LoRA layout needs a rank");
  ParamLayout t;
  t.lora_rank_ = rank;
  const auto& names = step::lora_target_names();
  std::array<bool, kLoraTargets> on{};
  for (const std::string& name : targets) {
    const auto it = std::find(names.begin(), names.end(), name);
    OOMB_ASSERT(it != names.end(), "unknown LoRA target " + name);
    on[static_cast<size_t>(it - names.begin())] = true;
  }
  const int64_t h = m.hidden, q = m.q_dim(), kv = m.kv_dim(), f = m.ffn_hidden;
  // (in, out) of each projection, in target order.
  const std::array<std::pair<int64_t, int64_t>, kLoraTargets> dims = {
      {{h, q}, {h, kv}, {h, kv}, {q, h}, {h, f}, {h, f}, {f, h}}};
  t.lora_.resize(static_cast<size_t>(m.layers * kLoraTargets));
  for (int64_t l = 0; l < m.layers; ++l) {
    t.layers_.emplace_back();
    for (int k = 0; k < kLoraTargets; ++k) {
      if (!on[static_cast<size_t>(k)]) continue;
      const std::string& name = names[static_cast<size_t>(k)];
      const std::string module = std::string(k < 4 ? "self_attn." : "mlp.") + name;
      const std::string pre = "base_model.model.model.layers." + std::to_string(l) + "." + module + ".";
      LoraSlot& sl = t.lora_[static_cast<size_t>(l * kLoraTargets + k)];
      sl.in = dims[static_cast<size_t>(k)].first;
      sl.out = dims[static_cast<size_t>(k)].second;
      sl.a = t.add(pre + "lora_A.weight", {rank, sl.in}, true);
      sl.b = t.add(pre + "lora_B.weight", {sl.out, rank}, true);
    }
  }
  t.experts_begin_ = t.total_;
  return t;
}

const ParamInfo* ParamLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

float* ParamTensors::at(const std::string& name) {
  const ParamInfo* p = layout.find(name);
  OOMB_ASSERT(p, "no parameter " + name);
  return data.data() + p->offset;
}

const float* ParamTensors::at(const std::string& name) const {
  const ParamInfo* p = layout.find(name);
  OOMB_ASSERT(p, "no parameter " + name);
  return data.data() + p->offset;
}

ParamTensors zero_params(const models::ModelSpec& m) {
  ParamTensors t;
  t.layout = ParamLayout(m);
  t.data.assign(static_cast<size_t>(t.layout.total()), 0.0f);
  return t;
}

ParamTensors zero_params(ParamLayout layout) {
  ParamTensors t;
  t.layout = std::move(layout);
  t.data.assign(static_cast<size_t>(t.layout.total()), 0.0f);
  return t;
}

Weights random_weights(const models::ModelSpec& m, uint64_t seed, float std, int threads_asked) {
  Weights w = zero_params(m);
  // One normal sample per element in layout order from Rng(seed) (two next() calls each), generated
  // by several threads that each skip to their first element: the values of a single pass, at a
  // fraction of its time (billions of Box-Muller samples take tens of seconds on one thread).
  struct Span {
    float* data;
    int64_t first, numel;  // global element index of data[0]
    bool norm;
  };
  std::vector<Span> spans;
  int64_t total = 0;
  for (const auto& p : w.layout.params()) {
    spans.push_back({w.at(p), total, p.numel, p.name.find("norm") != std::string::npos});
    total += p.numel;
  }
  auto fill = [&](int64_t begin, int64_t end) {
    Rng rng(seed);
    rng.skip(2 * static_cast<uint64_t>(begin));
    for (const Span& sp : spans) {
      const int64_t a = std::max(begin, sp.first), b = std::min(end, sp.first + sp.numel);
      for (int64_t i = a; i < b; ++i) {
        const auto z = static_cast<float>(rng.normal());
        sp.data[i - sp.first] = sp.norm ? 1.0f + 2.5f * std * z : std * z;
      }
    }
  };
  const int64_t threads =
      threads_asked > 0 ? std::min<int64_t>(threads_asked, std::max<int64_t>(total, 1))
                        : std::clamp<int64_t>(total >> 20, 1, std::max<int64_t>(1, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(fill, total * t / threads, total * (t + 1) / threads);
  fill(0, total / threads);
  for (auto& th : pool) th.join();
  return w;
}

double relative_l2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

WorstTensor worst_relative_l2(const ParamTensors& a, const ParamTensors& b) {
  OOMB_ASSERT(a.data.size() == b.data.size(), "the two parameter sets do not share a layout");
  WorstTensor w;
  for (const auto& p : b.layout.params()) {
    const double e = relative_l2(a.at(p), b.at(p), p.numel);
    if (e > w.rel_l2 || w.name.empty()) w = {e, p.name};
  }
  return w;
}

namespace {

// One safetensors file: its header (tensor name -> entry) and where its data starts.
struct SafetensorsFile {
  std::string path;
  Json header;
  int64_t data_start = 0, size = 0;
};

std::vector<int64_t> int64_array(const Json& a);

// The data is the tensors' bytes, each once, end to end (the safetensors rule: no overlap, no hole),
// and nothing after them: two tensors on one byte range, unused bytes and trailing bytes after the
// last tensor are refused, naming the file and the tensor.
void check_byte_ranges(const SafetensorsFile& f) {
  struct Range {
    int64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  const int64_t data = f.size - f.data_start;
  for (auto it = f.header.begin(); it != f.header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    std::vector<int64_t> off;
    try {
      off = int64_array(it->at("data_offsets"));
      if (off.size() != 2) throw std::runtime_error("data_offsets");
    } catch (const std::exception&) {
      throw Error(f.path, it.key(), "malformed header entry", "needs dtype, shape and data_offsets [begin, end]");
    }
    if (off[0] < 0 || off[1] < off[0])
      throw Error(f.path, it.key(), "data_offsets [" + std::to_string(off[0]) + ", " + std::to_string(off[1]) +
                                        "] are not a byte range", "[begin, end] with 0 <= begin <= end");
    if (off[1] > data)
      throw Error(f.path, it.key(), "truncated file: the tensor's data ends at byte " +
                                        std::to_string(f.data_start + off[1]) + " but the file has " +
                                        std::to_string(f.size) + " bytes");
    ranges.push_back({off[0], off[1], it.key()});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  int64_t at = 0;
  const Range* last = nullptr;
  for (const Range& r : ranges) {
    if (r.begin < at)
      throw Error(f.path, r.name, "its bytes [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                      ") overlap those of " + last->name,
                  "each tensor has its own bytes (a corrupt or hand-made file?)");
    if (r.begin > at)
      throw Error(f.path, r.name, "bytes [" + std::to_string(at) + ", " + std::to_string(r.begin) +
                                      ") of the data before it belong to no tensor",
                  "the tensors' bytes lie end to end (a corrupt or hand-made file?)");
    at = r.end;
    last = &r;
  }
  if (at != data)
    throw Error(f.path, last ? last->name : "", std::to_string(data - at) + " bytes after the last tensor's data belong to no tensor",
                "a safetensors file ends with its last tensor (a corrupt or appended file?)");
}

SafetensorsFile open_safetensors(const std::string& path, const std::string& needed_for) {
  SafetensorsFile f;
  f.path = path;
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(path, needed_for, "is not a regular file", "a .safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(path, needed_for, "cannot open the weights file",
                needed_for.empty() ? "a .safetensors file" : "the index maps this tensor to it: is the shard missing?");
  in.seekg(0, std::ios::end);
  f.size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  if (f.size < 8) throw Error(path, "", "truncated safetensors file (" + std::to_string(f.size) + " bytes, no header)");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > static_cast<uint64_t>(f.size - 8) || n > (uint64_t{1} << 30))
    throw Error(path, "", "truncated or corrupt safetensors file: header of " + std::to_string(n) +
                              " bytes but the file has " + std::to_string(f.size) + " bytes");
  std::string text(static_cast<size_t>(n), '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  f.header = parse_json(text, path);
  if (!f.header.is_object()) throw Error(path, "", "safetensors header is not a JSON object");
  f.data_start = 8 + static_cast<int64_t>(n);
  check_byte_ranges(f);
  return f;
}

// IEEE half -> fp32 (exact: every half is an fp32), subnormals, infinities and NaN included.
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);  // subnormal (or zero)
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 0x1f ? sign | 0x7f800000u | (man << 13) : sign | ((exp + 112) << 23) | (man << 13);
  return f32_from_bits(bits);
}

// A header's integer array (shape, data_offsets). Only JSON integers that fit int64: a float would be
// truncated (or, beyond int64, converted with undefined behaviour) by nlohmann's get<int64_t>.
std::vector<int64_t> int64_array(const Json& a) {
  if (!a.is_array()) throw std::runtime_error("not an array");
  std::vector<int64_t> out;
  for (const Json& v : a) {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
      throw std::runtime_error("not an int64");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// Reads tensor p of file f into dst (fp32), checking dtype, shape and extent.
void read_tensor(std::ifstream& in, const SafetensorsFile& f, const ParamInfo& p, float* dst) {
  const Json& e = f.header.at(p.name);
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;
  try {
    dtype = e.at("dtype").get<std::string>();
    shape = int64_array(e.at("shape"));
    const auto off = int64_array(e.at("data_offsets"));
    if (off.size() != 2) throw std::runtime_error("data_offsets");
    begin = off[0];
    end = off[1];
  } catch (const std::exception&) {
    throw Error(f.path, p.name, "malformed header entry", "needs dtype, shape and data_offsets [begin, end]");
  }
  if (shape != p.shape)
    throw Error(f.path, p.name, "shape " + shape_str(shape) + " does not match the model's " + shape_str(p.shape),
                "a weights file for another model or --layers?");
  int64_t elem = 0;
  if (dtype == "F32") elem = 4;
  else if (dtype == "BF16" || dtype == "F16") elem = 2;
  else throw Error(f.path, p.name, "unsupported dtype " + dtype, "F32, BF16 or F16");
  if (begin < 0 || end < begin || end - begin != p.numel * elem)
    throw Error(f.path, p.name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    "] do not hold " + std::to_string(p.numel) + " " + dtype + " values");
  if (end > f.size - f.data_start)
    throw Error(f.path, p.name, "truncated file: the tensor's data ends at byte " + std::to_string(f.data_start + end) +
                                    " but the file has " + std::to_string(f.size) + " bytes");
  in.seekg(f.data_start + begin);
  if (elem == 4) {
    in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(p.numel * 4));
  } else {
    std::vector<uint16_t> raw(static_cast<size_t>(p.numel));
    in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(p.numel * 2));
    if (dtype == "BF16") bf16_to_f32(raw.data(), dst, p.numel);
    else
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = f16_to_f32(raw[static_cast<size_t>(i)]);
  }
  if (!in) throw Error(f.path, p.name, "read error (truncated file?)");
  for (int64_t i = 0; i < p.numel; ++i)
    if (!std::isfinite(dst[i]))
      throw Error(f.path, p.name, "holds a non-finite value (NaN or inf) at element " + std::to_string(i),
                  "initial weights must be finite");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether a tensor the layout lacks may be skipped: a layer the run leaves out (--layers), or a
// non-parameter buffer older checkpoints carry (rotary inverse frequencies).
bool skippable(const std::string& name, const ParamLayout& layout, int64_t checkpoint_layers) {
  if (ends_with(name, ".rotary_emb.inv_freq")) return true;
  const std::string pre = "model.layers.";
  if (name.rfind(pre, 0) != 0) return false;
  size_t i = pre.size();
  int64_t l = 0;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    const int digit = name[i++] - '0';
    // A layer number beyond int64 is no layer of any checkpoint (and must not wrap around into one).
    if (l > (std::numeric_limits<int64_t>::max() - digit) / 10) return false;
    l = l * 10 + digit;
  }
  if (i >= name.size() || name[i] != '.' || l < layout.layers() || l >= checkpoint_layers) return false;
  // The same tensor of layer 0 must be one the layout has: layer l's tensors have layer 0's names.
  return layout.find("model.layers.0" + name.substr(i)) != nullptr;
}

// A tied model (tie_word_embeddings) has no lm_head.weight of its own; a checkpoint may still carry
// it (transformers' save_pretrained of some models does): accepted when it equals the embedding.
bool tied_head(const std::string& name, const models::ModelSpec& m) { return m.tied_embeddings && name == "lm_head.weight"; }

// Reads a tied checkpoint's lm_head.weight from f and refuses it unless it is the embedding, value
// for value.
void check_tied_head(std::ifstream& in, const SafetensorsFile& f, const Weights& w) {
  const ParamInfo* embed = w.layout.find("model.embed_tokens.weight");
  ParamInfo head = *embed;
  head.name = "lm_head.weight";
  std::vector<float> v(static_cast<size_t>(head.numel));
  read_tensor(in, f, head, v.data());
  const float* e = w.at(*embed);
  for (int64_t i = 0; i < head.numel; ++i)
    if (std::memcmp(&v[static_cast<size_t>(i)], &e[i], 4) != 0)
      throw Error(f.path, "lm_head.weight",
                  "differs from model.embed_tokens.weight at element " + std::to_string(i) +
                      ", and the model ties them (tie_word_embeddings): one matrix serves both",
                  "a checkpoint of an untied model needs a config with tie_word_embeddings false");
}

std::string extra_hint(const models::ModelSpec& m) {
  return "the model '" + m.id + "' has no such tensor (a checkpoint of another model, or of a model with " +
         (m.qk_norm ? "different norms or biases" : "q/k norms or other biases") + "?)";
}

// A shard as the index names it: a relative path that stays inside the index's folder (no absolute
// path, no ".." component). Symlinks inside the folder are followed (Hugging Face's cache links
// its snapshot files to blobs). Error naming the index and the tensor otherwise.
std::filesystem::path shard_path(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  const std::filesystem::path p(shard);
  bool up = false;
  for (const auto& part : p) up = up || part == "..";
  if (shard.empty() || p.is_absolute() || p.has_root_name() || p.has_root_directory() || up)
    throw Error(index_path, "weight_map." + tensor,
                "names the shard '" + shard.substr(0, 200) + "', which is not inside the index's folder",
                "shards are files next to the index (a relative name without '..')");
  return std::filesystem::path(index_path).parent_path() / p;
}

Weights read_index(const std::string& index_path, const models::ModelSpec& m, int64_t checkpoint_layers) {
  const Json index = read_json_file(index_path);
  JsonReader r(index, index_path);
  const Json& map = r.object("weight_map");
  Weights w = zero_params(m);
  // Which tensors each shard holds, in the layout's order.
  std::map<std::string, std::vector<const ParamInfo*>> by_shard;
  for (const auto& p : w.layout.params()) {
    auto it = map.find(p.name);
    if (it == map.end())
      throw Error(index_path, p.name, "missing tensor: weight_map does not name a shard for it",
                  "the model '" + m.id + "' needs shape " + shape_str(p.shape) + " (an index for another model?)");
    if (!it->is_string() || it->get<std::string>().empty())
      throw Error(index_path, "weight_map." + p.name, "must name a shard file");
    shard_path(index_path, p.name, it->get<std::string>());
    by_shard[it->get<std::string>()].push_back(&p);
  }
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->is_string()) shard_path(index_path, it.key(), it->get<std::string>());
    if (!w.layout.find(it.key()) && !skippable(it.key(), w.layout, checkpoint_layers) && !tied_head(it.key(), m))
      throw Error(index_path, it.key(), "extra tensor (in shard " + (it->is_string() ? it->get<std::string>() : it->dump()) + ")",
                  extra_hint(m));
  }
  for (const auto& [shard, params] : by_shard) {
    const std::string path = shard_path(index_path, params.front()->name, shard).string();
    const SafetensorsFile f = open_safetensors(path, params.front()->name);
    for (auto it = f.header.begin(); it != f.header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      auto in_map = map.find(it.key());
      if (in_map == map.end() || !in_map->is_string() || in_map->get<std::string>() != shard) {
        if (!w.layout.find(it.key()) && !skippable(it.key(), w.layout, checkpoint_layers) && !tied_head(it.key(), m))
          throw Error(path, it.key(), "extra tensor", extra_hint(m));
        if (in_map == map.end())
          throw Error(path, it.key(), "is in the shard but not in the index's weight_map", index_path + " is stale?");
        throw Error(path, it.key(),
                    "is a second copy: the index maps this tensor to " +
                        (in_map->is_string() ? in_map->get<std::string>() : in_map->dump()) +
                        ", and this shard holds it too",
                    "each tensor in one shard (" + index_path + " or the shards are from different checkpoints?)");
      }
    }
    std::ifstream in(path, std::ios::binary);
    for (const ParamInfo* p : params) {
      if (!f.header.contains(p->name))
        throw Error(path, p->name, "missing tensor: the index maps it to this shard, which does not hold it",
                    "a shard from another checkpoint? (" + index_path + ")");
      read_tensor(in, f, *p, w.at(*p));
    }
  }
  if (auto it = map.find("lm_head.weight"); it != map.end() && tied_head("lm_head.weight", m) && it->is_string()) {
    const std::string path = shard_path(index_path, "lm_head.weight", it->get<std::string>()).string();
    const SafetensorsFile f = open_safetensors(path, "lm_head.weight");
    if (!f.header.contains("lm_head.weight"))
      throw Error(path, "lm_head.weight", "missing tensor: the index maps it to this shard, which does not hold it",
                  "a shard from another checkpoint? (" + index_path + ")");
    std::ifstream in(path, std::ios::binary);
    check_tied_head(in, f, w);
  }
  return w;
}

}  // namespace

Weights read_safetensors(const std::string& path, const models::ModelSpec& m, int64_t checkpoint_layers) {
  if (checkpoint_layers < 0) checkpoint_layers = std::numeric_limits<int64_t>::max();
  const SafetensorsFile f = open_safetensors(path, "");
  Weights w = zero_params(m);
  for (auto it = f.header.begin(); it != f.header.end(); ++it)
    if (it.key() != "__metadata__" && !w.layout.find(it.key()) && !skippable(it.key(), w.layout, checkpoint_layers) &&
        !tied_head(it.key(), m))
      throw Error(path, it.key(), "extra tensor", extra_hint(m));
  std::ifstream in(path, std::ios::binary);
  for (const auto& p : w.layout.params()) {
    if (!f.header.contains(p.name))
      throw Error(path, p.name, "missing tensor",
                  "the model '" + m.id + "' needs shape " + shape_str(p.shape) + " (a weights file for another model?)");
    read_tensor(in, f, p, w.at(p));
  }
  if (f.header.contains("lm_head.weight") && tied_head("lm_head.weight", m)) check_tied_head(in, f, w);
  return w;
}

Weights read_checkpoint(const std::string& path, const models::ModelSpec& m, int64_t checkpoint_layers) {
  if (checkpoint_layers < 0) checkpoint_layers = std::numeric_limits<int64_t>::max();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    // The single file first, as Hugging Face's loader (and write_checkpoint's switch: a single file
    // replaces shards the moment it is renamed into place, before the index is removed).
    const std::filesystem::path d(path);
    if (std::filesystem::exists(d / "model.safetensors", ec))
      return read_safetensors((d / "model.safetensors").string(), m, checkpoint_layers);
    if (std::filesystem::exists(d / "model.safetensors.index.json", ec))
      return read_index((d / "model.safetensors.index.json").string(), m, checkpoint_layers);
    throw Error("--weights", path, "the folder holds neither model.safetensors.index.json nor model.safetensors",
                "a Hugging Face checkpoint folder, an index .json or a .safetensors file");
  }
  if (ends_with(path, ".json")) return read_index(path, m, checkpoint_layers);
  return read_safetensors(path, m, checkpoint_layers);
}

CheckpointPaths checkpoint_paths(const std::string& path) {
  namespace fs = std::filesystem;
  CheckpointPaths c;
  c.folder = !ends_with(path, ".safetensors");
  c.dir = c.folder ? path : fs::path(path).parent_path().string();
  if (c.dir.empty()) c.dir = ".";
  c.stem = c.folder ? "model" : fs::path(path).stem().string();
  c.files = {c.folder ? (fs::path(path) / "model.safetensors").string() : path,
             (fs::path(c.dir) / (c.stem + ".safetensors.index.json")).string()};
  return c;
}

void check_checkpoint_writable(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const CheckpointPaths c = checkpoint_paths(path);
  if (!c.folder) return check_writable(path, flag);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw Error(flag, path, "is a file, not a folder", "a checkpoint folder (existing or new), or FILE.safetensors");
  if (fs::is_directory(st)) {
    if (::access(path.c_str(), W_OK | X_OK) != 0)
      throw Error(flag, path, "cannot be written: the folder is not writable", "write elsewhere");
    return;
  }
  // A new folder: created with its missing parents under the nearest existing one.
  fs::path up = fs::absolute(fs::path(path), ec).parent_path();
  while (!up.empty() && !fs::exists(fs::status(up, ec)) && up != up.root_path()) up = up.parent_path();
  if (!fs::is_directory(fs::status(up, ec)))
    throw Error(flag, path, "cannot be written: " + up.string() + " is not a folder", "write elsewhere");
  if (::access(up.c_str(), W_OK | X_OK) != 0)
    throw Error(flag, path, "cannot be written: folder " + up.string() + " is not writable", "write elsewhere");
}

std::vector<std::string> checkpoint_input_files(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return {};
  std::error_code ec;
  std::string index;
  if (fs::is_directory(path, ec)) {
    const fs::path d(path);
    if (fs::exists(d / "model.safetensors", ec)) return {(d / "model.safetensors").string()};
    if (!fs::exists(d / "model.safetensors.index.json", ec)) return {};
    index = (d / "model.safetensors.index.json").string();
  } else if (ends_with(path, ".json")) {
    index = path;
  } else {
    return {path};
  }
  std::vector<std::string> files = {index};
  try {  // the shards it names; a malformed index is refused by read_checkpoint, by name
    const Json j = read_json_file(index);
    std::set<std::string> seen;
    for (auto it = j.at("weight_map").begin(); it != j.at("weight_map").end(); ++it)
      if (it->is_string() && seen.insert(it->get<std::string>()).second)
        files.push_back(shard_path(index, it.key(), it->get<std::string>()).string());
  } catch (const std::exception&) {
  }
  return files;
}

namespace {

// The safetensors name of a dtype oomb writes: F32 or BF16 (Error for any other).
const char* safetensors_name(Dtype d) {
  if (d == Dtype::fp32) return "F32";
  if (d == Dtype::bf16) return "BF16";
  throw Error("checkpoint dtype", to_string(d), "is not written", "fp32 (F32) or bf16 (BF16)");
}

// The bytes of the tensors `params` of t as one safetensors file.
std::function<void(std::ostream&)> file_contents(const ParamTensors& t, const std::vector<const ParamInfo*>& params,
                                                 Dtype dtype) {
  const int64_t elem = dtype_bytes(dtype);
  const char* name = safetensors_name(dtype);
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}, {"producer", "oomb"}};
  int64_t offset = 0;
  for (const ParamInfo* p : params) {
    header[p->name] = {{"dtype", name}, {"shape", p->shape}, {"data_offsets", {offset, offset + p->numel * elem}}};
    offset += p->numel * elem;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  return [&t, params, text, elem](std::ostream& out) {
    const uint64_t n = text.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<uint16_t> half;
    for (const ParamInfo* p : params) {
      if (elem == 4) {
        out.write(reinterpret_cast<const char*>(t.at(*p)), static_cast<std::streamsize>(p->numel * 4));
      } else {
        half.resize(static_cast<size_t>(p->numel));
        f32_to_bf16(t.at(*p), half.data(), p->numel);
        out.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(p->numel * 2));
      }
    }
  };
}

// "<stem>-NNNNN-of-NNNNN.safetensors": a shard name write_checkpoint writes (and replaces).
bool is_shard_name(const std::string& name, const std::string& stem) {
  const std::string tail = ".safetensors";
  if (name.size() != stem.size() + 15 + tail.size() || name.compare(0, stem.size(), stem) != 0) return false;
  const std::string mid = name.substr(stem.size(), 15);  // -00001-of-00012
  for (size_t k = 0; k < mid.size(); ++k) {
    const bool digit = std::isdigit(static_cast<unsigned char>(mid[k])) != 0;
    if ((k == 0 || k == 6 || k == 9) ? mid[k] != '-' : (k == 7 || k == 8) ? mid[k] != "of"[k - 7] : !digit)
      return false;
  }
  return ends_with(name, tail);
}

}  // namespace

std::function<void(std::ostream&)> safetensors_contents(const ParamTensors& t, Dtype dtype) {
  std::vector<const ParamInfo*> all;
  for (const auto& p : t.layout.params()) all.push_back(&p);
  return file_contents(t, all, dtype);
}

ParamTensors read_safetensors_layout(const std::string& path, ParamLayout layout,
                                     const std::function<bool(const std::string&)>& skip, const std::string& what_for) {
  const SafetensorsFile f = open_safetensors(path, "");
  ParamTensors t = zero_params(std::move(layout));
  for (auto it = f.header.begin(); it != f.header.end(); ++it)
    if (it.key() != "__metadata__" && !t.layout.find(it.key()) && !(skip && skip(it.key())))
      throw Error(path, it.key(), "extra tensor", "not a tensor of " + what_for);
  std::ifstream in(path, std::ios::binary);
  for (const auto& p : t.layout.params()) {
    if (!f.header.contains(p.name))
      throw Error(path, p.name, "missing tensor", what_for + " needs it, shape " + shape_str(p.shape));
    read_tensor(in, f, p, t.at(p));
  }
  return t;
}

void write_safetensors(const ParamTensors& t, const std::string& path) {
  std::vector<const ParamInfo*> all;
  for (const auto& p : t.layout.params()) all.push_back(&p);
  write_file_atomically(path, file_contents(t, all, Dtype::fp32));
}

std::vector<std::string> write_checkpoint(const ParamTensors& t, const std::string& path, const CheckpointWrite& how) {
  (void)safetensors_name(how.dtype);  // fp32 or bf16, else refused
  if (how.max_shard_bytes <= 0) throw Error("--max-shard-bytes", std::to_string(how.max_shard_bytes), "must be positive");
  const int64_t elem = dtype_bytes(how.dtype);
  namespace fs = std::filesystem;
  const CheckpointPaths where = checkpoint_paths(path);
  const fs::path dir = where.dir;
  const std::string& stem = where.stem;
  // Shards fill up in the layout's order (Hugging Face's order of the state dict).
  std::vector<std::vector<const ParamInfo*>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& p : t.layout.params()) {
    const int64_t bytes = p.numel * elem;
    if (in_shard > 0 && in_shard + bytes > how.max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(&p);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() > 99999)
    throw Error("--max-shard-bytes", std::to_string(how.max_shard_bytes),
                "would split the checkpoint into " + std::to_string(shards.size()) + " shards (at most 99999)",
                "a larger --max-shard-bytes");
  std::error_code ec;
  bool created = false;
  if (where.folder && !fs::is_directory(dir, ec)) {
    created = fs::create_directories(dir, ec);
    if (ec) throw Error(path, "", "cannot create the checkpoint folder: " + ec.message());
  }
  const std::string single = where.files[0], index = where.files[1];
  // What an earlier write left here and this one replaces: the other form, and shards of ours.
  std::vector<std::string> stale;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (is_shard_name(e.path().filename().string(), stem)) stale.push_back(e.path().string());
  std::vector<std::string> files;  // in the order they are switched into place
  std::vector<std::function<void(std::ostream&)>> contents;
  Json map = Json::object();
  if (shards.size() == 1) {
    // The single file first: read_checkpoint prefers it, so its rename is the switch.
    files.push_back(single);
    contents.push_back(file_contents(t, shards[0], how.dtype));
    stale.push_back(index);
  } else {
    char name[64];
    for (size_t i = 0; i < shards.size(); ++i) {
      std::snprintf(name, sizeof name, "-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      const std::string file = stem + name;
      files.push_back((dir / file).string());
      contents.push_back(file_contents(t, shards[i], how.dtype));
      for (const ParamInfo* p : shards[i]) map[p->name] = file;
    }
    files.push_back(index);
    const Json j = {{"metadata", {{"total_size", total}, {"producer", "oomb"}}}, {"weight_map", map}};
    const std::string text = j.dump(2) + "\n";
    contents.push_back([text](std::ostream& out) { out << text; });
    stale.push_back(single);  // removed last: until then read_checkpoint reads the old single file
  }
  try {
    // Every file is written aside; the old checkpoint stays whole until all of the new one is on disk.
    FileSetWriter set(files);
    for (size_t i = 0; i < files.size(); ++i) set.write(i, contents[i]);
    set.commit(stale);
  } catch (...) {
    if (created) fs::remove(dir, ec);  // only when empty
    throw;
  }
  if (shards.size() == 1) return {single};
  std::vector<std::string> written = {index};
  written.insert(written.end(), files.begin(), files.end() - 1);
  return written;
}


namespace {
// Visits the blocks of one tensor's shard: fn(full offset, local offset, floats) per contiguous run.
template <class F>
void for_shard_blocks(const ParamInfo& f, const ParamInfo& l, int64_t rank, F&& fn) {
  if (f.shape.size() != l.shape.size())
    throw Error("tensor parallelism", f.name, "has rank " + std::to_string(f.shape.size()) + " in the model and " +
                                                  std::to_string(l.shape.size()) + " in its shard");
  if (f.shape == l.shape) {
    fn(f.offset, l.offset, l.numel);
    return;
  }
  const int64_t r0 = l.shape[0], c0 = l.shape.size() > 1 ? l.shape[1] : 1;
  const int64_t fc = f.shape.size() > 1 ? f.shape[1] : 1;
  if (f.shape[0] != r0 && fc == c0) {  // a block of rows: contiguous
    OOMB_ASSERT(f.shape[0] % r0 == 0);
    fn(f.offset + rank * r0 * c0, l.offset, l.numel);
    return;
  }
  OOMB_ASSERT(f.shape.size() == 2 && f.shape[0] == r0 && fc % c0 == 0, f.name);
  for (int64_t r = 0; r < r0; ++r) fn(f.offset + r * fc + rank * c0, l.offset + r * c0, c0);  // columns
}
}  // namespace

ParamTensors shard_params(const ParamTensors& full, ParamLayout local, int64_t rank) {
  ParamTensors out = zero_params(std::move(local));
  for (const ParamInfo& l : out.layout.params()) {
    const ParamInfo* f = full.layout.find(l.name);
    if (!f) throw Error("tensor parallelism", l.name, "is in the shard's layout and not in the model's");
    for_shard_blocks(*f, l, rank, [&](int64_t fo, int64_t lo, int64_t n) {
      std::copy_n(full.data.data() + fo, n, out.data.data() + lo);
    });
  }
  return out;
}

void unshard_params_into(const ParamTensors& local, int64_t rank, bool with_replicated, ParamTensors& full) {
  for (const ParamInfo& l : local.layout.params()) {
    const ParamInfo* f = full.layout.find(l.name);
    if (!f) throw Error("tensor parallelism", l.name, "is in the shard's layout and not in the model's");
    if (f->shape == l.shape && !with_replicated) continue;
    for_shard_blocks(*f, l, rank, [&](int64_t fo, int64_t lo, int64_t n) {
      std::copy_n(local.data.data() + lo, n, full.data.data() + fo);
    });
  }
}

}  // namespace oomb::executor
