// validate_run (planner/validation.h) on hand-made run records: the CUDA reserved-bytes bound.
#include <gtest/gtest.h>

#include "planner/validation.h"
#include "planner_test_util.h"
#include "step/run_record.h"

namespace oomb::planner {
namespace {

// A CUPTI-timed cuda run of `s` that measured exactly the prediction, CUDA having reserved
// `reserved` device bytes (nullopt: no CUPTI memory records).
traces::Trace cuda_run(const simulator::Scenario& s, std::optional<int64_t> reserved) {
  traces::Trace t = testing::cuda_record_as_predicted(s);
  if (reserved) t.metadata.extra["cupti"] = {{"reserved_device_bytes", *reserved}, {"untagged", 0}};
  return t;
}

// tiny at 2K: chunks of 512, pages of 64, one resident layer (so its pages are offloaded).
simulator::Scenario tiny_2k_offload() {
  simulator::Scenario s = testing::request("tiny", "h200").scenario;
  s.config.context_tokens = 2048;
  s.config.chunk_tokens = 512;
  s.config.page_tokens = 64;
  s.config.resident_layers = 1;
  return s;
}

using testing::term;

TEST(Validation, CudaReservedBytesAreABoundOnThePlansPeakPlusReserve) {
  simulator::Scenario s = tiny_2k_offload();
  simulator::Scenario as_run = s;
  as_run.config.peak_measure = simulator::PeakMeasure::allocated;
  // The plan's reserved peak: its buffers, the arena block's slack beyond them (step/allocator.h:
  // the CUDA run reserves that block up front) and the runtime reserve.
  ASSERT_EQ(s.config.peak_measure, simulator::PeakMeasure::reserved);
  const int64_t bound = simulator::evaluate(s).peak_device_bytes;
  EXPECT_GT(bound, simulator::evaluate(as_run).peak_device_bytes + s.gpu.reserved_bytes);
  auto judge = [&](std::optional<int64_t> reserved) {
    const traces::Trace t = cuda_run(s, reserved);
    ValidationRequest r;
    r.trace = &t;
    r.trace_where = "t.json";
    r.scenario = s;
    r.plan_where = "p.json";
    return validate_run(r);
  };
  {
    const Validation v = judge(bound);
    const ValidationTerm* t = term(v, "reserved_device_bytes");
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(t->judged);
    EXPECT_TRUE(t->at_most);
    EXPECT_DOUBLE_EQ(t->predicted, static_cast<double>(bound));
    EXPECT_EQ(t->ok(), std::optional<bool>(true));
  }
  EXPECT_EQ(term(judge(bound / 2), "reserved_device_bytes")->ok(), std::optional<bool>(true));  // a bound
  {
    const Validation v = judge(bound + 1);  // one byte the plan does not hold the GPU for
    EXPECT_EQ(term(v, "reserved_device_bytes")->ok(), std::optional<bool>(false));
    EXPECT_FALSE(v.ok);
  }
  EXPECT_EQ(term(judge(std::nullopt), "reserved_device_bytes"), nullptr);  // no CUPTI memory records
}

// The stage times are judged over the step that step_s is (the run's fastest timed step), not as
// means over every step: a slow first step must not inflate the stages of the fastest one.
TEST(Validation, StageTimesAreTheFastestStepsLikeStepS) {
  simulator::Scenario s = tiny_2k_offload();
  traces::Trace t = cuda_run(s, std::nullopt);
  // Two timed steps: a slow one (stage 1: 3 s, stage 2: 5 s of a 9 s step) and the fastest (stage
  // 1: 0.4 s, stage 2: 1.1 s of a 1.5 s step, the record's step_s).
  t.metadata.extra["measured"]["steps"] = 2;
  t.metadata.extra["measured"]["step_s"] = 1.5;
  t.metadata.extra["measured"]["mean_step_s"] = 5.25;
  const int64_t s1 = 1'000'000'000;  // ns
  auto ev = [&](traces::EventKind k, const char* name, int stage, double b, double e) {
    traces::Event x;
    x.kind = k;
    x.name = name;
    x.stream = "compute";
    x.stage = stage;
    x.op = stage > 0 ? "layer_fwd" : "";
    x.start_ns = static_cast<int64_t>(b * s1);
    x.end_ns = static_cast<int64_t>(e * s1);
    t.events.push_back(x);
  };
  ev(traces::EventKind::phase, traces::kStepPhase, -1, 0.0, 9.0);
  ev(traces::EventKind::compute, "stage1", 1, 0.5, 3.5);
  ev(traces::EventKind::compute, "stage2", 2, 3.5, 8.5);
  ev(traces::EventKind::phase, traces::kStepPhase, -1, 10.0, 11.5);
  ev(traces::EventKind::compute, "stage1", 1, 10.0, 10.4);
  ev(traces::EventKind::compute, "stage2", 2, 10.4, 11.5);
  ValidationRequest r;
  r.trace = &t;
  r.trace_where = "t.json";
  r.scenario = s;
  r.plan_where = "p.json";
  const Validation v = validate_run(r);
  const ValidationTerm* step = term(v, "step_s");
  const ValidationTerm* st1 = term(v, "time:stage1");
  const ValidationTerm* st2 = term(v, "time:stage2");
  ASSERT_TRUE(step && st1 && st2);
  ASSERT_TRUE(step->measured && st1->measured && st2->measured);
  EXPECT_DOUBLE_EQ(*step->measured, 1.5);
  EXPECT_NEAR(*st1->measured, 0.4, 1e-9);
  EXPECT_NEAR(*st2->measured, 1.1, 1e-9);
  EXPECT_LE(*st1->measured + *st2->measured, *step->measured + 1e-9);  // the stages fit in their step
}

}  // namespace
}  // namespace oomb::planner
