// Budget-to-recall curves: interpolation, the minimum budget a --min-recall implies, the sparse page
// restriction in the search, and clear errors for bad curves and traces.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "planner/recall_curve.h"
#include "planner_test_util.h"

namespace oomb::planner {
namespace {

RecallCurve curve(std::vector<std::pair<int64_t, double>> pts, int64_t page = 64) {
  RecallCurve c;
  c.model = "tiny";
  c.context_tokens = 4096;
  c.chunk_tokens = 512;
  c.page_tokens = page;
  for (auto [b, r] : pts) c.points.push_back({b, page, r, r / 2, std::to_string(b) + ".json"});
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RecallCurve, PiecewiseLinearHeldAboveRejectedBelow) {
  const RecallCurve c = curve({{4, 0.4}, {8, 0.5}, {16, 0.7}, {32, 0.9}});
  EXPECT_FALSE(interpolate_recall(c, 3).has_value());
  EXPECT_DOUBLE_EQ(*interpolate_recall(c, 4), 0.4);
  EXPECT_DOUBLE_EQ(*interpolate_recall(c, 6), 0.45);
  EXPECT_DOUBLE_EQ(*interpolate_recall(c, 12), 0.6);
  EXPECT_DOUBLE_EQ(*interpolate_recall(c, 32), 0.9);
  EXPECT_DOUBLE_EQ(*interpolate_recall(c, 1000), 0.9);
}

TEST(RecallCurve, MinBudget) {
  const RecallCurve c = curve({{4, 0.4}, {8, 0.5}, {16, 0.7}, {32, 0.9}});
  EXPECT_EQ(min_budget_for_recall(c, 0.6, "c.json"), 12);
  EXPECT_EQ(min_budget_for_recall(c, 0.61, "c.json"), 13);  // 0.6125 at 13
  EXPECT_EQ(min_budget_for_recall(c, 0.4, "c.json"), 4);     // never below the smallest measured budget
  EXPECT_EQ(min_budget_for_recall(c, 0.1, "c.json"), 4);
  EXPECT_EQ(min_budget_for_recall(c, 0.9, "c.json"), 32);
  for (int64_t b = 13; b < 200; ++b) EXPECT_GE(*interpolate_recall(c, b), 0.61);
  EXPECT_NE(error_of([&] { min_budget_for_recall(c, 0.95, "c.json"); }).find("--min-recall"), std::string::npos);
  EXPECT_NE(error_of([&] { min_budget_for_recall(c, 0.0, "c.json"); }).find("--min-recall"), std::string::npos);
  EXPECT_NE(error_of([&] { min_budget_for_recall(c, 1.5, "c.json"); }).find("--min-recall"), std::string::npos);
  // A measured dip: the minimum lies above the dip, so every budget >= it keeps the recall.
  const RecallCurve dip = curve({{4, 0.7}, {8, 0.5}, {16, 0.8}});
  EXPECT_EQ(min_budget_for_recall(dip, 0.6, "d.json"), 11);  // 0.5 + 0.3 * 3 / 8
}

// Issue #13: the minimum budget used to be found by stepping down one budget at a time, which never
// finished for a curve measured at 2^40 pages. It must agree with that definition (checked here by
// brute force on small random curves, seed fixed) and answer at once for a far point.
TEST(RecallCurve, MinBudgetMatchesTheStepDownDefinitionAndIsFast) {
  uint64_t state = 13;
  auto next = [&] { return (state = state * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::pair<int64_t, double>> pts;
    int64_t b = 1 + static_cast<int64_t>(next() % 8);
    const int n = 1 + static_cast<int>(next() % 5);
    for (int i = 0; i < n; ++i) {
      pts.push_back({b, static_cast<double>(next() % 1000) / 1000.0});
      b += 1 + static_cast<int64_t>(next() % 40);
    }
    pts.back().second = 1.0;  // some budget always reaches the recall
    const RecallCurve c = curve(pts);
    for (double r : {0.05, 0.3, 0.5, 0.77, 0.999, 1.0}) {
      int64_t expect = c.points.back().budget;
      while (expect > c.points.front().budget && *interpolate_recall(c, expect - 1) >= r) --expect;
      EXPECT_EQ(min_budget_for_recall(c, r, "c.json"), expect) << "trial " << trial << ", recall " << r;
    }
  }
  const RecallCurve far = curve({{4, 0.3}, {int64_t{1} << 40, 0.9}});
  const int64_t got = min_budget_for_recall(far, 0.5, "far.json");
  EXPECT_GE(*interpolate_recall(far, got), 0.5);
  EXPECT_LT(*interpolate_recall(far, got - 1), 0.5);
}

TEST(RecallCurve, JsonRoundTripAndBadFiles) {
  const RecallCurve c = curve({{4, 0.4}, {16, 0.7}});
  const RecallCurve back = recall_curve_from_json(c.to_json(), "c.json");
  ASSERT_EQ(back.points.size(), 2u);
  EXPECT_EQ(back.model, "tiny");
  EXPECT_EQ(back.context_tokens, 4096);
  EXPECT_EQ(back.chunk_tokens, 512);
  EXPECT_EQ(back.page_tokens, 64);
  EXPECT_EQ(back.points[1].budget, 16);
  EXPECT_DOUBLE_EQ(back.points[1].mean_recall, 0.7);

  Json j = c.to_json();
  j["schema"] = "oomb.plan/1";
  EXPECT_NE(error_of([&] { recall_curve_from_json(j, "bad.json"); }).find("bad.json"), std::string::npos);
  j = c.to_json();
  j["points"] = Json::array();
  EXPECT_NE(error_of([&] { recall_curve_from_json(j, "empty.json"); }).find("empty.json"), std::string::npos);
  j = c.to_json();
  std::swap(j["points"][0], j["points"][1]);
  EXPECT_NE(error_of([&] { recall_curve_from_json(j, "order.json"); }).find("order.json"), std::string::npos);
  j = c.to_json();
  j["points"][0]["mean_recall"] = 1.5;
  EXPECT_NE(error_of([&] { recall_curve_from_json(j, "share.json"); }).find("share.json"), std::string::npos);
  j = c.to_json();
  j["points"][1]["page_tokens"] = 128;
  EXPECT_NE(error_of([&] { recall_curve_from_json(j, "page.json"); }).find("page.json"), std::string::npos);
  // A curve that does not say where it was measured (model, context, chunk, page) is refused.
  for (const char* key : {"model", "context_tokens", "chunk_tokens", "page_tokens"}) {
    j = c.to_json();
    j.erase(key);
    EXPECT_NE(error_of([&] { recall_curve_from_json(j, "old.json"); }).find(key), std::string::npos) << key;
  }

  const auto dir = std::filesystem::temp_directory_path() / "oomb_recall_curve_test";
  std::filesystem::create_directories(dir);
  const std::string trunc = (dir / "trunc.json").string();
  std::ofstream(trunc) << c.to_json().dump().substr(0, 30);
  EXPECT_NE(error_of([&] { load_recall_curve(trunc); }).find("trunc.json"), std::string::npos);
  EXPECT_NE(error_of([&] { load_recall_curve((dir / "missing.json").string()); }).find("missing.json"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

Json run_extra(const std::string& attention, bool recall, int64_t budget = 8, int64_t page = 64,
               int64_t context = 4096, int64_t chunk = 512) {
  Json measured = {{"loss", 1.0}};
  if (recall) {
    measured["mean_recall"] = 0.5;
    measured["min_recall"] = 0.25;
  }
  step::Config c;  // a run's whole configuration, as oomb run records it
  c.attention = step::attention_from_string(attention, "test");
  c.page_budget = budget;
  c.page_tokens = page;
  c.context_tokens = context;
  c.chunk_tokens = chunk;
  return {{"model", "tiny"}, {"config", c.to_json()}, {"measured", measured}};
}

TEST(RecallCurve, FromRunTraces) {
  std::string model;
  const RecallPoint p = recall_point_from_run(run_extra("sparse", true), "t.json", &model);
  EXPECT_EQ(model, "tiny");
  EXPECT_EQ(p.budget, 8);
  EXPECT_DOUBLE_EQ(p.mean_recall, 0.5);
  EXPECT_DOUBLE_EQ(p.min_recall, 0.25);
  EXPECT_NE(error_of([&] { recall_point_from_run(run_extra("dense", true), "dense.json", &model); }).find("dense.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { recall_point_from_run(run_extra("sparse", false), "none.json", &model); }).find("none.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { recall_point_from_run(Json::object(), "sim.json", &model); }).find("sim.json"),
            std::string::npos);

  auto pt = [&](int64_t b, int64_t page, const char* src) {
    RecallPoint x = recall_point_from_run(run_extra("sparse", true, b, page), src, nullptr);
    return x;
  };
  const RecallCurve c = make_recall_curve("tiny", {pt(16, 64, "a"), pt(4, 64, "b"), pt(8, 64, "c")}, {"tiny", "tiny", "tiny"});
  ASSERT_EQ(c.points.size(), 3u);
  EXPECT_EQ(c.context_tokens, 4096);
  EXPECT_EQ(c.chunk_tokens, 512);
  EXPECT_EQ(c.page_tokens, 64);
  EXPECT_EQ(c.points[0].budget, 4);
  EXPECT_EQ(c.points[2].budget, 16);
  EXPECT_NE(error_of([&] { make_recall_curve("tiny", {pt(4, 64, "a"), pt(4, 64, "dup.json")}, {}); }).find("dup.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_recall_curve("tiny", {pt(4, 64, "a"), pt(8, 128, "p128.json")}, {}); })
                .find("p128.json"),
            std::string::npos);
  // Recall depends on the context and the chunk: one curve per both.
  const RecallPoint longer = recall_point_from_run(run_extra("sparse", true, 8, 64, 8192), "ctx.json", nullptr);
  EXPECT_NE(error_of([&] { make_recall_curve("tiny", {pt(4, 64, "a"), longer}, {}); }).find("ctx.json"),
            std::string::npos);
  const RecallPoint chunked = recall_point_from_run(run_extra("sparse", true, 8, 64, 4096, 1024), "chunk.json", nullptr);
  EXPECT_NE(error_of([&] { make_recall_curve("tiny", {pt(4, 64, "a"), chunked}, {}); }).find("chunk.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_recall_curve("tiny", {pt(4, 64, "a"), pt(8, 64, "m.json")}, {"tiny", "other"}); })
                .find("m.json"),
            std::string::npos);
}

TEST(RecallCurve, SearchKeepsSparseCandidatesAtTheMinimumBudgetAndCurvePage) {
  Request r = testing::request("qwen2.5-7b", "h200", "", {"attention"});
  r.scenario.config.attention = step::Attention::sparse;
  r.min_budget = min_budget_for_recall(curve({{16, 0.5}, {64, 0.8}, {256, 0.95}}, 128), 0.9, "c.json");
  EXPECT_EQ(r.min_budget, 192);
  r.sparse_page = 128;
  const SearchResult res = search(r, 1048576);
  ASSERT_TRUE(res.best.has_value());
  EXPECT_GE(res.best->config.page_budget, 192);
  for (const auto& c : res.feasible) {
    EXPECT_EQ(c.config.page_tokens, 128);
    EXPECT_GE(c.config.page_budget, 192);
  }
}

}  // namespace
}  // namespace oomb::planner
