#pragma once
// The sizes of one step (docs/schedule.md notation), computed once from the model and the
// configuration: N tokens, chunk C, page p, L layers, R resident layers, n = ceil(N / C) chunks,
// P = ceil(N / p) pages per layer, per-GPU shapes. The simulator prices them, the buffer table is
// sized from them and the executor walks its passes over them.
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/units.h"
#include "models/specs.h"
#include "step/config.h"

namespace oomb::step {

struct Geometry {
  int64_t L = 0, N = 0, G = 1;                 // layers, context tokens, tensor-parallel GPUs
  int64_t Lr = 0;                              // layers recomputed in the backward (0 .. Lr-1)
  int64_t h = 0, qd = 0, kvd = 0, f = 0, V = 0;  // per-GPU shapes (h and V unsharded)
  int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t act_b = 2, kv_b = 2, grad_b = 4;     // bytes per element: activations, KV pages, KV-gradient pages
  bool oomb = true, sparse = false, offload = false, fused_loss = false;
  // C: the chunk (oomb; page-aligned when the configured chunk exceeds N, which is then one chunk;
  // standard: N). Cm: rows of one chunk's buffers, min(chunk, N) (not page-aligned; standard: N).
  // T: rows of one LM-head / loss tile. q = C / p query pages per chunk. B: sparse page budget.
  int64_t C = 0, Cm = 0, p = 0, n = 0, P = 0, q = 0, R = 0, B = 0, T = 0;
  double overlap = 0;
  int64_t select_groups = 1;  // sparse: selections per query page (per-kv-head: one per KV head)
  int64_t kv_page_bytes = 0, grad_page_bytes = 0, summary_bytes = 0;
  // LoRA (Config::lora_rank > 0): per GPU, the adapters' parameters of one layer (A and B of every
  // targeted projection; A of a column-parallel and B of a row-parallel projection whole, the
  // other split over the GPUs) and the rank-r intermediates per token (A x, one r-vector per
  // target: the activations an adapter adds).
  int64_t lora_layer_params = 0, lora_width = 0;
  bool lora = false;
  // Layer kinds (docs/model.md "Layer kinds and experts"), over the effective layers. Lg global
  // layers hold the paged pools as a dense model's layers do (R and offload count them only); Ll
  // local (sliding or chunked) layers keep, on the device, the pages a later chunk reaches back to
  // (local_kv_pages: each local layer's union over the chunk boundaries of the pages before the
  // boundary its first query attends, + one chunk's own pages) and their gradients (local_grad_pages:
  // each layer's largest such reach, pending until its chunk's backward, + the own pages of the
  // chunk whose backward runs: the earlier reach it reads lies within them and its own reach).
  // 0 for the dense families.
  int64_t Lg = 0, Ll = 0;
  int64_t local_kv_pages = 0, local_grad_pages = 0;
  // Mixture of experts: Lmoe layers of `experts` routed experts of fe columns per GPU (the expert
  // width split as a dense MLP's), top_k per token, plus shared experts of fs columns per GPU
  // together; the other layers' MLP is dense (f). Dispatch is packed: a layer's routed rows are the
  // T x top_k (token, expert) pairs sorted by expert, whatever the routing.
  int64_t Lmoe = 0, experts = 0, top_k = 0, fe = 0, fs = 0;
  // The layer classes of the stack (attention kind x MLP kind) with their counts, in the order of
  // their first layer: one (global, dense) for the dense families. The cost model prices a pass per
  // class (simulator/cost.cpp).
  struct LayerClass {
    models::LayerAttention attention = models::LayerAttention::global;
    int64_t window = 0;  // tokens of a local layer's reach (sliding window, chunked block)
    bool moe = false;
    int64_t layers = 0;
  };
  std::array<LayerClass, 6> classes{};
  int class_count = 0;

