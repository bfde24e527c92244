// Every model op of the CUDA backend against the CPU reference backend on random inputs, at edge
// sizes (1, 3, 7, 17 rows; odd widths) and a realistic one. Attention, selection and bf16 pages
// (bf16_pages_test.cpp) have their own files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cudatest {
namespace {

// Tolerances (relative L2 unless named otherwise), with the reason for each.
constexpr double kExact = 0.0;             // pure data movement: bit-identical
constexpr double kElementwiseTol = 2e-6;   // expf / sincos vs the CPU's exp: a few ulp per element
constexpr double kReductionTol = 1e-5;     // fp32 sums in a different order (rows up to ~4K wide)
constexpr double kGemmFp32Tol = 1e-5;      // cuBLASLt fp32 vs Eigen: summation order only
constexpr double kGemmTf32Tol = 5e-3;      // TF32 inputs keep 10 mantissa bits (2^-11 relative)
// bf16 GEMMs against the CPU on the same fp32 inputs: both operands rounded to 8 significant bits
// (unit roundoff u = 2^-9; uniform rounding errors have RMS u / sqrt(3) ~ 1.1e-3 each, ~1.6e-3 for a
// product of two), accumulation fp32. The relative L2 error of a random-sign dot product is the
// per-term RMS, ~1.6e-3 .. 2.5e-3. Measured with a CPU emulation of exactly these inputs (operands
// rounded with runtime/bf16.h, products in fp32; an experiment outside the repository): 1.6e-3 ..
// 3.5e-3 over the shapes of LinearForwardAndBackwardBf16 (worst: 1 row, 9 -> 5, dx). 1e-2 >= 2.9x.
constexpr double kGemmBf16Tol = 1e-2;
// The same bf16 GEMMs against the CPU on the bf16-rounded operands: the operands are then identical
// and bf16 x bf16 products exact in fp32, so only the fp32 summation order (tensor-core accumulation,
// cuBLASLt's split of k) differs: 1e-4, far below the bf16 effect above.
constexpr double kGemmBf16EmulatedTol = 1e-4;
// Proof that the operands were rounded: the bf16 result differs from the fp32 one by far more than
// fp32 rounding (kGemmFp32Tol); the emulation's smallest difference on these shapes is 1.6e-3.
constexpr double kGemmBf16DiffersMin = 1e-4;
constexpr double kAtomicTol = 1e-6;        // atomically accumulated sums (order unspecified)
constexpr double kLossRelTol = 1e-6;       // cross-entropy loss sum (double accumulation on both)

const int64_t kRows[] = {1, 3, 7, 17, 256};

class CudaOps : public CudaTest {};

TEST_F(CudaOps, EmbeddingForwardIsExactAndBackwardScatterAdds) {
  const int64_t vocab = 13, hidden = 37;
  for (int64_t rows : kRows) {
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7 + 3) % vocab);
    const auto table = random_vec(vocab * hidden, 1), dout = random_vec(rows * hidden, 2);
    std::vector<float> y(rows * hidden), dt = random_vec(vocab * hidden, 3);
    DeviceVec<int32_t> d_ids(*gpu, ids);
    DeviceVec<float> d_table(*gpu, table), d_y(*gpu, y), d_dout(*gpu, dout), d_dt(*gpu, dt);
    cpu.embedding_fwd(ids.data(), rows, table.data(), hidden, y.data());
    gpu->embedding_fwd(d_ids.get(), rows, d_table.get(), hidden, d_y.get());
    EXPECT_EQ(rel_l2(d_y.read(), y), kExact) << rows;
    cpu.embedding_bwd(ids.data(), rows, dout.data(), hidden, dt.data());
    gpu->embedding_bwd(d_ids.get(), rows, d_dout.get(), hidden, d_dt.get());
    EXPECT_LE(rel_l2(d_dt.read(), dt), kAtomicTol) << rows;
  }
}

