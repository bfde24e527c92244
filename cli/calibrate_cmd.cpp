// oomb calibrate: device profiles from measurements.
//   --backend cpu|cuda        micro-benchmarks of the local backend -> a profile (kind "cpu" / "gpu")
//   --traces T... --gpu G     least-squares fit of G's efficiencies to measured traces
//   --project-to G2 --gpu P   a calibrated profile's efficiencies on another catalog device
//   --recall T... --out C     a budget-to-recall curve (oomb.recall/1) from sparse runs' recall
//   --points P... --gpu G     least-squares fit of G's efficiencies to measured whole steps (run logs)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>
#include <optional>

#include "cli/command.h"
#include "cli/scenario_flags.h"
#include "cli/mpi_job.h"
#include "core/error.h"
#include "core/format.h"
#include "runner/calibrate.h"
#include "runner/calibration_runs.h"
#include "executor/runtime/microbench.h"
#include "planner/defaults.h"
#include "planner/knobs.h"
#include "planner/plan.h"
#include "planner/points.h"
#include "planner/recall_curve.h"
#include "planner/search.h"
#include "simulator/calibration.h"
#include "traces/trace.h"

namespace oomb::cli {
namespace {

struct CalibrateArgs {
  std::string backend, gpu, out, id, project_to, efficiency_model;
  std::string fit_model;  // --backend cpu: the model of the calibration runs ("" = the first --model, "none")
  std::vector<std::string> traces, recall, points, hold, models = {"tiny", "qwen2.5-0.5b"};
  int64_t chunk = 1024;
  int threads = 0;  // --backend cpu: compute threads (0 = the CPUs this process may use)
  CLI::Option* chunk_opt = nullptr;
  bool json = false, quiet = false;
};

// A failed or degenerate fit (R^2 undefined: measurements that do not vary and a fit that does not
// reproduce them; a non-finite parameter) writes no profile: `plan --gpu` would trust it.
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

void write_or_print(const Json& profile, const std::string& out) {
  // The written profile must load: check it with the loader before writing.
  models::gpu_from_json(profile, out.empty() ? "calibrated profile" : out);
  if (out.empty()) std::printf("%s\n", profile.dump(2).c_str());
  else write_text_file(out, profile.dump(2) + "\n");
}

int run_microbench_mode(const CalibrateArgs& a, executor::Communicator* comm) {
  runner::CalibrationRequest q;
  q.comm = comm;
  const bool lead = !comm || comm->rank() == 0;  // one rank speaks and writes for the job
  q.backend = a.backend;
  q.models = a.models;
  q.efficiency_model = a.efficiency_model;
  q.fit_model = a.fit_model;
  q.id = a.id;
  q.chunk = a.chunk;
  q.threads = a.threads;
  if (!a.quiet && lead) q.progress = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
  const runner::BackendCalibration cal = runner::calibrate_backend(q);
  if (!lead) return 0;
  const Json& profile = cal.profile;
  const executor::MicrobenchResult& r = cal.microbench;
  const auto& runs = cal.runs;
  const std::string& fit_model = cal.fit_model;
  if (a.json || a.out.empty()) {
    write_or_print(profile, "");
    return 0;
  }
  write_or_print(profile, a.out);
  const auto& e = profile["efficiency"];
  std::printf("oomb calibrate: %s in %.1f s\n", r.host.c_str(), r.seconds);
  if (r.threads > 0) std::printf("  compute threads    %d\n", r.threads);
  std::printf("  peak (best GEMM)   %s\n", format_flops_per_s(r.peak_flops_per_s).c_str());
  for (const auto& m : r.models)
    std::printf("  %-18s GEMM %s (+-%s), attention %s (+-%s)\n", m.model.c_str(),
                format_flops_per_s(m.gemm_flops_per_s).c_str(), format_percent(m.gemm_spread / 2).c_str(),
                format_flops_per_s(m.attention_flops_per_s).c_str(), format_percent(m.attention_spread / 2).c_str());
  std::printf("  efficiency         gemm %.3f, attention %.3f (backward %.3f), memory-bound %.3f\n",
              e["gemm"].get<double>(), e["attention"].get<double>(), e["attention_backward"].get<double>(),
              e["memory_bound"].get<double>());
  std::printf("  bandwidth          %s (stream), copies h2d %s, d2h %s, duplex factor %.2f\n",
              format_rate_bytes_per_s(profile["hbm_bytes_per_s"].get<double>()).c_str(),
              format_rate_bytes_per_s(r.h2d_bytes_per_s.median).c_str(),
              format_rate_bytes_per_s(r.d2h_bytes_per_s.median).c_str(), profile["duplex_factor"].get<double>());
  std::printf("  per-op overhead    %s\n", format_duration_s(profile["launch_overhead_s"].get<double>()).c_str());
  if (cal.ranks > 1) {
    std::printf("  all-reduce         %s, %d ranks: the measured curve (the simulator's price at %d ranks); "
                "elsewhere %s latency + bytes over %s\n",
                comm->name().c_str(), cal.ranks, cal.ranks, format_duration_s(cal.allreduce.latency_s).c_str(),
                format_rate_bytes_per_s(cal.allreduce.link_bytes_per_s).c_str());
    std::printf("    %10s  %-22s %-22s %s\n", "bytes", "fp32", "bf16 (as a run sums it)", "all-gather");
    auto rate = [](const executor::AllReduceFit::Point& p) {
      return format_duration_s(p.seconds) + " (" +
             format_rate_bytes_per_s(p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds : 0.0) + ")";
    };
    for (size_t i = 0; i < cal.allreduce.points.size(); ++i)
      std::printf("    %10s  %-22s %-22s %s\n", format_bytes(cal.allreduce.points[i].bytes).c_str(),
                  rate(cal.allreduce.points[i]).c_str(),
                  i < cal.allreduce_bf16.points.size() ? rate(cal.allreduce_bf16.points[i]).c_str() : "",
                  i < cal.all_gather.points.size() ? rate(cal.all_gather.points[i]).c_str() : "");
  }
  if (runs)
    std::printf("  fitted to          %zu calibration run(s) of %s (R^2 %.3f, %.1f s)%s: plans of other models "
                "are best served by calibrating with --fit-model\n",
                runs->runs.size(), fit_model.c_str(), runs->fit.r2, runs->seconds,
                runs->held.empty() ? "" : ", GEMM efficiency only");
  else if (a.backend == "cpu")
    std::printf("  (micro-benchmarks only: --fit-model none)\n");
  std::printf("profile (oomb.gpu/1, kind %s): %s\n", profile["kind"].get<std::string>().c_str(), a.out.c_str());
  return 0;
}

int run_fit_mode(const CalibrateArgs& a) {
  if (a.gpu.empty()) throw Error("--gpu", "", "is required with --traces", "the profile whose efficiencies to fit, e.g. h200");
  if (a.out.empty()) throw Error("--out", "", "is required with --traces", "e.g. --out h200-calibrated.json");
  const models::GpuSpec base = models::load_gpu(a.gpu);
  std::vector<simulator::CalibrationSample> samples;
  std::vector<std::string> devices;
  for (size_t i = 0; i < a.traces.size(); ++i) {
    const traces::Trace t = traces::read_trace(a.traces[i]);
    const bool cpu = t.metadata.source == "cpu";
    if ((base.kind == "cpu") != cpu)
      throw Error(a.traces[i], "metadata.source",
                  "was measured on " + t.metadata.source + " but --gpu " + base.id + " is a " + base.kind + " profile",
                  "fit a profile of the kind of device that ran");
    auto s = simulator::calibration_samples(t, a.traces[i], base, static_cast<int>(i));
    samples.insert(samples.end(), s.begin(), s.end());
    devices.push_back(t.metadata.device);
  }
  const simulator::FitResult fit = simulator::fit_efficiencies(samples, base, static_cast<int>(a.traces.size()), a.hold);
  models::GpuSpec g = base;
  g.efficiency = fit.efficiency;
  g.launch_overhead_s = fit.launch_overhead_s;
  g.id = a.id.empty() ? base.id + "-calibrated" : a.id;
  std::string names;
  for (const auto& t : a.traces) names += (names.empty() ? "" : ", ") + t;
  g.calibrated_from = "least-squares fit to " + std::to_string(a.traces.size()) + " measured trace(s) on " +
                      (devices.empty() ? std::string("?") : devices.front()) + ": " + names;
  g.sources["efficiency"] = "oomb calibrate --traces (least squares over " + std::to_string(samples.size()) +
                            " compute events, R^2 " + std::to_string(fit.r2) + ")";
  check_fit(fit, "--traces");
  Json j = g.to_json();
  j["calibration"] = fit.to_json();
  write_or_print(j, a.out);
  if (a.json) {
    std::printf("%s\n", fit.to_json().dump(2).c_str());
    return 0;
  }
  std::printf("oomb calibrate: %s fitted to %zu trace(s), %zu compute events\n", base.id.c_str(), a.traces.size(),
              samples.size());
  std::printf("  efficiency gemm %.4f, attention %.4f (backward %.4f), memory-bound %.4f; launch overhead %s; R^2 %.4f\n",
              fit.efficiency.gemm, fit.efficiency.attention, fit.efficiency.attention_backward, fit.efficiency.memory_bound,
              format_duration_s(fit.launch_overhead_s).c_str(), fit.r2);
  print_clamps(fit, a.traces, "trace(s)");
  std::printf("\n  %-16s %7s %12s %12s %8s %10s\n", "op", "events", "measured", "predicted", "error", "rms rel.");
  for (const auto& o : fit.residuals)
    std::printf("  %-16s %7d %12s %12s %8s %10s\n", o.op.c_str(), o.samples, format_duration_s(o.measured_s).c_str(),
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
  const models::GpuSpec from = models::load_gpu(a.gpu);
  if (from.calibrated_from.empty())
    throw Error("--gpu", a.gpu, "is not a calibrated profile (no calibrated_from)",
                "calibrate first: oomb calibrate --backend cpu or --traces ...");
  models::GpuSpec g = models::load_gpu(a.project_to);
  g.efficiency = from.efficiency;
  g.id = a.id.empty() ? g.id + "-projected" : a.id;
  g.calibrated_from = "projected from " + from.id + " (" + from.calibrated_from + ") to " + a.project_to;
  g.sources["efficiency"] = "kept from " + from.id + "; peaks, bandwidths and capacities are " + a.project_to + "'s";
  write_or_print(g.to_json(), a.out);
  std::printf("oomb calibrate: efficiencies of %s (gemm %.3f, attention %.3f, backward %.3f, memory-bound %.3f, copy "
              "%.3f) on %s: %s\n",
              from.id.c_str(), g.efficiency.gemm, g.efficiency.attention, g.efficiency.attention_backward,
              g.efficiency.memory_bound,
              g.efficiency.copy, a.project_to.c_str(), a.out.c_str());
  if (from.kind != g.kind)
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
  std::vector<simulator::MeasuredPoint> points;
  for (const auto& path : a.points) {
    auto p = planner::read_points(path, a.gpu, base);
    points.insert(points.end(), p.begin(), p.end());
  }
  const simulator::PointsFit pf = simulator::fit_points(points, base, a.hold);
  const simulator::FitResult& fit = pf.fit;
  check_fit(fit, "--points");
  models::GpuSpec g = pf.profile;
  g.id = a.id.empty() ? base.id + "-calibrated" : a.id;
  std::string names;
  for (const auto& p : a.points) names += (names.empty() ? "" : ", ") + p;
  g.calibrated_from = "least-squares fit to " + std::to_string(points.size()) + " measured step(s): " + names;
  g.sources["efficiency"] = "oomb calibrate --points (least squares over " + std::to_string(points.size()) +
                            " whole steps, R^2 " + std::to_string(fit.r2) + ")";
  Json cal = fit.to_json();
  cal.erase("residuals");  // one sample per point: the per-point rows below say it
  cal.erase("trace_error");
  cal.erase("leave_one_trace_out_error");
  Json rows = Json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    const auto& p = points[i];
    const auto& q = pf.predicted[i];
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
  Json j = g.to_json();
  j["calibration"] = cal;
  models::gpu_from_json(j, a.out.empty() ? "calibrated profile" : a.out);
  if (!a.out.empty()) write_text_file(a.out, j.dump(2) + "\n");
  if (a.json) {
    std::printf("%s\n", cal.dump(2).c_str());
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

int run_calibrate(const CalibrateArgs& a, executor::Communicator* comm) {
  const int modes =
      !a.backend.empty() + !a.traces.empty() + !a.project_to.empty() + !a.recall.empty() + !a.points.empty();
  if (modes != 1)
    throw Error("calibrate", "", "give exactly one of --backend, --traces, --points, --project-to, --recall",
                "e.g. oomb calibrate --backend cpu --out cpu.json");
  if (comm && comm->size() > 1 && a.backend.empty())
    throw Error("calibrate", "", "only --backend runs as an MPI job (its ranks time their all-reduce together)",
                "run the other modes without mpirun");
  // Every flag and the output path before any work (the benchmarks take seconds).
  // --chunk: rows of the benchmarked GEMMs; the LM-head slice needs at least 16 and 16K rows of
  // the widest shape already take ~1 GB.
  if (a.chunk < 16 || a.chunk > 16384)
    throw Error("--chunk", std::to_string(a.chunk), "must be in [16, 16384] rows", "e.g. 1024 (the default)");
  if (a.backend.empty() && a.chunk_opt && a.chunk_opt->count() > 0)
    throw Error("--chunk", std::to_string(a.chunk), "applies to --backend only");
  if (a.models.empty()) throw Error("--model", "", "no model shapes to benchmark", "e.g. --model tiny");
  bounded_list(a.models.size(), "--model", "models");
  bounded_list(a.traces.size(), "--traces", "files");
  bounded_list(a.points.size(), "--points", "files");
  bounded_list(a.recall.size(), "--recall", "files");
  check_writable(a.out, "--out");
  {
    std::vector<FlagPath> in = {input_file("--gpu", a.gpu), input_file("--project-to", a.project_to)};
    for (const auto& f : a.traces) in.push_back({"--traces", f});
    for (const auto& f : a.points) in.push_back({"--points", f});
    for (const auto& f : a.recall) in.push_back({"--recall", f});
    for (const auto& f : a.models) in.push_back(input_file("--model", f));
    check_distinct_paths(in, {{"--out", a.out}});
  }
  if (!a.recall.empty()) return run_recall_mode(a);
  if (!a.points.empty()) return run_points_mode(a);
  if (!a.backend.empty()) return run_microbench_mode(a, comm);
  if (!a.traces.empty()) return run_fit_mode(a);
  return run_project_mode(a);
}

const Registrar reg(
    "calibrate", "Device profiles from measurements: micro-benchmarks, a fit to traces, or a projection",
    [](CLI::App& sub) {
      auto a = std::make_shared<CalibrateArgs>();
      sub.add_option("--backend", a->backend, "Micro-benchmark this backend (cpu, or cuda in CUDA builds with a device) and write its profile "
                     "(kind cpu / gpu)");
      sub.add_option("--model", a->models, "With --backend: models whose GEMM and attention shapes to benchmark")
          ->capture_default_str();
      a->chunk_opt =
          sub.add_option("--chunk", a->chunk, "With --backend: rows of the benchmarked layer GEMMs (16..16384)")
              ->capture_default_str();
      sub.add_option("--threads", a->threads,
                     "With --backend cpu: compute threads to measure at, as `oomb run --threads` will run (default: "
                     "the CPUs this process may use); recorded in the profile (cpu_threads)");
      sub.add_option("--fit-model", a->fit_model,
                     "With --backend cpu: after the micro-benchmarks, run a few short steps of this model and fit the "
                     "efficiencies to them (as the fidelity suite does; predictions of this model's plans within "
                     "~10%). Default: the first --model; 'none' keeps the micro-benchmark values");
      sub.add_option("--efficiency-model", a->efficiency_model,
                     "With --backend: take gemm/attention efficiencies from this model's shapes (default: mean)");
      sub.add_option("--traces", a->traces, "Fit --gpu's efficiencies to these measured traces (layer or op detail)");
      sub.add_option("--points", a->points,
                     "Fit --gpu's efficiencies to measured whole steps: CSV (header row) or JSON (oomb.points/1) "
                     "files, one point per run: a plan (plan, relative to the file) or the knobs (model, context, "
                     "chunk, ... as `oomb plan` takes them) and step_s (or tokens_per_s), optionally "
                     "peak_device_bytes");
      sub.add_option("--hold", a->hold,
                     "With --traces or --points: keep these at --gpu's values (gemm, attention, attention_backward, memory_bound, launch_overhead)");
      sub.add_option("--project-to", a->project_to, "Put --gpu's calibrated efficiencies on this catalog device");
      sub.add_option("--recall", a->recall,
                     "Budget-to-recall curve (oomb.recall/1) from traces of `oomb run --attention sparse "
                     "--measure-recall` at different budgets (same model and page size)");
      sub.add_option("--gpu", a->gpu, "The profile to fit (--traces) or to project (--project-to)");
      sub.add_option("--id", a->id, "Id of the written profile");
      sub.add_option("--out", a->out, "Write the profile (oomb.gpu/1), or with --recall the curve, here");
      sub.add_flag("--json", a->json, "Print the profile (--backend), the fit (--traces) or the curve (--recall) as JSON");
      sub.add_flag("--quiet", a->quiet, "No progress on stderr");
      sub.footer(
          "Examples:\n"
          "  oomb calibrate --backend cpu --out cpu.json\n"
          "  mpirun -np 2 oomb calibrate --backend cpu --out cpu-dp2.json  (each rank on its share of the cores, and "
          "the all-reduce's rate)\n"
          "  oomb run --model tiny --context 8K --trace t1.json && oomb run --model tiny --context 4K --trace t2.json\n"
          "  oomb calibrate --traces t1.json t2.json --gpu cpu.json --out cpu-fit.json\n"
          "  oomb calibrate --project-to h200 --gpu cpu-fit.json --out h200-what-if.json\n"
          "  oomb run --model tiny --context 4K --chunk 512 --page 64 --attention sparse --budget 4 --measure-recall "
          "--trace r4.json  (and --budget 8, 16 ...)\n"
          "  oomb calibrate --recall r4.json r8.json r16.json --out recall.json\n"
          "  oomb calibrate --points runs.csv --gpu h100 --out h100-fit.json  (runs.csv: model,context,chunk,step_s,...)");
      return [a] {
        return run_as_job("oomb calibrate", {"--model", "--gpu", "--traces", "--points", "--recall"},
                          [a](executor::Communicator* comm, const std::string&) { return run_calibrate(*a, comm); });
      };
    });

}  // namespace
}  // namespace oomb::cli
