// Tensor parallelism's vocabulary-parallel cross-entropy on the CUDA backend (cross_entropy_shard.cu)
// against the CPU backend on the same inputs: the per-row statistics, their combine over the ranks
// (in place, the tile's loss into a loss slot) and the gradient, fp32 and bf16 logits, the -1 / -2
// target conventions, in place and not; edge sizes (rows 1, 3, 7, 17; shard widths that are not
// multiples of the 512-thread block) next to a realistic one (256 rows of a 152064 / 2 vocabulary
// shard); and a whole tile split over two shards equal to the one-GPU fused cross-entropy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cuda_test_util.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cudatest {
namespace {

// Tolerances (relative unless named otherwise), with the reason for each.
// The row max (a max of the same values) and the target logit (loaded) are bit-identical: EXPECT_EQ.
constexpr double kSumRelTol = 1e-6;      // sum of exp in double over expf (GPU) / Eigen's exp (CPU) terms
constexpr double kCombineSumRelTol = 1e-6;  // double exp / sum rounded to fp32 (1 ulp = 1.2e-7)
// The tile's loss: the same double arithmetic per row, rows summed in another order (block sum vs
// row order) and the device's double exp / log against glibc's (each within an ulp or two).
constexpr double kCombineLossRelTol = 1e-12;
constexpr double kElementwiseTol = 2e-6;  // expf vs the CPU's exp: a few ulp per element (ops_test.cpp)
// bf16 gradients: the fp32 values above, each rounded once; a value near a rounding boundary can land
// one bf16 step (2^-8 relative) apart, so at most one step on every element.
constexpr double kBf16StepTol = 1.0 / 256;
// The whole tile over two shards against the fused one-GPU loss: the loss adds the same terms in
// double (kLossRelTol of ops_test.cpp), the gradient's normaliser is the shards' sums rescaled to the
// global max in double and rounded to fp32 (1 ulp) instead of one sum.
constexpr double kLossRelTol = 1e-6;

const int64_t kRows[] = {1, 3, 7, 17};
// Shard widths: one column, below a warp, around the 512-thread block, a vocabulary of 1000, and
// Qwen2.5's 152064 over two GPUs.
const int64_t kWidths[] = {1, 3, 511, 513, 1000, 76032};

// Targets as a rank sees them: -1 (no next token), -2 (another rank's column) and its own columns.
std::vector<int32_t> shard_targets(int64_t rows, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    t[static_cast<size_t>(r)] = r % 3 == 0 ? -1 : r % 3 == 1 ? -2 : static_cast<int32_t>((r * 7919) % vocab);
  if (rows == 1) t[0] = static_cast<int32_t>(vocab - 1);  // a single row still has a target here
  return t;
}

// Logits as stored in `d` (bf16: the rounded values' bit patterns) and as fp32 values.
struct Logits {
  std::vector<float> f32;      // the values (bf16: exactly the stored ones)
  std::vector<uint16_t> bf16;  // the storage when bf16
};
Logits make_logits(int64_t n, uint64_t seed, DType d) {
  Logits l;
  l.f32 = random_vec(static_cast<size_t>(n), seed, 4.0f);
  if (d == DType::bf16) {
    l.bf16.resize(l.f32.size());
    f32_to_bf16(l.f32.data(), l.bf16.data(), n);
    bf16_to_f32(l.bf16.data(), l.f32.data(), n);
  }
  return l;
}

class CudaShardLoss : public CudaTest {
 protected:
  // A device copy of the logits in dtype d and its typed view.
  struct DeviceLogits {
    std::unique_ptr<DeviceVec<float>> f32;
    std::unique_ptr<DeviceVec<uint16_t>> bf16;
    Tensor t(int64_t n) const {
      return f32 ? Tensor(f32->get(), DType::f32, n) : Tensor(bf16->get(), DType::bf16, n);
    }
  };
  DeviceLogits upload(const Logits& l, DType d) {
    DeviceLogits out;
    if (d == DType::f32) out.f32 = std::make_unique<DeviceVec<float>>(*gpu, l.f32);
    else out.bf16 = std::make_unique<DeviceVec<uint16_t>>(*gpu, l.bf16);
    return out;
  }
  // The CPU's view of the same storage.
  static ConstTensor host_view(const Logits& l, DType d) {
    return d == DType::f32 ? ConstTensor(l.f32.data(), DType::f32, static_cast<int64_t>(l.f32.size()))
                           : ConstTensor(l.bf16.data(), DType::bf16, static_cast<int64_t>(l.bf16.size()));
  }
};

TEST_F(CudaShardLoss, StatisticsMatchTheCpu) {
  for (DType d : {DType::f32, DType::bf16}) {
    std::vector<std::pair<int64_t, int64_t>> shapes;
    for (int64_t rows : kRows)
      for (int64_t vocab : kWidths) shapes.emplace_back(rows, vocab);
    shapes.emplace_back(256, 76032);
    for (const auto& [rows, vocab] : shapes) {
      SCOPED_TRACE(std::string(to_string(d)) + " " + std::to_string(rows) + " x " + std::to_string(vocab));
      const Logits l = make_logits(rows * vocab, 80 + rows, d);
      const auto targets = shard_targets(rows, vocab);
      std::vector<float> want(static_cast<size_t>(rows * 3), -7.0f);
      cpu.cross_entropy_shard_stats(host_view(l, d), rows, vocab, targets.data(), want.data());
      const DeviceLogits dl = upload(l, d);
      DeviceVec<int32_t> d_targets(*gpu, targets);
      DeviceVec<float> d_stats(*gpu, std::vector<float>(static_cast<size_t>(rows * 3), -7.0f));
      gpu->cross_entropy_shard_stats(dl.t(rows * vocab), rows, vocab, d_targets.get(), d_stats.get());
      const auto got = d_stats.read();
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = static_cast<size_t>(r * 3);
        EXPECT_EQ(got[i], want[i]) << "max, row " << r;
        EXPECT_NEAR(got[i + 1], want[i + 1], kSumRelTol * want[i + 1]) << "sum, row " << r;
        EXPECT_EQ(got[i + 2], want[i + 2]) << "target logit, row " << r;
      }
    }
  }
}

