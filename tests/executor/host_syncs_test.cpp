// The host synchronisations of a step, counted through the CUPTI stand-in's call log on the CPU
// backend (fake_cupti.h: the calls whose CUDA implementation makes the host wait for the device):
// a dense step's count is a constant, whatever the number of chunks, layers and logits tiles, and
// the loss is read back once per step (not once per logits tile). The Engine reports the count per
// step (Measured::host_syncs, in --json and the trace's metadata.extra.measured).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "fake_cupti.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

struct Shape {
  int64_t layers, context, chunk, resident, logits_rows;
};

struct Counts {
  int64_t syncs = 0, loss_readbacks = 0, measured = 0;
  double loss = 0;
};

Counts step_counts(const Shape& s, int steps) {
  const auto m = test::small_model(s.layers, 2, 1, 8, 16, false, false, 31, 16);
  const Weights w = random_weights(m, 7, 0.05f);
  CpuBackend cpu;
  test::FakeCupti fake(cpu);
  step::Config c = test::small_config(s.context, s.chunk, 4, s.resident);
  c.logits_chunk_tokens = s.logits_rows;
  Engine e(fake, m, c, w, {});
  Counts out;
  for (int i = 0; i < steps; ++i) {
    const int64_t syncs0 = fake.host_syncs(), loss0 = fake.loss_readbacks();
    out.loss = e.step(TokenSource::synthetic(m.vocab, 7).sequence(i, s.context)).loss;
    out.syncs = fake.host_syncs() - syncs0;
    out.loss_readbacks = fake.loss_readbacks() - loss0;
    out.measured = e.measured().host_syncs;
  }
  return out;
}

TEST(HostSyncs, ADenseStepsCountIsAConstantIndependentOfChunksLayersAndTiles) {
  // 1 to 10 chunks, 1 to 5 layers, resident or offloaded, 1 to 4 logits tiles a chunk.
  const Shape shapes[] = {{1, 16, 16, 1, 0}, {2, 48, 16, 2, 4}, {3, 80, 8, 1, 0}, {5, 160, 16, 2, 4}, {5, 37, 4, 5, 1}};
  std::set<int64_t> counts;
  for (const Shape& s : shapes) {
    SCOPED_TRACE("layers " + std::to_string(s.layers) + " context " + std::to_string(s.context) + " chunk " +
                 std::to_string(s.chunk));
    const Counts k = step_counts(s, 2);  // the second step: no first-step set-up
    EXPECT_TRUE(std::isfinite(k.loss));
    EXPECT_EQ(k.loss_readbacks, 1) << "the loss is read back once per step";
    EXPECT_EQ(k.measured, k.syncs) << "Measured::host_syncs is the backend's count for the step";
    counts.insert(k.syncs);
  }
  EXPECT_EQ(counts.size(), 1u) << "the step's host synchronisations depend on the shape";
  EXPECT_LE(*counts.begin(), 2);
}

}  // namespace
}  // namespace oomb::executor
