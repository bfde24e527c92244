// End-to-end checks of issue 12 on the built `oomb` (skipped when it was not built): training
// defaults, one answer per question (simulate --plan, sweep), honest recall curves, plans the
// executor cannot run, and the multi-GPU comparison.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <sys/wait.h>

#include "core/format.h"
#include "core/json.h"
#include "planner/plan.h"
#include "cli_run.h"

namespace {

using oomb::test::CliRun;
using oomb::test::oomb_binary;

// `oomb ARGS`; stderr joins stdout unless stdout_only.
CliRun oomb(const std::string& args, bool stdout_only = false) { return oomb::test::run_oomb(args, stdout_only); }

bool has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

class TrainingCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(oomb_binary())) GTEST_SKIP() << "oomb executable not built";
    dir_ = std::filesystem::temp_directory_path() / ("oomb_training_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(TrainingCli, DefaultPlanHasAnOptimizerAndSaysWhereItLives) {
  const CliRun r = oomb("plan --model qwen2.5-7b --gpu h200 --context 4M --json", true);
  ASSERT_EQ(r.rc, 0) << r.out;
  const oomb::Json j = oomb::parse_json(r.out, "stdout");
  EXPECT_NE(j["plan"]["config"]["optimizer"], "none");
  // AdamW for 7.6B parameters: fp32 master + m + v, 12 bytes each at least (85 GiB).
  EXPECT_GE(j["optimizer"]["bytes"].get<int64_t>(), int64_t{7'615'616'512} * 12);
  EXPECT_EQ(j["optimizer"]["tier"], "host");
  // The text says it too; the published measurement preset keeps no optimizer state.
  const CliRun t = oomb("plan --model qwen2.5-7b --gpu h200 --context 4M");
  EXPECT_TRUE(has(t.out, "AdamW (fp32 master + m + v), " + oomb::format_bytes(j["optimizer"]["bytes"].get<int64_t>()) +
                             " on the host"))
      << t.out;
  const CliRun pub = oomb("plan --model qwen2.5-7b --gpu h200 --context 1M --preset oomb-published --json", true);
  ASSERT_EQ(pub.rc, 0) << pub.out;
  EXPECT_EQ(oomb::parse_json(pub.out, "stdout")["plan"]["config"]["optimizer"], "none");
  // auto is listed in the help and in the error.
  EXPECT_TRUE(has(oomb("plan --help").out, "auto (default"));
  const CliRun bad = oomb("simulate --model tiny --context 4K --optimizer adam");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_TRUE(has(bad.out, "auto")) << bad.out;
}

TEST_F(TrainingCli, SimulatePlanEqualsThePlansPredictionByteForByte) {
  for (const std::string& args : {std::string("--model qwen2.5-7b --gpu h200 --context 1M"),
                                  std::string("--model qwen2.5-72b --gpu h200 --context 256K --gpus 8"),
                                  std::string("--model tiny --gpu h100-sxm --context 12K --allow-sparse")}) {
    const std::string p = path("p.json");
    ASSERT_EQ(oomb("plan " + args + " --out " + p).rc, 0) << args;
    const oomb::planner::Plan plan = oomb::planner::load_plan(p);
    const CliRun sim = oomb("simulate --plan " + p + " --json", true);
    ASSERT_EQ(sim.rc, 0) << sim.out;
    EXPECT_EQ(sim.out, plan.prediction.dump(2) + "\n") << args;
    // A plan fixes every knob: flags that would change it are refused.
    EXPECT_EQ(oomb("simulate --plan " + p + " --chunk 8K").rc, 2);
  }
  // Without --plan, simulate's defaults are plan's (fused loss, AdamW placed): the same numbers
  // for the same configuration.
  const CliRun plan = oomb("plan --model qwen2.5-7b --gpu h200 --context 1M --chunk 4K --page 128 --resident-layers 2 "
                           "--kv-grad-dtype fp32 --param-grad-dtype bf16 --checkpointing true --kept-layers 0 --json",
                           true);
  ASSERT_EQ(plan.rc, 0) << plan.out;
  const oomb::Json pj = oomb::parse_json(plan.out, "stdout");
  ASSERT_EQ(pj["plan"]["config"]["logits_chunk_tokens"], 1024);
  const CliRun sim = oomb("simulate --model qwen2.5-7b --gpu h200 --context 1M --json", true);
  ASSERT_EQ(sim.rc, 0);
  const oomb::Json sj = oomb::parse_json(sim.out, "stdout");
  EXPECT_EQ(sj["peak_device_bytes"], pj["prediction"]["peak_device_bytes"]);
  EXPECT_EQ(sj["step_s"], pj["prediction"]["step_s"]);
}

TEST_F(TrainingCli, CheckpointingOffPlansRunWithoutRecompute) {
  const std::string p = path("off.json");
  const CliRun r = oomb("plan --model tiny --gpu h200 --context 8K --checkpointing false --out " + p);
  ASSERT_EQ(r.rc, 0) << r.out;
  const oomb::Json j = oomb::read_json_file(p);
  EXPECT_TRUE(j["executable"].get<bool>());
  EXPECT_FALSE(j["config"]["checkpointing"].get<bool>());
  EXPECT_FALSE(has(r.out, "NOT EXECUTABLE")) << r.out;
  EXPECT_EQ(oomb("run --plan " + p + " --quiet").rc, 0);
  // The default 4M plan is the fastest, and with checkpointing off (faster, it fits) it is runnable.
  const std::string run_me = path("run.json");
  const CliRun w = oomb("plan --model qwen2.5-7b --gpu h200 --context 4M --out " + run_me);
  ASSERT_EQ(w.rc, 0) << w.out;
  EXPECT_FALSE(has(w.out, "NOT EXECUTABLE")) << w.out;
  const oomb::Json wj = oomb::read_json_file(run_me);
  EXPECT_TRUE(wj["executable"].get<bool>());
  EXPECT_FALSE(wj["config"]["checkpointing"].get<bool>());
}

// Partial checkpointing end to end: --kept-layers is planned, printed, written to the plan, run
// (memory validated against the plan like every plan's) and compared by validate; values outside
// 0 <= K < layers, or with checkpointing off, are refused naming the flag (exit 2).
TEST_F(TrainingCli, KeptLayersArePlannedRunAndValidated) {
  const std::string p = path("kept.json"), t = path("kept_trace.json");
  const CliRun r = oomb("plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 "
                        "--kept-layers 1 --out " + p);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "checkpointing on, last 1 of 2 layers kept")) << r.out;
  const oomb::Json j = oomb::read_json_file(p);
  EXPECT_TRUE(j["executable"].get<bool>());
  EXPECT_TRUE(j["config"]["checkpointing"].get<bool>());
  EXPECT_EQ(j["config"]["kept_layers"], 1);
  const CliRun run = oomb("run --plan " + p + " --trace " + t + " --quiet");
  ASSERT_EQ(run.rc, 0) << run.out;
  const CliRun v = oomb("validate --plan " + p + " --trace " + t);
  EXPECT_EQ(v.rc, 0) << v.out;
  EXPECT_TRUE(has(v.out, "OK: every comparable term")) << v.out;
  // The trace records the setting; a plan with another one is not this run's.
  const oomb::Json tj = oomb::read_json_file(t);
  EXPECT_EQ(tj["metadata"]["extra"]["config"]["kept_layers"], 1);
  // ... and the commit of the binary that ran it, as `oomb --version` names it.
  const std::string version = oomb("--version").out, commit = tj["metadata"]["git_commit"].get<std::string>();
  EXPECT_FALSE(commit.empty());
  EXPECT_TRUE(has(version, "(commit " + commit + ")")) << commit << " / " << version;
  const std::string p0 = path("kept0.json");
  ASSERT_EQ(oomb("plan --model tiny --gpu h200 --context 4K --chunk 1K --page 64 --resident-layers 1 "
                 "--kept-layers 0 --out " + p0).rc, 0);
  const CliRun other = oomb("validate --plan " + p0 + " --trace " + t);
  EXPECT_EQ(other.rc, 2) << other.out;
  EXPECT_TRUE(has(other.out, "kept_layers")) << other.out;
  // simulate prints it too.
  EXPECT_TRUE(has(oomb("simulate --model tiny --gpu h200 --context 8K --kept-layers 1").out, "on, last 1 of 2 layers kept"));

  for (const std::string& bad : {std::string("plan --model tiny --gpu h200 --context 8K --kept-layers 2"),
                                 std::string("plan --model tiny --gpu h200 --context 8K --kept-layers 1 --checkpointing false"),
                                 std::string("plan --model tiny --gpu h200 --context 8K --kept-layers -1"),
                                 std::string("simulate --model qwen2.5-7b --gpu h200 --context 8K --kept-layers 28"),
                                 std::string("simulate --model qwen2.5-7b --gpu h200 --context 8K --layers 4 --kept-layers 4"),
                                 std::string("run --model tiny --context 256 --chunk 128 --page 64 --kept-layers 2")}) {
    const CliRun b = oomb(bad);
    EXPECT_EQ(b.rc, 2) << bad << "\n" << b.out;
    EXPECT_TRUE(has(b.out, "--kept-layers")) << bad << "\n" << b.out;
  }
}

