// The bf16 tensor-core paged attention (CudaAttentionKernel::bf16_tensor_core, attention_tc.cu)
// against the CPU reference: forward (o, lse) and backward (dq, own dk / dv overwritten, prefix
// gradient pages accumulated onto what they held) on random inputs, head_dim 64 and 128, pages of
// 64 and 128 (and 16 and 100: key tiles spanning pages, pages not a multiple of the tile), ragged
// rows, GQA ratios 1, 2 and 7, dense and selected (one set per query page, and per KV head), empty
// prefix. Also: the tensor-core path really ran (the backend's per-kernel call counts, and results
// that differ from the fp32 kernels' by far more than fp32 rounding), the backward is bit-for-bit
// deterministic, and calls the tensor-core kernels cannot take (head_dim 32, a misaligned buffer)
// run the fp32 kernels with exactly their results.
#include <gtest/gtest.h>

#include <algorithm>

#include "cuda_test_util.h"

namespace oomb::executor::cudatest {
namespace {

// Tolerances (rel_l2, cuda_test_util.h). bf16 keeps 8 significant bits: rounding an O(1) operand
// to bf16 has relative error <= 2^-9 ~ 2e-3, about 1e-3 on average. Each product term q_d k_d of
// a score carries two such errors of random sign, so a head_dim-long fp32 sum has a relative error
// of ~sqrt(2) * 1e-3 (not growing with the length, the signs being random); the outputs inherit
// that once more through P (rounded to bf16 before P V): ~2-3e-3 for o. The gradients add a second
// product level (dP from bf16 dO, V; dS rounded to bf16 before dS K and dS^T Q): ~3-5e-3. These
// are what a CPU emulation of attention_tc.cu (a harness outside the repository: the kernels' own
// code on threads, bf16 rounding where the kernels round, fp32 accumulation, the placement of
// fragment elements scrambled) measured on these shapes:
// o <= 2.5e-3, dq / dk / dv / prefix pages <= 4e-3, lse <= 1e-4. The tolerances leave a factor of
// ~5 for accumulation order and the hardware's exp2. lse is a log of a sum of exponentials: an
// O(1) value whose error is the scores' absolute error, ~1e-3 at most per row, hence its own bound.
// A wrong mask or a lost key tile costs O(1) relative error on the rows it touches (a causal-mask
// off-by-one gave 0.5 on dk in the emulation); a fault confined to a few rows of a large tensor
// could stay under these whole-tensor bounds (rows are not checked one by one: a row attending
// only itself has a dq that cancels to 0 exactly but not in bf16).
constexpr double kTcOutputTol = 1e-2;    // o
constexpr double kTcLseTol = 2e-3;       // lse
constexpr double kTcGradientTol = 2e-2;  // dq, dk, dv, prefix gradient pages
// The fp32 kernels match the CPU to ~1e-5 (attention_test.cpp): a tensor-core result closer than
// this to the fp32 kernels' cannot have gone through bf16.
constexpr double kBf16Evidence = 2e-4;
// fp32 fallback against the CPU: attention_test.cpp's bounds.
constexpr double kFp32ForwardTol = 2e-5;

struct Case {
  const char* name;
  int64_t T, qh, kvh, hd, p, U;
  int select_groups;  // 0 dense, 1 shared, -1 per KV head
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

CudaBackendOptions tc_options() {
  CudaBackendOptions o = test_options();
  o.attention_kernel = CudaAttentionKernel::bf16_tensor_core;
  return o;
}

// One attention problem: host inputs, the CPU reference results, and device copies.
struct Problem {
  Case c;
  int64_t qd, kvd, page;
  std::vector<float> q, k, v, pages, dout, grads0;
  PagedAttention a;  // without pointers
  std::vector<float> o, lse, dq, dk, dv, grads;  // CPU results; grads = grads0 + added

