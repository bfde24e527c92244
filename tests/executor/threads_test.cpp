// The CPU backend gives bit-identical results at every thread count (executor/cpu/threads.h): the
// chunk-recurrent step (dense and sparse, offloaded pages), the full-sequence reference, and the
// ops whose gradients reduce over rows. Sizes are chosen so that every parallel loop really splits
// (several pieces per loop, several attention slices and items).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/ops.h"
#include "executor/cpu/reference.h"
#include "executor/cpu/threads.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/rng.h"
#include "executor/runtime/tokens.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

struct StepOut {
  double loss = 0;
  std::vector<float> grads;
};

StepOut step_at(int threads, const models::ModelSpec& m, const step::Config& c, const Weights& w,
                const std::vector<int32_t>& tokens) {
  CpuBackendOptions o;
  o.threads = threads;
  CpuBackend backend(o);
  EXPECT_EQ(cpu::threads(), threads);
  Engine e(backend, m, c, w);
  StepOut r;
  r.loss = e.step(tokens).loss;
  r.grads = e.gradients().data;
  return r;
}

void expect_identical(const StepOut& a, const StepOut& b, int threads) {
  EXPECT_EQ(a.loss, b.loss) << threads << " threads";
  ASSERT_EQ(a.grads.size(), b.grads.size());
  EXPECT_EQ(std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)), 0)
      << "gradients at " << threads << " threads differ from 1 thread";
}

class ThreadsTest : public ::testing::Test {
 protected:
  void TearDown() override { cpu::set_threads(cpu::available_cpus()); }
  // 2 layers, 4 query heads over 2 KV heads, hidden 192 (layer GEMMs split into pieces), 640
  // tokens in chunks of 256 with pages of 32 (8 query pages per chunk), one resident layer.
  const models::ModelSpec m = test::small_model(2, 4, 2, 48, 192, false, true, 301, 384);
  const Weights w = random_weights(m, 99, 0.1f);
  const std::vector<int32_t> tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, 640);
};

TEST_F(ThreadsTest, DenseStepBitIdenticalAt1_2_3Threads) {
  const step::Config c = test::small_config(640, 256, 32, 1);
  const StepOut one = step_at(1, m, c, w, tokens);
  for (int t : {2, 3}) expect_identical(one, step_at(t, m, c, w, tokens), t);
}

TEST_F(ThreadsTest, SparseStepBitIdenticalAt1_2_3Threads) {
  step::Config c = test::small_config(640, 256, 32, 1);
  c.attention = step::Attention::sparse;
  c.page_budget = 3;
  const StepOut one = step_at(1, m, c, w, tokens);
  for (int t : {2, 3}) expect_identical(one, step_at(t, m, c, w, tokens), t);
}

TEST_F(ThreadsTest, ReferenceBitIdenticalAt1_2_3Threads) {
  auto ref_at = [&](int threads) {
    cpu::set_threads(threads);
    const cpu::ReferenceResult r = cpu::full_sequence_reference(m, w, tokens);
    return StepOut{r.loss, r.grads.data};
  };
  const StepOut one = ref_at(1);
  for (int t : {2, 3}) expect_identical(one, ref_at(t), t);
}

// RMSNorm's weight gradient sums over rows (per-piece partials) and the embedding gradient
// scatters rows onto repeated ids: the reductions the thread count must not reorder.
TEST_F(ThreadsTest, RowReductionsBitIdentical) {
  const int64_t rows = 8000, dim = 96, vocab = 9000;  // above parallel.h's thresholds: the loops split
  Rng rng(3);
  std::vector<float> x(rows * dim), dy(rows * dim), wn(dim);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : dy) v = static_cast<float>(rng.normal());
  for (auto& v : wn) v = static_cast<float>(1 + 0.1 * rng.normal());
  std::vector<int32_t> ids(rows);
  for (int64_t t = 0; t < rows; ++t) ids[t] = static_cast<int32_t>((t * 7919) % vocab % 50 + (t % 3) * 4000);
  auto run = [&](int threads) {
    cpu::set_threads(threads);
    std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim, 0.0f), dw(dim, 0.0f), dt(vocab * dim, 0.0f);
    cpu::rmsnorm_fwd(x.data(), wn.data(), rows, dim, 1e-6f, y.data(), rstd.data());
    cpu::rmsnorm_bwd(x.data(), wn.data(), rstd.data(), dy.data(), rows, dim, dx.data(), dw.data());
    cpu::embedding_bwd(ids.data(), rows, dy.data(), dim, dt.data());
    std::vector<float> all = y;
    all.insert(all.end(), dx.begin(), dx.end());
    all.insert(all.end(), dw.begin(), dw.end());
    all.insert(all.end(), dt.begin(), dt.end());
    return StepOut{0, all};
  };
  const StepOut one = run(1);
  for (int t : {2, 3}) expect_identical(one, run(t), t);
}

