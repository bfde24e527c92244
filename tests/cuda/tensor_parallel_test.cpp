// Tensor parallelism on the CUDA backend with one GPU: two ranks as threads of this process, each on
// its own CudaBackend of the same device, meeting in the thread communicator
// (tests/executor/thread_comm.h: the ranks' data through their own backends' copies; NCCL refuses
// two ranks on one GPU, and a one-rank NCCL run has no tensor parallelism to run). Every Engine
// branch of tensor parallelism runs in device memory: the vocabulary-parallel embedding (negative
// ids), the activations' all-reduces, the vocabulary-parallel loss (statistics, device combine,
// gradient), the published rule's score all-reduce on device doubles. Against one process on the
// same GPU, weights and tokens: the loss, the gathered gradients, the published selections, and the
// host synchronisations of a step (the same count: tensor parallelism adds none).
// tests/executor/tensor_parallel_test.cpp runs the same cases on the CPU backend; the NCCL job is
// tests/cuda/mpi_tensor_parallel_test.cpp (two GPUs).
#include <gtest/gtest.h>

#include <cmath>

#include "../executor/test_util.h"
#include "../executor/thread_comm.h"
#include "cuda_test_util.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"

namespace oomb::executor::cudatest {
namespace {

// fp32 GEMMs and attention on both sides; the ranks' GEMMs sum half of each contraction and the
// all-reduce adds the halves, so summation order differs (engine_test.cpp's GPU-vs-CPU step bounds).
constexpr double kLossRelTol = 1e-5;
constexpr double kGradRelTol = 1e-4;
// bf16 storage, or bf16 GEMMs with the tensor-core attention: the ranks round partial and
// all-reduced sums where one process rounds once, bf16 noise of the size of what bf16 itself moves
// the gradients from the fp32 step: the ranks within 2x of that cost of the fp32 step, and of the
// one process's bf16 step (tests/executor/tensor_parallel_test.cpp).
constexpr double kBf16NoiseFactor = 2.0;
constexpr double kBf16LossRelTol = 1e-3;
constexpr double kBf16DiffersMin = 1e-4;  // proof that bf16 was stored / multiplied
constexpr float kInitStd = 0.1f;

struct TpCase {
  const char* name;
  int64_t head_dim, hidden;
  int64_t N, C, p, R;
  int rule;  // 0 dense, 1 published, 2 per-kv-head
  int64_t budget, logits_rows;
  bool bf16_storage, bf16_compute;  // bf16 weights / activations / KV; bf16 GEMMs + tensor-core attention
};

std::ostream& operator<<(std::ostream& os, const TpCase& c) { return os << c.name; }

step::Config config_of(const TpCase& k, bool bf16_storage) {
  auto c = test::small_config(k.N, k.C, k.p, k.R);
  c.logits_chunk_tokens = k.logits_rows;
  if (k.rule) {
    c.attention = step::Attention::sparse;
    c.page_budget = k.budget;
    c.selection = k.rule == 1 ? "published" : "per-kv-head";
  }
  if (bf16_storage) c.param_dtype = c.activation_dtype = c.kv_dtype = Dtype::bf16;
  return c;
}

CudaBackendOptions options_of(bool bf16_compute) {
  CudaBackendOptions o = test_options(bf16_compute ? CudaGemmPrecision::bf16 : CudaGemmPrecision::fp32);
  if (bf16_compute) o.attention_kernel = CudaAttentionKernel::bf16_tensor_core;
  return o;
}

struct OneProcess {
  double loss = 0;
  Gradients grads;
  Measured measured;
  SelectionLog selections;
};

OneProcess one_process(const models::ModelSpec& m, const step::Config& c, const Weights& w,
                       const std::vector<int32_t>& tokens, bool bf16_compute) {
  CudaBackend b(options_of(bf16_compute));
  Engine e(b, m, c, w);
  OneProcess o;
  o.loss = e.step(tokens).loss;
  o.grads = e.gradients();
  o.measured = e.measured();
  o.selections = e.selections();
  return o;
}

class CudaTensorParallel : public CudaParamTest<TpCase> {};

TEST_P(CudaTensorParallel, TwoRanksOnOneGpuComputeTheOneProcessStep) {
  const TpCase& k = GetParam();
  const bool bf16 = k.bf16_storage || k.bf16_compute;
  // 4 query heads, 2 KV heads, an MLP of 48 and a vocabulary of 62: each rank holds half of each.
  // No QKV biases with bf16: the K bias's gradient is 0 in exact arithmetic, noise over noise.
  const auto m = test::small_model(2, 4, 2, k.head_dim, k.hidden, false, !bf16, 62, 48);
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  const step::Config c = config_of(k, k.bf16_storage);
  const OneProcess one = one_process(m, c, w, tokens, k.bf16_compute);

  step::Config tp = c;
  tp.gpus = 2;
  CudaBackend b0(options_of(k.bf16_compute)), b1(options_of(k.bf16_compute));
  const test::ThreadedRanks got = test::threaded_tensor_parallel({&b0, &b1}, m, tp, w, tokens);

  EXPECT_EQ(got.losses[0], got.losses[1]) << "every rank computes the same loss";
  EXPECT_NEAR(got.losses[0], one.loss, (bf16 ? kBf16LossRelTol : kLossRelTol) * std::abs(one.loss));
  const WorstTensor worst = worst_relative_l2(got.gradients, one.grads);
  if (!bf16) {
    EXPECT_LE(worst.rel_l2, kGradRelTol) << worst.name;
  } else {
    const OneProcess fp32 = one_process(m, config_of(k, false), w, tokens, false);
    const WorstTensor bf16_cost = worst_relative_l2(one.grads, fp32.grads);
    const WorstTensor tp_cost = worst_relative_l2(got.gradients, fp32.grads);
    EXPECT_GT(bf16_cost.rel_l2, kBf16DiffersMin);
    EXPECT_LE(tp_cost.rel_l2, kBf16NoiseFactor * bf16_cost.rel_l2) << tp_cost.name;
    EXPECT_LE(worst.rel_l2, kBf16NoiseFactor * bf16_cost.rel_l2) << worst.name;
    std::printf("%s: bf16 costs %.3g (%s), the ranks %.3g (%s); ranks vs one process %.3g\n", k.name,
                bf16_cost.rel_l2, bf16_cost.name.c_str(), tp_cost.rel_l2, tp_cost.name.c_str(), worst.rel_l2);
  }
  if (k.bf16_compute) {
    EXPECT_GT(b0.gemm_calls(CudaGemmPrecision::bf16), 0);
    EXPECT_GT(b0.attention_calls(CudaAttentionKernel::bf16_tensor_core), 0);
  }
  for (int r = 0; r < 2; ++r) {
    const Measured& mr = got.measured[static_cast<size_t>(r)];
    EXPECT_EQ(mr.tp, 2);
    EXPECT_EQ(mr.tp_rank, r);
    EXPECT_GT(mr.tp_allreduces, 0);
    EXPECT_EQ(mr.tp_allreduce_bytes, got.measured[0].tp_allreduce_bytes);
    // Nothing of tensor parallelism comes back to the host inside a step (the loss statistics are
    // combined on the device, the scores reduced in device memory): the one process's count.
    EXPECT_EQ(mr.host_syncs, one.measured.host_syncs) << "rank " << r;
    // Every device row within its table's bytes (the memory account would have thrown), the loss
    // statistics row among them.
    EXPECT_GT(mr.row_high_water_bytes.count("tensor_parallel_loss_statistics"), 0u);
    if (k.rule == 1) {  // the published rule: every rank selects the one process's pages
      const SelectionLog& s = got.selections[static_cast<size_t>(r)];
      for (int64_t ch = 0; ch < s.chunks(); ++ch)
        for (int64_t l = 0; l < s.layers(); ++l)
          EXPECT_EQ(s.at(ch, l).pages, one.selections.at(ch, l).pages) << "rank " << r << " chunk " << ch;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaTensorParallel,
    ::testing::Values(
        // name, head_dim, hidden, N, C, p, R, rule, B, logits rows, bf16 storage, bf16 compute
        TpCase{"dense_ragged_offload", 8, 32, 45, 16, 4, 1, 0, 0, 0, false, false},
        TpCase{"dense_logits_tiles", 8, 32, 48, 16, 4, 8, 0, 0, 5, false, false},
        TpCase{"sparse_published", 8, 32, 64, 16, 4, 8, 1, 2, 0, false, false},
        TpCase{"sparse_per_kv_head_offload", 8, 32, 64, 16, 4, 2, 2, 2, 0, false, false},
        TpCase{"bf16_storage", 8, 32, 48, 16, 4, 1, 0, 0, 0, true, false},
        // oomb run's defaults: bf16 GEMMs and the tensor-core attention (head_dim 64).
        TpCase{"bf16_gemm_tensor_core_attention", 64, 128, 256, 128, 32, 1, 0, 0, 0, false, true}),
    [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace oomb::executor::cudatest
