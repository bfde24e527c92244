// bf16 storage of weights, gradients, activations and loss tiles (backend.h typed views) on the CUDA
// backend, op by op, against two references:
//  - the CUDA backend itself on fp32 storage holding the same (bf16-decoded) values, its result
//    rounded with runtime/bf16.h: both round the same fp32 value, so the bits must be equal (this is
//    what proves that bf16 operands are loaded exactly and every output is rounded once, by the
//    CPU's routine);
//  - the CPU backend's bf16 emulation (the reference semantics): bit-equal where both compute the
//    same fp32 value (data movement, sums in the same order, integer-valued GEMMs), else within the
//    named bounds below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda_test_util.h"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cudatest {
namespace {

// Tolerances, with the reason for each. Where both sides round the same fp32 value the bits must be
// equal: differing(a, b) == 0.
// Both sides compute the fp32 value with a few fp32 ulps of difference (expf, sincos, summation
// order of O(1) terms): their bf16 roundings are equal or adjacent.
constexpr int kOneUlp = 1;
// bf16 results of reductions whose fp32 values differ by summation order where terms cancel: every
// element within one bf16 ulp (2^-7 relative) of the reference's rounding, so the relative L2 error
// is at most 2^-7.
constexpr double kBf16RelTol = 1.0 / 128;
constexpr double kLossRelTol = 1e-6;  // cross-entropy loss sum (double accumulation on both)
constexpr double kMasterAbsTol = 1e-7;  // AdamW master weights: CPU and GPU round the update alike

std::vector<uint16_t> bits_of(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  f32_to_bf16(v.data(), out.data(), static_cast<int64_t>(v.size()));
  return out;
}

std::vector<float> decode(const std::vector<uint16_t>& h) {
  std::vector<float> out(h.size());
  bf16_to_f32(h.data(), out.data(), static_cast<int64_t>(h.size()));
  return out;
}

// Random bf16 values (normal, scaled) as bit patterns.
std::vector<uint16_t> random_bits(size_t n, uint64_t seed, float scale = 1.0f) {
  return bits_of(random_vec(n, seed, scale));
}

// Small integers in [-lim, lim] (exact in bf16; their products and sums exact in fp32 in any order).
std::vector<float> random_ints(size_t n, uint64_t seed, int lim) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(static_cast<int>(r.below(static_cast<uint64_t>(2 * lim + 1))) - lim);
  return v;
}

// Largest distance in bf16 steps between two bit vectors (ordered as sign-magnitude integers).
int max_ulps(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  const auto key = [](uint16_t h) { return (h & 0x8000) ? -static_cast<int>(h & 0x7fff) : static_cast<int>(h); };
  int m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(key(a[i]) - key(b[i])));
  return m;
}

// Elements whose bits differ (so +0 / -0 and NaN payloads count too).
template <class T>
size_t differing(const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return n + (a.size() > b.size() ? a.size() - b.size() : b.size() - a.size());
}

ConstTensor host_in(const std::vector<uint16_t>& v) { return {v.data(), DType::bf16}; }
Tensor host_out(std::vector<uint16_t>& v) { return {v.data(), DType::bf16}; }
ConstTensor dev_in(const DeviceVec<uint16_t>& v) { return {v.get(), DType::bf16}; }
Tensor dev_out(const DeviceVec<uint16_t>& v) { return {v.get(), DType::bf16}; }

class CudaBf16Storage : public CudaTest {};

TEST_F(CudaBf16Storage, EmbeddingRowsAndTableGradientMatchTheCpuBitForBit) {
  const int64_t vocab = 11, hidden = 37;
  for (int64_t rows : {1, 7, 300}) {
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 5 + 2) % vocab);
    const auto table = random_bits(vocab * hidden, 1), dout = random_bits(rows * hidden, 2);
    auto dt = random_bits(vocab * hidden, 3);
    std::vector<uint16_t> y(static_cast<size_t>(rows * hidden));
    DeviceVec<int32_t> d_ids(*gpu, ids);
    DeviceVec<uint16_t> d_table(*gpu, table), d_y(*gpu, y), d_dout(*gpu, dout), d_dt(*gpu, dt);
    cpu.embedding_fwd(ids.data(), rows, host_in(table), hidden, host_out(y));
    gpu->embedding_fwd(d_ids.get(), rows, dev_in(d_table), hidden, dev_out(d_y));
    EXPECT_EQ(differing(d_y.read(), y), 0u) << rows;
    // Repeated ids: each touched row gets its rows' fp32 sum (row order) added and rounded once.
    cpu.embedding_bwd(ids.data(), rows, host_in(dout), hidden, host_out(dt));
    gpu->embedding_bwd(d_ids.get(), rows, dev_in(d_dout), hidden, dev_out(d_dt));
    EXPECT_EQ(differing(d_dt.read(), dt), 0u) << rows;
  }
}

