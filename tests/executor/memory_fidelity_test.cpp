// Two independent accounts of device memory must agree (issue #11): the simulator's buffer table
// (peak over the phases of the step) and what the executor allocates (its high-water mark, by
// category at that moment). The CPU backend allocates what a GPU run of the same plan would,
// without the GPU-implementation rows (workspaces, device page tables, score buffers), which is how
// the simulator predicts a plan on a "cpu" profile.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <unordered_map>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/arena.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "models/specs.h"
#include "simulator/simulator.h"
#include "step/allocator.h"
#include "step/config.h"

namespace oomb::executor {
namespace {

constexpr double kPeakRelTol = 0.01;  // the bound; the breakdown must be equal

struct MemCase {
  const char* name;
  const char* model;
  int64_t layers, N, C, p, R, logits_chunk, budget;
  bool sparse;
  Dtype storage;  // weights, gradients, activations and loss (fp32 or bf16)
  Dtype pages;    // KV and KV-gradient pages
  step::Optimizer optimizer;
  step::SelectionMemory selection = step::SelectionMemory::bounded;
  bool checkpointing = true;
  const char* rule = "published";
  int64_t kept_layers = 0;  // partial checkpointing: the last k layers keep their activations
  int64_t lora_rank = 0;    // LoRA: adapters of this rank on lora_targets, the base frozen
  const char* lora_targets = "q_proj,v_proj";
};

void PrintTo(const MemCase& k, std::ostream* os) { *os << k.name; }

class PredictedEqualsAllocated : public ::testing::TestWithParam<MemCase> {};

TEST_P(PredictedEqualsAllocated, PeakAndBreakdownAtThePeak) {
  const MemCase k = GetParam();
  simulator::Scenario s;
  s.model = models::load_model(k.model);
  s.gpu = models::load_gpu("h200");
  s.gpu.kind = "cpu";  // the CPU backend: no GPU-implementation rows
  s.host = models::load_host("workstation-128g");
  auto& c = s.config;
  c.context_tokens = k.N;
  c.chunk_tokens = k.C;
  c.page_tokens = k.p;
  c.resident_layers = k.R;
  c.layers_override = k.layers;
  c.logits_chunk_tokens = k.logits_chunk;
  c.attention = k.sparse ? step::Attention::sparse : step::Attention::dense;
  if (k.budget > 0) c.page_budget = k.budget;
  c.selection_memory = k.selection;
  c.param_dtype = c.param_grad_dtype = c.activation_dtype = c.loss_dtype = k.storage;
  c.kv_dtype = c.kv_grad_dtype = k.pages;
  c.optimizer = k.optimizer;
  c.checkpointing = k.checkpointing;
  c.kept_layers = k.kept_layers;
  c.selection = k.rule;
  c.peak_measure = step::PeakMeasure::allocated;
  c.lora_rank = k.lora_rank;
  c.lora_targets = step::lora_targets_from_string(k.lora_targets, "--lora-targets");
  step::validate(c, s.model);
  const simulator::Summary pred = simulator::evaluate(s);

  const models::ModelSpec m = effective_model(s.model, c);
  // Every device-tier allocation and free in order, with its row, to replay through the CUDA
  // backend's arena.
  struct Event {
    const void* p;
    int64_t bytes;
    std::string row;
    bool allocated;
  };
  std::vector<Event> device_events;
  CpuBackendOptions bo;
  bo.on_allocation = [&device_events](Tier tier, const void* p, int64_t bytes, const std::string& row,
                                      bool allocated) {
    if (tier == Tier::device) device_events.push_back({p, bytes, row, allocated});
  };
  CpuBackend backend(bo);
  EngineOptions o;
  if (c.lora_rank > 0) o.adapters = init_adapters(m, c, 3);
  Engine e(backend, s.model, c, random_weights(m, 3), o);
  e.step(TokenSource::synthetic(m.vocab, 4).sequence(0, k.N));
  const Measured& me = e.measured();
  const double err = (static_cast<double>(me.peak_device_bytes) - static_cast<double>(pred.peak_device_bytes)) /
                     static_cast<double>(pred.peak_device_bytes);
  std::printf("%-28s predicted %12lld  allocated %12lld  (%+.3f%%, peak phase %s)\n", k.name,
              static_cast<long long>(pred.peak_device_bytes), static_cast<long long>(me.peak_device_bytes),
              100 * err, pred.peak_phase.c_str());
  EXPECT_LE(std::abs(err), kPeakRelTol);
  EXPECT_EQ(me.device_breakdown_bytes, pred.device_breakdown_bytes);
  // Reserved (issue #23): what the caching allocator held for the device tier at most (blocks in
  // use, rounded, plus the cached ones) against the plan's reserved peak (its default measure).
  simulator::Scenario r = s;
  r.config.peak_measure = step::PeakMeasure::reserved;
  const simulator::Summary pred_reserved = simulator::evaluate(r);
  std::printf("%-28s reserved predicted %12lld  held %12lld\n", k.name,
              static_cast<long long>(pred_reserved.peak_device_bytes),
              static_cast<long long>(backend.reserved_high_bytes(Tier::device)));
  EXPECT_EQ(backend.reserved_high_bytes(Tier::device), pred_reserved.peak_device_bytes);

  // The CUDA backend's device arena (executor/runtime/arena.h) given the same buffers in the same
  // order, laid out as a CUDA run lays it out (step/allocator.h: one block, a range per row): no
  // buffer leaves its row's range and the block never grows, so a CUDA run reserves exactly the
  // plan's allocator_blocks row beyond its buffers. The arena never touches its memory: the
  // blocks are addresses only.
  const step::allocator::ArenaLayout layout = step::allocator::cuda_arena_layout(run_rows(s.model, c, backend.target()), true);
  EXPECT_EQ(layout.buffer_peak_bytes, pred.peak_device_bytes);
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  for (const auto& range : layout.ranges) ranges[range.row] = {range.offset_bytes, range.offset_bytes + range.bytes};
  uintptr_t next = uintptr_t{1} << 40;
  Arena arena(
      [&next](int64_t bytes) {
        void* p = reinterpret_cast<void*>(next);
        next += static_cast<uintptr_t>(bytes + 4096) / 4096 * 4096;
        return p;
      },
      [](void*, int64_t) {}, int64_t{1} << 30, step::allocator::kCudaArenaAlignmentBytes);
  arena.reserve(layout.block_bytes);
  std::unordered_map<const void*, void*> in_arena;
  int64_t spills = 0;
  for (const Event& ev : device_events) {
    if (ev.allocated) {
      void* q = nullptr;
      if (auto it = ranges.find(ev.row); it != ranges.end())
        q = arena.allocate_within(ev.bytes, it->second.first, it->second.second);
      if (!q) {
        ++spills;
        q = arena.allocate(ev.bytes);
      }
      in_arena[ev.p] = q;
    } else {
      auto it = in_arena.find(ev.p);
      ASSERT_NE(it, in_arena.end());
      arena.deallocate(it->second);
      in_arena.erase(it);
    }
  }
  std::printf("%-28s arena layout %12lld  block %12lld  spills %lld  grows %lld\n", k.name,
              static_cast<long long>(layout.layout_bytes), static_cast<long long>(layout.block_bytes),
              static_cast<long long>(spills), static_cast<long long>(arena.grows()));
  EXPECT_EQ(spills, 0) << "buffers placed outside their row's range (the layout's lifetimes are not the run's)";
  EXPECT_EQ(arena.grows(), 0) << "the run needed more than the block the plan reserves";
  EXPECT_EQ(arena.reserved_bytes(), layout.block_bytes);
}

using step::Optimizer;
INSTANTIATE_TEST_SUITE_P(
    Plans, PredictedEqualsAllocated,
    ::testing::Values(
        MemCase{"tiny_16K_one_chunk_resident", "tiny", 0, 16384, 16384, 128, 64, 0, 0, false, Dtype::fp32, Dtype::fp32, Optimizer::none},
        MemCase{"tiny_8K_chunk1K_R1", "tiny", 0, 8192, 1024, 128, 1, 0, 0, false, Dtype::fp32, Dtype::fp32, Optimizer::none},
        MemCase{"tiny_8K_sparse_b8", "tiny", 0, 8192, 1024, 128, 1, 0, 8, true, Dtype::fp32, Dtype::fp32, Optimizer::none},
        MemCase{"tiny_8K_sparse_device_sel", "tiny", 0, 8192, 1024, 128, 2, 256, 8, true, Dtype::bf16, Dtype::bf16, Optimizer::none,
                step::SelectionMemory::device},
        MemCase{"tiny_ragged_bf16_R2", "tiny", 0, 5000, 1024, 128, 2, 300, 0, false, Dtype::bf16, Dtype::bf16, Optimizer::none},
        MemCase{"tiny_bf16_adamw_gpu", "tiny", 0, 4096, 1024, 128, 1, 512, 0, false, Dtype::bf16, Dtype::fp32, Optimizer::gpu},
        MemCase{"tiny_no_recompute_sparse_R1", "tiny", 0, 6144, 1024, 128, 1, 512, 4, true, Dtype::bf16, Dtype::fp32,
                Optimizer::none, step::SelectionMemory::bounded, false},
        MemCase{"tiny_per_kv_head_R1", "tiny", 0, 6144, 1024, 128, 1, 0, 2, true, Dtype::fp32, Dtype::fp32, Optimizer::none,
                step::SelectionMemory::bounded, true, "per-kv-head"},
        MemCase{"tiny_fp32_adamw_host", "tiny", 0, 4096, 1024, 128, 64, 0, 0, false, Dtype::fp32, Dtype::fp32, Optimizer::host},
        MemCase{"qwen0.5b_x2_512_chunk256_R1", "qwen2.5-0.5b", 2, 512, 256, 128, 1, 0, 0, false, Dtype::fp32, Dtype::fp32,
                Optimizer::none},
        MemCase{"qwen0.5b_x2_bf16_tiled", "qwen2.5-0.5b", 2, 256, 128, 64, 1, 64, 0, false, Dtype::bf16, Dtype::bf16,
                Optimizer::gpu},
        MemCase{"tiny_one_kept_R1", "tiny", 0, 4096, 1024, 128, 1, 0, 0, false, Dtype::fp32, Dtype::fp32, Optimizer::none,
                step::SelectionMemory::bounded, true, "published", 1},
        MemCase{"qwen0.5b_x3_two_kept", "qwen2.5-0.5b", 3, 256, 128, 64, 2, 64, 0, false, Dtype::fp32, Dtype::fp32,
                Optimizer::none, step::SelectionMemory::bounded, true, "published", 2},
        MemCase{"tiny_one_kept_sparse_bf16_adamw", "tiny", 0, 6144, 1024, 128, 1, 512, 4, true, Dtype::bf16, Dtype::fp32,
                Optimizer::gpu, step::SelectionMemory::bounded, true, "published", 1},
        MemCase{"tiny_lora_r8_bf16_adamw", "tiny", 0, 4096, 1024, 128, 1, 512, 0, false, Dtype::bf16, Dtype::bf16, Optimizer::gpu,
                step::SelectionMemory::bounded, true, "published", 0, 8},
        MemCase{"tiny_lora_all_linear_host_adamw", "tiny", 0, 4096, 1024, 128, 2, 0, 0, false, Dtype::fp32, Dtype::fp32,
                Optimizer::host, step::SelectionMemory::bounded, true, "published", 0, 16, "all-linear"},
        MemCase{"qwen0.5b_x2_lora_no_recompute_sparse", "qwen2.5-0.5b", 2, 512, 128, 64, 1, 64, 2, true, Dtype::bf16, Dtype::bf16,
                Optimizer::gpu, step::SelectionMemory::bounded, false, "published", 0, 4, "all-linear"}),
    [](const auto& i) {
      std::string n = i.param.name;
      for (char& ch : n)
        if (ch == '.') ch = '_';
      return n;
    });

}  // namespace
}  // namespace oomb::executor
