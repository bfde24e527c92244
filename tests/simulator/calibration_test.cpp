// The least-squares fit of the efficiency parameters (simulator/calibration.h): recovers known
// parameters from times synthesised with them, holds out-of-range ones at their bounds, refuses
// undetermined ones naming the parameter, and pass_work splits exactly what compute_s prices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "simulator/calibration.h"
#include "simulator/detail.h"
#include "step/run_record.h"

namespace oomb::simulator {
namespace {

constexpr double kRecoverTol = 1e-9;  // noise-free synthetic times: the fit is exact

Scenario tiny_scenario(int64_t context, int64_t chunk, bool sparse) {
  Scenario s;
  s.model = models::load_model("tiny");
  s.gpu = models::load_gpu("h200");
  s.host = models::load_host(s.gpu.default_host);
  s.config.context_tokens = context;
  s.config.chunk_tokens = chunk;
  s.config.page_tokens = 64;
  s.config.resident_layers = 1;
  if (sparse) {
    s.config.attention = step::Attention::sparse;
    s.config.page_budget = 3;
  }
  return s;
}

// Samples of every pass of a scenario with times made from (inverse efficiencies, launch).
// x: inverse efficiencies of gemm, attention forward, attention backward, memory-bound; launch (s).
std::vector<CalibrationSample> synth(const Scenario& s, int trace, const double x[5]) {
  std::vector<CalibrationSample> out;
  const auto pc = page_counts(s);
  for (int64_t c = 0; c < pc.chunks; ++c)
    for (Op op : {Op::embedding, Op::layer_fwd, Op::layer_recompute, Op::layer_bwd, Op::lm_head}) {
      const auto w = pass_work(s, c, op);
      EXPECT_TRUE(w.has_value()) << op;
      const double t = w->gemm_s * x[0] + w->attn_s * x[1] + w->attn_bwd_s * x[2] + w->mb_s * x[3] + w->kernels * x[4];
      out.push_back({trace, 1, c, 0, op, *w, t});
    }
  return out;
}

TEST(Calibration, RecoversKnownParameters) {
  const double x[5] = {1.0 / 0.6, 1.0 / 0.35, 1.0 / 0.7, 1.0 / 0.5, 7e-6};
  auto a = synth(tiny_scenario(4096, 1024, false), 0, x);
  auto b = synth(tiny_scenario(3000, 512, true), 1, x);  // ragged last chunk, other shapes
  auto c = synth(tiny_scenario(777, 256, false), 2, x);
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  const FitResult f = fit_efficiencies(a, models::load_gpu("h200"), 3);
  EXPECT_NEAR(f.efficiency.gemm, 0.6, kRecoverTol);
  EXPECT_NEAR(f.efficiency.attention, 0.35, kRecoverTol);
  EXPECT_NEAR(f.efficiency.attention_backward, 0.7, kRecoverTol);
  EXPECT_NEAR(f.efficiency.memory_bound, 0.5, kRecoverTol);
  EXPECT_NEAR(f.launch_overhead_s, 7e-6, 1e-12);
  EXPECT_NEAR(f.r2, 1.0, 1e-9);
  EXPECT_TRUE(f.clamped.empty());
  ASSERT_EQ(f.leave_one_out.size(), 3u);
  for (const auto& e : f.leave_one_out) {
    ASSERT_TRUE(e.has_value());
    EXPECT_NEAR(*e, 0.0, 1e-6);
  }
}

TEST(Calibration, HoldsParametersAtTheirBounds) {
  // Faster than the peak (inverse efficiency 0.5): held at efficiency 1 and reported.
  const double x[5] = {0.5, 1.0 / 0.4, 1.0 / 0.4, 1.0 / 0.5, 2e-6};
  auto a = synth(tiny_scenario(4096, 1024, false), 0, x);
  auto b = synth(tiny_scenario(3000, 512, true), 1, x);
  a.insert(a.end(), b.begin(), b.end());
  const FitResult f = fit_efficiencies(a, models::load_gpu("h200"), 2);
  EXPECT_DOUBLE_EQ(f.efficiency.gemm, 1.0);
  ASSERT_EQ(f.clamped.size(), 1u);
  EXPECT_NE(f.clamped[0].find("gemm efficiency"), std::string::npos);
}

TEST(Calibration, RefusesWhatTheTracesDoNotDetermine) {
  const double x[5] = {2, 3, 1.5, 2, 1e-6};
  auto a = synth(tiny_scenario(2048, 512, false), 0, x);
  for (auto& s : a) s.work.attn_s = s.work.attn_bwd_s = 0;  // no attention work anywhere
  try {
    fit_efficiencies(a, models::load_gpu("h200"), 1);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention efficiency is not determined by these traces: they contain no "
                                         "attention forward work"),
              std::string::npos)
        << e.what();
  }
  // Held at the profile's values instead, the rest is fitted.
  const FitResult f = fit_efficiencies(a, models::load_gpu("h200"), 1, {"attention", "attention_backward"});
  EXPECT_DOUBLE_EQ(f.efficiency.attention, models::load_gpu("h200").efficiency.attention);
  EXPECT_DOUBLE_EQ(f.efficiency.attention_backward, models::load_gpu("h200").efficiency.attention_backward);
  // Forward-only traces (no backward pass recorded) name the backward parameter.
  auto fwd_only = synth(tiny_scenario(2048, 512, false), 0, x);
  fwd_only.erase(std::remove_if(fwd_only.begin(), fwd_only.end(), [](const auto& s) { return s.op == Op::layer_bwd; }),
                 fwd_only.end());
  try {
    fit_efficiencies(fwd_only, models::load_gpu("h200"), 1);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention backward efficiency is not determined"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(fit_efficiencies(a, models::load_gpu("h200"), 1, {"nonsense"}), Error);
}

TEST(Calibration, PassWorkPricesLikeTheCostModel) {
  // compute_s of every pass = its work terms at the profile's efficiencies (attention flop-bound here).
  Scenario s = tiny_scenario(3000, 512, true);
  s.gpu.efficiency.attention_backward = 0.8;  // priced apart from the forward's 0.5
  const step::Geometry g = detail::geometry(s);
  const auto& e = s.gpu.efficiency;
  for (int64_t c = 0; c < g.n; ++c) {
    const detail::ChunkCosts cc = detail::chunk_costs(s, g, c);
    for (const detail::PassCost* p : {&cc.fill, &cc.recompute, &cc.backward, &cc.head, &cc.fill_head, &cc.embedding_bwd}) {
      const auto& w = p->work;
      const double t = w.gemm_s / e.gemm +
                       std::max(w.attn_s / e.attention + w.attn_bwd_s / e.attention_backward,
                                w.attn_bytes_s / e.memory_bound) +
                       w.mb_s / e.memory_bound + w.allreduce_s + w.kernels * s.gpu.launch_overhead_s;
      EXPECT_NEAR(t, p->compute_s, 1e-12 + 1e-9 * p->compute_s) << "chunk " << c;
    }
  }
  // The embedding's gradient is a pass of its own (a scatter-add), none when the embedding is frozen.
  ASSERT_TRUE(pass_work(s, 0, Op::embedding_bwd).has_value());
  EXPECT_GT(pass_work(s, 0, Op::embedding_bwd)->mb_s, 0);
  Scenario lora = s;
  lora.config.lora_rank = 8;
  EXPECT_FALSE(pass_work(lora, 0, Op::embedding_bwd).has_value());
  EXPECT_FALSE(pass_work(s, 0, Op::optimizer_step).has_value());
  EXPECT_FALSE(pass_work(s, g.n, Op::layer_fwd).has_value());
}

// A MoE model's routed-expert GEMMs join the fit's GEMM column in the dense GEMMs' units, at the
// base profile's ratio of the two efficiencies (the micro-benchmarks measure it): the fit recovers
// the dense GEMMs' efficiency and keeps the experts' in that ratio, and pass_work still prices
// what compute_s does.
TEST(Calibration, ExpertGemmsKeepTheProfilesRatioToTheDenseOnes) {
  auto moe = [](int64_t context, int64_t chunk) {
    Scenario s = tiny_scenario(context, chunk, false);
    s.model = models::load_model("tiny-moe");
    s.gpu.efficiency.expert_gemm = s.gpu.efficiency.gemm / 4;
    return s;
  };
  const Scenario s = moe(4096, 1024);
  const step::Geometry g = detail::geometry(s);
  const auto& e = s.gpu.efficiency;
  const detail::ChunkCosts cc = detail::chunk_costs(s, g, 1);
  ASSERT_GT(cc.fill.work.expert_gemm_s, 0);
  const auto w = pass_work(s, 1, Op::layer_fwd);
  ASSERT_TRUE(w.has_value());
  EXPECT_NEAR(w->gemm_s / e.gemm, cc.fill.work.gemm_s / e.gemm + cc.fill.work.expert_gemm_s / e.expert_gemm,
              1e-12 * w->gemm_s / e.gemm);
  const double x[5] = {1.0 / 0.6, 1.0 / 0.35, 1.0 / 0.7, 1.0 / 0.5, 7e-6};
  auto a = synth(s, 0, x);
  auto b = synth(moe(3000, 512), 1, x);
  auto c = synth(tiny_scenario(777, 256, false), 2, x);
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  models::GpuSpec base = s.gpu;
  const FitResult f = fit_efficiencies(a, base, 3);
  EXPECT_NEAR(f.efficiency.gemm, 0.6, kRecoverTol);
  EXPECT_NEAR(f.efficiency.expert_gemm, 0.6 / 4, kRecoverTol);
  EXPECT_NEAR(f.r2, 1.0, 1e-9);
}

TEST(Calibration, ExecutorRunsArePredictedWithTheirPageDtypes) {
  // apply_cpu_run: fp32 parameters, parameter gradients and activations; the pages as configured.
  Scenario s = tiny_scenario(4096, 1024, false);
  s.config.kv_dtype = Dtype::bf16;
  s.config.kv_grad_dtype = Dtype::bf16;
  s.config.loss_dtype = Dtype::bf16;
  apply_cpu_run(s);
  EXPECT_EQ(s.config.kv_dtype, Dtype::bf16);
  EXPECT_EQ(s.config.kv_grad_dtype, Dtype::bf16);
  EXPECT_EQ(s.config.param_dtype, Dtype::fp32);
  EXPECT_EQ(s.config.param_grad_dtype, Dtype::fp32);
  EXPECT_EQ(s.config.activation_dtype, Dtype::fp32);
  EXPECT_EQ(s.config.loss_dtype, Dtype::fp32);  // the fp32 reference holds its logits and loss in fp32
  EXPECT_EQ(s.config.peak_measure, step::PeakMeasure::allocated);
  EXPECT_EQ(page_counts(s).kv_page_bytes * 2, page_counts(tiny_scenario(4096, 1024, false)).grad_page_bytes);

  // scenario_of_trace: the storage dtypes the run's record says it stored, for every executor source.
  traces::Trace t;
  t.metadata.extra = {{"model", "tiny"}, {"config", s.config.to_json()},
                      {"measured", {{"kv_dtype", "bf16"}, {"kv_grad_dtype", "fp32"}}}};
  for (const char* src : {"cpu", "cuda", "cuda-cupti"}) {
    t.metadata.source = src;
    const Scenario r = scenario_of_trace(t, "t.json", models::load_gpu("h200"));
    EXPECT_EQ(r.config.kv_dtype, Dtype::bf16) << src;
    EXPECT_EQ(r.config.kv_grad_dtype, Dtype::fp32) << src;
    EXPECT_EQ(r.config.param_dtype, Dtype::fp32) << src;
  }
  // A trace from before the executor stored bf16 pages: fp32 pages whatever its config says.
  t.metadata.source = "cpu";
  t.metadata.extra["measured"] = {{"steps", 1}};
  const Scenario old = scenario_of_trace(t, "t.json", models::load_gpu("h200"));
  EXPECT_EQ(old.config.kv_dtype, Dtype::fp32);
  EXPECT_EQ(old.config.kv_grad_dtype, Dtype::fp32);
  EXPECT_EQ(step::run_record_from_json(t.metadata.extra, "t.json").config.kv_dtype, Dtype::fp32);
}

}  // namespace
}  // namespace oomb::simulator

