#include "runner/calibrate.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/threads.h"
#include "models/specs.h"
#ifdef OOMB_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_info.h"
#endif

namespace oomb::runner {

BackendCalibration calibrate_backend(const CalibrationRequest& a) {
  BackendCalibration out;
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
  o.progress = a.progress;
  std::unique_ptr<executor::Backend> backend;
  std::string device;  // replaces the host description in the profile for a GPU
  int64_t capacity_bytes = 0;
  if (a.threads < 0 || a.threads > executor::kMaxCpuThreads)
    throw Error("--threads", std::to_string(a.threads),
                "must be in [0, " + std::to_string(executor::kMaxCpuThreads) + "] (0 = every CPU this process may use)",
                "e.g. --threads 2");
  if (a.threads > 0 && a.backend != "cpu")
    throw Error("--threads", std::to_string(a.threads), "sets the cpu backend's compute threads", "drop it, or --backend cpu");
  if (a.backend == "cpu") {
    // Measured at the thread count `oomb run --threads` will use (the profile records it).
    executor::CpuBackendOptions copt;
    copt.threads = rank_cpu_threads(a.threads, a.comm);
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
  const std::string fit_model = a.fit_model.empty() ? a.models.front() : a.fit_model;
  if (a.backend != "cpu" && !a.fit_model.empty())
    throw Error("--fit-model", a.fit_model, "calibration runs are for --backend cpu", "drop it");
  if (a.backend == "cpu" && fit_model != "none" && !a.fit_model.empty()) {  // a bad name before any work
    try {
      (void)models::load_model(fit_model);
    } catch (const Error& e) {
      if (e.where() != "--model") throw;
      throw Error("--fit-model", e.key(), e.problem(), e.hint() + "; or none (micro-benchmarks only)");
    }
  }
  if (a.progress)
    a.progress("oomb calibrate: micro-benchmarks of the " + a.backend + " backend" +
               (a.backend == "cpu" && fit_model != "none" ? ", then calibration runs of " + fit_model : std::string()) +
               " (about 10-30 s)");
  executor::MicrobenchResult& r = out.microbench;
  r = executor::run_microbench(*backend, o);
  if (!device.empty()) r.host = device;
  Json& profile = out.profile;
  profile = executor::device_profile(r, a.id.empty() ? a.backend + "-calibrated" : a.id, capacity_bytes,
                                          a.efficiency_model);
  // Calibration runs (cpu): short executor steps of the model to be planned, and the efficiencies
  // fitted to them, as the fidelity suite calibrates (runner/calibration_runs.h).
  std::optional<CalibrationRunsFit>& runs = out.runs;
  out.fit_model = fit_model;
  if (a.backend == "cpu" && fit_model != "none") {
    const models::ModelSpec fm = models::load_model(fit_model);
    const models::GpuSpec micro = models::gpu_from_json(profile, "the micro-benchmark profile");
    runs = fit_to_calibration_runs(*backend, fm, micro, 3, [&](const std::string& name) {
      if (a.progress) a.progress(name);
    });
    const auto& e = runs->profile.efficiency;
    profile["efficiency"]["gemm"] = e.gemm;
    profile["efficiency"]["attention"] = e.attention;
    profile["efficiency"]["attention_backward"] = e.attention_backward;
    profile["efficiency"]["memory_bound"] = e.memory_bound;
    profile["launch_overhead_s"] = runs->profile.launch_overhead_s;
    Json fit = runs->fit.to_json();
    fit["runs"] = runs->runs;
    fit["model"] = fm.id;
    fit["held"] = runs->held;
    fit["seconds"] = runs->seconds;
    profile["calibration"]["runs_fit"] = fit;
    const std::string how = "least-squares fit to " + std::to_string(runs->runs.size()) + " calibration run(s) of " +
                            fm.id + " on this backend (oomb calibrate --backend cpu; micro-benchmark values as the prior)";
    profile["sources"]["efficiency"] = how;
    profile["sources"]["launch_overhead_s"] = how;
    profile["calibrated_from"] = profile["calibrated_from"].get<std::string>() + " + " + how;
    models::gpu_from_json(profile, "the fitted profile");  // still a valid profile
  }
  if (a.comm && a.comm->size() > 1) {
    // The collectives of a multi-rank step, timed on the job's ranks: fp32 all-reduces from 4 KiB
    // (a tensor-parallel activation all-reduce of a small model is a few hundred KiB) to 256 MiB (a
    // data-parallel gradient all-reduce), kept as the profile's curve, with the latency + bytes /
    // link line through its ends for other rank counts (docs/model.md "Communication"). bf16 data is
    // staged through fp32 by the MPI communicator; the simulator prices that staging itself (twice
    // the bytes, plus the conversions).
    if (a.backend != "cpu")
      throw Error("--backend", a.backend, "measures collectives under mpirun on the cpu backend only",
                  "mpirun -np N oomb calibrate --backend cpu");
    out.ranks = a.comm->size();
    std::vector<int64_t> sizes;
    for (int64_t b = int64_t{4} << 10; b <= (int64_t{256} << 20); b *= 4) sizes.push_back(b);  // 4 KiB .. 256 MiB
    if (a.progress)
      a.progress("all-reduces of 4 KiB .. 256 MiB (fp32) over " + std::to_string(out.ranks) + " ranks");
    const executor::AllReduceFit fit = executor::measure_all_reduce(*a.comm, *backend, sizes);
    if (a.progress)
      a.progress("all-reduces of 4 KiB .. 256 MiB (bf16, as a run sums them) over " + std::to_string(out.ranks) +
                 " ranks");
    const executor::AllReduceFit bf16 = executor::measure_all_reduce(*a.comm, *backend, sizes, executor::DType::bf16);
    if (a.progress)
      a.progress("all-gathers of 4 KiB .. 256 MiB over " + std::to_string(out.ranks) + " ranks (ZeRO-1's weights)");
    const executor::AllReduceFit gather = executor::measure_all_gather(*a.comm, *backend, sizes);
    const std::string how = "measured: " + a.comm->name() + " all-reduces of fp32 and bf16 and all-gathers over " +
                            std::to_string(out.ranks) + " ranks of this node, 4 KiB .. 256 MiB (the fastest of 5 or more " +
                            "per size, the ranks started together; allreduce_curve), time = latency + 2(N-1)/N x bytes / link " +
                            "through the smallest and the largest (oomb calibrate under mpirun)";
    profile["interconnect_bytes_per_s"] = fit.link_bytes_per_s;
    profile["collective_latency_s"] = fit.latency_s;
    profile["collective_step_latency_s"] = 0.0;
    profile["sources"]["interconnect_bytes_per_s"] = how;
    profile["sources"]["collective_latency_s"] = how;
    profile["sources"]["collective_step_latency_s"] =
        "0: measured at one rank count (" + std::to_string(out.ranks) + "), the whole latency is in collective_latency_s";
    Json points = Json::array();
    for (size_t i = 0; i < fit.points.size(); ++i)
      points.push_back({{"bytes", fit.points[i].bytes},
                        {"seconds", fit.points[i].seconds},
                        {"bf16_seconds", bf16.points[i].seconds},
                        {"all_gather_seconds", gather.points[i].seconds}});
    profile["allreduce_curve"] = {{"ranks", out.ranks}, {"points", points}};
    profile["sources"]["allreduce_curve"] = how;
    out.allreduce = fit;
    out.allreduce_bf16 = bf16;
    out.all_gather = gather;
    models::gpu_from_json(profile, "the calibrated profile");
  }
  if (a.backend == "cuda") {
#ifdef OOMB_HAVE_CUDA_BACKEND
    // The cpu-oriented defaults of device_profile, replaced by the device's own facts.
    const executor::CudaDeviceInfo info = executor::cuda_device_info(0);
    profile["sm_count"] = info.sm_count;
    profile["cuda_device_names"] = Json::array({info.name});
    profile["sources"]["cuda_device_names"] = "the device that was measured (cudaGetDeviceProperties)";
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
  return out;
}

int rank_cpu_threads(int requested, const executor::Communicator* comm) {
  if (requested != 0 || !comm || comm->size() <= 1) return requested;
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); local && std::atoi(local) > 1)
    return std::max(1, executor::cpu::available_cpus() / std::atoi(local));
  return requested;
}

}  // namespace oomb::runner
