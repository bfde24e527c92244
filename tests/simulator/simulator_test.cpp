#include "simulator/simulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace oomb::simulator {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// Fast path vs event path: same costs, different scheduling (steady-state bound vs timeline).
constexpr double kPathAgreement = 0.05;

Scenario scenario(const std::string& model, const std::string& gpu, int64_t context) {
  Scenario s;
  s.model = models::load_model(model);
  s.gpu = models::load_gpu(gpu);
  s.host = models::load_host(s.gpu.default_host);
  s.config.context_tokens = context;
  return s;
}

int64_t row_bytes(const MemoryTable& t, const std::string& name) {
  for (const auto& r : t.rows)
    if (r.name == name) return r.bytes;
  ADD_FAILURE() << "no row " << name;
  return -1;
}

TEST(MemoryModel, Qwen7bHandComputedRows) {
  auto s = scenario("qwen2.5-7b", "h200", 4 * 1024 * 1024);
  auto t = memory_table(s);
  // 7,615,616,512 parameters x 2 bytes.
  EXPECT_EQ(row_bytes(t, "weights"), 15231233024);
  EXPECT_EQ(row_bytes(t, "parameter_gradients"), 15231233024);
  // One KV page: 128 tokens x 2 (K, V) x 4 heads x 128 dims x 2 bytes = 256 KiB; gradient page in fp32 = 512 KiB.
  EXPECT_EQ(t.pages.kv_page_bytes, 262144);
  EXPECT_EQ(t.pages.grad_page_bytes, 524288);
  // Dense, 2 resident layers: each slot holds the whole prefix (32768 pages) at the last chunk.
  EXPECT_EQ(t.pages.kv_pool_pages, 2 * 32768);
  EXPECT_EQ(row_bytes(t, "kv_pool"), 16 * kGiB);
  EXPECT_EQ(row_bytes(t, "kv_grad_pool"), 32 * kGiB);
  // Host: K+V = 57,344 B/token (ALGORITHM.md), fp32 gradients twice that: 672 GiB at 4M tokens.
  EXPECT_EQ(row_bytes(t, "host_kv_pages"), 57344LL * 4 * 1024 * 1024);
  EXPECT_EQ(row_bytes(t, "host_kv_pages") + row_bytes(t, "host_kv_grad_pages"), 672 * kGiB);
  // Layer-input checkpoints: 28 layers x 4096 tokens x 3584 x 2 bytes.
  EXPECT_EQ(row_bytes(t, "layer_input_checkpoints"), 28LL * 4096 * 3584 * 2);
  // Unfused per-chunk loss: 4096 x 152064 x (2 + 4 + 4) bytes.
  EXPECT_EQ(row_bytes(t, "logits_and_loss"), 4096LL * 152064 * 10);
  // bf16 gradients: 448 GiB of host memory.
  s.config.kv_grad_dtype = "bf16";
  t = memory_table(s);
  EXPECT_EQ(row_bytes(t, "host_kv_pages") + row_bytes(t, "host_kv_grad_pages"), 448 * kGiB);
}

TEST(MemoryModel, TotalsAreTheSumOfRows) {
  auto s = scenario("qwen2.5-7b", "h200", 1 << 20);
  s.config.attention = Attention::sparse;
  auto t = memory_table(s);
  auto sum = evaluate(s);
  int64_t dev = 0, host = 0;
  for (const auto& r : t.rows) (r.tier == Tier::device ? dev : host) += r.bytes;
  EXPECT_EQ(sum.peak_device_bytes, dev);
  EXPECT_EQ(sum.peak_host_bytes, host);
  int64_t breakdown = 0;
  for (const auto& [k, v] : sum.device_breakdown_bytes) breakdown += v;
  EXPECT_EQ(breakdown, dev);
}

TEST(MemoryModel, NoOffloadKeepsEveryPageOnTheDevice) {
  auto s = scenario("tiny", "h200", 1000);
  s.config.chunk_tokens = 256;
  s.config.page_tokens = 64;
  s.config.resident_layers = 2;  // == layers: no offload
  auto pc = page_counts(s);
  EXPECT_EQ(pc.pages_per_layer, 16);  // ceil(1000 / 64)
  EXPECT_EQ(pc.kv_pool_pages, 2 * 16);
  EXPECT_EQ(pc.host_kv_pages, 0);
  auto sum = evaluate(s);
  EXPECT_EQ(sum.h2d_bytes, 0);
  EXPECT_EQ(sum.d2h_bytes, 0);
}

