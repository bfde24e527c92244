#include "planner/search.h"

#include "planner/executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/format.h"
#include "step/describe.h"
#include "step/buffers.h"
#include "core/units.h"

namespace oomb::planner {

using step::Attention;
using step::Config;
using step::Optimizer;
using step::Schedule;

const char* to_string(Objective o) {
  switch (o) {
    case Objective::time: return "time";
    case Objective::memory: return "memory";
    case Objective::context: return "context";
  }
  return "?";
}

Objective objective_from_string(const std::string& s, const std::string& where) {
  if (s == "time") return Objective::time;
  if (s == "memory") return Objective::memory;
  if (s == "context") return Objective::context;
  throw Error(where, s, "unknown objective", "time (min step time), memory (min peak device memory) or context (max context)");
}

// ---------------------------------------------------------------------------------------------
// Usage

namespace {
double ratio(int64_t need, int64_t limit) {
  if (limit <= 0) return need > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return static_cast<double>(need) / static_cast<double>(limit);
}
}  // namespace

double Usage::worst_ratio() const {
  return std::max({ratio(device_need_bytes, device_limit_bytes), ratio(pinned_need_bytes, pinned_limit_bytes),
                   ratio(host_need_bytes, host_limit_bytes)});
}

simulator::Binding Usage::binding() const {
  const double d = ratio(device_need_bytes, device_limit_bytes), p = ratio(pinned_need_bytes, pinned_limit_bytes),
               h = ratio(host_need_bytes, host_limit_bytes);
  if (d >= p && d >= h) return simulator::Binding::device_memory;
  return p >= h ? simulator::Binding::pinned_host_memory : simulator::Binding::host_ram;
}

std::vector<std::string> Usage::violations() const {
  std::vector<std::string> v;
  if (!device_ok())
    v.push_back("device memory: needs " + format_bytes(device_need_bytes) + " of " + format_bytes(device_limit_bytes) +
                " usable (" + format_bytes(device_capacity_bytes) + " less headroom), over by " +
                format_bytes(device_need_bytes - device_limit_bytes));
  if (!pinned_ok())
    v.push_back("pinned host memory: needs " + format_bytes(pinned_need_bytes) + " of " +
                format_bytes(pinned_limit_bytes) + " pinnable, over by " +
                format_bytes(pinned_need_bytes - pinned_limit_bytes));
  if (!host_ok())
    v.push_back("host RAM: needs " + format_bytes(host_need_bytes) + " of " + format_bytes(host_limit_bytes) +
                ", over by " + format_bytes(host_need_bytes - host_limit_bytes));
  return v;
}

Usage usage_of(const simulator::Scenario& s, const simulator::Summary& sum, double headroom) {
  Usage u;
  // As the simulator counts it: the runtime reserve is always on the GPU, whatever the peak is
  // reported as; everything on the host except optimizer state must be pinned.
  int64_t device = 0;
  for (const auto& [category, bytes] : sum.device_breakdown_bytes)
    if (category != "runtime_reserve") device += bytes;
  u.device_need_bytes = device + s.gpu.reserved_bytes;
  u.device_capacity_bytes = s.gpu.hbm_capacity_bytes;
  u.device_limit_bytes =
      static_cast<int64_t>(std::floor(static_cast<double>(s.gpu.hbm_capacity_bytes) * (1.0 - headroom)));
  // The host tier per node: the table's rows are one rank's (step::node_host_bytes).
  for (const auto& [category, bytes] : sum.host_breakdown_bytes)
    if (category != "optimizer_state") u.pinned_need_bytes += step::node_host_bytes(bytes, s.config);
  u.pinned_limit_bytes = s.host.pinnable_bytes;
  u.host_need_bytes = step::node_host_bytes(sum.peak_host_bytes, s.config);
  u.host_limit_bytes = s.host.ram_bytes;
  return u;
}

// ---------------------------------------------------------------------------------------------
// The search space

namespace {

constexpr int64_t kChunks[] = {512, 1024, 2048, 4096, 8192, 16384, 32768};
constexpr int64_t kPages[] = {64, 128, 256};
constexpr int64_t kBudgets[] = {16, 32, 64, 128, 256, 512, 1024};
constexpr int64_t kResidents[] = {1, 2, 3, 4};  // plus "all layers"
constexpr int64_t kLogits[] = {1024, 4096, 0};  // memory-ascending: fused tiles first
constexpr int64_t kPageLcm = 256;               // every page above divides it

struct Space {
  bool standard = false;
  std::vector<int64_t> chunks, pages, residents, logits, budgets;  // budgets: pages of kDefaultMinBudgetPage
  std::vector<Dtype> kv_grads, param_grads;  // memory-ascending
  std::vector<step::Optimizer> optimizers;
  // ZeRO-1 (the AdamW state sharded over the data-parallel replicas): searched, unsharded first,
  // when there are replicas and a full fine-tune's optimizer to shard.
  std::vector<bool> shards;
  // Recompute settings, memory-ascending (and time-descending): r < L is checkpointing on with the
  // last r layers kept (0 = every layer recomputed), r = L is checkpointing off.
  std::vector<int64_t> recomputes;
  bool dense = true, sparse = false;
};

bool fixed(const Request& r, const char* knob) { return r.fixed.count(knob) > 0; }

Space make_space(const Request& r, int64_t N) {
  const step::Config& b = r.scenario.config;
  const int64_t L = step::effective_layers(b, r.scenario.model);
  Space sp;
  sp.standard = b.schedule == step::Schedule::standard;
  if (sp.standard) {
    sp.chunks = {b.chunk_tokens};
    sp.pages = {b.page_tokens};
    sp.residents = {b.resident_layers};
    sp.kv_grads = {b.kv_grad_dtype};
  } else {
    if (fixed(r, "page")) sp.pages = {b.page_tokens};
    else sp.pages.assign(std::begin(kPages), std::end(kPages));
    if (fixed(r, "chunk")) {
      sp.chunks = {b.chunk_tokens};
    } else {
      // Chunks at or beyond the context all mean "one chunk": keep only the first of them.
      for (int64_t c : kChunks) {
        sp.chunks.push_back(c);
        if (c >= N) break;
      }
    }
    if (fixed(r, "resident_layers")) {
      sp.residents = {std::min(b.resident_layers, L)};
    } else {
      // Resident layers count the global layers (a local layer's pages stay on the device): all of
      // them resident is no offload.
      const int64_t Lg = std::max<int64_t>(1, step::global_layers(b, r.scenario.model));
      for (int64_t x : kResidents)
        if (x < Lg) sp.residents.push_back(x);
      sp.residents.push_back(Lg);
    }
    if (fixed(r, "kv_grad_dtype")) sp.kv_grads = {b.kv_grad_dtype};
    else sp.kv_grads = {Dtype::bf16, Dtype::fp32};
    if (fixed(r, "budget")) sp.budgets = {b.page_budget};
    else sp.budgets.assign(std::begin(kBudgets), std::end(kBudgets));
  }
  if (fixed(r, "kept_layers")) {
    sp.recomputes = {b.checkpointing ? b.kept_layers : L};
  } else if (fixed(r, "checkpointing") && !b.checkpointing) {
    sp.recomputes = {L};
  } else {
    for (int64_t k = 0; k < L; ++k) sp.recomputes.push_back(k);
    if (!fixed(r, "checkpointing")) sp.recomputes.push_back(L);
  }
  // Under LoRA with a frozen embedding and LM head no base parameter has a gradient: the dtype
  // changes nothing (the adapters' gradients are fp32).
  if (fixed(r, "param_grad_dtype") || (b.lora_rank > 0 && !b.lora_train_embeddings)) sp.param_grads = {b.param_grad_dtype};
  else sp.param_grads = {Dtype::bf16, Dtype::fp32};
  if (fixed(r, "logits_chunk")) sp.logits = {b.logits_chunk_tokens};
  else sp.logits.assign(std::begin(kLogits), std::end(kLogits));
  if (fixed(r, "optimizer")) sp.optimizers = {b.optimizer};
  else if (r.optimizer_auto) sp.optimizers = {step::Optimizer::host, step::Optimizer::gpu};
  else sp.optimizers = {b.optimizer};
  if (fixed(r, "shard_optimizer") || b.data_parallel <= 1 || b.lora_rank > 0 ||
      (sp.optimizers.size() == 1 && sp.optimizers.front() == step::Optimizer::none))
    sp.shards = {b.shard_optimizer};
  else
    sp.shards = {false, true};
  return sp;
}

std::vector<int64_t> chunks_for_page(const Space& sp, int64_t page) {
  if (sp.standard) return sp.chunks;
  std::vector<int64_t> v;
  for (int64_t c : sp.chunks)
    if (c >= page && c % page == 0) v.push_back(c);
  return v;
}

int64_t pages_of(int64_t N, int64_t page) { return ceil_div(N, page); }

// Budgets (in pages of `page`) tried for one page size: the searched ones whose attended tokens
// reach the request's minimum, with the minimum itself first when no searched budget equals it.
std::vector<int64_t> budgets_for_page(const Request& r, const Space& sp, int64_t page) {
  if (fixed(r, "budget")) return sp.budgets;
  const int64_t min_pages = std::max<int64_t>(1, ceil_div(r.min_budget_tokens(), page));
  std::vector<int64_t> v;
  if (std::find(sp.budgets.begin(), sp.budgets.end(), min_pages) == sp.budgets.end()) v.push_back(min_pages);
  for (int64_t x : sp.budgets)
    if (x >= min_pages) v.push_back(x);
  return v;
}

// One group of the first phase: everything but the resident layers and the chunk.
struct Group {
  step::Attention attention = step::Attention::dense;
  int64_t budget = 0;
  int64_t page = 0;
  step::Optimizer optimizer = step::Optimizer::none;
  bool shard = false;
  Dtype kv_grad = Dtype::fp32;
};

// Memory never falls when the KV-gradient dtype widens or the budget grows (same page, optimizer
// and attention), so a group with no fitting configuration makes every group above it hopeless.
bool dominates(const Group& above, const Group& dead) {
  return above.attention == dead.attention && above.page == dead.page && above.optimizer == dead.optimizer &&
         above.shard == dead.shard && dtype_bytes(above.kv_grad) >= dtype_bytes(dead.kv_grad) && above.budget >= dead.budget;
}

double primary(const Candidate& c, Objective o) {
  return o == Objective::memory ? static_cast<double>(c.summary.peak_device_bytes) : c.summary.step_s;
}
double secondary(const Candidate& c, Objective o) {
  return o == Objective::memory ? c.summary.step_s : static_cast<double>(c.summary.peak_device_bytes);
}

auto exactness(const step::Config& k) {
  const bool sparse = k.attention == step::Attention::sparse;
  return std::make_tuple(sparse ? 1 : 0, sparse ? -k.page_budget * k.page_tokens : int64_t{0},
                         -dtype_bytes(k.kv_grad_dtype));
}

// Recompute settings in memory order: kept layers, then checkpointing off.
int64_t recompute_rank(const step::Config& k) {
  return k.checkpointing ? k.kept_layers : std::numeric_limits<int64_t>::max();
}

// Within the tie bands, the recompute setting that serves the objective comes before the other
// metric: one kept layer more costs a layer's activations and saves a layer's recompute (under 1%
// of the step on a 28-layer model), so the bands hold several settings of the same plan, and
// trading the objective for a hair of the other metric would be the wrong way round.
auto tie_key(const Candidate& c, Objective o) {
  const step::Config& k = c.config;
  const int64_t rank = recompute_rank(k);
  return std::tuple_cat(exactness(k),
                        std::make_tuple(o == Objective::memory ? rank : -rank, secondary(c, o),
                                        -k.chunk_tokens, k.page_tokens, k.resident_layers, k.logits_chunk_tokens,
                                        k.param_grad_dtype, static_cast<int>(k.optimizer), k.shard_optimizer));
}

// `b` at least as exact as `a` in every respect that the exactness key orders (sparse budgets are
// comparable only at equal attention; dtype width at equal attention and budget).
bool at_least_as_exact(const step::Config& b, const step::Config& a) {
  const bool sa = a.attention == step::Attention::sparse, sb = b.attention == step::Attention::sparse;
  if (sb && !sa) return false;
  const int64_t ta = sa ? a.page_budget * a.page_tokens : 0, tb = sb ? b.page_budget * b.page_tokens : 0;
  if (sa && sb && tb < ta) return false;
  return dtype_bytes(b.kv_grad_dtype) >= dtype_bytes(a.kv_grad_dtype);
}

// The knobs the planner varies; equal keys mean the same plan.
auto config_key(const step::Config& k) {
  return std::make_tuple(k.attention == step::Attention::sparse ? k.page_budget : int64_t{0}, k.chunk_tokens, k.page_tokens,
                         k.resident_layers, k.kv_grad_dtype, k.param_grad_dtype, k.logits_chunk_tokens,
                         static_cast<int>(k.optimizer), k.shard_optimizer, static_cast<int>(k.attention),
                         k.checkpointing, k.kept_layers);
}

// The same without the recompute setting: one point of the search, whose settings run from full
// checkpointing (least memory) to checkpointing off (fastest).
auto point_key(const step::Config& k) {
  step::Config c = k;
  c.checkpointing = true;
  c.kept_layers = 0;
  return config_key(c);
}

void set_recompute(step::Config& c, int64_t r, int64_t L) {
  c.checkpointing = r < L;
  c.kept_layers = r < L ? r : 0;
}
int64_t recompute_of(const step::Config& c, int64_t L) { return c.checkpointing ? c.kept_layers : L; }

class Searcher {
 public:
  Searcher(const Request& r, int64_t N, const SearchOptions& o, SearchResult& out)
      : r_(r), o_(o), out_(out), sp_(make_space(r, N)), objective_(r.objective == Objective::memory ? Objective::memory
                                                                                                      : Objective::time) {
    s_ = r.scenario;
    s_.config.context_tokens = N;
    base_ = s_.config;
    // A setting the user fixed is kept even when the executor does not run it (it is labelled).
    only_executable_ = r.executable_only && executable(s_.model, base_);
    layers_ = step::effective_layers(base_, s_.model);
    global_layers_ = step::global_layers(base_, s_.model);
    // Sliding and chunked layers keep pages at every chunk boundary: a smaller chunk holds less of
    // the layer's activations but more of those pages, so device memory is not monotone in it.
    chunk_monotone_ = global_layers_ == layers_;
  }