  // sliding_window > 0: a sliding-window layer whose prefix is the U pages right before the chunk.
  explicit Problem(const Case& cs, int64_t sliding_window = 0) : c(cs) {
    qd = c.qh * c.hd;
    kvd = c.kvh * c.hd;
    page = 2 * c.p * kvd;
    const int64_t qpages = (c.T + c.p - 1) / c.p;
    q = random_vec(c.T * qd, 1, 0.5f);
    k = random_vec(c.T * kvd, 2, 0.5f);
    v = random_vec(c.T * kvd, 3);
    pages = random_vec(std::max<int64_t>(c.U * page, 1), 4, 0.5f);
    dout = random_vec(c.T * qd, 5);
    grads0 = random_vec(std::max<int64_t>(c.U * page, 1), 6);  // gradient pages already hold sums
    a.rows = c.T;
    a.q_heads = c.qh;
    a.kv_heads = c.kvh;
    a.head_dim = c.hd;
    a.page_tokens = c.p;
    if (c.select_groups != 0) {
      a.select_groups = c.select_groups == 1 ? 1 : c.kvh;
      a.select = selections(qpages * a.select_groups, c.U, 7);
    }
    if (sliding_window > 0) {
      a.local = models::LayerAttention::sliding;
      a.window = sliding_window;
      a.q_pos0 = c.U * c.p;
      for (int64_t u = 0; u < c.U; ++u) a.prefix_ids.push_back(u);
    }
    PagedAttention ac = a;
    ac.q = q.data();
    ac.k_own = k.data();
    ac.v_own = v.data();
    grads = grads0;
    std::vector<float*> gp;
    for (int64_t u = 0; u < c.U; ++u) {
      ac.prefix_pages.push_back(pages.data() + u * page);
      gp.push_back(grads.data() + u * page);
    }
    o.resize(static_cast<size_t>(c.T * qd));
    lse.resize(static_cast<size_t>(c.T * c.qh));
    dq.resize(o.size());
    dk.resize(k.size());
    dv.resize(v.size());
    CpuBackend cpu;
    cpu.attention_fwd(ac, o.data(), lse.data());
    cpu.attention_bwd(ac, o.data(), lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), gp);
  }
};

// Results of one backend on a Problem: forward, and backward from the CPU's o and lse (so that only
// the backward is compared), with the gradient pages starting from grads0.
struct Results {
  std::vector<float> o, lse, dq, dk, dv, grads;
};

Results run(CudaBackend& gpu, const Problem& pb, int64_t q_offset_floats = 0) {
  const Case& c = pb.c;
  std::vector<float> qpad(static_cast<size_t>(q_offset_floats), 0.0f);
  qpad.insert(qpad.end(), pb.q.begin(), pb.q.end());
  DeviceVec<float> d_q(gpu, qpad), d_k(gpu, pb.k), d_v(gpu, pb.v), d_pages(gpu, pb.pages), d_dout(gpu, pb.dout),
      d_grads(gpu, pb.grads0);
  DeviceVec<float> d_o(gpu, std::vector<float>(pb.o.size())), d_lse(gpu, std::vector<float>(pb.lse.size())),
      d_dq(gpu, std::vector<float>(pb.dq.size(), 9.0f)), d_dk(gpu, std::vector<float>(pb.dk.size(), 9.0f)),
      d_dv(gpu, std::vector<float>(pb.dv.size(), 9.0f));  // 9: the backward must overwrite
  DeviceVec<float> d_oc(gpu, pb.o), d_lsec(gpu, pb.lse);
  PagedAttention ag = pb.a;
  ag.q = d_q.get() + q_offset_floats;
  ag.k_own = d_k.get();
  ag.v_own = d_v.get();
  std::vector<float*> gpg;
  for (int64_t u = 0; u < c.U; ++u) {
    ag.prefix_pages.push_back(d_pages.get() + u * pb.page);
    gpg.push_back(d_grads.get() + u * pb.page);
  }
  gpu.attention_fwd(ag, d_o.get(), d_lse.get());
  gpu.attention_bwd(ag, d_oc.get(), d_lsec.get(), d_dout.get(), d_dq.get(), d_dk.get(), d_dv.get(), gpg);
  return {d_o.read(), d_lse.read(), d_dq.read(), d_dk.read(), d_dv.read(), d_grads.read()};
}

// What the backward added to the gradient pages.
std::vector<float> added(const std::vector<float>& grads, const std::vector<float>& grads0) {
  std::vector<float> d(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) d[i] = grads[i] - grads0[i];
  return d;
}

class CudaAttentionTc : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    OOMB_REQUIRE_CUDA();
    gpu = std::make_unique<CudaBackend>(tc_options());
  }
  std::unique_ptr<CudaBackend> gpu;
};