TEST(MemoryModel, RaggedChunksAndPagesCountWholePages) {
  auto s = scenario("qwen2.5-0.5b", "h200", 37);
  s.config.chunk_tokens = 16;
  s.config.page_tokens = 8;
  s.config.resident_layers = 1;
  auto pc = page_counts(s);
  EXPECT_EQ(pc.chunks, 3);
  EXPECT_EQ(pc.pages_per_layer, 5);
  EXPECT_EQ(pc.kv_pool_pages, 5);  // one slot: prefix 4 pages + own 1 (ragged) at the last chunk
}

TEST(CopyVolume, DenseOffloadMatchesScheduleFormula) {
  // docs/schedule.md: per layer, stage 1 moves KV(prefix) in and KV(own) out; stage 2 moves
  // KV(prefix) in twice, dKV(prefix + own) in and dKV(prefix) out.
  auto s = scenario("qwen2.5-0.5b", "h200", 10000);
  s.config.chunk_tokens = 1024;
  s.config.page_tokens = 128;
  s.config.resident_layers = 2;
  auto pc = page_counts(s);
  const int64_t n = 10, L = pc.layers, kv = pc.kv_page_bytes, gr = pc.grad_page_bytes, P = 79;  // ceil(10000/128)
  int64_t h2d = 0, d2h = 0;
  for (int64_t c = 0; c < n; ++c) {
    int64_t pre = c * 8, own = std::min<int64_t>(P, (c + 1) * 8) - pre;
    h2d += L * (pre * kv + pre * kv + pre * kv + (pre + own) * gr);
    d2h += L * (own * kv + pre * gr);
  }
  auto sum = evaluate(s);
  EXPECT_EQ(sum.h2d_bytes, h2d);
  EXPECT_EQ(sum.d2h_bytes, d2h);
  auto ev = simulate_events(s, traces::Detail::layer);
  EXPECT_EQ(ev.summary.h2d_bytes, h2d);
  EXPECT_EQ(ev.summary.d2h_bytes, d2h);
}

TEST(Invariants, SparseDevicePeakIsNearlyFlatInContext) {
  auto s = scenario("qwen2.5-7b", "h200", 256 * 1024);
  s.config.attention = Attention::sparse;
  const int64_t small = evaluate(s).peak_device_bytes;
  s.config.context_tokens = 8 * 1024 * 1024;
  const int64_t large = evaluate(s).peak_device_bytes;
  // 32x the context; bounded selection memory keeps the device peak within 1%.
  EXPECT_LT(static_cast<double>(large - small) / static_cast<double>(small), 0.01);
  // The published selection memory grows with N (page summaries and scores on the GPU).
  s.config.selection_memory = SelectionMemory::device;
  const int64_t published_large = evaluate(s).peak_device_bytes;
  EXPECT_GT(published_large, large + kGiB);
}

TEST(Invariants, DenseStepTimeIsSuperlinearStandardMemoryLinear) {
  auto s = scenario("qwen2.5-7b", "h200", 256 * 1024);
  const double t1 = evaluate(s).step_s;
  s.config.context_tokens *= 4;
  const double t4 = evaluate(s).step_s;
  EXPECT_GT(t4 / t1, 6.0);  // attention dominates: ~quadratic

  auto st = scenario("qwen2.5-7b", "h200", 64 * 1024);
  st.config.schedule = Schedule::standard;
  const int64_t m1 = evaluate(st).peak_device_bytes;
  st.config.context_tokens *= 2;
  const int64_t m2 = evaluate(st).peak_device_bytes;
  st.config.context_tokens *= 2;
  const int64_t m4 = evaluate(st).peak_device_bytes;
  // Linear growth: equal increments per equal step in N (up to the constant terms).
  EXPECT_NEAR(static_cast<double>(m4 - m2) / static_cast<double>(m2 - m1), 2.0, 1e-9);
}

TEST(Invariants, StandardRunsOutOfMemoryWhereOombFits) {
  auto s = scenario("qwen2.5-7b", "h200", 1 << 20);
  s.config.schedule = Schedule::standard;
  auto std_sum = evaluate(s);
  EXPECT_FALSE(std_sum.feasible);
  EXPECT_EQ(std_sum.binding_constraint, "device memory");
  s.config.schedule = Schedule::oomb;
  EXPECT_TRUE(evaluate(s).feasible);
}

