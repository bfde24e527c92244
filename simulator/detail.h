#pragma once
// Internal geometry shared by the memory model, the cost model and the event simulation.
#include <cstdint>
#include <vector>

#include "simulator/simulator.h"
#include "step/geometry.h"

namespace oomb::simulator::detail {


step::Geometry geometry(const Scenario& s);  // step::geometry(model, config): validates the config first
inline int64_t prefix_pages(const step::Geometry& g, int64_t c) { return g.prefix_pages(c); }
inline int64_t own_pages(const step::Geometry& g, int64_t c) { return g.own_pages(c); }
inline int64_t chunk_tokens_of(const step::Geometry& g, int64_t c) { return g.chunk_len(c); }
int64_t param_count(const Scenario& s);  // with --layers applied
step::Target target_of(const Scenario& s);  // the backend the scenario's GPU profile plans for
step::BufferTable memory_table(const Scenario& s, bool describe);  // describe=false: bytes only
step::BufferTable memory_table(const Scenario& s, const step::Geometry& g, bool describe);  // g = geometry(s)
step::TableSizes table_sizes(const Scenario& s, const step::Geometry& g);  // the same rows' figures (fast path)

// What a summary reports of the table: the peaks (with their breakdowns), the host rows outside the
// optimizer state (pinned; one rank's) and the page counts. From the table or from its figures.
struct MemoryFigures {
  step::BufferTable::PhasePeak device, host;
  int64_t pinned_host_bytes = 0;
  step::PageCounts pages;
};
MemoryFigures memory_figures(const step::BufferTable& t);
MemoryFigures memory_figures(const step::TableSizes& t);

}  // namespace oomb::simulator::detail

