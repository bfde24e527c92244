// Mixtures of experts on the CUDA backend: the routing and packed-dispatch kernels against the CPU
// backend's ops, and a whole training step of MoE models against the CPU backend's step and the
// full-sequence reference.
#include <gtest/gtest.h>

#include "../executor/test_util.h"
#include "cuda_test_util.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "models/specs.h"

namespace oomb::executor::cudatest {
namespace {

class CudaMoe : public CudaTest {};

TEST_F(CudaMoe, RoutingAndDispatchKernelsMatchTheCpu) {
  const int64_t T = 37, E = 9, K = 3, D = 20;
  for (const bool renormalize : {true, false}) {
    std::vector<float> logits = random_vec(static_cast<size_t>(T * E), 3);
    logits[4] = logits[5] = 2.5f;  // a tie in token 0: the lower expert first on both
    const std::vector<float> x = random_vec(static_cast<size_t>(T * D), 4);
    const std::vector<float> out = random_vec(static_cast<size_t>(T * K * D), 5);
    const std::vector<float> dy = random_vec(static_cast<size_t>(T * D), 6);
    const std::vector<float> dw = random_vec(static_cast<size_t>(T * K), 7);
    // The CPU's.
    std::vector<int32_t> ce(static_cast<size_t>(T * K)), cr(static_cast<size_t>(T * K)), co(static_cast<size_t>(E + 1));
    std::vector<float> cw(static_cast<size_t>(T * K)), cdl(static_cast<size_t>(T * E)),
        cp(static_cast<size_t>(T * K * D));
    std::vector<float> cy(static_cast<size_t>(T * D)), cdp(static_cast<size_t>(T * K * D)),
        cdw(static_cast<size_t>(T * K));
    cpu.moe_route(logits.data(), T, E, K, renormalize, ce.data(), cw.data(), cr.data(), co.data());
    cpu.moe_route_bwd(logits.data(), T, E, K, renormalize, ce.data(), cw.data(), dw.data(), cdl.data());
    cpu.moe_gather(x.data(), T, D, K, cr.data(), cp.data());
    cpu.moe_combine(out.data(), T, D, K, cr.data(), cw.data(), cy.data(), false);
    cpu.moe_combine_bwd(dy.data(), out.data(), T, D, K, cr.data(), cw.data(), cdp.data(), cdw.data());
    // The GPU's, from the same inputs.
    DeviceVec<float> gl(*gpu, logits), gx(*gpu, x), gout(*gpu, out), gdy(*gpu, dy), gdw(*gpu, dw);
    DeviceVec<int32_t> ge(*gpu, std::vector<int32_t>(ce.size(), -1)), gr(*gpu, std::vector<int32_t>(cr.size(), -1)),
        go(*gpu, std::vector<int32_t>(co.size(), -1));
    DeviceVec<float> gw(*gpu, std::vector<float>(cw.size())), gdl(*gpu, std::vector<float>(cdl.size(), 9.0f)),
        gp(*gpu, std::vector<float>(cp.size())), gy(*gpu, std::vector<float>(cy.size())),
        gdp(*gpu, std::vector<float>(cdp.size())), gdwo(*gpu, std::vector<float>(cdw.size()));
    gpu->moe_route(ConstTensor(gl.get(), DType::f32, T * E), T, E, K, renormalize, ge.get(), gw.get(), gr.get(),
                   go.get());
    gpu->moe_route_bwd(ConstTensor(gl.get(), DType::f32, T * E), T, E, K, renormalize, ge.get(), gw.get(), gdw.get(),
                       Tensor(gdl.get(), DType::f32, T * E));
    gpu->moe_gather(ConstTensor(gx.get(), DType::f32, T * D), T, D, K, gr.get(),
                    Tensor(gp.get(), DType::f32, T * K * D));
    gpu->moe_combine(ConstTensor(gout.get(), DType::f32, T * K * D), T, D, K, gr.get(), gw.get(),
                     Tensor(gy.get(), DType::f32, T * D), false);
    gpu->moe_combine_bwd(ConstTensor(gdy.get(), DType::f32, T * D), ConstTensor(gout.get(), DType::f32, T * K * D), T,
                         D, K, gr.get(), gw.get(), Tensor(gdp.get(), DType::f32, T * K * D), gdwo.get());
    gpu->synchronize();
    EXPECT_EQ(ge.read(), ce);
    EXPECT_EQ(gr.read(), cr);
    EXPECT_EQ(go.read(), co);
    EXPECT_LE(max_abs_diff(gw.read(), cw), 1e-6);
    EXPECT_LE(max_abs_diff(gdl.read(), cdl), 1e-6);
    EXPECT_EQ(gp.read(), cp);
    EXPECT_LE(max_abs_diff(gy.read(), cy), 1e-5);
    EXPECT_LE(max_abs_diff(gdp.read(), cdp), 1e-6);
    EXPECT_LE(max_abs_diff(gdwo.read(), cdw), 1e-5);
  }
}

// bf16 hidden-wide rows (the method's storage): gather, combine and the combine's backward read and
// write bf16 with fp32 arithmetic rounded once, bit for bit as the CPU backend.
TEST_F(CudaMoe, Bf16RowsMatchTheCpuBitForBit) {
  const int64_t T = 21, E = 5, K = 2, D = 12;
  const std::vector<float> logits = random_vec(static_cast<size_t>(T * E), 13);
  std::vector<int32_t> ce(static_cast<size_t>(T * K)), cr(static_cast<size_t>(T * K)), co(static_cast<size_t>(E + 1));
  std::vector<float> cw(static_cast<size_t>(T * K));
  cpu.moe_route(logits.data(), T, E, K, true, ce.data(), cw.data(), cr.data(), co.data());
  auto bf16 = [](const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    f32_to_bf16(v.data(), b.data(), static_cast<int64_t>(v.size()));
    return b;
  };
  const std::vector<uint16_t> x = bf16(random_vec(static_cast<size_t>(T * D), 14));
  const std::vector<uint16_t> out = bf16(random_vec(static_cast<size_t>(T * K * D), 15));
  const std::vector<uint16_t> dy = bf16(random_vec(static_cast<size_t>(T * D), 16));
  const std::vector<uint16_t> y0 = bf16(random_vec(static_cast<size_t>(T * D), 17));
  auto in = [](const std::vector<uint16_t>& v) { return ConstTensor(v.data(), DType::bf16, static_cast<int64_t>(v.size())); };
  auto io = [](std::vector<uint16_t>& v) { return Tensor(v.data(), DType::bf16, static_cast<int64_t>(v.size())); };
  std::vector<uint16_t> cp(static_cast<size_t>(T * K * D)), cy = y0, cdp(static_cast<size_t>(T * K * D));
  std::vector<float> cdw(static_cast<size_t>(T * K));
  cpu.moe_gather(in(x), T, D, K, cr.data(), io(cp));
  cpu.moe_combine(in(out), T, D, K, cr.data(), cw.data(), io(cy), true);
  cpu.moe_combine_bwd(in(dy), in(out), T, D, K, cr.data(), cw.data(), io(cdp), cdw.data());
  DeviceVec<uint16_t> gx(*gpu, x), gout(*gpu, out), gdy(*gpu, dy), gy(*gpu, y0);
  DeviceVec<uint16_t> gp(*gpu, std::vector<uint16_t>(cp.size())), gdp(*gpu, std::vector<uint16_t>(cdp.size()));
  DeviceVec<int32_t> gr(*gpu, cr);
  DeviceVec<float> gw(*gpu, cw), gdw(*gpu, std::vector<float>(cdw.size()));
  auto dev = [](const DeviceVec<uint16_t>& v, int64_t n) { return Tensor(v.get(), DType::bf16, n); };
  gpu->moe_gather(dev(gx, T * D), T, D, K, gr.get(), dev(gp, T * K * D));
  gpu->moe_combine(dev(gout, T * K * D), T, D, K, gr.get(), gw.get(), dev(gy, T * D), true);
  gpu->moe_combine_bwd(dev(gdy, T * D), dev(gout, T * K * D), T, D, K, gr.get(), gw.get(), dev(gdp, T * K * D),
                       gdw.get());
  gpu->synchronize();
  EXPECT_EQ(gp.read(), cp);
  EXPECT_EQ(gy.read(), cy);
  EXPECT_EQ(gdp.read(), cdp);
  EXPECT_EQ(gdw.read(), cdw);
}

// A step of the catalog's tiny-moe (its first layer dense) with offload, fp32 storage and GEMMs,
// and the load-balancing loss's weight `coef`: the CPU backend's loss and gradients, and the
// full-sequence reference's.
// biases: gpt-oss's router and expert biases on tiny-moe, random, and its clamped SwiGLU.
// shared: a shared expert of 48 columns beside the routed ones.
void check_tiny_moe_step(CudaBackend& gpu, CpuBackend& cpu, double coef, bool biases = false, bool shared = false) {
  models::ModelSpec m = models::load_model("tiny-moe");
  m.moe.router_bias = m.moe.expert_bias = biases;
  if (shared) m.moe.shared_experts = 1, m.moe.shared_ffn_hidden = 48;
  if (biases) m.mlp = models::Mlp::gpt_oss, m.swiglu_limit = 0.05;
  step::Config c = test::small_config(48, 16, 8, 1);
  c.router_aux_loss_coef = coef;
  Weights w = random_weights(m, 1234, 0.1f);
  uint64_t seed = 90;
  for (const auto& p : w.layout.params())
    if (biases && p.name.find("mlp.") != std::string::npos && p.name.find(".bias") != std::string::npos) {
      const std::vector<float> b = random_vec(static_cast<size_t>(p.numel), ++seed, 0.3f);
      std::copy(b.begin(), b.end(), w.at(p));
    }
  if (biases) ASSERT_GT(seed, 90u);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, c.context_tokens);
  Engine on_cpu(cpu, m, c, w);
  const double want = on_cpu.step(tokens).loss;
  Engine on_gpu(gpu, m, c, w);
  const double got = on_gpu.step(tokens).loss;
  EXPECT_NEAR(got, want, 1e-5 * want);
  const auto [err, name] = worst_relative_l2(on_gpu.gradients(), on_cpu.gradients());
  EXPECT_LE(err, 1e-4) << "worst tensor " << name;
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens, nullptr, nullptr, coef);
  EXPECT_NEAR(got, ref.loss, 1e-5 * ref.loss);
  const auto [ref_err, ref_name] = worst_relative_l2(on_gpu.gradients(), ref.grads);
  EXPECT_LE(ref_err, 1e-4) << "worst tensor " << ref_name;
  EXPECT_EQ(on_gpu.measured().h2d_bytes, on_cpu.measured().h2d_bytes) << "the same page schedule";
}