// Tensor parallelism's vocabulary-parallel embedding: a negative id (another rank's token) is a
// zero row and adds no gradient, fp32 and bf16 tables, as on the CPU backend.
TEST_F(CudaOps, EmbeddingNegativeIdsAreZeroRowsWithoutGradient) {
  const int64_t vocab = 13, hidden = 37;
  for (int64_t rows : kRows) {
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) ids[static_cast<size_t>(t)] = t % 3 == 1 ? -1 : static_cast<int32_t>((t * 5) % vocab);
    if (rows == 1) ids[0] = -1;
    const auto table = random_vec(vocab * hidden, 4), dout = random_vec(rows * hidden, 5);
    std::vector<float> y(rows * hidden, 9.0f), dt = random_vec(vocab * hidden, 6);
    DeviceVec<int32_t> d_ids(*gpu, ids);
    DeviceVec<float> d_table(*gpu, table), d_y(*gpu, y), d_dout(*gpu, dout), d_dt(*gpu, dt);
    cpu.embedding_fwd(ids.data(), rows, table.data(), hidden, y.data());
    gpu->embedding_fwd(d_ids.get(), rows, d_table.get(), hidden, d_y.get());
    const auto got = d_y.read();
    EXPECT_EQ(rel_l2(got, y), kExact) << rows;
    for (int64_t t = 0; t < rows; ++t) {
      if (ids[static_cast<size_t>(t)] >= 0) continue;
      for (int64_t i = 0; i < hidden; ++i) EXPECT_EQ(got[static_cast<size_t>(t * hidden + i)], 0.0f);
    }
    const std::vector<float> dt0 = dt;
    cpu.embedding_bwd(ids.data(), rows, dout.data(), hidden, dt.data());
    gpu->embedding_bwd(d_ids.get(), rows, d_dout.get(), hidden, d_dt.get());
    EXPECT_LE(rel_l2(d_dt.read(), dt), kAtomicTol) << rows;
    if (rows == 1) {
      EXPECT_EQ(d_dt.read(), dt0) << "a lone foreign token adds nothing";
    }
    // bf16 table and its gradient: the same rows, bit for bit the CPU's.
    std::vector<uint16_t> tb(table.size()), gb(dt0.size());
    f32_to_bf16(table.data(), tb.data(), vocab * hidden);
    f32_to_bf16(dt0.data(), gb.data(), vocab * hidden);
    std::vector<uint16_t> yb(static_cast<size_t>(rows * hidden)), gcpu = gb;
    DeviceVec<uint16_t> d_tb(*gpu, tb), d_yb(*gpu, yb), d_gb(*gpu, gb);
    cpu.embedding_fwd(ids.data(), rows, ConstTensor(tb.data(), DType::bf16), hidden, Tensor(yb.data(), DType::bf16));
    gpu->embedding_fwd(d_ids.get(), rows, ConstTensor(d_tb.get(), DType::bf16), hidden,
                       Tensor(d_yb.get(), DType::bf16));
    EXPECT_EQ(d_yb.read(), yb) << rows;
    cpu.embedding_bwd(ids.data(), rows, dout.data(), hidden, Tensor(gcpu.data(), DType::bf16));
    gpu->embedding_bwd(d_ids.get(), rows, d_dout.get(), hidden, Tensor(d_gb.get(), DType::bf16));
    EXPECT_EQ(d_gb.read(), gcpu) << rows;
  }
}

TEST_F(CudaOps, RmsNormForwardAndBackward) {
  for (int64_t dim : {1, 7, 64, 3584}) {
    for (int64_t rows : kRows) {
      const auto x = random_vec(rows * dim, 10), w = random_vec(dim, 11), dy = random_vec(rows * dim, 12);
      auto dx = random_vec(rows * dim, 13), dw = random_vec(dim, 14);
      std::vector<float> y(rows * dim), rstd(rows);
      DeviceVec<float> d_x(*gpu, x), d_w(*gpu, w), d_dy(*gpu, dy), d_dx(*gpu, dx), d_dw(*gpu, dw), d_y(*gpu, y),
          d_rstd(*gpu, rstd);
      cpu.rmsnorm_fwd(x.data(), w.data(), rows, dim, 1e-6f, y.data(), rstd.data());
      gpu->rmsnorm_fwd(d_x.get(), d_w.get(), rows, dim, 1e-6f, d_y.get(), d_rstd.get());
      EXPECT_LE(rel_l2(d_y.read(), y), kReductionTol) << rows << "x" << dim;
      EXPECT_LE(rel_l2(d_rstd.read(), rstd), kReductionTol) << rows << "x" << dim;
      cpu.rmsnorm_bwd(x.data(), w.data(), rstd.data(), dy.data(), rows, dim, dx.data(), dw.data());
      gpu->rmsnorm_bwd(d_x.get(), d_w.get(), d_rstd.get(), d_dy.get(), rows, dim, d_dx.get(), d_dw.get());
      EXPECT_LE(rel_l2(d_dx.read(), dx), kReductionTol) << rows << "x" << dim;
      EXPECT_LE(rel_l2(d_dw.read(), dw), kReductionTol) << rows << "x" << dim;
    }
  }
}