  // One pass over the groups of the given attention modes. Returns true when first_fit found one.
  bool run(bool dense, bool sparse, bool track_closest) {
    track_closest_ = track_closest;
    std::vector<Group> groups;
    const step::Config& b = base_;
    for (int mode = 0; mode < 2; ++mode) {
      if ((mode == 0 && !dense) || (mode == 1 && (!sparse || sp_.standard))) continue;
      for (int64_t page : sp_.pages) {
        if (mode == 1 && r_.sparse_page > 0 && page != r_.sparse_page) continue;
        std::vector<int64_t> budgets{b.page_budget};
        if (mode == 1) {
          // Budgets at or beyond the context's pages all mean "attend everything": keep the first.
          budgets.clear();
          for (int64_t x : budgets_for_page(r_, sp_, page)) {
            budgets.push_back(x);
            if (x >= pages_of(b.context_tokens, page) && !fixed(r_, "budget")) break;
          }
        }
        for (int64_t budget : budgets)
          for (step::Optimizer opt : sp_.optimizers)
            for (bool shard : sp_.shards) {
              if (shard && opt == step::Optimizer::none) continue;
              for (const auto& kvg : sp_.kv_grads)
                groups.push_back({mode == 0 ? step::Attention::dense : step::Attention::sparse, budget, page, opt, shard, kvg});
            }
      }
    }
    const size_t first_new = out_.feasible.size();
    for (const Group& g : groups) {
      bool hopeless = false;
      for (const Group& d : dead_)
        if (dominates(g, d)) hopeless = true;
      if (hopeless) continue;
      if (scan(g)) return true;
    }
    refine(first_new);
    return false;
  }

