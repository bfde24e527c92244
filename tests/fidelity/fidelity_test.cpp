// The closed loop on the CPU backend: calibrate a cpu profile once (micro-benchmarks, then a
// least-squares fit of the efficiencies to short calibration runs of each shape family, each pass
// timed by its fastest occurrence over the steps), then for each plan predict, run and compare.
// Memory terms and bytes moved: exact in dense mode; in sparse mode between the selection-union
// assumption's best (overlap 1) and worst (overlap 0) cases. Step time: the fastest of 5 measured
// steps after a warm-up step (the full-depth qwen2.5-0.5b plan: 1 step, no warm-up) within
// kStepTolerance of the prediction; a plan beyond it is run
// again (up to kRetries times) because interference on a shared machine only adds time; a
// calibration disturbed the same way (poor fit) is taken once more. A speed probe (kMaxProbeSlowdown)
// tells a machine slowed as a whole from a plan slower than predicted: a retry waits for the
// machine's calibrated speed, and a plan missed only while the machine ran slow is skipped, saying so.
// OOMB_FIDELITY_STRICT=0 reports the step-time errors without asserting them. The calibration
// runs are never among the validated plans.
//
// Table: OOMB_FIDELITY_TABLE=out.md build/oomb_fidelity_tests   (markdown for README.md)
// Traces: OOMB_FIDELITY_RECORD=dir build/oomb_fidelity_tests    (layer detail, for traces/recorded)
#include <gtest/gtest.h>

#include <algorithm>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/format.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/microbench.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "simulator/calibration.h"
#include "simulator/simulator.h"
#include "step/config.h"

