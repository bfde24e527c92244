// The GUI's view-model: inputs -> results as the simulator says, errors as messages, curves,
// feasibility map, background timeline, trace overlay (every rank of a multi-rank run), and the
// recompute time per change.
#include "gui/view_model.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <sys/wait.h>

#include "../cli/cli_run.h"
#include "core/error.h"
#include "core/format.h"
#include "core/json.h"
#include "planner/search.h"
#include "core/files.h"
#include "planner/plan.h"
#include "validation/ranks.h"
#include "simulator/simulator.h"
#include "step/run_record.h"
#include "traces/trace.h"

namespace oomb::gui {
namespace {

constexpr int64_t kM = 1024 * 1024;
constexpr int64_t kK = 1024;
// One frame at 60 Hz: a change of inputs must recompute within it.
constexpr double kFrameBudgetMs = 16.0;

simulator::Scenario scenario_of(const Inputs& in) {
  simulator::Scenario s;
  s.model = models::load_model(in.model);
  s.gpu = models::load_gpu(in.gpu);
  s.host = models::load_host(in.host.empty() ? s.gpu.default_host : in.host);
  s.config = in.config;
  return s;
}

TEST(ViewModel, DefaultIsQwen7bOnH200At4M) {
  ViewModel vm;
  const auto& r = vm.results();
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(vm.inputs().model, "qwen2.5-7b");
  EXPECT_EQ(vm.inputs().gpu, "h200");
  EXPECT_EQ(vm.inputs().config.context_tokens, 4 * kM);
  const auto expect = simulator::evaluate(scenario_of(vm.inputs()));
  EXPECT_EQ(r.summary.peak_device_bytes, expect.peak_device_bytes);
  EXPECT_DOUBLE_EQ(r.summary.step_s, expect.step_s);
  EXPECT_FALSE(r.table.rows.empty());
  for (const auto& f : r.figures) {
    EXPECT_FALSE(f.value.empty()) << f.label;
    EXPECT_FALSE(f.formula.empty()) << f.label;
  }
}

TEST(ViewModel, ChangingContextChangesPeakAsTheSimulatorSays) {
  ViewModel vm;
  const int64_t before = vm.results().summary.peak_device_bytes;
  Inputs in = vm.inputs();
  in.config.context_tokens = 1 * kM;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  const auto expect = simulator::evaluate(scenario_of(in));
  EXPECT_EQ(vm.results().summary.peak_device_bytes, expect.peak_device_bytes);
  EXPECT_NE(vm.results().summary.peak_device_bytes, before);
  EXPECT_FALSE(vm.set_inputs(in)) << "same inputs must not recompute";
}

// LoRA (issue 26): the GUI's LoRA inputs reach the simulator; the frozen base holds less and the
// table gains the adapters' row.
TEST(ViewModel, LoraInputsPredictWhatTheSimulatorSays) {
  ViewModel vm;
  const int64_t full = vm.results().summary.peak_device_bytes;
  Inputs in = vm.inputs();
  in.config.lora_rank = 16;
  in.config.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_EQ(vm.results().summary.peak_device_bytes, simulator::evaluate(scenario_of(in)).peak_device_bytes);
  EXPECT_LT(vm.results().summary.peak_device_bytes, full);
  bool adapters = false;
  for (const auto& row : vm.results().table.rows) adapters = adapters || row.name == "lora_adapters";
  EXPECT_TRUE(adapters);
  // No target with a rank is a message, not a crash.
  in.config.lora_targets.clear();
  vm.set_inputs(in);
  EXPECT_FALSE(vm.results().ok);
  EXPECT_NE(vm.results().error.find("--lora-targets"), std::string::npos) << vm.results().error;
}

// Issue 46: with several GPUs the GUI lists the multi-GPU layouts (the stock recipes), the same
// rows `oomb plan --gpus` prints; one GPU has none.
TEST(ViewModel, SeveralGpusListTheStockLongContextRecipes) {
  Inputs in;
  in.model = "qwen3-8b";
  in.gpu = "h100-sxm";
  in.config.context_tokens = 1 * kM;
  ViewModel vm(in);
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_EQ(vm.layout_gpus_per_node(), 1);
  EXPECT_TRUE(vm.layouts().empty());
  in.config.gpus = 8;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_EQ(vm.layout_gpus_per_node(), 8);
  const auto& rows = vm.layouts();
  const auto want = planner::stock_recipes(vm.results().scenario, 8, 1, planner::kDefaultHeadroom);
  ASSERT_GE(rows.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(rows[i].label, want[i].label);
    EXPECT_EQ(rows[i].device_bytes, want[i].device_bytes);
    EXPECT_DOUBLE_EQ(rows[i].step_s, want[i].step_s);
  }
  bool recipe_fits = false;
  for (const auto& p : rows)
    recipe_fits = recipe_fits || (p.fsdp && p.kind == planner::ContextParallelism::ring && p.offload_checkpoints && p.fits);
  EXPECT_TRUE(recipe_fits);
  // Cached until the inputs change; a change recomputes (2 nodes: 16 GPUs on the sequence).
  EXPECT_EQ(&vm.layouts(), &rows);
  in.config.nodes = 2;
  in.config.data_parallel = 2;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  ASSERT_FALSE(vm.layouts().empty());
  EXPECT_EQ(vm.layouts().front().cp, 16);  // 8 x 2 / 2 = 8 GPUs per node, over 2 nodes
  EXPECT_EQ(vm.layouts().front().nodes, 2);
}

// Multi-GPU what-ifs (issue 25): data-parallel replicas, nodes and ZeRO-1 reach the simulator, and
// the Collectives figure states its per-rank bytes and time.
TEST(ViewModel, ParallelInputsPredictWhatTheSimulatorSaysAndNameTheCollectives) {
  ViewModel vm;
  Inputs in = vm.inputs();
  in.config.context_tokens = 1 * kM;
  ASSERT_TRUE(vm.set_inputs(in));
  for (const auto& f : vm.results().figures) EXPECT_NE(f.label, "Collectives") << "one GPU has no collectives";
  auto collectives = [&]() -> std::string {
    for (const auto& f : vm.results().figures)
      if (f.label == "Collectives") return f.value;
    return "";
  };
  in.config.data_parallel = 4;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_NE(collectives().find("DP x4: none (no optimizer step)"), std::string::npos) << collectives();
  in.config.optimizer = step::Optimizer::gpu;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  const auto replicated = simulator::evaluate(scenario_of(in));
  EXPECT_EQ(vm.results().summary.peak_device_bytes, replicated.peak_device_bytes);
  ASSERT_GT(replicated.allreduce_bytes, 0);
  EXPECT_NE(collectives().find("DP x4: " + format_bytes(replicated.allreduce_bytes)), std::string::npos)
      << collectives();
  // ZeRO-1 holds a quarter of the AdamW state on each rank's device.
  in.config.shard_optimizer = true;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_EQ(vm.results().summary.peak_device_bytes, simulator::evaluate(scenario_of(in)).peak_device_bytes);
  EXPECT_LT(vm.results().summary.peak_device_bytes, replicated.peak_device_bytes);
  // Across two nodes the gradients cross the network: slower than inside one node.
  const double one_node_s = vm.results().summary.allreduce_s;
  in.config.nodes = 2;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_GT(vm.results().summary.allreduce_s, one_node_s);
  // Tensor parallelism beside it: both collectives are named.
  in.config.gpus = 2;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  const auto both = simulator::evaluate(scenario_of(in));
  ASSERT_GT(both.tp_allreduces, 0);
  EXPECT_NE(collectives().find("TP x2: " + format_count(static_cast<double>(both.tp_allreduces)) + " all-reduces, " +
                               format_bytes(both.tp_allreduce_bytes)),
            std::string::npos)
      << collectives();
  EXPECT_NE(collectives().find("DP x4"), std::string::npos) << collectives();
  // "plan for me" plans the layout given: the replicas, nodes, ZeRO-1 and TP degree stay.
  const std::string planned = vm.plan_for_me();
  EXPECT_EQ(planned.rfind("planned", 0), 0u) << planned;
  EXPECT_EQ(vm.inputs().config.data_parallel, 4);
  EXPECT_EQ(vm.inputs().config.nodes, 2);
  EXPECT_EQ(vm.inputs().config.gpus, 2);
  EXPECT_TRUE(vm.inputs().config.shard_optimizer);
  // Nodes that do not divide the replicas are a message, not a crash.
  in.config.nodes = 3;
  vm.set_inputs(in);
  EXPECT_FALSE(vm.results().ok);
  EXPECT_NE(vm.results().error.find("--nodes"), std::string::npos) << vm.results().error;
}

TEST(ViewModel, PeakDeviceFigureNamesThePeakPhase) {
  ViewModel vm;
  Inputs in = vm.inputs();
  in.config.context_tokens = 64 * 1024;
  in.config.logits_chunk_tokens = 1024;  // fused tiles: the layer backward holds the peak
  ASSERT_TRUE(vm.set_inputs(in));
  const auto& r = vm.results();
  ASSERT_TRUE(r.ok) << r.error;
  const auto expect = simulator::evaluate(scenario_of(in));
  EXPECT_EQ(r.summary.peak_phase, expect.peak_phase);
  EXPECT_EQ(r.table.device_peak().bytes, r.summary.peak_device_bytes);
  bool found = false;
  for (const auto& f : r.figures)
    if (f.label == "Peak device") {
      found = true;
      EXPECT_NE(f.formula.find("in phase " + expect.peak_phase), std::string::npos) << f.formula;
    }
  EXPECT_TRUE(found);
  in.config.logits_chunk_tokens = 0;  // whole-chunk unfused logits: the loss holds it
  ASSERT_TRUE(vm.set_inputs(in));
  EXPECT_NE(vm.results().summary.peak_phase, expect.peak_phase);
}

TEST(ViewModel, HuggingFaceFolderAsModelGivesTheCatalogResults) {
  // Qwen/Qwen2.5-7B's published config.json, as a downloaded model folder holds it.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "oomb_gui_hf_Qwen2.5-7B";
  std::filesystem::create_directories(dir);
  {
    std::FILE* f = std::fopen((dir / "config.json").string().c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 3584,
      "intermediate_size": 18944, "max_position_embeddings": 131072, "model_type": "qwen2",
      "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
      "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "use_sliding_window": false, "vocab_size": 152064})", f);
    std::fclose(f);
  }
  ViewModel by_id;
  Inputs in = by_id.inputs();
  in.model = dir.string();
  ViewModel by_folder(in);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(by_folder.results().ok) << by_folder.results().error;
  EXPECT_EQ(by_folder.results().summary.peak_device_bytes, by_id.results().summary.peak_device_bytes);
  EXPECT_DOUBLE_EQ(by_folder.results().summary.step_s, by_id.results().summary.step_s);
}

TEST(ViewModel, InvalidCombinationIsAMessageNotACrash) {
  ViewModel vm;
  Inputs in = vm.inputs();
  in.config.chunk_tokens = 1000;  // not a multiple of the 128-token page
  vm.set_inputs(in);
  EXPECT_FALSE(vm.results().ok);
  EXPECT_NE(vm.results().error.find("--chunk"), std::string::npos) << vm.results().error;
  in = vm.inputs();
  in.config.chunk_tokens = 4096;
  in.model = "no-such-model";
  vm.set_inputs(in);
  EXPECT_FALSE(vm.results().ok);
  EXPECT_FALSE(vm.results().error.empty());
  vm.poll_timeline();  // nothing to simulate: must not start or crash
  EXPECT_EQ(vm.timeline(), nullptr);
  in.model = "qwen2.5-7b";
  vm.set_inputs(in);
  EXPECT_TRUE(vm.results().ok) << vm.results().error;
}

TEST(ViewModel, CurvesCoverTheContextsAndGrowWithContext) {
  ViewModel vm;
  const auto ctx = ViewModel::curve_contexts();
  ASSERT_EQ(ctx.front(), 8 * kK);
  ASSERT_EQ(ctx.back(), 16 * kM);
  ASSERT_EQ(vm.results().curves.size(), 3u);
  for (const auto& c : vm.results().curves) {
    ASSERT_EQ(c.points.size(), ctx.size()) << c.label;
    for (size_t i = 1; i < c.points.size(); ++i) {
      const auto &a = c.points[i - 1], &b = c.points[i];
      if (!a.valid || !b.valid) continue;
      // Step time always grows with the context (more tokens, longer prefixes).
      EXPECT_GT(b.step_s, a.step_s) << c.label << " at " << b.context_tokens;
      // Memory never shrinks with the context; dense and standard grow with it.
      EXPECT_GE(b.peak_device_bytes + b.peak_host_bytes, a.peak_device_bytes + a.peak_host_bytes)
          << c.label << " at " << b.context_tokens;
    }
  }
  // Standard training stops fitting on a single H200 well before 16M; oomb dense still fits.
  const auto& standard = vm.results().curves[2];
  EXPECT_FALSE(standard.points.back().feasible);
  EXPECT_TRUE(vm.results().curves[0].points.front().feasible);
}

TEST(ViewModel, FeasibilityMapHasInfeasibleCellsAtHugeContexts) {
  ViewModel vm;
  Inputs in = vm.inputs();
  in.gpu = "rtx-4090";
  in.config.context_tokens = 16 * kM;
  vm.set_inputs(in);
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  const auto& fm = vm.results().feasibility;
  ASSERT_EQ(fm.cells.size(), fm.chunks.size() * fm.budgets.size());
  int infeasible = 0;
  for (const auto& c : fm.cells)
    if (c.valid && !c.feasible) {
      ++infeasible;
      EXPECT_TRUE(simulator::is_memory(c.binding)) << "an infeasible cell carries the memory limit it exceeds, not "
                                                    << to_string(c.binding);
    }
  EXPECT_GT(infeasible, 0);
  EXPECT_FALSE(vm.results().summary.feasible);
}

TEST(ViewModel, PlanForMeLoadsTheFeasiblePlanAndExportRoundTrips) {
  Inputs in;
  in.config.chunk_tokens = 512;  // a poor starting point the planner must leave
  in.config.resident_layers = 28;  // all on the GPU: does not fit at 4M
  ViewModel vm(in);
  EXPECT_FALSE(vm.results().summary.feasible);
  const std::string msg = vm.plan_for_me();
  EXPECT_NE(msg.find("planned"), std::string::npos) << msg;
  ASSERT_TRUE(vm.results().ok);
  EXPECT_TRUE(vm.results().summary.feasible);
  EXPECT_EQ(vm.inputs().config.context_tokens, in.config.context_tokens);
  EXPECT_EQ(vm.inputs().config.attention, step::Attention::dense);  // exact unless sparse was chosen

  const auto path = (std::filesystem::temp_directory_path() / "oomb_gui_plan_test.json").string();
  ASSERT_EQ(vm.export_plan(path), "");
  const planner::Plan plan = planner::load_plan(path);
  EXPECT_EQ(plan.model_id, "qwen2.5-7b");
  EXPECT_EQ(plan.config.chunk_tokens, vm.inputs().config.chunk_tokens);
  std::filesystem::remove(path);
  EXPECT_NE(vm.export_plan("/nonexistent-dir/p.json"), "");
}

TEST(ViewModel, PlanForMeSaysWhyNothingFits) {
  Inputs in;
  in.gpu = "rtx-4090";
  in.config.context_tokens = 16 * 1024 * 1024;
  ViewModel vm(in);
  const Inputs before = vm.inputs();
  const std::string msg = vm.plan_for_me();
  EXPECT_NE(msg.find("no plan fits"), std::string::npos) << msg;
  EXPECT_TRUE(vm.inputs() == before);  // nothing loaded
}

TEST(ViewModel, RecomputeFitsInAFrame) {
  ViewModel vm;  // qwen2.5-7b, h200, 4M
  Inputs in = vm.inputs();
  double total_ms = 0, worst_ms = 0;
  constexpr int kChanges = 20;
  for (int i = 0; i < kChanges; ++i) {
    in.config.context_tokens = (i % 2 ? 4 : 2) * kM;
    vm.set_inputs(in);
    total_ms += vm.results().compute_ms;
    worst_ms = std::max(worst_ms, vm.results().compute_ms);
  }
  std::printf("recompute per change (summary + table + 3 curves x 12 contexts + 8 x 8 map): mean %.3f ms, worst %.3f ms\n",
              total_ms / kChanges, worst_ms);
  EXPECT_LT(total_ms / kChanges, kFrameBudgetMs);
}

TEST(ViewModel, TimelineRunsInTheBackgroundAndFiltersChunks) {
  Inputs in;
  in.config.context_tokens = 64 * kK;  // 16 chunks of 4K
  ViewModel vm(in);
  vm.poll_timeline();
  EXPECT_TRUE(vm.timeline_pending());
  ASSERT_TRUE(vm.wait_timeline(60));
  const Timeline* t = vm.timeline();
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->ok) << t->error;
  EXPECT_EQ(t->chunks, 16);
  EXPECT_EQ(t->chunk_first, 14);  // default: the last two chunks
  EXPECT_EQ(t->chunk_last, 15);
  for (int st = 0; st < 2; ++st) {
    ASSERT_FALSE(t->stage_events[st].empty());
    for (size_t i : t->stage_events[st]) {
      const auto& e = t->trace.events[i];
      EXPECT_EQ(e.stage, st + 1);
      EXPECT_GE(e.chunk, 14);
    }
    EXPECT_LT(t->stage_t0_ns[st], t->stage_t1_ns[st]);
  }
  EXPECT_FALSE(t->pool.t_s.empty());
  EXPECT_GT(t->pool.pool_capacity_pages, 0);
  // Refiltering a new chunk range does not recompute.
  vm.set_timeline_request({traces::Detail::layer, 0, 0});
  vm.poll_timeline();
  EXPECT_FALSE(vm.timeline_pending());
  EXPECT_EQ(vm.timeline()->chunk_first, 0);
  for (size_t i : vm.timeline()->stage_events[0]) EXPECT_EQ(vm.timeline()->trace.events[i].chunk, 0);
  // Changing the inputs hides the stale timeline until the new one is there.
  in.config.context_tokens = 32 * kK;
  vm.set_inputs(in);
  EXPECT_EQ(vm.timeline(), nullptr);
  ASSERT_TRUE(vm.wait_timeline(60));
  EXPECT_EQ(vm.timeline()->chunks, 8);
}

// The CLI's event-simulation limit (simulate --timeline) holds for the GUI's timeline: tiny with
// 4096 layers at 4M (1024 chunks, 4M pairs) is refused at once, with the CLI's message, instead of a
// background simulation of many GiB; the closed-form results are still there.
TEST(ViewModel, TimelineBeyondTheEventLimitIsRefusedAsInTheCli) {
  const auto dir = std::filesystem::temp_directory_path() / "oomb_gui_deep_test";
  std::filesystem::create_directories(dir);
  const std::string deep = (dir / "deep.json").string();
  {
    Json m = read_json_file(std::string(OOMB_SOURCE_DIR) + "/models/llm/tiny.json");
    m["layers"] = 4096;
    write_text_file(deep, m.dump(2));
  }
  Inputs in;
  in.model = deep;
  in.gpu = "h200";
  in.config.context_tokens = 4 * kM;
  simulator::Scenario s = scenario_of(in);
  s.config = in.config;
  std::string cli_problem;
  try {
    simulator::check_event_simulation_size(s, "--timeline", "", "");
  } catch (const Error& e) {
    cli_problem = e.problem();
  }
  ASSERT_NE(cli_problem, "") << "the CLI takes this simulation: the test needs one it refuses";
  const auto t0 = std::chrono::steady_clock::now();
  ViewModel vm(in);
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  EXPECT_NE(vm.results().timeline_refused.find(cli_problem), std::string::npos) << vm.results().timeline_refused;
  ASSERT_TRUE(vm.wait_timeline(60));
  EXPECT_FALSE(vm.timeline_pending());
  const Timeline* t = vm.timeline();
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->ok);
  EXPECT_TRUE(t->refused);
  EXPECT_NE(t->error.find("the limit is 65536 (chunk, layer) pairs"), std::string::npos) << t->error;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  // Back within the limit, the timeline is simulated again.
  in.model = "tiny";
  in.config.context_tokens = 64 * kK;
  vm.set_inputs(in);
  EXPECT_EQ(vm.results().timeline_refused, "");
  ASSERT_TRUE(vm.wait_timeline(60));
  EXPECT_TRUE(vm.timeline()->ok) << vm.timeline()->error;
  std::filesystem::remove_all(dir);
}