 private:
  step::Config config_of(const Group& g, int64_t resident, int64_t chunk, Dtype param_grad, int64_t logits) const {
    step::Config c = base_;
    c.attention = g.attention;
    c.page_budget = g.budget;
    c.page_tokens = g.page;
    c.optimizer = g.optimizer;
    c.shard_optimizer = g.shard;
    c.kv_grad_dtype = g.kv_grad;
    set_recompute(c, sp_.recomputes.front(), layers_);
    c.resident_layers = resident;
    c.chunk_tokens = chunk;
    c.param_grad_dtype = param_grad;
    c.logits_chunk_tokens = logits;
    return c;
  }

  Candidate eval(const step::Config& c) {
    s_.config = c;
    Candidate k;
    k.config = c;
    k.summary = simulator::evaluate(s_);
    k.usage = usage_of(s_, k.summary, r_.headroom);
    ++out_.evaluations;
    if (track_closest_ && !k.fits()) {
      auto keep = [&](std::optional<Candidate>& slot) {
        if (!slot || k.usage.worst_ratio() < slot->usage.worst_ratio()) slot = k;
      };
      keep(out_.closest);
      keep(step::offloads(c, s_.model) ? out_.closest_offload : out_.closest_on_device);
    }
    return k;
  }

  // Phase 1 for one group: resident layers ascending; chunks ascending (memory grows with the
  // chunk, so the first device failure ends the scan) or, for the time objective, descending from
  // the largest (fewer, cheaper evaluations: time falls with the chunk) until the time leaves the
  // tie band. The host tier does not depend on the chunk nor, while offloading, on the resident
  // layers: one host failure rules out every offloading configuration of the group.
  bool scan(const Group& g) {
    const std::vector<int64_t> chunks = chunks_for_page(sp_, g.page);
    if (chunks.empty()) return false;
    const bool descending = objective_ == Objective::time && !o_.first_fit && !o_.exhaustive;
    const Dtype pg = sp_.param_grads.front();
    const int64_t lg = sp_.logits.front();
    bool any_fit = false, host_dead = false;
    for (int64_t resident : sp_.residents) {
      const bool offload = !sp_.standard && resident < global_layers_;  // step::offloads
      if (offload && host_dead) continue;
      // Without monotonicity in the chunk (local layers), no chunk's failure rules out another, and
      // the resident layers are dead only when every chunk failed.
      bool device_dead = !chunk_monotone_;
      double band = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < chunks.size(); ++i) {
        const int64_t chunk = descending ? chunks[chunks.size() - 1 - i] : chunks[i];
        const bool smallest = chunk == chunks.front();
        Candidate k = eval(config_of(g, resident, chunk, pg, lg));
        if (!k.usage.device_ok()) {
          if (smallest && chunk_monotone_) device_dead = true;
          if (descending || !chunk_monotone_) continue;
          break;
        }
        device_dead = false;
        if (!k.usage.host_ok() || !k.usage.pinned_ok()) {
          if (offload) host_dead = true;
          break;
        }
        if (!k.fits()) continue;  // a constraint the planner does not model: no pruning
        any_fit = true;  // memory fits: a group is dead for memory only (speed limits do not prune)
        // k recomputes every layer (the least memory); the fastest setting that fits keeps the most.
        std::optional<Candidate> top;
        if (!o_.first_fit || !acceptable(k)) top = fastest_fitting(k.config);
        double m = std::numeric_limits<double>::infinity();
        for (Candidate* x : {&k, top ? &*top : nullptr}) {
          if (!x || !acceptable(*x)) continue;
          m = std::min(m, primary(*x, objective_));
          out_.feasible.push_back(std::move(*x));
          if (o_.first_fit) return true;
        }
        if (m == std::numeric_limits<double>::infinity() || o_.exhaustive) continue;
        if (m > band * (1.0 + kTieTolerance)) break;
        band = std::min(band, m);
      }
      // Device memory grows with the resident layers: if the smallest chunk failed, so will all.
      if (device_dead) break;
    }
    if (!any_fit) dead_.push_back(g);
    return false;
  }

