// Local layers (sliding window, chunked blocks) and attention sinks on the CUDA backend: the sinks'
// kernels against the CPU backend's ops, and whole training steps of the catalog's tiny-local and
// tiny-sinks (also with gpt-oss's q, k, v and o_proj biases) against the CPU backend's step and the
// full-sequence reference (the attention kernels' windows: tests/cuda/attention_test.cpp).
#include <gtest/gtest.h>

#include "../executor/test_util.h"
#include "cuda_test_util.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "models/specs.h"

namespace oomb::executor::cudatest {
namespace {

class CudaLocalAttention : public CudaTest {};

TEST_F(CudaLocalAttention, SinkKernelsMatchTheCpu) {
  const int64_t T = 45, qh = 6, hd = 24;
  const auto sinks = random_vec(qh, 21, 1.5f), o = random_vec(T * qh * hd, 22), dout = random_vec(T * qh * hd, 23);
  const auto lse = random_vec(T * qh, 24, 2.0f), d0 = random_vec(qh, 25);
  std::vector<float> co = o, clse = lse, cd = d0;
  cpu.attention_sinks_fwd(sinks.data(), T, qh, hd, co.data(), clse.data());
  cpu.attention_sinks_bwd(sinks.data(), T, qh, hd, co.data(), clse.data(), dout.data(), cd.data());
  DeviceVec<float> gs(*gpu, sinks), go(*gpu, o), glse(*gpu, lse), gdout(*gpu, dout), gd(*gpu, d0);
  gpu->attention_sinks_fwd(ConstTensor(gs.get(), DType::f32, qh), T, qh, hd, Tensor(go.get(), DType::f32, T * qh * hd),
                           glse.get());
  gpu->attention_sinks_bwd(ConstTensor(gs.get(), DType::f32, qh), T, qh, hd,
                           ConstTensor(go.get(), DType::f32, T * qh * hd), glse.get(),
                           ConstTensor(gdout.get(), DType::f32, T * qh * hd), Tensor(gd.get(), DType::f32, qh));
  gpu->synchronize();
  EXPECT_LE(rel_l2(go.read(), co), 1e-6) << "o";
  EXPECT_LE(rel_l2(glse.read(), clse), 1e-6) << "lse";
  EXPECT_LE(rel_l2(gd.read(), cd), 1e-5) << "d sinks";
  EXPECT_GT(rel_l2(cd, d0), 1e-3) << "the gradient added something";
}

// fp32 storage: the CPU backend's loss and gradients and the full-sequence reference's.
// attention_bias: gpt-oss's biases on q, k, v and o (its attention), on the catalog model named.
// gemma_mlp: Gemma's sandwich norms and GeGLU MLP.
void check_step(CudaBackend& gpu, CpuBackend& cpu, const char* id, int64_t resident, bool attention_bias = false,
                bool gemma_mlp = false) {
  models::ModelSpec m = models::load_model(id);
  if (attention_bias) m.qkv_bias = m.o_bias = true;
  if (gemma_mlp) m.sandwich_norms = true, m.mlp = models::Mlp::geglu_tanh;
  const step::Config c = test::small_config(192, 64, 16, resident);
  Weights w = random_weights(m, 1234, 0.1f);
  for (const auto& p : w.layout.params())  // sinks that take a real share of each softmax
    if (p.name.find("self_attn.sinks") != std::string::npos)
      for (int64_t h = 0; h < p.numel; ++h) w.at(p)[h] = 1.0f + 0.5f * static_cast<float>(h);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, c.context_tokens);
  Engine on_cpu(cpu, m, c, w);
  const double want = on_cpu.step(tokens).loss;
  Engine on_gpu(gpu, m, c, w);
  const double got = on_gpu.step(tokens).loss;
  EXPECT_NEAR(got, want, 1e-5 * want) << id;
  const auto [err, name] = worst_relative_l2(on_gpu.gradients(), on_cpu.gradients());
  EXPECT_LE(err, 1e-4) << id << ": worst tensor " << name;
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  const auto [ref_err, ref_name] = worst_relative_l2(on_gpu.gradients(), ref.grads);
  EXPECT_LE(ref_err, 1e-4) << id << ": worst tensor " << ref_name;
  EXPECT_EQ(on_gpu.measured().local_kv_high_water_pages, on_cpu.measured().local_kv_high_water_pages) << id;
  EXPECT_EQ(on_gpu.measured().local_grad_high_water_pages, on_cpu.measured().local_grad_high_water_pages) << id;
}

TEST_F(CudaLocalAttention, TinyLocalStepMatchesTheCpuAndTheFullSequence) { check_step(*gpu, cpu, "tiny-local", 1); }

TEST_F(CudaLocalAttention, TinySinksStepMatchesTheCpuAndTheFullSequence) { check_step(*gpu, cpu, "tiny-sinks", 2); }

TEST_F(CudaLocalAttention, AttentionBiasesStepMatchesTheCpuAndTheFullSequence) {
  check_step(*gpu, cpu, "tiny-sinks", 1, true);
}

TEST_F(CudaLocalAttention, SandwichNormsAndGegluStepMatchesTheCpuAndTheFullSequence) {
  check_step(*gpu, cpu, "tiny-local", 1, false, true);
}

}  // namespace
}  // namespace oomb::executor::cudatest
