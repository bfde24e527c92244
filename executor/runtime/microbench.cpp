#include "executor/runtime/microbench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "core/utc_time.h"
#include "executor/cpu/threads.h"

namespace oomb::executor {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of f: one warm-up call, then `reps` repetitions, each calling f until the
// repetition took at least `budget_s` (at least once).
// With `sync` (asynchronous backends) each repetition ends when the device finished its calls.
std::vector<double> time_calls(const std::function<void()>& f, int reps, double budget_s,
                               const std::function<void()>& sync) {
  f();
  if (sync) sync();
  std::vector<double> per_call;
  for (int r = 0; r < reps; ++r) {
    int64_t calls = 0;
    const double t0 = now_s();
    double t = t0;
    do {
      f();
      ++calls;
      t = now_s();
    } while (t - t0 < budget_s);
    if (sync) {
      sync();
      t = now_s();
    }
    per_call.push_back((t - t0) / static_cast<double>(calls));
  }
  return per_call;
}

Stat stat_of(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.samples = static_cast<int>(v.size());
  s.min = v.front();
  s.max = v.back();
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

// Rates work / t for each timing.
Stat rate_of(const std::vector<double>& seconds, double work) {
  std::vector<double> r;
  for (double t : seconds) r.push_back(work / std::max(t, 1e-12));
  return stat_of(r);
}

// A device-tier float buffer. Zero-filled by the backend: the timed ops' speed does not depend on
// the values (no denormals), and filling gigabyte-sized LM-head weights would dominate the run.
struct DeviceArray {
  DeviceArray(Backend& b, int64_t n, uint64_t /*tag*/) : buf(b, Tier::device, std::max<int64_t>(n, 1) * 4) {}
  float* f() const { return buf.f32(); }
  Buffer buf;
};

struct Bench {
  Backend& b;
  const MicrobenchOptions& o;
  void say(const std::string& s) const {
    if (o.progress) o.progress(s);
  }
  std::vector<double> time(const std::function<void()>& f) const {
    return time_calls(f, o.repetitions, o.seconds_per_point, o.sync);
  }
};

void bench_gemm(const Bench& B, GemmShape& g) {
  DeviceArray x(B.b, g.rows * g.in, 1), w(B.b, g.out * g.in, 2), y(B.b, g.rows * g.out, 3), dy(B.b, g.rows * g.out, 4),
      dx(B.b, g.rows * g.in, 5), dw(B.b, g.out * g.in, 6);
  const double f = 2.0 * static_cast<double>(g.rows) * static_cast<double>(g.in) * static_cast<double>(g.out);
  g.fwd = rate_of(B.time([&] { B.b.linear_fwd(x.f(), g.rows, g.in, w.f(), nullptr, g.out, y.f()); }), f);
  g.bwd = rate_of(
      B.time([&] { B.b.linear_bwd(x.f(), g.rows, g.in, w.f(), g.out, dy.f(), dx.f(), false, dw.f(), nullptr); }),
      2 * f);
  char line[200];
  std::snprintf(line, sizeof line, "gemm %-28s [%lld x %lld] x [%lld x %lld]^T  fwd %.1f GFLOP/s  bwd %.1f GFLOP/s",
                g.name.c_str(), static_cast<long long>(g.rows), static_cast<long long>(g.in),
                static_cast<long long>(g.out), static_cast<long long>(g.in), g.fwd.median * 1e-9, g.bwd.median * 1e-9);
  B.say(line);
}

void bench_attention(const Bench& B, AttentionPoint& p, int64_t page) {
  const int64_t T = p.rows, qd = p.q_heads * p.head_dim, kvd = p.kv_heads * p.head_dim;
  const int64_t U = p.prefix_tokens / page;
  DeviceArray q(B.b, T * qd, 11), k(B.b, T * kvd, 12), v(B.b, T * kvd, 13), pages(B.b, U * 2 * page * kvd, 14),
      gpages(B.b, U * 2 * page * kvd, 15), o(B.b, T * qd, 16), lse(B.b, T * p.q_heads, 17), dout(B.b, T * qd, 18),
      dq(B.b, T * qd, 19), dk(B.b, T * kvd, 20), dv(B.b, T * kvd, 21);
  PagedAttention a;
  a.rows = T;
  a.q_heads = p.q_heads;
  a.kv_heads = p.kv_heads;
  a.head_dim = p.head_dim;
  a.page_tokens = page;
  a.q = q.f();
  a.k_own = k.f();
  a.v_own = v.f();
  std::vector<float*> grads;
  for (int64_t u = 0; u < U; ++u) {
    a.prefix_pages.push_back(pages.f() + u * 2 * page * kvd);
    grads.push_back(gpages.f() + u * 2 * page * kvd);
  }
  const double Td = static_cast<double>(T);
  const double pairs = Td * static_cast<double>(U * page) + Td * (Td + 1) / 2;
  const double f = 4.0 * pairs * static_cast<double>(p.head_dim * p.q_heads);
  B.b.attention_fwd(a, o.f(), lse.f());
  p.fwd = rate_of(B.time([&] { B.b.attention_fwd(a, o.f(), lse.f()); }), f);
  p.bwd = rate_of(B.time([&] { B.b.attention_bwd(a, o.f(), lse.f(), dout.f(), dq.f(), dk.f(), dv.f(), grads); }),
                  2.5 * f);
  char line[200];
  std::snprintf(line, sizeof line, "attention %-20s %lld queries, %lld prefix keys, d %lld  fwd %.1f GFLOP/s  bwd %.1f GFLOP/s",
                p.model.c_str(), static_cast<long long>(T), static_cast<long long>(U * page),
                static_cast<long long>(p.head_dim), p.fwd.median * 1e-9, p.bwd.median * 1e-9);
  B.say(line);
}

// Bytes/s of one copy direction (or both at once) over `bytes` in 4 regions.
void bench_copies(const Bench& B, MicrobenchResult& r) {
  const int64_t bytes = int64_t{32} << 20;
  Buffer dev_a(B.b, Tier::device, bytes), dev_b(B.b, Tier::device, bytes), host_a(B.b, Tier::host, bytes),
      host_b(B.b, Tier::host, bytes);
  auto request = [&](CopyDir dir, void* dst, const void* src) {
    CopyRequest q;
    q.dir = dir;
    const int64_t part = bytes / 4;
    for (int i = 0; i < 4; ++i)
      q.regions.push_back({static_cast<char*>(dst) + i * part, static_cast<const char*>(src) + i * part, part});
    return q;
  };
  const double b = static_cast<double>(bytes);
  r.h2d_bytes_per_s = rate_of(B.time([&] { B.b.wait(B.b.copy_async(request(CopyDir::h2d, dev_a.data(), host_a.data()))); }), b);
  r.d2h_bytes_per_s = rate_of(B.time([&] { B.b.wait(B.b.copy_async(request(CopyDir::d2h, host_b.data(), dev_b.data()))); }), b);
  std::vector<double> both = B.time([&] {
    EventPtr in = B.b.copy_async(request(CopyDir::h2d, dev_a.data(), host_a.data()));
    EventPtr out = B.b.copy_async(request(CopyDir::d2h, host_b.data(), dev_b.data()));
    B.b.wait(in);
    B.b.wait(out);
  });
  r.duplex_h2d_bytes_per_s = rate_of(both, b);
  r.duplex_d2h_bytes_per_s = rate_of(both, b);
  char line[200];
  std::snprintf(line, sizeof line, "copy_async h2d %.2f GB/s, d2h %.2f GB/s, both at once %.2f GB/s each",
                r.h2d_bytes_per_s.median * 1e-9, r.d2h_bytes_per_s.median * 1e-9,
                r.duplex_h2d_bytes_per_s.median * 1e-9);
  B.say(line);
}

void bench_memory_bound(const Bench& B, MicrobenchResult& r, int64_t rows, int64_t dim, int64_t ffn) {
  const int64_t n = rows * ffn;
  DeviceArray x(B.b, rows * dim, 31), w(B.b, dim, 32), y(B.b, rows * dim, 33), rstd(B.b, rows, 34), g(B.b, n, 35),
      u(B.b, n, 36), m(B.b, n, 37);
  // Streaming bandwidth: a copy far larger than the caches.
  const int64_t big = int64_t{16} << 20;
  DeviceArray s(B.b, big, 38), d(B.b, big, 39);
  r.stream_bytes_per_s = rate_of(B.time([&] { B.b.copy(d.f(), s.f(), big); }), 8.0 * static_cast<double>(big));
  r.rmsnorm_bytes_per_s = rate_of(B.time([&] { B.b.rmsnorm_fwd(x.f(), w.f(), rows, dim, 1e-6f, y.f(), rstd.f()); }),
                                  8.0 * static_cast<double>(rows * dim));
  r.swiglu_bytes_per_s = rate_of(B.time([&] { B.b.swiglu_fwd(g.f(), u.f(), n, m.f()); }), 12.0 * static_cast<double>(n));
  r.add_bytes_per_s = rate_of(B.time([&] { B.b.add(g.f(), u.f(), n); }), 12.0 * static_cast<double>(n));
  char line[200];
  std::snprintf(line, sizeof line,
                "memory: stream %.1f GB/s, rmsnorm %.1f GB/s, swiglu %.1f GB/s, add %.1f GB/s ([%lld x %lld])",
                r.stream_bytes_per_s.median * 1e-9, r.rmsnorm_bytes_per_s.median * 1e-9,
                r.swiglu_bytes_per_s.median * 1e-9, r.add_bytes_per_s.median * 1e-9, static_cast<long long>(rows),
                static_cast<long long>(ffn));
  B.say(line);
  r.op_overhead_s = stat_of(B.time([&] { B.b.add(y.f(), x.f(), 1); }));
  std::snprintf(line, sizeof line, "per-op overhead %.3f us", r.op_overhead_s.median * 1e6);
  B.say(line);
}

// Step-mix rates of one model: GEMM flops of fill + recompute (forward) and backward (forward
// recompute + 2x backward) over its layer shapes and the LM head (forward + backward once).
ModelRates model_rates(const models::ModelSpec& m, const std::vector<GemmShape>& gemms,
                       const std::vector<AttentionPoint>& attn) {
  ModelRates mr;
  mr.model = m.id;
  double flops = 0, seconds = 0, lo = 0, hi = 0;
  double expert_flops = 0, expert_seconds = 0;
  for (const auto& g : gemms) {
    if (g.name.rfind(m.id + " ", 0) != 0) continue;
    const double f = g.weight;  // relative forward flops of this shape in one step
    const bool head = g.name == m.id + " lm_head";
    const double fwd_passes = head ? 1.0 : 3.0;
    if (g.name.rfind(m.id + " expert_", 0) == 0) {
      expert_flops += f * (fwd_passes + 2.0);
      expert_seconds += f * fwd_passes / g.fwd.median + f * 2.0 / g.bwd.median;
      continue;
    }
    flops += f * (fwd_passes + 2.0);
    seconds += f * fwd_passes / g.fwd.median + f * 2.0 / g.bwd.median;
    lo += f * fwd_passes / g.fwd.max + f * 2.0 / g.bwd.max;
    hi += f * fwd_passes / g.fwd.min + f * 2.0 / g.bwd.min;
  }
  if (seconds > 0) {
    mr.gemm_flops_per_s = flops / seconds;
    mr.gemm_spread = (hi - lo) / seconds;
  }
  if (expert_seconds > 0) mr.expert_gemm_flops_per_s = expert_flops / expert_seconds;
  for (const auto& p : attn) {
    if (p.model != m.id) continue;
    const double t = 3.0 / p.fwd.median + 2.5 / p.bwd.median;
    mr.attention_flops_per_s = 5.5 / t;
    mr.attention_fwd_flops_per_s = p.fwd.median;
    mr.attention_bwd_flops_per_s = p.bwd.median;
    mr.attention_spread = ((3.0 / p.fwd.min + 2.5 / p.bwd.min) - (3.0 / p.fwd.max + 2.5 / p.bwd.max)) / t;
  }
  return mr;
}

}  // namespace

Json Stat::to_json() const {
  return {{"median", median}, {"min", min}, {"max", max}, {"samples", samples}, {"spread", spread()}};
}

Json MicrobenchResult::to_json() const {
  Json g = Json::array(), a = Json::array(), m = Json::array();
  for (const auto& x : gemms)
    g.push_back({{"name", x.name}, {"rows", x.rows}, {"in", x.in}, {"out", x.out}, {"flops_share", x.weight},
                 {"fwd_flops_per_s", x.fwd.to_json()}, {"bwd_flops_per_s", x.bwd.to_json()}});
  for (const auto& x : attention)
    a.push_back({{"model", x.model}, {"rows", x.rows}, {"prefix_tokens", x.prefix_tokens}, {"q_heads", x.q_heads},
                 {"kv_heads", x.kv_heads}, {"head_dim", x.head_dim}, {"fwd_flops_per_s", x.fwd.to_json()},
                 {"bwd_flops_per_s", x.bwd.to_json()}});
  for (const auto& x : models) {
    m.push_back({{"model", x.model}, {"gemm_flops_per_s", x.gemm_flops_per_s}, {"gemm_spread", x.gemm_spread},
                 {"attention_flops_per_s", x.attention_flops_per_s}, {"attention_spread", x.attention_spread},
                 {"attention_fwd_flops_per_s", x.attention_fwd_flops_per_s},
                 {"attention_bwd_flops_per_s", x.attention_bwd_flops_per_s}});
    if (x.expert_gemm_flops_per_s > 0) m.back()["expert_gemm_flops_per_s"] = x.expert_gemm_flops_per_s;
  }
  return {{"backend", backend},
          {"host", host},
          {"date", date},
          {"seconds", seconds},
          {"peak_flops_per_s", peak_flops_per_s},
          {"gemm", g},
          {"attention", a},
          {"models", m},
          {"stream_bytes_per_s", stream_bytes_per_s.to_json()},
          {"rmsnorm_bytes_per_s", rmsnorm_bytes_per_s.to_json()},
          {"swiglu_bytes_per_s", swiglu_bytes_per_s.to_json()},
          {"add_bytes_per_s", add_bytes_per_s.to_json()},
          {"h2d_bytes_per_s", h2d_bytes_per_s.to_json()},
          {"d2h_bytes_per_s", d2h_bytes_per_s.to_json()},
          {"duplex_h2d_bytes_per_s", duplex_h2d_bytes_per_s.to_json()},
          {"duplex_d2h_bytes_per_s", duplex_d2h_bytes_per_s.to_json()},
          {"op_overhead_s", op_overhead_s.to_json()}};
}

MicrobenchResult run_microbench(Backend& backend, const MicrobenchOptions& o) {
  if (o.models.empty()) throw Error("calibrate", "--model", "no model shapes to benchmark", "e.g. --model tiny");
  const double t0 = now_s();
  Bench B{backend, o};
  MicrobenchResult r;
  r.backend = backend.name();
  r.host = host_description();
  // The cpu backend's kernels run at the process-wide thread count its constructor set: the rates
  // below are for that count, which the profile records (validate compares runs at that count).
  if (r.backend == "cpu") r.threads = cpu::threads();
  r.date = utc_timestamp();
  const int64_t T = o.chunk_tokens;
  for (const auto& m : o.models) {
    const int64_t h = m.hidden, qd = m.q_dim(), kvd = m.kv_dim(), f = m.ffn_hidden, V = m.vocab;
    // Forward flops per layer pass of each shape (x count of identical projections), and the head's.
    struct S {
      const char* name;
      int64_t in, out;
      double count;
    };
    const double L = static_cast<double>(m.layers);
    std::vector<S> shapes = {{"q_proj", h, qd, 1}, {"kv_proj", h, kvd, 2}, {"o_proj", qd, h, 1},
                             {"mlp_gate_up", h, f, 2}, {"mlp_down", f, h, 1}};
    double total = 0;
    std::vector<GemmShape> mine;
    for (const auto& s : shapes) {
      GemmShape g{m.id + " " + s.name, T, s.in, s.out, L * s.count * static_cast<double>(s.in * s.out), {}, {}};
      total += g.weight * 5.0;
      mine.push_back(g);
    }
    // The LM head is large (vocab rows): a slice of the vocabulary and fewer rows keep one call
    // short in the same shape class; its weight in the mix is the full head's.
    const int64_t head_out = std::min<int64_t>(V, 16384);
    const int64_t head_rows =
        std::clamp<int64_t>(static_cast<int64_t>(2e8 / (2.0 * static_cast<double>(h * head_out))), 16, T);
    GemmShape head{m.id + " lm_head", head_rows, h, head_out, static_cast<double>(h * V), {}, {}};
    total += head.weight * 3.0;
    mine.push_back(head);
    for (auto& g : mine) {
      g.weight /= total;
      bench_gemm(B, g);
      r.gemms.push_back(g);
    }
    if (m.moe.present()) {
      // The routed experts' GEMMs at the rows one expert receives from a chunk with balanced
      // routing (T x top-k / experts): far thinner than the dense shapes, their own efficiency.
      const int64_t fe = m.moe.expert_ffn_hidden;
      const int64_t rows = std::max<int64_t>(1, T * m.moe.experts_per_token / m.moe.experts);
      std::vector<GemmShape> experts = {{m.id + " expert_gate_up", rows, h, fe, 2.0 * static_cast<double>(h * fe), {}, {}},
                                        {m.id + " expert_down", rows, fe, h, static_cast<double>(fe * h), {}, {}}};
      const double sum = experts[0].weight + experts[1].weight;
      for (auto& g : experts) {
        g.weight /= sum;
        bench_gemm(B, g);
        r.gemms.push_back(g);
      }
    }
    AttentionPoint p{m.id, std::min<int64_t>(T, 256), 2 * std::min<int64_t>(T, 256), m.q_heads, m.kv_heads,
                     m.head_dim, {}, {}};
    bench_attention(B, p, 64);
    r.attention.push_back(p);
  }
  // The compute peak: the best rate any compute op reached (on the cpu backend the blocked
  // attention kernels can outrun the GEMMs), so that every efficiency stays a fraction.
  for (const auto& g : r.gemms) r.peak_flops_per_s = std::max({r.peak_flops_per_s, g.fwd.median, g.bwd.median});
  for (const auto& p : r.attention) r.peak_flops_per_s = std::max({r.peak_flops_per_s, p.fwd.median, p.bwd.median});
  for (const auto& m : o.models) r.models.push_back(model_rates(m, r.gemms, r.attention));
  const auto& m0 = o.models.back();
  bench_memory_bound(B, r, T, m0.hidden, m0.ffn_hidden);
  bench_copies(B, r);
  r.seconds = now_s() - t0;
  return r;
}

Json device_profile(const MicrobenchResult& r, const std::string& id, int64_t capacity_bytes,
                    const std::string& model_for_efficiency) {
  OOMB_ASSERT(r.peak_flops_per_s > 0 && !r.models.empty(), "run_microbench first");
  double gemm = 0, attn = 0, attn_bwd = 0, n = 0, expert = 0, n_expert = 0;
  for (const auto& m : r.models) {
    if (!model_for_efficiency.empty() && m.model != model_for_efficiency) continue;
    if (m.expert_gemm_flops_per_s > 0) expert += m.expert_gemm_flops_per_s, n_expert += 1;
    gemm += m.gemm_flops_per_s;
    attn += m.attention_fwd_flops_per_s;
    attn_bwd += m.attention_bwd_flops_per_s;
    n += 1;
  }
  if (n == 0) throw Error("calibrate", model_for_efficiency, "was not benchmarked", "name one of the --model values");
  gemm /= n;
  attn /= n;
  attn_bwd /= n;
  const double peak = r.peak_flops_per_s;
  // Memory-bound ops on activation-sized tensors can beat the streaming figure (caches): the
  // bandwidth is the best of the two so that the efficiency stays a fraction.
  // Equal bytes through each op: the combined rate is the harmonic mean.
  const double mb = 3.0 / (1.0 / r.rmsnorm_bytes_per_s.median + 1.0 / r.swiglu_bytes_per_s.median +
                           1.0 / r.add_bytes_per_s.median);
  const double hbm = std::max(r.stream_bytes_per_s.median, mb);
  auto frac = [](double v) { return std::clamp(v, 1e-4, 1.0); };
  const double h2d = r.h2d_bytes_per_s.median, d2h = r.d2h_bytes_per_s.median;
  const double duplex = std::clamp(std::min(r.duplex_h2d_bytes_per_s.median / h2d, r.duplex_d2h_bytes_per_s.median / d2h), 0.05, 1.0);
  const std::string what = "oomb calibrate --backend " + r.backend + " on " + r.host + ", " + r.date;
  Json j = {{"schema", "oomb.gpu/1"},
            {"id", id},
            {"name", r.backend + " backend on " + r.host},
            {"kind", r.backend == "cpu" ? "cpu" : "gpu"},
            {"source", "measured by " + what + " (micro-benchmarks through the Backend interface)"},
            {"hbm_capacity_bytes", capacity_bytes},
            {"hbm_bytes_per_s", hbm},
            {"bf16_flops_per_s", peak},
            {"fp32_flops_per_s", peak},
            {"h2d_bytes_per_s", h2d},
            {"d2h_bytes_per_s", d2h},
            {"duplex_factor", duplex},
            {"copy_engines", 2},
            {"sm_count", static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency()))},
            {"reserved_bytes", int64_t{64} << 20},
            {"interconnect_bytes_per_s", 0.0},
            {"launch_overhead_s", r.op_overhead_s.median},
            {"default_host", "workstation-128g"},
            {"efficiency",
             {{"gemm", frac(gemm / peak)}, {"attention", frac(attn / peak)},
              {"attention_backward", frac(attn_bwd / peak)}, {"memory_bound", frac(mb / hbm)}, {"copy", 1.0}}},
            {"calibrated_from", r.host + ", " + r.date + " (" + r.backend + " backend micro-benchmarks)"},
            {"calibration", r.to_json()}};
  if (n_expert > 0) j["efficiency"]["expert_gemm"] = frac(expert / n_expert / peak);
  if (r.threads > 0) {
    j["cpu_threads"] = r.threads;
    j["name"] = r.backend + " backend on " + r.host + ", " + std::to_string(r.threads) + " compute thread" +
                (r.threads == 1 ? "" : "s");
  }
  j["sources"] = {
      {"bf16_flops_per_s", "the backend's compute peak: the best median rate measured over the benchmarked GEMM and "
                           "attention shapes (fp32 on the cpu backend; the key keeps the schema's name)"},
      {"hbm_bytes_per_s", "best of a 64 MiB copy (read + write bytes) and the memory-bound ops on activation-sized tensors"},
      {"efficiency.gemm", "step-mix GEMM rate (layer shapes x3 forward + backward, LM head) / peak" +
                              (model_for_efficiency.empty() ? std::string(", mean over the benchmarked models")
                                                            : ", shapes of " + model_for_efficiency)},
      {"efficiency.attention", "paged attention forward rate / peak"},
      {"efficiency.expert_gemm", n_expert > 0 ? "step-mix rate of the routed experts' GEMMs at the rows one expert "
                                                "receives (chunk x top-k / experts) / peak, mean over the MoE models"
                                              : "not measured (no MoE model benchmarked): equal to efficiency.gemm"},
      {"efficiency.attention_backward",
       "paged attention backward rate (flops counted as 2.5x the forward's, as the cost model does) / peak"},
      {"efficiency.memory_bound", "harmonic mean of the rmsnorm, swiglu and add rates / hbm_bytes_per_s"},
      {"h2d_bytes_per_s", "copy_async host -> device tier, 32 MiB in 4 regions"},
      {"d2h_bytes_per_s", "copy_async device -> host tier, 32 MiB in 4 regions"},
      {"duplex_factor", "per-direction rate with both directions at once / alone"},
      {"launch_overhead_s", "a 1-element add, call to return"},
      {"hbm_capacity_bytes", "half of the host's MemTotal (the cpu backend's device tier is host memory)"},
      {"reserved_bytes", "nominal 64 MiB (no context or library workspace on the cpu backend)"}};
  if (r.threads > 0)
    j["sources"]["cpu_threads"] = "the cpu backend's compute threads during the micro-benchmarks (oomb calibrate "
                                  "--threads; oomb validate compares only runs at this count)";
  return j;
}

std::string host_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) model = line.substr(colon + 2);
      break;
    }
  return model + ", " + std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " hardware threads";
}

int64_t host_ram_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (in >> key) {
    if (key == "MemTotal:") {
      in >> kb;
      return kb * 1024;
    }
    std::string rest;
    std::getline(in, rest);
  }
  return 0;
}

}  // namespace oomb::executor