TEST_P(CudaAttentionTc, ForwardAndBackwardMatchTheCpuWithinBf16Tolerance) {
  const Problem pb(GetParam());
  const int64_t tc0 = gpu->attention_calls(CudaAttentionKernel::bf16_tensor_core);
  const Results r = run(*gpu, pb);
  EXPECT_EQ(gpu->attention_calls(CudaAttentionKernel::bf16_tensor_core) - tc0, 2) << "fwd and bwd on tensor cores";
  EXPECT_EQ(gpu->attention_calls(CudaAttentionKernel::fp32), 0);
  EXPECT_LE(rel_l2(r.o, pb.o), kTcOutputTol) << "o";
  EXPECT_LE(rel_l2(r.lse, pb.lse), kTcLseTol) << "lse";
  EXPECT_LE(rel_l2(r.dq, pb.dq), kTcGradientTol) << "dq";
  EXPECT_LE(rel_l2(r.dk, pb.dk), kTcGradientTol) << "dk own";
  EXPECT_LE(rel_l2(r.dv, pb.dv), kTcGradientTol) << "dv own";
  if (pb.c.U > 0) {
    EXPECT_LE(rel_l2(added(r.grads, pb.grads0), added(pb.grads, pb.grads0)), kTcGradientTol) << "prefix dK/dV";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttentionTc,
    ::testing::Values(
        // name, T, qh, kvh, hd, p, U, select
        Case{"hd64_p64_gqa1_dense", 100, 2, 2, 64, 64, 2, 0},
        Case{"hd64_p128_gqa2_shared", 300, 4, 2, 64, 128, 3, 1},
        Case{"hd64_p16_gqa7_ragged_shared", 37, 14, 2, 64, 16, 5, 1},
        Case{"hd64_one_row", 1, 1, 1, 64, 128, 2, 0},
        Case{"hd128_p64_gqa7_shared", 150, 7, 1, 128, 64, 3, 1},
        Case{"hd128_p128_gqa2_per_head", 200, 4, 2, 128, 128, 2, -1},
        Case{"hd128_p100_gqa7_per_head", 130, 14, 2, 128, 100, 3, -1},
        Case{"hd128_p8_no_prefix", 21, 4, 2, 128, 8, 0, 0},
        Case{"hd128_p64_gqa1_dense_ragged", 195, 3, 3, 128, 64, 4, 0},
        Case{"qwen_shapes", 512, 28, 4, 128, 128, 4, 1}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

class CudaAttentionTcPath : public ::testing::Test {
 protected:
  void SetUp() override {
    OOMB_REQUIRE_CUDA();
    tc = std::make_unique<CudaBackend>(tc_options());
    fp32 = std::make_unique<CudaBackend>(test_options());
  }
  std::unique_ptr<CudaBackend> tc, fp32;
};

// The bf16 path is observably not the fp32 one: its results are further from the fp32 kernels'
// than fp32 rounding could explain, but within the bf16 tolerance.
TEST_F(CudaAttentionTcPath, DiffersFromFp32ByBf16Rounding) {
  const Problem pb(Case{"evidence", 150, 7, 1, 128, 64, 3, 1});
  const Results rt = run(*tc, pb), rf = run(*fp32, pb);
  EXPECT_EQ(fp32->attention_calls(CudaAttentionKernel::bf16_tensor_core), 0);
  EXPECT_GT(rel_l2(rt.o, rf.o), kBf16Evidence) << "o";
  EXPECT_GT(rel_l2(rt.dq, rf.dq), kBf16Evidence) << "dq";
  EXPECT_GT(rel_l2(rt.dk, rf.dk), kBf16Evidence) << "dk";
  EXPECT_LE(rel_l2(rt.o, rf.o), kTcOutputTol) << "o";
  EXPECT_LE(rel_l2(rt.dq, rf.dq), kTcGradientTol) << "dq";
}

// The backward owns every gradient element in exactly one block (no atomics): two runs agree bit
// for bit, prefix gradient pages included.
TEST_F(CudaAttentionTcPath, BackwardIsDeterministic) {
  const Problem pb(Case{"determinism", 260, 14, 2, 128, 64, 4, -1});
  const Results a = run(*tc, pb), b = run(*tc, pb);
  EXPECT_EQ(a.dq, b.dq);
  EXPECT_EQ(a.dk, b.dk);
  EXPECT_EQ(a.dv, b.dv);
  EXPECT_EQ(a.grads, b.grads);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
}

// head_dim 32 has no tensor-core kernel: the option falls back to the fp32 kernels, whose results
// (deterministic) are exactly those of a backend left at the fp32 default.
TEST_F(CudaAttentionTcPath, UnsupportedHeadDimFallsBackToFp32) {
  const Problem pb(Case{"hd32", 70, 4, 2, 32, 16, 3, 1});
  const Results rt = run(*tc, pb), rf = run(*fp32, pb);
  EXPECT_EQ(tc->attention_calls(CudaAttentionKernel::bf16_tensor_core), 0);
  EXPECT_EQ(tc->attention_calls(CudaAttentionKernel::fp32), 2);
  EXPECT_EQ(rt.o, rf.o);
  EXPECT_EQ(rt.lse, rf.lse);
  EXPECT_EQ(rt.dq, rf.dq);
  EXPECT_EQ(rt.dk, rf.dk);
  EXPECT_EQ(rt.dv, rf.dv);
  EXPECT_EQ(rt.grads, rf.grads);
  EXPECT_LE(rel_l2(rt.o, pb.o), kFp32ForwardTol) << "o";
}

// A sliding-window layer runs on the fp32 kernels (the tensor-core ones test causality only): the
// fp32 backend's numbers, and the CPU's within fp32 tolerance.
TEST_F(CudaAttentionTcPath, LocalLayerFallsBackToFp32) {
  const Problem pb(Case{"sliding", 70, 4, 2, 64, 16, 3, 0}, 29);
  const Results rt = run(*tc, pb), rf = run(*fp32, pb);
  EXPECT_EQ(tc->attention_calls(CudaAttentionKernel::bf16_tensor_core), 0);
  EXPECT_EQ(tc->attention_calls(CudaAttentionKernel::fp32), 2);
  EXPECT_EQ(rt.o, rf.o);
  EXPECT_EQ(rt.dq, rf.dq);
  EXPECT_EQ(rt.grads, rf.grads);
  EXPECT_LE(rel_l2(rt.o, pb.o), kFp32ForwardTol) << "o";
  EXPECT_LE(rel_l2(rt.dq, pb.dq), kFp32ForwardTol * 4) << "dq";
}

// The tensor-core kernels read float4 rows: a query buffer starting 4 bytes into an allocation
// makes the call fall back to fp32 (not fault or read misaligned).
TEST_F(CudaAttentionTcPath, MisalignedBufferFallsBackToFp32) {
  const Problem pb(Case{"misaligned", 40, 4, 2, 64, 16, 2, 0});
  const Results rt = run(*tc, pb, 1), rf = run(*fp32, pb, 1);
  EXPECT_EQ(tc->attention_calls(CudaAttentionKernel::bf16_tensor_core), 0);
  EXPECT_EQ(tc->attention_calls(CudaAttentionKernel::fp32), 2);
  EXPECT_EQ(rt.o, rf.o);
  EXPECT_EQ(rt.dq, rf.dq);
  EXPECT_LE(rel_l2(rt.o, pb.o), kFp32ForwardTol) << "o";
}

}  // namespace
}  // namespace oomb::executor::cudatest
