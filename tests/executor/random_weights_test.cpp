// random_weights generates in parallel pieces (each thread skips the RNG to its first element) and
// must give exactly the values of one sequential pass of Rng(seed) over the layout.
#include <gtest/gtest.h>

#include <string>

#include "executor/runtime/rng.h"
#include "executor/runtime/weights.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

TEST(RandomWeights, ParallelPiecesEqualOneSequentialPass) {
  const auto m = test::small_model(2, 4, 2, 32, 256, false, true, 1031, 704);
  const float stddev = 0.02f;
  Weights ref = zero_params(m);
  Rng rng(17);
  for (const auto& p : ref.layout.params()) {
    const bool norm = p.name.find("norm") != std::string::npos;
    float* d = ref.at(p);
    for (int64_t i = 0; i < p.numel; ++i)
      d[i] = norm ? 1.0f + 2.5f * stddev * static_cast<float>(rng.normal()) : stddev * static_cast<float>(rng.normal());
  }
  for (int threads : {1, 3, 7, 0}) EXPECT_EQ(random_weights(m, 17, stddev, threads).data, ref.data) << threads;
}

TEST(RandomWeights, SkipEqualsCallingNext) {
  Rng a(5), b(5);
  for (int i = 0; i < 1001; ++i) a.next();
  b.skip(1001);
  EXPECT_EQ(a.next(), b.next());
}

}  // namespace
}  // namespace oomb::executor
