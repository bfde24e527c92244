// Device faults on the CPU backend's test doubles (CpuBackendOptions): after a sticky error every
// free throws, and destructors log instead of letting it terminate the program; a fault inside a
// step is attributed to the (stage, chunk, layer, op) it was issued under, and what earlier steps
// measured survives it.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/op_tagger.h"
#include "executor/runtime/tokens.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

TEST(Faults, DestructorsLogInsteadOfThrowingAfterAStickyError) {
  const auto m = test::small_model(3, 2, 1, 8, 16, false, false, 31, 16);
  const step::Config c = test::small_config(64, 16, 8, 1);
  const Weights w = random_weights(m, 1, 0.02f);
  const auto tokens = TokenSource::synthetic(m.vocab, 1).sequence(0, c.context_tokens);
  // In a child process: on a throwing destructor std::terminate aborts it.
  EXPECT_EXIT(
      {
        CpuBackendOptions broken;
        broken.deallocate_throws = true;
        CpuBackend b(broken);
        Measured kept;
        {
          Engine e(b, m, c, w);
          e.step(tokens);
          kept = e.measured();
        }
        std::fprintf(stderr, "measured h2d %lld bytes\n", static_cast<long long>(kept.h2d_bytes));
        std::exit(kept.h2d_bytes > 0 && kept.steps == 1 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "failed: cpu backend: injected sticky error in deallocate(.|\n)*measured h2d");
}

TEST(Faults, AFaultInAStepNamesItsPassAndKeepsWhatEarlierStepsMeasured) {
  const auto m = test::small_model(3, 2, 1, 8, 16, false, false, 31, 16);
  const step::Config c = test::small_config(64, 16, 8, 1);  // dense offload: copies every pass
  const Weights w = random_weights(m, 1, 0.02f);
  const auto tokens = TokenSource::synthetic(m.vocab, 1).sequence(0, c.context_tokens);
  // A dense step's copies are one region each (overlap_test.cpp), plus its end-of-step fence.
  int64_t per_step = 0;
  {
    CpuBackend b;
    Engine e(b, m, c, w);
    e.step(tokens);
    per_step = e.measured().copy_regions + 1;
  }
  // The first copy of the second step fails: the write-back of stage 1, chunk 0, layer 0's KV.
  CpuBackendOptions faulty;
  faulty.fail_copy_after = per_step;
  CpuBackend b(faulty);
  FaultTagger tagger;
  EngineOptions o;
  o.tagger = &tagger;
  Engine e(b, m, c, w, o);
  e.step(tokens);
  const Measured kept = e.measured();
  EXPECT_FALSE(tagger.fault().has_value());
  EXPECT_THROW(e.step(tokens), std::runtime_error);
  const auto fault = tagger.fault();
  ASSERT_TRUE(fault.has_value()) << "the failing copy's tag was not recorded";
  EXPECT_EQ(fault->stage, 1);
  EXPECT_EQ(fault->chunk, 0);
  EXPECT_EQ(fault->layer, 0);
  EXPECT_EQ(fault->op, Op::layer_fwd);
  EXPECT_EQ(fault->name, "kv_own");
  EXPECT_EQ(fault->to_string(), "stage 1, chunk 0, layer 0, layer_fwd / kv_own");
  EXPECT_EQ(e.measured().steps, 1) << "the failed step is not counted";
  EXPECT_EQ(e.measured().h2d_bytes, kept.h2d_bytes);
  EXPECT_GT(kept.h2d_bytes, 0);
}

}  // namespace
}  // namespace oomb::executor
