// The LoRA adapter ops (backend.h lora_fwd / lora_bwd) of the CUDA backend against the CPU
// reference backend: fp32 storage (fp32 and bf16 GEMM precision), bf16 activations (x, u, y, dy,
// du, dx stored as bf16; the adapters A, B and their gradients fp32, as a LoRA run stores them),
// with and without an input gradient, odd sizes and a scale != 1; and the op scratch each call
// carves within what step/cuda_scratch.h declares for it.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"

#include "cuda_test_util.h"
#include "executor/runtime/bf16.h"
#include "step/cuda_scratch.h"

namespace oomb::executor::cudatest {
namespace {

// Tolerances (relative L2), with the reason for each.
// fp32 storage, fp32 GEMMs: cuBLASLt vs the CPU's GEMM differ in summation order only (u feeds the
// second GEMM and the backward, so its ~1e-7 differences propagate, still far below this).
constexpr double kFp32Tol = 1e-5;
// fp32 storage, bf16 GEMMs: both operands of every GEMM rounded to bf16 (ops_test.cpp's
// kGemmBf16Tol, measured there at 1.6e-3 .. 3.5e-3 for one GEMM); here y and the gradients go
// through two GEMMs in a row (u = x A^T, then u B^T; du, then du^T x), so twice that bound.
constexpr double kBf16GemmTol = 2e-2;
// bf16 activations: both backends compute each fp32 value from the same stored operands (up to
// summation order) and round it once, so every bf16 output is within one bf16 ulp (2^-7 relative)
// of the CPU's; the fp32 gradients dA, dB read u / du as stored, where an element rounded the
// other way moves them by at most the same relative amount.
constexpr double kBf16StorageTol = 1.0 / 128;

constexpr float kScale = 2.5f;  // lora_alpha / r, e.g. alpha 40 at r 16; != 1 so that misplaced scaling shows

struct Shape {
  int64_t rows, in, rank, out;
};
// The brief's odd one (nothing a multiple of 8 but in), a single row, and a larger square-ish one.
const Shape kShapes[] = {{37, 48, 5, 24}, {1, 7, 3, 9}, {200, 96, 16, 130}};

std::string name_of(const Shape& s, bool with_dx) {
  return std::to_string(s.rows) + " rows, " + std::to_string(s.in) + " -> r " + std::to_string(s.rank) + " -> " +
         std::to_string(s.out) + (with_dx ? ", dx" : ", no dx");
}

// The inputs of one forward + backward, host-side (accumulated outputs and overwritten ones start
// as random values: the ops must add to the former and ignore the latter).
struct Case {
  std::vector<float> x, a, b, y, u, dy, du, dx, da, db;
  explicit Case(const Shape& s, uint64_t seed) {
    const auto n = [](int64_t v) { return static_cast<size_t>(v); };
    x = random_vec(n(s.rows * s.in), seed + 1);
    a = random_vec(n(s.rank * s.in), seed + 2, 0.1f);
    b = random_vec(n(s.out * s.rank), seed + 3, 0.1f);
    y = random_vec(n(s.rows * s.out), seed + 4);
    u = random_vec(n(s.rows * s.rank), seed + 5, 100.0f);  // garbage: overwritten
    dy = random_vec(n(s.rows * s.out), seed + 6);
    du = random_vec(n(s.rows * s.rank), seed + 7, 100.0f);  // garbage: overwritten
    dx = random_vec(n(s.rows * s.in), seed + 8);
    da = random_vec(n(s.rank * s.in), seed + 9, 0.1f);
    db = random_vec(n(s.out * s.rank), seed + 10, 0.1f);
  }
};

// fp32 storage on both backends.
void check_fp32(CudaBackend& gpu, CpuBackend& cpu, double tol) {
  for (const Shape& s : kShapes) {
    for (bool with_dx : {false, true}) {
      const std::string what = name_of(s, with_dx);
      Case h(s, 100);
      DeviceVec<float> x(gpu, h.x), a(gpu, h.a), b(gpu, h.b), y(gpu, h.y), u(gpu, h.u), dy(gpu, h.dy),
          du(gpu, h.du), dx(gpu, h.dx), da(gpu, h.da), db(gpu, h.db);
      cpu.lora_fwd(h.x.data(), s.rows, s.in, h.a.data(), h.b.data(), s.rank, s.out, kScale, h.u.data(), h.y.data());
      gpu.lora_fwd(x.get(), s.rows, s.in, a.get(), b.get(), s.rank, s.out, kScale, u.get(), y.get());
      EXPECT_LE(rel_l2(u.read(), h.u), tol) << what << " u";
      EXPECT_LE(rel_l2(y.read(), h.y), tol) << what << " y";
      const std::vector<float> dx0 = h.dx;
      cpu.lora_bwd(h.x.data(), h.u.data(), s.rows, s.in, h.a.data(), h.b.data(), s.rank, s.out, kScale, h.dy.data(),
                   h.du.data(), with_dx ? h.dx.data() : nullptr, h.da.data(), h.db.data());
      gpu.lora_bwd(x.get(), u.get(), s.rows, s.in, a.get(), b.get(), s.rank, s.out, kScale, dy.get(), du.get(),
                   with_dx ? dx.get() : nullptr, da.get(), db.get());
      EXPECT_LE(rel_l2(du.read(), h.du), tol) << what << " du";
      EXPECT_LE(rel_l2(da.read(), h.da), tol) << what << " dA";
      EXPECT_LE(rel_l2(db.read(), h.db), tol) << what << " dB";
      EXPECT_LE(rel_l2(dx.read(), h.dx), tol) << what << " dx";
      if (!with_dx) {
        EXPECT_EQ(dx.read(), dx0) << what << " dx untouched without an input gradient";
      }
    }
  }
}

class CudaLora : public CudaTest {};

TEST_F(CudaLora, ForwardAndBackwardMatchTheCpuOnFp32Storage) { check_fp32(*gpu, cpu, kFp32Tol); }

TEST_F(CudaLora, ForwardAndBackwardMatchTheCpuWithBf16Gemms) {
  CudaBackend bf16(test_options(CudaGemmPrecision::bf16));
  check_fp32(bf16, cpu, kBf16GemmTol);
  EXPECT_GT(bf16.gemm_calls(CudaGemmPrecision::bf16), 0);
}

// The scale multiplies u (and du) exactly once: with B = I-like rows, u is scale x A^T.
TEST_F(CudaLora, TheScaleIsAppliedOnceToUAndDu) {
  const Shape s{37, 48, 5, 24};
  Case h(s, 300);
  DeviceVec<float> x(*gpu, h.x), a(*gpu, h.a), b(*gpu, h.b), y(*gpu, h.y), u(*gpu, h.u), dy(*gpu, h.dy),
      du(*gpu, h.du), da(*gpu, h.da), db(*gpu, h.db);
  gpu->lora_fwd(x.get(), s.rows, s.in, a.get(), b.get(), s.rank, s.out, 1.0f, u.get(), y.get());
  const std::vector<float> u1 = u.read();
  gpu->lora_fwd(x.get(), s.rows, s.in, a.get(), b.get(), s.rank, s.out, kScale, u.get(), y.get());
  std::vector<float> u1s = u1;
  for (float& v : u1s) v *= kScale;
  EXPECT_LE(rel_l2(u.read(), u1s), kFp32Tol);
  gpu->lora_bwd(x.get(), u.get(), s.rows, s.in, a.get(), b.get(), s.rank, s.out, 1.0f, dy.get(), du.get(), nullptr,
                da.get(), db.get());
  const std::vector<float> du1 = du.read();
  gpu->lora_bwd(x.get(), u.get(), s.rows, s.in, a.get(), b.get(), s.rank, s.out, kScale, dy.get(), du.get(), nullptr,
                da.get(), db.get());
  std::vector<float> du1s = du1;
  for (float& v : du1s) v *= kScale;
  EXPECT_LE(rel_l2(du.read(), du1s), kFp32Tol);
}

// ---- bf16 activations

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

ConstTensor host_in(const std::vector<uint16_t>& v) { return {v.data(), DType::bf16}; }
Tensor host_out(std::vector<uint16_t>& v) { return {v.data(), DType::bf16}; }
ConstTensor dev_in(const DeviceVec<uint16_t>& v) { return {v.get(), DType::bf16}; }
Tensor dev_out(const DeviceVec<uint16_t>& v) { return {v.get(), DType::bf16}; }

void check_bf16_activations(CudaBackend& gpu, CpuBackend& cpu, double tol) {
  for (const Shape& s : kShapes) {
    for (bool with_dx : {false, true}) {
      const std::string what = name_of(s, with_dx);
      Case f(s, 200);
      // Activations as bf16 bit patterns; the adapters and their gradients fp32.
      std::vector<uint16_t> hx = bits_of(f.x), hy = bits_of(f.y), hu = bits_of(f.u), hdy = bits_of(f.dy),
                            hdu = bits_of(f.du), hdx = bits_of(f.dx);
      std::vector<float> ha = f.a, hb = f.b, hda = f.da, hdb = f.db;
      DeviceVec<uint16_t> x(gpu, hx), y(gpu, hy), u(gpu, hu), dy(gpu, hdy), du(gpu, hdu), dx(gpu, hdx);
      DeviceVec<float> a(gpu, ha), b(gpu, hb), da(gpu, hda), db(gpu, hdb);
      cpu.lora_fwd(host_in(hx), s.rows, s.in, ha.data(), hb.data(), s.rank, s.out, kScale, host_out(hu),
                   host_out(hy));
      gpu.lora_fwd(dev_in(x), s.rows, s.in, a.get(), b.get(), s.rank, s.out, kScale, dev_out(u), dev_out(y));
      EXPECT_LE(rel_l2(decode(u.read()), decode(hu)), tol) << what << " u";
      EXPECT_LE(rel_l2(decode(y.read()), decode(hy)), tol) << what << " y";
      const std::vector<uint16_t> dx0 = hdx;
      cpu.lora_bwd(host_in(hx), host_in(hu), s.rows, s.in, ha.data(), hb.data(), s.rank, s.out, kScale,
                   host_in(hdy), host_out(hdu), with_dx ? host_out(hdx) : Tensor(), hda.data(), hdb.data());
      gpu.lora_bwd(dev_in(x), dev_in(u), s.rows, s.in, a.get(), b.get(), s.rank, s.out, kScale, dev_in(dy),
                   dev_out(du), with_dx ? dev_out(dx) : Tensor(), da.get(), db.get());
      EXPECT_LE(rel_l2(decode(du.read()), decode(hdu)), tol) << what << " du";
      EXPECT_LE(rel_l2(decode(dx.read()), decode(hdx)), tol) << what << " dx";
      EXPECT_LE(rel_l2(da.read(), hda), tol) << what << " dA";
      EXPECT_LE(rel_l2(db.read(), hdb), tol) << what << " dB";
      if (!with_dx) {
        EXPECT_EQ(dx.read(), dx0) << what << " dx untouched without an input gradient";
      }
    }
  }
}

TEST_F(CudaLora, ForwardAndBackwardMatchTheCpuOnBf16Activations) {
  check_bf16_activations(*gpu, cpu, kBf16StorageTol);
}

// ---- the op scratch against its declaration

// An activation on the device in its storage dtype (fp32, or bf16 bit patterns).
class Act {
 public:
  Act(CudaBackend& b, const std::vector<float>& v, bool bf16) {
    if (bf16) h_ = std::make_unique<DeviceVec<uint16_t>>(b, bits_of(v));
    else f_ = std::make_unique<DeviceVec<float>>(b, v);
  }
  Tensor t() const { return h_ ? Tensor(h_->get(), DType::bf16) : Tensor(f_->get()); }