TEST_F(TrainingCli, PlansTheExecutorCannotRunAreLabelledAndRefused) {
  // A selection rule the simulator models and the executor does not run (planner/executable.cpp).
  const std::string p = path("quest.json");
  const CliRun r = oomb("plan --model tiny --gpu h200 --context 8K --attention sparse --selection quest --out " + p);
  ASSERT_EQ(r.rc, 0) << r.out;
  const oomb::Json j = oomb::read_json_file(p);
  EXPECT_FALSE(j["executable"].get<bool>());
  EXPECT_TRUE(has(r.out, "NOT EXECUTABLE")) << r.out;
  EXPECT_TRUE(has(j["executable_reason"].get<std::string>(), "quest")) << j.dump();
  const CliRun run = oomb("run --plan " + p);
  EXPECT_EQ(run.rc, 2) << run.out;
  EXPECT_TRUE(has(run.out, "not executable")) << run.out;
  EXPECT_TRUE(has(run.out, "quest")) << run.out;
}

TEST_F(TrainingCli, RecallCurveOfAnotherModelIsRefused) {
  const std::string c = path("curve.json");
  std::ofstream(c) << R"({"schema": "oomb.recall/1", "model": "tiny", "context_tokens": 4096, "chunk_tokens": 512,
    "page_tokens": 64, "points": [{"budget": 4, "page_tokens": 64, "mean_recall": 0.4, "min_recall": 0.2},
    {"budget": 32, "page_tokens": 64, "mean_recall": 0.9, "min_recall": 0.5}]})";
  const std::string args = "plan --model qwen2.5-7b --gpu h200 --context 1M --allow-sparse --min-recall 0.8 "
                           "--recall-curve " + c;
  CliRun r = oomb(args);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "measured on model tiny")) << r.out;
  EXPECT_TRUE(has(r.out, "--recall-curve-any")) << r.out;
  r = oomb(args + " --recall-curve-any");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "measured at 4K tokens (chunk 512, page 64)")) << r.out;
  EXPECT_TRUE(has(r.out, "256x longer")) << r.out;
  // The same model is used without the flag, and says how far the context differs.
  r = oomb("plan --model tiny --gpu h200 --context 16K --allow-sparse --min-recall 0.8 --recall-curve " + c);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "4x longer")) << r.out;
}

