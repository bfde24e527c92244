#include "planner/recall_curve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/format.h"
#include "step/run_record.h"

namespace oomb::planner {


Json RecallCurve::to_json() const {
  Json pts = Json::array();
  for (const auto& p : points)
    pts.push_back({{"budget", p.budget}, {"page_tokens", p.page_tokens}, {"mean_recall", p.mean_recall},
                   {"min_recall", p.min_recall}});
  return {{"schema", "oomb.recall/1"}, {"model", model},          {"context_tokens", context_tokens},
          {"chunk_tokens", chunk_tokens},  {"page_tokens", page_tokens}, {"points", pts}};
}

RecallPoint recall_point_from_run(const Json& extra, const std::string& where, std::string* model) {
  step::RunRecord run;
  try {
    run = step::run_record_from_json(extra, where);
  } catch (const Error& e) {
    throw Error(e.where(), e.key(), e.problem(), "record one with oomb run --attention sparse --measure-recall --trace FILE");
  }
  if (run.config.attention != step::Attention::sparse)
    throw Error(where, "attention", "was a dense run: recall is measured for sparse attention",
                "record it with oomb run --attention sparse --measure-recall --trace FILE");
  if (!run.recorded_mean_recall || !run.recorded_min_recall)
    throw Error(where, "mean_recall", "the run did not measure recall",
                "record it with oomb run --attention sparse --measure-recall --trace FILE");
  RecallPoint p;
  p.budget = run.config.page_budget;
  p.page_tokens = run.config.page_tokens;
  p.context_tokens = run.config.context_tokens;
  p.chunk_tokens = run.config.chunk_tokens;
  p.mean_recall = run.mean_recall();
  p.min_recall = run.min_recall();
  p.source = where;
  if (model) *model = run.model;
  return p;
}

RecallCurve make_recall_curve(std::string model, std::vector<RecallPoint> points,
                              const std::vector<std::string>& models) {
  if (points.empty()) throw Error("--recall", "", "no traces given", "oomb calibrate --recall T1.json T2.json ...");
  for (size_t i = 0; i < points.size(); ++i) {
    if (i < models.size() && models[i] != model)
      throw Error(points[i].source, "model", "was measured on " + models[i] + ", the others on " + model,
                  "one curve per model");
    if (points[i].page_tokens != points.front().page_tokens)
      throw Error(points[i].source, "page_tokens",
                  "has pages of " + std::to_string(points[i].page_tokens) + " tokens, " + points.front().source +
                      " of " + std::to_string(points.front().page_tokens),
                  "budgets count pages: one curve per page size");
    if (points[i].context_tokens != points.front().context_tokens ||
        points[i].chunk_tokens != points.front().chunk_tokens)
      throw Error(points[i].source, "context_tokens",
                  "was measured at " + std::to_string(points[i].context_tokens) + " tokens in chunks of " +
                      std::to_string(points[i].chunk_tokens) + ", " + points.front().source + " at " +
                      std::to_string(points.front().context_tokens) + " in chunks of " +
                      std::to_string(points.front().chunk_tokens),
                  "recall depends on both: one curve per context and chunk");
  }
  std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.budget < b.budget; });
  for (size_t i = 1; i < points.size(); ++i)
    if (points[i].budget == points[i - 1].budget)
      throw Error(points[i].source, "page_budget",
                  "budget " + std::to_string(points[i].budget) + " is also measured by " + points[i - 1].source,
                  "one trace per budget");
  RecallCurve c;
  c.model = std::move(model);
  c.context_tokens = points.front().context_tokens;
  c.chunk_tokens = points.front().chunk_tokens;
  c.page_tokens = points.front().page_tokens;
  c.points = std::move(points);
  return c;
}

