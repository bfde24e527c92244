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
// FSDP2 / ZeRO-3 layouts (CpLayout::fsdp; docs/model.md cites the code each row comes from):
//   sharded_parameters, sharded_gradients   params / tp / cp x 4 each (fp32 shards), adamw_moments x 8
//   gathered_layers                          2 layers' params / tp x param dtype (current + prefetched)
//   unsharded_layer_gradients                one layer's params / tp x param dtype (before its reduce-scatter)
//   gathered_lm_head                         (vocab x hidden / tp + hidden) x param dtype, loss phase
//   chunked_loss_head_upcast                 vocab x hidden / tp x (4 + 4 + param dtype), loss phase (TRL's
//                                            chunked NLL: the head in fp32, its fp32 gradient, the head's
//                                            accumulated gradient); 256-token fp32 logits tiles
//   attention_exchange (FSDP2 ring)          PyTorch's all-gather rotation: N x 2 kv_dim / tp x KV dtype +
//                                            N/cp x (q_dim + 2 kv_dim) / tp x 4 + 2 x N/cp x 2 kv_dim / tp x 4
// Checkpoint offload (CpLayout::offload_checkpoints): the checkpoint rows on the host (pinned, x the
// node's GPUs), checkpoint_unpacked = N/cp x hidden x act on the device in the backward; the copies
// each way at the profile's host-link rates, both waited for (save_on_cpu's blocking pack, the
// on-demand unpack). FSDP's collectives per layer: 2 gathers + 1 reduce-scatter of (cp - 1) / cp x
// the layer's param-dtype bytes, waiting for what a layer's share of the compute does not cover.
// The attention's exchange is alive only during attention (before the MLP in the forward, after its
// backward): the peak is max(table peak without it, per phase: rows - the layer's 6 ffn-wide tensors
// + the exchange). The rows listed are those alive at that peak moment.
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

// How standard full-sequence training is laid out over the GPUs that share one sequence: the
// degrees, and the memory knobs of the recipes people run (docs/model.md "Context parallelism").
struct CpLayout {
  ContextParallelism kind = ContextParallelism::ring;
  int64_t cp = 1, tp = 1;
  bool checkpointing = true;
  // FSDP2 / ZeRO-3 over the context-parallel ranks: weights, gradients and AdamW state sharded,
  // each layer's weights gathered before use and its gradients reduce-scattered after its backward.
  // Off: Megatron-style, the weights and gradients whole on every context-parallel rank and only the
  // AdamW state sharded (the distributed optimizer).
  bool fsdp = false;
  // Each layer's checkpointed input held in pinned host memory (PyTorch's save_on_cpu, as
  // transformers' gradient checkpointing offload and Accelerate's FSDP2 activation offload do).
  bool offload_checkpoints = false;
  // Sequence-tiled MLP (DeepSpeed ALST's TiledMLP, Liger's tiled_mlp): the MLP runs over
  // ceil(tokens / hidden) tiles of the rank's tokens without saving its intermediates and recomputes
  // each tile's forward in its backward: the ffn-wide tensors are one tile's, at one more MLP forward.
  bool tiled_mlp = false;
  // The ranks span this many nodes (cp x tp / nodes GPUs each): ring hops, all-to-alls and FSDP's
  // collectives that cross nodes go at the host profile's network rate per GPU.
  int64_t nodes = 1;
};

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
  int64_t nodes = 1;
  bool checkpointing = true;
  bool fsdp = false;
  bool offload_checkpoints = false;
  bool tiled_mlp = false;
  std::string recipe;  // who runs this layout ("the stock Hugging Face 1M recipe", ...), empty if nobody in particular
  int64_t context_tokens = 0;
  std::vector<ParallelRow> rows;  // device memory per GPU
  int64_t device_bytes = 0;       // per GPU, reserve included
  int64_t device_limit_bytes = 0;
  int64_t host_bytes = 0;         // per node
  int64_t host_pinned_bytes = 0;  // per node: the offloaded checkpoints
  int64_t offload_bytes = 0;      // per GPU and step, each way (device to host in the forward, back in the backward)
  double offload_s = 0;           // the copies' time per step, both ways (blocking: exposed)
  double fsdp_comm_s = 0;         // FSDP's gathers and reduce-scatters per step (part of comm_s)
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
ParallelPlan context_parallel(const simulator::Scenario& s, const CpLayout& layout, double headroom);
ParallelPlan context_parallel(const simulator::Scenario& s, ContextParallelism kind, int64_t cp, int64_t tp,
                              bool checkpointing, double headroom);

// The stock recipes of 2026 on `gpus` GPUs over `nodes` nodes, all of them on one sequence with
// tensor parallelism 1, checkpointing on: FSDP2 with ring context parallelism (PyTorch's
// context_parallel with SDPA under Accelerate, TRL's long-context example) and ZeRO-3 with Ulysses
// (DeepSpeed's ALST), each with its checkpoints offloaded to pinned host memory and, to show what the
// offload buys, without. Layouts whose degrees do not suit the model are left out (named in `skipped`).
// The fastest fitting FSDP2 / ZeRO-3 layout of `gpus` x `nodes` GPUs on one sequence (or, when none
// fits, the one with the least device memory): ring or Ulysses, every CP x TP degree (TP within a
// node), checkpoints on the GPU or the host, tiled MLP or not. nullopt when no degree suits the model.
std::optional<ParallelPlan> best_fsdp_layout(const simulator::Scenario& s, int64_t gpus, int64_t nodes, double headroom);

std::vector<ParallelPlan> stock_recipes(const simulator::Scenario& s, int64_t gpus, int64_t nodes, double headroom,
                                        std::vector<std::string>* skipped = nullptr);

// The fastest fitting layout over cp x tp = gpus (cp >= 2) and checkpointing on/off (or, when none fits, the
// one with the least device memory); nullopt when no layout suits the model (e.g. Ulysses with
// heads that no degree > 1 divides). Layouts that do not suit are listed in `skipped`.
std::optional<ParallelPlan> best_context_parallel(const simulator::Scenario& s, ContextParallelism kind, int64_t gpus,
                                                  double headroom, std::vector<std::string>* skipped = nullptr);

// What the multi-GPU comparison (and the GUI) lists for long context: stock_recipes, then
// best_fsdp_layout labelled "(best FSDP layout)" where it is none of them.
std::vector<ParallelPlan> long_context_layouts(const simulator::Scenario& s, int64_t gpus, int64_t nodes,
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
