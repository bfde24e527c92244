// Event-level path: a discrete-event simulation of one step over three streams (compute, h2d,
// d2h) with the slot and ordering dependencies of docs/schedule.md.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/format.h"
#include "core/units.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"

namespace oomb::simulator {

namespace {

using traces::Event;
using traces::EventKind;
using traces::Lane;

int64_t to_ns(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }

struct PoolChange {
  double t;
  int64_t pages;  // KV + gradient pages
  int64_t bytes;
};

class Sim {
 public:
  Sim(const Scenario& s, const step::Geometry& g, traces::Detail d) : s_(s), g_(g), detail_(d) {
    slot_free_.assign(static_cast<size_t>(std::max<int64_t>(g.R, 1)), 0.0);
  }

  // A compute-only op (embedding, LM head): no slot.
  void compute_only(const detail::PassCost& p, int stage, int64_t chunk, Op op) {
    if (p.compute_s <= 0) return;
    double start = compute_free_;
    compute_free_ = start + p.compute_s;
    compute_s_ += p.compute_s;
    emit(EventKind::compute, Lane::compute, op, stage, chunk, -1, start, compute_free_, 0, p.flops);
    collective(p, op, stage, chunk, -1, compute_free_);
  }

  // One layer pass using a slot; kv/grad pages are the slot's contents (for pool occupancy).
  void layer_pass(const detail::PassCost& p, int stage, int64_t chunk, int64_t layer, Op op, int64_t kv_pages,
                  int64_t grad_pages) {
    const size_t slot = static_cast<size_t>(pass_index_++ % std::max<int64_t>(g_.R, 1));
    double ready = g_.offload ? slot_free_[slot] : 0.0;
    double in_start = std::max(h2d_free_, ready), in_end = in_start;
    if (p.in_bytes > 0) {
      const bool duplex = d2h_free_ > in_start;
      in_end = in_start + p.in_bytes / detail::h2d_rate(s_, duplex);
      h2d_free_ = in_end;
      const int64_t bytes = std::llround(p.in_bytes);  // whole for a layer's own pages
      h2d_bytes_ += bytes;
      emit(EventKind::copy_h2d, Lane::h2d, op, stage, chunk, layer, in_start, in_end, bytes, 0);
    }
    const double c_start = std::max(compute_free_, in_end);
    last_compute_start_ = c_start;
    const double c_end = c_start + p.compute_s;
    compute_free_ = c_end;
    compute_s_ += p.compute_s;
    emit(EventKind::compute, Lane::compute, op, stage, chunk, layer, c_start, c_end, 0, p.flops);
    collective(p, op, stage, chunk, layer, c_end);
    double release = c_end;
    if (p.out_bytes > 0) {
      const double o_start = std::max(d2h_free_, c_end);
      const bool duplex = h2d_free_ > o_start;
      release = o_start + p.out_bytes / detail::d2h_rate(s_, duplex);
      d2h_free_ = release;
      const int64_t bytes = std::llround(p.out_bytes);
      d2h_bytes_ += bytes;
      emit(EventKind::copy_d2h, Lane::d2h, op, stage, chunk, layer, o_start, release, bytes, 0);
    }
    if (g_.offload) {
      slot_free_[slot] = release;
      const int64_t bytes = kv_pages * g_.kv_page_bytes + grad_pages * g_.grad_page_bytes;
      changes_.push_back({p.in_bytes > 0 ? in_start : c_start, kv_pages + grad_pages, bytes});
      changes_.push_back({release, -(kv_pages + grad_pages), -bytes});
    }
  }