// ||a - b|| relative to ||scale|| (floored like rel_l2): for a result that accumulates onto an
// existing value, whose rounding error is bounded by the magnitude of the terms summed, not by the
// result, which can cancel.
double rel_l2_of(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& scale) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(scale[i]) * scale[i];
  }
  return std::sqrt(num / std::max(den, kRmsFloor * kRmsFloor * static_cast<double>(a.size())));
}

std::vector<float> abs_of(std::vector<float> v) {
  for (float& x : v) x = std::abs(x);
  return v;
}

void check_linear(CudaBackend& gpu, CpuBackend& cpu, double tol) {
  for (auto [in, out] : {std::pair<int64_t, int64_t>{1, 1}, {7, 3}, {17, 33}, {64, 96}, {129, 513}}) {
    for (int64_t rows : kRows) {
      const auto x = random_vec(rows * in, 20), w = random_vec(out * in, 21), b = random_vec(out, 22),
                 dy = random_vec(rows * out, 23);
      auto dx = random_vec(rows * in, 24), dw = random_vec(out * in, 25), db = random_vec(out, 26);
      std::vector<float> y(rows * out);
      DeviceVec<float> d_x(gpu, x), d_w(gpu, w), d_b(gpu, b), d_dy(gpu, dy), d_dx(gpu, dx), d_dw(gpu, dw),
          d_db(gpu, db), d_y(gpu, y);
      const std::string what = std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out);
      cpu.linear_fwd(x.data(), rows, in, w.data(), b.data(), out, y.data());
      gpu.linear_fwd(d_x.get(), rows, in, d_w.get(), d_b.get(), out, d_y.get());
      EXPECT_LE(rel_l2(d_y.read(), y), tol) << what;
      cpu.linear_fwd(x.data(), rows, in, w.data(), nullptr, out, y.data());
      gpu.linear_fwd(d_x.get(), rows, in, d_w.get(), nullptr, out, d_y.get());
      EXPECT_LE(rel_l2(d_y.read(), y), tol) << what << " (no bias)";
      // dw accumulates onto its random start: its error is judged against the terms summed, |dw| +
      // |dy|^T |x| (the emulated device's TF32 run found a 1 x 1 -> 1 case whose sum is 7x smaller
      // than its terms, so that the TF32 rounding of the product, 2^-11 of the terms, was 6.4e-3 of
      // the result).
      auto dw_terms = abs_of(dw), dx_unused = dx, db_unused = db;
      for (bool acc : {false, true}) {
        const auto ax = abs_of(x), ady = abs_of(dy);
        cpu.linear_bwd(ax.data(), rows, in, w.data(), out, ady.data(), dx_unused.data(), false, dw_terms.data(),
                       db_unused.data());
        cpu.linear_bwd(x.data(), rows, in, w.data(), out, dy.data(), dx.data(), acc, dw.data(), db.data());
        gpu.linear_bwd(d_x.get(), rows, in, d_w.get(), out, d_dy.get(), d_dx.get(), acc, d_dw.get(), d_db.get());
        EXPECT_LE(rel_l2(d_dx.read(), dx), tol) << what << " acc " << acc;
        EXPECT_LE(rel_l2_of(d_dw.read(), dw, dw_terms), tol) << what;
        EXPECT_LE(rel_l2(d_db.read(), db), std::max(tol, kAtomicTol)) << what;
      }
    }
  }
}

TEST_F(CudaOps, LinearForwardAndBackwardFp32) { check_linear(*gpu, cpu, kGemmFp32Tol); }

TEST_F(CudaOps, LinearForwardAndBackwardTf32) {
  CudaBackend tf32(test_options(CudaGemmPrecision::tf32));
  check_linear(tf32, cpu, kGemmTf32Tol);
}

// x rounded to bf16 and back (runtime/bf16.h's routine: what launch_to_bf16 stores).
std::vector<float> bf16_rounded(std::vector<float> v) {
  for (auto& x : v) x = round_to_bf16(x);
  return v;
}

