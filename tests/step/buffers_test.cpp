// The buffer table's rows carry their tensors (step/buffers.h): each row's tensors add up to its
// bytes, their names are unique in the row, and the working set is described tensor by tensor the
// way the executor carves it (one set shared by every layer, or one per layer).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/specs.h"
#include "step/allocator.h"
#include "step/buffers.h"
#include "step/cuda_layout.h"

namespace oomb::step {
namespace {

struct Case {
  std::string label;
  models::ModelSpec model;
  Config config;
  Target target;
};

Target cuda_target() {
  Target t;
  t.backend = BackendKind::cuda;
  t.runtime_reserve_bytes = int64_t{1} << 30;
  t.pages_in_flight = 37;
  return t;
}

// Every kind of row the table emits: both schedules, both targets, the published rows, LoRA, q/k
// norm, tensor and sequence parallelism, ZeRO-1, host optimizers, partial and no checkpointing,
// sparse selection on the device and bounded, contexts that are no multiple of the chunk or page.
std::vector<Case> spread() {
  std::vector<Case> cases;
  const models::ModelSpec tiny = models::load_model("tiny");
  models::ModelSpec qk = tiny;
  qk.qk_norm = true;
  auto add = [&](std::string label, const models::ModelSpec& m, Config c, Target t = {}) {
    cases.push_back({std::move(label), m, std::move(c), t});
  };
  Config base;
  base.context_tokens = 1000;
  base.chunk_tokens = 384;
  base.page_tokens = 64;
  base.resident_layers = 1;
  add("oomb, ragged chunk, offload", tiny, base);
  add("oomb on cuda, reserved", tiny, base, cuda_target());
  {
    Config c = base;
    c.checkpointing = false;
    c.optimizer = Optimizer::gpu;
    add("checkpointing off, AdamW on the GPU", tiny, c);
  }
  {
    Config c = base;
    c.kept_layers = 1;
    c.optimizer = Optimizer::host;
    c.logits_chunk_tokens = 100;
    add("one kept layer, host AdamW, fused loss", qk, c);
  }
  {
    Config c = base;
    c.lora_rank = 3;
    c.lora_targets = {"down_proj", "q_proj", "gate_proj"};
    c.optimizer = Optimizer::host;
    add("LoRA on q/k-norm layers", qk, c);
    c.lora_train_embeddings = true;
    add("LoRA with trained embeddings", qk, c, cuda_target());
  }
  {
    Config c = base;
    c.context_tokens = 17;
    c.chunk_tokens = 64;
    c.page_tokens = 16;
    c.attention = Attention::sparse;
    c.page_budget = 1;
    add("17 tokens, sparse", tiny, c);
  }
  for (SelectionMemory where : {SelectionMemory::device, SelectionMemory::bounded}) {
    Config c = published_preset(base);
    c.context_tokens = 7 * 1024 + 3;
    c.chunk_tokens = 1024;
    c.page_tokens = 128;
    c.attention = Attention::sparse;
    c.selection_memory = where;
    add(std::string("published, sparse, selection ") + to_string(where), tiny, c, cuda_target());
  }
  {
    Config c = base;
    c.gpus = 2;
    c.data_parallel = 4;
    c.shard_optimizer = true;
    c.optimizer = Optimizer::gpu;
    c.param_grad_dtype = Dtype::bf16;
    add("TP 2 x DP 4, ZeRO-1, bf16 gradients", tiny, c);
    add("TP 2 x DP 4 on cuda (NCCL's buffers)", tiny, c, cuda_target());
  }
  {
    Config c = base;
    c.schedule = Schedule::standard;
    c.gpus = 2;
    c.sequence_parallel = true;
    add("standard, sequence parallel", qk, c);
    c.checkpointing = false;
    c.context_tokens = 999;
    add("standard, no checkpointing, odd sequence", qk, c, cuda_target());
  }
  return cases;
}

TEST(BufferRows, TensorsAddUpToEveryRowsBytes) {
  for (const Case& k : spread()) {
    SCOPED_TRACE(k.label);
    const BufferTable t = buffer_table(k.model, k.config, k.target);
    ASSERT_FALSE(t.rows.empty());
    for (const BufferRow& r : t.rows) {
      SCOPED_TRACE(r.name);
      ASSERT_FALSE(r.tensors.empty());
      int64_t bytes = 0;
      std::set<std::string> names;
      for (const RowTensor& x : r.tensors) {
        EXPECT_GT(x.elements, 0) << x.name;
        bytes += x.elements * dtype_bytes(x.dtype);
        EXPECT_TRUE(names.insert(x.name).second) << "tensor " << x.name << " twice";
      }
      EXPECT_EQ(bytes, r.bytes);
    }
  }
}

// The same rows with and without their text: the tensors do not depend on describing.
TEST(BufferRows, TensorsDoNotDependOnDescribing) {
  for (const Case& k : spread()) {
    SCOPED_TRACE(k.label);
    const BufferTable described = buffer_table(k.model, k.config, k.target, true);
    const BufferTable bare = buffer_table(k.model, k.config, k.target, false);
    ASSERT_EQ(described.rows.size(), bare.rows.size());
    for (size_t i = 0; i < bare.rows.size(); ++i) {
      ASSERT_EQ(described.rows[i].tensors.size(), bare.rows[i].tensors.size()) << bare.rows[i].name;
      for (size_t j = 0; j < bare.rows[i].tensors.size(); ++j) {
        EXPECT_EQ(described.rows[i].tensors[j].name, bare.rows[i].tensors[j].name);
        EXPECT_EQ(described.rows[i].tensors[j].elements, bare.rows[i].tensors[j].elements);
      }
    }
  }
}

// One layer's set, by name and size: Cm = 384 rows of tiny (hidden 64, q_dim 64, kv_dim 32, ffn 128)
// with q/k norm and LoRA rank 3 on two targets, in the executor's order.
TEST(BufferRows, OneLayersSetTensorByTensor) {
  models::ModelSpec m = models::load_model("tiny");
  m.qk_norm = true;
  Config c;
  c.context_tokens = 1000;
  c.chunk_tokens = 384;
  c.page_tokens = 64;
  c.lora_rank = 3;
  c.lora_targets = {"v_proj", "q_proj"};  // emitted in layer order: q_proj first
  const BufferTable t = buffer_table(m, c, Target{});
  const BufferRow* act = t.find(row::kLayerActivations, Tier::device);
  ASSERT_NE(act, nullptr);
  const std::vector<std::pair<std::string, int64_t>> want = {
      {"h1", 384 * 64},  {"x2", 384 * 64},     {"h2", 384 * 64},    {"tmp", 384 * 64},       {"q", 384 * 64},
      {"o", 384 * 64},   {"k", 384 * 32},      {"v", 384 * 32},     {"gate", 384 * 128},     {"up", 384 * 128},
      {"swiglu", 384 * 128}, {"q_pre", 384 * 64}, {"k_pre", 384 * 32}, {"lora_u.q_proj", 384 * 3},
      {"lora_u.v_proj", 384 * 3}};
  ASSERT_EQ(act->tensors.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(act->tensors[i].name, want[i].first);
    EXPECT_EQ(act->tensors[i].elements, want[i].second) << want[i].first;
    EXPECT_EQ(act->tensors[i].dtype, c.activation_dtype);
  }
  const BufferRow* rstd = t.find(row::kLayerNormRstd, Tier::device);
  ASSERT_NE(rstd, nullptr);
  ASSERT_EQ(rstd->tensors.size(), 4u);
  EXPECT_EQ(rstd->tensor("rstd_q")->elements, 384 * 4);  // q_heads
  EXPECT_EQ(rstd->tensor("rstd_k")->elements, 384 * 2);  // kv_heads
  EXPECT_EQ(rstd->tensor("rstd1")->dtype, Dtype::fp32);
  const BufferRow* bwd = t.find(row::kLayerBackwardTemporaries, Tier::device);
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(bwd->tensor("dswiglu")->elements, 384 * 128);
  EXPECT_NE(bwd->tensor("lora_du.v_proj"), nullptr);
  EXPECT_EQ(bwd->tensor("h1"), nullptr);
}

// Rows of several layers hold one set per layer, named by the layer: all of them with checkpointing
// off, the last k with k kept layers (their layer numbers, not their index among the kept).
TEST(BufferRows, SeveralLayersSetsAreNamedByLayer) {
  models::ModelSpec m = models::load_model("tiny");
  m.layers = 7;
  Config c;
  c.context_tokens = 256;
  c.chunk_tokens = 128;
  c.page_tokens = 64;
  c.checkpointing = false;
  const BufferTable off = buffer_table(m, c, Target{});
  const BufferRow* all = off.find(row::kAllLayerActivations, Tier::device);
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->tensors.size(), 7u * 11u);
  EXPECT_EQ(all->tensors.front().name, "layers.0.h1");
  EXPECT_EQ(all->tensors.back().name, "layers.6.swiglu");
  EXPECT_EQ(off.find(row::kAttentionLse, Tier::device)->tensors.size(), 7u);

