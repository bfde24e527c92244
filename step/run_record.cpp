#include "step/run_record.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"

namespace oomb::step {

namespace {

std::map<std::string, int64_t> byte_map(const JsonReader& r, const char* key) {
  std::map<std::string, int64_t> m;
  if (!r.has(key)) return m;
  const JsonReader o(r.object(key), r.where() + ": " + key);
  for (const auto& [k, v] : r.object(key).items()) {
    if (!v.is_number_integer()) o.fail(k, "must be an integer byte count");
    m[k] = v.get<int64_t>();
  }
  return m;
}

}  // namespace

double RunRecord::mean_recall() const {
  if (recorded_mean_recall) return *recorded_mean_recall;
  double s = 0;
  for (const auto& x : recall) s += x.recall;
  return recall.empty() ? 0.0 : s / static_cast<double>(recall.size());
}

double RunRecord::min_recall() const {
  if (recorded_min_recall) return *recorded_min_recall;
  double m = recall.empty() ? 0.0 : 1.0;
  for (const auto& x : recall) m = std::min(m, x.recall);
  return m;
}

Json to_json(const RunRecord& r) {
  Json unions = Json::array();
  int64_t max_union = 0;
  for (const auto& u : r.union_pages) {
    unions.push_back({{"chunk", u.chunk}, {"layer", u.layer}, {"pages", u.pages}});
    max_union = std::max(max_union, u.pages);
  }
  Json bufs = Json::array();
  for (const auto& b : r.buffers) bufs.push_back(to_json(b));
  Json phases = Json::object();
  for (const auto& [p, bytes] : r.phase_high_water_bytes) phases[to_string(p)] = bytes;
  Json m = {{"compute_dtype", "fp32"},
            {"param_dtype", r.param_dtype},
            {"param_grad_dtype", r.param_grad_dtype},
            {"activation_dtype", r.activation_dtype},
            {"loss_dtype", r.loss_dtype},
            {"backend", r.backend},
            {"buffers", bufs},
            {"notes", r.notes},
            {"kv_dtype", r.kv_dtype},
            {"kv_grad_dtype", r.kv_grad_dtype},
            {"kv_page_bytes", r.kv_page_bytes},
            {"grad_page_bytes", r.grad_page_bytes},
            {"kv_pool_pages", r.kv_pool_pages},
            {"grad_pool_pages", r.grad_pool_pages},
            {"kv_pool_high_water_pages", r.kv_pool_high_water_pages},
            {"grad_pool_high_water_pages", r.grad_pool_high_water_pages},
            {"device_pool_pages", r.kv_pool_high_water_pages + r.grad_pool_high_water_pages},
            {"host_kv_pages", r.host_kv_pages},
            {"host_grad_pages", r.host_grad_pages},
            {"peak_device_bytes", r.peak_device_bytes},
            {"peak_host_bytes", r.peak_host_bytes},
            {"device_breakdown_bytes", r.device_breakdown_bytes},
            {"row_high_water_bytes", r.row_high_water_bytes},
            {"phase_high_water_bytes", phases},
            {"h2d_bytes", r.h2d_bytes},
            {"d2h_bytes", r.d2h_bytes},
            {"copy_regions", r.copy_regions},
            {"host_syncs", r.host_syncs},
            {"max_union_pages", max_union},
            {"union_pages", unions},
            {"step_s", r.step_s},
            {"step_times_s", r.step_times_s},
            {"tokens_per_s", r.tokens_per_s},
            {"loss", r.loss},
            {"steps", r.steps}};
  if (!r.job.empty()) m["job"] = r.job;
  if (r.emulated_device) m["emulated_device"] = true;
  if (r.local_kv_pool_pages > 0) {
    m["local_kv_pool_pages"] = r.local_kv_pool_pages;
    m["local_grad_pool_pages"] = r.local_grad_pool_pages;
    m["local_kv_high_water_pages"] = r.local_kv_high_water_pages;
    m["local_grad_high_water_pages"] = r.local_grad_high_water_pages;
  }
  if (r.world > r.tp)
    m["data_parallel"] = {{"rank", r.rank},
                          {"world", r.world},
                          {"comm", r.comm},
                          {"allreduce_bytes", r.allreduce_bytes},
                          {"allreduce_s", r.allreduce_s},
                          {"allreduce_wait_s", r.allreduce_wait_s},
                          {"allreduce_transfer_s", r.allreduce_transfer_s},
                          {"collective_split", r.collective_split},
                          {"device_timed", r.collectives_device_timed}};
  if (r.tp > 1)
    m["tensor_parallel"] = {{"tp", r.tp},
                            {"rank", r.tp_rank},
                            {"world", r.world},
                            {"comm", r.comm},
                            {"allreduces", r.tp_allreduces},
                            {"allreduce_bytes", r.tp_allreduce_bytes},
                            {"allreduce_s", r.tp_allreduce_s},
                            {"allreduce_wait_s", r.tp_allreduce_wait_s},
                            {"allreduce_transfer_s", r.tp_allreduce_transfer_s},
                            {"collective_split", r.collective_split},
                            {"device_timed", r.collectives_device_timed}};
  if (!r.recall.empty()) {
    Json samples = Json::array();
    for (const auto& x : r.recall) samples.push_back({{"chunk", x.chunk}, {"layer", x.layer}, {"recall", x.recall}});
    m["recall"] = samples;
    m["mean_recall"] = r.mean_recall();
    m["min_recall"] = r.min_recall();
  }
  Json out = {{"model", r.model}, {"layers", r.layers}, {"config", r.config.to_json()}, {"measured", m}};
  if (!r.model_spec.is_null()) out["model_spec"] = r.model_spec;
  return out;
}

RunRecord run_record_from_json(const Json& extra, const std::string& where) {
  if (!extra.is_object() || !extra.contains("model") || !extra.contains("config") || !extra.contains("measured"))
    throw Error(where, "metadata.extra", "does not record a run of the executor (its model, configuration and "
                                         "measurements)",
                "a trace written by `oomb run --trace`");
  const JsonReader x(extra, where + ": metadata.extra");
  if (x.has("schema") && x.str("schema") != kRunRecordSchema)
    x.fail("schema", "is '" + x.str("schema") + "'", std::string("this oomb reads ") + kRunRecordSchema);
  RunRecord r;
  r.model = x.str("model");
  if (x.has("model_spec")) r.model_spec = x.object("model_spec");
  r.layers = x.i64_or("layers", 0);
  r.config = config_from_json(x.object("config"), where + ": metadata.extra.config");
  r.cpu_threads = x.i64_or("cpu_threads", 1);
  const JsonReader m(x.object("measured"), where + ": metadata.extra.measured");
  // Storage as run (the measured block's word; fp32 before typed storage recorded it).
  auto stored = [&](const char* key) {
    return storage_dtype_from_string(m.str_or(key, "fp32"), where + ": metadata.extra.measured: " + key);
  };
  r.config.kv_dtype = r.kv_dtype = stored("kv_dtype");
  r.config.kv_grad_dtype = r.kv_grad_dtype = stored("kv_grad_dtype");
  r.config.param_dtype = r.param_dtype = stored("param_dtype");
  r.config.param_grad_dtype = r.param_grad_dtype = stored("param_grad_dtype");
  r.config.activation_dtype = r.activation_dtype = stored("activation_dtype");
  r.config.loss_dtype = r.loss_dtype = stored("loss_dtype");
  r.backend = m.str_or("backend", "");
  r.job = m.str_or("job", "");
  r.emulated_device = m.boolean_or("emulated_device", false);
  r.steps = std::max<int64_t>(1, m.i64_or("steps", 1));
  r.step_s = m.has("step_s") ? m.f64("step_s") : 0;
  r.mean_step_s = m.has("mean_step_s") ? m.f64("mean_step_s") : r.step_s;
  if (m.has("step_times_s"))
    for (const auto& t : m.array("step_times_s"))
      if (t.is_number()) r.step_times_s.push_back(t.get<double>());
  r.tokens_per_s = m.has("tokens_per_s") ? m.f64("tokens_per_s") : 0;
  r.loss = m.has("loss") ? m.f64("loss") : 0;
  r.kv_page_bytes = m.i64_or("kv_page_bytes", 0);
  r.grad_page_bytes = m.i64_or("grad_page_bytes", 0);
  r.kv_pool_pages = m.i64_or("kv_pool_pages", 0);
  r.grad_pool_pages = m.i64_or("grad_pool_pages", 0);
  r.kv_pool_high_water_pages = m.i64_or("kv_pool_high_water_pages", 0);
  r.grad_pool_high_water_pages = m.i64_or("grad_pool_high_water_pages", 0);
  r.local_kv_pool_pages = m.i64_or("local_kv_pool_pages", 0);
  r.local_grad_pool_pages = m.i64_or("local_grad_pool_pages", 0);
  r.local_kv_high_water_pages = m.i64_or("local_kv_high_water_pages", 0);
  r.local_grad_high_water_pages = m.i64_or("local_grad_high_water_pages", 0);
  r.host_kv_pages = m.i64_or("host_kv_pages", 0);
  r.host_grad_pages = m.i64_or("host_grad_pages", 0);
  r.peak_device_bytes = m.i64_or("peak_device_bytes", 0);
  r.peak_host_bytes = m.i64_or("peak_host_bytes", 0);
  r.device_breakdown_bytes = byte_map(m, "device_breakdown_bytes");
  r.row_high_water_bytes = byte_map(m, "row_high_water_bytes");
  if (m.has("phase_high_water_bytes"))
    for (const auto& [name, bytes] : byte_map(m, "phase_high_water_bytes"))
      r.phase_high_water_bytes[phase_from_string(name, where + ": metadata.extra.measured.phase_high_water_bytes")] = bytes;
  r.h2d_bytes = m.i64_or("h2d_bytes", 0);
  r.d2h_bytes = m.i64_or("d2h_bytes", 0);
  r.copy_regions = m.i64_or("copy_regions", 0);
  r.host_syncs = m.i64_or("host_syncs", 0);
  if (m.has("recall"))
    for (const auto& sample : m.array("recall")) {
      const JsonReader e(sample, where + ": metadata.extra.measured.recall[]");
      r.recall.push_back({e.i64("chunk"), e.i64_or("layer", 0), e.f64("recall")});
    }
  if (m.has("mean_recall")) r.recorded_mean_recall = m.f64("mean_recall");
  if (m.has("min_recall")) r.recorded_min_recall = m.f64("min_recall");
  if (m.has("union_pages"))
    for (const auto& u : m.array("union_pages")) {
      const JsonReader e(u, where + ": metadata.extra.measured.union_pages[]");
      r.union_pages.push_back({e.i64("chunk"), e.i64_or("layer", 0), e.i64("pages")});
    }
  // The collectives' blocks (each written when the run had that parallelism). Traces from before the
  // split of a collective's time have the total only.
  if (m.has("tensor_parallel")) {
    const JsonReader t(m.object("tensor_parallel"), where + ": metadata.extra.measured.tensor_parallel");
    r.tp = std::max<int64_t>(2, t.i64_or("tp", r.config.gpus));
    r.tp_rank = t.i64("rank");
    r.world = static_cast<int>(t.i64_or("world", r.tp));
    r.comm = t.str_or("comm", r.comm);
    r.tp_allreduces = t.i64("allreduces");
    r.tp_allreduce_bytes = t.i64("allreduce_bytes");
    if (t.has("allreduce_s")) r.tp_allreduce_s = t.f64("allreduce_s");
    if (t.has("allreduce_wait_s")) r.tp_allreduce_wait_s = t.f64("allreduce_wait_s");
    if (t.has("allreduce_transfer_s")) r.tp_allreduce_transfer_s = t.f64("allreduce_transfer_s");
    else r.collective_times_recorded = false;
    r.collective_split = r.collective_split && t.boolean_or("collective_split", true);
    r.collectives_device_timed = r.collectives_device_timed || t.boolean_or("device_timed", false);
  }
  if (m.has("data_parallel")) {
    const JsonReader d(m.object("data_parallel"), where + ": metadata.extra.measured.data_parallel");
    r.rank = static_cast<int>(d.i64_or("rank", 0));
    // Recorded when the job has more ranks than one tensor-parallel group.
    r.world = static_cast<int>(std::max<int64_t>(d.i64_or("world", r.config.data_parallel * r.tp), r.tp + 1));
    r.comm = d.str_or("comm", r.comm);
    r.allreduce_bytes = d.i64("allreduce_bytes");
    if (d.has("allreduce_s")) r.allreduce_s = d.f64("allreduce_s");
    if (d.has("allreduce_wait_s")) r.allreduce_wait_s = d.f64("allreduce_wait_s");
    if (d.has("allreduce_transfer_s")) r.allreduce_transfer_s = d.f64("allreduce_transfer_s");
    else r.collective_times_recorded = false;
    r.collective_split = r.collective_split && d.boolean_or("collective_split", true);
    r.collectives_device_timed = r.collectives_device_timed || d.boolean_or("device_timed", false);
  }
  if (m.has("notes"))
    for (const auto& n : m.array("notes"))
      if (n.is_string()) r.notes.push_back(n.get<std::string>());
  if (x.has("cupti")) {
    const JsonReader c(x.object("cupti"), where + ": metadata.extra.cupti");
    r.cupti_timed = true;
    if (c.has("reserved_device_bytes")) r.cupti_reserved_device_bytes = c.i64("reserved_device_bytes");
    if (c.has("untagged")) r.cupti_untagged = c.i64("untagged");
  }
  return r;
}

namespace {

// measured.<key> when the section is a run's record and it is an object (nullptr otherwise).
const Json* measured_block(const Json& extra, const char* key) {
  if (!extra.is_object()) return nullptr;
  const auto m = extra.find("measured");
  if (m == extra.end() || !m->is_object()) return nullptr;
  const auto b = m->find(key);
  return b != m->end() && b->is_object() ? &*b : nullptr;
}

}  // namespace

RunRank run_rank(const Json& extra) {
  // data_parallel's rank is the job's; with tensor parallelism alone the group is the job.
  for (const char* key : {"data_parallel", "tensor_parallel"}) {
    const Json* b = measured_block(extra, key);
    if (!b || !b->contains("world") || !(*b)["world"].is_number_integer()) continue;
    RunRank r;
    const int64_t world = (*b)["world"].get<int64_t>();
    r.world = static_cast<int>(std::clamp<int64_t>(world, 1, 1 << 20));
    if (b->contains("rank") && (*b)["rank"].is_number_integer())
      r.rank = static_cast<int>(std::clamp<int64_t>((*b)["rank"].get<int64_t>(), 0, r.world - 1));
    const Json& m = extra.at("measured");
    if (m.contains("job") && m.at("job").is_string()) r.job = m.at("job").get<std::string>();
    return r;
  }
  return {};
}

std::string CollectiveFigure::unit() const {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with("_bytes")) return "bytes";
  if (ends_with("_s")) return "s";
  return "";
}