TEST(Invariants, HostMemoryBindsOnASmallHost) {
  auto s = scenario("qwen2.5-7b", "h200", 4 * 1024 * 1024);
  s.host = models::load_host("workstation-128g");
  auto sum = evaluate(s);
  EXPECT_FALSE(sum.feasible);
  EXPECT_EQ(sum.binding_constraint, "pinned host memory");
  ASSERT_FALSE(sum.notes.empty());
}

TEST(EventPath, StreamsNeverOverlapAndDependenciesHold) {
  auto s = scenario("qwen2.5-0.5b", "h200", 64 * 1024);
  s.config.chunk_tokens = 4096;
  s.config.resident_layers = 2;
  auto r = simulate_events(s, traces::Detail::layer);
  std::map<std::string, int64_t> stream_end;
  std::map<std::tuple<int, int64_t, int64_t, std::string>, int64_t> copy_in_end;
  for (const auto& e : r.trace.events) {
    ASSERT_GE(e.end_ns, e.start_ns);
    ASSERT_GE(e.start_ns, stream_end[e.stream]) << "overlap on " << e.stream;
    stream_end[e.stream] = e.end_ns;
    if (e.kind == traces::EventKind::copy_h2d) copy_in_end[{e.stage, e.chunk, e.layer, e.op}] = e.end_ns;
    if (e.kind == traces::EventKind::compute && e.layer >= 0) {
      auto it = copy_in_end.find({e.stage, e.chunk, e.layer, e.op});
      if (it != copy_in_end.end()) {
        EXPECT_GE(e.start_ns, it->second) << "compute before its pages arrived";
      }
    }
  }
  // The pool occupancy seen over time never exceeds the allocated pools.
  EXPECT_LE(r.trace.summary.pool_pages_peak, r.summary.device_pool_pages);
  EXPECT_GT(r.trace.summary.pool_pages_peak, 0);
}

TEST(EventPath, AgreesWithFastPath) {
  struct Case {
    const char* model;
    int64_t context;
    Attention attention;
    int64_t resident;
    Schedule schedule;
  };
  for (const Case& k : {Case{"qwen2.5-7b", 256 * 1024, Attention::dense, 2, Schedule::oomb},
                        Case{"qwen2.5-7b", 1 << 20, Attention::sparse, 2, Schedule::oomb},
                        Case{"qwen2.5-7b", 128 * 1024, Attention::dense, 1, Schedule::oomb},
                        Case{"qwen2.5-7b", 64 * 1024, Attention::dense, 3, Schedule::oomb},
                        Case{"llama-3.1-8b", 512 * 1024, Attention::sparse, 2, Schedule::oomb},
                        Case{"qwen2.5-7b", 512 * 1024, Attention::dense, 28, Schedule::oomb},
                        Case{"qwen2.5-0.5b", 32 * 1024, Attention::dense, 2, Schedule::standard}}) {
    auto s = scenario(k.model, "h200", k.context);
    s.config.attention = k.attention;
    s.config.resident_layers = k.resident;
    s.config.schedule = k.schedule;
    auto fast = evaluate(s);
    auto ev = simulate_events(s, traces::Detail::chunk);
    SCOPED_TRACE(std::string(k.model) + " " + std::to_string(k.context));
    EXPECT_NEAR(ev.summary.step_s / fast.step_s, 1.0, kPathAgreement);
    std::printf("  %s %lld %s R=%lld: event/fast step ratio %.4f\n", k.model, static_cast<long long>(k.context),
                to_string(k.attention), static_cast<long long>(k.resident), ev.summary.step_s / fast.step_s);
    EXPECT_NEAR(ev.summary.compute_s / fast.compute_s, 1.0, 1e-9);
    EXPECT_EQ(ev.summary.h2d_bytes, fast.h2d_bytes);
    EXPECT_EQ(ev.summary.d2h_bytes, fast.d2h_bytes);
    EXPECT_EQ(ev.summary.peak_device_bytes, fast.peak_device_bytes);
  }
}

