#include "simulator/calibration.h"
#include "step/run_record.h"

#include <Eigen/Dense>
#include <algorithm>
#include <limits>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "core/format.h"
#include "simulator/detail.h"

namespace oomb::simulator {

namespace {
// R^2 = 1 - ss_res / ss_tot. Measurements that do not vary (ss_tot ~0: one point, or equal step
// times) leave it undefined: 1 only when the fit reproduces them (rms relative residual at most
// 1e-3 of sum_sq, the measurements' own sum of squares), NaN otherwise, never 1 over large residuals.
double r_squared(double ss_res, double ss_tot, double sum_sq) {
  // Equal measurements leave a rounding-sized ss_tot (the mean is rounded): not variation.
  if (ss_tot > 1e-12 * sum_sq) return 1.0 - ss_res / ss_tot;
  return ss_res <= 1e-6 * sum_sq ? 1.0 : std::nan("");
}
}  // namespace

namespace {

// The fit's GEMM column: the dense GEMMs' seconds at the peak, and the routed experts' in the
// dense GEMMs' units. The experts' efficiency is the micro-benchmarks' (oomb calibrate --backend,
// on the expert shapes); a fit from traces or steps keeps its ratio to the dense GEMMs' and scales
// both: expert seconds at e_x are expert_s e_g / e_x at e_g.
double gemm_column(const Scenario& s, const detail::WorkTerms& t) {
  return t.gemm_s + t.expert_gemm_s * s.gpu.efficiency.gemm / s.gpu.efficiency.expert_gemm;
}
double scaled_expert_gemm(const models::Efficiency& base, double gemm) {
  return std::min(1.0, gemm * base.expert_gemm / base.gemm);
}

constexpr int kParams = 5;
const char* const kParamNames[kParams] = {"gemm efficiency", "attention efficiency",
                                          "attention backward efficiency", "memory-bound efficiency",
                                          "launch overhead"};
const char* const kWorkNames[kParams] = {"GEMM", "attention forward", "attention backward",
                                         "memory-bound (elementwise)", "kernel launch"};
constexpr int kLaunch = kParams - 1;  // the one parameter that is not an inverse efficiency
// A column whose part not explained by the others is below this share of its norm is not determined.
constexpr double kCollinear = 1e-6;

double column(const OpWork& w, int j) {
  switch (j) {
    case 0: return w.gemm_s;
    case 1: return w.attn_s;
    case 2: return w.attn_bwd_s;
    case 3: return w.mb_s;
    default: return w.kernels;
  }
}

struct Design {
  Eigen::MatrixXd X;  // weighted
  Eigen::VectorXd y;  // weighted
};

Design design(const std::vector<CalibrationSample>& samples, int trace_count, int skip_trace) {
  std::vector<double> total(static_cast<size_t>(trace_count), 0.0);
  for (const auto& s : samples) total[static_cast<size_t>(s.trace)] += s.measured_s;
  int64_t n = 0;
  for (const auto& s : samples) n += s.trace != skip_trace;
  Design d{Eigen::MatrixXd(n, kParams), Eigen::VectorXd(n)};
  int64_t i = 0;
  for (const auto& s : samples) {
    if (s.trace == skip_trace) continue;
    const double w = 1.0 / std::max(total[static_cast<size_t>(s.trace)], 1e-12);
    for (int j = 0; j < kParams; ++j) d.X(i, j) = w * column(s.work, j);
    d.y(i) = w * s.measured_s;
    ++i;
  }
  return d;
}

// Throws Error naming the first free parameter the design cannot determine.
// What the samples are, for messages: traces of runs (events per op) or measured whole steps.
struct Source {
  const char* many;  // "traces" / "points"
  const char* unit;  // "event" / "point"
  const char* hint;  // how to get more of them
};
constexpr Source kTraces{"traces", "event", "give traces from `oomb run --trace`"};
constexpr Source kPoints{"points", "point", "give measured steps (rows of --points)"};

void check_determined(const Eigen::MatrixXd& X, const bool held[kParams], const Source& src = kTraces) {
  if (X.rows() == 0)
    throw Error("calibrate", std::string("--") + src.many, std::string("no measured ") + src.unit + "s to fit", src.hint);
  for (int j = 0; j < kParams; ++j)
    if (!held[j] && X.col(j).norm() == 0)
      throw Error("calibrate", kParamNames[j],
                  std::string(kParamNames[j]) + " is not determined by these " + src.many + ": they contain no " +
                      kWorkNames[j] + " work",
                  std::string("add ") + src.many + " of runs that do such work, or --hold it at the profile's value");
  std::vector<int> free;
  for (int j = 0; j < kParams; ++j)
    if (!held[j]) free.push_back(j);
  if (free.size() < 2) return;
  Eigen::MatrixXd N = X;
  for (int j : free) N.col(j) /= X.col(j).norm();
  for (int j : free) {
    Eigen::MatrixXd others(N.rows(), static_cast<Eigen::Index>(free.size() - 1));
    Eigen::Index c = 0;
    for (int k : free)
      if (k != j) others.col(c++) = N.col(k);
    const Eigen::VectorXd beta = others.colPivHouseholderQr().solve(N.col(j));
    const double rest = (N.col(j) - others * beta).norm();
    if (rest < kCollinear)
      throw Error("calibrate", kParamNames[j],
                  std::string(kParamNames[j]) + " is not determined by these " + src.many +
                      ": its work is proportional to the other classes' in every " + src.unit,
                  std::string("add ") + src.many + " with other shapes (another context, chunk size or model), or " +
                      "--hold it at the profile's value");
  }
}

struct Solved {
  Eigen::Matrix<double, kParams, 1> x;  // inverse efficiencies, launch overhead
  std::vector<std::string> clamped;
  std::vector<std::pair<int, double>> bound;  // each parameter held at its bound, and the value the fit wanted
};

// Bounded least squares by an active set: solve the free parameters, hold the worst violator at
// its bound, repeat.
Solved solve(const Design& d, const double fixed[kParams], const bool hold[kParams]) {
  const double lower[kParams] = {1.0, 1.0, 1.0, 1.0, 0.0};
  double value[kParams];
  bool held[kParams];
  for (int j = 0; j < kParams; ++j) held[j] = hold[j], value[j] = hold[j] ? fixed[j] : lower[j];
  Solved out;
  for (;;) {
    std::vector<int> free;
    for (int j = 0; j < kParams; ++j)
      if (!held[j]) free.push_back(j);
    Eigen::VectorXd y = d.y;
    for (int j = 0; j < kParams; ++j)
      if (held[j]) y -= d.X.col(j) * value[j];
    Eigen::MatrixXd A(d.X.rows(), static_cast<Eigen::Index>(free.size()));
    for (size_t k = 0; k < free.size(); ++k) A.col(static_cast<Eigen::Index>(k)) = d.X.col(free[k]);
    Eigen::VectorXd b = free.empty() ? Eigen::VectorXd() : Eigen::VectorXd(A.colPivHouseholderQr().solve(y));
    int worst = -1;
    double worst_by = 0;
    for (size_t k = 0; k < free.size(); ++k) {
      const int j = free[k];
      const double below = (lower[j] - b(static_cast<Eigen::Index>(k))) / std::max(lower[j], 1e-9);
      if (below > worst_by) worst_by = below, worst = j;
    }
    if (worst < 0) {
      for (int j = 0; j < kParams; ++j) out.x(j) = value[j];
      for (size_t k = 0; k < free.size(); ++k) out.x(free[k]) = b(static_cast<Eigen::Index>(k));
      return out;
    }
    held[worst] = true;
    for (size_t k = 0; k < free.size(); ++k)
      if (free[k] == worst) out.bound.emplace_back(worst, b(static_cast<Eigen::Index>(k)));
    out.clamped.push_back(std::string(kParamNames[worst]) +
                          (worst != kLaunch ? " held at 1 (the fit wanted more than the profile's peak)"
                                     : " held at 0 (the fit wanted a negative overhead)"));
  }
}

double predict(const OpWork& w, const Eigen::Matrix<double, kParams, 1>& x) {
  double t = 0;
  for (int j = 0; j < kParams; ++j) t += column(w, j) * x(j);
  return t;
}

using Gram = Eigen::Matrix<double, kParams, kParams>;
using Params = Eigen::Matrix<double, kParams, 1>;

// solve() and check_determined() from the normal equations (G = X^T X, c = X^T y) instead of the
// rows: a leave-one-out fit is then a rank-one downdate of G and c, not a new design (linear in the
// points, not quadratic). nullopt where check_determined would throw.
std::optional<Params> solve_gram(const Gram& G, const Params& c, const double fixed[kParams], const bool hold[kParams]) {
  std::vector<int> free;
  for (int j = 0; j < kParams; ++j)
    if (!hold[j]) free.push_back(j);
  for (int j : free)
    if (!(G(j, j) > 0)) return std::nullopt;
  if (free.size() >= 2) {
    // The part of column j not explained by the others, over its norm, is 1 / sqrt of the inverse's
    // diagonal of the normalized Gram matrix.
    const auto F = static_cast<Eigen::Index>(free.size());
    Eigen::MatrixXd N(F, F);
    for (Eigen::Index a = 0; a < F; ++a)
      for (Eigen::Index b = 0; b < F; ++b)
        N(a, b) = G(free[a], free[b]) / std::sqrt(G(free[a], free[a]) * G(free[b], free[b]));
    const Eigen::MatrixXd inv = N.colPivHouseholderQr().inverse();
    for (Eigen::Index a = 0; a < F; ++a)
      if (!(inv(a, a) > 0) || 1.0 / std::sqrt(inv(a, a)) < kCollinear) return std::nullopt;
  }
  const double lower[kParams] = {1.0, 1.0, 1.0, 1.0, 0.0};
  double value[kParams];
  bool held[kParams];
  for (int j = 0; j < kParams; ++j) held[j] = hold[j], value[j] = hold[j] ? fixed[j] : lower[j];
  for (;;) {
    free.clear();
    for (int j = 0; j < kParams; ++j)
      if (!held[j]) free.push_back(j);
    const auto F = static_cast<Eigen::Index>(free.size());
    Eigen::MatrixXd A(F, F);
    Eigen::VectorXd y(F);
    for (Eigen::Index a = 0; a < F; ++a) {
      y(a) = c(free[a]);
      for (int j = 0; j < kParams; ++j)
        if (held[j]) y(a) -= G(free[a], j) * value[j];
      for (Eigen::Index b = 0; b < F; ++b) A(a, b) = G(free[a], free[b]);
    }
    const Eigen::VectorXd b = F == 0 ? Eigen::VectorXd() : Eigen::VectorXd(A.colPivHouseholderQr().solve(y));
    int worst = -1;
    double worst_by = 0;
    for (Eigen::Index k = 0; k < F; ++k) {
      const int j = free[static_cast<size_t>(k)];
      const double below = (lower[j] - b(k)) / std::max(lower[j], 1e-9);
      if (below > worst_by) worst_by = below, worst = j;
    }
    if (worst < 0) {
      Params x;
      for (int j = 0; j < kParams; ++j) x(j) = value[j];
      for (Eigen::Index k = 0; k < F; ++k) x(free[static_cast<size_t>(k)]) = b(k);
      return x;
    }
    held[worst] = true;
  }
}

// The held parameters of `hold` and the base profile's values for them.
struct Holds {
  bool held[kParams] = {false, false, false, false, false};
  double fixed[kParams] = {};
};
Holds holds_of(const models::GpuSpec& base, const std::vector<std::string>& hold) {
  Holds h;
  const double fixed[kParams] = {1.0 / base.efficiency.gemm, 1.0 / base.efficiency.attention,
                                 1.0 / base.efficiency.attention_backward, 1.0 / base.efficiency.memory_bound,
                                 base.launch_overhead_s};
  const char* const keys[kParams] = {"gemm", "attention", "attention_backward", "memory_bound", "launch_overhead"};
  for (int j = 0; j < kParams; ++j) h.fixed[j] = fixed[j];
  for (const auto& x : hold) {
    int j = 0;
    while (j < kParams && x != keys[j]) ++j;
    if (j == kParams) throw Error("--hold", x, "unknown parameter",
                                  "gemm, attention, attention_backward, memory_bound or launch_overhead");
    h.held[j] = true;
  }
  return h;
}

}  // namespace

std::optional<OpWork> pass_work(const Scenario& s, int64_t chunk, Op op, int64_t layer) {
  const step::Geometry g = detail::geometry(s);
  if (!g.oomb) throw Error("calibrate", "schedule", "calibration samples come from oomb-schedule runs", "");
  if (chunk < 0 || chunk >= g.n) return std::nullopt;
  const detail::ChunkCosts cc = detail::chunk_costs(s, g, chunk);
  const detail::PassCost* p = op == Op::embedding         ? &cc.fill_head
                              : op == Op::embedding_bwd   ? (detail::trains_embedding(s) ? &cc.embedding_bwd : nullptr)
                              : op == Op::layer_fwd       ? &cc.fill
                              : op == Op::layer_recompute ? &cc.recompute
                              : op == Op::layer_bwd       ? &detail::backward_of(cc, g, layer)
                              : op == Op::lm_head         ? &cc.head
                                                          : nullptr;
  if (!p) return std::nullopt;
  return OpWork{gemm_column(s, p->work), p->work.attn_s, p->work.attn_bwd_s, p->work.mb_s, p->work.kernels};
}

void apply_cpu_run(Scenario& s) {
  for (Dtype* dt : {&s.config.param_dtype, &s.config.param_grad_dtype, &s.config.activation_dtype, &s.config.loss_dtype})
    *dt = Dtype::fp32;
  s.config.peak_measure = step::PeakMeasure::allocated;
}

namespace {

step::RunRecord run_of(const traces::Trace& t, const std::string& where) {
  if (t.metadata.source == "simulator")
    throw Error(where, "metadata.source", "is a prediction, not a measurement", "give a trace from `oomb run --trace`");
  return step::run_record_from_json(t.metadata.extra, where);
}

Scenario scenario_of_run(const traces::Trace& t, const step::RunRecord& run, const std::string& where,
                         const models::GpuSpec& gpu) {
  Scenario s;
  s.model = run.model_spec.is_null() ? models::load_model(run.model)
                                     : models::model_from_json(run.model_spec, where + ": metadata.extra.model_spec");
  s.gpu = gpu;
  s.host = models::load_host(gpu.default_host.empty() ? "workstation-128g" : gpu.default_host);
  s.config = run.config;
  step::validate_document(s.config, s.model, where + ": metadata.extra.config");
  // Timed as the executor's backends compute: fp32 parameters, activations and loss (bf16 storage is
  // emulated, loaded to fp32 and rounded on store: the cost model prices the fp32 work), pages as
  // stored (the record's); peak as allocated.
  const std::string& src = t.metadata.source;
  if (src == "cpu" || src == "cuda" || src == "cuda-cupti") {
    const Dtype kv = s.config.kv_dtype, kv_grad = s.config.kv_grad_dtype;
    apply_cpu_run(s);
    s.config.kv_dtype = kv;
    s.config.kv_grad_dtype = kv_grad;
  }
  return s;
}

}  // namespace

Scenario scenario_of_trace(const traces::Trace& t, const std::string& where, const models::GpuSpec& gpu) {
  return scenario_of_run(t, run_of(t, where), where, gpu);
}

std::vector<CalibrationSample> calibration_samples(const traces::Trace& t, const std::string& where,
                                                   const models::GpuSpec& gpu, int trace_index) {
  if (t.metadata.detail != traces::Detail::layer && t.metadata.detail != traces::Detail::op)
    throw Error(where, "metadata.detail",
                std::string("is '") + traces::to_string(t.metadata.detail) +
                    "': calibration needs one event per (stage, chunk, layer, pass)",
                "record with `oomb run --trace FILE --detail layer` (or op)");
  const step::RunRecord run = run_of(t, where);
  const Scenario s = scenario_of_run(t, run, where, gpu);
  const double steps = static_cast<double>(run.steps);
  // Occurrences of each (stage, chunk, layer, pass), in trace order.
  std::map<std::tuple<int, int64_t, int64_t, Op>, std::vector<double>> seen;
  for (const auto& e : t.events)
    if (e.kind == traces::EventKind::compute) seen[{e.stage, e.chunk, e.layer, e.op}].push_back(e.duration_ns() * 1e-9);
  std::vector<CalibrationSample> out;
  for (const auto& [key, times] : seen) {
    const auto& [stage, chunk, layer, op] = key;
    const std::optional<OpWork> w = pass_work(s, chunk, op, layer);
    if (!w) continue;
    double seconds = 0;
    if (steps >= 2 && static_cast<double>(times.size()) == steps) {
      // One occurrence per step: the fastest. The first step's page faults and other processes'
      // interference only ever add time, so the minimum is the backend's own speed.
      seconds = *std::min_element(times.begin(), times.end());
    } else {
      // Several per step (op detail splits a pass) or a one-step trace: the mean per step.
      for (double each : times) seconds += each;
      seconds /= steps;
    }
    out.push_back({trace_index, stage, chunk, layer, op, *w, seconds});
  }
  return out;
}

namespace {
FitResult fit_samples(const std::vector<CalibrationSample>& samples, const models::GpuSpec& base, int trace_count,
                      const std::vector<std::string>& hold, bool leave_one_out, const Source& src) {
  const Holds h = holds_of(base, hold);
  const bool* held = h.held;
  const double* fixed = h.fixed;
  const Design d = design(samples, trace_count, -1);
  check_determined(d.X, held, src);
  const Solved sol = solve(d, fixed, held);
  FitResult r;
  r.efficiency = base.efficiency;
  r.efficiency.gemm = 1.0 / sol.x(0);
  r.efficiency.expert_gemm = scaled_expert_gemm(base.efficiency, r.efficiency.gemm);
  r.efficiency.attention = 1.0 / sol.x(1);
  r.efficiency.attention_backward = 1.0 / sol.x(2);
  r.efficiency.memory_bound = 1.0 / sol.x(3);
  r.launch_overhead_s = sol.x(kLaunch);
  r.clamped = sol.clamped;
  const Eigen::VectorXd fit = d.X * sol.x;
  const double mean = d.y.mean();
  const double ss_res = (d.y - fit).squaredNorm(), ss_tot = (d.y.array() - mean).square().sum();
  r.r2 = r_squared(ss_res, ss_tot, d.y.squaredNorm());
  // What pulls a parameter to its bound: at a bound the least-squares gradient of parameter j is
  // -2 sum_i X_ij r_i (r: the weighted residuals, measured - fitted), so the rows with X_ij r_i < 0
  // (measured faster than the bound allows for their work of that class) want it further; their
  // shares of that pull, summed per trace (per point).
  {
    const Eigen::VectorXd res = d.y - fit;
    for (const auto& [j, wanted] : sol.bound) {
      std::vector<double> pull(static_cast<size_t>(trace_count), 0.0);
      for (Eigen::Index i = 0; i < d.X.rows(); ++i)
        pull[static_cast<size_t>(samples[static_cast<size_t>(i)].trace)] += d.X(i, j) * res(i);
      double total = 0;
      for (double v : pull) total += std::min(v, 0.0);
      ClampPull c;
      c.parameter = kParamNames[j];
      c.work = kWorkNames[j];
      c.wanted = j == kLaunch ? wanted : (wanted > 0 ? 1.0 / wanted : std::numeric_limits<double>::infinity());
      std::vector<int> order;
      for (int t = 0; t < trace_count; ++t)
        if (pull[static_cast<size_t>(t)] < 0 && total < 0) order.push_back(t);
      std::sort(order.begin(), order.end(),
                [&](int a, int b) { return pull[static_cast<size_t>(a)] < pull[static_cast<size_t>(b)]; });
      for (int t : order) c.by.emplace_back(t, pull[static_cast<size_t>(t)] / total);
      r.clamp_pulls.push_back(c);
    }
  }

  std::map<Op, OpResidual> by_op;
  std::vector<double> meas(static_cast<size_t>(trace_count), 0.0), pred(static_cast<size_t>(trace_count), 0.0);
  for (const auto& s : samples) {
    OpResidual& o = by_op[s.op];
    o.op = s.op;
    const double p = predict(s.work, sol.x);
    o.samples += 1;
    o.measured_s += s.measured_s;
    o.predicted_s += p;
    const double rel = (p - s.measured_s) / std::max(s.measured_s, 1e-12);
    o.rms_relative += rel * rel;
    meas[static_cast<size_t>(s.trace)] += s.measured_s;
    pred[static_cast<size_t>(s.trace)] += p;
  }
  for (auto& [op, o] : by_op) {
    o.rms_relative = std::sqrt(o.rms_relative / std::max(o.samples, 1));
    r.residuals.push_back(o);
  }
  for (int t = 0; t < trace_count; ++t)
    r.trace_error.push_back(meas[static_cast<size_t>(t)] > 0
                                ? (pred[static_cast<size_t>(t)] - meas[static_cast<size_t>(t)]) / meas[static_cast<size_t>(t)]
                                : 0.0);
  if (leave_one_out && trace_count >= 2) {
    for (int t = 0; t < trace_count; ++t) {
      const Design dt = design(samples, trace_count, t);
      std::optional<double> err;
      try {
        check_determined(dt.X, held, src);
        const Solved st = solve(dt, fixed, held);
        double m = 0, p = 0;
        for (const auto& s : samples)
          if (s.trace == t) m += s.measured_s, p += predict(s.work, st.x);
        if (m > 0) err = (p - m) / m;
      } catch (const Error&) {
      }
      r.leave_one_out.push_back(err);
    }
  }
  return r;
}
}  // namespace

FitResult fit_efficiencies(const std::vector<CalibrationSample>& samples, const models::GpuSpec& base,
                           int trace_count, const std::vector<std::string>& hold) {
  return fit_samples(samples, base, trace_count, hold, true, kTraces);
}

OpWork step_work(const Scenario& s) {
  const step::Geometry g = detail::geometry(s);
  OpWork w;
  auto add = [&](const detail::WorkTerms& t, double times) {
    w.gemm_s += times * gemm_column(s, t);
    w.attn_s += times * t.attn_s;
    w.attn_bwd_s += times * t.attn_bwd_s;
    w.mb_s += times * t.mb_s;
    w.kernels += times * t.kernels;
  };
  const double L = static_cast<double>(g.L), Lr = static_cast<double>(g.Lr);
  if (g.oomb) {
    for (int64_t c = 0; c < g.n; ++c) {
      const detail::ChunkCosts cc = detail::chunk_costs(s, g, c);
      add(cc.fill.work, L);
      add(cc.recompute.work, L);
      add(cc.backward.work, Lr);
      add(cc.backward_kept.work, L - Lr);
      add(cc.head.work, 1);
      add(cc.fill_head.work, 2);  // stage 1 and stage 2
      add(cc.embedding_bwd.work, 1);
    }
  } else {
    const detail::ChunkCosts cc = detail::standard_costs(s, g);
    add(cc.fill.work, L);
    add(cc.backward.work, Lr);
    add(cc.backward_kept.work, L - Lr);
    add(cc.head.work, 1);
  }
  // optimizer_update_s prices the GPU update at the memory-bound efficiency.
  if (s.config.optimizer == step::Optimizer::gpu) w.mb_s += detail::optimizer_update_s(s) * s.gpu.efficiency.memory_bound;
  return w;
}

namespace {

// fit_points without its leave-one-out: the fixed point of (time outside compute, fit).
PointsFit fit_points_once(const std::vector<MeasuredPoint>& points, const models::GpuSpec& base,
                          const std::vector<std::string>& hold, std::vector<CalibrationSample>& fitted) {
  const int n = static_cast<int>(points.size());
  std::vector<OpWork> work;
  for (const auto& p : points) {
    Scenario s = p.scenario;
    s.gpu = base;
    work.push_back(step_work(s));  // seconds at efficiency 1: the same for every profile of this device
  }
  PointsFit out;
  out.profile = base;
  std::vector<double> other(points.size(), 0.0);
  constexpr int kMaxIterations = 50;
  constexpr double kSettled = 1e-12;  // change of the time outside compute, relative to the step
  for (int it = 1; it <= kMaxIterations; ++it) {
    double moved = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      Scenario s = points[i].scenario;
      s.gpu = out.profile;
      const Summary sum = evaluate(s);
      ++out.evaluations;
      const double o = std::max(0.0, sum.step_s - sum.compute_s);
      moved = std::max(moved, std::fabs(o - other[i]) / points[i].step_s);
      other[i] = o;
    }
    if (it > 1 && moved <= kSettled) break;
    std::vector<CalibrationSample> samples;
    for (size_t i = 0; i < points.size(); ++i) {
      const double compute = points[i].step_s - other[i];
      if (!(compute > 0))
        throw Error(points[i].name, "step_s",
                    "the measured step (" + format_duration_s(points[i].step_s) +
                        ") is not longer than its predicted copy and host-optimizer time alone (" +
                        format_duration_s(other[i]) + ")",
                    "check that the configuration (offload, host, link) is the one that ran");
      CalibrationSample c;
      c.trace = static_cast<int>(i);
      c.op = Op::step;
      c.work = work[i];
      c.measured_s = compute;
      samples.push_back(c);
    }
    // Without the per-point leave-one-out of the linear part (fit_points makes its own, once).
    out.fit = fit_samples(samples, base, n, hold, false, kPoints);
    fitted = std::move(samples);
    out.profile.efficiency = out.fit.efficiency;
    out.profile.launch_overhead_s = out.fit.launch_overhead_s;
    out.iterations = it;
  }
  for (const auto& p : points) {
    Scenario s = p.scenario;
    s.gpu = out.profile;
    out.predicted.push_back(evaluate(s));
    ++out.evaluations;
  }
  return out;
}

}  // namespace