TEST_F(TrainingCli, MaxContextWithAStepTimeLimit) {
  const CliRun r = oomb("plan --model qwen2.5-7b --gpu h200 --max-context --max-step-time 1h --json", true);
  ASSERT_EQ(r.rc, 0) << r.out;
  const oomb::Json j = oomb::parse_json(r.out, "stdout");
  const auto& dense = j["max_context"]["dense"];
  EXPECT_LE(dense["plan"]["step_s"].get<double>(), 3600.0);
  EXPECT_EQ(dense["binding_constraint"], "step time limit");
  // The text never states a context limit and a different "binding constraint" for the same plan.
  const CliRun t = oomb("plan --model qwen2.5-7b --gpu h200 --max-context --max-step-time 1h");
  EXPECT_TRUE(has(t.out, "limited by step time limit")) << t.out;
  EXPECT_FALSE(has(t.out, "Binding constraint")) << t.out;
  EXPECT_TRUE(has(t.out, "Step time bound by")) << t.out;
  for (const char* bad : {"--max-step-time 1x", "--max-step-time 0", "--max-step-time -5m", "--min-tokens-per-s 0"})
    EXPECT_EQ(oomb(std::string("plan --model qwen2.5-7b --max-context ") + bad).rc, 2) << bad;
  EXPECT_EQ(oomb("plan --model qwen2.5-7b --context 1M --max-step-time 1h").rc, 2);
}

