// oomb run's path when the CUPTI collector cannot start (executor/runtime/profiler_fallback.h),
// without a GPU: a collector whose constructor throws leaves no collector and the reason; the run
// (an Engine on the CPU backend, host-timed like a cuda run without CUPTI) still produces its
// trace, which records the host timing and why, through its JSON file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/profiler_fallback.h"
#include "executor/runtime/tokens.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

// Stands in for cupti::CuptiCollector: its constructor throws as CUPTI does when it is refused
// (another profiler attached, no permission for the counters, an old driver).
struct ThrowingCollector {
  ThrowingCollector() { throw std::runtime_error("CUDA call failed: cuptiActivityEnable(k) -> CUPTI_ERROR_NOT_INITIALIZED"); }
};
struct WorkingCollector {
  int started = 1;
};

TEST(ProfilerFallback, ACollectorThatThrowsLeavesAHostTimedRunThatSaysWhy) {
  std::string failure;
  std::unique_ptr<ThrowingCollector> collector =
      start_or_fall_back([] { return std::make_unique<ThrowingCollector>(); }, &failure);
  EXPECT_EQ(collector, nullptr);
  EXPECT_NE(failure.find("CUPTI_ERROR_NOT_INITIALIZED"), std::string::npos) << failure;
  EXPECT_NE(fallback_message(failure).find("host-timed"), std::string::npos);
  EXPECT_NE(fallback_message(failure).find(failure), std::string::npos);

  // The run goes on: a host-timed step and its trace.
  const auto m = test::small_model(2, 2, 1, 8, 16, false, false, 31, 16);
  const Weights w = random_weights(m, 3, 0.02f);
  CpuBackend backend;
  EngineOptions o;
  o.record_trace = true;
  Engine e(backend, m, test::small_config(24, 8, 4, 2), w, o);
  const StepResult r = e.step(TokenSource::synthetic(m.vocab, 3).sequence(0, 24));
  EXPECT_TRUE(std::isfinite(r.loss));
  traces::Trace t = e.trace("oomb run --backend cuda --trace t.json");
  record_profiler_fallback(t, failure);
  const std::string path = ::testing::TempDir() + "profiler_fallback_trace.json";
  traces::write_trace(t, path);
  const traces::Trace back = traces::read_trace(path);
  std::remove(path.c_str());
  EXPECT_EQ(back.metadata.extra["trace_timing"], "host");
  EXPECT_EQ(back.metadata.extra["cupti_unavailable"], failure);
  EXPECT_EQ(back.metadata.extra["model"], m.id);  // the run's own provenance is kept
  EXPECT_FALSE(back.events.empty());
}

TEST(ProfilerFallback, ACollectorThatStartsIsReturnedAndNoFailureRecorded) {
  std::string failure;
  auto collector = start_or_fall_back([] { return std::make_unique<WorkingCollector>(); }, &failure);
  ASSERT_NE(collector, nullptr);
  EXPECT_EQ(collector->started, 1);
  EXPECT_TRUE(failure.empty());
}

}  // namespace
}  // namespace oomb::executor
