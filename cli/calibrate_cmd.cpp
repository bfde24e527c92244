// oomb calibrate: device profiles from measurements.
//   --backend cpu|cuda        micro-benchmarks of the local backend -> a profile (kind "cpu" / "gpu")
//   --traces T... --gpu G     least-squares fit of G's efficiencies to measured traces
//   --project-to G2 --gpu P   a calibrated profile's efficiencies on another catalog device
//   --recall T... --out C     a budget-to-recall curve (oomb.recall/1) from sparse runs' recall
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "core/format.h"
#include "executor/cpu/cpu_backend.h"
#ifdef OOMB_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_info.h"
#endif
#include "executor/runtime/microbench.h"
#include "planner/recall_curve.h"
#include "simulator/calibration.h"
#include "traces/trace.h"

namespace oomb::cli {
namespace {

struct CalibrateArgs {
  std::string backend, gpu, out, id, project_to, efficiency_model;
  std::vector<std::string> traces, recall, hold, models = {"tiny", "qwen2.5-0.5b"};
  int64_t chunk = 1024;
  int threads = 0;  // --backend cpu: compute threads (0 = the CPUs this process may use)
  CLI::Option* chunk_opt = nullptr;
  bool json = false, quiet = false;
};

void write_or_print(const Json& profile, const std::string& out) {
  // The written profile must load: check it with the loader before writing.
  models::gpu_from_json(profile, out.empty() ? "calibrated profile" : out);
  if (out.empty()) std::printf("%s\n", profile.dump(2).c_str());
  else write_text_file(out, profile.dump(2) + "\n");
}

int run_microbench_mode(const CalibrateArgs& a) {
  if (a.backend != "cpu" && a.backend != "cuda")
    throw Error("--backend", a.backend, "unknown backend", "cpu or cuda");
#ifndef OOMB_HAVE_CUDA_BACKEND
  if (a.backend == "cuda")
    throw Error("--backend", "cuda", "this build has no CUDA backend (configure with nvcc present, -DOOMB_CUDA=ON)",
                "--backend cpu");
#endif
  executor::MicrobenchOptions o;
  for (const auto& m : a.models) o.models.push_back(models::load_model(m));
  if (!a.efficiency_model.empty() &&
      std::none_of(o.models.begin(), o.models.end(), [&](const auto& m) { return m.id == a.efficiency_model; }))
    throw Error("--efficiency-model", a.efficiency_model, "is not one of the benchmarked models",
                "name one of the --model values");
  o.chunk_tokens = a.chunk;
  if (!a.quiet) o.progress = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
  std::unique_ptr<executor::Backend> backend;
  std::string device;  // replaces the host description in the profile for a GPU
  int64_t capacity_bytes = 0;
  if (a.threads < 0) throw Error("--threads", std::to_string(a.threads), "must be positive", "e.g. --threads 2");
  if (a.threads > 0 && a.backend != "cpu")
    throw Error("--threads", std::to_string(a.threads), "sets the cpu backend's compute threads", "drop it, or --backend cpu");
  if (a.backend == "cpu") {
    // Measured at the thread count `oomb run --threads` will use (the profile records it).
    executor::CpuBackendOptions copt;
    copt.threads = a.threads;
    backend = std::make_unique<executor::CpuBackend>(copt);
    const int64_t ram = executor::host_ram_bytes();
    capacity_bytes = ram > 0 ? ram / 2 : int64_t{8} << 30;
  } else {
#ifdef OOMB_HAVE_CUDA_BACKEND
    std::string why;
    if (!executor::cuda_device_available(&why))
      throw Error("--backend", "cuda", "no usable CUDA device: " + why, "use --backend cpu");
    const executor::CudaDeviceInfo info = executor::cuda_device_info(0);
    // What `oomb run --backend cuda` runs by default: the tensor-core attention where it applies.
    executor::CudaBackendOptions copt;
    copt.attention_kernel = executor::CudaAttentionKernel::bf16_tensor_core;
    copt.gemm_precision = executor::CudaGemmPrecision::bf16;  // oomb run's default GEMMs
    auto cuda = std::make_unique<executor::CudaBackend>(copt);
    executor::CudaBackend* cb = cuda.get();
    o.sync = [cb] { cb->synchronize(); };
    device = cuda->device_name();
    capacity_bytes = info.memory_bytes;
    backend = std::move(cuda);
#endif
  }
  // Said once the backend exists (a refused device prints only the error).
  if (!a.quiet)
    std::fprintf(stderr, "oomb calibrate: micro-benchmarks of the %s backend (about 10-20 s)\n", a.backend.c_str());
  executor::MicrobenchResult r = executor::run_microbench(*backend, o);
  if (!device.empty()) r.host = device;
  Json profile = executor::device_profile(r, a.id.empty() ? a.backend + "-calibrated" : a.id, capacity_bytes,
                                          a.efficiency_model);
  if (a.backend == "cuda") {
#ifdef OOMB_HAVE_CUDA_BACKEND
    // The cpu-oriented defaults of device_profile, replaced by the device's own facts.
    const executor::CudaDeviceInfo info = executor::cuda_device_info(0);
    profile["sm_count"] = info.sm_count;
    profile["reserved_bytes"] = int64_t{1} << 30;
    profile["default_host"] = "";
    profile["sources"]["hbm_capacity_bytes"] = "the device's total global memory (cudaGetDeviceProperties)";
    profile["sources"]["sm_count"] = "cudaGetDeviceProperties (multiProcessorCount)";
    profile["sources"]["reserved_bytes"] =
        "nominal 1 GiB: CUDA context, cuBLASLt and op workspaces (not measured by the micro-benchmarks)";
    profile["sources"]["bf16_flops_per_s"] =
        "the backend's compute peak: the best median rate measured over the benchmarked GEMM and attention shapes "
        "(bf16-input GEMMs through cuBLASLt, bf16 tensor-core attention where it applies: as oomb run's defaults)";
    profile["sources"]["launch_overhead_s"] = "a 1-element add: launch throughput, the stream synchronised per repetition";
#endif
  }
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
  std::printf("  per-op overhead    %s\n", format_duration_s(r.op_overhead_s.median).c_str());
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
  for (const auto& c : fit.clamped) std::printf("  note: %s\n", c.c_str());
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

int run_calibrate(const CalibrateArgs& a) {
  const int modes = !a.backend.empty() + !a.traces.empty() + !a.project_to.empty() + !a.recall.empty();
  if (modes != 1)
    throw Error("calibrate", "", "give exactly one of --backend, --traces, --project-to, --recall",
                "e.g. oomb calibrate --backend cpu --out cpu.json");
  // Every flag and the output path before any work (the benchmarks take seconds).
  // --chunk: rows of the benchmarked GEMMs; the LM-head slice needs at least 16 and 16K rows of
  // the widest shape already take ~1 GB.
  if (a.chunk < 16 || a.chunk > 16384)
    throw Error("--chunk", std::to_string(a.chunk), "must be in [16, 16384] rows", "e.g. 1024 (the default)");
  if (a.backend.empty() && a.chunk_opt && a.chunk_opt->count() > 0)
    throw Error("--chunk", std::to_string(a.chunk), "applies to --backend only");
  if (a.models.empty()) throw Error("--model", "", "no model shapes to benchmark", "e.g. --model tiny");
  check_writable(a.out, "--out");
  if (!a.recall.empty()) return run_recall_mode(a);
  if (!a.backend.empty()) return run_microbench_mode(a);
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
      sub.add_option("--efficiency-model", a->efficiency_model,
                     "With --backend: take gemm/attention efficiencies from this model's shapes (default: mean)");
      sub.add_option("--traces", a->traces, "Fit --gpu's efficiencies to these measured traces (layer or op detail)");
      sub.add_option("--hold", a->hold,
                     "With --traces: keep these at --gpu's values (gemm, attention, attention_backward, memory_bound, launch_overhead)");
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
          "  oomb run --model tiny --context 8K --trace t1.json && oomb run --model tiny --context 4K --trace t2.json\n"
          "  oomb calibrate --traces t1.json t2.json --gpu cpu.json --out cpu-fit.json\n"
          "  oomb calibrate --project-to h200 --gpu cpu-fit.json --out h200-what-if.json\n"
          "  oomb run --model tiny --context 4K --chunk 512 --page 64 --attention sparse --budget 4 --measure-recall "
          "--trace r4.json  (and --budget 8, 16 ...)\n"
          "  oomb calibrate --recall r4.json r8.json r16.json --out recall.json");
      return [a] { return run_calibrate(*a); };
    });

}  // namespace
}  // namespace oomb::cli