RecallCurve recall_curve_from_json(const Json& j, const std::string& where) {
  const JsonReader r(j, where);
  r.expect_schema("oomb.recall/1");
  RecallCurve c;
  c.context_tokens = r.i64_positive("context_tokens");
  c.chunk_tokens = r.i64_positive("chunk_tokens");
  c.page_tokens = r.i64_positive("page_tokens");
  std::vector<RecallPoint> pts;
  const Json& arr = r.array("points");
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string w = where + ": points[" + std::to_string(i) + "]";
    const JsonReader p(arr[i], w);
    RecallPoint x;
    x.budget = p.i64_positive("budget");
    x.page_tokens = p.i64_positive("page_tokens");
    x.mean_recall = p.f64("mean_recall");
    x.min_recall = p.f64("min_recall");
    if (x.mean_recall > 1 || x.min_recall > 1) p.fail("mean_recall", "recall is a share: at most 1");
    x.context_tokens = c.context_tokens;
    x.chunk_tokens = c.chunk_tokens;
    x.source = w;
    pts.push_back(x);
  }
  if (pts.empty()) r.fail("points", "is empty", "at least one measured budget");
  for (size_t i = 1; i < pts.size(); ++i)
    if (pts[i].budget <= pts[i - 1].budget)
      throw Error(pts[i].source, "budget", "budgets must increase strictly", "as oomb calibrate --recall writes them");
  for (const auto& p : pts)
    if (p.page_tokens != c.page_tokens)
      throw Error(p.source, "page_tokens", "differs from the curve's page_tokens (" + std::to_string(c.page_tokens) + ")",
                  "one curve per page size");
  c.model = r.str("model");
  c.points = std::move(pts);
  return c;
}

RecallCurve load_recall_curve(const std::string& path) { return recall_curve_from_json(read_json_file(path), path); }

std::optional<double> interpolate_recall(const RecallCurve& c, int64_t budget) {
  const auto& p = c.points;
  if (p.empty() || budget < p.front().budget) return std::nullopt;
  if (budget >= p.back().budget) return p.back().mean_recall;
  const auto hi = std::upper_bound(p.begin(), p.end(), budget, [](int64_t b, const auto& x) { return b < x.budget; });
  const auto lo = hi - 1;
  const double t = static_cast<double>(budget - lo->budget) / static_cast<double>(hi->budget - lo->budget);
  return lo->mean_recall + t * (hi->mean_recall - lo->mean_recall);
}

int64_t min_budget_for_recall(const RecallCurve& c, double min_recall, const std::string& where) {
  if (!(min_recall > 0 && min_recall <= 1))
    throw Error("--min-recall", format_fixed(min_recall, 4), "must be in (0, 1]", "e.g. 0.9");
  if (c.points.empty()) throw Error(where, "points", "is empty");
  double best = 0;
  for (const auto& p : c.points) best = std::max(best, p.mean_recall);
  if (c.points.back().mean_recall < min_recall)
    throw Error("--min-recall", format_fixed(min_recall, 4),
                "no budget reaches it: " + where + " measures mean recall " + format_fixed(c.points.back().mean_recall, 4) +
                    " at its largest budget " + std::to_string(c.points.back().budget) + " (best " + format_fixed(best, 4) + ")",
                "a lower --min-recall, or measure larger budgets");
  // Walk down the segments from the largest measured budget while both ends keep the recall (a
  // segment is linear, so then every budget in it does). In the first segment whose lower end
  // falls short, recall rises along it: bisect for its smallest budget that keeps it. O(points +
  // log budget): a curve measured at 2^40 pages is as quick as one at 64.
  const auto& p = c.points;
  for (size_t i = p.size() - 1; i > 0; --i) {
    if (p[i - 1].mean_recall >= min_recall) continue;
    int64_t lo = p[i - 1].budget, hi = p[i].budget;  // recall(lo) < R <= recall(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (*interpolate_recall(c, mid) >= min_recall) hi = mid;
      else lo = mid;
    }
    return hi;
  }
  return p.front().budget;
}

}  // namespace oomb::planner
