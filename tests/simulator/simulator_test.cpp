#include "simulator/simulator.h"
#include "simulator/detail.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "simulator_test_util.h"

namespace oomb::simulator {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
// Fast path vs event path: same costs, different scheduling (steady-state bound vs timeline).
constexpr double kPathAgreement = 0.05;

using testing::scenario;

int64_t row_bytes(const step::BufferTable& t, const std::string& name) {
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
  // Unfused per-chunk loss: bf16 logits, fp32 upcast and fp32 gradient, 4096 x 152064 x (2 + 4 + 4) bytes.
  EXPECT_EQ(row_bytes(t, "logits"), 4096LL * 152064 * 2);
  EXPECT_EQ(row_bytes(t, "logits_upcast"), 4096LL * 152064 * 4);
  EXPECT_EQ(row_bytes(t, "logits_gradient"), 4096LL * 152064 * 4);
  // bf16 gradients: 448 GiB of host memory.
  s.config.kv_grad_dtype = Dtype::bf16;
  t = memory_table(s);
  EXPECT_EQ(row_bytes(t, "host_kv_pages") + row_bytes(t, "host_kv_grad_pages"), 448 * kGiB);
}

TEST(MemoryModel, TotalsAreThePeakOverPhasesOfTheRows) {
  for (step::Schedule schedule : {step::Schedule::oomb, step::Schedule::standard})
  for (bool checkpointing : {true, false}) {
    auto s = scenario("qwen2.5-7b", "h200", schedule == step::Schedule::oomb ? 1 << 20 : 32 << 10);
    s.config.schedule = schedule;
    s.config.checkpointing = checkpointing;
    if (schedule == step::Schedule::oomb) s.config.attention = step::Attention::sparse;
    auto t = memory_table(s);
    auto sum = evaluate(s);
    SCOPED_TRACE(std::string(to_string(schedule)) + (checkpointing ? " checkpointing" : " no checkpointing"));
    // Every row lives in at least one phase of its schedule, and in no other.
    for (const auto& r : t.rows) {
      EXPECT_NE(r.phases, 0u) << r.name;
      EXPECT_EQ(r.phases & ~step::all_phases(schedule), 0u) << r.name;
    }
    int64_t peak = 0, host = 0, sum_of_rows = 0;
    std::string phase;
    for (step::Phase p : step::phases_of(schedule)) {
      int64_t live = 0;
      for (const auto& r : t.rows)
        if (r.tier == step::Tier::device && (r.phases & step::phase_bit(p))) live += r.bytes;
      if (live > peak) peak = live, phase = to_string(p);
    }
    for (const auto& r : t.rows) (r.tier == step::Tier::device ? sum_of_rows : host) += r.bytes;
    EXPECT_EQ(sum.peak_device_bytes, peak);
    EXPECT_EQ(sum.peak_phase, phase);
    EXPECT_LT(peak, sum_of_rows);  // buffers of different phases do not add up
    EXPECT_EQ(sum.peak_host_bytes, host);  // host rows live for the whole step
    int64_t breakdown = 0;
    for (const auto& [k, v] : sum.device_breakdown_bytes) breakdown += v;
    EXPECT_EQ(breakdown, peak);
    EXPECT_EQ(to_json(sum).at("peak_phase"), phase);
  }
}

// The rows alive in one phase: name -> bytes.
std::map<std::string, int64_t> live_set(const step::BufferTable& t, step::Phase p) {
  std::map<std::string, int64_t> m;
  for (const auto& r : t.rows)
    if (r.tier == step::Tier::device && (r.phases & step::phase_bit(p))) m[r.name] = r.bytes;
  return m;
}

int64_t total_of(const std::map<std::string, int64_t>& m) {
  int64_t v = 0;
  for (const auto& [k, b] : m) v += b;
  return v;
}

// Qwen2.5-7B (28 layers, hidden 3584, 28 q heads, 4 kv heads, head_dim 128: q_dim 3584, kv_dim 512;
// ffn 18944, vocab 152064; 7,615,616,512 parameters) on the h200 profile (reserve 1,610,612,736 B),
// default knobs: bf16 weights, gradients and activations, checkpointing on, no optimizer, unfused
// loss with loss dtype fp32, peak measured as reserved. Per token of one layer: activations 4H + 2 q_dim
// + 2 kv_dim + 3 ffn = 79,360 values, backward temporaries 3H + ... = 75,776 values.
constexpr int64_t kQwen7bParams = 7615616512;
constexpr int64_t kH200Reserve = 1610612736;
constexpr int64_t kGemmWorkspace = 33554432;

TEST(PhasePeak, StandardQwen7b64kHoldsThePeakInTheLossHandComputed) {
  auto s = scenario("qwen2.5-7b", "h200", 64 * 1024);
  s.config.schedule = step::Schedule::standard;
  const auto t = memory_table(s);
  const int64_t N = 65536;
  // Live in the loss phase: every-phase rows, the last layer's output, the layer-input checkpoints,
  // the hidden gradients, final norm, bf16 logits, their fp32 upcast and fp32 gradient over N tokens.
  const std::map<std::string, int64_t> loss = {
      {"weights", kQwen7bParams * 2},
      {"parameter_gradients", kQwen7bParams * 2},
      {"token_ids", 2 * N * 4},                               // 524,288
      {"hidden_states", N * 3584 * 2},                        // 469,762,048
      {"layer_input_checkpoints", 28 * N * 3584 * 2},         // 13,153,337,344
      {"hidden_gradients", 2 * N * 3584 * 2},                 // 939,524,096
      {"final_norm", 2 * N * 3584 * 2},                       // 939,524,096
      {"final_norm_rstd", N * 4},                             // 262,144
      {"logits", N * 152064 * 2},                             // 19,931,332,608
      {"logits_upcast", N * 152064 * 4},                      // 39,862,665,216
      {"logits_gradient", N * 152064 * 4},                    // 39,862,665,216
      {"gemm_workspace", kGemmWorkspace},
      {"runtime_reserve", kH200Reserve}};
  EXPECT_EQ(live_set(t, step::Phase::loss), loss);
  EXPECT_EQ(total_of(loss), 147266230272);
  // The other phases, by hand: forward keeps one layer's working set instead of the loss rows;
  // backward adds the layer's backward temporaries.
  EXPECT_EQ(t.device_bytes_in(step::Phase::forward), 56139995136);
  EXPECT_EQ(t.device_bytes_in(step::Phase::backward), 66541869056);
  EXPECT_EQ(t.device_bytes_in(step::Phase::optimizer), 32107157504);
  const auto peak = t.device_peak();
  EXPECT_EQ(peak.phase, step::Phase::loss);
  EXPECT_EQ(peak.bytes, 147266230272);
  EXPECT_EQ(peak.breakdown.at("logits"), 939524096 + 262144 + 19931332608LL + 2 * 39862665216LL);
  EXPECT_EQ(peak.breakdown.count("layer_working_set"), 1u);  // the hidden gradients
  EXPECT_EQ(peak.breakdown.at("layer_working_set"), 939524096);
  const auto sum = evaluate(s);
  EXPECT_EQ(sum.peak_device_bytes, 147266230272);
  EXPECT_EQ(sum.peak_phase, "loss");
  EXPECT_EQ(sum.device_breakdown_bytes, peak.breakdown);
  // The published baseline (bf16 logits and cross-entropy): no fp32 upcast, the gradient in bf16
  // (half of 39,862,665,216): 87,472,232,448 B, still in the loss.
  s.config.loss_dtype = Dtype::bf16;
  const auto bf16 = evaluate(s);
  EXPECT_EQ(bf16.peak_device_bytes, 147266230272 - N * 152064 * 4 - N * 152064 * 2);
  EXPECT_EQ(bf16.peak_device_bytes, 87472232448);
  EXPECT_EQ(bf16.peak_phase, "loss");
}

TEST(PhasePeak, OombQwen7bChunk4kHandComputed) {
  // Context 64K, chunk 4096, page 128, dense, 2 resident layers (offload): each slot holds the last
  // chunk's prefix and own pages, 15 x 32 + 32 = 512 pages; 1024 KV pages of 256 KiB, 1024 fp32
  // gradient pages of 512 KiB. The CUDA backend's op scratch is its LM-head backward
  // (step/cuda_scratch.h): the fp32 loss gradient staged as bf16 for the bf16 GEMMs (4096 x 152064 x
  // 2 = 1,245,708,288) and the fp32 dW of the bf16 gradient (3584 x 152064 x 4 = 2,179,989,504).
  auto s = scenario("qwen2.5-7b", "h200", 64 * 1024);
  s.config.chunk_tokens = 4096;
  const auto t = memory_table(s);
  const int64_t C = 4096;
  const int64_t dw_fallback = int64_t{3584} * 152064 * 4;
  const int64_t op_scratch = C * 152064 * 2 + dw_fallback;  // 3,425,697,792
  const std::map<std::string, int64_t> every = {
      {"weights", kQwen7bParams * 2},
      {"parameter_gradients", kQwen7bParams * 2},
      {"token_ids", 2 * C * 4},               // 32,768
      {"hidden_states", 2 * C * 3584 * 2},    // 58,720,256
      {"kv_pool", 1024 * 262144},             // 268,435,456
      {"kv_grad_pool", 1024 * 524288},        // 536,870,912
      {"gemm_workspace", kGemmWorkspace},
      {"op_scratch", op_scratch},
      {"runtime_reserve", kH200Reserve},
      // The device arena's one block (step/allocator.h): the arena's rows peak in the loss phase
      // (43,564,472,320 - workspace - op scratch - reserve = 38,494,607,360 bytes); + 8 MiB, up to
      // a multiple of 2 MiB: 38,503,710,720, so 9,103,360 bytes beyond the buffers.
      {"allocator_blocks", 9103360}};
  EXPECT_EQ(live_set(t, step::Phase::optimizer), every);
  EXPECT_EQ(total_of(every), 36396390400 + 9103360);
  std::map<std::string, int64_t> loss = every;
  loss.insert({{"layer_input_checkpoints", 28 * C * 3584 * 2},  // 822,083,584
               {"hidden_gradients", 2 * C * 3584 * 2},          // 58,720,256
               {"final_norm", 2 * C * 3584 * 2},                // 58,720,256
               {"final_norm_rstd", C * 4},
               {"logits", C * 152064 * 2},                      // 1,245,708,288
               {"logits_upcast", C * 152064 * 4},               // 2,491,416,576
               {"logits_gradient", C * 152064 * 4}});
  EXPECT_EQ(live_set(t, step::Phase::loss), loss);
  EXPECT_EQ(total_of(loss), 43564472320 + 9103360);
  std::map<std::string, int64_t> backward = every;
  backward.insert({{"layer_input_checkpoints", 28 * C * 3584 * 2},
                   {"hidden_gradients", 2 * C * 3584 * 2},
                   {"layer_activations", C * 79360 * 2},            // 650,117,120
                   {"layer_norm_rstd", 2 * C * 4},
                   {"attention_lse", C * 28 * 4},                   // 458,752
                   {"layer_backward_temporaries", C * 75776 * 2}});  // 620,756,992
  EXPECT_EQ(live_set(t, step::Phase::backward), backward);
  EXPECT_EQ(total_of(backward), 38548559872 + 9103360);
  EXPECT_EQ(t.device_bytes_in(step::Phase::fill), 36396390400 + 9103360 + 650117120 + 32768 + 458752);
  EXPECT_EQ(t.device_bytes_in(step::Phase::recompute),
            36396390400 + 9103360 + 822083584 + 58720256 + 650117120 + 32768 + 458752);
  auto sum = evaluate(s);
  EXPECT_EQ(sum.peak_phase, "loss");
  EXPECT_EQ(sum.peak_device_bytes, 43564472320 + 9103360);
  // Fused 1K tiles (fp32): the staging is one tile's (1024 x 152064 x 2) and the loss shrinks to
  // 36,396,390,400 - 934,281,216 (the smaller staging) + 939,540,480 + 1024 x 152064 x 4 =
  // 37,024,503,808; the layer backward holds the peak. The arena's rows now peak in the backward
  // (33,478,694,912 bytes): its block is 8,628,224 bytes beyond them.
  s.config.logits_chunk_tokens = 1024;
  const auto fused = memory_table(s);
  EXPECT_EQ(row_bytes(fused, "logits"), 1024LL * 152064 * 4);
  EXPECT_EQ(row_bytes(fused, "op_scratch"), 1024LL * 152064 * 2 + dw_fallback);
  EXPECT_EQ(fused.device_bytes_in(step::Phase::loss), 37024503808 + 8628224);
  sum = evaluate(s);
  EXPECT_EQ(sum.peak_phase, "backward");
  EXPECT_EQ(sum.peak_device_bytes, 38548559872 - 934281216 + 8628224);
  EXPECT_EQ(sum.device_breakdown_bytes.count("logits"), 0u);  // freed before the layer backward
}

TEST(MemoryModel, CpuProfileHasNoGpuImplementationRows) {
  for (auto memory : {step::SelectionMemory::device, step::SelectionMemory::bounded}) {
    auto s = scenario("tiny", "h200", 8192);
    s.config.chunk_tokens = 1024;
    s.config.page_tokens = 64;
    s.config.resident_layers = 1;
    s.config.attention = step::Attention::sparse;
    s.config.page_budget = 8;
    s.config.selection_memory = memory;
    const auto gpu = memory_table(s);
    s.gpu.kind = "cpu";
    const auto cpu = memory_table(s);
    std::set<std::string> gpu_names, cpu_names;
    for (const auto& r : gpu.rows) gpu_names.insert(r.name);
    for (const auto& r : cpu.rows) cpu_names.insert(r.name);
    // The CUDA backend's own rows (its workspace and op scratch, which holds the selection's
    // scores; its pinned host buffers) and the context; nothing of the published implementation's
    // (page tables, score matrices: --preset oomb-published, below).
    const std::set<std::string> gpu_only = {"gemm_workspace",    "op_scratch",    "runtime_reserve", "allocator_blocks",
                                            "host_staging_ring", "host_readback", "host_loss_slots"};
    std::set<std::string> missing;
    for (const auto& n : gpu_names)
      if (!cpu_names.count(n)) missing.insert(n);
    EXPECT_EQ(missing, gpu_only);
    for (const auto& n : cpu_names) EXPECT_TRUE(gpu_names.count(n)) << n;
    // What stays is the same on both (the CPU backend stores what a GPU run stores).
    for (const auto& r : cpu.rows) EXPECT_EQ(r.bytes, row_bytes(gpu, r.name)) << r.name;
    EXPECT_EQ(gpu_names.count("page_summaries"), memory == step::SelectionMemory::device ? 1u : 0u);
    EXPECT_EQ(cpu_names.count("host_page_summaries"), memory == step::SelectionMemory::bounded ? 1u : 0u);
    // The published implementation keeps its score matrix and page tables on the GPU.
    s.gpu.kind = "gpu";
    s.config.implementation = step::Implementation::published;
    std::set<std::string> published;
    for (const auto& r : memory_table(s).rows) published.insert(r.name);
    const std::set<std::string> published_only =
        memory == step::SelectionMemory::device
            ? std::set<std::string>{"page_tables", "selection_scores", "selection_record"}
            : std::set<std::string>{"page_tables", "summary_tiles", "selection_scores", "selection_record_slot",
                                    "host_selection_record"};
    for (const auto& n : published_only) EXPECT_TRUE(published.count(n)) << n;
    EXPECT_FALSE(published.count("op_scratch"));
  }
}

TEST(MemoryModel, LossDtypeSetsTheLogitsRows) {
  auto s = scenario("tiny", "h200", 4096);
  s.config.chunk_tokens = 1024;
  s.config.page_tokens = 64;
  const int64_t V = s.model.vocab;
  auto dtype_of = [](const step::BufferTable& t, const std::string& name) {
    for (const auto& r : t.rows)
      if (r.name == name) return std::string(to_string(r.dtype));
    return std::string("absent");
  };
  // Unfused, fp32 loss: bf16 LM-head output, its fp32 upcast and an fp32 gradient.
  auto t = memory_table(s);
  EXPECT_EQ(row_bytes(t, "logits"), 1024 * V * 2);
  EXPECT_EQ(dtype_of(t, "logits"), "bf16");
  EXPECT_EQ(row_bytes(t, "logits_upcast"), 1024 * V * 4);
  EXPECT_EQ(dtype_of(t, "logits_gradient"), "fp32");
  EXPECT_EQ(row_bytes(t, "logits_gradient"), 1024 * V * 4);
  // bf16 loss (published): no upcast, a bf16 gradient.
  s.config.loss_dtype = Dtype::bf16;
  t = memory_table(s);
  EXPECT_EQ(dtype_of(t, "logits_upcast"), "absent");
  EXPECT_EQ(row_bytes(t, "logits_gradient"), 1024 * V * 2);
  EXPECT_EQ(dtype_of(t, "logits_gradient"), "bf16");
  // fp32 activations and fp32 loss: nothing to upcast.
  s.config.loss_dtype = Dtype::fp32;
  s.config.activation_dtype = Dtype::fp32;
  t = memory_table(s);
  EXPECT_EQ(dtype_of(t, "logits_upcast"), "absent");
  EXPECT_EQ(row_bytes(t, "logits"), 1024 * V * 4);
  // Fused tiles: one [tile, V] buffer in the loss dtype, the gradient written in place; the tile
  // never exceeds the chunk's rows (300 tokens: one chunk of 300, not the page-aligned 320).
  s.config.activation_dtype = Dtype::bf16;
  for (Dtype dt : {Dtype::bf16, Dtype::fp32}) {
    s.config.loss_dtype = dt;
    s.config.logits_chunk_tokens = 256;
    t = memory_table(s);
    EXPECT_EQ(row_bytes(t, "logits"), 256 * V * (dt == Dtype::bf16 ? 2 : 4)) << dt;
    EXPECT_EQ(dtype_of(t, "logits"), to_string(dt));
    EXPECT_EQ(dtype_of(t, "logits_gradient"), "absent");
    EXPECT_EQ(dtype_of(t, "logits_upcast"), "absent");
  }
  s.config.context_tokens = 300;
  s.config.logits_chunk_tokens = 4096;
  t = memory_table(s);
  EXPECT_EQ(row_bytes(t, "logits"), 300 * V * 4);
  EXPECT_EQ(row_bytes(t, "token_ids"), 300 * 8);
  // Unknown loss dtypes are refused by flag name.
  s.config.loss_dtype = Dtype::fp16;
  try {
    evaluate(s);
    FAIL() << "fp16 loss accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "--loss-dtype");
  }
}

TEST(Phases, NamesRoundTripAndUnknownNamesAreRefused) {
  for (step::Phase p : {step::Phase::fill, step::Phase::recompute, step::Phase::loss, step::Phase::backward, step::Phase::optimizer, step::Phase::forward})
    EXPECT_EQ(step::phase_from_string(to_string(p), "test"), p);
  EXPECT_THROW(step::phase_from_string("stage1", "plan.json: buffers[0]: phases"), Error);
  EXPECT_EQ(step::phases_of(step::Schedule::oomb),
            (std::vector<step::Phase>{step::Phase::fill, step::Phase::recompute, step::Phase::loss, step::Phase::backward, step::Phase::optimizer}));
  EXPECT_EQ(step::phases_of(step::Schedule::standard),
            (std::vector<step::Phase>{step::Phase::forward, step::Phase::loss, step::Phase::backward, step::Phase::optimizer}));
  EXPECT_EQ(step::phase_names(step::phase_bit(step::Phase::loss) | step::phase_bit(step::Phase::fill)), (std::vector<std::string>{"fill", "loss"}));
  EXPECT_EQ(step::phase_names(step::all_phases(step::Schedule::standard)),
            (std::vector<std::string>{"forward", "loss", "backward", "optimizer"}));
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
  s.config.attention = step::Attention::sparse;
  const int64_t small = evaluate(s).peak_device_bytes;
  s.config.context_tokens = 8 * 1024 * 1024;
  const int64_t large = evaluate(s).peak_device_bytes;
  // 32x the context; bounded selection memory keeps the device peak within 1%.
  EXPECT_LT(static_cast<double>(large - small) / static_cast<double>(small), 0.01);
  // The published selection memory grows with N (page summaries and scores on the GPU).
  s.config.selection_memory = step::SelectionMemory::device;
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
  st.config.schedule = step::Schedule::standard;
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
  s.config.schedule = step::Schedule::standard;
  auto std_sum = evaluate(s);
  EXPECT_FALSE(std_sum.feasible);
  EXPECT_EQ(std_sum.binding, Binding::device_memory);
  s.config.schedule = step::Schedule::oomb;
  EXPECT_TRUE(evaluate(s).feasible);
}

TEST(Invariants, HostMemoryBindsOnASmallHost) {
  auto s = scenario("qwen2.5-7b", "h200", 4 * 1024 * 1024);
  s.host = models::load_host("workstation-128g");
  auto sum = evaluate(s);
  EXPECT_FALSE(sum.feasible);
  EXPECT_EQ(sum.binding, Binding::pinned_host_memory);
  ASSERT_FALSE(sum.notes.empty());
}

TEST(EventPath, StreamsNeverOverlapAndDependenciesHold) {
  auto s = scenario("qwen2.5-0.5b", "h200", 64 * 1024);
  s.config.chunk_tokens = 4096;
  s.config.resident_layers = 2;
  auto r = simulate_events(s, traces::Detail::layer);
  std::map<traces::Lane, int64_t> stream_end;
  std::map<std::tuple<int, int64_t, int64_t, Op>, int64_t> copy_in_end;
  for (const auto& e : r.trace.events) {
    ASSERT_GE(e.end_ns, e.start_ns);
    ASSERT_GE(e.start_ns, stream_end[e.lane]) << "overlap on " << traces::to_string(e.lane);
    stream_end[e.lane] = e.end_ns;
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
    step::Attention attention;
    int64_t resident;
    step::Schedule schedule;
  };
  for (const Case& k : {Case{"qwen2.5-7b", 256 * 1024, step::Attention::dense, 2, step::Schedule::oomb},
                        Case{"qwen2.5-7b", 1 << 20, step::Attention::sparse, 2, step::Schedule::oomb},
                        Case{"qwen2.5-7b", 128 * 1024, step::Attention::dense, 1, step::Schedule::oomb},
                        Case{"qwen2.5-7b", 64 * 1024, step::Attention::dense, 3, step::Schedule::oomb},
                        Case{"llama-3.1-8b", 512 * 1024, step::Attention::sparse, 2, step::Schedule::oomb},
                        Case{"qwen2.5-7b", 512 * 1024, step::Attention::dense, 28, step::Schedule::oomb},
                        Case{"qwen2.5-0.5b", 32 * 1024, step::Attention::dense, 2, step::Schedule::standard}}) {
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
    EXPECT_EQ(ev.summary.peak_phase, fast.peak_phase);
    EXPECT_EQ(ev.summary.device_breakdown_bytes, fast.device_breakdown_bytes);
    EXPECT_EQ(ev.trace.summary.peak_device_bytes, fast.peak_device_bytes);
  }
}

TEST(EventPath, MemorySamplesFollowThePhases) {
  // No offload (the pools fill in stage 1 and drain in stage 2) and with offload (slots).
  for (int64_t resident : {2, 24}) {
    auto s = scenario("qwen2.5-0.5b", "h200", 32 * 1024);
    s.config.chunk_tokens = 4096;
    s.config.resident_layers = resident;
    const auto t = memory_table(s);
    const auto ev = simulate_events(s, traces::Detail::layer);
    SCOPED_TRACE(resident);
    const int64_t pools = row_bytes(t, "kv_pool") + row_bytes(t, "kv_grad_pool");
    int64_t max_sample = 0;
    for (const auto& m : ev.trace.memory) {
      EXPECT_LE(m.device_bytes, ev.summary.peak_device_bytes);
      max_sample = std::max(max_sample, m.device_bytes);
    }
    // The step starts in stage 1 with the fill working set and no pages.
    ASSERT_FALSE(ev.trace.memory.empty());
    EXPECT_EQ(ev.trace.memory.front().device_bytes, t.device_bytes_in(step::Phase::fill) - pools);
    // Each chunk's loss phase shows up: its rows on top of the pages in use (at least none).
    EXPECT_GE(max_sample, t.device_bytes_in(step::Phase::loss) - pools);
    EXPECT_GT(t.device_bytes_in(step::Phase::loss), t.device_bytes_in(step::Phase::fill));
    EXPECT_EQ(ev.summary.peak_phase, "loss");
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
  // The buffers' bytes (the arena block's 2 MiB units, allocator_blocks, are a reserved-measure row).
  s.config.peak_measure = step::PeakMeasure::allocated;
  const auto none = evaluate(s);
  s.config.optimizer = step::Optimizer::gpu;
  const auto gpu = evaluate(s);
  s.config.optimizer = step::Optimizer::host;
  const auto host = evaluate(s);
  // AdamW on the GPU: 13 bytes/param of state (m, v, fp32 master, the uint8 decay mask), alive in
  // every phase, and an HBM-bound update.
  EXPECT_EQ(gpu.peak_device_bytes - none.peak_device_bytes, 7615616512LL * 13);
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
  s.config.attention = step::Attention::sparse;
  s.config.page_budget = 0;
  EXPECT_THROW(evaluate(s), Error);
  s = scenario("qwen2.5-7b", "h200", 4096);
  s.config.gpus = 3;
  EXPECT_THROW(evaluate(s), Error);
  s = scenario("qwen2.5-7b", "h200", int64_t{1} << 50);
  EXPECT_THROW(evaluate(s), Error);
}

// Partial checkpointing: k kept layers add k sets of the layer rows (alive as checkpointing off's,
// through the loss) to the one shared set, and take k layers' forward out of the backward. Both
// ends: k = 0 is full checkpointing; the step falls by the same amount per kept layer and reaches
// checkpointing off's one layer past k = L - 1.
TEST(Config, KeptLayersRowsTimeAndValidation) {
  for (step::Schedule schedule : {step::Schedule::oomb, step::Schedule::standard}) {
    SCOPED_TRACE(to_string(schedule));
    auto s = scenario("qwen2.5-7b", "h200", schedule == step::Schedule::oomb ? int64_t{1} << 20 : int64_t{1} << 15);
    s.config.schedule = schedule;
    const int64_t L = s.model.layers;
    const step::BufferTable full = memory_table(s);
    const Summary t_full = evaluate(s);
    auto row = [](const step::BufferTable& t, const std::string& name) -> const step::BufferRow* {
      for (const auto& r : t.rows)
        if (r.name == name) return &r;
      return nullptr;
    };
    EXPECT_EQ(row(full, "kept_layer_activations"), nullptr);
    std::vector<double> steps = {t_full.step_s};
    for (int64_t k : {int64_t{1}, int64_t{2}, L - 1}) {
      s.config.kept_layers = k;
      const step::BufferTable t = memory_table(s);
      const step::BufferRow* kept = row(t, "kept_layer_activations");
      ASSERT_NE(kept, nullptr);
      EXPECT_EQ(kept->bytes, k * row(full, "layer_activations")->bytes);
      EXPECT_EQ(kept->category, "checkpoints");
      EXPECT_EQ(row(t, "kept_layer_norm_rstd")->bytes, k * row(full, "layer_norm_rstd")->bytes);
      EXPECT_EQ(row(t, "kept_attention_lse")->bytes, k * row(full, "attention_lse")->bytes);
      EXPECT_EQ(row(t, "layer_activations")->bytes, row(full, "layer_activations")->bytes);
      EXPECT_TRUE(kept->phases & step::phase_bit(step::Phase::loss));
      EXPECT_FALSE(row(t, "layer_activations")->phases & step::phase_bit(step::Phase::loss));
      const Summary sum = evaluate(s);
      EXPECT_GT(sum.peak_device_bytes, t_full.peak_device_bytes);
      steps.push_back(sum.step_s);
    }
    const double per_layer = steps[0] - steps[1];
    EXPECT_GT(per_layer, 0);
    EXPECT_NEAR(steps[2], steps[0] - 2 * per_layer, 1e-9 * steps[0]);
    EXPECT_NEAR(steps[3], steps[0] - static_cast<double>(L - 1) * per_layer, 1e-9 * steps[0]);
    s.config.kept_layers = 0;
    s.config.checkpointing = false;
    EXPECT_NEAR(evaluate(s).step_s, steps[0] - static_cast<double>(L) * per_layer, 1e-9 * steps[0]);
  }
  // The range: 0 <= k < L with checkpointing on, 0 with it off; errors name --kept-layers.
  auto s = scenario("qwen2.5-7b", "h200", 4096);
  for (auto [ckpt, k] : {std::pair{true, int64_t{28}}, {true, int64_t{-1}}, {false, int64_t{3}}}) {
    s.config.checkpointing = ckpt;
    s.config.kept_layers = k;
    try {
      evaluate(s);
      FAIL() << k;
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "--kept-layers") << e.what();
    }
  }
  // With --layers the range is of the layers run.
  s.config.checkpointing = true;
  s.config.layers_override = 4;
  s.config.kept_layers = 3;
  EXPECT_NO_THROW(evaluate(s));
  s.config.kept_layers = 4;
  EXPECT_THROW(evaluate(s), Error);
  // The event simulation prices the same backward passes.
  s.config.kept_layers = 2;
  s.config.context_tokens = 16384;
  const EventResult ev = simulate_events(s, traces::Detail::layer);
  EXPECT_NEAR(ev.summary.step_s, evaluate(s).step_s, 0.02 * evaluate(s).step_s);
}

TEST(PublishedBaseline, ThreeLogitsSizedTensorsAtTheLogSoftmaxBackward) {
  // --preset oomb-published --schedule standard (docs/model.md, the published baseline): inside the
  // unchunked bf16 log-softmax backward its saved output, the NLL gradient and the log-softmax
  // gradient are live, 3 x N x V x 2 bytes; bf16 gradients of every parameter stay resident and no
  // optimizer state exists.
  auto s = scenario("qwen2.5-7b", "h200", 16 * 1024);
  s.config = step::published_preset(s.config);
  s.config.schedule = step::Schedule::standard;
  const int64_t N = 16 * 1024, V = 152064;
  const auto t = memory_table(s);
  EXPECT_EQ(row_bytes(t, "logits"), N * V * 2);
  EXPECT_EQ(row_bytes(t, "logits_gradient"), N * V * 2);
  EXPECT_EQ(row_bytes(t, "log_softmax_gradient"), N * V * 2);
  EXPECT_EQ(t.find("logits_upcast", step::Tier::device), nullptr);
  EXPECT_EQ(t.find("adamw_moments", step::Tier::device), nullptr);
  EXPECT_EQ(t.find("adamw_moments", step::Tier::host), nullptr);
  EXPECT_EQ(row_bytes(t, "parameter_gradients"), row_bytes(t, "weights"));  // bf16, all phases
  const auto peak = t.device_peak();
  EXPECT_EQ(peak.phase, step::Phase::loss);
  // Without the third tensor the loss phase would hold N x V x 2 bytes less.
  Scenario ours = s;
  ours.config.implementation = step::Implementation::oomb;
  EXPECT_EQ(memory_table(ours).find("log_softmax_gradient", step::Tier::device), nullptr);
  EXPECT_EQ(peak.bytes - memory_table(ours).device_peak().bytes, N * V * 2);
  // The published figure has no point at 128K: out of memory on one H200 (3 x 37.1 GiB of logits
  // over the weights, their gradients and 28 x 128K x 3584 x 2 checkpoints), while 64K fits.
  s.config.context_tokens = 128 * 1024;
  const auto at128k = evaluate(s);
  EXPECT_FALSE(at128k.feasible);
  EXPECT_EQ(at128k.binding, Binding::device_memory);
  s.config.context_tokens = 64 * 1024;
  EXPECT_TRUE(evaluate(s).feasible);
  // Without the third tensor 128K would (wrongly) fit.
  ours.config.context_tokens = 128 * 1024;
  EXPECT_TRUE(evaluate(ours).feasible);
}

TEST(PublishedBaseline, TheSweepsFirstStepMakesItsGradientsInItsBackward) {
  // docs/model.md, "How it measures": the published test runs its contexts in ascending order in one
  // process, never frees a parameter gradient and reports each context's first run, so only the
  // sweep's first context (8K, the figure's first point) is measured from a step that starts without
  // them. Hand-computed for qwen2.5-7b at 8K (L = 28, H = 3584, V = 152064, bf16): the forward and
  // the loss hold none; at the last layer's backward every gradient but the input embedding's
  // exists (LM head + final norm + the 28 layers) beside layer 0's checkpoint; the embedding's is
  // made last, after every layer's activations are freed.
  auto s = scenario("qwen2.5-7b", "h200", 8 * 1024);
  s.config = step::published_preset(s.config);
  s.config.schedule = step::Schedule::standard;
  EXPECT_EQ(s.config.sweep_first_context, 8192);
  const int64_t N = 8 * 1024, H = 3584, V = 152064, params = 7615616512;
  const int64_t embedding = V * H;
  const auto t = memory_table(s);
  const auto* grads = t.find("parameter_gradients", step::Tier::device);
  const auto* later = t.find("later_parameter_gradients", step::Tier::device);
  const auto* left = t.find("layer_input_checkpoints_left", step::Tier::device);
  ASSERT_NE(grads, nullptr);
  ASSERT_NE(later, nullptr);
  ASSERT_NE(left, nullptr);
  EXPECT_EQ(grads->bytes, (params - embedding) * 2);
  EXPECT_EQ(later->bytes, embedding * 2);
  EXPECT_EQ(left->bytes, N * H * 2);  // layer 0's input
  EXPECT_EQ(t.device_bytes_in(step::Phase::loss) + (params - embedding) * 2 + embedding * 2,
            [&] {
              auto always = s;
              always.config.sweep_first_context = 0;
              return memory_table(always).device_bytes_in(step::Phase::loss);
            }());
  const auto peak = t.device_peak();
  EXPECT_EQ(peak.phase, step::Phase::backward);
  // weights + gradients + layer 0's checkpoint + one layer's activations, norms' rstd, lse and
  // backward temporaries + dy, dx + ids + the cuBLAS workspace (the rows of the table, by hand).
  const int64_t layer_acts = N * (4 * H + 2 * 3584 + 2 * 512 + 3 * 18944) * 2, rstd = 2 * N * 4, lse = N * 28 * 4;
  const int64_t layer_bwd = N * (3 * H + 2 * 3584 + 2 * 512 + 3 * 18944) * 2;
  EXPECT_EQ(peak.bytes, params * 2 + (params - embedding) * 2 + N * H * 2 + layer_acts + rstd + lse + layer_bwd +
                            2 * N * H * 2 + 2 * N * 4 + (int64_t{32} << 20));
  // After the backward every gradient exists.
  EXPECT_EQ(t.device_bytes_in(step::Phase::optimizer), params * 2 * 2 + 2 * N * 4 + (int64_t{32} << 20));

  // At a long first context a layer's checkpoint outweighs its gradients (128K x 3584 x 2 > a layer's
  // 233 M parameters x 2): the backward's largest moment is its first layer, every checkpoint still
  // held, with the LM head's, the final norm's and layer 27's gradients.
  auto longer = s;
  longer.config.context_tokens = 128 * 1024;
  longer.config.sweep_first_context = 128 * 1024;
  const auto lt = memory_table(longer);
  const int64_t layer = 233057792;  // q, k, v (with biases), o, MLP and the two norms of one layer
  EXPECT_EQ(row_bytes(lt, "parameter_gradients"), (V * H + H + layer) * 2);
  EXPECT_EQ(row_bytes(lt, "layer_input_checkpoints_left"), int64_t{28} * 128 * 1024 * H * 2);

  // A later context of the sweep, and a chunked first step (its later chunks find the gradients the
  // first chunk's backward made): the rows as always.
  for (auto [schedule, context] : {std::pair{step::Schedule::standard, 16 * 1024}, std::pair{step::Schedule::oomb, 8 * 1024}}) {
    auto later_step = s;
    later_step.config.schedule = schedule;
    later_step.config.context_tokens = context;
    const auto lt2 = memory_table(later_step);
    EXPECT_EQ(lt2.find("later_parameter_gradients", step::Tier::device), nullptr);
    EXPECT_EQ(row_bytes(lt2, "parameter_gradients"), params * 2);
  }
  // One chunk (oomb at 4K): one backward, as the standard step.
  auto one_chunk = s;
  one_chunk.config.schedule = step::Schedule::oomb;
  one_chunk.config.context_tokens = 4096;
  EXPECT_NE(memory_table(one_chunk).find("later_parameter_gradients", step::Tier::device), nullptr);
  // This project's own implementation always has its gradients allocated.
  auto ours = s;
  ours.config.implementation = step::Implementation::oomb;
  EXPECT_EQ(row_bytes(memory_table(ours), "parameter_gradients"), params * 2);
}

TEST(PagesInFlight, EventSimulationAgreesWithTheClosedForm) {
  // The published preset with offload: the pages whose write-back has not finished at the pool's
  // peak. The fast path's closed form (steady period, last two chunks) and the event simulation
  // (each stage-2 sweep's switches on the published host's timeline, its memory samples) both count
  // with published_writeback_held, across contexts, chunk sizes, resident layers, copy latencies
  // and a slow device-to-host link; the table, the JSON and the trace carry the same count.
  int cases = 0, piled = 0;
  for (int64_t N : {8 * 1024, 24 * 1024 + 512, 64 * 1024}) {
    for (int64_t chunk : {1024, 4096}) {
      for (int64_t R : {2, 3, 5}) {
        for (double latency : {10e-6, 40e-6, -1.0}) {
          auto s = scenario("qwen2.5-7b", "h200", N);
          if (latency < 0) {  // a slow link back: the write-backs share it, and it binds
            latency = 10e-6;
            s.gpu.d2h_bytes_per_s /= 50;
          }
          s.config = step::published_preset(s.config);
          s.config.chunk_tokens = chunk;
          s.config.resident_layers = R;
          s.config.page_copy_latency_s = latency;
          const auto g = detail::geometry(s);
          const int64_t closed = detail::published_pages_in_flight(s, g);
          const EventResult ev = simulate_events(s, traces::Detail::layer);
          SCOPED_TRACE("N=" + std::to_string(N) + " chunk=" + std::to_string(chunk) + " R=" + std::to_string(R) +
                       " latency=" + std::to_string(latency));
          // At least the write-back just issued: a whole layer's pages at the last switch.
          EXPECT_GE(closed, detail::published_slot_pages(g, g.n - 1));
          EXPECT_EQ(ev.pages_in_flight_peak, closed);
          EXPECT_EQ(evaluate(s).pages_in_flight, closed);  // the fast path's summary
          EXPECT_EQ(to_json(evaluate(s)).at("pages_in_flight").get<int64_t>(), closed);
          const auto t = memory_table(s);
          EXPECT_EQ(row_bytes(t, "kv_pages_in_flight"), closed * g.kv_page_bytes);
          EXPECT_EQ(row_bytes(t, "kv_grad_pages_in_flight"), closed * g.grad_page_bytes);
          // The trace's pool samples hold the in-flight pages (KV and gradient) over the resident ones.
          EXPECT_GE(ev.trace.summary.pool_pages_peak, 2 * ev.pages_in_flight_peak);
          ++cases;
          if (closed > detail::published_slot_pages(g, g.n - 1)) ++piled;
          // This project's executor at the same knobs: the next pass on a slot waits for the slot's
          // write-back, so the pool's occupancy over time never exceeds its resident slots.
          Scenario ours = s;
          ours.config.implementation = step::Implementation::oomb;
          const EventResult own = simulate_events(ours, traces::Detail::layer);
          EXPECT_EQ(own.pages_in_flight_peak, 0);
          EXPECT_LE(own.trace.summary.pool_pages_peak, own.summary.device_pool_pages);
          EXPECT_GT(own.trace.summary.pool_pages_peak, 0);
        }
      }
    }
  }
  EXPECT_EQ(cases, 54);
  EXPECT_GT(piled, 0);  // some cases pile more than one layer's write-back up
  // Slower copies hold more pages, and so does a slower link; without offload, or for this
  // project's executor (the next user of a slot waits for its write-back), nothing is in flight
  // beyond the pool.
  auto s = scenario("qwen2.5-7b", "h200", 64 * 1024);
  s.config = step::published_preset(s.config);
  const auto g = detail::geometry(s);
  const int64_t fast = detail::published_pages_in_flight(s, g);
  auto slow_link = s;
  slow_link.gpu.d2h_bytes_per_s /= 4;
  EXPECT_GT(detail::published_pages_in_flight(slow_link, g), fast);
  s.config.page_copy_latency_s = 100e-6;
  EXPECT_GT(detail::published_pages_in_flight(s, g), fast);
  s.config.implementation = step::Implementation::oomb;
  EXPECT_EQ(detail::published_pages_in_flight(s, detail::geometry(s)), 0);
  EXPECT_EQ(memory_table(s).find("kv_pages_in_flight", step::Tier::device), nullptr);
  EXPECT_EQ(evaluate(s).pages_in_flight, 0);
  EXPECT_FALSE(to_json(evaluate(s)).contains("pages_in_flight"));  // other outputs unchanged
  EXPECT_EQ(simulate_events(s, traces::Detail::layer).pages_in_flight_peak, 0);
  s.config.implementation = step::Implementation::published;
  s.config.resident_layers = 28;
  EXPECT_EQ(detail::published_pages_in_flight(s, detail::geometry(s)), 0);
}

TEST(PagesInFlight, WriteBacksShareOneLink) {
  // published_writeback_held by hand: a write-back alone frees a page per page_s; n of them share
  // the link's pages per second, each at min(1 / page_s, link / n), and speed up when one ends.
  detail::PublishedWriteback w;
  w.page_s = 1.0;
  w.link_pages_per_s = 1.0;
  // S = 4, switches a second apart, then two seconds: 4; 3 + 4; two at half rate for 2 s: 2 + 3 + 4.
  EXPECT_EQ(detail::published_writeback_held({0.0, 1.0, 2.0, 4.0}, 4, w), (std::vector<int64_t>{0, 4, 7, 9}));
  // A link that does not bind: each at its own rate, the count of S - floor(age / page_s) per
  // write-back (ages 3, 2 and 0 at t = 4: 1 + 2 + 4).
  w.link_pages_per_s = 10.0;
  EXPECT_EQ(detail::published_writeback_held({0.0, 1.0, 2.0, 4.0}, 4, w), (std::vector<int64_t>{0, 4, 7, 7}));
  // One ends mid-interval and the other speeds up: S = 1; at t = 1.5 the first has 0.5 left; the two
  // share the link at 0.5 each until the first ends at 2.5 (the second has 0.5 left), which then
  // runs at 1 and ends at 3.0, before the switch at 3.2. At an unchanged 0.5 it would end at 3.5.
  w.link_pages_per_s = 1.0;
  EXPECT_EQ(detail::published_writeback_held({0.0, 1.0, 1.5, 3.2}, 1, w), (std::vector<int64_t>{0, 1, 2, 1}));
  // Every step of the drain ends a write-back or reaches the switch, whatever rounding leaves: 32M
  // pages a write-back (a 4G-token context's layer) and switches 10^6 s apart, where a remainder
  // of a few ulps once kept the drain from ending (the fuzzer found it).
  w.page_s = 5.68e-5;
  w.link_pages_per_s = 59445.7;
  std::vector<double> far(28);
  for (size_t k = 0; k < far.size(); ++k) far[k] = 1e6 * static_cast<double>(k);
  const std::vector<int64_t> held = detail::published_writeback_held(far, int64_t{1} << 25, w);
  for (size_t k = 1; k < far.size(); ++k) EXPECT_EQ(held[k], int64_t{1} << 25) << k;  // each ends in 1,906 s
  // Free copies hold nothing past their switch.
  w.page_s = 0;
  EXPECT_EQ(detail::published_writeback_held({0.0, 1.0, 2.0}, 4, w), (std::vector<int64_t>{0, 0, 0}));
}

// The published preset on Qwen2.5-7B and an H200 at `context`, dense or sparse.
Scenario published_qwen(step::Attention attention, int64_t context) {
  auto s = scenario("qwen2.5-7b", "h200", context);
  s.config = step::published_preset(s.config);
  s.config.attention = attention;
  return s;
}

TEST(PagesInFlight, ThePublishedSweepWaitsForNoCopy) {
  // The published stage-2 sweep's layer period (docs/model.md, pages in flight): its compute, or
  // the onload's issue (4 copies per page, each at least a launch), never its copies' transfer
  // time, which this project's executor waits for.
  for (auto attention : {step::Attention::dense, step::Attention::sparse}) {
    const auto s = published_qwen(attention, 256 * 1024);
    const auto g = detail::geometry(s);
    const int64_t c = g.n - 1;
    SCOPED_TRACE(step::to_string(attention));
    const double compute_s = detail::chunk_costs(s, g, c, detail::Terms::skip).recompute.compute_s;
    const double issue_s = 4.0 * static_cast<double>(detail::published_slot_pages(g, c)) * s.gpu.launch_overhead_s;
    const double period = detail::published_layer_period_s(s, g, c);
    EXPECT_DOUBLE_EQ(period, std::max(compute_s, issue_s));
    // The write-backs' link: the duplex share of the device-to-host rate (the sweep's onloads copy in
    // meanwhile), in pages of K, V and their gradients; a page alone adds four copies' latency.
    const double page_bytes = static_cast<double>(g.kv_page_bytes + g.grad_page_bytes);
    const double rate = s.gpu.d2h_bytes_per_s * s.gpu.efficiency.copy * s.gpu.duplex_factor;
    const detail::PublishedWriteback w = detail::published_writeback(s, g);
    EXPECT_DOUBLE_EQ(w.link_pages_per_s, rate / page_bytes);
    EXPECT_DOUBLE_EQ(w.page_s, 4 * s.config.page_copy_latency_s + page_bytes / rate);
    // A link 50 times slower leaves the period as it is; the pages in flight grow (the write-backs
    // drain slower), and so does the step (its copies still cross the link).
    auto slow = s;
    slow.gpu.h2d_bytes_per_s /= 50;
    slow.gpu.d2h_bytes_per_s /= 50;
    EXPECT_DOUBLE_EQ(detail::published_layer_period_s(slow, g, c), period);
    EXPECT_GT(detail::published_pages_in_flight(slow, g), detail::published_pages_in_flight(s, g));
    EXPECT_GT(evaluate(slow).step_s, evaluate(s).step_s);
    // Costlier launches make the issue the period.
    auto launches = s;
    launches.gpu.launch_overhead_s = 10 * compute_s / (4.0 * static_cast<double>(detail::published_slot_pages(g, c)));
    EXPECT_NEAR(detail::published_layer_period_s(launches, g, c), 10 * compute_s, 1e-12 * compute_s);
  }
}

TEST(PublishedCopies, StageTwoCopiesEveryLoadedPageWhole) {
  // What each layer pass copies, published against this project's executor (docs/model.md, pages in
  // flight; docs/schedule.md): the published fill writes back K and V of every loaded page, and its
  // stage 2 onloads and writes back K, V and the fp32 gradients of every loaded page, forward and
  // backward alike.
  for (auto attention : {step::Attention::dense, step::Attention::sparse}) {
    const auto s = published_qwen(attention, 64 * 1024);
    const auto g = detail::geometry(s);
    const int64_t c = g.n - 1, u = step::union_pages(g, c), own = detail::own_pages(g, c);
    SCOPED_TRACE(step::to_string(attention));
    const double kv = static_cast<double>(g.kv_page_bytes), grad = static_cast<double>(g.grad_page_bytes);
    const auto pub = detail::chunk_costs(s, g, c);
    EXPECT_EQ(pub.fill.in_bytes, u * kv);
    EXPECT_EQ(pub.fill.out_bytes, (u + own) * kv);
    EXPECT_EQ(pub.recompute.in_bytes, (u + own) * (kv + grad));
    EXPECT_EQ(pub.recompute.out_bytes, (u + own) * (kv + grad));
    EXPECT_EQ(pub.backward.in_bytes, (u + own) * (kv + grad));
    EXPECT_EQ(pub.backward.out_bytes, (u + own) * (kv + grad));
    auto ours = s;
    ours.config.implementation = step::Implementation::oomb;
    const auto own_cc = detail::chunk_costs(ours, g, c);
    EXPECT_EQ(own_cc.fill.out_bytes, own * kv);
    EXPECT_EQ(own_cc.recompute.in_bytes, u * kv);
    EXPECT_EQ(own_cc.recompute.out_bytes, 0);
    EXPECT_EQ(own_cc.backward.in_bytes, u * kv + (u + own) * grad);
    EXPECT_EQ(own_cc.backward.out_bytes, u * grad);
  }
}

TEST(PublishedSparse, OneSlotUntilTheBackward) {
  // The published sparse cache (docs/model.md): forward visits onload nothing, the attention's
  // select onloads the visited layer; only the backward's reverse visits select the next layer as
  // well. So the fill, the stage-2 forward and the loss hold one slot, the backward R.
  for (int64_t R : {2, 3}) {
    auto s = scenario("qwen2.5-7b", "h200", 64 * 1024);
    s.config = step::published_preset(s.config);
    s.config.attention = step::Attention::sparse;
    s.config.resident_layers = R;
    const auto g = detail::geometry(s);
    const auto t = memory_table(s);
    SCOPED_TRACE(R);
    int64_t slot = 0;
    for (int64_t c = g.n - 2; c < g.n; ++c) slot = std::max(slot, detail::published_slot_pages(g, c));
    EXPECT_EQ(row_bytes(t, "kv_pool"), slot * g.kv_page_bytes);
    EXPECT_EQ(row_bytes(t, "kv_grad_pool"), slot * g.grad_page_bytes);
    const auto* back = t.find("kv_pool_backward_slot", step::Tier::device);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->bytes, (R - 1) * slot * g.kv_page_bytes);
    EXPECT_EQ(back->phases, step::phase_bit(step::Phase::backward));
    EXPECT_EQ(row_bytes(t, "kv_grad_pool_backward_slot"), (R - 1) * slot * g.grad_page_bytes);
    // The loss phase (the peak) holds one slot of KV and gradient pages and the pages in flight.
    int64_t loss_pages_bytes = 0;
    for (const auto& r : t.rows)
      if (r.tier == step::Tier::device && (r.phases & step::phase_bit(step::Phase::loss)) &&
          (r.category == "kv_pages" || r.category == "kv_grad_pages"))
        loss_pages_bytes += r.bytes;
    EXPECT_EQ(loss_pages_bytes, (slot + detail::published_pages_in_flight(s, g)) * (g.kv_page_bytes + g.grad_page_bytes));
    EXPECT_EQ(t.device_peak().phase, step::Phase::loss);
    // The event simulation holds the same rows per phase: its peak is the fast path's, and its first
    // sample (the fill, no pages yet) is the fill's rows without the pools live in the fill, which
    // leave the backward's slots out.
    const EventResult ev = simulate_events(s, traces::Detail::layer);
    EXPECT_EQ(ev.summary.peak_device_bytes, evaluate(s).peak_device_bytes);
    int64_t fill_pools = 0;
    for (const auto& r : t.rows)
      if (r.tier == step::Tier::device && (r.phases & step::phase_bit(step::Phase::fill)) &&
          (r.category == "kv_pages" || r.category == "kv_grad_pages"))
        fill_pools += r.bytes;
    ASSERT_FALSE(ev.trace.memory.empty());
    EXPECT_EQ(ev.trace.memory.front().device_bytes, t.device_bytes_in(step::Phase::fill) - fill_pools);
    for (const auto& m : ev.trace.memory) EXPECT_LE(m.device_bytes, ev.summary.peak_device_bytes);
    // This project's executor and the published dense cache keep R slots in every phase.
    Scenario dense = s;
    dense.config.attention = step::Attention::dense;
    EXPECT_EQ(memory_table(dense).find("kv_pool_backward_slot", step::Tier::device), nullptr);
    EXPECT_EQ(row_bytes(memory_table(dense), "kv_pool"),
              R * detail::published_slot_pages(detail::geometry(dense), detail::geometry(dense).n - 1) *
                  g.kv_page_bytes);
    Scenario ours = s;
    ours.config.implementation = step::Implementation::oomb;
    EXPECT_EQ(memory_table(ours).find("kv_pool_backward_slot", step::Tier::device), nullptr);
  }
}

