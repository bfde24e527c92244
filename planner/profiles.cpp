#include "planner/profiles.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/format.h"
#include "planner/points.h"
#include "traces/trace.h"

namespace oomb::planner {

void check_fit(const simulator::FitResult& fit, const std::string& what) {
  double worst = 0;
  for (double e : fit.trace_error) worst = std::max(worst, std::fabs(e));
  const bool finite = std::isfinite(fit.efficiency.gemm) && std::isfinite(fit.efficiency.attention) &&
                      std::isfinite(fit.efficiency.attention_backward) && std::isfinite(fit.efficiency.memory_bound) &&
                      std::isfinite(fit.launch_overhead_s);
  if (std::isfinite(fit.r2) && finite) return;
  throw Error("calibrate", what,
              std::string("the fit failed: ") +
                  (finite ? "R^2 is undefined (the measured times do not vary, and the fit does not reproduce them"
                          : "a fitted parameter is not a finite number (") +
                  (fit.trace_error.empty() ? std::string(")") : "; worst per-point error " + format_percent(worst) + ")") +
                  "; no profile written",
              "measure configurations whose step times differ (context, chunk, model), and check the measurements");
}

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

TracesProfile fit_profile_to_traces(const models::GpuSpec& base, const std::vector<std::string>& trace_paths,
                                    const std::vector<std::string>& hold, const std::string& id) {
  std::vector<simulator::CalibrationSample> samples;
  std::vector<std::string> devices;
  for (size_t i = 0; i < trace_paths.size(); ++i) {
    const traces::Trace t = traces::read_trace(trace_paths[i]);
    const bool cpu = t.metadata.source == "cpu";
    if ((base.kind == "cpu") != cpu)
      throw Error(trace_paths[i], "metadata.source",
                  "was measured on " + t.metadata.source + " but --gpu " + base.id + " is a " + base.kind + " profile",
                  "fit a profile of the kind of device that ran");
    auto s = simulator::calibration_samples(t, trace_paths[i], base, static_cast<int>(i));
    samples.insert(samples.end(), s.begin(), s.end());
    devices.push_back(t.metadata.device);
  }
  TracesProfile out;
  out.events = samples.size();
  out.fit = simulator::fit_efficiencies(samples, base, static_cast<int>(trace_paths.size()), hold);
  models::GpuSpec& g = out.profile;
  g = base;
  g.efficiency = out.fit.efficiency;
  g.launch_overhead_s = out.fit.launch_overhead_s;
  g.id = id.empty() ? base.id + "-calibrated" : id;
  g.calibrated_from = "least-squares fit to " + std::to_string(trace_paths.size()) + " measured trace(s) on " +
                      (devices.empty() ? std::string("?") : devices.front()) + ": " + joined(trace_paths);
  g.sources["efficiency"] = "oomb calibrate --traces (least squares over " + std::to_string(samples.size()) +
                            " compute events, R^2 " + std::to_string(out.fit.r2) + ")";
  check_fit(out.fit, "--traces");
  out.json = g.to_json();
  out.json["calibration"] = out.fit.to_json();
  return out;
}

PointsProfile fit_profile_to_points(const std::string& gpu, const models::GpuSpec& base,
                                    const std::vector<std::string>& point_paths, const std::vector<std::string>& hold,
                                    const std::string& id) {
  PointsProfile out;
  for (const auto& path : point_paths) {
    auto p = read_points(path, gpu, base);
    out.points.insert(out.points.end(), p.begin(), p.end());
  }
  out.fit = simulator::fit_points(out.points, base, hold);
  const simulator::FitResult& fit = out.fit.fit;
  check_fit(fit, "--points");
  models::GpuSpec g = out.fit.profile;
  g.id = id.empty() ? base.id + "-calibrated" : id;
  g.calibrated_from = "least-squares fit to " + std::to_string(out.points.size()) + " measured step(s): " + joined(point_paths);
  g.sources["efficiency"] = "oomb calibrate --points (least squares over " + std::to_string(out.points.size()) +
                            " whole steps, R^2 " + std::to_string(fit.r2) + ")";
  Json cal = fit.to_json();
  cal.erase("residuals");  // one sample per point: the per-point rows say it
  cal.erase("trace_error");
  cal.erase("leave_one_trace_out_error");
  Json rows = Json::array();
  for (size_t i = 0; i < out.points.size(); ++i) {
    const auto& p = out.points[i];
    const auto& q = out.fit.predicted[i];
    Json row = {{"name", p.name}, {"measured_step_s", p.step_s}, {"predicted_step_s", q.step_s},
                {"step_error", fit.trace_error[i]}, {"predicted_peak_device_bytes", q.peak_device_bytes}};
    row["left_out_step_error"] =
        i < fit.leave_one_out.size() && fit.leave_one_out[i] ? Json(*fit.leave_one_out[i]) : Json(nullptr);
    if (p.peak_device_bytes) {
      row["measured_peak_device_bytes"] = *p.peak_device_bytes;
      row["peak_device_error"] = *p.peak_device_bytes > 0
                                     ? (static_cast<double>(q.peak_device_bytes) - static_cast<double>(*p.peak_device_bytes)) /
                                           static_cast<double>(*p.peak_device_bytes)
                                     : 0.0;
    }
    rows.push_back(row);
  }
  cal["points"] = rows;
  out.calibration = cal;
  out.json = g.to_json();
  out.json["calibration"] = cal;
  return out;
}

Projection project_profile(const std::string& from, const std::string& to, const std::string& id) {
  Projection out;
  out.from = models::load_gpu(from);
  if (out.from.calibrated_from.empty())
    throw Error("--gpu", from, "is not a calibrated profile (no calibrated_from)",
                "calibrate first: oomb calibrate --backend cpu or --traces ...");
  models::GpuSpec& g = out.profile;
  g = models::load_gpu(to);
  g.efficiency = out.from.efficiency;
  g.id = id.empty() ? g.id + "-projected" : id;
  g.calibrated_from = "projected from " + out.from.id + " (" + out.from.calibrated_from + ") to " + to;
  g.sources["efficiency"] = "kept from " + out.from.id + "; peaks, bandwidths and capacities are " + to + "'s";
  out.other_kind = out.from.kind != g.kind;
  return out;
}

}  // namespace oomb::planner
