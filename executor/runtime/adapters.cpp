#include "executor/runtime/adapters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "core/format.h"
#include "core/json.h"
#include "core/files.h"
#include "executor/runtime/rng.h"
#include "step/config.h"

namespace oomb::executor {

namespace {
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

std::string num(double v) {
  std::string s;
  appendf(s, "%g", v);
  return s;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) s += ',';
    s += x;
  }
  return s;
}

// The targets in lora_target_names() order (what the layout and PEFT's sorted lists use).
std::vector<std::string> ordered(const std::vector<std::string>& targets) {
  std::vector<std::string> out;
  for (const auto& name : step::lora_target_names())
    if (std::find(targets.begin(), targets.end(), name) != targets.end()) out.push_back(name);
  return out;
}

// "base_model.model.model.layers.N.<rest>" -> N (or -1 when the name has no such layer number).
int64_t layer_of(const std::string& name) {
  const std::string pre = "base_model.model.model.layers.";
  if (name.rfind(pre, 0) != 0) return -1;
  size_t i = pre.size();
  int64_t l = 0;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) {
    const int d = name[i++] - '0';
    if (l > (std::numeric_limits<int64_t>::max() - d) / 10) return -1;
    l = l * 10 + d;
  }
  return i < name.size() && name[i] == '.' ? l : -1;
}
}  // namespace

AdapterConfig adapter_config(const step::Config& c, const std::string& base_model) {
  OOMB_ASSERT(c.lora_rank > 0, "adapter_config of a run without LoRA");
  return {c.lora_rank, c.lora_alpha, ordered(c.lora_targets), base_model, Json()};
}

ParamLayout adapter_layout(const models::ModelSpec& m, const step::Config& c) {
  return ParamLayout::lora(m, c.lora_rank, c.lora_targets);
}

ParamTensors init_adapters(const models::ModelSpec& m, const step::Config& c, uint64_t seed, float b_std) {
  ParamTensors t = zero_params(adapter_layout(m, c));
  Rng rng(seed);
  for (int64_t l = 0; l < t.layout.layers(); ++l)
    for (int k = 0; k < kLoraTargets; ++k) {
      const LoraSlot& s = t.layout.lora_slot(l, static_cast<LoraTarget>(k));
      if (s.a < 0) continue;
      const double bound = 1.0 / std::sqrt(static_cast<double>(s.in));
      float* a = t.data.data() + s.a;
      for (int64_t i = 0; i < c.lora_rank * s.in; ++i) a[i] = static_cast<float>((2 * rng.uniform() - 1) * bound);
      float* b = t.data.data() + s.b;
      if (b_std > 0)
        for (int64_t i = 0; i < s.out * c.lora_rank; ++i) b[i] = static_cast<float>(b_std * rng.normal());
    }
  return t;
}

