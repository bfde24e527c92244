#include "executor/runtime/weights.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/json_util.h"
#include "core/units.h"
#include "executor/runtime/rng.h"

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
    o.post_norm = add(pre + "post_attention_layernorm.weight", {h}, false);
    o.gate = add(pre + "mlp.gate_proj.weight", {f, h}, true);
    o.up = add(pre + "mlp.up_proj.weight", {f, h}, true);
    o.down = add(pre + "mlp.down_proj.weight", {h, f}, true);
    layers_.push_back(o);
  }
  final_norm_ = add("model.norm.weight", {h}, false);
  lm_head_ = m.tied_embeddings ? embed_ : add("lm_head.weight", {m.vocab, h}, true);
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

Weights read_safetensors(const std::string& path, const models::ModelSpec& m) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw Error(path, "", std::filesystem::exists(path, ec) ? "is not a regular file" : "cannot open the weights file",
                "a .safetensors file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "", "cannot open the weights file", "a .safetensors file");
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  if (size < 8) throw Error(path, "", "truncated safetensors file (" + std::to_string(size) + " bytes, no header)");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > static_cast<uint64_t>(size - 8) || n > (uint64_t{1} << 30))
    throw Error(path, "", "truncated or corrupt safetensors file: header of " + std::to_string(n) +
                              " bytes but the file has " + std::to_string(size) + " bytes");
  std::string text(static_cast<size_t>(n), '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  const Json header = parse_json(text, path);
  if (!header.is_object()) throw Error(path, "", "safetensors header is not a JSON object");
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = size - data_start;

  Weights w = zero_params(m);
  for (const auto& p : w.layout.params()) {
    if (!header.contains(p.name))
      throw Error(path, p.name, "missing tensor",
                  "the model '" + m.id + "' needs shape " + shape_str(p.shape) + " (a weights file for another model?)");
    const Json& e = header.at(p.name);
    std::string dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;
    try {
      dtype = e.at("dtype").get<std::string>();
      shape = e.at("shape").get<std::vector<int64_t>>();
      const auto off = e.at("data_offsets").get<std::vector<int64_t>>();
      if (off.size() != 2) throw std::runtime_error("data_offsets");
      begin = off[0];
      end = off[1];
    } catch (const std::exception&) {
      throw Error(path, p.name, "malformed header entry", "needs dtype, shape and data_offsets [begin, end]");
    }
    if (shape != p.shape)
      throw Error(path, p.name, "shape " + shape_str(shape) + " does not match the model's " + shape_str(p.shape),
                  "a weights file for another model or --layers?");
    int64_t elem = 0;
    if (dtype == "F32") elem = 4;
    else if (dtype == "BF16") elem = 2;
    else throw Error(path, p.name, "unsupported dtype " + dtype, "F32 or BF16");
    if (begin < 0 || end < begin || end - begin != p.numel * elem)
      throw Error(path, p.name, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    "] do not hold " + std::to_string(p.numel) + " " + dtype + " values");
    if (end > data_bytes)
      throw Error(path, p.name, "truncated file: the tensor's data ends at data offset " + std::to_string(end) +
                                    " but the data section has " + std::to_string(data_bytes) + " bytes");
    in.seekg(data_start + begin);
    float* dst = w.at(p);
    if (elem == 4) {
      in.read(reinterpret_cast<char*>(dst), static_cast<std::streamsize>(p.numel * 4));
    } else {
      std::vector<uint16_t> raw(static_cast<size_t>(p.numel));
      in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(p.numel * 2));
      for (int64_t i = 0; i < p.numel; ++i) {
        const uint32_t bits = static_cast<uint32_t>(raw[static_cast<size_t>(i)]) << 16;
        std::memcpy(&dst[i], &bits, 4);
      }
    }
    if (!in) throw Error(path, p.name, "read error (truncated file?)");
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(dst[i]))
        throw Error(path, p.name, "holds a non-finite value (NaN or inf) at element " + std::to_string(i),
                    "initial weights must be finite");
  }
  return w;
}

void write_safetensors(const ParamTensors& t, const std::string& path) {
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}, {"producer", "oomb"}};
  int64_t offset = 0;
  for (const auto& p : t.layout.params()) {
    header[p.name] = {{"dtype", "F32"}, {"shape", p.shape}, {"data_offsets", {offset, offset + p.numel * 4}}};
    offset += p.numel * 4;
  }
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  // Atomic (a unique temp file + rename), through symlinks, direct to a FIFO: as every oomb output.
  write_file_atomically(path, [&](std::ostream& out) {
    const uint64_t n = text.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& p : t.layout.params())
      out.write(reinterpret_cast<const char*>(t.at(p)), static_cast<std::streamsize>(p.numel * 4));
  });
}

}  // namespace oomb::executor
