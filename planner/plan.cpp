#include "planner/plan.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "planner/executable.h"
#include "core/files.h"

namespace oomb::planner {

Json Allocation::to_json() const {
  return {{"kv_pool_pages", kv_pool_pages},
          {"grad_pool_pages", grad_pool_pages},
          {"kv_page_bytes", kv_page_bytes},
          {"grad_page_bytes", grad_page_bytes},
          {"device_pool_bytes", device_pool_bytes},
          {"workspace_bytes", workspace_bytes},
          {"runtime_reserve_bytes", runtime_reserve_bytes},
          {"host_kv_pages", host_kv_pages},
          {"host_grad_pages", host_grad_pages},
          {"host_pool_bytes", host_pool_bytes},
          {"host_other_bytes", host_other_bytes}};
}

namespace {

Allocation allocation_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  if (!j.is_object()) r.fail("", "is not an object");
  Allocation a;
  a.kv_pool_pages = r.i64("kv_pool_pages");
  a.grad_pool_pages = r.i64("grad_pool_pages");
  a.kv_page_bytes = r.i64_positive("kv_page_bytes");
  a.grad_page_bytes = r.i64_positive("grad_page_bytes");
  a.device_pool_bytes = r.i64("device_pool_bytes");
  a.workspace_bytes = r.i64("workspace_bytes");
  a.runtime_reserve_bytes = r.i64("runtime_reserve_bytes");
  a.host_kv_pages = r.i64("host_kv_pages");
  a.host_grad_pages = r.i64("host_grad_pages");
  a.host_pool_bytes = r.i64("host_pool_bytes");
  a.host_other_bytes = r.i64("host_other_bytes");
  int64_t kv_bytes = 0, grad_bytes = 0, pool_bytes = 0;  // checked: edited sizes must not wrap into agreement
  if (__builtin_mul_overflow(a.kv_pool_pages, a.kv_page_bytes, &kv_bytes) ||
      __builtin_mul_overflow(a.grad_pool_pages, a.grad_page_bytes, &grad_bytes) ||
      __builtin_add_overflow(kv_bytes, grad_bytes, &pool_bytes) || a.device_pool_bytes != pool_bytes)
    r.fail("device_pool_bytes", "does not equal kv_pool_pages x kv_page_bytes + grad_pool_pages x grad_page_bytes",
           "the plan was edited inconsistently; re-run `oomb plan --out`");
  return a;
}

// The prediction is the simulator's summary JSON; the keys below are the ones the executor and
// `oomb validate` compare against, so they must be there.
void check_prediction(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  if (!j.is_object()) r.fail("", "is not an object");
  r.i64("peak_device_bytes");
  r.i64("peak_host_bytes");
  r.f64("step_s");
  r.i64("h2d_bytes");
  r.i64("d2h_bytes");
  r.i64("device_pool_pages");
  r.boolean("feasible");
  if (const std::string b = r.str("binding_constraint"); !simulator::find_binding(b))
    r.fail("binding_constraint", "is \"" + b + "\", not a binding constraint", simulator::binding_names());
}

// Keys a document may have: anything else is a typo or an edit the reader would silently ignore.
void check_keys(const Json& j, const std::vector<const char*>& known, const std::string& where) {
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      throw Error(where, it.key(), "unknown key", "one of " + list);
    }
  }
}

std::string number_text(const Json& v) { return v.dump(); }