AdapterConfig read_adapter_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error("--adapter", dir, "is not a folder", "a PEFT adapter folder (adapter_config.json and " +
                                                         std::string(kWeightsFile) + ")");
  const std::string path = (fs::path(dir) / kConfigFile).string();
  if (!fs::exists(path, ec))
    throw Error("--adapter", dir, std::string("has no ") + kConfigFile, "a PEFT adapter folder (save_pretrained)");
  const Json j = read_json_file(path);
  if (!j.is_object()) throw Error(path, "", "is not a JSON object");
  const JsonReader r(j, path);
  if (r.str_or("peft_type", "LORA") != "LORA")
    r.fail("peft_type", "is " + r.str("peft_type") + "; oomb runs LoRA adapters only", "\"LORA\"");
  AdapterConfig a;
  a.rank = r.i64_in("r", 1, 4096);
  a.alpha = r.f64_in_or("lora_alpha", 1e-6, 1e6, 8.0);  // the range of --lora-alpha
  if (!r.has("target_modules")) r.fail("target_modules", "is missing", "a list of projection names, e.g. [\"q_proj\", \"v_proj\"]");
  const Json& tm = j.at("target_modules");
  if (tm.is_string()) {
    if (tm.get<std::string>() != "all-linear")
      r.fail("target_modules", "is the pattern '" + tm.get<std::string>() + "'; oomb reads lists of module names",
             "a list such as [\"q_proj\", \"v_proj\"], or \"all-linear\"");
    a.targets = step::lora_target_names();
  } else if (tm.is_array()) {
    std::string text;
    for (const Json& v : tm) {
      if (!v.is_string()) r.fail("target_modules", "must list module names (strings)");
      if (!text.empty()) text += ',';
      text += v.get<std::string>();
    }
    if (text.empty()) r.fail("target_modules", "is empty", "e.g. [\"q_proj\", \"v_proj\"]");
    a.targets = ordered(step::lora_targets_from_string(text, path + ": target_modules"));
  } else {
    r.fail("target_modules", "must be a list of module names or \"all-linear\"");
  }
  if (r.str_or("bias", "none") != "none")
    r.fail("bias", "is " + r.str("bias") + "; oomb trains adapters without biases", "\"none\"");
  if (r.boolean_or("use_rslora", false))
    r.fail("use_rslora", "is true (scale alpha / sqrt(r)); oomb runs PEFT's alpha / r", "false");
  if (r.boolean_or("use_dora", false)) r.fail("use_dora", "is true; oomb runs plain LoRA", "false");
  if (r.boolean_or("fan_in_fan_out", false))
    r.fail("fan_in_fan_out", "is true (Conv1D-style weights); Qwen and Llama projections are nn.Linear", "false");
  // Newer PEFT keys that change what is trained: a bias on lora_B, quantisation-aware LoRA.
  if (r.boolean_or("lora_bias", false)) r.fail("lora_bias", "is true (a bias on lora_B); oomb trains adapters without one", "false");
  if (r.boolean_or("use_qalora", false)) r.fail("use_qalora", "is true; oomb runs plain LoRA", "false");
  // An adapter for another task (a classification head, ...) trains another loss than oomb's.
  if (j.contains("task_type") && !j.at("task_type").is_null() && r.str("task_type") != "CAUSAL_LM")
    r.fail("task_type", "is " + r.str("task_type") + "; oomb trains causal language modelling", "\"CAUSAL_LM\"");
  for (const char* key : {"modules_to_save", "layers_to_transform", "rank_pattern", "alpha_pattern",
                          "layer_replication", "exclude_modules", "target_parameters", "trainable_token_indices"}) {
    if (!j.contains(key) || j.at(key).is_null()) continue;
    const Json& v = j.at(key);
    if ((v.is_object() || v.is_array()) && v.empty()) continue;
    r.fail(key, "is set; oomb runs one rank and alpha on every layer's targets and trains nothing else",
           "null (or retrain the adapter without it)");
  }
  // PEFT applies dropout to each adapter's input while training; oomb's executor has none, so a
  // nonzero value would be trained as 0 (and saved as 0) without a word.
  if (r.has("lora_dropout")) {
    const double d = r.f64_in("lora_dropout", 0.0, 1.0);
    if (d != 0.0)
      r.fail("lora_dropout", "is " + num(d) + "; oomb trains adapters without dropout",
             "0.0 (edit it only if training without dropout is what you want)");
  }
  a.base_model = r.str_or("base_model_name_or_path", "");
  a.file = j;
  return a;
}

AdapterConfig continued_adapter_config(const AdapterConfig& loaded, const step::Config& c,
                                       const std::string& run_base) {
  AdapterConfig a = adapter_config(c, loaded.base_model.empty() ? run_base : loaded.base_model);
  a.file = loaded.file;
  return a;
}

namespace {
std::string model_name(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  const size_t slash = s.find_last_of('/');
  if (slash != std::string::npos) s = s.substr(slash + 1);
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}
}  // namespace

std::string adapter_base_warning(const AdapterConfig& a, const std::string& dir, const std::string& run_base) {
  if (a.base_model.empty() || model_name(a.base_model) == model_name(run_base)) return "";
  return (std::filesystem::path(dir) / kConfigFile).string() + ": base_model_name_or_path is '" + a.base_model +
         "' and this run's base model is '" + run_base +
         "': an adapter trained on another base model rarely transfers (the saved adapter keeps '" + a.base_model +
         "')";
}

