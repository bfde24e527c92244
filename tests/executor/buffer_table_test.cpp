// The one buffer table (step/buffers.h) as the executor uses it: plans for the CUDA backend start
// (the plan check runs on the CPU, before any device call), the CUDA backend's declared scratch,
// and the memory account catching an allocation outside the table, an undersized row and an op
// that touches more than its view holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/memory_account.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "step/cuda_scratch.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

constexpr double kInitStd = 0.02;

// The plan `oomb plan --model M --gpu G --context N --out p.json` writes (its training defaults:
// AdamW placed by the planner, fused 1K-token loss tiles, only executable settings).
planner::Plan cli_plan(const std::string& model, const std::string& gpu, int64_t context) {
  planner::Request r;
  r.scenario.model = models::load_model(model);
  r.scenario.gpu = models::load_gpu(gpu);
  r.scenario.host = models::load_host(r.scenario.gpu.default_host);
  r.scenario.config.logits_chunk_tokens = 1024;
  r.scenario.config.optimizer = step::Optimizer::gpu;
  r.optimizer_auto = true;
  r.executable_only = true;
  const planner::SearchResult res = planner::search(r, context);
  EXPECT_TRUE(res.best.has_value());
  simulator::Scenario s = r.scenario;
  s.config = res.best->config;
  return planner::make_plan(s, res.best->summary, "time", r.headroom);
}

