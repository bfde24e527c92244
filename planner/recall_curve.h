#pragma once
// Budget-to-recall curves (oomb.recall/1): what share of the dense attention probability mass a
// sparse page budget keeps, measured by `oomb run --measure-recall` and collected by
// `oomb calibrate --recall`; `oomb plan --min-recall R --recall-curve F` turns one into the
// smallest page budget the search may choose.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"

namespace oomb::planner {

struct RecallPoint {
  int64_t budget = 0, page_tokens = 0;
  double mean_recall = 0, min_recall = 0;
  std::string source;  // the trace it came from (not written)
  int64_t context_tokens = 0, chunk_tokens = 0;  // of the run it was measured in
};

// Recall depends on the model's attention, the context (how many pages compete) and the chunk and
// page geometry: a curve records all four, and the planner uses it only for the same model and page
// size (another model only with --recall-curve-any), stating how far the context differs.
struct RecallCurve {
  std::string model;
  int64_t context_tokens = 0, chunk_tokens = 0, page_tokens = 0;
  std::vector<RecallPoint> points;  // strictly increasing budgets, one page size
  Json to_json() const;
};

// A point from a run trace's metadata.extra ({model, config, measured}); `where` names the trace.
// Error when the run was not sparse or measured no recall.
RecallPoint recall_point_from_run(const Json& extra, const std::string& where, std::string* model);
// Sorts by budget; Error (naming the offending source) on mixed models, contexts, chunks or page
// sizes, or a budget measured twice.
RecallCurve make_recall_curve(std::string model, std::vector<RecallPoint> points, const std::vector<std::string>& models);
RecallCurve recall_curve_from_json(const Json& j, const std::string& where);
RecallCurve load_recall_curve(const std::string& path);

// Mean recall at `budget`: piecewise linear between measured budgets, the largest budget's value at
// or above it, nullopt below the smallest measured budget.
std::optional<double> interpolate_recall(const RecallCurve& c, int64_t budget);
// Smallest budget B such that every budget >= B has interpolated mean recall >= min_recall (so a
// minimum budget is an exact restriction even where the measured curve dips). Error naming
// --min-recall when no budget reaches it.
int64_t min_budget_for_recall(const RecallCurve& c, double min_recall, const std::string& where);

}  // namespace oomb::planner