namespace oomb::simulator::detail {

// The compute time of a pass split by op class at efficiency 1 (calibration fits the inverse
// efficiencies to measured times): compute_s = gemm_s / eff.gemm + max(attn_s / eff.attention +
// attn_bwd_s / eff.attention_backward, attn_bytes_s / eff.memory_bound) + mb_s / eff.memory_bound +
// allreduce_s + kernels * launch.
struct WorkTerms {
  double gemm_s = 0;        // GEMM flops / bf16 peak
  double expert_gemm_s = 0; // routed experts' GEMM flops / bf16 peak
  double attn_s = 0;        // attention forward flops (incl. recomputes) / bf16 peak
  double attn_bwd_s = 0;    // attention backward flops / bf16 peak
  double attn_bytes_s = 0;  // attention K/V re-reads / HBM bandwidth
  double mb_s = 0;          // elementwise bytes / HBM bandwidth
  double allreduce_s = 0;   // tensor-parallel all-reduce (not fitted)
  double allreduce_bytes = 0;  // and the bytes each rank gives its all-reduces
  double allreduces = 0;       // how many
  double kernels = 0;       // launches
  WorkTerms& operator+=(const WorkTerms& o);
};

// Cost of one pass of one layer over one chunk (or of a non-layer op such as the LM head).
struct PassCost {
  WorkTerms work;
  double compute_s = 0;
  double flops = 0;
  // Copies of a mean pass of a mixed stack are a share of the global layers' (docs/model.md "Layer
  // kinds and experts"): bytes as doubles, so that the per-chunk sums stay affine in the chunk.
  double in_bytes = 0;   // h2d before the compute
  double out_bytes = 0;  // d2h after the compute
  // The name of its all-reduces' events on the timeline (tensor parallelism's or data parallelism's).
  const char* name_of_collective = "tp_allreduce";
  PassCost& operator+=(const PassCost& o);
  PassCost scaled(double f) const;  // every figure times f (copies rounded to bytes)
};

// Whether a pass's cost carries its work terms (calibration and the tensor-parallel counts read them)
// or only its time, flops and copies (the fast path, which skips the terms' divisions).
enum class Terms : bool { skip, keep };

// A sparse fill pass's page selection over `prefix` earlier pages (cost.cpp).
PassCost selection_cost(const Scenario& s, const step::Geometry& g, int64_t tokens, int64_t prefix,
                        Terms terms = Terms::keep);

// The three layer passes of chunk c (docs/schedule.md) and the chunk's non-layer work.
struct ChunkCosts {
  PassCost fill;        // stage 1, per layer
  PassCost recompute;   // stage 2 forward recompute, per layer
  PassCost backward;    // stage 2 backward (with per-layer recompute when checkpointing), per layer
  PassCost backward_kept;  // the backward of a layer that kept its activations (no recompute)
  PassCost head;        // stage 2: final norm + LM head + loss forward and backward
  PassCost fill_head;   // the embedding of the chunk's tokens: stage 1, and again at the start of stage 2
  PassCost embedding_bwd;  // stage 2, after the first layer's backward: the embedding's gradient (none when frozen)
};
// Does the embedding table get a gradient (full fine-tuning, or LoRA training the embeddings)?
bool trains_embedding(const Scenario& s);

ChunkCosts chunk_costs(const Scenario& s, const step::Geometry& g, int64_t c, Terms terms = Terms::keep);
// The backward cost of `layer`: recomputed (layer < g.Lr) or kept.
const PassCost& backward_of(const ChunkCosts& cc, const step::Geometry& g, int64_t layer);
// Standard schedule: forward over N (per layer), backward with recompute (per layer), head.
ChunkCosts standard_costs(const Scenario& s, const step::Geometry& g, Terms terms = Terms::keep);

// Collectives (docs/model.md "Communication"): `calls` ring all-reduces over `ranks` ranks spread
// over `nodes` nodes, the bytes each rank gives them in total and the part of those stored in bf16.
// Per call the profile's latency, collective_latency_s + 2 (N - 1) steps x collective_step_latency_s
// (the 2 (nodes - 1) steps that cross nodes at the host's network_step_latency_s instead); the bytes
// 2 (N - 1) / N times over the link, the profile's GPU-GPU link (interconnect_bytes_per_s; the h2d
// link where a profile has none) or, across nodes, the slower of it and the host's network. On the
// CPU backend (a cpu profile) MPI sums bf16 data through an fp32 copy: the bf16 part moves twice
// its bytes and is converted there and back (6 bytes of memory traffic per bf16 byte). A profile
// with a measured all-reduce curve at this rank count (oomb calibrate under mpirun, one node)
// prices each call's bytes on the curve instead: bf16 calls on its bf16 curve (measured through the
// staging, conversions included), the others on its fp32 one. bf16_calls: how many of the calls
// carry the bf16 bytes.
struct Collective {
  double calls = 0, bytes = 0, bf16_bytes = 0, bf16_calls = 0;
};
double allreduce_s(const Scenario& s, const Collective& c, int64_t ranks, int64_t nodes = 1);
double allreduce_latency_s(const Scenario& s, int64_t ranks, int64_t nodes = 1);  // of one call
double allreduce_link_bytes_per_s(const Scenario& s, int64_t nodes = 1);

// Effective copy rates (bytes/s) for one direction, with the duplex share when both run.
double h2d_rate(const Scenario& s, bool duplex);
double d2h_rate(const Scenario& s, bool duplex);

// AdamW update time per step: on the GPU (HBM traffic) or on the host (host DRAM traffic), reading
// and writing fp32 master weights and moments plus the gradient and the parameter.
double optimizer_update_s(const Scenario& s);
// Data parallelism (config.data_parallel > 1, with an optimizer): one rank's trained-parameter
// gradients all-reduced over the replicas (across the config's nodes) in the buckets of
// step::gradient_buckets, each an allreduce_s of its own as it becomes final in the last
// backward. gradient_bucket_s: each bucket's time, in that order; gradient_allreduce_s: their sum
// (the transfer a run measures). 0 / empty otherwise.
std::vector<double> gradient_bucket_s(const Scenario& s, const step::Geometry& g);
double gradient_allreduce_s(const Scenario& s);
int64_t gradient_allreduce_bytes(const Scenario& s);
// ZeRO-1 (step::shards_optimizer): instead of the buckets, the gradients reduce-scattered before the
// update and the updated weights all-gathered after it, over the padded buffers
// (step::optimizer_shard), on the compute stream; zeros otherwise.
struct ShardedComm {
  double reduce_scatter_s = 0, all_gather_s = 0;
  double gradient_bytes = 0, weight_bytes = 0;  // each rank's buffer: the padded gradients, weights
};
ShardedComm sharded_comm(const Scenario& s, const step::Geometry& g);
// Whether the buckets overlap the compute after them: NCCL's run on a stream of their own (the
// CUDA backend, a GPU profile); MPI's on the compute thread at once (the CPU backend).
bool gradient_allreduce_overlaps(const Scenario& s);
// The part of it the step waits for: all of it without overlap; with overlap, what the buckets,
// chained on their stream from when each is final, run past the last backward's end.
double gradient_allreduce_exposed_s(const Scenario& s, const step::Geometry& g);
// Tensor parallelism (config.gpus > 1): the step's activation all-reduces, summed over its passes
// (the work terms' allreduce_* fields; zero with one GPU).
WorkTerms tensor_parallel_comm(const Scenario& s);

// Pages in flight of the published implementation with offload (docs/model.md): in the stage-2
// forward sweep of a chunk each layer switch issues the write-back of the layer left behind (its
// own worker thread, one blocking copy per tensor of a page, each page freed when its copies end)
// while the next layer's onload allocates at once. The write-backs share one device-to-host link:
// each frees pages at min(1 / page_s, link_pages_per_s / n) with n write-backs running (alone it is
// bound by its copies' latencies, together by the link), at the duplex share of the link while the
// sweep's onloads copy in.
struct PublishedWriteback {
  double page_s = 0;            // one page's write-back alone: 4 blocking copies' latency + its bytes
  double link_pages_per_s = 0;  // the link's rate in pages (KV + gradient bytes) per second
};
PublishedWriteback published_writeback(const Scenario& s, const step::Geometry& g);
// The pages still held at each switch (index k: right after switch k issues its write-back, one of
// S pages per switch from switch 1 on), the write-backs draining between switches as above. The
// fast path counts with it over one steady period's switches, the event simulation over each of
// its stage-2 sweeps (its memory samples).
std::vector<int64_t> published_writeback_held(const std::vector<double>& switches, int64_t S,
                                              const PublishedWriteback& w);
// The period between those switches: the layer's compute, or the issue of its onload if longer
// (4 copies per page, each at least a launch); the published sweep waits for no copy's transfer.
double published_layer_period_s(const Scenario& s, const step::Geometry& g, int64_t c);
// Chunk c's stage-2 sweep: its L switches one period apart from first_s.
std::vector<double> published_switches(const Scenario& s, const step::Geometry& g, int64_t c, double first_s);
int64_t published_slot_pages(const step::Geometry& g, int64_t c);  // S: the layer's pages in chunk c's stage 2
int64_t published_pages_in_flight(const Scenario& s, const step::Geometry& g, int64_t c);
// The step's peak: the largest over chunks, that of one of the last two (S and the ratio
// page_s / period grow with the prefix over the full chunks). 0 unless published with offload.
int64_t published_pages_in_flight(const Scenario& s, const step::Geometry& g);

// evaluate() without the closed-form sums' shortcuts: every chunk priced (tests hold the two equal).
Summary evaluate_every_chunk(const Scenario& s);

// Feasibility, binding constraint and notes from the memory figures and the timing.
void finish_summary(const Scenario& s, MemoryFigures m, Summary& out);

}  // namespace oomb::simulator::detail
