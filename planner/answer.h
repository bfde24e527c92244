#pragma once
// One planning request answered: `oomb plan`'s whole answer as data (the chosen plan, or the
// longest context that fits; alternatives, the memory/time frontier, the diagnosis when nothing
// fits, the standard-training baselines, the multi-GPU comparison, what sparse attention would buy,
// the recall of the chosen budget), its JSON and its text. The CLI parses flags into a PlanQuery,
// prints the answer and writes the plan; tests call answer() directly.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "planner/diagnosis.h"
#include "planner/plan.h"
#include "planner/recall_curve.h"
#include "planner/requests.h"
#include "planner/search.h"

namespace oomb::planner {

struct PlanQuery {
  Request request;            // the scenario (its context unset), fixed knobs, objective, limits
  int64_t context = 0;        // tokens to plan for (0 with max_context)
  bool max_context = false;   // find the longest context that fits instead
  bool pareto = false;        // also the memory / step-time frontier
  NodeGpus node;              // --gpus as a node (node_gpus)
  std::optional<int64_t> min_budget;  // --min-budget, in pages of the request's min_budget_page_tokens
  std::optional<double> min_recall;   // with recall_curve
  std::string recall_curve;           // file of a measured budget-to-recall curve ("" = none)
  bool recall_curve_any = false;      // a curve of another model is used anyway
};

struct PlanAnswer {
  PlanQuery query;  // as answered (the request's budget limits set from the curve)
  int64_t context = 0;  // planned for (the longest that fits with max_context)
  std::optional<Candidate> chosen;
  std::optional<Plan> plan;  // of the chosen candidate
  simulator::Scenario chosen_scenario;
  SearchResult search;  // the search the plan came from (alternatives, feasible set)
  std::vector<Candidate> pareto;
  std::optional<Diagnosis> diagnosis;
  std::optional<MaxContext> max_dense, max_sparse;
  bool sparse_fallback = false;
  std::optional<Candidate> sparse_hint;      // sparse attention would be more than 2x faster
  std::optional<Candidate> best_executable;  // the chosen plan is on paper: the best one oomb run follows
  std::optional<Candidate> on_paper;         // a plan to run: what the settings on paper would give
  std::optional<Comparison> comparison;      // multi-GPU
  std::vector<Baseline> baselines;           // standard training at this context
  // A LoRA request: full fine-tuning of the same model at this context (its best plan, or the
  // closest miss when none fits), what the adapters buy.
  std::optional<Candidate> full_finetune;
  bool full_finetune_fits = false;
  // ... and the chosen LoRA plan's own settings with every parameter trained (like for like).
  std::optional<Candidate> full_finetune_same;
  std::optional<RecallCurve> curve;
  int64_t recall_min_budget = 0;
  std::string warning;  // about the context (context_warning), "" = none

  Json to_json() const;
  std::string describe() const;  // the text `oomb plan` prints
};

// Throws oomb::Error naming the flag for a request that cannot be answered (a curve of another model,
// a page size or budget the curve contradicts).
PlanAnswer answer(const PlanQuery& q);

// "4M (4,194,304 tokens)".
std::string tokens_text(int64_t n);

}  // namespace oomb::planner