  bool acceptable(const Candidate& k) const {
    return k.fits() && k.within(r_) && (!only_executable_ || executable(s_.model, k.config));
  }

  // The recompute settings: time falls and memory grows with the index into sp_.recomputes (the
  // kept layers, then checkpointing off), and host memory does not depend on it. Given `low`, the
  // configuration at the first setting (it fits the device), the one at the largest setting whose
  // device memory fits, when that is not the first: checkpointing off if it fits, else a binary
  // search over the kept layers (a few evaluations instead of one per layer).
  std::optional<Candidate> fastest_fitting(const step::Config& low) {
    const std::vector<int64_t>& S = sp_.recomputes;
    if (S.size() < 2) return std::nullopt;
    step::Config c = low;
    set_recompute(c, S.back(), layers_);
    Candidate last = eval(c);
    if (last.usage.device_ok()) return last;
    std::optional<Candidate> best;
    size_t lo = 0, hi = S.size() - 1;  // fits at lo, not at hi
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      set_recompute(c, S[mid], layers_);
      Candidate k = eval(c);
      if (k.usage.device_ok()) {
        lo = mid;
        best = std::move(k);
      } else {
        hi = mid;
      }
    }
    return best;
  }

  size_t recompute_index(const step::Config& c) const {
    const auto& S = sp_.recomputes;
    return static_cast<size_t>(std::lower_bound(S.begin(), S.end(), recompute_of(c, layers_)) - S.begin());
  }

 public:
  // Phase 3: the tie bands. Phase 1 keeps the two ends of each point's recompute settings (the
  // least memory and the fastest that fits); the pick is the best within kTieTolerance of the
  // objective, then within kTieTolerance of the other metric (select_best), and either edge can
  // be a setting between the ends. For the time objective: within the band of the best time, the
  // fewest kept layers whose time is in it (the least memory, which sets the memory band), then
  // the most kept layers whose memory is in that band (the pick); for the memory objective the
  // other way round. One binary search per point in the band and edge.
  void complete_bands() {
    if (o_.first_fit || sp_.recomputes.size() < 3 || out_.feasible.empty()) return;
    const bool time = objective_ == Objective::time;
    double best = std::numeric_limits<double>::infinity();
    for (const auto& k : out_.feasible) best = std::min(best, primary(k, objective_));
    const double limit1 = best * (1.0 + kTieTolerance);
    auto in1 = [&](const Candidate& k) { return primary(k, objective_) <= limit1; };
    complete_edge(in1, time);
    double sec = std::numeric_limits<double>::infinity();
    for (const auto& k : out_.feasible)
      if (in1(k)) sec = std::min(sec, secondary(k, objective_));
    const double limit2 = sec * (1.0 + kTieTolerance);
    complete_edge([&](const Candidate& k) { return in1(k) && secondary(k, objective_) <= limit2; }, !time);
  }

 private:
  // For every point with a setting that satisfies `in`, adds the setting at the edge of those that
  // do, towards fewer kept layers (low) or more: `in` holds from the known one up to the edge.
  template <class In>
  void complete_edge(const In& in, bool low) {
    const std::vector<int64_t>& S = sp_.recomputes;
    struct Known {
      step::Config config;
      int64_t in = -1, out = -1;  // the known setting in the band nearest the edge; beyond it, outside
    };
    std::map<decltype(point_key(std::declval<const step::Config&>())), Known> points;
    for (const auto& k : out_.feasible) {
      Known& p = points.try_emplace(point_key(k.config), Known{k.config}).first->second;
      const int64_t i = static_cast<int64_t>(recompute_index(k.config));
      if (in(k) && (p.in < 0 || (low ? i < p.in : i > p.in))) p.in = i;
    }
    for (const auto& k : out_.feasible) {
      Known& p = points.at(point_key(k.config));
      const int64_t i = static_cast<int64_t>(recompute_index(k.config));
      if (p.in < 0 || in(k) || (low ? i > p.in : i < p.in)) continue;
      if (p.out < 0 || (low ? i > p.out : i < p.out)) p.out = i;
    }
    for (auto& [key, p] : points) {
      if (p.in < 0) continue;
      int64_t good = p.in, bad = p.out >= 0 ? p.out : low ? -1 : static_cast<int64_t>(S.size());
      std::optional<Candidate> edge;
      while (std::abs(good - bad) > 1) {
        const int64_t mid = (good + bad) / 2;
        step::Config c = p.config;
        set_recompute(c, S[static_cast<size_t>(mid)], layers_);
        Candidate k = eval(c);
        if (acceptable(k) && in(k)) {
          good = mid;
          edge = std::move(k);
        } else {
          bad = mid;
        }
      }
      if (edge) out_.feasible.push_back(std::move(*edge));
    }
  }