TEST_F(CudaBf16Storage, RmsNormRoundsOnceAndMatchesTheCpu) {
  for (int64_t dim : {7, 64, 3584}) {
    for (int64_t rows : {1, 17, 256}) {
      const auto x = random_bits(rows * dim, 10), w = random_bits(dim, 11), dy = random_bits(rows * dim, 12);
      const auto dx0 = random_bits(rows * dim, 13), dw0 = random_bits(dim, 14);
      const std::string what = std::to_string(rows) + "x" + std::to_string(dim);
      // bf16 storage on the GPU.
      DeviceVec<uint16_t> d_x(*gpu, x), d_w(*gpu, w), d_dy(*gpu, dy), d_dx(*gpu, dx0), d_dw(*gpu, dw0),
          d_y(*gpu, std::vector<uint16_t>(x.size()));
      DeviceVec<float> d_rstd(*gpu, std::vector<float>(static_cast<size_t>(rows)));
      gpu->rmsnorm_fwd(dev_in(d_x), dev_in(d_w), rows, dim, 1e-6f, dev_out(d_y), d_rstd.get());
      // fp32 storage of the same values on the GPU.
      DeviceVec<float> f_x(*gpu, decode(x)), f_w(*gpu, decode(w)), f_dy(*gpu, decode(dy)), f_dx(*gpu, decode(dx0)),
          f_y(*gpu, std::vector<float>(x.size())), f_rstd(*gpu, std::vector<float>(static_cast<size_t>(rows)));
      gpu->rmsnorm_fwd(f_x.get(), f_w.get(), rows, dim, 1e-6f, f_y.get(), f_rstd.get());
      EXPECT_EQ(differing(d_y.read(), bits_of(f_y.read())), 0u) << what << " y";
      EXPECT_EQ(differing(d_rstd.read(), f_rstd.read()), 0u) << what << " rstd";
      // The CPU emulation.
      std::vector<uint16_t> y(x.size()), dx = dx0, dw = dw0;
      std::vector<float> rstd(static_cast<size_t>(rows));
      cpu.rmsnorm_fwd(host_in(x), host_in(w), rows, dim, 1e-6f, host_out(y), rstd.data());
      EXPECT_LE(max_ulps(d_y.read(), y), kOneUlp) << what << " y";
      // Backward: dx (+)= in place, dw += (fp32 scratch, one rounding).
      gpu->rmsnorm_bwd(dev_in(d_x), dev_in(d_w), d_rstd.get(), dev_in(d_dy), rows, dim, dev_out(d_dx), dev_out(d_dw));
      DeviceVec<float> f_dw(*gpu, decode(dw0));
      gpu->rmsnorm_bwd(f_x.get(), f_w.get(), f_rstd.get(), f_dy.get(), rows, dim, f_dx.get(), f_dw.get());
      EXPECT_EQ(differing(d_dx.read(), bits_of(f_dx.read())), 0u) << what << " dx";
      cpu.rmsnorm_bwd(host_in(x), host_in(w), rstd.data(), host_in(dy), rows, dim, host_out(dx), host_out(dw));
      EXPECT_LE(rel_l2(decode(d_dx.read()), decode(dx)), kBf16RelTol) << what << " dx";
      // dw: column sums by atomics (order unspecified) on both GPU runs.
      EXPECT_LE(rel_l2(decode(d_dw.read()), decode(dw)), kBf16RelTol) << what << " dw";
      EXPECT_LE(rel_l2(decode(d_dw.read()), f_dw.read()), kBf16RelTol) << what << " dw vs fp32 storage";
    }
  }
}