TEST_F(CudaOps, LinearForwardAndBackwardBf16) {
  CudaBackend bf16(test_options(CudaGemmPrecision::bf16));
  int64_t gemms = 0;
  // Odd shapes: in / out not multiples of 8 (the bf16 copies are padded, C is not), 1 and 37 rows.
  for (auto [in, out] : {std::pair<int64_t, int64_t>{7, 3}, {9, 5}, {17, 33}, {64, 96}, {129, 513}}) {
    for (int64_t rows : {1, 37, 256}) {
      const auto x = random_vec(rows * in, 20), w = random_vec(out * in, 21), b = random_vec(out, 22),
                 dy = random_vec(rows * out, 23);
      const auto xr = bf16_rounded(x), wr = bf16_rounded(w), dyr = bf16_rounded(dy);
      const std::string what = std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out);
      for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
        std::vector<float> y(rows * out), ye(rows * out);
        DeviceVec<float> d_x(bf16, x), d_w(bf16, w), d_b(bf16, b), d_y(bf16, y), d_y32(*gpu, y);
        DeviceVec<float> g_x(*gpu, x), g_w(*gpu, w), g_b(*gpu, b);
        cpu.linear_fwd(x.data(), rows, in, w.data(), bias, out, y.data());
        cpu.linear_fwd(xr.data(), rows, in, wr.data(), bias, out, ye.data());
        bf16.linear_fwd(d_x.get(), rows, in, d_w.get(), bias ? d_b.get() : nullptr, out, d_y.get());
        gpu->linear_fwd(g_x.get(), rows, in, g_w.get(), bias ? g_b.get() : nullptr, out, d_y32.get());
        ++gemms;
        const auto got = d_y.read();
        const std::string w_ = what + (bias ? " (bias)" : " (no bias)");
        EXPECT_LE(rel_l2(got, y), kGemmBf16Tol) << w_;
        EXPECT_LE(rel_l2(got, ye), kGemmBf16EmulatedTol) << w_ << ": not the product of the bf16-rounded operands";
        EXPECT_GT(rel_l2(got, d_y32.read()), kGemmBf16DiffersMin) << w_ << ": no different from the fp32 GEMM";
      }
      for (bool acc : {false, true}) {
        auto dx = random_vec(rows * in, 24), dw = random_vec(out * in, 25), db = random_vec(out, 26);
        auto dxe = dx, dwe = dw;
        DeviceVec<float> d_x(bf16, x), d_w(bf16, w), d_dy(bf16, dy), d_dx(bf16, dx), d_dw(bf16, dw), d_db(bf16, db);
        cpu.linear_bwd(x.data(), rows, in, w.data(), out, dy.data(), dx.data(), acc, dw.data(), db.data());
        // The emulation: bf16-rounded operands; the bias gradient sums the fp32 dy (as the backend does).
        cpu.linear_bwd(xr.data(), rows, in, wr.data(), out, dyr.data(), dxe.data(), acc, dwe.data(), nullptr);
        bf16.linear_bwd(d_x.get(), rows, in, d_w.get(), out, d_dy.get(), d_dx.get(), acc, d_dw.get(), d_db.get());
        gemms += 2;
        const auto got_dx = d_dx.read(), got_dw = d_dw.read();
        const std::string w_ = what + " acc " + std::to_string(acc);
        EXPECT_LE(rel_l2(got_dx, dx), kGemmBf16Tol) << w_;
        EXPECT_LE(rel_l2(got_dw, dw), kGemmBf16Tol) << w_;
        EXPECT_LE(rel_l2(got_dx, dxe), kGemmBf16EmulatedTol) << w_ << " dx";
        EXPECT_LE(rel_l2(got_dw, dwe), kGemmBf16EmulatedTol) << w_ << " dw";
        EXPECT_GT(rel_l2(got_dx, dx), kGemmBf16DiffersMin) << w_ << ": dx no different from fp32";
        EXPECT_GT(rel_l2(got_dw, dw), kGemmBf16DiffersMin) << w_ << ": dW no different from fp32";
        EXPECT_LE(rel_l2(d_db.read(), db), kAtomicTol) << w_ << " db (fp32 dy)";
      }
    }
  }
  EXPECT_EQ(bf16.gemm_calls(CudaGemmPrecision::bf16), gemms) << "every GEMM in bf16 (no fp32 fallback)";
  EXPECT_EQ(bf16.gemm_calls(CudaGemmPrecision::fp32), 0);
  EXPECT_EQ(bf16.gemm_calls(CudaGemmPrecision::tf32), 0);
  EXPECT_EQ(gpu->gemm_calls(CudaGemmPrecision::bf16), 0) << "the default backend's GEMMs are fp32";
  EXPECT_GT(gpu->gemm_calls(CudaGemmPrecision::fp32), 0);
}