const step::BufferRow* row_of(const std::vector<step::BufferRow>& rows, const std::string& name) {
  for (const auto& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

// `oomb plan --model qwen2.5-7b --gpu h200 --context 64K` (and 4M) then `oomb run --plan p.json
// --backend cuda`: the run's table for the CUDA backend (its default bf16 GEMMs) passes the plan
// check, with every planned row allocated (no phantom rows) and the backend's scratch planned.
TEST(CudaPlanStart, QwenSevenBPlansPassTheStartOfRunCheck) {
  for (int64_t context : {int64_t{64} << 10, int64_t{4} << 20}) {
    SCOPED_TRACE(context);
    const planner::Plan plan = cli_plan("qwen2.5-7b", "h200", context);
    ASSERT_FALSE(plan.buffers.empty());
    step::Target cuda;
    cuda.backend = step::BackendKind::cuda;
    const std::vector<step::BufferRow> needed = run_rows(plan.model, plan.config, cuda);
    std::vector<std::string> notes;
    ASSERT_NO_THROW(notes = check_plan_rows(plan.buffers, needed, "cuda"));
    EXPECT_TRUE(notes.empty()) << notes.front();  // every planned row is one the CUDA run allocates
    const step::BufferRow* scratch = row_of(plan.buffers, step::row::kOpScratch);
    ASSERT_NE(scratch, nullptr);
    const step::Geometry g = step::geometry(plan.model, plan.config);
    EXPECT_EQ(scratch->bytes, step::cuda_scratch::step_op_scratch(plan.model, plan.config, g, true).bytes);
    EXPECT_NE(row_of(plan.buffers, step::row::kGemmWorkspace), nullptr);
    // Rows the CUDA executor never allocates are not planned for it.
    for (const char* phantom : {"page_tables", "selection_scores", "selection_record", "summary_tiles"})
      EXPECT_EQ(row_of(plan.buffers, phantom), nullptr) << phantom;
    // The same plan on the CPU backend: its CUDA-only rows are notes, nothing is refused.
    step::Target cpu;
    const auto cpu_notes = check_plan_rows(plan.buffers, run_rows(plan.model, plan.config, cpu), "cpu");
    // gemm_workspace and op_scratch, the staging ring, read-back buffer and loss slots
    EXPECT_EQ(cpu_notes.size(), 5u);
    // fp32 GEMMs read the bf16 operands through fp32 copies: more scratch than the plan holds.
    step::Target fp32 = cuda;
    fp32.bf16_gemm = false;
    EXPECT_THROW(check_plan_rows(plan.buffers, run_rows(plan.model, plan.config, fp32), "cuda"), Error);
  }
}

// The declared op scratch of the example: qwen2.5-7b, chunk 4K, bf16 storage, fp32 loss
// tiles: the LM-head backward stages the tile's fp32 loss gradient as bf16 (rows x vocab x 2) and
// declares the fp32 dW fallback of a bf16 gradient (hidden x vocab x 4).
TEST(CudaScratch, LmHeadBackwardDeclaresTheStagingAndTheDwFallback) {
  const models::ModelSpec m = models::load_model("qwen2.5-7b");
  step::Config c;
  c.context_tokens = 64 << 10;
  c.chunk_tokens = 4096;
  c.page_tokens = 128;
  for (int64_t tile : {int64_t{1024}, int64_t{0}}) {
    c.logits_chunk_tokens = tile;
    const step::Geometry g = step::geometry(m, c);
    const auto s = step::cuda_scratch::step_op_scratch(m, c, g, true);
    EXPECT_EQ(s.op, "lm_head backward");
    const int64_t rows = tile > 0 ? tile : 4096;
    // fused: the fp32 tile as bf16; unfused (bf16 logits, fp32 gradient): the same.
    const int64_t staging = rows * 152064 * 2, dw = int64_t{3584} * 152064 * 4;
    EXPECT_GE(s.bytes, staging + dw);
    EXPECT_LT(s.bytes, staging + dw + (int64_t{4} << 20));  // + the 256-byte rounding of each part
  }
  // 4096 rows: 1.25 GB of staging and 2.18 GB of dW scratch (the figures).
  EXPECT_EQ(int64_t{4096} * 152064 * 2, 1245708288);
  EXPECT_EQ(int64_t{3584} * 152064 * 4, 2179989504);
}

// ---- the memory account against the table

struct Small {
  models::ModelSpec m = test::small_model(2, 4, 2, 8, 32, false, true);
  Weights w = random_weights(m, 5, kInitStd);
  step::Config c = test::small_config(48, 16, 8, 1);
  std::vector<int32_t> tokens = TokenSource::synthetic(m.vocab, 1).sequence(0, 48);
};

// `oomb run` builds the run's table once (runner::check_run) and hands it over: the Engine allocates
// under those rows and records the plan check's notes, without building or checking a table itself.
TEST(RunTable, TheEngineAllocatesFromTheTableItIsHanded) {
  Small s;
  CpuBackend b;
  EngineOptions o;
  o.table.table = run_table(s.m, s.c, b.target());
  for (auto& r : o.table.table.rows)
    if (r.name == step::row::kLogits) r.bytes += 4096;  // a plan's larger budget, kept by the runner's check
  o.table.notes = {"buffer logits: the plan budgets more"};
  Engine e(b, s.m, s.c, s.w, o);
  e.step(s.tokens);
  const step::BufferRow* logits = row_of(e.buffers(), step::row::kLogits);
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->bytes, row_of(run_rows(s.m, s.c, b.target()), step::row::kLogits)->bytes + 4096);
  EXPECT_EQ(e.measured().notes, o.table.notes);
  EXPECT_LT(e.measured().row_high_water_bytes.at(step::row::kLogits), logits->bytes);
}

TEST(MemoryAccount, AnAllocationOutsideTheTableIsCaught) {
  Small s;
  CpuBackend b;
  EngineOptions o;
  o.table_override = run_rows(s.m, s.c, b.target());
  const size_t before = o.table_override.size();
  o.table_override.erase(std::remove_if(o.table_override.begin(), o.table_override.end(),
                                        [](const step::BufferRow& r) { return r.name == step::row::kFinalNorm; }),
                         o.table_override.end());
  ASSERT_EQ(o.table_override.size(), before - 1);
  Engine e(b, s.m, s.c, s.w, o);  // the loss phase's final_norm is allocated in the step
  try {
    e.step(s.tokens);
    FAIL() << "an allocation under no row was accepted";
  } catch (const AccountError& err) {
    EXPECT_NE(std::string(err.what()).find("final_norm"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("no row"), std::string::npos) << err.what();
  }
}

TEST(MemoryAccount, AnUndersizedRowIsCaught) {
  Small s;
  CpuBackend b;
  for (const char* name : {step::row::kLayerActivations, step::row::kWeights, step::row::kKvPool}) {
    SCOPED_TRACE(name);
    EngineOptions o;
    o.table_override = run_rows(s.m, s.c, b.target());
    for (auto& r : o.table_override)
      if (r.name == name) r.bytes -= 1;
    try {
      Engine e(b, s.m, s.c, s.w, o);
      e.step(s.tokens);
      FAIL() << "a row one byte short was accepted";
    } catch (const AccountError& err) {
      EXPECT_NE(std::string(err.what()).find(name), std::string::npos) << err.what();
      EXPECT_NE(std::string(err.what()).find("undersized"), std::string::npos) << err.what();
    }
  }
}

// The account knows each row's lifetime: an allocation in a phase its row is not alive in is refused.
// Injected by binding the account to rows whose lifetimes are narrower than the ones the Engine
// carves its working set from (the step's table).
TEST(MemoryAccount, AnAllocationOutsideItsRowsPhasesIsCaught) {
  Small s;
  CpuBackend b;
  const struct {
    const char* row;
    step::PhaseMask phases;
    const char* when;  // in the message
  } cases[] = {
      // the loss phase's final_norm, narrowed to the backward: refused in the step's loss phase
      {step::row::kFinalNorm, step::phase_bit(step::Phase::backward), "in phase loss"},
      // token_ids, allocated at construction for every phase, narrowed to the fill
      {step::row::kTokenIds, step::phase_bit(step::Phase::fill), "before the step"},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.row);
    EngineOptions o;
    o.table_override = run_rows(s.m, s.c, b.target());
    for (auto& r : o.table_override)
      if (r.name == k.row) r.phases = k.phases;
    try {
      Engine e(b, s.m, s.c, s.w, o);
      e.step(s.tokens);
      FAIL() << "an allocation outside its row's phases was accepted";
    } catch (const AccountError& err) {
      const std::string what = err.what();
      EXPECT_NE(what.find(k.row), std::string::npos) << what;
      EXPECT_NE(what.find("outside its phases"), std::string::npos) << what;
      EXPECT_NE(what.find(k.when), std::string::npos) << what;
    }
  }
}

// The same account on its own: allocations by phase, and a row still held when a phase it is not
// alive in begins.
TEST(MemoryAccount, RefusesRowsOutsideTheirLifetimes) {
  const step::PhaseMask loss = step::phase_bit(step::Phase::loss), all = step::all_phases(step::Schedule::oomb);
  std::vector<step::BufferRow> rows(2);
  rows[0].name = "logits";
  rows[0].category = "logits";
  rows[0].bytes = 64;
  rows[0].phases = loss;
  rows[1].name = "weights";
  rows[1].category = "weights";
  rows[1].bytes = 64;
  rows[1].phases = all;
  MemoryAccount a;
  a.bind(rows);
  EXPECT_THROW(a.add(Tier::device, "logits", 8), AccountError);  // before the step: it would live through all
  EXPECT_NO_THROW(a.add(Tier::device, "weights", 8));
  a.enter_phase(step::Phase::fill);
  EXPECT_THROW(a.add(Tier::device, "logits", 8), AccountError);
  a.enter_phase(step::Phase::loss);
  EXPECT_NO_THROW(a.add(Tier::device, "logits", 8));
  EXPECT_THROW(a.enter_phase(step::Phase::backward), AccountError);  // held past the loss
  a.add(Tier::device, "logits", -8);
  EXPECT_NO_THROW(a.enter_phase(step::Phase::backward));
  EXPECT_NO_THROW(a.add(Tier::device, "weights", 8));
}

// The account measures the table exactly: each row's high-water mark is its bytes, and each phase's
// high-water mark is the table's live set of that phase.
TEST(MemoryAccount, MeasuresEveryRowAndPhaseOfTheTable) {
  Small s;
  for (bool ckpt : {true, false}) {
    SCOPED_TRACE(ckpt);
    step::Config c = s.c;
    c.checkpointing = ckpt;
    CpuBackend b;
    Engine e(b, s.m, c, s.w);
    e.step(s.tokens);
    const Measured& ms = e.measured();
    for (const auto& r : e.buffers()) {
      if (r.tier != Tier::device) continue;
      auto it = ms.row_high_water_bytes.find(r.name);
      ASSERT_NE(it, ms.row_high_water_bytes.end()) << r.name;
      EXPECT_EQ(it->second, r.bytes) << r.name;
    }
    step::BufferTable t;
    t.rows = e.buffers();
    t.schedule = c.schedule;
    for (step::Phase p : step::phases_of(c.schedule)) {
      auto it = ms.phase_high_water_bytes.find(p);
      ASSERT_NE(it, ms.phase_high_water_bytes.end()) << step::to_string(p);
      EXPECT_EQ(it->second, t.device_bytes_in(p, false)) << step::to_string(p);
    }
    EXPECT_EQ(ms.peak_device_bytes, t.device_peak(false).bytes);
    EXPECT_EQ(ms.device_breakdown_bytes, t.device_peak(false).breakdown);
  }
}

// An op that would touch more elements than its view holds fails, whatever the backend's kernels.
TEST(ViewExtent, AnOpBeyondItsBufferFails) {
  CpuBackend b;
  MemoryAccount account;
  Buffer x(b, Tier::device, 4 * 8 * 4, &account, "x"), w(b, Tier::device, 8 * 8 * 4, &account, "w");
  Buffer y(b, Tier::device, 3 * 8 * 4, &account, "y");  // one row short of 4 x 8
  EXPECT_THROW(b.linear_fwd(x.ct(), 4, 8, w.ct(), nullptr, 8, y.t()), ExtentError);
  EXPECT_NO_THROW(b.linear_fwd(x.ct(), 3, 8, w.ct(), nullptr, 8, y.t()));
  EXPECT_THROW(b.add(y.t(), x.ct(), 32), ExtentError);
  EXPECT_THROW(b.copy(y.t(), x.ct(), 32), ExtentError);
  // A view further into a buffer holds what is left of it.
  EXPECT_THROW(b.add(x.t().at(8), x.ct(), 32), ExtentError);
  EXPECT_NO_THROW(b.add(x.t().at(8), x.ct(), 24));
  // Raw pointers carry no extent (tests and the pages): not checked.
  EXPECT_NO_THROW(b.add(x.f32(), x.f32(), 32));
}

}  // namespace
}  // namespace oomb::executor