  c.checkpointing = true;
  c.kept_layers = 3;
  const BufferTable kept = buffer_table(m, c, Target{});
  const BufferRow* lse = kept.find(row::kKeptAttentionLse, Tier::device);
  ASSERT_NE(lse, nullptr);
  ASSERT_EQ(lse->tensors.size(), 3u);
  EXPECT_EQ(lse->tensors[0].name, "layers.4.lse");
  EXPECT_EQ(lse->tensors[2].name, "layers.6.lse");
  EXPECT_EQ(kept.find(row::kLayerActivations, Tier::device)->tensors.front().name, "h1");  // the shared set
}

// The rows' tensors stay out of a plan's row (plans keep their bytes; the run's table has them).
TEST(BufferRows, APlansRowCarriesNoTensors) {
  const BufferTable t = buffer_table(models::load_model("tiny"), [] {
    Config c;
    c.context_tokens = 512;
    c.chunk_tokens = 256;
    c.page_tokens = 64;
    return c;
  }(), Target{});
  for (const BufferRow& r : t.rows) {
    const Json j = to_json(r);
    EXPECT_FALSE(j.contains("tensors")) << r.name;
    const BufferRow back = buffer_row_from_json(j, "plan");
    EXPECT_EQ(back.bytes, r.bytes);
    EXPECT_TRUE(back.tensors.empty());
  }
}

TEST(BufferRows, ElementBytes) {
  // Element sizes are core/dtype.h's (tests/core/dtype_test.cpp). A row read back with a dtype oomb does not know is refused naming the key.
  BufferRow r;
  r.name = "x";
  r.category = "weights";
  r.shape = "[1]";
  r.bytes = 4;
  r.phases = phase_bit(Phase::fill);
  Json j = to_json(r);
  EXPECT_EQ(j["dtype"], Dtype::fp32);
  j["dtype"] = "int4";
  EXPECT_NO_THROW(buffer_row_from_json(to_json(r), "plan.json"));
  EXPECT_THROW(buffer_row_from_json(j, "plan.json"), Error);
}

// NCCL's device buffers (review 3 of the CUDA side, finding 5): a row of their own on the CUDA
// backend, one communicator per parallel degree > 1 (the world is never connected when it is only
// split), sized by the profile's channels, outside the arena's block (NCCL allocates them, before
// the block is reserved).
TEST(BufferRows, NcclBuffersAreOneRowPerCommunicatorOutsideTheArena) {
  const models::ModelSpec tiny = models::load_model("tiny");
  Config base;
  base.context_tokens = 1024;
  base.chunk_tokens = 256;
  base.page_tokens = 64;
  auto bytes = [&](int64_t tp, int64_t dp, Target t) -> int64_t {
    Config c = base;
    c.gpus = tp;
    c.data_parallel = dp;
    const BufferTable table = buffer_table(tiny, c, t);
    const BufferRow* r = table.find(row::kCommunicatorBuffers, Tier::device);
    if (!r) return -1;
    EXPECT_EQ(r->category, "communication");
    EXPECT_EQ(r->phases, all_phases(c.schedule));
    // Not in the arena's block: no range, and the block is the one the other rows make.
    const allocator::ArenaLayout with = allocator::cuda_arena_layout(table.rows, true);
    for (const auto& range : with.ranges) EXPECT_NE(range.row, row::kCommunicatorBuffers);
    std::vector<BufferRow> without;
    for (const auto& x : table.rows)
      if (x.name != row::kCommunicatorBuffers) without.push_back(x);
    EXPECT_EQ(with.block_bytes, allocator::cuda_arena_layout(without, false).block_bytes);
    return r->bytes;
  };
  Target cuda = cuda_target();
  const int64_t each = cuda_scratch::nccl_communicator_bytes(cuda_scratch::kDefaultNcclChannels);
  EXPECT_EQ(each, 2 * 2 * (4194304 + 524288 + 4915200) + 1048576);  // 2 channels x 2 neighbours x 3 protocols + FIFO
  EXPECT_EQ(bytes(1, 1, cuda), -1);
  EXPECT_EQ(bytes(2, 1, cuda), each);
  EXPECT_EQ(bytes(1, 4, cuda), each);
  EXPECT_EQ(bytes(2, 4, cuda), 2 * each);  // the groups' and the replicas'; the world is only split
  cuda.nccl_channels = 16;
  EXPECT_EQ(bytes(2, 1, cuda), cuda_scratch::nccl_communicator_bytes(16));
  EXPECT_EQ(bytes(2, 4, Target{}), -1);  // the CPU backend's MPI holds no device memory
  // The GPU profile's channels reach the target.
  models::GpuSpec g = models::load_gpu("h200");
  EXPECT_EQ(target_of(g).nccl_channels, cuda_scratch::kDefaultNcclChannels);
  g.nccl_channels = 24;
  EXPECT_EQ(target_of(g).nccl_channels, 24);
}

// Review 3, finding 12: the CUDA backend's pinned host buffers are host rows (backend_scratch):
// the staging ring (8 x 4 MiB), the read-back buffer (4 MiB) and the loss slots (max(4096, chunks)
// doubles); the CPU backend has none.
TEST(BufferRows, TheCudaBackendsPinnedBuffersAreHostRows) {
  using namespace cuda_scratch;
  const models::ModelSpec tiny = models::load_model("tiny");
  Config c;
  c.context_tokens = 1024;
  c.chunk_tokens = 256;
  c.page_tokens = 64;
  auto host_row = [&](const Config& cfg, const Target& t, const char* name) -> int64_t {
    const BufferTable table = buffer_table(tiny, cfg, t);
    const BufferRow* r = table.find(name, Tier::host);
    if (!r) return -1;
    EXPECT_EQ(r->category, "backend_scratch");
    return r->bytes;
  };
  const Target cuda = cuda_target();
  EXPECT_EQ(host_row(c, cuda, row::kStagingRing), int64_t{8} * (4 << 20));
  EXPECT_EQ(host_row(c, cuda, row::kReadback), int64_t{4} << 20);
  EXPECT_EQ(host_row(c, cuda, row::kLossSlots), 4096 * 8);
  Config many = c;  // 5000 chunks of 16 tokens: a slot each
  many.context_tokens = 5000 * 16;
  many.chunk_tokens = 16;
  many.page_tokens = 16;
  EXPECT_EQ(host_row(many, cuda, row::kLossSlots), 5000 * 8);
  EXPECT_EQ(host_row(c, Target{}, row::kStagingRing), -1);
  EXPECT_EQ(host_row(c, Target{}, row::kLossSlots), -1);
  // The CUPTI collector's activity buffers: a row of a CUPTI-timed CUDA run only (4 x 8 MiB); a
  // plan (made for an untimed run) and a CPU run have none.
  EXPECT_EQ(host_row(c, cuda, row::kCuptiActivityBuffers), -1);
  Target timed = cuda;
  timed.cupti = true;
  EXPECT_EQ(host_row(c, timed, row::kCuptiActivityBuffers), int64_t{4} * (8 << 20));
  Target cpu_timed;
  cpu_timed.cupti = true;
  EXPECT_EQ(host_row(c, cpu_timed, row::kCuptiActivityBuffers), -1);
}

}  // namespace
}  // namespace oomb::step