// The pool panel's lines: dense pools are allocated at their high-water; sparse pools at the union's
// bound, above the high-water the modelled overlap predicts (docs/model.md, peak rule).
TEST(ViewModel, PoolSeriesHoldsTheAllocationAndTheModelledHighWater) {
  Inputs in;
  in.model = "tiny";
  in.config.context_tokens = 4 * kK;
  in.config.chunk_tokens = 512;
  in.config.page_tokens = 64;
  in.config.resident_layers = 1;
  ViewModel vm(in);
  ASSERT_TRUE(vm.wait_timeline(60));
  const PoolSeries& dense = vm.timeline()->pool;
  EXPECT_GT(dense.pool_capacity_pages, 0);
  EXPECT_EQ(dense.pool_allocated_pages, dense.pool_capacity_pages);
  in.config.attention = step::Attention::sparse;
  in.config.page_budget = 2;
  ASSERT_TRUE(vm.set_inputs(in));
  ASSERT_TRUE(vm.wait_timeline(60));
  const PoolSeries& sparse = vm.timeline()->pool;
  const step::PageCounts pc = simulator::page_counts(scenario_of(in));
  EXPECT_EQ(sparse.pool_capacity_pages, pc.kv_pool_pages + pc.grad_pool_pages);
  EXPECT_EQ(sparse.pool_allocated_pages, pc.kv_pool_capacity_pages + pc.grad_pool_capacity_pages);
  EXPECT_GT(sparse.pool_allocated_pages, sparse.pool_capacity_pages);
}