// Integer-valued operands: every product and partial sum is exact in fp32 whatever the order, so the
// one rounding of (stored + product) is determined and both backends must store the same bits. A
// GEMM that rounded its split-K partial sums, or the product before adding the stored value, to bf16
// would differ (stored values carry quarter fractions, products reach 2^14).
TEST_F(CudaBf16Storage, LinearOnBf16StorageRoundsOnceBitForBitOnIntegers) {
  int64_t gemms = 0, aligned_gemms = 0;
  using Shape = std::tuple<int64_t, int64_t, int64_t>;  // rows, in, out
  for (auto [rows, in, out] : {Shape{1, 7, 3}, Shape{37, 64, 96}, Shape{256, 129, 513}, Shape{16, 2048, 64},
                               Shape{1024, 96, 40}}) {
    const auto x = bits_of(random_ints(rows * in, 20, 3)), w = bits_of(random_ints(out * in, 21, 3)),
               b = bits_of(random_ints(out, 22, 3)), dy = bits_of(random_ints(rows * out, 23, 3));
    auto quarters = [](std::vector<float> v) {
      for (auto& e : v) e *= 0.25f;
      return bits_of(v);
    };
    const auto dx0 = quarters(random_ints(rows * in, 24, 60)), dw0 = quarters(random_ints(out * in, 25, 60)),
               db0 = quarters(random_ints(out, 26, 60));
    const std::string what = std::to_string(rows) + "x" + std::to_string(in) + "->" + std::to_string(out);
    // Rows of 16-byte multiples: cuBLASLt's tensor-core bf16 kernels must take these as stored.
    const bool aligned = in % 8 == 0 && out % 8 == 0;
    aligned_gemms += aligned ? 6 : 0;
    DeviceVec<uint16_t> d_x(*gpu, x), d_w(*gpu, w), d_b(*gpu, b), d_dy(*gpu, dy);
    for (bool bias : {false, true}) {
      std::vector<uint16_t> y(static_cast<size_t>(rows * out));
      DeviceVec<uint16_t> d_y(*gpu, y);
      cpu.linear_fwd(host_in(x), rows, in, host_in(w), bias ? host_in(b) : ConstTensor(), out, host_out(y));
      gpu->linear_fwd(dev_in(d_x), rows, in, dev_in(d_w), bias ? dev_in(d_b) : ConstTensor(), out, dev_out(d_y));
      ++gemms;
      EXPECT_EQ(differing(d_y.read(), y), 0u) << what << (bias ? " y (bias)" : " y");
    }
    for (bool acc : {false, true}) {
      auto dx = dx0, dw = dw0, db = db0;
      DeviceVec<uint16_t> d_dx(*gpu, dx0), d_dw(*gpu, dw0), d_db(*gpu, db0);
      cpu.linear_bwd(host_in(x), rows, in, host_in(w), out, host_in(dy), host_out(dx), acc, host_out(dw),
                     host_out(db));
      gpu->linear_bwd(dev_in(d_x), rows, in, dev_in(d_w), out, dev_in(d_dy), dev_out(d_dx), acc, dev_out(d_dw),
                      dev_out(d_db));
      gemms += 2;
      EXPECT_EQ(differing(d_dx.read(), dx), 0u) << what << " dx acc " << acc;
      EXPECT_EQ(differing(d_dw.read(), dw), 0u) << what << " dW";
      EXPECT_EQ(differing(d_db.read(), db), 0u) << what << " db";
    }
  }
  // bf16 operands run the bf16 GEMM as they are stored, even on a backend whose GEMM precision is
  // fp32; odd row lengths may fall back to fp32 GEMMs of the loaded values (exact here as well).
  EXPECT_GE(gpu->gemm_calls(CudaGemmPrecision::bf16), aligned_gemms);
  EXPECT_EQ(gpu->gemm_calls(CudaGemmPrecision::bf16) + gpu->gemm_calls(CudaGemmPrecision::fp32), gemms);
}

TEST_F(CudaBf16Storage, LinearOnMixedStorageConvertsTheBf16OperandExactly) {
  // bf16 activations with fp32 weights on an fp32-GEMM backend: the bf16 operand is loaded to fp32
  // (exact), the output stored in its own dtype; integers again, so bit-equal to the CPU.
  const int64_t rows = 37, in = 64, out = 32;
  const auto x = bits_of(random_ints(rows * in, 30, 3)), dy = bits_of(random_ints(rows * out, 31, 3));
  const auto w = random_ints(out * in, 32, 3), b = random_ints(out, 33, 3);
  std::vector<uint16_t> y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in));
  std::vector<float> dw = random_ints(out * in, 34, 5);
  DeviceVec<uint16_t> d_x(*gpu, x), d_dy(*gpu, dy), d_y(*gpu, y), d_dx(*gpu, dx);
  DeviceVec<float> d_w(*gpu, w), d_b(*gpu, b), d_dw(*gpu, dw);
  cpu.linear_fwd(host_in(x), rows, in, w.data(), b.data(), out, host_out(y));
  gpu->linear_fwd(dev_in(d_x), rows, in, d_w.get(), d_b.get(), out, dev_out(d_y));
  EXPECT_EQ(differing(d_y.read(), y), 0u);
  cpu.linear_bwd(host_in(x), rows, in, w.data(), out, host_in(dy), host_out(dx), false, dw.data(), nullptr);
  gpu->linear_bwd(dev_in(d_x), rows, in, d_w.get(), out, dev_in(d_dy), dev_out(d_dx), false, d_dw.get(), nullptr);
  EXPECT_EQ(differing(d_dx.read(), dx), 0u);
  EXPECT_EQ(differing(d_dw.read(), dw), 0u);
  // y and dx mix a bf16 and an fp32 operand: fp32 GEMMs; dW's operands (x, dy) are both bf16: bf16.
  EXPECT_EQ(gpu->gemm_calls(CudaGemmPrecision::fp32), 2);
  EXPECT_EQ(gpu->gemm_calls(CudaGemmPrecision::bf16), 1);
}