namespace oomb::simulator {
namespace {

// Qwen3's q/k RMSNorm: its weights are in the parameter count (and so the weights row), and each
// layer pass reads and writes q and k once more (memory-bound work), nothing else changes.
TEST(QkNorm, Qwen3PricesTheNormsWeightsAndTraffic) {
  Scenario with = tiny_scenario(8192, 2048, false);
  with.model = models::load_model("qwen3-8b");
  with.config.resident_layers = 2;
  Scenario without = with;
  without.model.qk_norm = false;
  const step::Geometry g = detail::geometry(with);
  const double tokens = 2048;
  const double extra_mb_s = tokens * 2.0 * static_cast<double>((g.qd + g.kvd) * g.act_b) / with.gpu.hbm_bytes_per_s;
  const auto fwd_with = *pass_work(with, 1, Op::layer_fwd), fwd_without = *pass_work(without, 1, Op::layer_fwd);
  EXPECT_NEAR(fwd_with.mb_s - fwd_without.mb_s, extra_mb_s, extra_mb_s * 1e-9);
  EXPECT_DOUBLE_EQ(fwd_with.gemm_s, fwd_without.gemm_s);
  EXPECT_DOUBLE_EQ(fwd_with.attn_s, fwd_without.attn_s);
  // Backward (with its recompute) runs the memory-bound work 3 times.
  const auto bwd_with = *pass_work(with, 1, Op::layer_bwd), bwd_without = *pass_work(without, 1, Op::layer_bwd);
  EXPECT_NEAR(bwd_with.mb_s - bwd_without.mb_s, 3 * extra_mb_s, extra_mb_s * 1e-9);
  const Summary a = evaluate(with), b = evaluate(without);
  EXPECT_GT(a.step_s, b.step_s);
  // 36 layers x (q_norm + k_norm) x head_dim 128 weights, in the param dtype and its gradient's.
  const int64_t norm_params = 36 * 2 * 128;
  EXPECT_EQ(detail::param_count(with) - detail::param_count(without), norm_params);
}

}  // namespace
}  // namespace oomb::simulator

