#pragma once
// The planner's search (DESIGN.md section 4): which knobs to try, which configurations fit, which
// one is best, how long a context fits at all, and the memory/time frontier.
//
// Every candidate is judged by the simulator's fast path (`simulator::evaluate`). Knobs the user
// fixed keep their value; the others range over the planner's search space:
//   chunk 512..32K (powers of two, multiple of the page), page 64/128/256, resident layers 1..4 and
//   all, KV-gradient fp32/bf16, parameter-gradient bf16/fp32, logits tiles 1K/4K fused or whole
//   chunk, recompute (checkpointing off, or on with the last k of L layers kept, k = 0..L-1),
//   optimizer placement (only with --optimizer auto), sparse page budget 16..1024 pages, judged
//   by attended tokens (budget x page).
// Time falls and memory grows with the kept layers, so each point of the other knobs is tried at
// full checkpointing and at the most kept layers that fit (checkpointing off, else a binary search
// over k), and the tie bands are completed by a binary search per point in them (search.cpp).
// The exhaustive search (the frontier) also judges every k between a point's ends, bisecting
// where no known point rules the stretch out: its frontier is complete over this space.
// The selection rule, selection memory, KV and parameter dtypes are never searched. Settings the
// executor cannot run yet (executable.h) are searched and labelled, never hidden.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "simulator/simulator.h"

