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
  simulator::Scenario as_run = s;
  as_run.config.peak_measure = simulator::PeakMeasure::allocated;
  const simulator::Summary p = simulator::evaluate(as_run);
  traces::Trace t;
  t.metadata.source = "cuda-cupti";
  Json measured = {{"backend", "cuda"},
                   {"kv_dtype", s.config.kv_dtype},
                   {"kv_grad_dtype", s.config.kv_grad_dtype},
                   {"param_dtype", s.config.param_dtype},
                   {"param_grad_dtype", s.config.param_grad_dtype},
                   {"activation_dtype", s.config.activation_dtype},
                   {"loss_dtype", s.config.loss_dtype},
                   {"steps", 1},
                   {"step_s", p.step_s},
                   {"peak_device_bytes", p.peak_device_bytes},
                   {"peak_host_bytes", p.peak_host_bytes}};
  t.metadata.extra = {{"schema", step::kRunRecordSchema},
                      {"model", s.model.id},
                      {"layers", s.model.layers},
                      {"config", s.config.to_json()},
                      {"measured", measured}};
  if (reserved) t.metadata.extra["cupti"] = {{"reserved_device_bytes", *reserved}, {"untagged", 0}};
  return t;
}

const ValidationTerm* term(const Validation& v, const std::string& name) {
  for (const auto& t : v.terms)
    if (t.name == name) return &t;
  return nullptr;
}

TEST(Validation, CudaReservedBytesAreABoundOnThePlansPeakPlusReserve) {
  simulator::Scenario s = testing::request("tiny", "h200").scenario;
  s.config.context_tokens = 2048;
  s.config.chunk_tokens = 512;
  s.config.page_tokens = 64;
  s.config.resident_layers = 1;
  simulator::Scenario as_run = s;
  as_run.config.peak_measure = simulator::PeakMeasure::allocated;
  const int64_t bound = simulator::evaluate(as_run).peak_device_bytes + s.gpu.reserved_bytes;
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

}  // namespace
}  // namespace oomb::planner
