#pragma once
// oomb run's flags (cli/run_cmd.cpp registers them and their help) and the run they describe
// (cli/run_job.cpp: the checks of every path before any work, the inputs, the run, the outputs).
#include <cstdint>
#include <string>

#include "cli/scenario_flags.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/weights.h"

namespace oomb::cli {

struct RunArgs {
  ScenarioFlags flags;
  std::string plan;
  std::string backend = "cpu";
  int64_t steps = 1;
  bool steps_given = false;
  int64_t warmup = 0;   // untimed steps first; not given (warmup_given false): 1 when a --trace is written, else 0
  bool warmup_given = false;
  int threads = 0;      // cpu backend compute threads; 0 = the CPUs this process may use
  std::string tokens, weights, save_weights, dump_grads, trace, detail = "layer";
  std::string adapter, save_adapter;  // LoRA: PEFT adapter folders in and out
  float lora_init_b_std = 0;          // LoRA without --adapter: B's init std (0 = PEFT's zeros)
  std::string trace_timing;  // "" = cupti for cuda when built with CUPTI, else host
  std::string attention_kernel;  // "" = auto (cuda only)
  std::string gemm_precision;    // "" = bf16, or fp32 for a run without a plan on fp32 weights (cuda only)
  uint64_t seed = 1234;
  float init_std = 0.02f;
  int64_t grad_accum = 1;
  int64_t max_shard_bytes = executor::kDefaultMaxShardBytes;  // --save-weights / --dump-grads shard size
  float lr = 1e-3f;
  bool reference = false;
  bool measure_recall = false, compare_dense = false;
  bool json = false;
  bool quiet = false;
  std::string command;
};

// One process's part of `oomb run` (comm: its job's communicator, nullptr alone; job: the job's id).
int run_run(RunArgs a, executor::Communicator* comm, const std::string& job);

}  // namespace oomb::cli
