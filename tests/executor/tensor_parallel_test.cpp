// Tensor parallelism's Engine path without MPI (tests/cli/mpi_cli_test.cpp runs it under mpirun):
// two ranks as threads of this process (thread_comm.h), each on its own CPU backend behind the
// CUPTI stand-in (fake_cupti.h, which counts the host synchronisations the CUDA backend would make),
// against one process on the same weights and tokens: every rank's loss the one process's, the
// gathered gradients too, the published rule's selections the same, and a rank's step makes exactly
// as many host synchronisations as the one process's (the vocabulary-parallel loss and the score
// all-reduce add none). tests/cuda/tensor_parallel_test.cpp runs the same cases on the CUDA backend.
#include <gtest/gtest.h>

#include <cmath>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "fake_cupti.h"
#include "test_util.h"
#include "thread_comm.h"

namespace oomb::executor {
namespace {

// fp32: the ranks' GEMMs sum half of each contraction and the all-reduce adds the halves, so only
// fp32 summation order differs from one process (the MPI test's bounds: tests/cli/mpi_cli_test.cpp).
constexpr double kLossRelTol = 1e-6;
constexpr double kGradRelTol = 1e-5;
// bf16 storage: the ranks round their partial sums and the all-reduced sums where one process
// rounds each projection's output once, so the two differ by bf16 rounding noise, of the size of what
// bf16 storage itself moves the gradients from the fp32 step (1.6e-2 here, for this small model's
// attention gradients). The bound: the ranks' gradients no further from the fp32 step than 2x the one
// process's bf16 gradients are, and from those no further than 2x that too; the loss within 1e-3.
constexpr double kBf16NoiseFactor = 2.0;
constexpr double kBf16LossRelTol = 1e-3;
// Proof that bf16 was stored: the one process's bf16 gradients differ from its fp32 ones by far more
// than fp32 rounding.
constexpr double kBf16DiffersMin = 1e-4;

struct TpCase {
  const char* name;
  int64_t N, C, p, R;
  int rule;  // 0 dense, 1 published, 2 per-kv-head
  int64_t budget, logits_rows;
  bool bf16;
};

std::ostream& operator<<(std::ostream& os, const TpCase& c) { return os << c.name; }

step::Config config_of(const TpCase& k) {
  auto c = test::small_config(k.N, k.C, k.p, k.R);
  c.logits_chunk_tokens = k.logits_rows;
  if (k.rule) {
    c.attention = step::Attention::sparse;
    c.page_budget = k.budget;
    c.selection = k.rule == 1 ? "published" : "per-kv-head";
  }
  if (k.bf16) c.param_dtype = c.activation_dtype = c.kv_dtype = Dtype::bf16;
  return c;
}

class ThreadedTensorParallel : public ::testing::TestWithParam<TpCase> {};

TEST_P(ThreadedTensorParallel, TwoRanksComputeTheOneProcessStep) {
  const TpCase& k = GetParam();
  // 4 query heads, 2 KV heads, an MLP of 48 and a vocabulary of 62: each rank holds half of each.
  // QKV biases except with bf16 storage: the K bias's gradient is 0 in exact arithmetic (a constant
  // added to every key shifts each query's scores alike), so in bf16 its relative error is noise over
  // noise.
  const auto m = test::small_model(2, 4, 2, 8, 32, false, !k.bf16, 62, 48);
  const Weights w = random_weights(m, 1234, 0.1f);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  const step::Config c = config_of(k);

  CpuBackend one_cpu;
  test::FakeCupti one(one_cpu);
  Engine e(one, m, c, w);
  const double want = e.step(tokens).loss;
  const Gradients want_grads = e.gradients();

  step::Config tp = c;
  tp.gpus = 2;
  CpuBackend cpu0, cpu1;
  test::FakeCupti r0(cpu0), r1(cpu1);
  const test::ThreadedRanks got = test::threaded_tensor_parallel({&r0, &r1}, m, tp, w, tokens);

  const double loss_tol = k.bf16 ? kBf16LossRelTol : kLossRelTol;
  EXPECT_EQ(got.losses[0], got.losses[1]) << "every rank computes the same loss";
  EXPECT_NEAR(got.losses[0], want, loss_tol * std::abs(want));
  const WorstTensor worst = worst_relative_l2(got.gradients, want_grads);
  if (!k.bf16) {
    EXPECT_LE(worst.rel_l2, kGradRelTol) << worst.name;
  } else {
    CpuBackend f;
    Engine ef(f, m, config_of({k.name, k.N, k.C, k.p, k.R, k.rule, k.budget, k.logits_rows, false}), w);
    ef.step(tokens);
    const Gradients fp32 = ef.gradients();
    const WorstTensor bf16_cost = worst_relative_l2(want_grads, fp32), tp_cost = worst_relative_l2(got.gradients, fp32);
    EXPECT_GT(bf16_cost.rel_l2, kBf16DiffersMin);
    EXPECT_LE(tp_cost.rel_l2, kBf16NoiseFactor * bf16_cost.rel_l2) << tp_cost.name;
    EXPECT_LE(worst.rel_l2, kBf16NoiseFactor * bf16_cost.rel_l2) << worst.name;
  }
  for (int r = 0; r < 2; ++r) {
    const Measured& mr = got.measured[static_cast<size_t>(r)];
    EXPECT_EQ(mr.tp, 2);
    EXPECT_EQ(mr.tp_rank, r);
    EXPECT_GT(mr.tp_allreduces, 0);
    EXPECT_EQ(mr.tp_allreduces, got.measured[0].tp_allreduces);
    EXPECT_EQ(mr.tp_allreduce_bytes, got.measured[0].tp_allreduce_bytes);
    // The CUDA backend's count (as the stand-in models it): no read-back per loss tile or selection
    // all-reduce, the loss read once per step.
    EXPECT_EQ(mr.host_syncs, e.measured().host_syncs) << "rank " << r;
    if (k.rule == 1) {  // the published rule: every rank selects the one process's pages
      const SelectionLog& s = got.selections[static_cast<size_t>(r)];
      for (int64_t ch = 0; ch < s.chunks(); ++ch)
        for (int64_t l = 0; l < s.layers(); ++l)
          EXPECT_EQ(s.at(ch, l).pages, e.selections().at(ch, l).pages) << "rank " << r << " chunk " << ch;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ThreadedTensorParallel,
    ::testing::Values(
        // name, N, C, p, R, rule, B, logits rows, bf16
        TpCase{"dense_ragged_offload", 45, 16, 4, 1, 0, 0, 0, false},
        // Loss tiles of 5 rows (a ragged last tile, the sequence's last row without a target).
        TpCase{"dense_logits_tiles", 48, 16, 4, 8, 0, 0, 5, false},
        TpCase{"sparse_published", 64, 16, 4, 8, 1, 2, 0, false},
        TpCase{"sparse_per_kv_head_offload", 64, 16, 4, 2, 2, 2, 0, false},
        TpCase{"bf16_storage", 48, 16, 4, 1, 0, 0, 0, true}),
    [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace oomb::executor