PointsFit fit_points(const std::vector<MeasuredPoint>& points, const models::GpuSpec& base,
                     const std::vector<std::string>& hold) {
  if (points.empty()) throw Error("--points", "", "no points", "give at least one measured configuration");
  for (const auto& p : points) {
    if (p.scenario.config.gpus > 1)
      throw Error(p.name, "gpus", "tensor-parallel points are not fitted (their all-reduce is not calibrated)",
                  "give single-GPU measurements");
    if (!(p.step_s > 0) || !std::isfinite(p.step_s)) throw Error(p.name, "step_s", "must be a positive number of seconds");
  }
  std::vector<CalibrationSample> fitted;
  PointsFit out = fit_points_once(points, base, hold, fitted);
  // Errors of whole steps as the full cost model predicts them (not the fit's linear part): with
  // every point, and with each point left out of the fit.
  out.fit.trace_error.clear();
  out.fit.leave_one_out.clear();
  for (size_t i = 0; i < points.size(); ++i)
    out.fit.trace_error.push_back((out.predicted[i].step_s - points[i].step_s) / points[i].step_s);
  // Each point's weighted row is 1 (its time over itself), so the weighted R^2 says nothing: the
  // step times' own R^2 instead.
  // From the very residuals reported per point (trace_error), so the two cannot disagree.
  double mean = 0, ss_res = 0, ss_tot = 0, ss = 0;
  for (const auto& p : points) mean += p.step_s / static_cast<double>(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    ss_res += std::pow(out.predicted[i].step_s - points[i].step_s, 2);
    ss_tot += std::pow(points[i].step_s - mean, 2);
    ss += points[i].step_s * points[i].step_s;
  }
  out.fit.r2 = r_squared(ss_res, ss_tot, ss);
  if (points.size() >= 2) {
    // Each point left out of the fit, with the time outside compute held at the full fit's (a
    // refit of the others to their own fixed point would cost n fits of n - 1 points: quadratic).
    // One row per point, weighted by 1 / its compute: leaving it out is a rank-one downdate of the
    // normal equations. The held-out point is then predicted by the full cost model.
    const Holds h = holds_of(base, hold);
    Gram G = Gram::Zero();
    Params c = Params::Zero();
    std::vector<Params> rows(points.size());
    for (const auto& smp : fitted) {
      Params x;
      for (int j = 0; j < kParams; ++j) x(j) = column(smp.work, j) / smp.measured_s;
      rows[static_cast<size_t>(smp.trace)] = x;
      G += x * x.transpose();
      c += x;
    }
    for (size_t i = 0; i < points.size(); ++i) {
      std::optional<double> err;
      if (const std::optional<Params> x = solve_gram(G - rows[i] * rows[i].transpose(), c - rows[i], h.fixed, h.held)) {
        Scenario s = points[i].scenario;
        s.gpu = out.profile;
        s.gpu.efficiency.gemm = 1.0 / (*x)(0);
        s.gpu.efficiency.expert_gemm = scaled_expert_gemm(out.profile.efficiency, s.gpu.efficiency.gemm);
        s.gpu.efficiency.attention = 1.0 / (*x)(1);
        s.gpu.efficiency.attention_backward = 1.0 / (*x)(2);
        s.gpu.efficiency.memory_bound = 1.0 / (*x)(3);
        s.gpu.launch_overhead_s = (*x)(kLaunch);
        err = (evaluate(s).step_s - points[i].step_s) / points[i].step_s;
        ++out.evaluations;
      }
      out.fit.leave_one_out.push_back(err);
    }
  }
  return out;
}