std::vector<CollectiveFigure> run_collectives(const Json& extra) {
  std::vector<CollectiveFigure> out;
  for (const auto& [key, prefix] : {std::pair<const char*, const char*>{"tensor_parallel", "tp_"},
                                    std::pair<const char*, const char*>{"data_parallel", ""}}) {
    const Json* b = measured_block(extra, key);
    if (!b) continue;
    const size_t first = out.size();
    for (const auto& [k, v] : b->items()) {
      if (k == "tp" || k == "rank" || k == "world" || !v.is_number()) continue;
      const double x = v.get<double>();
      if (std::isfinite(x)) out.push_back({prefix + k, x});
    }
    // Counts, then bytes, then seconds: tp_allreduces, tp_allreduce_bytes, tp_allreduce_s.
    auto order = [](const CollectiveFigure& f) { return f.unit().empty() ? 0 : f.unit() == "bytes" ? 1 : 2; };
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(first), out.end(),
                     [&](const CollectiveFigure& x, const CollectiveFigure& y) { return order(x) < order(y); });
  }
  return out;
}

std::optional<double> collective_seconds(const std::vector<CollectiveFigure>& figures) {
  std::optional<double> s;
  for (const auto& f : figures)
    if (f.name == "tp_allreduce_s" || f.name == "allreduce_s") s = s.value_or(0) + f.value;
  return s;
}

void record_step_timing(Json& extra, int64_t timed_steps, double step_s, double mean_step_s) {
  if (!extra.is_object() || !extra.contains("measured") || !extra["measured"].is_object()) return;
  Json& m = extra["measured"];
  if (timed_steps > 0) m["steps"] = timed_steps;
  m["mean_step_s"] = mean_step_s;
  m["step_s"] = step_s;
}

}  // namespace oomb::step