 private:
  std::unique_ptr<DeviceVec<float>> f_;
  std::unique_ptr<DeviceVec<uint16_t>> h_;
};

// Each call runs on a backend whose op scratch is fixed at exactly the bytes step/cuda_scratch.h
// declares for it (a larger request throws, naming op_scratch), for every combination of storage
// and GEMM precision the declaration distinguishes.
TEST_F(CudaLora, EveryCallFitsItsDeclaredOpScratch) {
  namespace cs = step::cuda_scratch;
  for (CudaGemmPrecision precision : {CudaGemmPrecision::fp32, CudaGemmPrecision::bf16}) {
    const bool bf16_gemm = precision == CudaGemmPrecision::bf16;
    CudaBackend b(test_options(precision));
    for (bool act16 : {false, true}) {
      for (const Shape& s : kShapes) {
        for (bool with_dx : {false, true}) {
          const std::string what = name_of(s, with_dx) + (act16 ? ", bf16 activations" : ", fp32") +
                                   (bf16_gemm ? ", bf16 GEMMs" : ", fp32 GEMMs");
          cs::LoraShape shape;
          shape.rows = s.rows;
          shape.in = s.in;
          shape.rank = s.rank;
          shape.out = s.out;
          shape.act16 = act16;
          const int64_t fwd = cs::lora_fwd_bytes(shape, bf16_gemm), bwd = cs::lora_bwd_bytes(shape, with_dx, bf16_gemm);
          Case f(s, 400);
          Act x(b, f.x, act16), y(b, f.y, act16), u(b, f.u, act16), dy(b, f.dy, act16), du(b, f.du, act16),
              dx(b, f.dx, act16);
          DeviceVec<float> a(b, f.a), bm(b, f.b), da(b, f.da), db(b, f.db);
          b.size_op_scratch(fwd);
          EXPECT_NO_THROW(b.lora_fwd(x.t(), s.rows, s.in, a.get(), bm.get(), s.rank, s.out, kScale, u.t(), y.t()))
              << what << ", declared " << fwd;
          b.size_op_scratch(bwd);
          EXPECT_NO_THROW(b.lora_bwd(x.t(), u.t(), s.rows, s.in, a.get(), bm.get(), s.rank, s.out, kScale, dy.t(),
                                     du.t(), with_dx ? dx.t() : Tensor(), da.get(), db.get()))
              << what << ", declared " << bwd;
          b.synchronize();
        }
      }
    }
  }
}

// The declaration is not vacuous: a bf16 u written through fp32 GEMMs needs its fp32 output staged
// (rows x rank x 4), and a backend fixed one alignment block short of the declaration refuses it.
TEST_F(CudaLora, AShortOpScratchIsRefusedByName) {
  namespace cs = step::cuda_scratch;
  const Shape s{37, 48, 5, 24};
  cs::LoraShape shape;
  shape.rows = s.rows;
  shape.in = s.in;
  shape.rank = s.rank;
  shape.out = s.out;
  shape.act16 = true;
  const int64_t fwd = cs::lora_fwd_bytes(shape, false);
  ASSERT_GE(fwd, s.rows * s.rank * 4);
  CudaBackend b(test_options());
  Case f(s, 500);
  Act x(b, f.x, true), y(b, f.y, true), u(b, f.u, true);
  DeviceVec<float> a(b, f.a), bm(b, f.b);
  b.size_op_scratch(fwd - 256);
  try {
    b.lora_fwd(x.t(), s.rows, s.in, a.get(), bm.get(), s.rank, s.out, kScale, u.t(), y.t());
    b.synchronize();
    FAIL() << "an op scratch short of the declared need was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op_scratch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lora_fwd"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace oomb::executor::cudatest