Json FitResult::to_json() const {
  Json res = Json::array();
  for (const auto& o : residuals)
    res.push_back({{"op", to_string(o.op)}, {"samples", o.samples}, {"measured_s", o.measured_s}, {"predicted_s", o.predicted_s},
                   {"error", o.measured_s > 0 ? (o.predicted_s - o.measured_s) / o.measured_s : 0.0},
                   {"rms_relative_error", o.rms_relative}});
  Json loo = Json::array();
  for (const auto& e : leave_one_out) loo.push_back(e ? Json(*e) : Json(nullptr));
  return {{"efficiency", {{"gemm", efficiency.gemm}, {"attention", efficiency.attention},
                          {"attention_backward", efficiency.attention_backward},
                          {"memory_bound", efficiency.memory_bound}}},
          {"launch_overhead_s", launch_overhead_s},
          {"r2", r2},
          {"clamped", clamped},
          {"clamp_pulls", [&] {
             Json a = Json::array();
             for (const auto& c : clamp_pulls) {
               Json by = Json::array();
               for (const auto& [t, share] : c.by) by.push_back({{"index", t}, {"share", share}});
               a.push_back({{"parameter", c.parameter},
                            {"wanted", std::isfinite(c.wanted) ? Json(c.wanted) : Json(nullptr)},
                            {"pulled_by", by}});
             }
             return a;
           }()},
          {"residuals", res},
          {"trace_error", trace_error},
          {"leave_one_trace_out_error", loo}};
}

}  // namespace oomb::simulator
