#include "planner/points.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/format.h"
#include "core/json.h"
#include "core/files.h"
#include "planner/defaults.h"
#include "planner/knobs.h"
#include "planner/plan.h"
#include "planner/search.h"

namespace oomb::planner {

namespace {


// The keys a point may have: the scenario flags (as in `oomb plan`), a plan instead of them, what
// was measured, and free text.
const std::vector<std::string> kKnobKeys = {
    "model", "gpu", "host", "context", "preset", "schedule", "attention", "chunk", "page", "budget", "selection",
    "selection_overlap", "selection_memory", "resident_layers", "kv_dtype", "kv_grad_dtype", "param_dtype",
    "param_grad_dtype", "optimizer", "checkpointing", "kept_layers", "logits_chunk", "peak_measure", "gpus", "layers",
    "lora_rank", "lora_alpha", "lora_targets", "lora_train_embeddings"};
const std::vector<std::string> kMeasuredKeys = {"step_s", "peak_device_bytes", "tokens_per_s"};
const std::vector<std::string> kTextKeys = {"name", "plan", "note", "source"};

bool one_of(const std::string& k, const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), k) != v.end(); }

std::string valid_keys() {
  std::string s;
  for (const auto* v : {&kTextKeys, &kMeasuredKeys, &kKnobKeys})
    for (const auto& k : *v) s += (s.empty() ? "" : ", ") + k;
  return s;
}

double number_of(const std::string& text, const std::string& where, const std::string& key) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(v) || v < 0)
    throw Error(where, key, "'" + text + "' is not a non-negative number", key == "step_s" ? "seconds, e.g. 12.5" : "");
  return v;
}

// What was measured, within physical bounds (a step of 1e300 s or 1e30 tokens/s is a typo, and
// would only drive the fit to a meaningless profile): the column, the line and the range.
double measured_of(const std::string& text, const std::string& where, const std::string& key, double lo, double hi,
                   const std::string& unit) {
  const double v = number_of(text, where, key);
  if (!(v >= lo && v <= hi))
    throw Error(where, key, "'" + text + "' is out of range",
                "from " + format_count(lo) + " to " + format_count(hi) + " " + unit);
  return v;
}
constexpr double kMinStepS = 1e-6, kMaxStepS = 1e7;          // 1 us .. 116 days
constexpr double kMinTokensPerS = 1e-3, kMaxTokensPerS = 1e12;
constexpr double kMaxPeakBytes = 1125899906842624.0;          // 2^50 bytes (1 PiB)

int64_t integer_of(const std::string& text, const std::string& where, const std::string& key) {
  const double v = number_of(text, where, key);
  if (v != std::floor(v) || v > 9.2e18) throw Error(where, key, "'" + text + "' is not an integer");
  return static_cast<int64_t>(v);
}

// One point from its fields (key -> text; empty text = not given). dir: the points file's folder
// (plan paths are relative to it).
// The same device: what the fit's peaks and capacity are (ids differ between a catalog entry and
// its calibrated profiles).
bool same_device(const models::GpuSpec& a, const models::GpuSpec& b) {
  return a.hbm_capacity_bytes == b.hbm_capacity_bytes && a.bf16_flops_per_s == b.bf16_flops_per_s &&
         a.hbm_bytes_per_s == b.hbm_bytes_per_s;
}