  // Without offload, pages are allocated in stage 1 and freed in stage 2 (docs/schedule.md).
  void pool_change(double t, int64_t kv_pages, int64_t grad_pages) {
    changes_.push_back({t, kv_pages + grad_pages, kv_pages * g_.kv_page_bytes + grad_pages * g_.grad_page_bytes});
  }
  // Data parallelism's gradient bucket, final now: on the compute stream at once (no overlap), or
  // on the comm stream from now, after the buckets before it (overlap: the compute goes on).
  void gradient_bucket(double seconds, int64_t bytes, bool overlap) {
    if (seconds <= 0) return;
    if (!overlap) {
      detail::PassCost p;
      p.compute_s = seconds;
      p.work.allreduce_s = seconds;
      p.work.allreduce_bytes = static_cast<double>(bytes);
      p.name_of_collective = "gradient_allreduce";
      compute_only(p, 2, 0, Op::gradient_allreduce);
      return;
    }
    const double start = std::max(comm_free_, compute_free_);
    comm_free_ = start + seconds;
    emit(EventKind::collective, Lane::comm, Op::gradient_allreduce, 2, 0, -1, start, comm_free_, bytes, 0);
  }
  // The compute stream waits for the h2d copies issued so far (counted as exposed copy time).
  void wait_h2d() { compute_free_ = std::max(compute_free_, h2d_free_); }
  // The optimizer waits for every bucket.
  // (Counted with the compute: the stream is held, as the fast path counts it; not copy time.)
  void wait_comm() {
    compute_s_ += std::max(0.0, comm_free_ - compute_free_);
    compute_free_ = std::max(compute_free_, comm_free_);
  }
  double compute_free() const { return compute_free_; }
  double last_compute_start() const { return last_compute_start_; }

  // The published implementation's write-backs over one stage-2 forward sweep (docs/model.md):
  // the pass of layer k (k >= 1) starts at switches[k] and issues the write-back of layer k - 1,
  // each on its own worker, all sharing the link (published_writeback_held); the onload of the next
  // layer allocates at once. Pages only grow at a switch, so the occupancy peaks at one: the pages
  // still held there are sampled until the next switch.
  int64_t published_writebacks(const std::vector<double>& switches, int64_t S, const detail::PublishedWriteback& w) {
    const std::vector<int64_t> held_at = detail::published_writeback_held(switches, S, w);
    int64_t peak = 0;
    for (size_t k = 1; k < switches.size(); ++k) {
      const int64_t held = held_at[k];
      peak = std::max(peak, held);
      const double until = k + 1 < switches.size() ? switches[k + 1] : compute_free_;
      const int64_t bytes = held * (g_.kv_page_bytes + g_.grad_page_bytes);
      changes_.push_back({switches[k], 2 * held, bytes});
      changes_.push_back({until, -2 * held, -bytes});
    }
    return peak;
  }

  // A phase of the step starts at the next compute: the device bytes outside the pools become
  // `bytes` (the rows alive in it), so the memory samples follow the buffer lifetimes.
  void phase(int64_t bytes) {
    if (phase_bytes_ < 0) {
      base_bytes_ = bytes;
    } else if (bytes != phase_bytes_) {
      changes_.push_back({compute_free_, 0, bytes - phase_bytes_});
    }
    phase_bytes_ = bytes;
  }
  int64_t base_bytes() const { return base_bytes_; }

  // Host optimizer: gradients out, then updated parameters back in, after the last backward.
  void optimizer_round_trip(int64_t grad_bytes, int64_t param_bytes, double host_update_s) {
    double o_start = std::max(d2h_free_, compute_free_);
    d2h_free_ = o_start + static_cast<double>(grad_bytes) / detail::d2h_rate(s_, false);
    d2h_bytes_ += grad_bytes;
    emit(EventKind::copy_d2h, Lane::d2h, Op::optimizer_grads, 2, -1, -1, o_start, d2h_free_, grad_bytes, 0);
    // The host-side AdamW update runs on no GPU stream: the parameters come back after it.
    double i_start = std::max(h2d_free_, d2h_free_ + host_update_s);
    h2d_free_ = i_start + static_cast<double>(param_bytes) / detail::h2d_rate(s_, false);
    h2d_bytes_ += param_bytes;
    emit(EventKind::copy_h2d, Lane::h2d, Op::optimizer_params, 2, -1, -1, i_start, h2d_free_, param_bytes, 0);
  }

