#pragma once
// Multi-GPU baselines on paper: standard full-sequence training with context parallelism (ring
// attention, as Megatron-LM's context parallelism and Ring Attention do it, or DeepSpeed-Ulysses'
// all-to-all sequence parallelism) combined with tensor parallelism, and data-parallel replicas of
// an oomb plan. They answer "one GPU with oomb vs G GPUs with context parallelism" with the same
// model numbers as the simulator.
//
// Context parallelism (cp GPUs share one sequence of N tokens, each holds T = N / cp of them; tp
// GPUs shard every layer, with sequence parallelism for the hidden-wide activations). Memory per
// GPU is the one buffer table (step/buffers.h) of standard training over T tokens at tensor
// parallelism tp (Config::sequence_parallel), priced at its device peak, with two changes that only
// context parallelism makes:
//   AdamW state rows   / cp: the distributed optimizer shards it over the context-parallel ranks
//                      (they all hold the same parameters, as data-parallel ranks do)
//   attention_exchange ring:    2 remote K/V blocks in flight, T x 2 kv_dim / tp x KV dtype each, and
//                               the travelling dK/dV block sent and received, T x 2 kv_dim / tp x fp32 each
//                      Ulysses: after the all-to-all a GPU holds q, k, v and o of its heads over all N
//                               tokens (send and receive buffers: x 2); KV heads are replicated when
//                               fewer than tp x cp
// The rows listed are those alive at the peak.
// Step time: the simulator's standard-schedule step for the whole sequence on one tensor-parallel
// group, divided by cp (causal load balancing, e.g. zig-zag, makes every rank's share equal), plus
// the exposed communication on the GPU profile's interconnect (per direction): ring passes its K/V
// block (and dK/dV in the backward) cp - 1 times per pass, hidden behind the attention of the
// previous block when that is longer; Ulysses' all-to-alls (q, k, v in, o out; their gradients in
// the backward) move (cp - 1) / cp of each and are not hidden.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "simulator/simulator.h"

namespace oomb::planner {

enum class ContextParallelism { ring, ulysses };
const char* to_string(ContextParallelism k);

struct ParallelRow {
  std::string name;
  int64_t bytes = 0;
  std::string formula;
};

struct ParallelPlan {
  std::string label;  // "ring CP 8 x TP 1", "oomb x 8 data-parallel replicas", ...
  ContextParallelism kind = ContextParallelism::ring;
  int64_t cp = 1, tp = 1, replicas = 1;
  int64_t gpus = 1;   // all GPUs used: cp x tp x replicas
  bool checkpointing = true;
  int64_t context_tokens = 0;
  std::vector<ParallelRow> rows;  // device memory per GPU
  int64_t device_bytes = 0;       // per GPU, reserve included
  int64_t device_limit_bytes = 0;
  int64_t host_bytes = 0;         // per node
  int64_t host_limit_bytes = 0;
  bool fits = false;
  std::string binding;            // the failed limit, or what bounds the step
  double compute_s = 0, comm_s = 0, exposed_comm_s = 0, step_s = 0;
  double tokens_per_s = 0;        // all GPUs together
  double gpu_hours_per_billion_tokens = 0;
  std::vector<std::string> notes;
  Json to_json() const;
};

// Context parallelism of degree cp x tensor parallelism tp for the scenario's model, GPU, host and
// context (dtypes from its config; AdamW state on the GPUs). Throws oomb::Error when the degrees do
// not suit the model (tp must divide the heads; Ulysses' cp x tp must divide the query heads).
ParallelPlan context_parallel(const simulator::Scenario& s, ContextParallelism kind, int64_t cp, int64_t tp,
                              bool checkpointing, double headroom);

// The fastest fitting layout over cp x tp = gpus (cp >= 2) and checkpointing on/off (or, when none fits, the
// one with the least device memory); nullopt when no layout suits the model (e.g. Ulysses with
// heads that no degree > 1 divides). Layouts that do not suit are listed in `skipped`.
std::optional<ParallelPlan> best_context_parallel(const simulator::Scenario& s, ContextParallelism kind, int64_t gpus,
                                                  double headroom, std::vector<std::string>* skipped = nullptr);

// Data parallelism over `replicas` copies of one plan (each on tp GPUs): tokens/s add up; the node's
// host RAM and pinnable memory hold every replica's host tier, and the host's memory bandwidth
// carries every replica's copies (each GPU keeps its own host link). When the copies need more than
// the host's memory bandwidth, the step stretches to what it allows.
ParallelPlan data_parallel(const simulator::Scenario& s, const simulator::Summary& one, int64_t replicas,
                           double headroom);

// Recomputes tokens/s (context x replicas / step) and GPU-hours per billion tokens (gpus / tokens/s).
void finish_rates(ParallelPlan& p);

}  // namespace oomb::planner