simulator::MeasuredPoint point_of(std::map<std::string, std::string> f, const std::string& where,
                                  const std::filesystem::path& dir, const std::string& gpu_arg,
                                  const models::GpuSpec& base) {
  for (auto it = f.begin(); it != f.end();) it = it->second.empty() ? f.erase(it) : std::next(it);
  for (const auto& [k, v] : f)
    if (!one_of(k, kKnobKeys) && !one_of(k, kMeasuredKeys) && !one_of(k, kTextKeys))
      throw Error(where, k, "unknown key", "one of " + valid_keys());
  simulator::MeasuredPoint p;
  p.name = f.count("name") ? f["name"] : where;
  if (f.count("plan")) {
    for (const auto& k : kKnobKeys)
      if (f.count(k)) throw Error(where, k, "is fixed by the point's plan", "give either plan or the knobs");
    const std::filesystem::path given(f["plan"]);
    const std::filesystem::path plan = given.is_absolute() ? given : dir / given;
    Plan pl;
    try {
      pl = load_plan(plan.string());
    } catch (const Error& e) {
      // The plan's own message (its path and key), and which row named it.
      throw Error(where, "plan", e.what(), "the plan named in this row");
    }
    if (!same_device(pl.gpu, base))
      throw Error(where, "plan", "the plan is for GPU '" + pl.gpu_id + "', the fitted profile is '" + base.id + "'",
                  "fit points measured on the --gpu device");
    p.scenario = pl.scenario();
  } else {
    if (!f.count("model")) throw Error(where, "model", "missing", "a catalog id, a model JSON or a Hugging Face config");
    if (!f.count("context")) throw Error(where, "context", "missing", "the tokens per step, e.g. 32K");
    if (f.count("gpu") && !same_device(models::load_gpu(f["gpu"]), base))
      throw Error(where, "gpu", "'" + f["gpu"] + "' is not the fitted profile '" + base.id + "'",
                  "fit points measured on the --gpu device (or leave gpu out)");
    Knobs flags;
    flags.training_defaults = true;  // a point's knobs mean what they mean to `oomb simulate` and `oomb plan`
    flags.model = f["model"];
    flags.gpu = gpu_arg;
    if (f.count("host")) flags.host = f["host"];
    flags.context = f["context"];
    if (f.count("preset")) flags.preset = f["preset"];
    auto text = [&](const char* k, std::optional<std::string>& dst) {
      if (f.count(k)) dst = f[k];
    };
    text("schedule", flags.schedule);
    text("attention", flags.attention);
    text("chunk", flags.chunk);
    text("page", flags.page);
    text("selection", flags.selection);
    text("selection_memory", flags.selection_memory);
    text("resident_layers", flags.resident_layers);
    text("kv_dtype", flags.kv_dtype);
    text("kv_grad_dtype", flags.kv_grad_dtype);
    text("param_dtype", flags.param_dtype);
    text("param_grad_dtype", flags.param_grad_dtype);
    text("optimizer", flags.optimizer);
    text("logits_chunk", flags.logits_chunk);
    text("peak_measure", flags.peak_measure);
    if (f.count("budget")) flags.budget = integer_of(f["budget"], where, "budget");
    if (f.count("gpus")) flags.gpus = integer_of(f["gpus"], where, "gpus");
    if (f.count("layers")) flags.layers = integer_of(f["layers"], where, "layers");
    if (f.count("lora_rank")) flags.lora_rank = integer_of(f["lora_rank"], where, "lora_rank");
    if (f.count("lora_alpha")) flags.lora_alpha = number_of(f["lora_alpha"], where, "lora_alpha");
    text("lora_targets", flags.lora_targets);
    if (f.count("lora_train_embeddings")) {
      if (f["lora_train_embeddings"] != "true" && f["lora_train_embeddings"] != "false")
        throw Error(where, "lora_train_embeddings", "'" + f["lora_train_embeddings"] + "' is not true or false");
      flags.lora_train_embeddings = f["lora_train_embeddings"] == "true";
    }
    if (f.count("kept_layers")) flags.kept_layers = integer_of(f["kept_layers"], where, "kept_layers");
    if (f.count("selection_overlap")) flags.selection_overlap = number_of(f["selection_overlap"], where, "selection_overlap");
    if (f.count("checkpointing")) {
      if (f["checkpointing"] != "true" && f["checkpointing"] != "false")
        throw Error(where, "checkpointing", "'" + f["checkpointing"] + "' is not true or false");
      flags.checkpointing = f["checkpointing"] == "true";
    }
    // The model, GPU, host and knob checks of `oomb plan`, named for this point.
    try {
      p.scenario = flags.resolve();
      if (flags.optimizer_auto())
        p.scenario.config.optimizer = place_optimizer(p.scenario, kDefaultHeadroom);
    } catch (const Error& e) {
      throw Error(where, e.where(), e.problem() + (e.key().empty() ? "" : " ('" + e.key() + "')"), e.hint());
    }
  }
  p.scenario.gpu = base;
  const double tokens = static_cast<double>(p.scenario.config.context_tokens);
  if (f.count("tokens_per_s")) {
    p.tokens_per_s = measured_of(f["tokens_per_s"], where, "tokens_per_s", kMinTokensPerS, kMaxTokensPerS, "tokens/s");
  }
  if (f.count("step_s")) {
    p.step_s = measured_of(f["step_s"], where, "step_s", kMinStepS, kMaxStepS, "seconds");
    // Both given: they must describe the same step (a sequence of context tokens per step).
    if (p.tokens_per_s && std::fabs(tokens / p.step_s - *p.tokens_per_s) > 0.02 * *p.tokens_per_s)
      throw Error(where, "tokens_per_s",
                  "disagrees with step_s: " + format_count(tokens) + " tokens / " + format_duration_s(p.step_s) +
                      " is " + format_count(tokens / p.step_s) + " tokens/s",
                  "give one of them, or check the context");
  } else if (p.tokens_per_s) {
    p.step_s = tokens / *p.tokens_per_s;
    if (!(p.step_s >= kMinStepS && p.step_s <= kMaxStepS))
      throw Error(where, "tokens_per_s",
                  "gives a step of " + format_duration_s(p.step_s) + " for " + format_count(tokens) + " tokens",
                  "a step from " + format_count(kMinStepS) + " to " + format_count(kMaxStepS) + " seconds");
  } else {
    throw Error(where, "step_s", "missing: a point needs what was measured", "step_s (or tokens_per_s)");
  }
  if (f.count("peak_device_bytes")) {
    (void)measured_of(f["peak_device_bytes"], where, "peak_device_bytes", 0, kMaxPeakBytes, "bytes");
    p.peak_device_bytes = integer_of(f["peak_device_bytes"], where, "peak_device_bytes");
  }
  return p;
}

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Splits one CSV line (commas; double quotes around fields that hold commas or quotes).
std::vector<std::string> csv_fields(const std::string& line, const std::string& where) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') cur += '"', ++i;
      else if (c == '"') quoted = false;
      else cur += c;
    } else if (c == '"' && trimmed(cur).empty() && !was_quoted) {
      quoted = was_quoted = true;
      cur.clear();
    } else if (c == ',') {
      out.push_back(was_quoted ? cur : trimmed(cur));
      cur.clear();
      was_quoted = false;
    } else if (!was_quoted) {
      cur += c;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      // "64"K: the K would be dropped and the field read as 64.
      throw Error(where, "", "text after the closing quote of field " + std::to_string(out.size() + 1) + ": '" +
                                 line.substr(i) + "'",
                  "quote the whole field (\"64K\") or none of it");
    }
  }
  if (quoted) throw Error(where, "", "unterminated quoted field");
  out.push_back(was_quoted ? cur : trimmed(cur));
  return out;
}