TEST_F(CudaBf16Storage, LinearOnRandomBf16ValuesIsWithinOneRoundingOfTheCpu) {
  using Shape = std::tuple<int64_t, int64_t, int64_t>;
  for (auto [rows, in, out] : {Shape{3, 9, 5}, Shape{256, 129, 513}}) {
    const auto x = random_bits(rows * in, 40), w = random_bits(out * in, 41), dy = random_bits(rows * out, 42);
    auto dw = random_bits(out * in, 43);
    std::vector<uint16_t> y(static_cast<size_t>(rows * out)), dx(static_cast<size_t>(rows * in));
    DeviceVec<uint16_t> d_x(*gpu, x), d_w(*gpu, w), d_dy(*gpu, dy), d_y(*gpu, y), d_dx(*gpu, dx), d_dw(*gpu, dw);
    cpu.linear_fwd(host_in(x), rows, in, host_in(w), nullptr, out, host_out(y));
    gpu->linear_fwd(dev_in(d_x), rows, in, dev_in(d_w), nullptr, out, dev_out(d_y));
    EXPECT_LE(rel_l2(decode(d_y.read()), decode(y)), kBf16RelTol);
    cpu.linear_bwd(host_in(x), rows, in, host_in(w), out, host_in(dy), host_out(dx), false, host_out(dw), nullptr);
    gpu->linear_bwd(dev_in(d_x), rows, in, dev_in(d_w), out, dev_in(d_dy), dev_out(d_dx), false, dev_out(d_dw),
                    nullptr);
    EXPECT_LE(rel_l2(decode(d_dx.read()), decode(dx)), kBf16RelTol);
    EXPECT_LE(rel_l2(decode(d_dw.read()), decode(dw)), kBf16RelTol);
  }
}

TEST_F(CudaBf16Storage, RopeSwigluAddScaleCopyRoundOnce) {
  const int64_t rows = 17, heads = 3, hd = 64, n = rows * heads * hd;
  {
    const auto x0 = random_bits(n, 50);
    DeviceVec<uint16_t> d_x(*gpu, x0);
    DeviceVec<float> f_x(*gpu, decode(x0));
    auto x = x0;
    gpu->rope_fwd(dev_out(d_x), rows, heads, hd, 4093, 1e6);
    gpu->rope_fwd(f_x.get(), rows, heads, hd, 4093, 1e6);
    cpu.rope_fwd(host_out(x), rows, heads, hd, 4093, 1e6);
    EXPECT_EQ(differing(d_x.read(), bits_of(f_x.read())), 0u) << "rope_fwd";
    EXPECT_LE(max_ulps(d_x.read(), x), kOneUlp) << "rope_fwd";
    DeviceVec<float> f_x2(*gpu, decode(d_x.read()));
    gpu->rope_bwd(dev_out(d_x), rows, heads, hd, 4093, 1e6);
    gpu->rope_bwd(f_x2.get(), rows, heads, hd, 4093, 1e6);
    EXPECT_EQ(differing(d_x.read(), bits_of(f_x2.read())), 0u) << "rope_bwd";
  }
  {
    const auto g = random_bits(n, 51, 3.0f), u = random_bits(n, 52), d = random_bits(n, 53);
    DeviceVec<uint16_t> d_g(*gpu, g), d_u(*gpu, u), d_d(*gpu, d), d_o(*gpu, std::vector<uint16_t>(n)),
        d_dg(*gpu, std::vector<uint16_t>(n)), d_du(*gpu, std::vector<uint16_t>(n));
    DeviceVec<float> f_g(*gpu, decode(g)), f_u(*gpu, decode(u)), f_d(*gpu, decode(d)), f_o(*gpu, std::vector<float>(n)),
        f_dg(*gpu, std::vector<float>(n)), f_du(*gpu, std::vector<float>(n));
    gpu->swiglu_fwd(dev_in(d_g), dev_in(d_u), n, dev_out(d_o));
    gpu->swiglu_fwd(f_g.get(), f_u.get(), n, f_o.get());
    EXPECT_EQ(differing(d_o.read(), bits_of(f_o.read())), 0u) << "swiglu_fwd";
    gpu->swiglu_bwd(dev_in(d_g), dev_in(d_u), dev_in(d_d), n, dev_out(d_dg), dev_out(d_du));
    gpu->swiglu_bwd(f_g.get(), f_u.get(), f_d.get(), n, f_dg.get(), f_du.get());
    EXPECT_EQ(differing(d_dg.read(), bits_of(f_dg.read())), 0u) << "swiglu_bwd dgate";
    EXPECT_EQ(differing(d_du.read(), bits_of(f_du.read())), 0u) << "swiglu_bwd dup";
    std::vector<uint16_t> o(n), dg(n), du(n);
    cpu.swiglu_fwd(host_in(g), host_in(u), n, host_out(o));
    cpu.swiglu_bwd(host_in(g), host_in(u), host_in(d), n, host_out(dg), host_out(du));
    EXPECT_LE(max_ulps(d_o.read(), o), kOneUlp) << "swiglu_fwd";
    EXPECT_LE(max_ulps(d_dg.read(), dg), kOneUlp) << "swiglu_bwd dgate";
    EXPECT_LE(max_ulps(d_du.read(), du), kOneUlp) << "swiglu_bwd dup";
  }
  {
    // add, scale: one fp32 operation on the same values, so the CPU's bits; copy converts.
    auto y = random_bits(n, 54);
    const auto x = random_bits(n, 55);
    DeviceVec<uint16_t> d_y(*gpu, y), d_x(*gpu, x);
    cpu.add(host_out(y), host_in(x), n);
    gpu->add(dev_out(d_y), dev_in(d_x), n);
    EXPECT_EQ(differing(d_y.read(), y), 0u) << "add";
    cpu.scale(host_out(y), n, 0.37f);
    gpu->scale(dev_out(d_y), n, 0.37f);
    EXPECT_EQ(differing(d_y.read(), y), 0u) << "scale";
    DeviceVec<float> d_up(*gpu, std::vector<float>(n));
    gpu->copy(d_up.get(), dev_in(d_y), n);
    EXPECT_EQ(differing(d_up.read(), decode(y)), 0u) << "copy bf16 -> fp32 (exact)";
    const auto f = random_vec(n, 56);
    DeviceVec<float> d_f(*gpu, f);
    DeviceVec<uint16_t> d_down(*gpu, std::vector<uint16_t>(n)), d_same(*gpu, std::vector<uint16_t>(n));
    gpu->copy(dev_out(d_down), d_f.get(), n);
    EXPECT_EQ(differing(d_down.read(), bits_of(f)), 0u) << "copy fp32 -> bf16 (rounded)";
    gpu->copy(dev_out(d_same), dev_in(d_down), n);
    EXPECT_EQ(differing(d_same.read(), bits_of(f)), 0u) << "copy bf16 -> bf16";
  }
}