  int64_t chunk_start(int64_t c) const { return c * C; }
  int64_t chunk_len(int64_t c) const { return std::min(N, (c + 1) * C) - c * C; }
  int64_t prefix_pages(int64_t c) const { return c * C / p; }  // pages of tokens [0, cC)
  int64_t own_pages(int64_t c) const { return ceil_div(chunk_len(c), p); }
  int64_t first_own_page(int64_t c) const { return c * C / p; }
  // Upper bound of the pages a chunk attends among its prefix: all (dense, or <= B earlier pages),
  // else at most B per query page (and KV head, for per-head selections).
  int64_t union_bound(int64_t c) const;
  // Largest slot of any pass (pages of each kind): union bound + own. Over the full chunks the bound
  // is non-decreasing in c, so it is that of one of the last two chunks (the last may be ragged).
  int64_t max_slot_pages() const;
};

// The pages before a chunk boundary that a local layer's first query of the next chunk attends, over
// the boundaries of a step (docs/model.md "Layer kinds and experts"): their union (what the layer
// keeps from the fill to its backward) and the largest one (what is pending in its gradient).
struct LocalReach {
  int64_t union_pages = 0, max_pages = 0;
};
// window: a sliding layer's window (tokens, the query itself included) or a chunked layer's block;
// C a multiple of p (validate), n chunks.
LocalReach local_reach(models::LayerAttention kind, int64_t window, int64_t C, int64_t p, int64_t n);
// The first page a local layer's chunk c (>= 1) attends before its boundary cC (its first query's
// first key, models::first_key): the chunk attends pages [reach_first_page(..), cC / p) of its
// prefix, every one of them whole or in part. C a multiple of p.
inline int64_t reach_first_page(models::LayerAttention kind, int64_t window, int64_t C, int64_t p, int64_t c) {
  return models::first_key(kind, window, c * C) / p;
}

// Validates the configuration against the model first (throws oomb::Error naming the flag).
Geometry geometry(const models::ModelSpec& m, const Config& c);

// Parameters of the model as configured (layers_override applied), all GPUs together.
int64_t param_count(const models::ModelSpec& m, const Config& c);
// One tensor-parallel rank's share of m (Megatron-style sharding, docs/model.md "Tensor
// parallelism"): q/k/v heads, the MLP's columns and the vocabulary (embedding and LM head) split
// over tp ranks; norms replicated. tp must divide them (validate refuses it otherwise).
models::ModelSpec tensor_parallel_shard(const models::ModelSpec& m, int64_t tp);
// The parameters one rank holds: param_count of its shard (the norms whole on every rank).
int64_t rank_param_count(const models::ModelSpec& m, const Config& c);
// Of those, the routed experts' (every MoE layer of the effective ones; 0 without experts).
int64_t rank_expert_param_count(const models::ModelSpec& m, const Config& c);
// Parameters one GPU trains: every one of its shard (full fine-tuning), or under LoRA the layers'
// adapters plus, with lora_train_embeddings, its share of the embeddings and the LM head.
int64_t trainable_param_count(const models::ModelSpec& m, const Config& c, const Geometry& g);
// LoRA: the adapters' parameters on one GPU (0 without LoRA).
int64_t lora_param_count(const Geometry& g);
// Bytes of one GPU's trained parameters' gradients, and of the trained parameters as stored (LoRA
// adapters fp32, everything else in its configured dtype): the parameter_gradients row and what a
// host optimizer copies out and back in per step.
int64_t trained_gradient_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g);
int64_t trained_weight_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g);
// ZeRO-1 (Config::shard_optimizer): the trained parameters padded to a multiple of the replicas (the
// gradient and weight buffers the collectives split evenly) and one replica's shard of them, which
// its AdamW state holds. Without sharding: padded = shard = trained.
struct OptimizerShard {
  int64_t trained = 0, padded = 0, shard = 0;
  bool sharded = false;
};
// Whether the configuration shards the AdamW state: shard_optimizer with replicas and an optimizer.
bool shards_optimizer(const Config& c);
OptimizerShard optimizer_shard(const models::ModelSpec& m, const Config& c, const Geometry& g);
// What a rank's update reads and writes of the gradients and the working weights (a host
// optimizer's copies out and back in): its shard (ZeRO-1), or every trained parameter.
int64_t optimizer_gradient_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g);
int64_t optimizer_weight_bytes(const models::ModelSpec& m, const Config& c, const Geometry& g);

// Data parallelism: one GPU's trained gradients in the buckets the replicas all-reduce as each
// becomes final in the last chunk's backward, in that order: the head (the final norm and an untied
// LM head: after the LM head's backward), the layers from the last to the first (after each one's
// backward), the embedding (with a tied LM head: after the embedding's backward). Bytes as stored;
// frozen parts (LoRA's base) have none. They add up to trained_gradient_bytes.
struct GradientBucket {
  int64_t bytes = 0;
  bool bf16 = false;  // stored in bf16 (MPI stages it through fp32)
};
std::vector<GradientBucket> gradient_buckets(const models::ModelSpec& m, const Config& c, const Geometry& g);

}  // namespace oomb::step