TEST_F(TrainingCli, BadInputThatUsedToReadAsNoFit) {
  for (const char* args : {"plan --model qwen2.5-7b --context 4M --resident-layers 29",
                           "simulate --model qwen2.5-7b --context 4M --resident-layers 29",
                           "plan --model tiny --context 4K --layers 1 --resident-layers 2"}) {
    const CliRun r = oomb(args);
    EXPECT_EQ(r.rc, 2) << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "--resident-layers")) << r.out;
  }
  const CliRun w = oomb("plan --model llama-3.1-8b --gpu h200 --context 1M");
  EXPECT_TRUE(has(w.out, "RoPE scaling")) << w.out;
  EXPECT_TRUE(has(w.out, "llama3")) << w.out;
}

TEST_F(TrainingCli, SweepPlansEachCellUnlessKnobsAreFixed) {
  CliRun r = oomb("sweep --model qwen2.5-7b --gpu h200 --contexts 64K,128K --json", true);
  ASSERT_EQ(r.rc, 0) << r.out;
  oomb::Json j = oomb::parse_json(r.out, "stdout");
  ASSERT_EQ(j.size(), 8u);
  for (const auto& cell : j) {
    if (cell["variant"] != "standard-published") {
      EXPECT_TRUE(cell["planned"].get<bool>()) << cell["variant"];
    }
    if (cell["variant"] == "standard-best") {
      EXPECT_TRUE(cell["fits"].get<bool>()) << cell["context_tokens"];  // fused chunked loss: 58.6 / 86.5 GiB
    }
    if (cell["variant"] == "standard-published") {
      EXPECT_FALSE(cell["fits"].get<bool>());  // full-vocabulary unfused logits
      EXPECT_EQ(cell["config"]["logits_chunk_tokens"], 0);
    }
  }
  // A cell answers what `oomb plan` would.
  const CliRun p = oomb("plan --model qwen2.5-7b --gpu h200 --context 128K --attention dense --json", true);
  ASSERT_EQ(p.rc, 0) << p.out;
  const oomb::Json pj = oomb::parse_json(p.out, "stdout");
  EXPECT_EQ(j[4]["variant"], "oomb-dense");
  EXPECT_EQ(j[4]["step_s"], pj["prediction"]["step_s"]);
  // Fixed knobs: the oomb cells are evaluated as given, and the header says what is fixed.
  r = oomb("sweep --model qwen2.5-7b --gpu h200 --contexts 64K --chunk 2K");
  EXPECT_TRUE(has(r.out, "fixed by you: chunk")) << r.out;
  r = oomb("sweep --model qwen2.5-7b --gpu h200 --contexts 64K --chunk 2K --json", true);
  j = oomb::parse_json(r.out, "stdout");
  EXPECT_FALSE(j[0]["planned"].get<bool>());
  EXPECT_EQ(j[0]["config"]["chunk_tokens"], 2048);
  r = oomb("sweep --model qwen2.5-72b --gpu h200 --gpus 8 --contexts 64K");
  EXPECT_TRUE(has(r.out, "per GPU")) << r.out;
  EXPECT_TRUE(has(r.out, "per node")) << r.out;
}