TEST_F(CudaBf16Storage, CrossEntropyOnBf16LogitsInPlaceAndIntoFp32) {
  for (int64_t vocab : {61, 152064}) {
    const int64_t rows = 7;
    const auto logits = random_bits(rows * vocab, 70, 4.0f);
    std::vector<int32_t> targets(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t)
      targets[static_cast<size_t>(t)] = t == 1 ? -1 : static_cast<int32_t>((t * 7919) % vocab);
    DeviceVec<int32_t> d_targets(*gpu, targets);
    // The fp32 storage of the same logits, in place: the reference gradient.
    DeviceVec<float> f_logits(*gpu, decode(logits));
    const double lf = gpu->cross_entropy(f_logits.get(), rows, vocab, d_targets.get(), 0.25f, f_logits.get());
    const auto f_grad = f_logits.read();
    // bf16 in place.
    DeviceVec<uint16_t> d_logits(*gpu, logits);
    const double lb =
        gpu->cross_entropy(dev_in(d_logits), rows, vocab, d_targets.get(), 0.25f, dev_out(d_logits));
    EXPECT_EQ(lb, lf) << vocab << ": the loss of the same fp32 values";
    EXPECT_EQ(differing(d_logits.read(), bits_of(f_grad)), 0u) << vocab << " in-place bf16 gradient";
    // bf16 logits, separate fp32 gradient (the loss's fp32 upcast path).
    DeviceVec<uint16_t> d_logits2(*gpu, logits);
    DeviceVec<float> d_grad(*gpu, std::vector<float>(logits.size()));
    gpu->cross_entropy(dev_in(d_logits2), rows, vocab, d_targets.get(), 0.25f, d_grad.get());
    EXPECT_EQ(differing(d_grad.read(), f_grad), 0u) << vocab << " fp32 gradient of bf16 logits";
    EXPECT_EQ(differing(d_logits2.read(), logits), 0u) << vocab << " logits untouched";
    // The CPU emulation.
    auto lc_buf = logits;
    const double lc = cpu.cross_entropy(host_in(lc_buf), rows, vocab, targets.data(), 0.25f, host_out(lc_buf));
    EXPECT_NEAR(lb, lc, kLossRelTol * std::abs(lc)) << vocab;
    EXPECT_LE(max_ulps(d_logits.read(), lc_buf), kOneUlp) << vocab;
  }
}