// Plausible statistics of `ranks` shards: each row's max, a sum of exp(x - max) >= 1, and the target
// logit on one rank only (0 on the others).
std::vector<float> rank_statistics(int64_t ranks, int64_t rows, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> st(static_cast<size_t>(ranks * rows * 3), 0.0f);
  for (int64_t k = 0; k < ranks; ++k)
    for (int64_t r = 0; r < rows; ++r) {
      float* e = st.data() + (k * rows + r) * 3;
      e[0] = static_cast<float>(4.0 * rng.normal());
      e[1] = static_cast<float>(1.0 + 100.0 * rng.uniform());
      e[2] = r % ranks == k ? e[0] - static_cast<float>(3.0 * rng.uniform()) : 0.0f;
    }
  return st;
}

TEST_F(CudaShardLoss, CombineMatchesTheCpuInPlaceAndAddsTheLossToItsSlot) {
  // Rows around the kernel's 256-row chunks (its in-place order) and a realistic tile of 4096 + 17.
  for (int64_t ranks : {1, 2, 3, 8}) {
    for (int64_t rows : {1, 3, 7, 17, 255, 256, 257, 4113}) {
      SCOPED_TRACE(std::to_string(ranks) + " ranks, " + std::to_string(rows) + " rows");
      const std::vector<float> st = rank_statistics(ranks, rows, 90 + rows);
      std::vector<int32_t> targets(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        targets[static_cast<size_t>(r)] = r % 5 == 3 ? -1 : r % 5 == 1 ? -2 : static_cast<int32_t>(r * 31 % 1000);
      // Twice into slot 2 (a chunk's two tiles): the slot accumulates; slots 0 and 1 stay 0.
      std::vector<float> want = st;
      cpu.cross_entropy_shard_combine(want.data(), ranks, rows, targets.data(), 2);
      std::vector<float> again = st;
      cpu.cross_entropy_shard_combine(again.data(), ranks, rows, targets.data(), 2);
      const std::vector<double> want_loss = cpu.take_losses(3);
      DeviceVec<int32_t> d_targets(*gpu, targets);
      DeviceVec<float> d_st(*gpu, st), d_again(*gpu, st);
      gpu->cross_entropy_shard_combine(d_st.get(), ranks, rows, d_targets.get(), 2);
      gpu->cross_entropy_shard_combine(d_again.get(), ranks, rows, d_targets.get(), 2);
      const std::vector<double> got_loss = gpu->take_losses(3);
      EXPECT_EQ(got_loss[0], 0.0);
      EXPECT_EQ(got_loss[1], 0.0);
      ASSERT_GT(std::abs(want_loss[2]), 0.0);
      EXPECT_NEAR(got_loss[2], want_loss[2], kCombineLossRelTol * std::abs(want_loss[2]));
      const auto got = d_st.read();
      for (int64_t r = 0; r < rows; ++r) {
        const size_t i = static_cast<size_t>(r * 2);
        EXPECT_EQ(got[i], want[i]) << "max, row " << r;
        EXPECT_NEAR(got[i + 1], want[i + 1], kCombineSumRelTol * want[i + 1]) << "sum, row " << r;
      }
      // Beyond max_sum the buffer is as it was (only [rows][2] is written).
      for (size_t i = static_cast<size_t>(rows * 2); i < st.size(); ++i) ASSERT_EQ(got[i], st[i]) << "element " << i;
    }
  }
}

TEST_F(CudaShardLoss, GradientMatchesTheCpuInPlaceAndNot) {
  const float scale = 0.25f;
  for (DType d : {DType::f32, DType::bf16}) {
    std::vector<std::pair<int64_t, int64_t>> shapes;
    for (int64_t rows : kRows)
      for (int64_t vocab : kWidths) shapes.emplace_back(rows, vocab);
    shapes.emplace_back(256, 76032);
    for (const auto& [rows, vocab] : shapes) {
      SCOPED_TRACE(std::string(to_string(d)) + " " + std::to_string(rows) + " x " + std::to_string(vocab));
      const int64_t n = rows * vocab;
      const Logits l = make_logits(n, 100 + rows, d);
      const auto targets = shard_targets(rows, vocab);
      // The row's max and sum over "every rank": this shard's own, halved sum-wise by another shard
      // holding as much mass again (a realistic softmax normaliser, not this shard's alone).
      std::vector<float> st(static_cast<size_t>(rows * 3));
      cpu.cross_entropy_shard_stats(host_view(l, d), rows, vocab, targets.data(), st.data());
      std::vector<float> max_sum(static_cast<size_t>(rows * 2));
      for (int64_t r = 0; r < rows; ++r) {
        max_sum[static_cast<size_t>(r * 2)] = st[static_cast<size_t>(r * 3)];
        max_sum[static_cast<size_t>(r * 2 + 1)] = 2.0f * st[static_cast<size_t>(r * 3 + 1)];
      }
      // In place (the grad is the logits' storage, its dtype) and into a separate fp32 gradient.
      std::vector<float> want_sep(static_cast<size_t>(n));
      cpu.cross_entropy_shard_grad(host_view(l, d), rows, vocab, targets.data(), max_sum.data(), scale,
                                   want_sep.data());
      Logits in_place = l;
      const Tensor host_grad = d == DType::f32 ? Tensor(in_place.f32.data(), DType::f32, n)
                                               : Tensor(in_place.bf16.data(), DType::bf16, n);
      cpu.cross_entropy_shard_grad(host_grad, rows, vocab, targets.data(), max_sum.data(), scale, host_grad);
      if (d == DType::bf16) bf16_to_f32(in_place.bf16.data(), in_place.f32.data(), n);

      DeviceVec<int32_t> d_targets(*gpu, targets);
      DeviceVec<float> d_ms(*gpu, max_sum), d_sep(*gpu, std::vector<float>(static_cast<size_t>(n), 5.0f));
      const DeviceLogits dl = upload(l, d);
      gpu->cross_entropy_shard_grad(dl.t(n), rows, vocab, d_targets.get(), d_ms.get(), scale, d_sep.get());
      const auto got_sep = d_sep.read();
      EXPECT_LE(rel_l2(got_sep, want_sep), kElementwiseTol);
      gpu->cross_entropy_shard_grad(dl.t(n), rows, vocab, d_targets.get(), d_ms.get(), scale, dl.t(n));
      std::vector<float> got_in_place;
      if (d == DType::f32) {
        got_in_place = dl.f32->read();
      } else {
        const auto bits = dl.bf16->read();
        got_in_place.resize(bits.size());
        bf16_to_f32(bits.data(), got_in_place.data(), n);
      }
      EXPECT_LE(rel_l2(got_in_place, in_place.f32), d == DType::f32 ? kElementwiseTol : kBf16StepTol);
      // Rows without a target: exactly zero, in place too.
      for (int64_t r = 0; r < rows; ++r)
        if (targets[static_cast<size_t>(r)] == -1)
          for (int64_t i = 0; i < vocab; ++i) {
            ASSERT_EQ(got_sep[static_cast<size_t>(r * vocab + i)], 0.0f) << "row " << r;
            ASSERT_EQ(got_in_place[static_cast<size_t>(r * vocab + i)], 0.0f) << "row " << r;
          }
    }
  }
}

// One tile over two vocabulary shards, as two tensor-parallel ranks compute it (their statistics in
// one buffer, each rank's block: what the all-reduce of the zero-elsewhere blocks leaves), equals the
// one-GPU fused cross-entropy of the whole row: the loss and the concatenated gradients.
TEST_F(CudaShardLoss, TwoShardsOfATileAreTheWholeTilesCrossEntropy) {
  const float scale = 0.25f;
  const std::pair<int64_t, int64_t> shapes[] = {{1, 2}, {3, 1026}, {7, 2 * 513}, {17, 2000}, {256, 152064}};
  for (const auto& [rows, V] : shapes) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(V));
    const int64_t S = V / 2;
    const auto full = random_vec(static_cast<size_t>(rows * V), 110 + rows, 4.0f);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      targets[static_cast<size_t>(r)] = r == rows - 1 && rows > 1 ? -1 : static_cast<int32_t>((r * 7919 + 5) % V);
    std::vector<float> want = full;
    const double want_loss = cpu.cross_entropy(want.data(), rows, V, targets.data(), scale, want.data());

    DeviceVec<float> d_stats(*gpu, std::vector<float>(static_cast<size_t>(2 * rows * 3), 0.0f));
    std::vector<std::vector<float>> got(2);
    std::vector<std::unique_ptr<DeviceVec<float>>> shard(2);
    std::vector<std::unique_ptr<DeviceVec<int32_t>>> local(2);
    for (int64_t k = 0; k < 2; ++k) {
      std::vector<float> cols(static_cast<size_t>(rows * S));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(cols.data() + r * S, full.data() + r * V + k * S, static_cast<size_t>(S) * 4);
      std::vector<int32_t> t(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const int32_t g = targets[static_cast<size_t>(r)];
        t[static_cast<size_t>(r)] = g < 0 ? -1 : g >= k * S && g < (k + 1) * S ? static_cast<int32_t>(g - k * S) : -2;
      }
      shard[static_cast<size_t>(k)] = std::make_unique<DeviceVec<float>>(*gpu, cols);
      local[static_cast<size_t>(k)] = std::make_unique<DeviceVec<int32_t>>(*gpu, t);
      gpu->cross_entropy_shard_stats(shard[static_cast<size_t>(k)]->get(), rows, S,
                                     local[static_cast<size_t>(k)]->get(), d_stats.get() + k * rows * 3);
    }
    gpu->cross_entropy_shard_combine(d_stats.get(), 2, rows, local[0]->get(), 0);
    for (int64_t k = 0; k < 2; ++k) {
      float* s = shard[static_cast<size_t>(k)]->get();
      gpu->cross_entropy_shard_grad(s, rows, S, local[static_cast<size_t>(k)]->get(), d_stats.get(), scale, s);
      got[static_cast<size_t>(k)] = shard[static_cast<size_t>(k)]->read();
    }
    const double got_loss = gpu->take_losses(1)[0];
    EXPECT_NEAR(got_loss, want_loss, kLossRelTol * std::abs(want_loss));
    std::vector<float> joined(static_cast<size_t>(rows * V));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < 2; ++k)
        std::memcpy(joined.data() + r * V + k * S, got[static_cast<size_t>(k)].data() + r * S,
                    static_cast<size_t>(S) * 4);
    EXPECT_LE(rel_l2(joined, want), kElementwiseTol);
  }
}

}  // namespace
}  // namespace oomb::executor::cudatest