TEST_F(CudaOps, Bf16LinearOnMisalignedParameterSlices) {
  // W and dW at odd float offsets (4-byte aligned): the bf16 copy of W is aligned by construction,
  // the fp32 dW (C) is not; cuBLASLt is asked with its alignment and should still run bf16.
  CudaBackend bf16(test_options(CudaGemmPrecision::bf16));
  const int64_t rows = 37, in = 9, out = 5;
  const auto flat = random_vec(1 + out * in, 30), x = random_vec(rows * in, 31), dy = random_vec(rows * out, 32);
  const std::vector<float> w(flat.begin() + 1, flat.end());
  std::vector<float> y(rows * out), dx(rows * in), dw(out * in, 0.0f), dw_flat(1 + out * in, 0.0f);
  DeviceVec<float> d_flat(bf16, flat), d_x(bf16, x), d_y(bf16, y), d_dy(bf16, dy), d_dx(bf16, dx),
      d_dw(bf16, dw_flat);
  cpu.linear_fwd(x.data(), rows, in, w.data(), nullptr, out, y.data());
  bf16.linear_fwd(d_x.get(), rows, in, d_flat.get() + 1, nullptr, out, d_y.get());
  EXPECT_LE(rel_l2(d_y.read(), y), kGemmBf16Tol);
  cpu.linear_bwd(x.data(), rows, in, w.data(), out, dy.data(), dx.data(), false, dw.data(), nullptr);
  bf16.linear_bwd(d_x.get(), rows, in, d_flat.get() + 1, out, d_dy.get(), d_dx.get(), false, d_dw.get() + 1, nullptr);
  const auto got = d_dw.read();
  EXPECT_LE(rel_l2(std::vector<float>(got.begin() + 1, got.end()), dw), kGemmBf16Tol);
  EXPECT_EQ(got[0], 0.0f) << "wrote before the slice";
  EXPECT_LE(rel_l2(d_dx.read(), dx), kGemmBf16Tol);
  // Which precision ran is what this test is about: a 4-byte-aligned fp32 C with bf16 A / B.
  EXPECT_EQ(bf16.gemm_calls(CudaGemmPrecision::bf16), 3) << "fell back to fp32 on a misaligned C";
  EXPECT_EQ(bf16.gemm_calls(CudaGemmPrecision::fp32), 0);
}

TEST_F(CudaOps, LinearOnMisalignedParameterSlices) {
  // Parameters live at arbitrary float offsets of one flat buffer: cuBLASLt must not assume 16 bytes.
  const int64_t rows = 7, in = 9, out = 5;
  const auto flat = random_vec(1 + out * in, 30), x = random_vec(rows * in, 31);
  const std::vector<float> w(flat.begin() + 1, flat.end());
  std::vector<float> y(rows * out);
  DeviceVec<float> d_flat(*gpu, flat), d_x(*gpu, x), d_y(*gpu, y);
  cpu.linear_fwd(x.data(), rows, in, w.data(), nullptr, out, y.data());
  gpu->linear_fwd(d_x.get(), rows, in, d_flat.get() + 1, nullptr, out, d_y.get());
  EXPECT_LE(rel_l2(d_y.read(), y), kGemmFp32Tol);
}

TEST_F(CudaOps, RopeForwardAndBackward) {
  // Plain RoPE and Llama 3.1's llama3 scaling (factor 8, low 1, high 4, original 8192).
  models::Rope llama3(5e5);
  llama3.factor = 8.0, llama3.low_freq_factor = 1.0, llama3.high_freq_factor = 4.0, llama3.original_max_position = 8192;
  // YaRN (Qwen3's 128K scaling: factor 4 from 32768, attention factor 0.1 ln 4 + 1).
  models::Rope yarn(1e6);
  yarn.factor = 4.0, yarn.yarn_original_max_position = 32768, yarn.attention_factor = 0.1 * std::log(4.0) + 1.0;
  // Linear (Gemma 3's global layers: factor 8).
  models::Rope linear(1e6);
  linear.linear = true, linear.factor = 8.0;
  for (const models::Rope& rope : {models::Rope(1e6), llama3, yarn, linear}) {
    for (int64_t hd : {2, 8, 64, 128}) {
      for (int64_t rows : kRows) {
        for (int64_t pos0 : {int64_t{0}, int64_t{4093}, int64_t{4194000}}) {
          const int64_t heads = 3;
          auto x = random_vec(rows * heads * hd, 40);
          DeviceVec<float> d_x(*gpu, x);
          cpu.rope_fwd(x.data(), rows, heads, hd, pos0, rope);
          gpu->rope_fwd(d_x.get(), rows, heads, hd, pos0, rope);
          EXPECT_LE(rel_l2(d_x.read(), x), kElementwiseTol)
              << rows << " hd " << hd << " pos " << pos0 << " llama3 " << rope.llama3();
          cpu.rope_bwd(x.data(), rows, heads, hd, pos0, rope);
          gpu->rope_bwd(d_x.get(), rows, heads, hd, pos0, rope);
          EXPECT_LE(rel_l2(d_x.read(), x), kElementwiseTol)
              << rows << " hd " << hd << " pos " << pos0 << " llama3 " << rope.llama3();
        }
      }
    }
  }
}