std::string key_of(std::string k) {
  for (char& c : k) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return k;
}

}  // namespace

std::vector<simulator::MeasuredPoint> read_points(const std::string& path, const std::string& gpu_arg,
                                                  const models::GpuSpec& base) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::vector<simulator::MeasuredPoint> out;
  std::string text = read_text_file(path);
  // A UTF-8 byte-order mark (spreadsheets write one) is not part of the first key.
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  const bool json = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  if (json) {
    const Json j = parse_json(text, path);
    JsonReader r(j, path);
    r.expect_schema("oomb.points/1");
    const Json& pts = r.array("points");
    if (pts.empty()) throw Error(path, "points", "is empty", "one object per measured configuration");
    for (size_t i = 0; i < pts.size(); ++i) {
      const std::string where = path + ": points[" + std::to_string(i) + "]";
      if (!pts[i].is_object()) throw Error(where, "", "is not an object");
      std::map<std::string, std::string> f;
      for (auto it = pts[i].begin(); it != pts[i].end(); ++it) {
        const Json& v = it.value();
        const std::string k = key_of(it.key());
        if (f.count(k)) throw Error(where, it.key(), "is given twice (keys are read case- and '-'/'_'-insensitively)");
        f[k] = v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : v.dump();
      }
      out.push_back(point_of(f, where, dir, gpu_arg, base));
    }
    return out;
  }
  // CSV: a header row of keys, one point per row; '#' starts a comment line.
  std::istringstream in(text);
  std::string line;
  std::vector<std::string> header;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    const std::string where = path + " line " + std::to_string(n);
    std::vector<std::string> fields = csv_fields(line, where);
    if (header.empty()) {
      for (size_t i = 0; i < fields.size(); ++i) {
        const std::string k = key_of(fields[i]);
        const auto seen = std::find(header.begin(), header.end(), k);
        if (!k.empty() && seen != header.end())
          throw Error(where, fields[i],
                      "is a column twice in the header (columns " + std::to_string(seen - header.begin() + 1) +
                          " and " + std::to_string(i + 1) + ")",
                      "one column per key");
        header.push_back(k);
      }
      continue;
    }
    if (fields.size() != header.size())
      throw Error(where, "", std::to_string(fields.size()) + " fields, the header has " + std::to_string(header.size()));
    std::map<std::string, std::string> f;
    for (size_t i = 0; i < header.size(); ++i) f[header[i]] = fields[i];
    out.push_back(point_of(f, where, dir, gpu_arg, base));
  }
  if (out.empty()) throw Error(path, "", "no points", "a header row (e.g. model,context,chunk,step_s) and one row per run");
  return out;
}

}  // namespace oomb::planner