ParamTensors read_adapter(const std::string& dir, const models::ModelSpec& m, const step::Config& c,
                          int64_t checkpoint_layers) {
  namespace fs = std::filesystem;
  const AdapterConfig a = read_adapter_config(dir);
  const std::string cfg = (fs::path(dir) / kConfigFile).string();
  if (c.lora_rank <= 0)
    throw Error("--adapter", dir, "is a LoRA adapter and the run trains no adapters",
                "add --lora-rank " + std::to_string(a.rank) + " --lora-alpha " + num(a.alpha) +
                    " --lora-targets " + join(a.targets));
  if (a.rank != c.lora_rank)
    throw Error(cfg, "r", "is " + std::to_string(a.rank) + " and the run's --lora-rank is " + std::to_string(c.lora_rank),
                "--lora-rank " + std::to_string(a.rank));
  if (std::abs(a.alpha - c.lora_alpha) > 1e-9 * std::max(1.0, std::abs(c.lora_alpha)))
    throw Error(cfg, "lora_alpha", "is " + num(a.alpha) + " and the run's --lora-alpha is " +
                                       num(c.lora_alpha),
                "--lora-alpha " + num(a.alpha));
  if (a.targets != ordered(c.lora_targets))
    throw Error(cfg, "target_modules", "are " + join(a.targets) + " and the run's --lora-targets are " +
                                           join(ordered(c.lora_targets)),
                "--lora-targets " + join(a.targets));
  const std::string path = (fs::path(dir) / kWeightsFile).string();
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error("--adapter", dir, std::string("has no ") + kWeightsFile,
                "a PEFT adapter folder (save_pretrained with safe_serialization)");
  const int64_t ckpt = checkpoint_layers < 0 ? std::numeric_limits<int64_t>::max() : checkpoint_layers;
  const ParamLayout layout = adapter_layout(m, c);
  // Adapters of layers the run leaves out (--layers) are skipped when the layer-0 tensor of that
  // name is one the run has.
  auto skip = [&](const std::string& name) {
    const int64_t l = layer_of(name);
    if (l < m.layers || l >= ckpt) return false;
    const std::string pre = "base_model.model.model.layers." + std::to_string(l) + ".";
    return layout.find("base_model.model.model.layers.0." + name.substr(pre.size())) != nullptr;
  };
  return read_safetensors_layout(path, layout, skip, "a rank-" + std::to_string(c.lora_rank) + " " +
                                                         join(ordered(c.lora_targets)) + " adapter of " + m.id);
}

void check_adapter_writable(const std::string& dir, const std::string& flag) {
  if (dir.size() >= 12 && dir.compare(dir.size() - 12, 12, ".safetensors") == 0)
    throw Error(flag, dir, "names a file; a PEFT adapter is a folder", "a folder, e.g. --save-adapter out/adapter");
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(dir, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_directory(st))
    throw Error(flag, dir, "is a file; a PEFT adapter is a folder",
                "a folder (existing or new), e.g. " + flag + " out/adapter");
  check_checkpoint_writable(dir, flag);
}

std::vector<std::string> write_adapter(const ParamTensors& adapters, const std::string& dir, const AdapterConfig& cfg) {
  namespace fs = std::filesystem;
  OOMB_ASSERT(adapters.layout.is_lora(), "write_adapter of a non-adapter layout");
  std::error_code ec;
  bool created = false;
  if (!fs::is_directory(dir, ec)) {
    created = fs::create_directories(dir, ec);
    if (ec) throw Error(dir, "", "cannot create the adapter folder: " + ec.message());
  }
  // PEFT's save_pretrained keys that say how the adapter was made (the rest take PEFT's defaults).
  const Json made = {{"peft_type", "LORA"},
                  {"task_type", "CAUSAL_LM"},
                  {"base_model_name_or_path", cfg.base_model},
                  {"r", cfg.rank},
                  {"lora_alpha", cfg.alpha},
                  {"lora_dropout", 0.0},
                  {"target_modules", cfg.targets},
                  {"bias", "none"},
                  {"fan_in_fan_out", false},
                  {"use_rslora", false},
                  {"use_dora", false},
                  {"modules_to_save", nullptr},
                  {"layers_to_transform", nullptr},
                  {"init_lora_weights", true},
                  {"inference_mode", true},
                  {"revision", nullptr}};
  // Continuing a loaded adapter: its file's keys kept, those that say what oomb trained set.
  Json j = cfg.file.is_object() ? cfg.file : made;
  for (const char* key : {"peft_type", "base_model_name_or_path", "r", "lora_alpha", "lora_dropout", "target_modules",
                          "bias", "fan_in_fan_out", "use_rslora", "use_dora"})
    j[key] = made.at(key);
  const std::string text = j.dump(2) + "\n";
  const std::vector<std::string> files = {(fs::path(dir) / kWeightsFile).string(),
                                          (fs::path(dir) / kConfigFile).string()};
  try {
    FileSetWriter set(files);
    set.write(0, safetensors_contents(adapters, Dtype::fp32));
    set.write(1, [&](std::ostream& out) { out << text; });
    set.commit();
  } catch (...) {
    if (created) fs::remove(dir, ec);
    throw;
  }
  return files;
}

}  // namespace oomb::executor