TEST_F(CudaOps, SwigluForwardAndBackward) {
  for (int64_t n : {1, 3, 7, 17, 100003}) {
    const auto g = random_vec(n, 50, 3.0f), u = random_vec(n, 51), d = random_vec(n, 52);
    std::vector<float> out(n), dg(n), du(n);
    DeviceVec<float> d_g(*gpu, g), d_u(*gpu, u), d_d(*gpu, d), d_out(*gpu, out), d_dg(*gpu, dg), d_du(*gpu, du);
    cpu.swiglu_fwd(g.data(), u.data(), n, out.data());
    gpu->swiglu_fwd(d_g.get(), d_u.get(), n, d_out.get());
    EXPECT_LE(rel_l2(d_out.read(), out), kElementwiseTol) << n;
    cpu.swiglu_bwd(g.data(), u.data(), d.data(), n, dg.data(), du.data());
    gpu->swiglu_bwd(d_g.get(), d_u.get(), d_d.get(), n, d_dg.get(), d_du.get());
    EXPECT_LE(rel_l2(d_dg.read(), dg), kElementwiseTol) << n;
    EXPECT_LE(rel_l2(d_du.read(), du), kElementwiseTol) << n;
    // gpt-oss's clamped variant (limit 1.5: a share of both operands beyond their clamps).
    const float limit = 1.5f;
    cpu.swiglu_fwd(g.data(), u.data(), n, out.data(), limit);
    gpu->swiglu_fwd(d_g.get(), d_u.get(), n, d_out.get(), limit);
    EXPECT_LE(rel_l2(d_out.read(), out), kElementwiseTol) << n << " clamped";
    cpu.swiglu_bwd(g.data(), u.data(), d.data(), n, dg.data(), du.data(), limit);
    gpu->swiglu_bwd(d_g.get(), d_u.get(), d_d.get(), n, d_dg.get(), d_du.get(), limit);
    EXPECT_LE(rel_l2(d_dg.read(), dg), kElementwiseTol) << n << " clamped";
    EXPECT_LE(rel_l2(d_du.read(), du), kElementwiseTol) << n << " clamped";
    // GeGLU (Gemma's MLP).
    cpu.geglu_fwd(g.data(), u.data(), n, out.data());
    gpu->geglu_fwd(d_g.get(), d_u.get(), n, d_out.get());
    EXPECT_LE(rel_l2(d_out.read(), out), kElementwiseTol) << n << " geglu";
    cpu.geglu_bwd(g.data(), u.data(), d.data(), n, dg.data(), du.data());
    gpu->geglu_bwd(d_g.get(), d_u.get(), d_d.get(), n, d_dg.get(), d_du.get());
    EXPECT_LE(rel_l2(d_dg.read(), dg), kElementwiseTol) << n << " geglu";
    EXPECT_LE(rel_l2(d_du.read(), du), kElementwiseTol) << n << " geglu";
  }
}

TEST_F(CudaOps, AddCopyScaleAreExact) {
  for (int64_t n : {1, 3, 7, 17, 1000001}) {
    auto y = random_vec(n, 60);
    const auto x = random_vec(n, 61);
    std::vector<float> z(n);
    DeviceVec<float> d_y(*gpu, y), d_x(*gpu, x), d_z(*gpu, z);
    cpu.add(y.data(), x.data(), n);
    gpu->add(d_y.get(), d_x.get(), n);
    EXPECT_EQ(rel_l2(d_y.read(), y), kExact) << n;
    cpu.scale(y.data(), n, 0.37f);
    gpu->scale(d_y.get(), n, 0.37f);
    EXPECT_EQ(rel_l2(d_y.read(), y), kExact) << n;
    cpu.copy(z.data(), y.data(), n);
    gpu->copy(d_z.get(), d_y.get(), n);
    EXPECT_EQ(rel_l2(d_z.read(), z), kExact) << n;
  }
}