TEST(ViewModel, OverlayAlignsAMeasuredTraceByKey) {
  Inputs in;
  in.config.context_tokens = 32 * kK;
  ViewModel vm(in);
  ASSERT_TRUE(vm.wait_timeline(60));
  // A "measured" trace: the prediction itself, written and read back.
  const auto path = (std::filesystem::temp_directory_path() / "oomb_gui_overlay_test.json").string();
  traces::write_trace(vm.timeline()->trace, path);
  ASSERT_EQ(vm.load_trace(path), "");
  ASSERT_NE(vm.overlay(), nullptr);
  size_t matched = 0;
  for (size_t i : vm.timeline()->stage_events[1]) matched += vm.overlay()->by_key.count(event_key(vm.timeline()->trace.events[i]));
  EXPECT_EQ(matched, vm.timeline()->stage_events[1].size());
  EXPECT_FALSE(vm.overlay()->comparison.rows.empty());
  for (const auto& row : vm.overlay()->comparison.rows) EXPECT_NEAR(row.error, 0.0, 1e-9) << row.name;
  std::filesystem::remove(path);
  EXPECT_NE(vm.load_trace("/nonexistent/trace.json"), "");
}

// `oomb validate` and the GUI's overlay judge the same plan and trace alike: the verdict and every
// term (predicted, measured, tolerance), passing and failing.
TEST(ViewModel, OverlayGivesTheVerdictOfOombValidate) {
  const auto dir = std::filesystem::temp_directory_path() / "oomb_gui_validate_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string oomb = std::string(OOMB_BINARY_DIR) + "/oomb";
  const std::string plan = (dir / "p.json").string(), trace = (dir / "t.json").string();
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  ASSERT_EQ(sh(oomb + " plan --model tiny --gpu h200 --context 2K --chunk 512 --page 64 --resident-layers 1 --out " +
               plan),
            0);
  ASSERT_EQ(sh(oomb + " run --plan " + plan + " --trace " + trace + " --warmup 0 --steps 1 --threads 1 --quiet"), 0);
  const planner::Plan p = planner::load_plan(plan);
  Inputs in;
  in.model = "tiny";
  in.gpu = "h200";
  in.config = p.config;
  ViewModel vm(in);
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  // A second trace that claims one more device byte at the peak: FAILED both ways.
  traces::Trace bad = traces::read_trace(trace);
  bad.metadata.extra["measured"]["peak_device_bytes"] = bad.metadata.extra["measured"]["peak_device_bytes"].get<int64_t>() * 2;
  const std::string bad_path = (dir / "bad.json").string();
  traces::write_trace(bad, bad_path);
  for (const std::string& t : {trace, bad_path}) {
    SCOPED_TRACE(t);
    const std::string out = (dir / "v.json").string();
    const int rc = std::system((oomb + " validate --plan " + plan + " --trace " + t + " --json > " + out).c_str());
    std::FILE* f = std::fopen(out.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string text;
    for (int ch; (ch = std::fgetc(f)) != EOF;) text.push_back(static_cast<char>(ch));
    std::fclose(f);
    const Json j = Json::parse(text);
    ASSERT_EQ(vm.load_trace(t), "");
    ASSERT_NE(vm.overlay(), nullptr);
    ASSERT_TRUE(vm.overlay()->validation.has_value()) << vm.overlay()->validation_error;
    const validation::Validation& v = *vm.overlay()->validation;
    EXPECT_EQ(v.ok, j.at("ok").get<bool>());
    EXPECT_EQ(v.ok, t == trace);
    EXPECT_EQ(WEXITSTATUS(rc), v.ok ? 0 : 1);
    ASSERT_EQ(v.terms.size(), j.at("terms").size());
    for (size_t i = 0; i < v.terms.size(); ++i) {
      const Json& jt = j.at("terms")[i];
      EXPECT_EQ(v.terms[i].name, jt.at("name").get<std::string>());
      EXPECT_DOUBLE_EQ(v.terms[i].predicted, jt.at("predicted").get<double>()) << v.terms[i].name;
      EXPECT_DOUBLE_EQ(v.terms[i].tolerance, jt.at("tolerance").get<double>()) << v.terms[i].name;
      EXPECT_EQ(v.terms[i].measured.has_value(), !jt.at("measured").is_null()) << v.terms[i].name;
      if (v.terms[i].measured) {
        EXPECT_DOUBLE_EQ(*v.terms[i].measured, jt.at("measured").get<double>());
      }
    }
  }
  std::filesystem::remove_all(dir);
}

// Inputs of a tiny run small enough to simulate and validate in milliseconds: 4K tokens in chunks
// of 1K, pages of 64, one resident layer.
Inputs tiny_4k() {
  Inputs in;
  in.model = "tiny";
  in.gpu = "h200";
  in.config.context_tokens = 4 * kK;
  in.config.chunk_tokens = kK;
  in.config.page_tokens = 64;
  in.config.resident_layers = 1;
  return in;
}

// Rank 0's trace of a multi-rank run brings the others (found by the rule `oomb run` writes them
// by); the user picks which one is overlaid; every rank is judged against the current inputs and
// the slowest binds. The traces are written here through traces::write_trace: the predicted
// timeline's events under a hand-made run record per rank (a 4-process job, rank 3's file absent,
// rank 2's a run of another model), so that each figure is known.
// A sparse run whose selections overlap less than the inputs assume: the overlay's verdict carries
// the overlap the run's unions imply (as `oomb validate --json` states it), and using it predicts
// the pools as the run filled them.
TEST(ViewModel, OverlayOfASparseRunOffersTheOverlapItsUnionsImply) {
  const auto dir = std::filesystem::temp_directory_path() / "oomb_gui_overlap_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string oomb = std::string(OOMB_BINARY_DIR) + "/oomb";
  const std::string plan = (dir / "p.json").string(), trace = (dir / "t.json").string(),
                    out = (dir / "v.json").string();
  auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  ASSERT_EQ(sh(oomb + " plan --model tiny --gpu h200 --context 4K --chunk 512 --page 64 --resident-layers 1 "
                      "--attention sparse --budget 2 --out " + plan),
            0);
  ASSERT_EQ(sh(oomb + " run --plan " + plan + " --trace " + trace + " --warmup 0 --steps 1 --threads 1 --quiet"), 0);
  std::system((oomb + " validate --plan " + plan + " --trace " + trace + " --json > " + out).c_str());
  const Json j = read_json_file(out);
  ASSERT_TRUE(j.contains("implied_selection_overlap")) << j.dump();
  const double implied = j.at("implied_selection_overlap").get<double>();
  Inputs in;
  in.model = "tiny";
  in.gpu = "h200";
  in.config = planner::load_plan(plan).config;
  ASSERT_DOUBLE_EQ(in.config.selection_overlap, 0.75);
  ViewModel vm(in);
  EXPECT_EQ(vm.use_measured_overlap(), "no measured trace loaded");
  ASSERT_EQ(vm.load_trace(trace), "");
  ASSERT_TRUE(vm.overlay()->validation.has_value()) << vm.overlay()->validation_error;
  ASSERT_TRUE(vm.overlay()->validation->implied_selection_overlap.has_value());
  EXPECT_DOUBLE_EQ(*vm.overlay()->validation->implied_selection_overlap, implied);
  EXPECT_LT(implied, 0.75);
  auto pool_ok = [&] {
    for (const auto& t : vm.overlay()->validation->terms)
      if (t.name == "kv_pool_pages") return t.ok();
    return std::optional<bool>();
  };
  EXPECT_EQ(pool_ok(), std::optional<bool>(false)) << "the pools at 0.75 should disagree with this run";
  EXPECT_NE(vm.use_measured_overlap().find("-> "), std::string::npos);
  EXPECT_DOUBLE_EQ(vm.inputs().config.selection_overlap, implied);
  ASSERT_TRUE(vm.wait_timeline(60));
  ASSERT_TRUE(vm.overlay()->validation.has_value()) << vm.overlay()->validation_error;
  EXPECT_EQ(pool_ok(), std::optional<bool>(true));
  std::filesystem::remove_all(dir);
}

TEST(ViewModel, OverlayOfAMultiRankRunFindsPicksAndJudgesEveryRank) {
  const auto dir = std::filesystem::temp_directory_path() / "oomb_gui_ranks_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ViewModel vm(tiny_4k());
  ASSERT_TRUE(vm.wait_timeline(60));
  const Inputs in = vm.inputs();
  auto rank_trace = [&](int rank, double step_s, const std::string& model) {
    traces::Trace t = vm.timeline()->trace;
    t.metadata.source = "cpu";
    t.metadata.device = "rank " + std::to_string(rank);
    const Json measured = {{"backend", "cpu"},
                           {"steps", 1},
                           {"step_s", step_s},
                           {"peak_device_bytes", 1000 + rank},
                           {"tensor_parallel",
                            {{"tp", 4},
                             {"rank", rank},
                             {"world", 4},
                             {"comm", "mpi"},
                             {"allreduces", 8},
                             {"allreduce_bytes", 1000 * (rank + 1)},
                             {"allreduce_s", 0.1 * (rank + 1)},
                             {"allreduce_wait_s", 0.01}}}};  // a field beside the total: shown, not added
    t.metadata.extra = {{"schema", step::kRunRecordSchema},
                        {"model", model},
                        {"config", in.config.to_json()},
                        {"measured", measured}};
    return t;
  };
  const std::string t0 = (dir / "t.json").string();
  traces::write_trace(rank_trace(0, 1.0, "tiny"), t0);
  traces::write_trace(rank_trace(1, 3.0, "tiny"), validation::rank_trace_path(t0, 1));
  traces::write_trace(rank_trace(2, 2.0, "qwen2.5-7b"), validation::rank_trace_path(t0, 2));
  ASSERT_EQ(vm.load_trace(t0), "");
  const Overlay* ov = vm.overlay();
  ASSERT_NE(ov, nullptr);
  EXPECT_EQ(ov->world, 4);
  EXPECT_EQ(ov->rank, 0);
  EXPECT_EQ(ov->path, t0);
  ASSERT_EQ(ov->ranks.size(), 4u);
  for (int k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    const validation::RankVerdict& r = ov->ranks[static_cast<size_t>(k)];
    EXPECT_EQ(r.rank, k);
    EXPECT_EQ(r.trace, validation::rank_trace_path(t0, k));
    EXPECT_EQ(r.found, k < 3);
    EXPECT_EQ(r.binds, k == 1);  // the slowest step (3 s)
  }
  EXPECT_EQ(ov->binding_rank, 1);
  // Each rank's summary is its own record's: step, peak, collectives (the new field listed too).
  const validation::RankVerdict& r1 = ov->ranks[1];
  EXPECT_DOUBLE_EQ(*r1.step_s, 3.0);
  EXPECT_EQ(*r1.peak_device_bytes, 1001);
  ASSERT_TRUE(r1.collective_s().has_value());
  EXPECT_DOUBLE_EQ(*r1.collective_s(), 0.2);
  bool wait_listed = false;
  for (const auto& f : r1.collectives) wait_listed |= f.name == "tp_allreduce_wait_s" && f.value == 0.01;
  EXPECT_TRUE(wait_listed);
  // Judged against the inputs as validate_run judges each file; rank 2 is no run of them.
  for (int k : {0, 1}) {
    validation::ValidationRequest req;
    const traces::Trace t = traces::read_trace(validation::rank_trace_path(t0, k));
    req.trace = &t;
    req.trace_where = validation::rank_trace_path(t0, k);
    req.scenario = vm.results().scenario;
    const validation::Validation want = validation::validate_run(req);
    ASSERT_TRUE(ov->ranks[static_cast<size_t>(k)].validation.has_value()) << ov->ranks[static_cast<size_t>(k)].error;
    EXPECT_EQ(ov->ranks[static_cast<size_t>(k)].ok(), want.ok);
    EXPECT_EQ(ov->ranks[static_cast<size_t>(k)].validation->terms.size(), want.terms.size());
  }
  EXPECT_FALSE(ov->ranks[2].validation.has_value());
  EXPECT_NE(ov->ranks[2].error.find("metadata.extra.model"), std::string::npos) << ov->ranks[2].error;
  EXPECT_NE(ov->ranks[3].error.find("t.rank3.json"), std::string::npos) << ov->ranks[3].error;
  ASSERT_TRUE(ov->validation.has_value());  // the shown rank's verdict is rank 0's
  EXPECT_EQ(ov->validation->terms.size(), ov->ranks[0].validation->terms.size());

  // Picking a rank overlays its trace; the others are kept (back and forth, nothing lost).
  EXPECT_EQ(vm.select_rank(1), "");
  EXPECT_EQ(ov->rank, 1);
  EXPECT_EQ(ov->path, validation::rank_trace_path(t0, 1));
  EXPECT_EQ(ov->trace.metadata.device, "rank 1");
  EXPECT_FALSE(ov->by_key.empty());
  ASSERT_TRUE(ov->validation.has_value());
  EXPECT_EQ(ov->validation->ok, ov->ranks[1].ok());
  EXPECT_EQ(vm.select_rank(2), "");
  EXPECT_EQ(ov->trace.metadata.device, "rank 2");
  EXPECT_FALSE(ov->validation.has_value());
  EXPECT_NE(ov->validation_error.find("metadata.extra.model"), std::string::npos);
  EXPECT_EQ(vm.select_rank(0), "");
  EXPECT_EQ(ov->trace.metadata.device, "rank 0");
  EXPECT_EQ(vm.select_rank(1), "");
  EXPECT_EQ(ov->trace.metadata.device, "rank 1");
  // What cannot be shown is said, naming the file or the valid ranks; the shown rank stays.
  const std::string missing = vm.select_rank(3);
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;
  EXPECT_NE(missing.find("t.rank3.json"), std::string::npos) << missing;
  const std::string beyond = vm.select_rank(4);
  EXPECT_NE(beyond.find("beyond the run's world size"), std::string::npos) << beyond;
  EXPECT_NE(beyond.find(t0 + " is rank 0 of 4 processes (ranks 0..3)"), std::string::npos) << beyond;
  EXPECT_NE(vm.select_rank(-1).find("beyond the run's world size"), std::string::npos);
  EXPECT_EQ(ov->rank, 1);
  EXPECT_EQ(ov->trace.metadata.device, "rank 1");

  // New inputs: every rank judged again against them (a different context: no run of these).
  Inputs other = in;
  other.config.context_tokens = 8 * kK;
  ASSERT_TRUE(vm.set_inputs(other));
  ASSERT_TRUE(vm.wait_timeline(60));
  for (int k : {0, 1}) {
    EXPECT_FALSE(ov->ranks[static_cast<size_t>(k)].validation.has_value()) << k;
    EXPECT_NE(ov->ranks[static_cast<size_t>(k)].error.find("context_tokens"), std::string::npos)
        << ov->ranks[static_cast<size_t>(k)].error;
  }
  EXPECT_EQ(ov->binding_rank, 1);  // the measured steps did not change

  // Another rank's trace alone names no set; a one-process trace has rank 0 only; nothing loaded.
  ASSERT_EQ(vm.load_trace(validation::rank_trace_path(t0, 1)), "");
  EXPECT_TRUE(vm.overlay()->ranks.empty());
  EXPECT_EQ(vm.overlay()->world, 4);
  EXPECT_EQ(vm.overlay()->rank, 1);
  EXPECT_NE(vm.select_rank(0).find("load rank 0's"), std::string::npos);
  traces::Trace single = rank_trace(0, 1.0, "tiny");
  single.metadata.extra["measured"].erase("tensor_parallel");
  traces::write_trace(single, (dir / "one.json").string());
  ASSERT_EQ(vm.load_trace((dir / "one.json").string()), "");
  EXPECT_EQ(vm.overlay()->world, 1);
  EXPECT_EQ(vm.select_rank(0), "");
  EXPECT_NE(vm.select_rank(1).find("one-process run"), std::string::npos);
  vm.clear_overlay();
  EXPECT_NE(vm.select_rank(0).find("no measured trace"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// A real two-rank run (mpirun -np 2 oomb run of a tensor-parallel plan): the overlay finds rank
// 1's trace and judges both ranks as `oomb validate --json` does (verdict, step, peak,
// collectives, the binding rank); picking rank 1 overlays t.rank1.json with its own terms.
// Skipped without mpirun or an MPI build of oomb.
TEST(ViewModel, OverlayOfATwoRankRunJudgesEveryRankAsOombValidate) {
  using oomb::test::run_oomb;
  using oomb::test::sh;
  if (!std::filesystem::exists(oomb::test::oomb_binary())) GTEST_SKIP() << "oomb executable not built";
  if (sh("command -v mpirun").rc != 0) GTEST_SKIP() << "no mpirun (apt install openmpi-bin)";
  if (run_oomb("--version").out.find("mpi=yes") == std::string::npos) GTEST_SKIP() << "oomb built without MPI";
  const auto dir = std::filesystem::temp_directory_path() / "oomb_gui_two_ranks_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string plan = (dir / "p.json").string(), t0 = (dir / "t.json").string();
  const auto planned = run_oomb("plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 "
                                "--gpus 2 --out " + plan);
  ASSERT_EQ(planned.rc, 0) << planned.out;
  const auto two = sh(oomb::test::mpirun_oomb(2) + "run --plan " + plan + " --backend cpu --trace " + t0 +
                      " --warmup 0 --steps 1 --quiet");
  ASSERT_EQ(two.rc, 0) << two.out;
  const auto validated = run_oomb("validate --plan " + plan + " --trace " + t0 + " --json", /*stdout_only=*/true);
  const Json j = Json::parse(validated.out);
  ASSERT_EQ(j.at("ranks").size(), 2u) << j.dump();
  const planner::Plan p = planner::load_plan(plan);
  Inputs in;
  in.model = "tiny";
  in.gpu = "h200";
  in.config = p.config;
  ViewModel vm(in);
  ASSERT_TRUE(vm.results().ok) << vm.results().error;
  ASSERT_EQ(vm.load_trace(t0), "");
  const Overlay* ov = vm.overlay();
  ASSERT_EQ(ov->ranks.size(), 2u);
  int binds = 0;
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    const validation::RankVerdict& r = ov->ranks[static_cast<size_t>(k)];
    const Json& jr = j.at("ranks")[static_cast<size_t>(k)];
    EXPECT_EQ(r.trace, jr.at("trace").get<std::string>());
    EXPECT_TRUE(r.found);
    EXPECT_EQ(r.ok(), jr.at("ok").get<bool>());
    EXPECT_TRUE(r.ok()) << r.error;  // both ranks are the plan's, exactly
    EXPECT_DOUBLE_EQ(*r.step_s, jr.at("step_s").get<double>());
    EXPECT_EQ(*r.peak_device_bytes, jr.at("peak_device_bytes").get<int64_t>());
    EXPECT_EQ(r.binds, jr.at("binds").get<bool>());
    binds += r.binds;
    ASSERT_EQ(r.collectives.size(), jr.at("collectives").size());
    for (const auto& f : r.collectives) EXPECT_DOUBLE_EQ(f.value, jr.at("collectives").at(f.name).get<double>()) << f.name;
    EXPECT_GT(*r.collective_s(), 0);
  }
  EXPECT_EQ(binds, 1);
  ASSERT_EQ(vm.select_rank(1), "");
  const traces::Trace t1 = traces::read_trace(validation::rank_trace_path(t0, 1));
  EXPECT_EQ(ov->trace.events.size(), t1.events.size());
  EXPECT_EQ(ov->trace.metadata.extra, t1.metadata.extra);
  // Rank 1's terms are `oomb validate` of its own file.
  const Json j1 = Json::parse(
      run_oomb("validate --plan " + plan + " --trace " + validation::rank_trace_path(t0, 1) + " --json", true).out);
  ASSERT_TRUE(ov->validation.has_value()) << ov->validation_error;
  ASSERT_EQ(ov->validation->terms.size(), j1.at("terms").size());
  for (size_t i = 0; i < ov->validation->terms.size(); ++i) {
    const validation::ValidationTerm& t = ov->validation->terms[i];
    EXPECT_EQ(t.name, j1.at("terms")[i].at("name").get<std::string>());
    if (t.measured) {
      EXPECT_DOUBLE_EQ(*t.measured, j1.at("terms")[i].at("measured").get<double>()) << t.name;
    }
  }
  EXPECT_NE(vm.select_rank(2).find("beyond the run's world size"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(ViewModel, PresetsApply) {
  ViewModel vm;
  ASSERT_TRUE(vm.apply_preset("oomb-published"));
  EXPECT_EQ(vm.inputs().config.peak_measure, step::PeakMeasure::allocated);
  EXPECT_EQ(vm.inputs().config.context_tokens, 4 * kM);
  EXPECT_FALSE(vm.apply_preset("nonsense"));
  ASSERT_TRUE(vm.apply_preset("oomb"));
  EXPECT_EQ(vm.inputs().config.peak_measure, step::PeakMeasure::reserved);
}

}  // namespace
}  // namespace oomb::gui
