#include "planner/plan.h"

#include "core/error.h"
#include "planner/executable.h"

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
  r.str("binding_constraint");
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
  j["executable"] = executable(config, &why);
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

  const simulator::MemoryTable t = simulator::memory_table(s);
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
  const simulator::PhaseMask peak_bit = simulator::phase_bit(t.device_peak().phase);
  for (const auto& r : t.rows) {
    if (r.tier == simulator::Tier::device) {
      if (r.name == step::row::kKvPool || r.name == step::row::kKvGradPool) a.device_pool_bytes += r.bytes;
      else if (r.category == "runtime_reserve") a.runtime_reserve_bytes += r.bytes;
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
  Plan p;
  p.model_id = r.str("model_id");
  p.gpu_id = r.str("gpu_id");
  p.host_id = r.str("host_id");
  p.context_tokens = r.i64_positive("context_tokens");
  p.objective = r.str("objective");
  p.headroom = r.f64("headroom");
  p.config = simulator::config_from_json(r.object("config"), where + ": config");
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
  if (p.headroom >= 1.0) r.fail("headroom", "must be below 1", "a share of HBM capacity, e.g. 0.05");
  simulator::validate_document(p.config, p.model, where + ": config");
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