  traces::Trace finish(int64_t static_device_bytes, int64_t host_bytes) {
    traces::Trace t;
    t.metadata.source = "simulator";
    t.metadata.device = s_.gpu.id;
    t.metadata.detail = detail_;
    t.events = merge(std::move(events_));
    std::stable_sort(changes_.begin(), changes_.end(), [](const PoolChange& a, const PoolChange& b) { return a.t < b.t; });
    int64_t pages = 0, bytes = 0;
    std::vector<traces::MemorySample> samples;
    samples.push_back({0, static_device_bytes, host_bytes, 0});
    for (const auto& ch : changes_) {
      pages += ch.pages;
      bytes += ch.bytes;
      samples.push_back({to_ns(ch.t), static_device_bytes + bytes, host_bytes, pages});
    }
    t.memory = downsample(std::move(samples));
    const double step = std::max({compute_free_, h2d_free_, d2h_free_, comm_free_});
    t.summary.step_ns = to_ns(step);
    t.summary.compute_busy_ns = to_ns(compute_s_);
    t.summary.exposed_copy_ns = std::max<int64_t>(0, t.summary.step_ns - t.summary.compute_busy_ns);
    t.summary.h2d_bytes = h2d_bytes_;
    t.summary.d2h_bytes = d2h_bytes_;
    for (const auto& m : t.memory) {
      t.summary.peak_device_bytes = std::max(t.summary.peak_device_bytes, m.device_bytes);
      t.summary.peak_host_bytes = std::max(t.summary.peak_host_bytes, m.host_bytes);
      t.summary.pool_pages_peak = std::max(t.summary.pool_pages_peak, m.pool_pages_used);
    }
    return t;
  }

  double step_s() const { return std::max({compute_free_, h2d_free_, d2h_free_, comm_free_}); }
  double compute_s() const { return compute_s_; }

 private:
  // The pass's all-reduces (inside its compute time: the compute stream makes them), drawn at the
  // pass's end on the "comm" stream: one event of their summed time and bytes.
  void collective(const detail::PassCost& p, Op op, int stage, int64_t chunk, int64_t layer, double end) {
    if (p.work.allreduce_s <= 0) return;
    emit(EventKind::collective, Lane::comm, op, stage, chunk, layer, end - p.work.allreduce_s, end,
         std::llround(p.work.allreduce_bytes), 0);
    events_.back().name = p.name_of_collective;
  }

  void emit(EventKind kind, Lane lane, Op op, int stage, int64_t chunk, int64_t layer, double start,
            double end, int64_t bytes, double flops) {
    Event e;
    e.kind = kind;
    e.lane = lane;
    e.op = op;
    e.name = to_string(op);
    e.stage = stage;
    e.chunk = chunk;
    e.layer = layer;
    e.start_ns = to_ns(start);
    e.end_ns = to_ns(end);
    e.bytes = bytes;
    e.flops = flops;
    events_.push_back(std::move(e));
  }

  // Coarser detail: merge consecutive events of one stream that share the key of that level.
  std::vector<Event> merge(std::vector<Event> ev) const {
    if (detail_ == traces::Detail::layer || detail_ == traces::Detail::op) return ev;
    std::vector<Event> out;
    std::vector<size_t> last_of_stream(4, SIZE_MAX);
    auto stream_index = [](const Event& e) {
      return e.kind == EventKind::compute ? 0 : e.kind == EventKind::copy_h2d ? 1 : e.kind == EventKind::copy_d2h ? 2 : 3;
    };
    for (auto& e : ev) {
      const int si = stream_index(e);
      size_t li = last_of_stream[si];
      bool same = li != SIZE_MAX && out[li].stage == e.stage &&
                  (detail_ == traces::Detail::step || out[li].chunk == e.chunk);
      if (same) {
        Event& m = out[li];
        m.end_ns = std::max(m.end_ns, e.end_ns);
        m.bytes += e.bytes;
        m.flops += e.flops;
        if (m.op != e.op) {
          m.op = e.stage == 1 ? Op::stage1 : Op::stage2;
          m.name = to_string(m.op);
        }
      } else {
        e.layer = -1;
        if (detail_ == traces::Detail::step) e.chunk = -1;
        out.push_back(std::move(e));
        last_of_stream[si] = out.size() - 1;
      }
    }
    return out;
  }