// The caching allocator (issue #15: a freed block is reused, no page faults after the first step)
// hands out zeroed memory every time, keeps no more than the high-water in use, and a second step
// on reused buffers computes exactly what the first computed.
TEST(CachingAllocator, ReusedBlocksAreZeroedAndBounded) {
  CpuBackend backend;
  const int64_t n = int64_t{3} << 20;
  auto* a = static_cast<unsigned char*>(backend.allocate(Tier::device, n));
  std::memset(a, 0xab, static_cast<size_t>(n));
  backend.deallocate(Tier::device, a, n);
  EXPECT_EQ(backend.cached_bytes(), n);
  auto* b = static_cast<unsigned char*>(backend.allocate(Tier::device, n));
  EXPECT_EQ(b, a) << "a block of the same size is reused";
  EXPECT_EQ(backend.cached_bytes(), 0);
  for (int64_t i = 0; i < n; i += 4093) ASSERT_EQ(b[i], 0) << "byte " << i << " of a reused block is not zero";
  // Freed blocks beyond the high-water mark in use are returned, not kept.
  void* c = backend.allocate(Tier::host, 1 << 20);
  backend.deallocate(Tier::device, b, n);
  backend.deallocate(Tier::host, c, 1 << 20);
  EXPECT_LE(backend.cached_bytes(), n + (1 << 20));
  void* big = backend.allocate(Tier::device, 2 * n);  // nothing cached fits: a new block
  EXPECT_LE(backend.cached_bytes(), n + (1 << 20));
  backend.deallocate(Tier::device, big, 2 * n);
  EXPECT_LE(backend.cached_bytes(), 3 * n);
}

// What a tier of the allocator holds (in use + cached) never exceeds its most ever in use: a miss releases
// cached blocks of other sizes first. Before, a step's phase buffers of one size stayed cached
// while the next phase's were allocated new (tiny at 8K: 22.60 MiB held for 20.60 MiB in use).
TEST(CachingAllocator, HoldsNoMoreThanTheHighWaterInUse) {
  CpuBackend backend;
  const int64_t n = int64_t{3} << 20, m = int64_t{1} << 20;
  void* a = backend.allocate(Tier::device, n);
  backend.deallocate(Tier::device, a, n);
  EXPECT_EQ(backend.cached_bytes(), n);
  void* b = backend.allocate(Tier::device, m);  // a miss: keeping `a` would hold n + m > n
  EXPECT_EQ(backend.reserved_high_bytes(), n);
  EXPECT_LE(backend.cached_bytes() + m, n);
  void* c = backend.allocate(Tier::host, m);  // in use 2m <= n: held stays within n
  EXPECT_LE(backend.reserved_high_bytes(), n);
  backend.deallocate(Tier::device, b, m);
  backend.deallocate(Tier::host, c, m);
  void* d = backend.allocate(Tier::device, 4 * m);  // a new high-water: nothing cached is kept past it
  EXPECT_EQ(backend.reserved_high_bytes(Tier::device), 4 * m);
  // Each tier keeps its own freed blocks within its own high-water: the host's cached block (m,
  // its high-water) stays for the host, the device's went back for the new device block.
  EXPECT_EQ(backend.cached_bytes(Tier::host), m);
  EXPECT_EQ(backend.cached_bytes(Tier::device), 0);
  EXPECT_EQ(backend.reserved_high_bytes(Tier::host), m);
  EXPECT_EQ(backend.reserved_high_bytes(), 5 * m);  // the process: both tiers' highs at once
  backend.deallocate(Tier::device, d, 4 * m);
}

TEST_F(ThreadsTest, SecondStepOnReusedBuffersIsBitIdentical) {
  step::Config c = test::small_config(640, 256, 32, 1);
  c.attention = step::Attention::sparse;
  c.page_budget = 3;
  CpuBackend backend;
  Engine e(backend, m, c, w);
  const double first = e.step(tokens).loss;
  const std::vector<float> g1 = e.gradients().data;
  e.zero_gradients();
  const double second = e.step(tokens).loss;
  EXPECT_GT(backend.cached_bytes(), 0) << "the second step reused freed blocks";
  EXPECT_EQ(first, second);
  expect_identical(StepOut{first, g1}, StepOut{second, e.gradients().data}, 0);
}

}  // namespace
}  // namespace oomb::executor