// The plan's recorded prediction, allocation and buffer table against what its own configuration
// gives when simulated again: an edited plan (a peak set to 1, a buffer of 2^62 bytes, an fp7
// dtype, an emptied table) would make `run` and `validate` judge against numbers nothing produced.
void check_against_configuration(const Plan& p, const Json& j, const std::string& where) {
  const Plan fresh = make_plan(p.scenario(), simulator::evaluate(p.scenario()), p.objective, p.headroom);
  const std::string hint = "the plan was edited or is stale; re-run `oomb plan --out`";
  const Json want = fresh.prediction;
  for (const char* k : {"peak_device_bytes", "peak_host_bytes", "h2d_bytes", "d2h_bytes", "device_pool_pages"}) {
    if (p.prediction.at(k) != want.at(k))
      throw Error(where + ": prediction", k,
                  number_text(p.prediction.at(k)) + " differs from " + number_text(want.at(k)) +
                      ", what the plan's configuration gives when simulated again",
                  hint);
  }
  for (const char* k : {"step_s"}) {
    const double a = p.prediction.at(k).get<double>(), b = want.at(k).get<double>();
    if (!(std::fabs(a - b) <= 1e-9 * std::max(std::fabs(b), 1e-12)))
      throw Error(where + ": prediction", k,
                  number_text(p.prediction.at(k)) + " differs from " + number_text(want.at(k)) +
                      ", what the plan's configuration gives when simulated again",
                  hint);
  }
  const Json have_alloc = p.allocation.to_json(), want_alloc = fresh.allocation.to_json();
  for (auto it = want_alloc.begin(); it != want_alloc.end(); ++it)
    if (have_alloc.at(it.key()) != it.value())
      throw Error(where + ": allocation", it.key(),
                  number_text(have_alloc.at(it.key())) + " differs from " + number_text(it.value()) +
                      ", what the plan's configuration gives",
                  hint);
  // What the plan says of oomb run (derived from the configuration when written): an edit would
  // tell a reader a plan runs, or does not, for a reason nothing gave.
  if (j.contains("executable") || j.contains("executable_reason")) {
    std::string why;
    const bool can = executable(p.model, p.config, &why);
    const JsonReader r(j, where);
    if (r.boolean("executable") != can)
      throw Error(where, "executable",
                  std::string(can ? "false" : "true") + " differs from what the plan's configuration gives (" +
                      (can ? std::string("oomb run can run it") : "oomb run cannot: " + why) + ")",
                  hint);
    const Json reason = j.value("executable_reason", Json(""));  // "" when it runs
    if (!reason.is_string()) r.fail("executable_reason", "must be a string");
    if (reason.get<std::string>() != why)
      throw Error(where, "executable_reason",
                  "'" + reason.get<std::string>() + "' differs from what the plan's configuration gives ('" + why + "')",
                  hint);
  }
  if (!j.contains("buffers")) return;  // plans written before the buffer table have none
  if (p.buffers.size() != fresh.buffers.size())
    throw Error(where, "buffers",
                "has " + std::to_string(p.buffers.size()) + " rows, the plan's configuration has " +
                    std::to_string(fresh.buffers.size()),
                hint);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const step::BufferRow &a = p.buffers[i], &b = fresh.buffers[i];
    const std::string at = where + ": buffers[" + std::to_string(i) + "]";
    auto differ = [&](const char* key, const std::string& have, const std::string& w) {
      throw Error(at, key, "'" + have + "' differs from '" + w + "', what the plan's configuration gives", hint);
    };
    if (a.name != b.name) differ("name", a.name, b.name);
    if (a.tier != b.tier) differ("tier", step::to_json(a).value("tier", ""), step::to_json(b).value("tier", ""));
    if (a.category != b.category) differ("category", a.category, b.category);
    if (a.dtype != b.dtype) differ("dtype", to_string(a.dtype), to_string(b.dtype));
    if (a.bytes != b.bytes) differ("bytes", std::to_string(a.bytes), std::to_string(b.bytes));
    if (a.phases != b.phases) differ("phases", step::to_json(a)["phases"].dump(), step::to_json(b)["phases"].dump());
  }
}

}  // namespace

Json Plan::to_json() const {
  Json j = Json::object();
  j["schema"] = kPlanSchema;
  j["model_id"] = model_id;
  j["gpu_id"] = gpu_id;
  j["host_id"] = host_id;
  j["context_tokens"] = context_tokens;
  j["objective"] = objective;
  j["headroom"] = headroom;
  j["config"] = config.to_json();
  std::string why;  // derived from the config, so not read back
  j["executable"] = executable(model, config, &why);
  j["executable_reason"] = why;
  j["allocation"] = allocation.to_json();
  j["prediction"] = prediction;
  j["buffers"] = Json::array();
  for (const auto& b : buffers) j["buffers"].push_back(step::to_json(b));
  j["notes"] = notes;
  j["model_spec"] = model.to_json();
  j["gpu_spec"] = gpu.to_json();
  j["host_spec"] = host.to_json();
  return j;
}