TEST_F(CudaOps, CrossEntropyLossAndGradient) {
  for (int64_t vocab : {2, 61, 1000, 152064}) {
    for (int64_t rows : {1, 3, 7, 17}) {
      auto logits = random_vec(rows * vocab, 70, 4.0f);
      std::vector<int32_t> targets(static_cast<size_t>(rows));
      for (int64_t t = 0; t < rows; ++t)
        targets[static_cast<size_t>(t)] = t == 1 ? -1 : static_cast<int32_t>((t * 7919) % vocab);  // one unlabelled
      DeviceVec<float> d_logits(*gpu, logits);
      DeviceVec<int32_t> d_targets(*gpu, targets);
      const double lc = cpu.cross_entropy(logits.data(), rows, vocab, targets.data(), 0.25f, logits.data());
      const double lg =
          gpu->cross_entropy(d_logits.get(), rows, vocab, d_targets.get(), 0.25f, d_logits.get());
      EXPECT_NEAR(lg, lc, kLossRelTol * std::abs(lc)) << rows << "x" << vocab;
      EXPECT_LE(rel_l2(d_logits.read(), logits), kReductionTol) << rows << "x" << vocab;
    }
  }
}

// More rows than the grid's y limit of row tiles of 64 (on a GPU 65,535 tiles; q/k-norm at 64K tokens
// x 64 heads is 4,194,304 rows): the weight gradient's grid is capped in y and its blocks stride
// over the rest (launch_shape.h). All ones: each column's dw is the row count, exact in fp32 (tiles
// of 64 summed, < 2^24 in all).
TEST_F(CudaOps, RmsNormWeightGradientPastTheGridLimitCoversEveryRow) {
  OOMB_SKIP_AT_THE_HARDWARE_GRID_LIMIT_ON_EMULATED_DEVICE();
  const int64_t rows = (grid_yz_limit() + 1) * 64 + 17, dim = 3;
  const std::vector<float> ones(static_cast<size_t>(rows * dim), 1.0f), rstd(static_cast<size_t>(rows), 1.0f);
  const std::vector<float> w(static_cast<size_t>(dim), 1.0f), dw(static_cast<size_t>(dim), 0.0f);
  DeviceVec<float> d_x(*gpu, ones), d_dy(*gpu, ones), d_dx(*gpu, ones), d_w(*gpu, w), d_rstd(*gpu, rstd),
      d_dw(*gpu, dw);
  gpu->rmsnorm_bwd(d_x.get(), d_w.get(), d_rstd.get(), d_dy.get(), rows, dim, d_dx.get(), d_dw.get());
  for (float v : d_dw.read()) EXPECT_EQ(v, static_cast<float>(rows));
}

// A target logit 200 below the row's max (on every row, at widths past one block's threads): the
// loss is finite (~200 a row) and matches the CPU reference; expf(-200) underflowing must not
// make it +inf.
TEST_F(CudaOps, CrossEntropyTargetFarBelowTheMaxIsFinite) {
  for (int64_t vocab : {5, 1000, 152064}) {
    const int64_t rows = 3;
    auto logits = random_vec(rows * vocab, 71, 1.0f);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) {
      const auto tgt = static_cast<int32_t>((t * 7919 + 1) % vocab);
      targets[static_cast<size_t>(t)] = tgt;
      logits[static_cast<size_t>(t * vocab + tgt)] = -200.0f;  // the others are in [-1, 1]
    }
    DeviceVec<float> d_logits(*gpu, logits);
    DeviceVec<int32_t> d_targets(*gpu, targets);
    const double lc = cpu.cross_entropy(logits.data(), rows, vocab, targets.data(), 0.25f, logits.data());
    const double lg = gpu->cross_entropy(d_logits.get(), rows, vocab, d_targets.get(), 0.25f, d_logits.get());
    ASSERT_TRUE(std::isfinite(lg)) << vocab;
    EXPECT_GT(lc, rows * 199.0) << vocab;
    EXPECT_NEAR(lg, lc, kLossRelTol * std::abs(lc)) << vocab;
    EXPECT_LE(rel_l2(d_logits.read(), logits), kReductionTol) << vocab;
  }
}