namespace oomb::simulator {
namespace {

// ---- Whole steps as measurements (fit_points): configurations on one device, each with a step time.

// A profile to recover: the h200 with efficiencies and launch overhead unlike its defaults.
models::GpuSpec known_profile() {
  models::GpuSpec g = models::load_gpu("h200");
  g.efficiency.gemm = 0.62;
  g.efficiency.attention = 0.45;
  g.efficiency.attention_backward = 0.33;
  g.efficiency.memory_bound = 0.55;
  g.launch_overhead_s = 7e-6;
  return g;
}

Scenario point_scenario(const std::string& model, int64_t context, int64_t chunk, step::Schedule schedule, bool ckpt,
                        int64_t resident) {
  Scenario s;
  s.model = models::load_model(model);
  s.gpu = models::load_gpu("h200");
  s.host = models::load_host(s.gpu.default_host);
  s.config.schedule = schedule;
  s.config.context_tokens = context;
  s.config.chunk_tokens = chunk;
  s.config.checkpointing = ckpt;
  s.config.resident_layers = resident;
  return s;
}

// Points that tell every parameter apart: shapes (GEMM vs memory-bound), contexts (attention grows
// quadratically), chunk sizes (launches per token), checkpointing off and the standard schedule
// (the attention forward : backward ratio), with and without offload (copy time in the step).
std::vector<Scenario> point_scenarios() {
  return {point_scenario("qwen2.5-7b", 256 * 1024, 4096, step::Schedule::oomb, true, 1),
          point_scenario("qwen2.5-7b", 64 * 1024, 2048, step::Schedule::oomb, true, 28),
          point_scenario("qwen2.5-7b", 32 * 1024, 4096, step::Schedule::oomb, false, 28),
          point_scenario("qwen2.5-7b", 1024 * 1024, 8192, step::Schedule::oomb, true, 2),
          point_scenario("qwen2.5-0.5b", 128 * 1024, 1024, step::Schedule::oomb, true, 24),
          point_scenario("qwen2.5-0.5b", 16 * 1024, 512, step::Schedule::oomb, true, 2),
          point_scenario("qwen2.5-0.5b", 8 * 1024, 256, step::Schedule::oomb, false, 24),
          point_scenario("qwen2.5-0.5b", 512 * 1024, 4096, step::Schedule::oomb, false, 24),
          point_scenario("qwen2.5-1.5b", 32 * 1024, 4096, step::Schedule::standard, true, 28),
          point_scenario("qwen2.5-1.5b", 8 * 1024, 4096, step::Schedule::standard, false, 28),
          point_scenario("llama-3.1-8b", 512 * 1024, 8192, step::Schedule::oomb, true, 2),
          point_scenario("llama-3.1-8b", 16 * 1024, 1024, step::Schedule::oomb, true, 32),
          point_scenario("qwen2.5-3b", 96 * 1024, 2048, step::Schedule::oomb, false, 36),
          point_scenario("qwen2.5-3b", 256 * 1024, 512, step::Schedule::oomb, true, 36)};
}

// Deterministic standard normal (own generator: the same numbers on every platform).
double normal(uint64_t& state) {
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(state >> 11) + 0.5) / 9007199254740992.0;
  };
  const double u1 = uniform(), u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::vector<MeasuredPoint> measured(const models::GpuSpec& truth, double noise, uint64_t seed) {
  std::vector<MeasuredPoint> out;
  uint64_t state = seed;
  int i = 0;
  for (Scenario s : point_scenarios()) {
    s.gpu = truth;
    const Summary sum = evaluate(s);
    MeasuredPoint p;
    p.name = "point " + std::to_string(++i);
    p.scenario = s;
    p.scenario.gpu = models::load_gpu("h200");  // what the user's file names: the catalog device
    p.step_s = sum.step_s * (1.0 + noise * normal(state));
    p.peak_device_bytes = sum.peak_device_bytes;
    out.push_back(p);
  }
  return out;
}

TEST(StepWork, PricedAtAProfileIsTheStepsComputeTime) {
  const models::GpuSpec g = known_profile();
  std::vector<Scenario> all = point_scenarios();
  Scenario opt = point_scenario("qwen2.5-7b", 64 * 1024, 4096, step::Schedule::oomb, true, 28);
  opt.config.optimizer = step::Optimizer::gpu;
  all.push_back(opt);
  for (Scenario s : all) {
    s.gpu = g;
    const OpWork w = step_work(s);
    const double priced = w.gemm_s / g.efficiency.gemm + w.attn_s / g.efficiency.attention +
                          w.attn_bwd_s / g.efficiency.attention_backward + w.mb_s / g.efficiency.memory_bound +
                          w.kernels * g.launch_overhead_s;
    const double compute = evaluate(s).compute_s;
    EXPECT_NEAR(priced, compute, compute * 1e-9) << s.model.id << " " << s.config.context_tokens;
  }
}

TEST(FitPoints, RecoversTheProfileThatMadeThem) {
  const models::GpuSpec truth = known_profile();
  const PointsFit f = fit_points(measured(truth, 0.0, 1), models::load_gpu("h200"));
  EXPECT_NEAR(f.profile.efficiency.gemm, truth.efficiency.gemm, 1e-6);
  EXPECT_NEAR(f.profile.efficiency.attention, truth.efficiency.attention, 1e-6);
  EXPECT_NEAR(f.profile.efficiency.attention_backward, truth.efficiency.attention_backward, 1e-6);
  EXPECT_NEAR(f.profile.efficiency.memory_bound, truth.efficiency.memory_bound, 1e-6);
  EXPECT_NEAR(f.profile.launch_overhead_s, truth.launch_overhead_s, 1e-9);
  EXPECT_TRUE(f.fit.clamped.empty());
  ASSERT_EQ(f.fit.leave_one_out.size(), point_scenarios().size());
  for (size_t i = 0; i < f.predicted.size(); ++i) {
    EXPECT_NEAR(f.fit.trace_error[i], 0.0, 1e-6) << i;
    ASSERT_TRUE(f.fit.leave_one_out[i].has_value()) << i;
    EXPECT_NEAR(*f.fit.leave_one_out[i], 0.0, 1e-5) << i;
  }
  // The offloaded points' copies are part of the step, not of the fitted compute.
  EXPECT_GT(f.predicted[0].exposed_copy_s, 0.0);
}

TEST(FitPoints, AHeldOutPointIsPredictedWithinItsNoise) {
  constexpr double kNoise = 0.01;  // 1% measurement noise per step
  const models::GpuSpec truth = known_profile();
  std::vector<MeasuredPoint> pts = measured(truth, kNoise, 42);
  const MeasuredPoint held = pts.back();
  pts.pop_back();
  const PointsFit f = fit_points(pts, models::load_gpu("h200"));
  Scenario s = held.scenario;
  s.gpu = f.profile;
  const double predicted = evaluate(s).step_s;
  s.gpu = truth;
  const double noiseless = evaluate(s).step_s;
  // Within 3 sigma of the held-out measurement, and closer to the noiseless truth than that.
  EXPECT_LT(std::fabs(predicted - held.step_s) / held.step_s, 3 * kNoise);
  EXPECT_LT(std::fabs(predicted - noiseless) / noiseless, 3 * kNoise);
  for (size_t i = 0; i < f.fit.leave_one_out.size(); ++i) {
    ASSERT_TRUE(f.fit.leave_one_out[i].has_value()) << "point " << i + 1;
    EXPECT_LT(std::fabs(*f.fit.leave_one_out[i]), 4 * kNoise) << "point " << i + 1;
  }
}

// The leave-one-out is a rank-one downdate of the full fit's normal equations, with the time
// outside compute held at the full fit's (issue 24: refitting the others to their own fixed point
// made calibrate --points quadratic in the rows). It agrees with that refit: to rounding where
// nothing is exposed outside compute, within a small share of the error where copies are.
TEST(FitPoints, LeaveOneOutAgreesWithARefitOfTheOthers) {
  constexpr double kNoise = 0.01;
  const std::vector<MeasuredPoint> pts = measured(known_profile(), kNoise, 7);
  const PointsFit f = fit_points(pts, models::load_gpu("h200"));
  ASSERT_EQ(f.fit.leave_one_out.size(), pts.size());
  // Linear in the points: one evaluation per point per iteration of the fit and the one that finds
  // it settled, the final predictions and one per left-out point (no refit per point).
  EXPECT_LE(f.evaluations, static_cast<int64_t>(pts.size()) * (f.iterations + 3));
  bool hidden = true;  // no point's step has time outside its compute
  for (const auto& p : f.predicted) hidden = hidden && p.step_s - p.compute_s <= 0;
  for (size_t i = 0; i < pts.size(); ++i) {
    std::vector<MeasuredPoint> others = pts;
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
    const PointsFit g = fit_points(others, models::load_gpu("h200"));
    Scenario s = pts[i].scenario;
    s.gpu = g.profile;
    const double refit = (evaluate(s).step_s - pts[i].step_s) / pts[i].step_s;
    ASSERT_TRUE(f.fit.leave_one_out[i].has_value()) << "point " << i + 1;
    EXPECT_NEAR(*f.fit.leave_one_out[i], refit, hidden ? 1e-9 : 0.1 * kNoise) << "point " << i + 1;
  }
}

TEST(FitPoints, RefusesWhatThePointsCannotDetermine) {
  // One configuration: nothing but one efficiency is determined.
  std::vector<MeasuredPoint> one = {measured(known_profile(), 0.0, 1).front()};
  try {
    fit_points(one, models::load_gpu("h200"));
    FAIL() << "fitted five parameters to one point";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not determined by these points"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("trace"), std::string::npos) << "points are not traces: " << e.what();
  }
  // Holding the others, the GEMM efficiency alone is fitted from it.
  const PointsFit f = fit_points(one, known_profile(), {"attention", "attention_backward", "memory_bound",
                                                        "launch_overhead"});
  EXPECT_NEAR(f.profile.efficiency.gemm, 0.62, 1e-6);
  // A step shorter than its own predicted copy time is refused naming the point.
  std::vector<MeasuredPoint> fast = measured(known_profile(), 0.0, 1);
  fast[0].step_s = 1e-6;
  try {
    fit_points(fast, models::load_gpu("h200"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "point 1");
    EXPECT_EQ(e.key(), "step_s");
  }
}

// A parameter held at its bound says why: what the fit wanted, and the points pulling it there.
// Made from the known profile, one point 3x faster than it can be: the GEMM efficiency wants to
// pass 1, and that point carries most of the pull.
TEST(FitPoints, AClampNamesThePointsThatPullThere) {
  std::vector<MeasuredPoint> pts = measured(known_profile(), 0.0, 1);
  const size_t fast = 2;
  pts[fast].step_s /= 3.0;
  const PointsFit f = fit_points(pts, models::load_gpu("h200"), {"attention_backward", "memory_bound", "launch_overhead"});
  ASSERT_EQ(f.fit.clamp_pulls.size(), f.fit.clamped.size());
  const ClampPull* gemm = nullptr;
  for (const auto& c : f.fit.clamp_pulls)
    if (c.parameter == "gemm efficiency") gemm = &c;
  ASSERT_NE(gemm, nullptr) << "the GEMM efficiency is not held at its bound";
  EXPECT_EQ(gemm->work, "GEMM");
  EXPECT_TRUE(!std::isfinite(gemm->wanted) || gemm->wanted > 1.0) << gemm->wanted;
  ASSERT_FALSE(gemm->by.empty());
  EXPECT_EQ(gemm->by.front().first, static_cast<int>(fast));
  EXPECT_GT(gemm->by.front().second, 0.5);
  double total = 0;
  for (const auto& [t, share] : gemm->by) total += share;
  EXPECT_NEAR(total, 1.0, 1e-9);
  // Without the outlier nothing is held.
  EXPECT_TRUE(fit_points(measured(known_profile(), 0.0, 1), models::load_gpu("h200"),
                         {"attention_backward", "memory_bound", "launch_overhead"})
                  .fit.clamp_pulls.empty());
}

// The fit's R^2 is of the residuals it reports per point (trace_error), and measurements that do
// not vary leave it undefined (NaN) unless the fit reproduces them: never "R^2 1.0000" over large
// per-point errors.
TEST(FitPoints, R2IsOfTheReportedResidualsAndNeverOneOverLargeErrors) {
  const std::vector<MeasuredPoint> pts = measured(known_profile(), 0.05, 7);
  const PointsFit f = fit_points(pts, models::load_gpu("h200"));
  double mean = 0, ss_res = 0, ss_tot = 0;
  for (const auto& p : pts) mean += p.step_s / static_cast<double>(pts.size());
  for (size_t i = 0; i < pts.size(); ++i) {
    ss_res += std::pow(f.fit.trace_error[i] * pts[i].step_s, 2);
    ss_tot += std::pow(pts[i].step_s - mean, 2);
  }
  EXPECT_NEAR(f.fit.r2, 1.0 - ss_res / ss_tot, 1e-9);
  // Every point measured at the same step time: the fit cannot reproduce workloads this different.
  std::vector<MeasuredPoint> same = pts;
  double longest = 0;
  for (const auto& p : pts) longest = std::max(longest, p.step_s);
  for (auto& p : same) p.step_s = longest;
  const PointsFit g = fit_points(same, models::load_gpu("h200"));
  double worst = 0;
  for (double e : g.fit.trace_error) worst = std::max(worst, std::fabs(e));
  ASSERT_GT(worst, 0.01);
  EXPECT_FALSE(std::isfinite(g.fit.r2)) << g.fit.r2 << " with a per-point error of " << worst;
}

}  // namespace
}  // namespace oomb::simulator