simulator::Scenario Plan::scenario() const {
  simulator::Scenario s;
  s.model = model;
  s.gpu = gpu;
  s.host = host;
  s.config = config;
  return s;
}

Plan make_plan(const simulator::Scenario& s, const simulator::Summary& prediction, const std::string& objective,
               double headroom, std::vector<std::string> notes) {
  Plan p;
  p.model_id = s.model.id;
  p.gpu_id = s.gpu.id;
  p.host_id = s.host.id;
  p.context_tokens = s.config.context_tokens;
  p.config = s.config;
  p.prediction = simulator::to_json(prediction);
  p.objective = objective;
  p.headroom = headroom;
  p.notes = std::move(notes);
  p.model = s.model;
  p.gpu = s.gpu;
  p.host = s.host;

  const step::BufferTable t = simulator::memory_table(s);
  Allocation& a = p.allocation;
  // What the executor allocates (sparse: for the union's bound; dense: the high-water mark).
  a.kv_pool_pages = t.pages.kv_pool_capacity_pages;
  a.grad_pool_pages = t.pages.grad_pool_capacity_pages;
  a.kv_page_bytes = t.pages.kv_page_bytes;
  a.grad_page_bytes = t.pages.grad_page_bytes;
  a.host_kv_pages = t.pages.host_kv_pages;
  a.host_grad_pages = t.pages.host_grad_pages;
  // The workspace is what lives outside the pools at the device peak's phase (pools and the
  // reserve are alive in every phase), so pools + workspace + reserve = the predicted peak.
  const step::PhaseMask peak_bit = step::phase_bit(t.device_peak().phase);
  for (const auto& r : t.rows) {
    if (r.tier == step::Tier::device) {
      if (r.name == step::row::kKvPool || r.name == step::row::kKvGradPool) a.device_pool_bytes += r.bytes;
      else if (step::reserved_only(r.category)) a.runtime_reserve_bytes += r.bytes;
      else if (r.phases & peak_bit) a.workspace_bytes += r.bytes;
    } else if (r.category == "kv_pages" || r.category == "kv_grad_pages") {
      a.host_pool_bytes += r.bytes;
    } else {
      a.host_other_bytes += r.bytes;
    }
    p.buffers.push_back(r);
    p.buffers.back().lifetime.clear();
    p.buffers.back().formula.clear();
  }
  // The executor reserves nothing for the runtime; keep the GPU's figure for the reader even when
  // the peak is measured as "allocated" (the table then has no reserve row).
  if (a.runtime_reserve_bytes == 0) a.runtime_reserve_bytes = s.gpu.reserved_bytes;
  OOMB_ASSERT(a.device_pool_bytes == a.kv_pool_pages * a.kv_page_bytes + a.grad_pool_pages * a.grad_page_bytes,
              "pool rows disagree with the page counts");
  return p;
}