TEST_F(CudaOps, AdamWMatchesTheReferenceOnDeviceAndHostState) {
  for (int64_t n : {1, 3, 7, 17, 100003}) {
    auto p = random_vec(n, 80), m = random_vec(n, 81, 0.1f), v = random_vec(n, 82, 0.01f);
    for (auto& x : v) x = std::abs(x);
    const auto g = random_vec(n, 83);
    std::vector<uint8_t> mask(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) mask[static_cast<size_t>(i)] = i % 3 != 0;
    for (Tier state : {Tier::device, Tier::host}) {
      auto pc = p, mc = m, vc = v;
      DeviceVec<float> d_p(*gpu, p), d_g(*gpu, g), d_m(*gpu, m, state), d_v(*gpu, v, state);
      DeviceVec<uint8_t> d_mask(*gpu, mask, state);
      for (int64_t step = 1; step <= 3; ++step) {
        // Steps 2 and 3 take the mean of a gradient over 4 contributions (grad_scale).
        const float scale = step == 1 ? 1.0f : 0.25f;
        cpu.adamw(pc.data(), nullptr, g.data(), mc.data(), vc.data(), mask.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                  step, scale);
        gpu->adamw(d_p.get(), nullptr, d_g.get(), d_m.get(), d_v.get(), d_mask.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
                   0.1f, step, scale);
      }
      // Every fp32 operation rounded as the reference rounds it (the same scalars, no fused
      // multiply-add): equal up to the square root's last bit.
      EXPECT_LE(max_abs_diff(d_p.read(), pc), 1e-7) << n << " state " << to_string(state);
      EXPECT_LE(rel_l2(d_m.read(), mc), kElementwiseTol) << n;
      EXPECT_LE(rel_l2(d_v.read(), vc), kElementwiseTol) << n;
    }
  }
}

TEST_F(CudaOps, KvPagesRoundTripIncludingARaggedLastPage) {
  const int64_t kvd = 12, p = 4;
  for (int64_t rows : {1, 3, 7, 17}) {
    const int64_t np = (rows + p - 1) / p;
    const auto k = random_vec(rows * kvd, 90), v = random_vec(rows * kvd, 91);
    std::vector<float> pages_c(static_cast<size_t>(np * 2 * p * kvd), 0.0f);
    DeviceVec<float> d_k(*gpu, k), d_v(*gpu, v), d_pages(*gpu, pages_c);
    std::vector<float*> pc, pg;
    for (int64_t j = 0; j < np; ++j) {
      pc.push_back(pages_c.data() + j * 2 * p * kvd);
      pg.push_back(d_pages.get() + j * 2 * p * kvd);
    }
    cpu.write_kv_pages(k.data(), v.data(), rows, kvd, p, pc, PageDtype::f32);
    gpu->write_kv_pages(d_k.get(), d_v.get(), rows, kvd, p, pg, PageDtype::f32);
    EXPECT_EQ(rel_l2(d_pages.read(), pages_c), kExact) << rows;
    auto dk = random_vec(rows * kvd, 92), dv = random_vec(rows * kvd, 93);
    DeviceVec<float> d_dk(*gpu, dk), d_dv(*gpu, dv);
    cpu.add_from_grad_pages(pc, rows, kvd, p, dk.data(), dv.data(), PageDtype::f32);
    gpu->add_from_grad_pages(pg, rows, kvd, p, d_dk.get(), d_dv.get(), PageDtype::f32);
    EXPECT_EQ(rel_l2(d_dk.read(), dk), kExact) << rows;
    EXPECT_EQ(rel_l2(d_dv.read(), dv), kExact) << rows;
  }
}

TEST_F(CudaOps, PageSummariesAreKeyMeans) {
  using Shape = std::tuple<int64_t, int64_t, int64_t>;  // rows, kv_dim, page
  for (auto [rows, kvd, p] : {Shape{1, 3, 2}, Shape{7, 8, 4}, Shape{17, 16, 8}, Shape{300, 512, 128}}) {
    const auto k = random_vec(rows * kvd, 100);
    const int64_t np = (rows + p - 1) / p;
    std::vector<float> s(static_cast<size_t>(np * kvd));
    DeviceVec<float> d_k(*gpu, k), d_s(*gpu, s);
    cpu.page_summaries(k.data(), rows, kvd, p, s.data());
    gpu->page_summaries(d_k.get(), rows, kvd, p, d_s.get());
    EXPECT_LE(rel_l2(d_s.read(), s), kReductionTol) << rows << " " << kvd << " " << p;
  }
}

}  // namespace
}  // namespace oomb::executor::cudatest
