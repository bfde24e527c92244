// The accuracy side of the sparse budget: recall of the dense attention mass per (chunk, layer)
// (EngineOptions::measure_recall) and the sparse-vs-dense gradient comparison (compare_with_dense).
#include <gtest/gtest.h>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

constexpr float kInitStd = 0.1f;  // non-uniform attention in a small model
constexpr int64_t kN = 64, kC = 16, kP = 4;  // 16 pages; the last chunk has 12 earlier pages

step::Config sparse_config(int64_t budget, int64_t resident = 8, const char* rule = "published") {
  auto c = test::small_config(kN, kC, kP, resident);
  c.attention = step::Attention::sparse;
  c.page_budget = budget;
  c.selection = rule;
  return c;
}

struct RecallRun {
  double loss = 0;
  Measured measured;
  DenseComparison cmp;
  traces::Trace trace;
};

RecallRun run(int64_t budget, int64_t resident = 8, const char* rule = "published", int64_t layers = 2) {
  const auto m = test::small_model(layers, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 11, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, kN);
  CpuBackend backend;
  EngineOptions o;
  o.measure_recall = true;
  o.record_trace = true;
  const step::Config c = sparse_config(budget, resident, rule);
  Engine e(backend, m, c, w, o);
  RecallRun r;
  r.loss = e.step(tokens).loss;
  r.measured = e.measured();
  r.cmp = compare_with_dense(backend, m, c, w, tokens, r.loss, e.gradients());
  r.trace = e.trace("test");
  return r;
}

TEST(Recall, BudgetCoveringAllPagesIsExactlyOne) {
  const RecallRun r = run(16);
  ASSERT_EQ(r.measured.recall.size(), static_cast<size_t>(4 * 2));  // every (chunk, layer)
  for (const auto& s : r.measured.recall) EXPECT_NEAR(s.recall, 1.0, 1e-6) << s.chunk << "/" << s.layer;
  EXPECT_NEAR(r.measured.mean_recall(), 1.0, 1e-6);
  EXPECT_NEAR(r.measured.min_recall(), 1.0, 1e-6);
  EXPECT_EQ(r.cmp.max_grad_rel_error, 0.0);
  EXPECT_EQ(r.cmp.loss_diff, 0.0);
}

TEST(Recall, SmallBudgetsAreBelowOneAndGrowWithTheBudget) {
  double last_mean = 0;
  std::vector<double> last_layer0(4, 0.0);
  for (int64_t b : {1, 2, 4, 8}) {
    const RecallRun r = run(b);
    const double mean = r.measured.mean_recall();
    EXPECT_GT(mean, 0.0) << "budget " << b;
    EXPECT_LT(mean, 1.0) << "budget " << b;
    EXPECT_GT(r.measured.min_recall(), 0.0);
    EXPECT_LT(r.measured.min_recall(), 1.0);
    EXPECT_GE(mean, last_mean) << "budget " << b;
    last_mean = mean;
    // Layer 0 sees the same queries and keys at every budget, and top-B sets are nested: per chunk
    // its recall cannot fall as B grows.
    for (const auto& s : r.measured.recall) {
      EXPECT_GT(s.recall, 0.0);
      EXPECT_LE(s.recall, 1.0 + 1e-12);
      if (s.layer != 0) continue;
      EXPECT_GE(s.recall, last_layer0[static_cast<size_t>(s.chunk)] - 1e-12) << "budget " << b << " chunk " << s.chunk;
      last_layer0[static_cast<size_t>(s.chunk)] = s.recall;
    }
    // Chunks with <= B earlier pages attend densely.
    for (const auto& s : r.measured.recall) {
      if (s.chunk * kC / kP <= b) {
        EXPECT_NEAR(s.recall, 1.0, 1e-12);
      }
    }
    // Dropping pages moves the gradient.
    EXPECT_GT(r.cmp.max_grad_rel_error, 0.0) << "budget " << b;
    EXPECT_FALSE(r.cmp.worst_tensor.empty());
  }
}

TEST(Recall, OffloadAndPerKvHeadSelectionsAreMeasured) {
  const RecallRun on = run(2, 8);
  const RecallRun off = run(2, 1);
  ASSERT_EQ(on.measured.recall.size(), off.measured.recall.size());
  for (size_t i = 0; i < on.measured.recall.size(); ++i)
    EXPECT_EQ(on.measured.recall[i].recall, off.measured.recall[i].recall);
  const RecallRun per_head = run(2, 8, "per-kv-head");
  EXPECT_GT(per_head.measured.mean_recall(), 0.0);
  EXPECT_LT(per_head.measured.mean_recall(), 1.0);
}

TEST(Recall, TraceCarriesTheSamples) {
  const RecallRun r = run(2);
  const Json& m = r.trace.metadata.extra["measured"];
  ASSERT_TRUE(m.contains("recall"));
  EXPECT_EQ(m["recall"].size(), r.measured.recall.size());
  EXPECT_DOUBLE_EQ(m["mean_recall"].get<double>(), r.measured.mean_recall());
  EXPECT_DOUBLE_EQ(m["min_recall"].get<double>(), r.measured.min_recall());
  EXPECT_TRUE(m["recall"][0].contains("chunk") && m["recall"][0].contains("layer"));
}

TEST(Recall, DenseAttentionIsRefused) {
  const auto m = test::small_model(1, 2, 1, 8, 16, false, false);
  const Weights w = random_weights(m, 1, kInitStd);
  CpuBackend backend;
  EngineOptions o;
  o.measure_recall = true;
  try {
    Engine e(backend, m, test::small_config(kN, kC, kP, 8), w, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--measure-recall"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oomb::executor