TEST_F(CudaMoe, StepMatchesTheCpuBackendAndTheFullSequence) { check_tiny_moe_step(*gpu, cpu, 0); }

// The load-balancing loss's kernels (statistics accumulated, the gradient added) against the CPU's,
// and a step with it (--router-aux-loss) against the CPU backend's and the reference's.
TEST_F(CudaMoe, LoadBalancingLossMatchesTheCpu) {
  const int64_t T = 29, E = 7, K = 2;
  const std::vector<float> logits = random_vec(static_cast<size_t>(T * E), 31);
  std::vector<int32_t> ce(static_cast<size_t>(T * K)), cr(static_cast<size_t>(T * K)), co(static_cast<size_t>(E + 1));
  std::vector<float> cw(static_cast<size_t>(T * K));
  cpu.moe_route(logits.data(), T, E, K, true, ce.data(), cw.data(), cr.data(), co.data());
  std::vector<double> counts(static_cast<size_t>(E), 3.0), probs(static_cast<size_t>(E), 0.25);
  const std::vector<float> shares = random_vec(static_cast<size_t>(E), 32, 0.3f), d0 = random_vec(static_cast<size_t>(T * E), 33);
  std::vector<float> dl = d0;
  DeviceVec<double> gc(*gpu, counts), gp(*gpu, probs);
  cpu.moe_aux_statistics(logits.data(), T, E, K, ce.data(), counts.data(), probs.data());
  cpu.moe_aux_grad(logits.data(), T, E, shares.data(), 0.7f, dl.data());
  DeviceVec<float> gl(*gpu, logits), gs(*gpu, shares), gd(*gpu, d0);
  DeviceVec<int32_t> ge(*gpu, ce);
  gpu->moe_aux_statistics(gl.get(), T, E, K, ge.get(), gc.get(), gp.get());
  gpu->moe_aux_grad(gl.get(), T, E, gs.get(), 0.7f, gd.get());
  gpu->synchronize();
  EXPECT_EQ(gc.read(), counts);
  const std::vector<double> got = gp.read();
  for (int64_t e = 0; e < E; ++e) EXPECT_NEAR(got[static_cast<size_t>(e)], probs[static_cast<size_t>(e)], 1e-12) << e;
  EXPECT_LE(max_abs_diff(gd.read(), dl), 1e-6);
  EXPECT_GT(max_abs_diff(dl, d0), 1e-4) << "the gradient added something";
}

TEST_F(CudaMoe, StepWithTheLoadBalancingLossMatchesTheCpu) { check_tiny_moe_step(*gpu, cpu, 0.5); }

// gpt-oss's experts (router and expert biases, the clamped SwiGLU): the same step on tiny-moe.
TEST_F(CudaMoe, GptOssExpertsStepMatchesTheCpu) { check_tiny_moe_step(*gpu, cpu, 0, true); }

// Shared experts (a dense SwiGLU MLP every token uses, added to the routed combine): the same step.
TEST_F(CudaMoe, SharedExpertsStepMatchesTheCpu) { check_tiny_moe_step(*gpu, cpu, 0, false, true); }

}  // namespace
}  // namespace oomb::executor::cudatest