Plan plan_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema(kPlanSchema);
  check_keys(j,
             {"schema", "model_id", "gpu_id", "host_id", "context_tokens", "objective", "headroom", "config",
              "executable", "executable_reason", "allocation", "prediction", "buffers", "notes", "model_spec",
              "gpu_spec", "host_spec"},
             where);
  Plan p;
  p.model_id = r.str("model_id");
  p.gpu_id = r.str("gpu_id");
  p.host_id = r.str("host_id");
  p.context_tokens = r.i64_positive("context_tokens");
  p.objective = r.str("objective");
  if (p.objective != "time" && p.objective != "memory" && p.objective != "context" && p.objective != "what-if")
    r.fail("objective", "'" + p.objective + "' is not an objective",
           "time, memory or context (`oomb plan --objective`), or what-if (oomb-gui)");
  p.headroom = r.f64("headroom");
  // As `oomb plan --headroom` takes it.
  if (!(p.headroom < 0.9)) r.fail("headroom", "is out of range", "a share of HBM capacity in [0, 0.9), e.g. 0.05");
  p.config = step::config_from_json(r.object("config"), where + ": config");
  check_keys(r.object("allocation"), {"kv_pool_pages", "grad_pool_pages", "kv_page_bytes", "grad_page_bytes",
                                      "device_pool_bytes", "workspace_bytes", "runtime_reserve_bytes", "host_kv_pages",
                                      "host_grad_pages", "host_pool_bytes", "host_other_bytes"},
             where + ": allocation");
  p.allocation = allocation_from_json(r.object("allocation"), where + ": allocation");
  p.prediction = r.object("prediction");
  check_prediction(p.prediction, where + ": prediction");
  if (r.has("buffers")) {  // plans written before the buffer table have none
    const Json& rows = r.array("buffers");
    for (size_t i = 0; i < rows.size(); ++i) {
      p.buffers.push_back(step::buffer_row_from_json(rows[i], where + ": buffers[" + std::to_string(i) + "]"));
      for (size_t k = 0; k < i; ++k)
        if (p.buffers[k].name == p.buffers[i].name && p.buffers[k].tier == p.buffers[i].tier)
          r.fail("buffers", "row '" + p.buffers[i].name + "' appears twice (" + std::to_string(k) + " and " +
                                std::to_string(i) + ")",
                 "one row per buffer name; re-run `oomb plan --out`");
    }
  }
  for (const auto& n : r.array("notes")) {
    if (!n.is_string()) r.fail("notes", "must be an array of strings");
    p.notes.push_back(n.get<std::string>());
  }
  p.model = models::model_from_json(r.object("model_spec"), where + ": model_spec");
  p.gpu = models::gpu_from_json(r.object("gpu_spec"), where + ": gpu_spec");
  p.host = models::host_from_json(r.object("host_spec"), where + ": host_spec");

  if (p.config.context_tokens != p.context_tokens)
    r.fail("context_tokens", "differs from config.context_tokens (" + std::to_string(p.config.context_tokens) + ")");
  if (p.model.id != p.model_id) r.fail("model_id", "'" + p.model_id + "' differs from model_spec.id '" + p.model.id + "'");
  if (p.gpu.id != p.gpu_id) r.fail("gpu_id", "'" + p.gpu_id + "' differs from gpu_spec.id '" + p.gpu.id + "'");
  if (p.host.id != p.host_id) r.fail("host_id", "'" + p.host_id + "' differs from host_spec.id '" + p.host.id + "'");
  step::validate_document(p.config, p.model, where + ": config");
  check_against_configuration(p, j, where);
  return p;
}

Plan load_plan(const std::string& path) { return plan_from_json(read_json_file(path), path); }

void save_plan(const std::string& path, const Plan& p) { write_text_file(path, p.to_json().dump(2) + "\n"); }

void check_plan_against(const Plan& p, const models::ModelSpec& model, const models::GpuSpec& gpu) {
  auto shape = [](const models::ModelSpec& m) {
    return std::vector<int64_t>{m.layers, m.hidden, m.q_heads, m.kv_heads, m.head_dim, m.ffn_hidden, m.vocab};
  };
  if (p.model_id != model.id || shape(p.model) != shape(model))
    throw Error("plan", "model_id",
                "the plan was made for model '" + p.model_id + "', not for '" + model.id + "'" +
                    (p.model_id == model.id ? " (same id, different shapes)" : ""),
                "re-plan with `oomb plan --model " + model.id + "`");
  if (p.gpu_id != gpu.id || p.gpu.hbm_capacity_bytes != gpu.hbm_capacity_bytes)
    throw Error("plan", "gpu_id",
                "the plan was made for GPU '" + p.gpu_id + "', not for '" + gpu.id + "'" +
                    (p.gpu_id == gpu.id ? " (same id, different memory capacity)" : ""),
                "re-plan with `oomb plan --gpu " + gpu.id + "`");
}

}  // namespace oomb::planner
