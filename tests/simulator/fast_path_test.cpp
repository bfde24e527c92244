// The fast path's memory side (simulator/cost.cpp, evaluate) prices the buffer table's figures
// (step::table_sizes) rather than the table; the event path prices the table. These tests hold the
// two forms and the two paths equal over a spread of configurations: oomb dense and sparse from 8K
// to 4M, the published preset (its own rows, pages in flight), the standard schedule, tensor and
// data parallelism on both backends, LoRA, partial checkpointing, checkpointing off, an allocated
// peak, an unfused loss, no offload and host-tier optimizers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "simulator/detail.h"
#include "simulator/simulator.h"
#include "step/allocator.h"
#include "simulator_test_util.h"

namespace oomb::simulator {
namespace {

struct Case {
  std::string label;
  Scenario s;
};

using testing::scenario;

std::vector<Case> spread() {
  constexpr int64_t K = 1024, M = 1024 * 1024;
  std::vector<Case> cases;
  auto add = [&](std::string label, Scenario s) { cases.push_back({std::move(label), std::move(s)}); };
  for (int64_t context : {8 * K, 64 * K, 4 * M}) {
    for (step::Attention attention : {step::Attention::dense, step::Attention::sparse}) {
      Scenario s = scenario("qwen2.5-7b", "h200", context);
      s.config.attention = attention;
      add("qwen2.5-7b " + std::to_string(context) + " " + to_string(attention), s);
    }
  }
  {
    Scenario s = scenario("qwen2.5-7b", "h200", M);
    s.config.attention = step::Attention::sparse;
    s.config.selection_memory = step::SelectionMemory::device;
    s.config.selection = "per-kv-head";
    add("sparse, per-kv-head selection, summaries on the device", s);
  }
  for (int64_t context : {8 * K, 64 * K, M}) {
    Scenario s = scenario("qwen2.5-7b", "h200", context);
    s.config = step::published_preset(s.config);
    s.config.context_tokens = context;
    if (context == M) s.config.attention = step::Attention::sparse;
    add("published " + std::to_string(context), s);
  }
  {
    Scenario s = scenario("qwen2.5-7b", "h200", 16 * K);
    s.config = step::published_preset(s.config);
    s.config.context_tokens = 16 * K;
    s.config.schedule = step::Schedule::standard;
    add("published standard", s);
  }
  {
    Scenario s = scenario("qwen2.5-7b", "h200", 64 * K);
    s.config.schedule = step::Schedule::standard;
    s.config.optimizer = step::Optimizer::gpu;
    add("standard, optimizer on the GPU", s);
  }
  for (const char* backend : {"gpu", "cpu"}) {
    Scenario s = scenario("tiny", "h200", 16 * K);
    s.gpu.kind = backend;
    s.config.gpus = 2;
    s.config.optimizer = step::Optimizer::gpu;
    add(std::string("tiny, 2 tensor-parallel GPUs, ") + backend + " profile", s);
    s.config.gpus = 1;
    s.config.data_parallel = 2;
    s.config.optimizer = step::Optimizer::host;  // the CPU backend's all-reduce staging: host, loss to optimizer
    add(std::string("tiny, 2 data-parallel replicas, ") + backend + " profile", s);
  }
  {
    Scenario s = scenario("qwen2.5-7b", "h200", 64 * K);
    s.config.data_parallel = 2;
    s.config.optimizer = step::Optimizer::gpu;
    add("qwen2.5-7b, 2 data-parallel replicas", s);
    s.config.data_parallel = 1;
    s.config.lora_rank = 16;
    add("LoRA rank 16", s);
    s.config.context_tokens = 4 * M;
    s.config.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    s.config.optimizer = step::Optimizer::host;
    add("LoRA rank 16, all linear, 4M, optimizer on the host", s);
  }
  for (int64_t context : {64 * K, 4 * M}) {
    Scenario s = scenario("qwen2.5-14b", "h200", context);
    s.config.kept_layers = 20;
    add("qwen2.5-14b, 20 kept layers, " + std::to_string(context), s);
  }
  {
    Scenario s = scenario("qwen2.5-7b", "h200", 64 * K);
    s.config.checkpointing = false;
    add("checkpointing off", s);
    s.config.checkpointing = true;
    s.config.resident_layers = 28;
    add("no offload", s);
    s.config.resident_layers = 2;
    s.config.context_tokens = 256 * K;
    s.config.logits_chunk_tokens = 0;
    s.config.loss_dtype = Dtype::bf16;
    add("unfused bf16 loss", s);
    s.config = step::Config{};
    s.config.context_tokens = M;
    s.config.peak_measure = step::PeakMeasure::allocated;
    add("allocated peak", s);
  }
  // Layer kinds and experts: sliding layers with experts (MXFP4 under LoRA), chunked layers whose
  // block is two chunks (periodic totals), sandwich norms with checkpointing off, a mixture whose
  // MLPs are all experts with partial checkpointing and sparse global layers.
  {
    Scenario s = scenario("gpt-oss-20b", "h200", 64 * K);
    add("gpt-oss-20b 64K", s);
    s.config.lora_rank = 16;
    s.config.lora_targets = {"q_proj", "v_proj"};
    s.config.context_tokens = M;
    add("gpt-oss-20b 1M LoRA", s);
    s = scenario("llama-4-scout", "h200", 64 * K);
    s.config.chunk_tokens = 4096;
    s.config.lora_rank = 8;
    s.config.lora_targets = {"q_proj"};
    add("llama-4-scout 64K chunk 4K LoRA", s);
    s = scenario("gemma-3-27b", "h200", 32 * K);
    s.config.checkpointing = false;
    s.config.chunk_tokens = 1024;
    add("gemma-3-27b 32K checkpointing off", s);
    s = scenario("qwen3-30b-a3b", "h200", 128 * K);
    s.config.kept_layers = 4;
    s.config.attention = step::Attention::sparse;
    s.config.page_budget = 16;
    add("qwen3-30b-a3b 128K sparse, 4 kept layers", s);
  }
  return cases;
}

void expect_equal_peaks(const step::BufferTable::PhasePeak& a, const step::BufferTable::PhasePeak& b) {
  EXPECT_EQ(a.phase, b.phase);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.breakdown, b.breakdown);
}

TEST(TableSizes, AreTheTablesRows) {
  for (const Case& k : spread()) {
    SCOPED_TRACE(k.label);
    const Scenario& s = k.s;
    const step::Geometry g = detail::geometry(s);
    const step::BufferTable t = detail::memory_table(s, g, false);
    const step::TableSizes z = detail::table_sizes(s, g);
    ASSERT_EQ(z.rows().size(), t.rows.size());
    for (size_t i = 0; i < t.rows.size(); ++i) {
      const step::BufferRow& r = t.rows[i];
      const step::RowSize& q = z.rows()[i];
      SCOPED_TRACE(r.name);
      EXPECT_EQ(q.name, r.name);
      EXPECT_EQ(to_string(q.category), r.category);
      EXPECT_EQ(q.tier, r.tier);
      EXPECT_EQ(q.bytes, r.bytes);
      EXPECT_EQ(q.phases, r.phases);
    }
    EXPECT_EQ(z.schedule, t.schedule);
    EXPECT_EQ(z.pages.kv_pool_pages, t.pages.kv_pool_pages);
    EXPECT_EQ(z.pages.grad_pool_pages, t.pages.grad_pool_pages);
    EXPECT_EQ(z.pages.kv_pool_capacity_pages, t.pages.kv_pool_capacity_pages);
    EXPECT_EQ(z.pages.max_union_pages, t.pages.max_union_pages);
    EXPECT_EQ(z.pages.pages_in_flight, t.pages.pages_in_flight);
    // Peaks, breakdowns and the arena layout from the figures (categories as an enum) equal those
    // from the rows (categories as text).
    expect_equal_peaks(z.device_peak(), t.device_peak());
    expect_equal_peaks(z.device_peak(false), t.device_peak(false));
    expect_equal_peaks(z.host_peak(), t.host_peak());
    const detail::MemoryFigures a = detail::memory_figures(z), b = detail::memory_figures(t);
    EXPECT_EQ(a.pinned_host_bytes, b.pinned_host_bytes);
    const step::allocator::ArenaLayout la = step::allocator::cuda_arena_layout(z.rows());
    const step::allocator::ArenaLayout lb = step::allocator::cuda_arena_layout(t.rows, false);
    EXPECT_EQ(la.buffer_peak_bytes, lb.buffer_peak_bytes);
    EXPECT_EQ(la.layout_bytes, lb.layout_bytes);
    EXPECT_EQ(la.block_bytes, lb.block_bytes);
  }
}

// EventPath.AgreesWithFastPath (simulator_test.cpp) holds the device peaks equal for oomb and
// standard steps of qwen-sized models; this holds every memory figure of the summary equal (device
// and host, pools, feasibility) over the spread above.
TEST(EventPath, MemoryAgreesWithFastPathAcrossConfigurations) {
  for (const Case& k : spread()) {
    SCOPED_TRACE(k.label);
    const Summary fast = evaluate(k.s);
    const EventResult ev = simulate_events(k.s, traces::Detail::step);
    EXPECT_EQ(ev.summary.peak_device_bytes, fast.peak_device_bytes);
    EXPECT_EQ(ev.summary.peak_phase, fast.peak_phase);
    EXPECT_EQ(ev.summary.device_breakdown_bytes, fast.device_breakdown_bytes);
    EXPECT_EQ(ev.summary.peak_host_bytes, fast.peak_host_bytes);
    EXPECT_EQ(ev.summary.host_breakdown_bytes, fast.host_breakdown_bytes);
    EXPECT_EQ(ev.summary.device_pool_pages, fast.device_pool_pages);
    EXPECT_EQ(ev.summary.kv_pool_pages, fast.kv_pool_pages);
    EXPECT_EQ(ev.summary.grad_pool_pages, fast.grad_pool_pages);
    EXPECT_EQ(ev.summary.max_union_pages, fast.max_union_pages);
    EXPECT_EQ(ev.summary.pages_in_flight, fast.pages_in_flight);
    EXPECT_EQ(ev.summary.feasible, fast.feasible);
    EXPECT_EQ(ev.trace.summary.peak_device_bytes, fast.peak_device_bytes);
  }
}

}  // namespace
}  // namespace oomb::simulator
