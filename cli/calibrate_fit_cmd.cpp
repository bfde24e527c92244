// oomb calibrate's modes that fit or move a profile without running anything:
//   --traces T... --gpu G     least-squares fit of G's efficiencies to measured traces
//   --points P... --gpu G     least-squares fit of G's efficiencies to measured whole steps (run logs)
//   --project-to G2 --gpu P   a calibrated profile's efficiencies on another catalog device
//   --recall T... --out C     a budget-to-recall curve (oomb.recall/1) from sparse runs' recall
// Each prints around one library call (planner/profiles.h, planner/recall_curve.h).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/calibrate_args.h"
#include "core/error.h"
#include "core/format.h"
#include "planner/profiles.h"
#include "planner/recall_curve.h"
#include "planner/knobs.h"
#include "simulator/calibration.h"
#include "traces/trace.h"
#include "core/files.h"

namespace oomb::cli {
namespace {

// A parameter held at its bound: what the fit wanted instead and which traces or points pull it
// there (the three strongest), so the user knows which measurements to look at.
void print_clamps(const simulator::FitResult& fit, const std::vector<std::string>& names, const char* unit) {
  for (size_t k = 0; k < fit.clamped.size(); ++k) {
    std::printf("  note: %s\n", fit.clamped[k].c_str());
    if (k >= fit.clamp_pulls.size()) continue;
    const simulator::ClampPull& c = fit.clamp_pulls[k];
    std::string by;
    for (size_t i = 0; i < c.by.size() && i < 3; ++i) {
      const auto& [t, share] = c.by[i];
      by += (by.empty() ? "" : ", ") + (t < static_cast<int>(names.size()) ? names[static_cast<size_t>(t)]
                                                                             : std::to_string(t)) +
            " (" + format_percent(share) + ")";
    }
    if (c.by.size() > 3) by += " and " + std::to_string(c.by.size() - 3) + " more";
    const bool overhead = c.parameter == "launch overhead";
    const std::string wanted =
        !std::isfinite(c.wanted) ? std::string("no time at all for that work")
        : overhead               ? "an overhead of " + format_duration_s(c.wanted) + " per op"
                                 : "an efficiency of " + planner::format_number(c.wanted) + " (a peak " + planner::format_number(c.wanted) +
                                       "x the profile's)";
    std::printf("        the fit wanted %s; pulled there by %s %s: measured faster than the bound allows for "
                "their %s work. Check those measurements%s\n",
                wanted.c_str(), unit, by.empty() ? "-" : by.c_str(), c.work.c_str(),
                overhead ? ", or --hold launch_overhead" : ", the profile's peak (bf16_flops_per_s), or --hold it");
  }
}

}  // namespace

void write_or_print(const Json& profile, const std::string& out) {
  // The written profile must load: check it with the loader before writing.
  models::gpu_from_json(profile, out.empty() ? "calibrated profile" : out);
  if (out.empty()) std::printf("%s\n", profile.dump(2).c_str());
  else write_text_file(out, profile.dump(2) + "\n");
}

int run_fit_mode(const CalibrateArgs& a) {
  if (a.gpu.empty()) throw Error("--gpu", "", "is required with --traces", "the profile whose efficiencies to fit, e.g. h200");
  if (a.out.empty()) throw Error("--out", "", "is required with --traces", "e.g. --out h200-calibrated.json");
  const models::GpuSpec base = models::load_gpu(a.gpu);
  const planner::TracesProfile tp = planner::fit_profile_to_traces(base, a.traces, a.hold, a.id);
  const simulator::FitResult& fit = tp.fit;
  write_or_print(tp.json, a.out);
  if (a.json) {
    std::printf("%s\n", fit.to_json().dump(2).c_str());
    return 0;
  }
  std::printf("oomb calibrate: %s fitted to %zu trace(s), %zu compute events\n", base.id.c_str(), a.traces.size(),
              tp.events);
  std::printf("  efficiency gemm %.4f, attention %.4f (backward %.4f), memory-bound %.4f; launch overhead %s; R^2 %.4f\n",
              fit.efficiency.gemm, fit.efficiency.attention, fit.efficiency.attention_backward, fit.efficiency.memory_bound,
              format_duration_s(fit.launch_overhead_s).c_str(), fit.r2);
  print_clamps(fit, a.traces, "trace(s)");
  std::printf("\n  %-16s %7s %12s %12s %8s %10s\n", "op", "events", "measured", "predicted", "error", "rms rel.");
  for (const auto& o : fit.residuals)
    std::printf("  %-16s %7d %12s %12s %8s %10s\n", to_string(o.op), o.samples, format_duration_s(o.measured_s).c_str(),
                format_duration_s(o.predicted_s).c_str(),
                format_percent(o.measured_s > 0 ? (o.predicted_s - o.measured_s) / o.measured_s : 0).c_str(),
                format_percent(o.rms_relative).c_str());
  std::printf("\n  %-40s %10s %16s\n", "trace", "fit error", "left out error");
  for (size_t i = 0; i < a.traces.size(); ++i) {
    std::string loo = "-";
    if (i < fit.leave_one_out.size())
      loo = fit.leave_one_out[i] ? format_percent(*fit.leave_one_out[i]) : "undetermined";
    std::printf("  %-40s %10s %16s\n", a.traces[i].c_str(), format_percent(fit.trace_error[i]).c_str(), loo.c_str());
  }
  std::printf("\nprofile: %s\n", a.out.c_str());
  return 0;
}


int run_project_mode(const CalibrateArgs& a) {
  if (a.gpu.empty()) throw Error("--gpu", "", "is required with --project-to", "the calibrated profile, e.g. cpu.json");
  if (a.out.empty()) throw Error("--out", "", "is required with --project-to", "e.g. --out h200-projected.json");
  const planner::Projection p = planner::project_profile(a.gpu, a.project_to, a.id);
  const models::GpuSpec& from = p.from;
  const models::GpuSpec& g = p.profile;
  write_or_print(g.to_json(), a.out);
  std::printf("oomb calibrate: efficiencies of %s (gemm %.3f, attention %.3f, backward %.3f, memory-bound %.3f, copy "
              "%.3f) on %s: %s\n",
              from.id.c_str(), g.efficiency.gemm, g.efficiency.attention, g.efficiency.attention_backward,
              g.efficiency.memory_bound,
              g.efficiency.copy, a.project_to.c_str(), a.out.c_str());
  if (p.other_kind)
    std::printf("note: %s is a %s profile and %s a %s: its efficiencies describe another kind of device; the "
                "projection is a what-if, not a prediction\n",
                from.id.c_str(), from.kind.c_str(), a.project_to.c_str(), g.kind.c_str());
  return 0;
}


int run_recall_mode(const CalibrateArgs& a) {
  if (a.out.empty() && !a.json) throw Error("--out", "", "is required with --recall", "e.g. --out recall.json");
  std::vector<planner::RecallPoint> points;
  std::vector<std::string> models;
  for (const auto& path : a.recall) {
    const traces::Trace t = traces::read_trace(path);
    std::string model;
    points.push_back(planner::recall_point_from_run(t.metadata.extra, path, &model));
    models.push_back(model);
  }
  const planner::RecallCurve curve = planner::make_recall_curve(models.front(), points, models);
  const Json j = curve.to_json();
  if (!a.out.empty()) write_text_file(a.out, j.dump(2) + "\n");
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("oomb calibrate: recall curve of %s from %zu trace(s), pages of %lld tokens\n", curve.model.c_str(),
              curve.points.size(), static_cast<long long>(curve.points.front().page_tokens));
  std::printf("  %8s %12s %12s  %s\n", "budget", "mean recall", "min recall", "trace");
  for (const auto& p : curve.points)
    std::printf("  %8lld %12.4f %12.4f  %s\n", static_cast<long long>(p.budget), p.mean_recall, p.min_recall,
                p.source.c_str());
  std::printf("curve (oomb.recall/1): %s\n", a.out.c_str());
  return 0;
}

int run_points_mode(const CalibrateArgs& a) {
  if (a.gpu.empty())
    throw Error("--gpu", "", "is required with --points", "the profile of the device that ran, e.g. h100-sxm");
  const models::GpuSpec base = models::load_gpu(a.gpu);
  const planner::PointsProfile pp = planner::fit_profile_to_points(a.gpu, base, a.points, a.hold, a.id);
  const std::vector<simulator::MeasuredPoint>& points = pp.points;
  const simulator::PointsFit& pf = pp.fit;
  const simulator::FitResult& fit = pf.fit;
  models::gpu_from_json(pp.json, a.out.empty() ? "calibrated profile" : a.out);
  if (!a.out.empty()) write_text_file(a.out, pp.json.dump(2) + "\n");
  if (a.json) {
    std::printf("%s\n", pp.calibration.dump(2).c_str());
    return 0;
  }
  std::printf("oomb calibrate: %s fitted to %zu measured step(s) (%d iteration(s) of the copy-time fixed point)\n",
              base.id.c_str(), points.size(), pf.iterations);
  std::printf("  efficiency gemm %.4f, attention %.4f (backward %.4f), memory-bound %.4f; launch overhead %s; R^2 %.4f\n",
              fit.efficiency.gemm, fit.efficiency.attention, fit.efficiency.attention_backward,
              fit.efficiency.memory_bound, format_duration_s(fit.launch_overhead_s).c_str(), fit.r2);
  {
    std::vector<std::string> point_names;
    for (const auto& p : points) point_names.push_back(p.name);
    print_clamps(fit, point_names, "point(s)");
  }
  for (const auto& h : a.hold) std::printf("  held at %s's value: %s\n", base.id.c_str(), h.c_str());
  std::printf("\n  %-28s %12s %12s %8s %10s %12s %12s %8s\n", "point", "measured", "predicted", "error", "left out",
              "peak meas.", "peak pred.", "error");
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const auto& q = pf.predicted[i];
    std::string loo = "-";
    if (i < fit.leave_one_out.size()) loo = fit.leave_one_out[i] ? format_percent(*fit.leave_one_out[i]) : "undetermined";
    std::string pm = "-", pe = "-";
    if (p.peak_device_bytes) {
      pm = format_bytes(*p.peak_device_bytes);
      if (*p.peak_device_bytes > 0)
        pe = format_percent((static_cast<double>(q.peak_device_bytes) - static_cast<double>(*p.peak_device_bytes)) /
                            static_cast<double>(*p.peak_device_bytes));
    }
    std::printf("  %-28s %12s %12s %8s %10s %12s %12s %8s\n", p.name.c_str(), format_duration_s(p.step_s).c_str(),
                format_duration_s(q.step_s).c_str(), format_percent(fit.trace_error[i]).c_str(), loo.c_str(),
                pm.c_str(), format_bytes(q.peak_device_bytes).c_str(), pe.c_str());
  }
  if (!a.out.empty()) std::printf("\nprofile: %s\n", a.out.c_str());
  return 0;
}


}  // namespace oomb::cli