namespace oomb::planner {

enum class Objective { time, memory, context };
const char* to_string(Objective o);
Objective objective_from_string(const std::string& s, const std::string& where);

// --max-context searches up to 16M x 4 tokens.
inline constexpr int64_t kMaxContextCap = int64_t{64} * 1048576;
// Candidates whose objective is within this share of the best are ties; ties go to exact
// attention, then larger budgets, then wider KV-gradient accumulators, then (within the same share
// of the other metric) to the fewest changes from the starting configuration.
inline constexpr double kTieTolerance = 0.01;
inline constexpr double kDefaultHeadroom = 0.05;
inline constexpr int64_t kDefaultMinBudget = 64;  // the published budget ...
inline constexpr int64_t kDefaultMinBudgetPage = 128;  // ... of the published page size

struct Request {
  simulator::Scenario scenario;  // specs and the starting config (fixed knobs hold the user's values)
  // Knobs fixed by the user, named as cli::ScenarioFlags::explicit_knobs() names them
  // ("chunk", "page", "budget", "resident_layers", "kv_grad_dtype", "param_grad_dtype",
  // "optimizer", "logits_chunk", "attention", "schedule", ...).
  std::set<std::string> fixed;
  Objective objective = Objective::time;
  double headroom = kDefaultHeadroom;  // share of HBM capacity kept free
  bool allow_sparse = false;           // sparse competes with dense (otherwise only when dense cannot fit)
  // Smallest sparse budget, counted in attended tokens: min_budget pages of min_budget_page_tokens
  // (the published 64 pages of 128 tokens = 8K tokens). Each page size gets the budget in its own
  // pages, so a smaller page never buys a smaller attended span.
  int64_t min_budget = kDefaultMinBudget;
  int64_t min_budget_page_tokens = kDefaultMinBudgetPage;
  int64_t sparse_page = 0;             // > 0: sparse candidates use only this page size (a recall curve's)
  bool optimizer_auto = false;         // AdamW state wanted; the planner places it (GPU or host)
  bool host_explicit = false;          // the host was chosen by the user (kept when suggesting GPUs)
  // Limits on a plan's speed (0 = none): max_context then finds the longest context whose best plan
  // keeps them.
  double max_step_s = 0;
  double min_tokens_per_s = 0;
  // A plan that is to be run (`oomb plan --out`): only configurations the executor follows
  // (planner::executable) are candidates.
  bool executable_only = false;
  int64_t min_budget_tokens() const { return min_budget * min_budget_page_tokens; }
};

// Throws oomb::Error for bad input: headroom outside [0, 0.9), min budget < 1, GPUs not 1/2/4/8 or
// not dividing the heads, a fixed budget larger than the context's pages, a fixed page larger than
// the fixed chunk or than every chunk tried, bad dtypes, zero sizes.
void check_request(const Request& r, int64_t context_tokens);

// The three resource limits of one evaluated configuration.
struct Usage {
  int64_t device_need_bytes = 0;   // every device buffer plus the GPU's runtime reserve
  int64_t device_limit_bytes = 0;  // HBM capacity x (1 - headroom)
  int64_t device_capacity_bytes = 0;
  int64_t pinned_need_bytes = 0;   // host-tier buffers that must be page-locked
  int64_t pinned_limit_bytes = 0;
  int64_t host_need_bytes = 0;     // all host-tier buffers
  int64_t host_limit_bytes = 0;
  bool device_ok() const { return device_need_bytes <= device_limit_bytes; }
  bool pinned_ok() const { return pinned_need_bytes <= pinned_limit_bytes; }
  bool host_ok() const { return host_need_bytes <= host_limit_bytes; }
  bool fits() const { return device_ok() && pinned_ok() && host_ok(); }
  double worst_ratio() const;           // need / limit of the tightest constraint
  simulator::Binding binding() const;   // the memory limit most exceeded (device, pinned host, host RAM)
  std::vector<std::string> violations() const;  // one line per failed limit, with the amounts
};
Usage usage_of(const simulator::Scenario& s, const simulator::Summary& sum, double headroom);

struct Candidate {
  step::Config config;
  simulator::Summary summary;
  Usage usage;
  bool fits() const { return summary.feasible && usage.fits(); }
  bool within(const Request& r) const {  // the request's speed limits
    return (r.max_step_s <= 0 || summary.step_s <= r.max_step_s) &&
           (r.min_tokens_per_s <= 0 || summary.tokens_per_s >= r.min_tokens_per_s);
  }
};

struct SearchOptions {
  bool exhaustive = false;  // every chunk of every group (the Pareto frontier needs them)
  bool first_fit = false;   // stop at the first configuration that fits (feasibility only)
};

struct SearchResult {
  int64_t context_tokens = 0;
  std::optional<Candidate> best;
  bool sparse_fallback = false;        // no dense plan fits: best is sparse (approximate gradients)
  // Of the target attention, when nothing fit: the least-over candidate, overall and per class
  // (offloading to the host, or all layers on the GPU), for the diagnosis.
  std::optional<Candidate> closest, closest_offload, closest_on_device;
  std::vector<Candidate> feasible;     // every fitting configuration evaluated
  std::vector<Candidate> alternatives; // per knob, the best fitting plan that differs from `best` in it
  int64_t evaluations = 0;
  double seconds = 0;
};

SearchResult search(const Request& r, int64_t context_tokens, const SearchOptions& o = {});

// Ranking of fitting candidates under an objective (context ranks as time).
// `preferred` (the starting configuration) breaks the last ties: the fewest knobs changed. The pick
// is never dominated (see `dominated_by`) by another candidate.
const Candidate* select_best(const std::vector<Candidate>& cands, Objective o,
                             const step::Config* preferred = nullptr);
// Gradient exactness, comparable: dense before sparse, then more attended tokens, then wider KV
// gradients. `b` dominates `a` when it is at least as exact, no larger and no slower, and strictly
// better in one of the three (so a bf16-gradient point never hides an fp32 one).
bool dominated_by(const Candidate& a, const Candidate& b);
// Non-dominated points over (peak device bytes, step time, exactness), by increasing memory; the
// frontier therefore spans KV-gradient dtypes (and budgets when sparse competes).
// chosen (optional): where points tie exactly in memory and time, the chosen plan is the one kept.
std::vector<Candidate> pareto_frontier(const std::vector<Candidate>& cands, const Candidate* chosen = nullptr);

struct MaxContext {
  step::Attention attention = step::Attention::dense;
  bool available = true;      // false: the user fixed the other attention mode
  int64_t tokens = 0;         // largest fitting context (0: not even one step fits)
  int64_t step_tokens = 0;    // granularity of the search (a multiple of every page tried)
  bool capped = false;        // reached the search cap; the true maximum may be larger
  std::optional<Candidate> plan;       // best plan at `tokens` (objective time unless memory)
  // What fails at tokens + step_tokens (a memory or a speed limit), or search_cap; none when no
  // configuration was evaluated there.
  std::optional<simulator::Binding> binding;
  std::string binding_text() const { return binding ? simulator::to_string(*binding) : ""; }
  std::vector<std::string> binding_notes;
  bool speed_limited = false;          // stopped by max_step_s / min_tokens_per_s, not by memory
  int64_t evaluations = 0;
  double seconds = 0;
};
MaxContext max_context(const Request& r, step::Attention mode, int64_t cap = kMaxContextCap);

// A configuration's knobs in one line, and what differs between two (CLI, diagnosis), in the words of
// step/describe.h.
std::string describe_knobs(const step::Config& c, const models::ModelSpec& m);
std::string describe_difference(const step::Config& from, const step::Config& to, const models::ModelSpec& m);

// Error naming --budget when `budget` pages per query page is more than the context holds (every
// earlier page selected: sparse attention priced as dense under another name). plan and simulate.
void check_budget_within_context(int64_t budget, int64_t context_tokens, int64_t page_tokens);

}  // namespace oomb::planner