  std::vector<traces::MemorySample> downsample(std::vector<traces::MemorySample> in) const {
    const size_t cap = detail_ == traces::Detail::step ? 256 : detail_ == traces::Detail::chunk ? 4096 : SIZE_MAX;
    if (in.size() <= cap) return in;
    // Keep the maximum of each bucket so that peaks survive.
    std::vector<traces::MemorySample> out;
    const size_t per = (in.size() + cap - 1) / cap;
    for (size_t i = 0; i < in.size(); i += per) {
      traces::MemorySample m = in[i];
      for (size_t k = i; k < std::min(in.size(), i + per); ++k) {
        if (in[k].device_bytes >= m.device_bytes) {
          m.device_bytes = in[k].device_bytes;
          m.pool_pages_used = in[k].pool_pages_used;
        }
        m.host_bytes = std::max(m.host_bytes, in[k].host_bytes);
      }
      out.push_back(m);
    }
    return out;
  }

  const Scenario& s_;
  const step::Geometry& g_;
  traces::Detail detail_;
  std::vector<Event> events_;
  std::vector<PoolChange> changes_;
  std::vector<double> slot_free_;
  int64_t pass_index_ = 0;
  double compute_free_ = 0, h2d_free_ = 0, d2h_free_ = 0, comm_free_ = 0, compute_s_ = 0, last_compute_start_ = 0;
  int64_t h2d_bytes_ = 0, d2h_bytes_ = 0;
  int64_t phase_bytes_ = -1, base_bytes_ = 0;  // device bytes outside the pools: now, at t = 0
};

}  // namespace

EventResult simulate_events(const Scenario& s, traces::Detail detail) {
  using namespace detail;
  const step::Geometry g = geometry(s);
  const step::BufferTable table = detail::memory_table(s, g, false);
  // Device bytes outside the page pools (the pools are one allocation each; their occupancy is
  // sampled from the page changes), per phase of the step (the published sparse cache's second
  // resident slot lives in the backward only).
  auto is_pool = [](const std::string& name) {
    return name == step::row::kKvPool || name == step::row::kKvGradPool || name == step::row::kKvPoolBackwardSlot ||
           name == step::row::kKvGradPoolBackwardSlot || name == step::row::kKvPagesInFlight ||
           name == step::row::kKvGradPagesInFlight;
  };
  int64_t outside_pools[6] = {};
  for (step::Phase p : step::phases_of(s.config.schedule)) {
    int64_t pools = 0;
    for (const auto& r : table.rows)
      if (r.tier == step::Tier::device && (r.phases & step::phase_bit(p)) && is_pool(r.name)) pools += r.bytes;
    outside_pools[static_cast<int>(p)] = table.device_bytes_in(p) - pools;
  }
  Sim sim(s, g, detail);
  // The published implementation's write-backs are timed here (not taken from the table's rows).
  const bool published_writebacks = s.config.implementation == step::Implementation::published && g.oomb && g.offload &&
                                    target_of(s).backend == step::BackendKind::cuda;
  int64_t in_flight_peak = 0;
  auto enter = [&](step::Phase p) { sim.phase(outside_pools[static_cast<int>(p)]); };
  // Data parallelism: the gradient buckets of the last backward (the last chunk's), each issued as
  // it becomes final (gradient_bucket_s; a head bucket after the LM head, each layer's after its
  // backward, the embedding's with the last).
  const std::vector<double> bucket_s = gradient_bucket_s(s, g);
  const std::vector<step::GradientBucket> buckets =
      bucket_s.empty() ? std::vector<step::GradientBucket>{} : step::gradient_buckets(s.model, s.config, g);
  const bool overlap = gradient_allreduce_overlaps(s);
  const size_t lead = buckets.size() > static_cast<size_t>(g.L) + 1 ? 0 : 1;  // LoRA: no head bucket
  const bool embedding_grad = trains_embedding(s);
  size_t next_bucket = 0;
  // Final point k (0: after the head, 1 + i: after the i-th layer backward) issues its buckets.
  auto buckets_final = [&](size_t k, bool last) {
    while (next_bucket < buckets.size() && (last || next_bucket + lead <= k)) {
      sim.gradient_bucket(bucket_s[next_bucket], buckets[next_bucket].bytes, overlap);
      ++next_bucket;
    }
  };
  if (!g.oomb) {
    const ChunkCosts cc = standard_costs(s, g);
    enter(step::Phase::forward);
    for (int64_t l = 0; l < g.L; ++l) sim.layer_pass(cc.fill, 1, 0, l, Op::layer_fwd, 0, 0);
    enter(step::Phase::loss);
    sim.compute_only(cc.head, 2, 0, Op::lm_head);
    buckets_final(0, false);
    enter(step::Phase::backward);
    for (int64_t l = g.L - 1; l >= 0; --l) {
      sim.layer_pass(backward_of(cc, g, l), 2, 0, l, Op::layer_bwd, 0, 0);
      buckets_final(static_cast<size_t>(g.L - l), l == 0);
    }
  } else {
    auto global = [&](int64_t l) { return s.model.attention_of(l) == models::LayerAttention::global; };
    std::vector<ChunkCosts> costs;
    costs.reserve(static_cast<size_t>(g.n));
    for (int64_t c = 0; c < g.n; ++c) costs.push_back(chunk_costs(s, g, c));
    for (int64_t c = 0; c < g.n; ++c) {
      const ChunkCosts& cc = costs[static_cast<size_t>(c)];
      const int64_t u = step::union_pages(g, c), own = own_pages(g, c);
      enter(step::Phase::fill);
      sim.compute_only(cc.fill_head, 1, c, Op::embedding);
      for (int64_t l = 0; l < g.L; ++l) {
        // The pools' occupancy counts the global layers' pages (a local layer's are a fixed row).
        const bool paged = global(l);
        sim.layer_pass(cc.fill, 1, c, l, Op::layer_fwd, paged ? u + own : 0, 0);
        if (!g.offload && paged) sim.pool_change(sim.compute_free(), own, own);
      }
    }
    for (int64_t c = g.n - 1; c >= 0; --c) {
      const ChunkCosts& cc = costs[static_cast<size_t>(c)];
      const int64_t u = step::union_pages(g, c), own = own_pages(g, c);
      enter(step::Phase::recompute);
      sim.compute_only(cc.fill_head, 2, c, Op::embedding);  // the first layer's input, embedded again
      double sweep_start = 0;
      for (int64_t l = 0; l < g.L; ++l) {
        sim.layer_pass(cc.recompute, 2, c, l, Op::layer_recompute, global(l) ? u : 0, 0);
        if (l == 0) sweep_start = sim.last_compute_start();
      }
      if (published_writebacks) {
        // The published host's switches (published_layer_period_s) from the sweep's first pass on:
        // its sweep waits for no copy, so a layer starts once the one before has computed and its own
        // onload has been issued, whatever this timeline's slots make the copies cost.
        in_flight_peak = std::max(in_flight_peak, sim.published_writebacks(published_switches(s, g, c, sweep_start),
                                                                           published_slot_pages(g, c),
                                                                           published_writeback(s, g)));
      }
      enter(step::Phase::loss);
      sim.compute_only(cc.head, 2, c, Op::lm_head);
      if (c == 0) buckets_final(0, false);
      enter(step::Phase::backward);
      for (int64_t l = g.L - 1; l >= 0; --l) {
        const bool paged = global(l);
        sim.layer_pass(backward_of(cc, g, l), 2, c, l, Op::layer_bwd, paged ? u : 0, paged ? u + own : 0);
        if (!g.offload && paged) sim.pool_change(sim.compute_free(), -own, -own);
        if (c == 0) buckets_final(static_cast<size_t>(g.L - l), l == 0 && !embedding_grad);
      }
      if (embedding_grad) {
        sim.compute_only(cc.embedding_bwd, 2, c, Op::embedding_bwd);
        if (c == 0) buckets_final(static_cast<size_t>(g.L + 1), true);
      }
    }
  }
  enter(step::Phase::optimizer);
  sim.wait_comm();  // every gradient bucket reduced before the update
  // ZeRO-1: the gradients reduce-scattered before the update, the updated weights all-gathered after.
  const ShardedComm zero = sharded_comm(s, g);
  auto collective = [&](double seconds, double bytes, Op op) {
    if (seconds <= 0) return;
    PassCost p;
    p.compute_s = seconds;
    p.work.allreduce_s = seconds;
    p.work.allreduce_bytes = bytes;
    p.name_of_collective = to_string(op);
    sim.compute_only(p, 2, -1, op);
  };
  collective(zero.reduce_scatter_s, zero.gradient_bytes, Op::gradient_reduce_scatter);
  if (s.config.optimizer == step::Optimizer::gpu) {
    PassCost update;
    update.compute_s = optimizer_update_s(s);
    sim.compute_only(update, 2, -1, Op::optimizer_step);
  } else if (s.config.optimizer == step::Optimizer::host) {
    sim.optimizer_round_trip(step::optimizer_gradient_bytes(s.model, s.config, g),
                             step::optimizer_weight_bytes(s.model, s.config, g), optimizer_update_s(s));
  }
  // (A host update's weights come back on the h2d stream: the all-gather waits for them.)
  if (zero.all_gather_s > 0) sim.wait_h2d();
  collective(zero.all_gather_s, zero.weight_bytes, Op::weight_all_gather);
  EventResult res;
  res.trace = sim.finish(sim.base_bytes(), table.host_bytes());

  // Memory figures are those of the table (pools are allocated once, at their high-water size, so
  // the samples, which count the pages in use, never exceed it); times and bytes come from the
  // timeline.
  Summary sum = evaluate(s);
  sum.step_s = sim.step_s();
  sum.compute_s = sim.compute_s();
  sum.exposed_copy_s = std::max(0.0, sum.step_s - sum.compute_s);
  sum.h2d_bytes = res.trace.summary.h2d_bytes;
  sum.d2h_bytes = res.trace.summary.d2h_bytes;
  finish_summary(s, memory_figures(table), sum);
  res.trace.summary.peak_device_bytes = sum.peak_device_bytes;
  res.trace.summary.peak_host_bytes = sum.peak_host_bytes;
  res.summary = sum;
  res.pages_in_flight_peak = in_flight_peak;
  return res;
}

void check_event_simulation_size(const Scenario& s, const std::string& where, const std::string& key,
                                 const std::string& hint) {
  const step::Config& c = s.config;
  const int64_t layers = step::effective_layers(c, s.model);
  const int64_t chunks = c.schedule == step::Schedule::oomb ? ceil_div(c.context_tokens, c.chunk_tokens) : 1;
  if (chunks <= kMaxEventPairs / layers) return;
  // Measured: `oomb simulate --model qwen2.5-7b --gpu h200 --context 4M --timeline t.json` (1024
  // chunks x 28 layers) peaks at 136 MB resident and writes 58.7 MB: ~4.7 KB and ~2 KB per pair.
  const double pairs = static_cast<double>(chunks) * static_cast<double>(layers);
  throw Error(where, key,
              "an event-level simulation of " + std::to_string(chunks) + " chunks x " + std::to_string(layers) +
                  " layers would need about " + format_bytes(static_cast<int64_t>(std::min(pairs * 4700.0, 9e18))) +
                  " of memory (and " + format_bytes(static_cast<int64_t>(std::min(pairs * 2000.0, 9e18))) +
                  " per written timeline); the limit is " + std::to_string(kMaxEventPairs) + " (chunk, layer) pairs",
              hint);
}

}  // namespace oomb::simulator