TEST(EventPath, AgreesWithFastPathWhenCopiesBind) {
  // A slow host link makes copies, not compute, the bottleneck.
  for (int64_t resident : {1, 2, 4}) {
    auto s = scenario("qwen2.5-7b", "h200", 256 * 1024);
    s.gpu.h2d_bytes_per_s = s.gpu.d2h_bytes_per_s = 4e9;
    s.config.resident_layers = resident;
    auto fast = evaluate(s);
    auto ev = simulate_events(s, traces::Detail::step);
    EXPECT_GT(fast.exposed_copy_s, 0.2 * fast.step_s) << resident;
    EXPECT_NEAR(ev.summary.step_s / fast.step_s, 1.0, kPathAgreement) << resident;
    std::printf("  copy-bound R=%lld: event/fast step ratio %.4f\n", static_cast<long long>(resident),
                ev.summary.step_s / fast.step_s);
  }
}

TEST(Optimizer, UpdateCostsAndPlacement) {
  auto s = scenario("qwen2.5-7b", "h200", 256 * 1024);
  const auto none = evaluate(s);
  s.config.optimizer = Optimizer::gpu;
  const auto gpu = evaluate(s);
  s.config.optimizer = Optimizer::host;
  const auto host = evaluate(s);
  // AdamW on the GPU: 12 bytes/param of state (m, v, fp32 master) and an HBM-bound update.
  EXPECT_EQ(gpu.peak_device_bytes - none.peak_device_bytes, 7615616512LL * 12);
  const double params = 7615616512.0;
  const double gpu_update = params * 28 / (4.8e12 * 0.8);
  EXPECT_NEAR(gpu.step_s - none.step_s, gpu_update, 1e-6);
  // On the host: gradients out, a host-DRAM-bound update, parameters back in.
  EXPECT_EQ(host.peak_device_bytes, none.peak_device_bytes);
  EXPECT_EQ(host.d2h_bytes - none.d2h_bytes, 7615616512LL * 2);
  const double host_extra = params * 2 / 55e9 + params * 28 / 614e9 + params * 2 / 55e9;
  EXPECT_NEAR(host.step_s - none.step_s, host_extra, 1e-6);
  auto ev = simulate_events(s, traces::Detail::chunk);
  EXPECT_NEAR(ev.summary.step_s / host.step_s, 1.0, kPathAgreement);
}

TEST(Config, BadInputNamesTheFlag) {
  auto s = scenario("qwen2.5-7b", "h200", 4096);
  s.config.chunk_tokens = 1000;
  try {
    evaluate(s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "--chunk");
  }
  s = scenario("qwen2.5-7b", "h200", 4096);
  s.config.attention = Attention::sparse;
  s.config.page_budget = 0;
  EXPECT_THROW(evaluate(s), Error);
  s = scenario("qwen2.5-7b", "h200", 4096);
  s.config.gpus = 3;
  EXPECT_THROW(evaluate(s), Error);
  s = scenario("qwen2.5-7b", "h200", int64_t{1} << 50);
  EXPECT_THROW(evaluate(s), Error);
}

TEST(Presets, PublishedConfiguration) {
  Config c = published_preset(Config{});
  EXPECT_EQ(c.chunk_tokens, 4096);
  EXPECT_EQ(c.page_tokens, 128);
  EXPECT_EQ(c.page_budget, 64);
  EXPECT_EQ(c.resident_layers, 2);
  EXPECT_EQ(c.kv_grad_dtype, "fp32");
  EXPECT_EQ(c.param_grad_dtype, "bf16");
  EXPECT_EQ(c.optimizer, Optimizer::none);
  EXPECT_EQ(c.peak_measure, PeakMeasure::allocated);
  EXPECT_EQ(c.selection_memory, SelectionMemory::device);
  // The published 4M sparse run fits in an H200 with the host memory ALGORITHM.md derives.
  auto s = scenario("qwen2.5-7b", "h200", 4 * 1024 * 1024);
  s.config = published_preset(s.config);
  s.config.attention = Attention::sparse;
  auto sum = evaluate(s);
  EXPECT_TRUE(sum.feasible);
  EXPECT_LT(sum.peak_device_bytes, 141000000000LL);
  EXPECT_NEAR(static_cast<double>(sum.peak_host_bytes) / kGiB, 672.0, 0.1);
  // Config JSON round trip.
  Config back = config_from_json(s.config.to_json(), "test");
  EXPECT_EQ(back.to_json(), s.config.to_json());
}

}  // namespace
}  // namespace oomb::simulator