  // Phase 4, for the frontier (exhaustive): every recompute setting of a point lies between its
  // ends, memory growing and time falling with the kept layers, so any of them can be a frontier
  // point, not only the ends phase 1 keeps. Between two known settings every other one has at
  // least the lower one's memory and at least the upper one's time: when a known candidate at
  // least as exact reaches that corner, none of them can be on the frontier; otherwise the middle
  // one is evaluated and both halves are judged the same way (exact, and a few evaluations per
  // stretch of the frontier instead of one per layer).
 public:
  void complete_frontier() {
    if (!o_.exhaustive || o_.first_fit || sp_.recomputes.size() < 3 || out_.feasible.empty()) return;
    struct Metrics {
      int64_t bytes = 0;
      double s = 0;
    };
    struct Known {
      step::Config config;
      std::map<size_t, Metrics> at = {};  // evaluated settings
    };
    std::map<decltype(point_key(std::declval<const step::Config&>())), Known> points;
    for (const auto& k : out_.feasible)
      points.try_emplace(point_key(k.config), Known{k.config})
          .first->second.at[recompute_index(k.config)] = {k.summary.peak_device_bytes, k.summary.step_s};
    // Points by their least memory: a filled point then rules out the larger ones it dominates.
    std::vector<Known*> order;
    for (auto& [key, p] : points) order.push_back(&p);
    std::stable_sort(order.begin(), order.end(),
                     [](const Known* a, const Known* b) { return a->at.begin()->second.bytes < b->at.begin()->second.bytes; });
    std::vector<Candidate> judges = pareto_frontier(out_.feasible);
    auto reached = [&](const step::Config& c, int64_t bytes, double s) {
      for (const auto& q : judges)
        if (q.summary.peak_device_bytes <= bytes && q.summary.step_s <= s && at_least_as_exact(q.config, c)) return true;
      return false;
    };
    auto evaluate_at = [&](Known& p, size_t i) {
      step::Config c = p.config;
      set_recompute(c, sp_.recomputes[i], layers_);
      Candidate k = eval(c);
      p.at[i] = {k.summary.peak_device_bytes, k.summary.step_s};
      if (!acceptable(k)) return;
      judges.push_back(k);
      out_.feasible.push_back(std::move(k));
    };
    std::function<void(Known&, size_t, size_t)> fill = [&](Known& p, size_t lo, size_t hi) {
      if (hi - lo < 2) return;
      const Metrics a = p.at.at(lo), b = p.at.at(hi);
      if (reached(p.config, a.bytes, b.s)) return;
      const size_t mid = lo + (hi - lo) / 2;
      evaluate_at(p, mid);
      fill(p, lo, mid);
      fill(p, mid, hi);
    };
    for (Known* p : order) {
      // Below the lowest known setting (a speed limit left the first ones out) nothing bounds the
      // memory from below: every setting there is evaluated.
      const size_t first = p->at.begin()->first;
      for (size_t i = 0; i < first; ++i) evaluate_at(*p, i);
      std::vector<size_t> known;
      for (const auto& [i, m] : p->at) known.push_back(i);
      for (size_t j = 1; j < known.size(); ++j) fill(*p, known[j - 1], known[j]);
    }
  }

 private:
  // Phase 2: phase 1 held the parameter-gradient dtype and the logits tiling at their
  // memory-smallest values, which the cost model also makes the fastest (fused loss, narrower
  // gradients to move). Try the other values around the best few plans (and, for the frontier,
  // around every frontier point).
  void refine(size_t first_new) {
    if (o_.first_fit || (sp_.param_grads.size() < 2 && sp_.logits.size() < 2)) return;
    std::vector<Candidate> seeds(out_.feasible.begin() + static_cast<std::ptrdiff_t>(first_new), out_.feasible.end());
    if (seeds.empty()) return;
    std::vector<Candidate> picked;
    if (o_.exhaustive) picked = pareto_frontier(seeds);
    std::sort(seeds.begin(), seeds.end(), [&](const Candidate& a, const Candidate& b) {
      return std::make_tuple(primary(a, objective_), tie_key(a, objective_)) <
             std::make_tuple(primary(b, objective_), tie_key(b, objective_));
    });
    if (const Candidate* best = select_best(seeds, objective_, &r_.scenario.config)) picked.push_back(*best);
    for (size_t i = 0; i < seeds.size() && i < 3; ++i) picked.push_back(seeds[i]);
    std::set<decltype(point_key(std::declval<const step::Config&>()))> done;
    for (const auto& k : out_.feasible) done.insert(point_key(k.config));
    for (const Candidate& seed : picked) {
      // Tiles at least as long as the chunk are all the same single fused tile: try one of them.
      const int64_t C = std::min(seed.config.chunk_tokens, seed.config.context_tokens);
      auto tile = [&](int64_t lg) { return lg == 0 ? int64_t{-1} : std::min(lg, C); };
      std::set<std::pair<Dtype, int64_t>> tried{{seed.config.param_grad_dtype, tile(seed.config.logits_chunk_tokens)}};
      for (const auto& pg : sp_.param_grads)
        for (int64_t lg : sp_.logits) {
          if (!tried.insert({pg, tile(lg)}).second) continue;
          step::Config c = seed.config;
          c.param_grad_dtype = pg;
          c.logits_chunk_tokens = lg;
          set_recompute(c, sp_.recomputes.front(), layers_);
          if (!done.insert(point_key(c)).second) continue;
          // As in phase 1: the least-memory recompute setting and the fastest that fits.
          Candidate k = eval(c);
          if (!k.usage.device_ok()) continue;
          std::optional<Candidate> top = fastest_fitting(k.config);
          for (Candidate* x : {&k, top ? &*top : nullptr})
            if (x && acceptable(*x)) out_.feasible.push_back(std::move(*x));
        }
    }
  }

  const Request& r_;
  const SearchOptions& o_;
  SearchResult& out_;
  Space sp_;
  Objective objective_;
  simulator::Scenario s_;  // s_.config is the configuration being evaluated
  step::Config base_;            // the request's configuration at this context
  int64_t layers_ = 0, global_layers_ = 0;
  bool chunk_monotone_ = true;
  bool track_closest_ = true;
  bool only_executable_ = false;
  std::vector<Group> dead_;
};