TEST(Presets, PublishedConfiguration) {
  step::Config c = step::published_preset(step::Config{});
  EXPECT_EQ(c.chunk_tokens, 4096);
  EXPECT_EQ(c.page_tokens, 128);
  EXPECT_EQ(c.page_budget, 64);
  EXPECT_EQ(c.resident_layers, 2);
  EXPECT_EQ(c.kv_grad_dtype, Dtype::fp32);
  EXPECT_EQ(c.param_grad_dtype, Dtype::bf16);
  EXPECT_EQ(c.optimizer, step::Optimizer::none);
  EXPECT_EQ(c.peak_measure, step::PeakMeasure::allocated);
  EXPECT_EQ(c.selection_memory, step::SelectionMemory::device);
  EXPECT_EQ(c.loss_dtype, Dtype::bf16);  // per-chunk full-vocabulary bf16 logits and cross-entropy
  EXPECT_EQ(c.logits_chunk_tokens, 0);
  EXPECT_EQ(step::Config{}.loss_dtype, Dtype::fp32);
  // The published 4M sparse run fits in an H200 with the host memory ALGORITHM.md derives.
  auto s = scenario("qwen2.5-7b", "h200", 4 * 1024 * 1024);
  s.config = step::published_preset(s.config);
  s.config.attention = step::Attention::sparse;
  auto sum = evaluate(s);
  EXPECT_TRUE(sum.feasible);
  EXPECT_LT(sum.peak_device_bytes, 141000000000LL);
  EXPECT_NEAR(static_cast<double>(sum.peak_host_bytes) / kGiB, 672.0, 0.1);
  // Config JSON round trip; a config written before loss_dtype existed reads as the fp32 upcast.
  step::Config back = step::config_from_json(s.config.to_json(), "test");
  EXPECT_EQ(back.to_json(), s.config.to_json());
  EXPECT_EQ(back.loss_dtype, Dtype::bf16);
  Json old = s.config.to_json();
  old.erase("loss_dtype");
  EXPECT_EQ(step::config_from_json(old, "old.json").loss_dtype, Dtype::fp32);
}

// The binding constraint is typed (issue 40, part 5): each value has one name, which is what the
// JSON and the CLI write, and a name reads back as its value; anything else is not a binding.
TEST(Binding, EveryBindingHasOneNameThatReadsBack) {
  std::set<std::string> names;
  for (Binding b : kBindings) {
    EXPECT_TRUE(names.insert(to_string(b)).second) << to_string(b);
    EXPECT_EQ(find_binding(to_string(b)), b) << to_string(b);
  }
  EXPECT_EQ(names.size(), std::size(kBindings));
  EXPECT_EQ(find_binding("host memory"), std::nullopt);
  EXPECT_EQ(std::string(to_string(Binding::device_memory)), "device memory");
  EXPECT_NE(binding_names().find("pinned host memory"), std::string::npos);
  EXPECT_TRUE(is_memory(Binding::host_ram));
  EXPECT_FALSE(is_memory(Binding::h2d_link));
}

}  // namespace
}  // namespace oomb::simulator