namespace oomb {
namespace {

using step::Attention;
using simulator::Scenario;

constexpr double kStepTolerance = 0.25;  // |measured - predicted| / predicted of the step time
// Runs of a plan whose step time is beyond the tolerance (the first included: 1 + kRetries).
constexpr int kRetries = 2;
// The step-time bound is asserted unless OOMB_FIDELITY_STRICT=0 (then it is reported only).
bool strict_time() {
  const char* v = std::getenv("OOMB_FIDELITY_STRICT");
  return !v || std::string(v) != "0";
}
// A 2-core CI machine shared with other jobs: when the driving thread got less than this share of
// the wall time, another load took the CPU and the times are not this backend's (skip, say so).
constexpr double kMinCpuShare = 0.8;
// A VM's other core taken away (by the hypervisor, or a process pinned there) does not show in the
// driving thread's share: it waits for its OpenMP peer while spinning. Stop 55's CI measured the LoRA
// plan at 1.85-1.89 s in three runs in a row against 1.02 s for its full fine-tuning twin a minute
// earlier (predicted 1.03 s each; on a quiet VM the two measure within 10% of each other, and the
// LoRA step's gradients are bit for bit the same with denormals flushed, so no slow path of its
// own). A fixed probe of the machine's speed tells the two apart: a 1024^3 GEMM through the CPU
// backend on every thread, timed at calibration and after an attempt beyond the tolerance. A probe
// this much slower than at calibration means the machine, not the plan, is slower.
constexpr double kMaxProbeSlowdown = 0.15;
// Before a retry the probe is taken again every kProbeWaitStep_s for up to kProbeWait_s, so that the
// retry runs on a machine back at its calibrated speed when it comes back.
constexpr double kProbeWait_s = 30;
constexpr double kProbeWaitStep_s = 3;

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The fastest of 7 fp32 GEMMs (1024 x 1024 x 1024, 2.1 GFLOP) through the CPU backend, every thread.
double machine_probe_s() {
  executor::CpuBackend backend;
  constexpr int64_t n = 1024;
  std::vector<float> x(n * n, 0.5f), w(n * n, 0.25f), y(n * n);
  double best = 1e30;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    backend.linear_fwd(x.data(), n, n, w.data(), nullptr, n, y.data());
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Case {
  std::string name, family, model;
  int64_t layers = 0, context = 0, chunk = 0, page = 0, budget = 0, resident = 2;
  bool sparse = false;
  Dtype page_dtype = Dtype::fp32;  // KV and KV-gradient pages
  Dtype storage = Dtype::fp32;     // weights, parameter gradients, activations, loss tiles
  // Steps per run after one warm-up step: the step time judged is the fastest of them, as the
  // calibration takes each pass's fastest occurrence (simulator::calibration_samples): interference
  // from other processes on a shared VM only ever adds time. 5, not 3: the fastest of 3 still held
  // some disturbed passes (steps 7-10% over the sum of their passes' fastest occurrences).
  int steps = 5;
  bool warmup = true;         // one unmeasured step first
  bool checkpointing = true;  // off: no recompute in the backward (one forward pass less per step)
  int64_t lora_rank = 0;      // LoRA: adapters of this rank on every projection, the base frozen
};

Scenario scenario(const Case& k, const models::GpuSpec& gpu) {
  Scenario s;
  s.model = models::load_model(k.model);
  s.gpu = gpu;
  s.host = models::load_host("workstation-128g");
  auto& c = s.config;
  c.context_tokens = k.context;
  c.chunk_tokens = k.chunk;
  c.page_tokens = k.page;
  c.attention = k.sparse ? step::Attention::sparse : step::Attention::dense;
  c.page_budget = k.budget > 0 ? k.budget : c.page_budget;
  c.resident_layers = k.resident;
  c.layers_override = k.layers;
  c.checkpointing = k.checkpointing;
  c.kv_dtype = c.kv_grad_dtype = k.page_dtype;  // the executor stores the config's dtypes
  c.param_dtype = c.param_grad_dtype = c.activation_dtype = c.loss_dtype = k.storage;
  c.peak_measure = step::PeakMeasure::allocated;  // the runtime's own allocations
  c.lora_rank = k.lora_rank;
  if (k.lora_rank > 0) c.lora_targets = step::lora_target_names();
  step::validate(c, s.model);
  return s;
}


struct RunResult {
  executor::Measured measured;
  traces::Trace trace;
  double wall_s = 0;
  double step_min_s = 0;
  double cpu_share = 1;  // driving thread's CPU time / wall time of the step
};

RunResult run(const Case& k, const models::GpuSpec& gpu) {
  const Scenario s = scenario(k, gpu);
  const models::ModelSpec m = executor::effective_model(s.model, s.config);
  const auto tokens = executor::TokenSource::synthetic(m.vocab, 7).sequence(0, k.context);
  const executor::Weights w = executor::random_weights(m, 7);
  executor::CpuBackend backend;
  executor::EngineOptions o;
  if (k.lora_rank > 0) o.adapters = executor::init_adapters(m, s.config, 7, 0.02f);
  o.record_trace = true;
  o.detail = traces::Detail::layer;
  executor::Engine e(backend, s.model, s.config, w, o);
  if (k.warmup) e.step(tokens);  // first-touch page faults and cold caches are not the model's business
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_s();
  std::vector<double> steps;
  for (int i = 0; i < k.steps; ++i) {
    const auto s0 = std::chrono::steady_clock::now();
    e.step(tokens);
    steps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count());
  }
  RunResult r;
  r.step_min_s = *std::min_element(steps.begin(), steps.end());
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.cpu_share = (thread_cpu_s() - c0) / std::max(r.wall_s, 1e-9);
  r.measured = e.measured();
  r.trace = e.trace("oomb_fidelity_tests: " + k.name);
  return r;
}

// Calibration runs per shape family (not validated below).
const std::vector<Case>& calibration_cases() {
  static const std::vector<Case> v = {
      {"cal tiny 6K dense chunk 1K", "tiny", "tiny", 0, 6144, 1024, 64, 0, 2, false},
      {"cal tiny 4K sparse chunk 2K", "tiny", "tiny", 0, 4096, 2048, 64, 8, 2, true},
      // Sparse passes at the validated plans' scale (chunks of 1K, budget 4, several prefixes):
      // with only the run above, whose sparse attention is one chunk's, the fit split the tiny
      // passes between GEMM and memory-bound time differently run to run (gemm 0.51-0.65) and the
      // sparse plans came out 8-15% slower than predicted in three suite runs.
      {"cal tiny 6K sparse chunk 1K", "tiny", "tiny", 0, 6144, 1024, 64, 4, 2, true},
      // The plan's GEMM rows (chunk 64): at 32 rows the LM head ran ~20% slower per FLOP than at 64,
      // and the 128-token plan was predicted 12-49% too slow (run to run) from a chunk-32 fit.
      {"cal qwen 192 dense chunk 64", "qwen", "qwen2.5-0.5b", 2, 192, 64, 16, 0, 2, false},
      // GEMMs of a few hundred rows run far faster than the 32-row ones above: the full-depth plan
      // below is its own family, calibrated at its GEMMs' scale (issue #15).
      {"cal qwen 512 dense chunk 256", "qwen-deep", "qwen2.5-0.5b", 2, 512, 256, 64, 0, 2, false, Dtype::fp32, Dtype::fp32, 2},
  };
  return v;
}

const std::vector<Case>& validation_cases() {
  static const std::vector<Case> v = {
      {"tiny 2K dense", "tiny", "tiny", 0, 2048, 4096, 128, 0, 2, false},
      {"tiny 4K dense offload", "tiny", "tiny", 0, 4096, 1024, 64, 0, 1, false},
      {"tiny 8K dense", "tiny", "tiny", 0, 8192, 2048, 128, 0, 2, false},
      {"tiny 8K dense offload", "tiny", "tiny", 0, 8192, 4096, 128, 0, 1, false},
      {"tiny 8K sparse", "tiny", "tiny", 0, 8192, 1024, 64, 4, 2, true},
      {"tiny 16K sparse offload", "tiny", "tiny", 0, 16384, 2048, 64, 8, 1, true},
      {"tiny 8K dense offload bf16 pages", "tiny", "tiny", 0, 8192, 2048, 128, 0, 1, false, Dtype::bf16},
      {"tiny 8K dense offload bf16 storage", "tiny", "tiny", 0, 8192, 2048, 128, 0, 1, false, Dtype::bf16, Dtype::bf16},
      {"qwen2.5-0.5b x2 128 dense offload", "qwen", "qwen2.5-0.5b", 2, 128, 64, 16, 0, 1, false},
      // LoRA (issue #26): rank 16 on every projection of a frozen base (no weight-gradient GEMMs,
      // the adapters' rank-r GEMMs), calibrated on full fine-tuning runs only.
      {"tiny 8K dense offload LoRA r16 all-linear", "tiny", "tiny", 0, 8192, 4096, 128, 0, 1, false, Dtype::fp32, Dtype::fp32, 3,
       true, true, 16},
      // All 24 layers at 2K (issue #15: the larger plan a faster CPU backend affords). Its step is
      // ~50 s on 2 cores, so to keep CI's time: checkpointing off (no backward recompute) and one
      // measured step. After a warm-up step, as every plan: without one the measured step paid the
      // caching allocator's first touch of its blocks (a cold step's trace, OOMB_FIDELITY_RECORD:
      // 3.3 s before the first embedding and 2.3 s + 1.1 s before the two LM heads outside any
      // compute, 7.1 s of a 55.9 s step, against 5 ms in a warm step), which the prediction of a
      // steady-state step does not hold: +15.3% and +16.1% in two runs, the compute within 2%.
      {"qwen2.5-0.5b 24 layers 2K dense offload, no checkpointing", "qwen-deep", "qwen2.5-0.5b", 0, 2048, 1024, 128, 0, 2,
       false, Dtype::fp32, Dtype::fp32, 1, true, false},
  };
  return v;
}

struct Calibrated {
  models::GpuSpec micro;                      // micro-benchmarks only
  std::map<std::string, models::GpuSpec> by_family;  // + fit to the family's calibration runs
  double seconds = 0;
  double min_cpu_share = 1;  // over the calibration runs
  double min_r2 = 1;         // of the families' fits
  double probe_s = 0;        // machine_probe_s(): the fastest of before and after the calibration
};

// One calibration: micro-benchmarks, then a fit per family to its calibration runs.
Calibrated calibrate_once() {
  Calibrated out;
  const auto t0 = std::chrono::steady_clock::now();
  const double probe_before_s = machine_probe_s();
  executor::MicrobenchOptions o;
  o.models = {models::load_model("tiny"), models::load_model("qwen2.5-0.5b")};
  o.models[1].layers = 2;
  o.chunk_tokens = 512;
  o.repetitions = 3;
  executor::CpuBackend backend;
  const auto mb = executor::run_microbench(backend, o);
  out.micro = models::gpu_from_json(executor::device_profile(mb, "cpu-calibrated", int64_t{8} << 30), "microbench");
  for (const std::string family : {"tiny", "qwen", "qwen-deep"}) {
    std::vector<simulator::CalibrationSample> samples;
    int n = 0;
    for (const auto& k : calibration_cases()) {
      if (k.family != family) continue;
      const RunResult r = run(k, out.micro);
      out.min_cpu_share = std::min(out.min_cpu_share, r.cpu_share);
      auto s = simulator::calibration_samples(r.trace, k.name, out.micro, n++);
      samples.insert(samples.end(), s.begin(), s.end());
    }
    // One short qwen run cannot separate every class: its time is GEMM (the LM head) almost
    // entirely, so only the GEMM efficiency is fitted there.
    const std::vector<std::string> hold =
        family != "tiny" ? std::vector<std::string>{"attention", "attention_backward", "memory_bound", "launch_overhead"}
                         : std::vector<std::string>{};
    const auto fit = simulator::fit_efficiencies(samples, out.micro, n, hold);
    models::GpuSpec g = out.micro;
    g.id = "cpu-calibrated-" + family;
    g.efficiency = fit.efficiency;
    g.launch_overhead_s = fit.launch_overhead_s;
    out.by_family[family] = g;
    out.min_r2 = std::min(out.min_r2, fit.r2);
    std::printf("[calibration] %s: gemm %.3f attention %.3f (backward %.3f) memory-bound %.3f launch %.2e s (R^2 %.3f)\n",
                family.c_str(), g.efficiency.gemm, g.efficiency.attention, g.efficiency.attention_backward,
                g.efficiency.memory_bound, g.launch_overhead_s, fit.r2);
  }
  out.probe_s = std::min(probe_before_s, machine_probe_s());
  std::printf("[calibration] host %s; speed probe (1024^3 fp32 GEMM, every thread) %.1f ms\n",
              executor::host_description().c_str(), 1e3 * out.probe_s);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// A calibration taken while another load held the CPU is inconsistent (the micro-benchmarks and the
// runs saw different machines): its fit explains the passes poorly. In eight runs of this suite on
// the 2-core VM (several beside other engineers' builds) every fit had R^2 >= 0.999; with a
// parallel build on both cores one fell to 0.947, every tiny efficiency held at 1. Such a
// calibration is taken again (once).
constexpr double kMinCalibrationR2 = 0.98;

const Calibrated& calibrated() {
  static const Calibrated c = [] {
    Calibrated out = calibrate_once();
    if (out.min_r2 < kMinCalibrationR2 || out.min_cpu_share < kMinCpuShare) {
      std::printf("[calibration] disturbed (lowest R^2 %.3f, driving thread at %.0f%% of wall time): once more\n",
                  out.min_r2, 100 * out.min_cpu_share);
      out = calibrate_once();
    }
    return out;
  }();
  return c;
}

struct Row {
  std::string name;
  double pred_step = 0, meas_step = 0, micro_step = 0, pred_s1 = 0, meas_s1 = 0, pred_s2 = 0, meas_s2 = 0;
  int64_t pred_h2d = 0, meas_h2d = 0, pred_pages = 0, meas_pages = 0;
  double cpu_share = 1;
};
std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

double rel(double meas, double pred) { return pred != 0 ? (meas - pred) / pred : (meas == 0 ? 0 : 1); }

simulator::EventResult predict(const Scenario& s) { return simulator::simulate_events(s, traces::Detail::chunk); }

// Each compute pass of a trace (stage, chunk, layer, op) at its fastest occurrence: of a
// prediction, its events; of a measurement (several steps in one trace), as the calibration times
// the passes.
using PassKey = std::tuple<int, int64_t, int64_t, Op>;
std::map<PassKey, double> fastest_passes(const traces::Trace& t) {
  std::map<PassKey, double> passes;
  for (const auto& e : t.events) {
    if (e.kind != traces::EventKind::compute) continue;
    const double s = static_cast<double>(e.duration_ns()) * 1e-9;
    const auto [it, added] = passes.try_emplace({e.stage, e.chunk, e.layer, e.op}, s);
    if (!added) it->second = std::min(it->second, s);
  }
  return passes;
}

// Compute time per stage of one step (stages 1 and 2).
std::map<int, double> stage_time(const traces::Trace& t) {
  std::map<int, double> m;
  for (const auto& [key, s] : fastest_passes(t))
    if (std::get<0>(key) > 0) m[std::get<0>(key)] += s;
  return m;
}

// Compute time per op name of one step (every stage, the optimizer's included).
std::map<std::string, double> op_time(const traces::Trace& t) {
  std::map<std::string, double> m;
  for (const auto& [key, s] : fastest_passes(t)) m[to_string(std::get<3>(key))] += s;
  return m;
}

class Fidelity : public ::testing::TestWithParam<size_t> {};

TEST_P(Fidelity, PredictRunValidate) {
  const Case& k = validation_cases()[GetParam()];
  const Calibrated& cal = calibrated();
  const models::GpuSpec& gpu = cal.by_family.at(k.family);
  const Scenario s = scenario(k, gpu);
  const RunResult r = run(k, gpu);
  const auto pred = predict(s);
  Scenario micro_s = scenario(k, cal.micro);
  const double micro_step = predict(micro_s).summary.step_s;
  const Scenario& ps = s;
  const step::PageCounts pc = simulator::page_counts(ps);
  const auto& m = r.measured;

  // Device memory: the runtime's allocations against the predicted table (peak over phases) within
  // 1%, and the breakdown at the peak equal category by category.
  EXPECT_LE(std::abs(rel(static_cast<double>(m.peak_device_bytes), static_cast<double>(pred.summary.peak_device_bytes))),
            0.01)
      << k.name << ": predicted " << pred.summary.peak_device_bytes << ", allocated " << m.peak_device_bytes;
  EXPECT_EQ(m.device_breakdown_bytes, pred.summary.device_breakdown_bytes) << k.name;
  if (!k.sparse) {
    EXPECT_EQ(m.h2d_bytes, pred.summary.h2d_bytes) << k.name;
    EXPECT_EQ(m.d2h_bytes, pred.summary.d2h_bytes) << k.name;
    EXPECT_EQ(m.kv_pool_high_water_pages, pc.kv_pool_pages) << k.name;
    EXPECT_EQ(m.grad_pool_high_water_pages, pc.grad_pool_pages) << k.name;
    EXPECT_EQ(m.host_kv_pages, pc.host_kv_pages) << k.name;
    EXPECT_EQ(m.kv_page_bytes, pc.kv_page_bytes) << k.name;
  } else {
    // The stated assumption brackets the measurement: overlap 1 (all query pages agree) is the
    // fewest pages a chunk can copy, overlap 0 (disjoint selections) the most.
    // The executor keeps page summaries where they are computed (executor/README.md, known
    // limits): compare with the summaries' streaming left out of the prediction.
    Scenario best = ps, worst = ps;
    best.config.selection_overlap = 1.0;
    worst.config.selection_overlap = 0.0;
    best.config.selection_memory = worst.config.selection_memory = step::SelectionMemory::device;
    const auto pb = simulator::simulate_events(best, traces::Detail::step).summary;
    const auto pw = simulator::simulate_events(worst, traces::Detail::step).summary;
    EXPECT_LE(m.h2d_bytes, pw.h2d_bytes) << k.name;
    EXPECT_GE(m.h2d_bytes, pb.h2d_bytes) << k.name;
    EXPECT_LE(m.d2h_bytes, pw.d2h_bytes) << k.name;
    EXPECT_GE(m.d2h_bytes, pb.d2h_bytes) << k.name;
    EXPECT_LE(m.kv_pool_high_water_pages, simulator::page_counts(worst).kv_pool_pages) << k.name;
    EXPECT_EQ(m.kv_page_bytes, pc.kv_page_bytes) << k.name;
  }
  if (std::getenv("OOMB_FIDELITY_OPS")) {  // where a step's error sits: compute per op, predicted and measured
    const auto po = op_time(simulator::simulate_events(s, traces::Detail::layer).trace), mo = op_time(r.trace);
    std::set<std::string> names;
    for (const auto& [n, v] : po) names.insert(n);
    for (const auto& [n, v] : mo) names.insert(n);
    for (const auto& n : names) {
      const double p = po.count(n) ? po.at(n) : 0, q = mo.count(n) ? mo.at(n) : 0;
      std::printf("[fidelity ops] %s: %-24s predicted %9.3f ms measured %9.3f ms (%+.1f%%)\n", k.name.c_str(), n.c_str(),
                  1e3 * p, 1e3 * q, 100 * rel(q, p));
    }
  }
  const auto ps1 = stage_time(pred.trace);
  const auto ms1 = stage_time(r.trace);
  rows().push_back({k.name, pred.summary.step_s, r.step_min_s, micro_step, ps1.count(1) ? ps1.at(1) : 0,
                    ms1.count(1) ? ms1.at(1) : 0, ps1.count(2) ? ps1.at(2) : 0, ms1.count(2) ? ms1.at(2) : 0,
                    pred.summary.h2d_bytes, m.h2d_bytes, pc.kv_pool_pages + pc.grad_pool_pages,
                    m.kv_pool_high_water_pages + m.grad_pool_high_water_pages,
                    std::min(cal.min_cpu_share, r.cpu_share)});
  if (const char* dir = std::getenv("OOMB_FIDELITY_RECORD")) {
    std::string file = k.name;
    for (auto& ch : file)
      if (ch == ' ' || ch == '.') ch = '-';
    traces::write_trace(r.trace, std::string(dir) + "/cpu-" + file + ".json");
  }
  // Step time. Interference from other processes only ever adds time, so a step beyond the
  // tolerance is measured again (up to kRetries more runs) and the fastest step of all attempts is
  // judged; a model error survives every attempt, a preempted run does not.
  double meas = r.step_min_s;
  double share = r.cpu_share;  // the best attempt's: one undisturbed run is enough to judge
  // The machine's slowdown against calibration (speed probe): the least seen after an attempt
  // beyond the tolerance or before the retry that followed it. One attempt missed at the calibrated
  // speed is a miss of the model's.
  double slowdown = 0;
  const auto probe_slowdown = [&] { return machine_probe_s() / cal.probe_s - 1; };
  int attempts = 1;
  if (std::fabs(rel(meas, pred.summary.step_s)) > kStepTolerance) slowdown = probe_slowdown();
  for (; attempts <= kRetries && std::fabs(rel(meas, pred.summary.step_s)) > kStepTolerance; ++attempts) {
    for (double waited_s = 0; slowdown > kMaxProbeSlowdown && waited_s < kProbeWait_s; waited_s += kProbeWaitStep_s) {
      std::printf("[fidelity] %s: the machine runs %.0f%% slower than at calibration (speed probe); waiting\n",
                  k.name.c_str(), 100 * slowdown);
      std::this_thread::sleep_for(std::chrono::duration<double>(kProbeWaitStep_s));
      slowdown = probe_slowdown();
    }
    const RunResult again = run(k, gpu);
    std::printf("[fidelity] %s: attempt %d measured %.3f s (best so far %.3f s)\n", k.name.c_str(), attempts + 1,
                again.step_min_s, meas);
    meas = std::min(meas, again.step_min_s);
    share = std::max(share, again.cpu_share);
    if (std::fabs(rel(meas, pred.summary.step_s)) > kStepTolerance) slowdown = std::min(slowdown, probe_slowdown());
  }
  const double err = rel(meas, pred.summary.step_s);
  rows().back().meas_step = meas;
  RecordProperty("step_time_error", std::to_string(err));
  RecordProperty("attempts", attempts);
  std::printf("[fidelity] %s: step predicted %.3f s, measured %.3f s (fastest of %d x %d steps), error %+.1f%%\n",
              k.name.c_str(), pred.summary.step_s, meas, attempts, k.steps, 100 * err);
  if (!strict_time()) return;
  // The calibration itself was taken twice under another load: its efficiencies are that load's,
  // so no plan's predicted time is this backend's (memory and bytes above are still judged).
  if (cal.min_r2 < kMinCalibrationR2 || cal.min_cpu_share < kMinCpuShare)
    GTEST_SKIP() << k.name << " (step time not judged): the calibration was disturbed twice (lowest R^2 "
                 << cal.min_r2 << ", driving thread at " << format_percent(cal.min_cpu_share)
                 << " of the wall time); predicted times not comparable";
  if (share < kMinCpuShare)
    GTEST_SKIP() << k.name << " (step time not judged)" << ": the CPU was shared with another load in every attempt "
                 << "(driving thread got at best " << format_percent(share) << " of the wall time); times not comparable";
  if (std::fabs(err) > kStepTolerance && slowdown > kMaxProbeSlowdown)
    GTEST_SKIP() << k.name << " (step time not judged): the machine ran " << format_percent(slowdown)
                 << " slower than at calibration (a 1024^3 GEMM on every thread) after every attempt "
                 << "beyond the tolerance (each retry waited up to " << kProbeWait_s << " s for it); measured " << meas
                 << " s, predicted " << pred.summary.step_s << " s";
  EXPECT_LE(std::fabs(err), kStepTolerance) << k.name << ": predicted " << pred.summary.step_s << " s, measured "
                                            << meas << " s (fastest of " << attempts << " runs)";
}

INSTANTIATE_TEST_SUITE_P(Cpu, Fidelity, ::testing::Range<size_t>(0, validation_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           std::string n = validation_cases()[i.param].name;
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// Prints (and with OOMB_FIDELITY_TABLE writes) the table of measured errors after the cases ran.
class TableWriter : public ::testing::Environment {
 public:
  void TearDown() override {
    if (rows().empty()) return;
    std::string t =
        "| plan | step predicted | step measured | error | micro-benchmarks only | stage 1 error | stage 2 error | "
        "h2d bytes error | pool pages error | cpu share |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& r : rows()) {
      char line[512];
      std::snprintf(line, sizeof line, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name.c_str(),
                    format_duration_s(r.pred_step).c_str(), format_duration_s(r.meas_step).c_str(),
                    format_percent(rel(r.meas_step, r.pred_step)).c_str(),
                    format_percent(rel(r.meas_step, r.micro_step)).c_str(),
                    format_percent(rel(r.meas_s1, r.pred_s1)).c_str(), format_percent(rel(r.meas_s2, r.pred_s2)).c_str(),
                    format_percent(rel(static_cast<double>(r.meas_h2d), static_cast<double>(r.pred_h2d))).c_str(),
                    format_percent(rel(static_cast<double>(r.meas_pages), static_cast<double>(r.pred_pages))).c_str(),
                    format_percent(r.cpu_share).c_str());
      t += line;
    }
    std::printf("\n%s\ncalibration (micro-benchmarks + fit): %.1f s\n", t.c_str(), calibrated().seconds);
    if (const char* path = std::getenv("OOMB_FIDELITY_TABLE")) std::ofstream(path) << t;
  }
};
const auto* const kTable = ::testing::AddGlobalTestEnvironment(new TableWriter);

}  // namespace
}  // namespace oomb