TEST_F(CudaBf16Storage, AdamWUpdatesTheFp32MasterAndRefreshesBf16WeightsOnce) {
  const int64_t n = 100003;
  const auto p0 = random_vec(n, 80);
  const auto g = random_bits(n, 83);
  auto m0 = random_vec(n, 81, 0.1f), v0 = random_vec(n, 82, 0.01f);
  for (auto& x : v0) x = std::abs(x);
  std::vector<uint8_t> mask(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mask[static_cast<size_t>(i)] = i % 3 != 0;
  DeviceVec<uint8_t> d_mask(*gpu, mask);
  DeviceVec<uint16_t> d_g(*gpu, g);
  // With a master.
  {
    auto master = p0, mc = m0, vc = v0;
    auto param = bits_of(p0);
    DeviceVec<float> d_master(*gpu, p0), d_m(*gpu, m0), d_v(*gpu, v0);
    DeviceVec<uint16_t> d_param(*gpu, param);
    for (int64_t step = 1; step <= 3; ++step) {
      cpu.adamw(host_out(param), master.data(), host_in(g), mc.data(), vc.data(), mask.data(), n, 1e-3f, 0.9f, 0.95f,
                1e-8f, 0.1f, step, 1.0f);
      gpu->adamw(dev_out(d_param), d_master.get(), dev_in(d_g), d_m.get(), d_v.get(), d_mask.get(), n, 1e-3f, 0.9f,
                 0.95f, 1e-8f, 0.1f, step, 1.0f);
    }
    const auto got_master = d_master.read();
    EXPECT_LE(max_abs_diff(got_master, master), kMasterAbsTol);
    EXPECT_EQ(differing(d_param.read(), bits_of(got_master)), 0u) << "the bf16 weights are the master rounded once";
    EXPECT_LE(max_ulps(d_param.read(), param), kOneUlp);
  }
  // Without: the bf16 weights themselves are loaded, updated in fp32 and rounded.
  {
    auto mc = m0, vc = v0;
    auto param = bits_of(p0);
    DeviceVec<float> d_m(*gpu, m0), d_v(*gpu, v0), f_param(*gpu, decode(param)), f_m(*gpu, m0), f_v(*gpu, v0);
    DeviceVec<uint16_t> d_param(*gpu, param);
    DeviceVec<float> f_g(*gpu, decode(g));
    cpu.adamw(host_out(param), nullptr, host_in(g), mc.data(), vc.data(), mask.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
              0.1f, 1, 1.0f);
    gpu->adamw(dev_out(d_param), nullptr, dev_in(d_g), d_m.get(), d_v.get(), d_mask.get(), n, 1e-3f, 0.9f, 0.95f,
               1e-8f, 0.1f, 1, 1.0f);
    gpu->adamw(f_param.get(), nullptr, f_g.get(), f_m.get(), f_v.get(), d_mask.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f,
               0.1f, 1, 1.0f);
    EXPECT_EQ(differing(d_param.read(), bits_of(f_param.read())), 0u);
    EXPECT_LE(max_ulps(d_param.read(), param), kOneUlp);
  }
}

TEST_F(CudaBf16Storage, KvPagesFromBf16RowsAndGradientsIntoBf16Rows) {
  const int64_t kvd = 12, p = 4;
  for (int64_t rows : {1, 7, 17}) {
    const int64_t np = (rows + p - 1) / p;
    const auto k = random_bits(rows * kvd, 90), v = random_bits(rows * kvd, 91);
    DeviceVec<uint16_t> d_k(*gpu, k), d_v(*gpu, v);
    for (PageDtype pd : {PageDtype::f32, PageDtype::bf16}) {
      const int64_t page_bytes = 2 * p * kvd * page_dtype_bytes(pd);
      std::vector<char> pages_c(static_cast<size_t>(np * page_bytes), 0);
      DeviceVec<char> d_pages(*gpu, pages_c);
      std::vector<float*> pc, pg;
      for (int64_t j = 0; j < np; ++j) {
        pc.push_back(reinterpret_cast<float*>(pages_c.data() + j * page_bytes));
        pg.push_back(reinterpret_cast<float*>(d_pages.get() + j * page_bytes));
      }
      cpu.write_kv_pages(host_in(k), host_in(v), rows, kvd, p, pc, pd);
      gpu->write_kv_pages(dev_in(d_k), dev_in(d_v), rows, kvd, p, pg, pd);
      EXPECT_EQ(differing(d_pages.read(), pages_c), 0u) << rows << " " << to_string(pd);
      // Gradient pages (here: the pages just written) into bf16 dk / dv: one fp32 add, one rounding.
      auto dk = random_bits(rows * kvd, 92), dv = random_bits(rows * kvd, 93);
      DeviceVec<uint16_t> d_dk(*gpu, dk), d_dv(*gpu, dv);
      cpu.add_from_grad_pages(pc, rows, kvd, p, host_out(dk), host_out(dv), pd);
      gpu->add_from_grad_pages(pg, rows, kvd, p, dev_out(d_dk), dev_out(d_dv), pd);
      EXPECT_EQ(differing(d_dk.read(), dk), 0u) << rows << " " << to_string(pd);
      EXPECT_EQ(differing(d_dv.read(), dv), 0u) << rows << " " << to_string(pd);
    }
  }
}

TEST_F(CudaBf16Storage, PageSummariesOfBf16Keys) {
  const int64_t rows = 300, kvd = 512, p = 128, np = (rows + p - 1) / p;
  const auto k = random_bits(rows * kvd, 100);
  DeviceVec<uint16_t> d_k(*gpu, k), d_s(*gpu, std::vector<uint16_t>(static_cast<size_t>(np * kvd)));
  DeviceVec<float> f_k(*gpu, decode(k)), f_s(*gpu, std::vector<float>(static_cast<size_t>(np * kvd)));
  gpu->page_summaries(dev_in(d_k), rows, kvd, p, dev_out(d_s));
  gpu->page_summaries(f_k.get(), rows, kvd, p, f_s.get());
  EXPECT_EQ(differing(d_s.read(), bits_of(f_s.read())), 0u);
  std::vector<uint16_t> s(static_cast<size_t>(np * kvd));
  cpu.page_summaries(host_in(k), rows, kvd, p, host_out(s));
  EXPECT_LE(max_ulps(d_s.read(), s), kOneUlp);
}

TEST_F(CudaBf16Storage, SelectionOnBf16QueriesAndSummariesIsTheSelectionOfTheirValues) {
  const int64_t rows = 256, qh = 28, kvh = 4, hd = 128, p = 64, P = 300;
  const auto q = random_bits(rows * qh * hd, 110), s = random_bits(P * kvh * hd, 111);
  DeviceVec<uint16_t> d_q(*gpu, q), d_s(*gpu, s);
  DeviceVec<float> f_q(*gpu, decode(q)), f_s(*gpu, decode(s));
  for (bool per_head : {false, true}) {
    SelectionArgs a;
    a.rows = rows;
    a.q_heads = qh;
    a.kv_heads = kvh;
    a.head_dim = hd;
    a.page_tokens = p;
    a.prefix_pages = P;
    a.budget = 64;
    a.per_kv_head = per_head;
    SelectionArgs af = a;
    a.q = dev_in(d_q);
    a.summaries = dev_in(d_s);
    af.q = f_q.get();
    af.summaries = f_s.get();
    EXPECT_EQ(gpu->select_pages(a), gpu->select_pages(af)) << "per_kv_head " << per_head;
  }
}

// Attention with bf16 q / k / v / o / dout / dq / dk / dv (pages fp32 and bf16): the kernels compute
// on the loaded values and each output is rounded once, so the bits equal the fp32-storage run's
// outputs rounded; and within one rounding of the CPU's emulation.
void check_attention(CudaBackend& gpu, CpuBackend& cpu, PageDtype pd, bool compare_cpu) {
  const int64_t T = 37, qh = 8, kvh = 2, hd = 64, p = 16, U = 3;
  const int64_t qd = qh * hd, kvd = kvh * hd, page = 2 * p * kvd;
  const auto q = random_bits(T * qd, 1, 0.5f), k = random_bits(T * kvd, 2, 0.5f), v = random_bits(T * kvd, 3),
             dout = random_bits(T * qd, 5);
  const auto pages32 = decode(random_bits(U * page, 4, 0.5f));  // values a bf16 page can hold exactly
  const auto pages16 = bits_of(pages32);
  DeviceVec<float> d_pages32(gpu, pages32), g_grads32(gpu, std::vector<float>(U * page, 0.0f)),
      f_grads32(gpu, std::vector<float>(U * page, 0.0f));
  DeviceVec<uint16_t> d_pages16(gpu, pages16), g_grads16(gpu, std::vector<uint16_t>(U * page, 0)),
      f_grads16(gpu, std::vector<uint16_t>(U * page, 0));
  PagedAttention a;
  a.rows = T;
  a.q_heads = qh;
  a.kv_heads = kvh;
  a.head_dim = hd;
  a.page_tokens = p;
  a.kv_dtype = pd;
  a.grad_dtype = pd;
  std::vector<float*> gp_bf, gp_f;
  for (int64_t u = 0; u < U; ++u) {
    const float* pg = pd == PageDtype::bf16 ? reinterpret_cast<const float*>(d_pages16.get() + u * page)
                                            : d_pages32.get() + u * page;
    a.prefix_pages.push_back(pg);
    gp_bf.push_back(pd == PageDtype::bf16 ? reinterpret_cast<float*>(g_grads16.get() + u * page)
                                          : g_grads32.get() + u * page);
    gp_f.push_back(pd == PageDtype::bf16 ? reinterpret_cast<float*>(f_grads16.get() + u * page)
                                         : f_grads32.get() + u * page);
  }
  const std::string what = std::string("pages ") + to_string(pd);
  // bf16 rows.
  DeviceVec<uint16_t> d_q(gpu, q), d_k(gpu, k), d_v(gpu, v), d_dout(gpu, dout),
      d_o(gpu, std::vector<uint16_t>(q.size())), d_dq(gpu, std::vector<uint16_t>(q.size())), d_dk(gpu, std::vector<uint16_t>(k.size())),
      d_dv(gpu, std::vector<uint16_t>(v.size()));
  DeviceVec<float> d_lse(gpu, std::vector<float>(static_cast<size_t>(T * qh)));
  PagedAttention ab = a;
  ab.q = dev_in(d_q);
  ab.k_own = dev_in(d_k);
  ab.v_own = dev_in(d_v);
  gpu.attention_fwd(ab, dev_out(d_o), d_lse.get());
  // fp32 rows of the same values.
  DeviceVec<float> f_q(gpu, decode(q)), f_k(gpu, decode(k)), f_v(gpu, decode(v)), f_dout(gpu, decode(dout)),
      f_o(gpu, std::vector<float>(q.size())), f_lse(gpu, std::vector<float>(static_cast<size_t>(T * qh))),
      f_dq(gpu, std::vector<float>(q.size())), f_dk(gpu, std::vector<float>(k.size())),
      f_dv(gpu, std::vector<float>(v.size()));
  PagedAttention af = a;
  af.q = f_q.get();
  af.k_own = f_k.get();
  af.v_own = f_v.get();
  gpu.attention_fwd(af, f_o.get(), f_lse.get());
  EXPECT_EQ(differing(d_o.read(), bits_of(f_o.read())), 0u) << what << " o";
  EXPECT_EQ(differing(d_lse.read(), f_lse.read()), 0u) << what << " lse";
  // Backward from the bf16 o (both runs on the same o values).
  DeviceVec<float> f_o16(gpu, decode(d_o.read()));
  gpu.attention_bwd(ab, dev_in(d_o), d_lse.get(), dev_in(d_dout), dev_out(d_dq), dev_out(d_dk), dev_out(d_dv), gp_bf);
  gpu.attention_bwd(af, f_o16.get(), f_lse.get(), f_dout.get(), f_dq.get(), f_dk.get(), f_dv.get(), gp_f);
  EXPECT_EQ(differing(d_dq.read(), bits_of(f_dq.read())), 0u) << what << " dq";
  EXPECT_EQ(differing(d_dk.read(), bits_of(f_dk.read())), 0u) << what << " dk";
  EXPECT_EQ(differing(d_dv.read(), bits_of(f_dv.read())), 0u) << what << " dv";
  if (pd == PageDtype::bf16) EXPECT_EQ(differing(g_grads16.read(), f_grads16.read()), 0u) << what << " prefix grads";
  else EXPECT_EQ(differing(g_grads32.read(), f_grads32.read()), 0u) << what << " prefix gradients";
  if (!compare_cpu) return;
  PagedAttention ac = a;
  ac.prefix_pages.clear();
  std::vector<float*> gc;
  std::vector<float> grads_c32(U * page, 0.0f);
  std::vector<uint16_t> grads_c16(U * page, 0);
  for (int64_t u = 0; u < U; ++u) {
    ac.prefix_pages.push_back(pd == PageDtype::bf16 ? reinterpret_cast<const float*>(pages16.data() + u * page)
                                                    : pages32.data() + u * page);
    gc.push_back(pd == PageDtype::bf16 ? reinterpret_cast<float*>(grads_c16.data() + u * page)
                                       : grads_c32.data() + u * page);
  }
  ac.q = host_in(q);
  ac.k_own = host_in(k);
  ac.v_own = host_in(v);
  std::vector<uint16_t> o(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(static_cast<size_t>(T * qh));
  cpu.attention_fwd(ac, host_out(o), lse.data());
  EXPECT_LE(rel_l2(decode(d_o.read()), decode(o)), kBf16RelTol) << what << " o vs cpu";
  const auto o_gpu = d_o.read();  // the backward of both from the same o
  cpu.attention_bwd(ac, host_in(o_gpu), d_lse.read().data(), host_in(dout), host_out(dq), host_out(dk), host_out(dv),
                    gc);
  EXPECT_LE(rel_l2(decode(d_dq.read()), decode(dq)), kBf16RelTol) << what << " dq vs cpu";
  EXPECT_LE(rel_l2(decode(d_dk.read()), decode(dk)), kBf16RelTol) << what << " dk vs cpu";
  EXPECT_LE(rel_l2(decode(d_dv.read()), decode(dv)), kBf16RelTol) << what << " dv vs cpu";
}

TEST_F(CudaBf16Storage, AttentionOnBf16RowsFp32Kernels) {
  for (PageDtype pd : {PageDtype::f32, PageDtype::bf16}) check_attention(*gpu, cpu, pd, true);
  EXPECT_GT(gpu->attention_calls(CudaAttentionKernel::fp32), 0);
}

TEST_F(CudaBf16Storage, AttentionOnBf16RowsTensorCoreKernels) {
  CudaBackendOptions o = test_options();
  o.attention_kernel = CudaAttentionKernel::bf16_tensor_core;
  o.attention_kernel_strict = true;
  CudaBackend tc(o);
  if (!tc.attention_tc_available()) GTEST_SKIP() << "no tensor-core attention on this device";
  for (PageDtype pd : {PageDtype::f32, PageDtype::bf16}) check_attention(tc, cpu, pd, false);
  EXPECT_EQ(tc.attention_calls(CudaAttentionKernel::fp32), 0);
}

TEST_F(CudaBf16Storage, OwnDeviceBuffersAreNamedAndTheScratchGrowsForFp32Outputs) {
  CudaBackendOptions o = test_options();
  o.workspace_bytes = 4096;
  CudaBackend b(o);
  EXPECT_GT(b.gemm_workspace_bytes(), 0);
  EXPECT_EQ(b.gemm_workspace_bytes(), b.memory_stats().gemm_workspace_bytes);
  EXPECT_EQ(b.scratch_bytes(), 4096);
  // A bf16 output with a bias cannot be written by cuBLASLt: the GEMM's fp32 result goes through the
  // op scratch (rows x out fp32).
  const int64_t rows = 64, in = 32, out = 96;
  DeviceVec<uint16_t> d_x(b, random_bits(rows * in, 120)), d_w(b, random_bits(out * in, 121)),
      d_b(b, random_bits(out, 122)), d_y(b, std::vector<uint16_t>(static_cast<size_t>(rows * out)));
  b.linear_fwd(dev_in(d_x), rows, in, dev_in(d_w), dev_in(d_b), out, dev_out(d_y));
  EXPECT_GE(b.scratch_bytes(), rows * out * 4);
  EXPECT_EQ(b.scratch_bytes(), b.memory_stats().workspace_bytes);
}

}  // namespace
}  // namespace oomb::executor::cudatest