void fill_alternatives(SearchResult& res, Objective o, const step::Config* preferred) {
  if (!res.best) return;
  const step::Config& b = res.best->config;
  using Getter = std::function<std::string(const step::Config&)>;
  const std::vector<Getter> dims = {
      [](const step::Config& c) { return std::to_string(c.chunk_tokens); },
      [](const step::Config& c) { return std::to_string(c.page_tokens); },
      [](const step::Config& c) { return std::to_string(c.resident_layers); },
      [](const step::Config& c) { return std::string(to_string(c.kv_grad_dtype)); },
      [](const step::Config& c) { return std::string(to_string(c.param_grad_dtype)); },
      [](const step::Config& c) { return std::to_string(c.logits_chunk_tokens); },
      [](const step::Config& c) { return std::string(step::to_string(c.optimizer)); },
      [](const step::Config& c) { return c.shard_optimizer ? std::string("zero1") : std::string("replicated"); },
      [](const step::Config& c) { return c.checkpointing ? "ckpt" + std::to_string(c.kept_layers) : std::string("no-ckpt"); },
      [](const step::Config& c) {
        return c.attention == step::Attention::sparse ? "sparse" + std::to_string(c.page_budget) : std::string("dense");
      }};
  // An alternative within kTieTolerance of the best in both time and memory tells the reader
  // nothing: it is left out (callers say so when nothing else is left).
  // The same holds between alternatives: two rows with one step time and one peak (chunk 2K,
  // and chunk 2K with page 64) are one row; the second dimension takes its next-best instead.
  auto differs_from = [&](const Candidate& k, const Candidate& ref) {
    const auto& x = k.summary;
    const auto& y = ref.summary;
    return std::abs(x.step_s - y.step_s) >= kTieTolerance * y.step_s ||
           std::abs(static_cast<double>(x.peak_device_bytes - y.peak_device_bytes)) >=
               kTieTolerance * static_cast<double>(y.peak_device_bytes);
  };
  std::vector<Candidate> alts;
  for (const auto& dim : dims) {
    std::vector<Candidate> other;
    for (const auto& k : res.feasible) {
      bool tells = dim(k.config) != dim(b) && differs_from(k, *res.best);
      for (const auto& x : alts) tells = tells && differs_from(k, x);
      if (tells) other.push_back(k);
    }
    const Candidate* a = select_best(other, o, preferred);
    if (!a) continue;
    bool dup = false;
    for (const auto& x : alts) dup = dup || config_key(x.config) == config_key(a->config);
    if (!dup) alts.push_back(*a);
  }
  std::sort(alts.begin(), alts.end(),
            [&](const Candidate& x, const Candidate& y) { return primary(x, o) < primary(y, o); });
  res.alternatives = std::move(alts);
}

}  // namespace

// ---------------------------------------------------------------------------------------------


void check_request(const Request& r, int64_t N) {
  if (!(r.headroom >= 0.0 && r.headroom < 0.9))
    throw Error("--headroom", format_number(r.headroom), "is out of range", "a share of HBM capacity in [0, 0.9), e.g. 0.05");
  if (r.min_budget < 1) throw Error("--min-budget", std::to_string(r.min_budget), "must be positive", "e.g. 64");
  if (r.min_budget_page_tokens < 1)
    throw Error("--min-budget", std::to_string(r.min_budget), "is counted in pages of a non-positive size",
                "pages of 128 tokens (or of --page)");
  if (r.max_step_s < 0 || !std::isfinite(r.max_step_s))
    throw Error("--max-step-time", format_number(r.max_step_s), "must be a positive duration", "e.g. 1h, 30m or 900s");
  if (r.min_tokens_per_s < 0 || !std::isfinite(r.min_tokens_per_s))
    throw Error("--min-tokens-per-s", format_number(r.min_tokens_per_s), "must be positive", "e.g. 1000");
  if (N <= 0) throw Error("--context", std::to_string(N), "must be positive", "e.g. 4M, 128K or 100000");
  const step::Config& b = r.scenario.config;
  if (b.gpus != 1 && b.gpus != 2 && b.gpus != 4 && b.gpus != 8)
    throw Error("--gpus", std::to_string(b.gpus), "is not a supported tensor-parallel degree", "1, 2, 4 or 8");
  const Space sp = make_space(r, N);
  if (fixed(r, "budget") && b.page_budget <= 0)
    throw Error("--budget", std::to_string(b.page_budget), "must be positive", "pages per query page, e.g. 64");
  if (!sp.standard) {
    for (int64_t x : {b.chunk_tokens, b.page_tokens, b.resident_layers})
      if (x <= 0) throw Error("config", "", "chunk, page and resident layers must be positive");
    if (fixed(r, "chunk") && fixed(r, "page") && b.page_tokens > b.chunk_tokens)
      throw Error("--page", std::to_string(b.page_tokens),
                  "page is larger than the chunk (" + std::to_string(b.chunk_tokens) + ")", "page <= chunk");
    int64_t smallest_page = 0;
    for (int64_t p : sp.pages)
      if (!chunks_for_page(sp, p).empty()) smallest_page = smallest_page ? std::min(smallest_page, p) : p;
    if (smallest_page == 0) {
      if (fixed(r, "chunk"))
        throw Error("--chunk", std::to_string(b.chunk_tokens),
                    fixed(r, "page") ? "is not a multiple of the page (" + std::to_string(b.page_tokens) + ")"
                                     : "is not a multiple of any page the planner tries (64, 128, 256)",
                    "choose a chunk that is a multiple of the page, e.g. 4096");
      throw Error("--page", std::to_string(b.page_tokens), "is larger than every chunk the planner tries (512..32K)",
                  "a page of 64, 128 or 256 tokens, or give --chunk too");
    }
    const bool may_sparse = !fixed(r, "attention") || b.attention == step::Attention::sparse;
    if (fixed(r, "budget") && may_sparse) check_budget_within_context(b.page_budget, N, smallest_page);
  }
  // Everything else (dtypes, heads divisible by the GPUs, selection rule): the simulator's own
  // validation of one representative configuration.
  step::Config rep = b;
  rep.context_tokens = N;
  if (!sp.standard) {
    rep.page_tokens = sp.pages.front();
    for (int64_t p : sp.pages)
      if (!chunks_for_page(sp, p).empty()) {
        rep.page_tokens = p;
        break;
      }
    rep.chunk_tokens = chunks_for_page(sp, rep.page_tokens).front();
    if (rep.page_budget <= 0) rep.page_budget = kDefaultMinBudget;
  }
  step::validate(rep, r.scenario.model);
}