TEST_F(TrainingCli, PlanNamesBothStandardBaselines) {
  const CliRun r = oomb("plan --model qwen2.5-7b --gpu h200 --context 64K --json", true);
  ASSERT_EQ(r.rc, 0) << r.out;
  const oomb::Json b = oomb::parse_json(r.out, "stdout")["baselines"];
  ASSERT_EQ(b.size(), 2u);
  // Fused chunked loss: standard training fits at 64K; with full unfused logits it does not.
  EXPECT_TRUE(b[0]["fits"].get<bool>()) << b.dump(2);
  EXPECT_GT(b[0]["config"]["logits_chunk_tokens"].get<int64_t>(), 0);
  EXPECT_FALSE(b[1]["fits"].get<bool>()) << b.dump(2);
  EXPECT_EQ(b[1]["config"]["logits_chunk_tokens"], 0);
  EXPECT_EQ(b[1]["config"]["schedule"], "standard");
  const CliRun t = oomb("plan --model qwen2.5-7b --gpu h200 --context 64K");
  EXPECT_TRUE(has(t.out, "standard, best")) << t.out;
  EXPECT_TRUE(has(t.out, "standard, published")) << t.out;
}

TEST_F(TrainingCli, EightGpusShowOombAndContextParallelismSideBySide) {
  const CliRun r = oomb("plan --model qwen2.5-7b --gpu h100-sxm --context 4M --gpus 8");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* s : {"Multi-GPU comparison: 8 x h100-sxm", "oomb, 1 GPU", "oomb x 8 data-parallel replicas",
                        "ring attention CP", "Ulysses CP", "GPU-h per 1B", "mem per GPU"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  const CliRun j = oomb("plan --model qwen2.5-7b --gpu h100-sxm --context 1M --gpus 8 --json", true);
  ASSERT_EQ(j.rc, 0) << j.out;
  const oomb::Json mg = oomb::parse_json(j.out, "stdout")["multi_gpu"];
  bool ring_fits = false;
  for (const auto& row : mg["rows"])
    if (row["kind"] == "ring") ring_fits = ring_fits || row["fits"].get<bool>();
  EXPECT_TRUE(ring_fits) << mg.dump(2);
}

// Issue 46: the recipe people run at 1M on one node (FSDP2 with context parallelism over the 8 GPUs,
// checkpoints in pinned host memory) beside oomb's rows, in the text and the JSON.
TEST_F(TrainingCli, TheStockLongContextRecipeStandsBesideOomb) {
  const CliRun r = oomb("plan --model qwen3-8b --gpu h100-sxm --context 1M --gpus 8");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const char* s : {"FSDP2 ring attention CP 8, checkpoints on host", "FSDP2 ring attention CP 8, checkpoints on GPU",
                        "ZeRO-3 Ulysses CP 8", "pinned per node", "oomb TP 8 x 1 data-parallel replica against FSDP2"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  const CliRun j = oomb("plan --model qwen3-8b --gpu h100-sxm --context 1M --gpus 8 --json", true);
  ASSERT_EQ(j.rc, 0) << j.out;
  const oomb::Json mg = oomb::parse_json(j.out, "stdout")["multi_gpu"];
  int recipe_rows = 0;
  for (const auto& row : mg["rows"]) {
    if (!row["fsdp"].get<bool>()) continue;
    EXPECT_EQ(row["cp"], 8);
    EXPECT_EQ(row["tp"], 1);
    EXPECT_EQ(row["nodes"], 1);
    if (row["kind"] == "ring" && row["offload"].get<bool>()) {
      ++recipe_rows;
      EXPECT_TRUE(row["fits"].get<bool>()) << row.dump(2);
      EXPECT_GT(row["host_pinned_bytes_per_node"].get<int64_t>(), int64_t{250} << 30);
      EXPECT_GT(row["step_s"].get<double>(), 0);
      EXPECT_GT(row["tokens_per_s"].get<double>(), 0);
      EXPECT_NE(row["recipe"].get<std::string>().find("Hugging Face"), std::string::npos);
    }
  }
  EXPECT_EQ(recipe_rows, 1) << mg.dump(2);
  // Over two nodes the same layouts span 16 GPUs, the ring crossing the host network.
  const CliRun two = oomb("plan --model qwen3-8b --gpu h100-sxm --context 2M --gpus 8 --nodes 2");
  ASSERT_EQ(two.rc, 0) << two.out;
  EXPECT_TRUE(has(two.out, "FSDP2 ring attention CP 16, checkpoints on host (2 nodes)")) << two.out;
  EXPECT_TRUE(has(two.out, "between nodes")) << two.out;
}

}  // namespace

namespace {

// Issue 26: a LoRA run on the CPU trains the adapter, writes PEFT's folder, and that folder loads
// back with the same loss (the tokens file holds one window: every step sees the same sequence).
TEST_F(TrainingCli, LoraRunWritesAPeftAdapterThatLoadsBackWithTheSameLoss) {
  {
    std::ofstream t(path("tok.bin"), std::ios::binary);
    for (uint32_t i = 0; i < 512; ++i) {
      const uint32_t id = (i * 7 + 3) % 97;
      t.write(reinterpret_cast<const char*>(&id), 4);
    }
  }
  const std::string base = "run --model tiny --context 512 --chunk 128 --page 64 --lora-rank 4 --lora-targets "
                           "q_proj,v_proj,down_proj --lora-alpha 8 --tokens " + path("tok.bin") + " --quiet --json";
  // Two AdamW steps, the adapter saved after them.
  const CliRun a = oomb(base + " --optimizer gpu --lr 1e-2 --steps 2 --save-adapter " + path("ad"), true);
  ASSERT_EQ(a.rc, 0) << a.out;
  // Three steps: the third's loss is that of the adapter after two updates.
  const CliRun three = oomb(base + " --optimizer gpu --lr 1e-2 --steps 3", true);
  ASSERT_EQ(three.rc, 0) << three.out;
  const oomb::Json j3 = oomb::parse_json(three.out, "stdout");
  ASSERT_EQ(j3["losses"].size(), 3u);
  EXPECT_LT(j3["losses"][2].get<double>(), j3["losses"][0].get<double>());  // it trains
  // The saved adapter, loaded (its rank, alpha and targets from adapter_config.json), no update.
  const CliRun b = oomb("run --model tiny --context 512 --chunk 128 --page 64 --tokens " + path("tok.bin") +
                            " --quiet --json --adapter " + path("ad"),
                        true);
  ASSERT_EQ(b.rc, 0) << b.out;
  EXPECT_EQ(oomb::parse_json(b.out, "stdout")["losses"][0].get<double>(), j3["losses"][2].get<double>());
  // PEFT's files, names and shapes.
  const oomb::Json cfg = oomb::read_json_file(path("ad") + "/adapter_config.json");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["target_modules"], oomb::Json({"q_proj", "v_proj", "down_proj"}));
  std::ifstream in(path("ad") + "/adapter_model.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const oomb::Json h = oomb::parse_json(header, "header");
  EXPECT_TRUE(h.contains("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight")) << header;
  EXPECT_TRUE(h.contains("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")) << header;
  // Hostile: an adapter of another rank, --save-weights of a frozen base, --save-adapter without LoRA.
  const CliRun r8 = oomb("run --model tiny --context 512 --chunk 128 --page 64 --quiet --lora-rank 8 --adapter " + path("ad"));
  EXPECT_EQ(r8.rc, 2);
  EXPECT_TRUE(has(r8.out, "--lora-rank 4")) << r8.out;
  const CliRun sw = oomb("run --model tiny --context 512 --chunk 128 --page 64 --quiet --lora-rank 4 --save-weights " +
                         path("w"));
  EXPECT_EQ(sw.rc, 2);
  EXPECT_TRUE(has(sw.out, "--save-adapter")) << sw.out;
  const CliRun sa = oomb("run --model tiny --context 512 --chunk 128 --page 64 --quiet --save-adapter " + path("x"));
  EXPECT_EQ(sa.rc, 2);
  EXPECT_TRUE(has(sa.out, "--lora-rank")) << sa.out;
  const CliRun same = oomb("run --model tiny --context 512 --chunk 128 --page 64 --quiet --adapter " + path("ad") +
                           " --save-adapter " + path("ad"));
  EXPECT_EQ(same.rc, 2) << same.out;
  // --reference checks the adapters' gradients (B drawn non-zero so that A's are not zero).
  const CliRun ref = oomb("run --model tiny --context 512 --chunk 128 --page 64 --lora-rank 4 --lora-targets all-linear "
                          "--lora-init-b-std 0.05 --reference --quiet --json",
                          true);
  ASSERT_EQ(ref.rc, 0) << ref.out;
  EXPECT_LE(oomb::parse_json(ref.out, "stdout")["reference"]["max_grad_rel_error"].get<double>(), 1e-5);
}

}  // namespace
