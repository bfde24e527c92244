// oomb calibrate: device profiles from measurements.
//   --backend cpu|cuda        micro-benchmarks of the local backend -> a profile (kind "cpu" / "gpu")
//   --traces, --points, --project-to, --recall   fits and projections (cli/calibrate_fit_cmd.cpp)
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/calibrate_args.h"
#include "cli/command.h"
#include "cli/mpi_job.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/format.h"
#include "executor/runtime/microbench.h"
#include "runner/calibrate.h"
#include "core/files.h"

namespace oomb::cli {

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
  for (const auto& m : r.models) {
    std::printf("  %-18s GEMM %s (+-%s), attention %s (+-%s)", m.model.c_str(),
                format_flops_per_s(m.gemm_flops_per_s).c_str(), format_percent(m.gemm_spread / 2).c_str(),
                format_flops_per_s(m.attention_flops_per_s).c_str(), format_percent(m.attention_spread / 2).c_str());
    if (m.expert_gemm_flops_per_s > 0) std::printf(", expert GEMMs %s", format_flops_per_s(m.expert_gemm_flops_per_s).c_str());
    std::printf("\n");
  }
  std::printf("  efficiency         gemm %.3f, attention %.3f (backward %.3f), memory-bound %.3f\n",
              e["gemm"].get<double>(), e["attention"].get<double>(), e["attention_backward"].get<double>(),
              e["memory_bound"].get<double>());
  if (e.contains("expert_gemm")) std::printf("  efficiency         expert GEMMs %.3f\n", e["expert_gemm"].get<double>());
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

namespace {

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