const Candidate* select_best(const std::vector<Candidate>& cands, Objective o, const step::Config* preferred) {
  if (o == Objective::context) o = Objective::time;
  if (cands.empty()) return nullptr;
  // 1. Within the tie band of the objective ...
  double best = std::numeric_limits<double>::infinity();
  for (const auto& k : cands) best = std::min(best, primary(k, o));
  std::vector<const Candidate*> band;
  for (const auto& k : cands)
    if (primary(k, o) <= best * (1.0 + kTieTolerance)) band.push_back(&k);
  // 2. ... exact attention, the largest budget, the widest KV-gradient accumulator ...
  auto top = exactness(band.front()->config);
  for (const Candidate* k : band) top = std::min(top, exactness(k->config));
  std::erase_if(band, [&](const Candidate* k) { return exactness(k->config) != top; });
  // 3. ... then, within the tie band of the other metric, the fewest changes from the starting
  // configuration (defaults are kept unless changing them matters), then the other metric. The
  // logits tiling is left out: the fused loss is smaller and faster, there is no default to keep.
  double sec = std::numeric_limits<double>::infinity();
  for (const Candidate* k : band) sec = std::min(sec, secondary(*k, o));
  auto distance = [&](const Candidate& c) {
    if (!preferred) return 0;
    const step::Config& a = c.config;
    const step::Config& b = *preferred;
    return int(a.chunk_tokens != b.chunk_tokens) + int(a.page_tokens != b.page_tokens) +
           int(a.resident_layers != b.resident_layers) + int(a.param_grad_dtype != b.param_grad_dtype) +
           int(a.optimizer != b.optimizer) + int(a.checkpointing != b.checkpointing) +
           int(a.kept_layers != b.kept_layers);
  };
  const Candidate* pick = nullptr;
  for (const Candidate* k : band) {
    if (secondary(*k, o) > sec * (1.0 + kTieTolerance)) continue;
    if (!pick || std::make_tuple(distance(*k), tie_key(*k, o)) < std::make_tuple(distance(*pick), tie_key(*pick, o)))
      pick = k;
  }
  // 4. The tie bands may have kept a plan that another is strictly better than (no larger, no
  // slower, as exact): move to the best such until none is left, so the pick is on the frontier.
  for (bool moved = true; moved;) {
    moved = false;
    const Candidate* better = nullptr;
    for (const auto& k : cands)
      if (dominated_by(*pick, k) &&
          (!better || std::make_tuple(primary(k, o), secondary(k, o), tie_key(k, o)) <
                          std::make_tuple(primary(*better, o), secondary(*better, o), tie_key(*better, o))))
        better = &k;
    if (better) {
      pick = better;
      moved = true;
    }
  }
  return pick;
}

bool dominated_by(const Candidate& a, const Candidate& b) {
  if (!at_least_as_exact(b.config, a.config)) return false;
  const int64_t ma = a.summary.peak_device_bytes, mb = b.summary.peak_device_bytes;
  const double ta = a.summary.step_s, tb = b.summary.step_s;
  if (mb > ma || tb > ta) return false;
  return mb < ma || tb < ta || (exactness(b.config) < exactness(a.config));
}

std::vector<Candidate> pareto_frontier(const std::vector<Candidate>& cands, const Candidate* chosen) {
  std::vector<const Candidate*> v;
  for (const auto& k : cands) v.push_back(&k);
  std::sort(v.begin(), v.end(), [](const Candidate* a, const Candidate* b) {
    return std::make_tuple(a->summary.peak_device_bytes, a->summary.step_s, tie_key(*a, Objective::time)) <
           std::make_tuple(b->summary.peak_device_bytes, b->summary.step_s, tie_key(*b, Objective::time));
  });
  // Per exactness class, the 2-D frontier (memory ascending, time strictly falling); a point then
  // stays when no point of an at-least-as-exact class dominates it.
  std::map<decltype(exactness(step::Config{})), std::vector<const Candidate*>> by_class;
  for (const Candidate* k : v) {
    auto& f = by_class[exactness(k->config)];
    if (f.empty() || k->summary.step_s < f.back()->summary.step_s) {
      f.push_back(k);
    } else if (chosen && k->summary.peak_device_bytes == f.back()->summary.peak_device_bytes &&
               k->summary.step_s == f.back()->summary.step_s && k->config.to_json() == chosen->config.to_json()) {
      f.back() = k;  // an exact twin of the chosen plan gives its place to it
    }
  }
  std::vector<const Candidate*> pts;
  for (const auto& [cls, f] : by_class)
    for (const Candidate* k : f) {
      bool dominated = false;
      for (const auto& [cls2, f2] : by_class)
        for (const Candidate* q : f2) dominated = dominated || (q != k && dominated_by(*k, *q));
      if (!dominated) pts.push_back(k);
    }
  std::sort(pts.begin(), pts.end(), [](const Candidate* a, const Candidate* b) {
    return std::make_tuple(a->summary.peak_device_bytes, a->summary.step_s, tie_key(*a, Objective::time)) <
           std::make_tuple(b->summary.peak_device_bytes, b->summary.step_s, tie_key(*b, Objective::time));
  });
  std::vector<Candidate> out;
  for (const Candidate* k : pts) out.push_back(*k);
  return out;
}

SearchResult search(const Request& r, int64_t N, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  check_request(r, N);
  SearchResult res;
  res.context_tokens = N;
  const step::Config& b = r.scenario.config;
  const bool attention_fixed = fixed(r, "attention");
  const bool dense = !attention_fixed || b.attention == step::Attention::dense;
  const bool sparse = attention_fixed ? b.attention == step::Attention::sparse : r.allow_sparse;
  Searcher s(r, N, o, res);
  bool done = s.run(dense, sparse, true);
  // Exact gradients first; sparse only when dense cannot reach the target (said loudly by callers).
  if (!done && res.feasible.empty() && !attention_fixed && !r.allow_sparse) {
    s.run(false, true, false);
    res.sparse_fallback = !res.feasible.empty();
  }
  s.complete_bands();
  s.complete_frontier();
  const Objective obj = r.objective == Objective::memory ? Objective::memory : Objective::time;
  if (const Candidate* best = o.first_fit ? (res.feasible.empty() ? nullptr : &res.feasible.front())
                                          : select_best(res.feasible, obj, &r.scenario.config))
    res.best = *best;
  if (!o.first_fit) fill_alternatives(res, obj, &r.scenario.config);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

namespace {
// Exact enough to show why a step just over a round limit fails ("3600.4 s", not "1h 00m").
std::string seconds_text(double s) {
  char b[48];
  std::snprintf(b, sizeof b, "%.1f s (%s)", s, format_duration_s(s).c_str());
  return b;
}
}  // namespace

MaxContext max_context(const Request& r0, step::Attention mode, int64_t cap) {
  const auto t0 = std::chrono::steady_clock::now();
  MaxContext mc;
  mc.attention = mode;
  if (fixed(r0, "attention") && r0.scenario.config.attention != mode) {
    mc.available = false;
    return mc;
  }
  Request r = r0;
  r.fixed.insert("attention");
  r.scenario.config.attention = mode;
  if (mode == step::Attention::sparse && !fixed(r, "budget") && r.scenario.config.page_budget <= 0)
    r.scenario.config.page_budget = r.min_budget;
  mc.step_tokens = fixed(r, "page") ? r.scenario.config.page_tokens : kPageLcm;
  const int64_t units_cap = std::max<int64_t>(1, cap / mc.step_tokens);
  SearchOptions probe;
  probe.first_fit = true;
  SearchResult last_fail;
  auto fits_at = [&](int64_t units) {
    SearchResult s = search(r, units * mc.step_tokens, probe);
    mc.evaluations += s.evaluations;
    if (!s.best) last_fail = std::move(s);
    return static_cast<bool>(s.best);
  };
  int64_t lo = 0, hi = 0;  // fits at lo (0: nothing), fails at hi
  if (!fits_at(1)) {
    hi = 1;
  } else if (fits_at(units_cap)) {
    lo = units_cap;
    mc.capped = true;
  } else {
    lo = 1;
    hi = units_cap;
    // Exponential probe from below first: the answer is usually far below the cap, and small
    // contexts are cheap to evaluate.
    for (int64_t u = 2; u < hi; u *= 2) {
      if (fits_at(u)) lo = u;
      else {
        hi = u;
        break;
      }
    }
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (fits_at(mid)) lo = mid;
      else hi = mid;
    }
  }
  mc.tokens = lo * mc.step_tokens;
  if (mc.capped) {
    mc.binding = simulator::Binding::search_cap;
    mc.binding_notes.push_back("fits at the search cap of " + format_tokens(mc.tokens) + " tokens");
  } else {
    // Failed probe at hi: what stops the context from growing further. With speed limits, a
    // context that still fits in memory is stopped by them: say which, with the fastest plan there.
    const int64_t next = hi * mc.step_tokens;
    std::optional<Candidate> fastest;
    if (r.max_step_s > 0 || r.min_tokens_per_s > 0) {
      Request unlimited = r;
      unlimited.max_step_s = 0;
      unlimited.min_tokens_per_s = 0;
      unlimited.objective = Objective::time;
      SearchResult s = search(unlimited, next);
      mc.evaluations += s.evaluations;
      fastest = s.best;
    }
    if (fastest) {
      const bool slow = r.max_step_s > 0 && fastest->summary.step_s > r.max_step_s;
      mc.binding = slow ? simulator::Binding::step_time_limit : simulator::Binding::throughput_limit;
      mc.speed_limited = true;
      mc.binding_notes.push_back(
          slow ? "the fastest plan that fits takes " + seconds_text(fastest->summary.step_s) + " per step, over the " +
                     seconds_text(r.max_step_s) + " limit (--max-step-time)"
               : "the fastest plan that fits reaches " + format_count(fastest->summary.tokens_per_s) +
                     " tokens/s, under the " + format_count(r.min_tokens_per_s) + " tokens/s floor (--min-tokens-per-s)");
    } else {
      if (last_fail.context_tokens != next) fits_at(hi);
      if (last_fail.closest) {
        mc.binding = last_fail.closest->usage.binding();
        mc.binding_notes = last_fail.closest->usage.violations();
      }
    }
  }
  if (mc.tokens > 0) {
    Request rp = r;
    if (rp.objective == Objective::context) rp.objective = Objective::time;
    SearchResult s = search(rp, mc.tokens);
    mc.evaluations += s.evaluations;
    mc.plan = s.best;
  }
  mc.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return mc;
}

// ---------------------------------------------------------------------------------------------

std::string describe_knobs(const step::Config& c, const models::ModelSpec& m) {
  std::string s;
  if (c.schedule == step::Schedule::standard) {
    s = "standard schedule, ";
  } else {
    s = "chunk " + format_tokens(c.chunk_tokens) + ", page " + std::to_string(c.page_tokens) + ", " +
        step::residency_text(c, m) + ", ";
  }
  s += step::attention_text(c) + ", " + step::dtypes_text(c) + ", " + step::logits_text(c) + ", optimizer " +
       step::to_string(c.optimizer) + ", " + step::checkpointing_text(c, m);
  if (const std::string p = step::parallelism_text(c); !p.empty()) s += ", " + p;
  return s;
}

std::string describe_difference(const step::Config& a, const step::Config& b, const models::ModelSpec& m) {
  std::vector<std::string> d;
  if (a.attention != b.attention || (b.attention == step::Attention::sparse && a.page_budget != b.page_budget))
    d.push_back(step::attention_text(b));
  if (a.chunk_tokens != b.chunk_tokens) d.push_back("chunk " + format_tokens(b.chunk_tokens));
  if (a.page_tokens != b.page_tokens) d.push_back("page " + std::to_string(b.page_tokens));
  if (a.resident_layers != b.resident_layers) d.push_back(step::residency_text(b, m));
  if (a.kv_grad_dtype != b.kv_grad_dtype) d.push_back(std::string("KV-grad ") + to_string(b.kv_grad_dtype));
  if (a.param_grad_dtype != b.param_grad_dtype) d.push_back(std::string("param-grad ") + to_string(b.param_grad_dtype));
  if (a.logits_chunk_tokens != b.logits_chunk_tokens) d.push_back(step::logits_text(b));
  if (a.optimizer != b.optimizer) d.push_back(std::string("optimizer ") + step::to_string(b.optimizer));
  if (a.shard_optimizer != b.shard_optimizer)
    d.push_back(b.shard_optimizer ? "optimizer state sharded over the replicas (ZeRO-1)"
                                  : "optimizer state replicated (no ZeRO-1)");
  if (a.checkpointing != b.checkpointing || a.kept_layers != b.kept_layers)
    d.push_back(step::checkpointing_text(b, m));
  if (a.gpus != b.gpus) d.push_back("tensor parallel x" + std::to_string(b.gpus));
  std::string s;
  for (const auto& x : d) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "same settings" : s;
}

void check_budget_within_context(int64_t budget, int64_t context_tokens, int64_t page_tokens) {
  const int64_t pages = ceil_div(context_tokens, page_tokens);
  if (budget > pages)
    throw Error("--budget", std::to_string(budget),
                "is larger than the context's " + std::to_string(pages) + " pages of " + std::to_string(page_tokens) +
                    " tokens",
                "a budget of at most " + std::to_string(pages) + " pages");
}

}  // namespace oomb::planner
