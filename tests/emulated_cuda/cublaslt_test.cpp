// The emulated cuBLASLt (executor/emulated_cuda/cublaslt.cpp), loaded as the CUDA backend loads a
// cuBLASLt (dlopen, then one symbol per entry point), on the emulated runtime's streams and memory.
// Every GEMM is checked against a plain loop written here from cuBLAS's definitions: D = alpha *
// op(A) * op(B) + beta * C, element (r, c) of a column-major matrix at ptr[r + c * ld], a layout's
// rows / cols those of the stored matrix (before the op).
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace oomb::emulated_cuda {
namespace {

// The library's entry points, resolved from the shared library the CUDA backend would load.
struct Lt {
  void* lib = nullptr;
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtGetVersion) version = nullptr;
  decltype(&::cublasLtGetStatusName) status_name = nullptr;
  decltype(&::cublasLtGetStatusString) status_string = nullptr;
  decltype(&::cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
};

template <class Fn>
void resolve(void* lib, Fn* fn, const char* name) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  EXPECT_NE(*fn, nullptr) << name << " is not exported";
}

const Lt& lt() {
  static const Lt l = [] {
    Lt r;
    r.lib = dlopen(OOMB_EMULATED_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(r.lib, nullptr) << dlerror();
    if (!r.lib) return r;
    resolve(r.lib, &r.create, "cublasLtCreate");
    resolve(r.lib, &r.destroy, "cublasLtDestroy");
    resolve(r.lib, &r.version, "cublasLtGetVersion");
    resolve(r.lib, &r.status_name, "cublasLtGetStatusName");
    resolve(r.lib, &r.status_string, "cublasLtGetStatusString");
    resolve(r.lib, &r.desc_create, "cublasLtMatmulDescCreate");
    resolve(r.lib, &r.desc_set, "cublasLtMatmulDescSetAttribute");
    resolve(r.lib, &r.desc_destroy, "cublasLtMatmulDescDestroy");
    resolve(r.lib, &r.layout_create, "cublasLtMatrixLayoutCreate");
    resolve(r.lib, &r.layout_destroy, "cublasLtMatrixLayoutDestroy");
    resolve(r.lib, &r.pref_create, "cublasLtMatmulPreferenceCreate");
    resolve(r.lib, &r.pref_set, "cublasLtMatmulPreferenceSetAttribute");
    resolve(r.lib, &r.pref_destroy, "cublasLtMatmulPreferenceDestroy");
    resolve(r.lib, &r.heuristic, "cublasLtMatmulAlgoGetHeuristic");
    resolve(r.lib, &r.matmul, "cublasLtMatmul");
    return r;
  }();
  return l;
}

// ---- The reference: plain loops from the definitions, in double. --------------------------------

// TF32 keeps 10 of fp32's 23 stored mantissa bits (11 significant bits). The library rounds to
// nearest with ties away from zero (the toolkit's cvt.rna.tf32.f32); here std::round, which rounds
// halves away from zero, on the significand scaled to 11 bits.
float tf32_reference(float v) {
  if (!std::isfinite(v) || v == 0.0f) return v;
  int e = 0;
  const double s = std::frexp(static_cast<double>(v), &e);  // |s| in [0.5, 1)
  return static_cast<float>(std::ldexp(std::round(std::ldexp(s, 11)), e - 11));
}

// bf16 keeps 8 significant bits; round to nearest even (the default rounding mode of nearbyint).
float bf16_reference(float v) {
  if (!std::isfinite(v) || v == 0.0f) return v;
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  int e = 0;
  const double s = std::frexp(static_cast<double>(v), &e);
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(s, 8)), e - 8));
}

// A host copy of a column-major matrix: the value each element holds (exactly representable in
// the storage type), including the padding rows between rows and ld.
struct HostMatrix {
  cudaDataType type = CUDA_R_32F;
  int rows = 0, cols = 0, ld = 0;
  std::vector<float> values;

  HostMatrix(cudaDataType t, int r, int c, int ld_, float padding) : type(t), rows(r), cols(c), ld(ld_) {
    values.assign(static_cast<size_t>(ld) * static_cast<size_t>(cols), padding);
  }
  float& at(int r, int c) { return values[static_cast<size_t>(r) + static_cast<size_t>(c) * static_cast<size_t>(ld)]; }
  float at(int r, int c) const {
    return values[static_cast<size_t>(r) + static_cast<size_t>(c) * static_cast<size_t>(ld)];
  }
  size_t element_bytes() const { return type == CUDA_R_16BF ? 2 : 4; }
  size_t bytes() const { return values.size() * element_bytes(); }

  // The storage bytes: fp32 as is, bf16 as the upper half of the fp32 pattern (exact by construction).
  std::vector<unsigned char> encode() const {
    std::vector<unsigned char> out(bytes());
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t u;
      std::memcpy(&u, &values[i], 4);
      if (type == CUDA_R_16BF) {
        const auto h = static_cast<uint16_t>(u >> 16);
        std::memcpy(&out[i * 2], &h, 2);
      } else {
        std::memcpy(&out[i * 4], &u, 4);
      }
    }
    return out;
  }
  void decode(const std::vector<unsigned char>& in) {
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t u = 0;
      if (type == CUDA_R_16BF) {
        uint16_t h;
        std::memcpy(&h, &in[i * 2], 2);
        u = static_cast<uint32_t>(h) << 16;
      } else {
        std::memcpy(&u, &in[i * 4], 4);
      }
      std::memcpy(&values[i], &u, 4);
    }
  }
};

// Values in [-2, 2) that the type holds exactly: for bf16, multiples of 2^-7 below 2 in magnitude
// (8 significant bits). Built from integers, not by masking an fp32's bits: GCC 12.2 at -O2 drops a
// conditional `bits & 0xffff0000` on a float (seen here; an unconditional one survives).
void fill(HostMatrix& x, std::mt19937& rng) {
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  std::uniform_int_distribution<int> steps(-255, 255);
  for (int c = 0; c < x.cols; ++c)
    for (int r = 0; r < x.rows; ++r)
      x.at(r, c) = x.type == CUDA_R_16BF ? static_cast<float>(steps(rng)) / 128.0f : real(rng);
}

struct Spec {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType ab = CUDA_R_32F;  // A and B
  cudaDataType cd = CUDA_R_32F;  // C and D
  bool ta = false, tb = false;
  int m = 1, n = 1, k = 1;
  int pad_a = 0, pad_b = 0, pad_c = 0, pad_d = 0;  // ld - rows
  float alpha = 1.0f, beta = 0.0f;
  bool in_place = false;  // C == D (Cdesc == Ddesc)
  bool nan_c = false;     // out of place, C all NaN (for beta == 0)
};

std::string label(const Spec& s) {
  return "compute " + std::to_string(s.compute) + " AB " + std::to_string(s.ab) + " CD " + std::to_string(s.cd) +
         (s.ta ? " T" : " N") + (s.tb ? "T" : "N") + " m " + std::to_string(s.m) + " n " + std::to_string(s.n) +
         " k " + std::to_string(s.k) + " pads " + std::to_string(s.pad_a) + "," + std::to_string(s.pad_b) + "," +
         std::to_string(s.pad_c) + "," + std::to_string(s.pad_d) + " alpha " + std::to_string(s.alpha) + " beta " +
         std::to_string(s.beta) + (s.in_place ? " in place" : "");
}

// D = alpha op(A) op(B) + beta C from the stored matrices, in double; under FAST_TF32 the multiply
// reads A and B rounded to TF32.
HostMatrix reference(const Spec& s, const HostMatrix& a, const HostMatrix& b, const HostMatrix& c, int ld_d) {
  const bool tf32 = s.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const auto in = [&](float v) { return static_cast<double>(tf32 ? tf32_reference(v) : v); };
  HostMatrix d(s.cd, s.m, s.n, ld_d, 0.0f);
  for (int j = 0; j < s.n; ++j)
    for (int i = 0; i < s.m; ++i) {
      double sum = 0.0;
      for (int p = 0; p < s.k; ++p) {
        const double op_a = s.ta ? in(a.at(p, i)) : in(a.at(i, p));  // op(A)(i, p)
        const double op_b = s.tb ? in(b.at(j, p)) : in(b.at(p, j));  // op(B)(p, j)
        sum += op_a * op_b;
      }
      double v = static_cast<double>(s.alpha) * sum;
      if (s.beta != 0.0f) v += static_cast<double>(s.beta) * c.at(i, j);
      d.at(i, j) = static_cast<float>(v);
    }
  return d;
}

// The largest error a correct fp32 evaluation may make: a few fp32 ulps of the sum of magnitudes,
// plus half a bf16 ulp when D is bf16.
double tolerance(const Spec& s, const HostMatrix& a, const HostMatrix& b, const HostMatrix& c, int i, int j,
                 double expected) {
  constexpr double kFp32Ulps = 4.0 * std::numeric_limits<float>::epsilon();
  constexpr double kBf16HalfUlp = 1.0 / 256.0;
  double magnitude = 0.0;
  for (int p = 0; p < s.k; ++p)
    magnitude += std::fabs((s.ta ? a.at(p, i) : a.at(i, p)) * (s.tb ? b.at(j, p) : b.at(p, j)));
  magnitude = std::fabs(s.alpha) * magnitude + (s.beta != 0.0f ? std::fabs(s.beta * c.at(i, j)) : 0.0);
  double tol = kFp32Ulps * magnitude + std::numeric_limits<float>::min();
  if (s.cd == CUDA_R_16BF) tol += kBf16HalfUlp * std::fabs(expected);
  return tol;
}

// ---- Device plumbing. ------------------------------------------------------------------------

struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&ptr, bytes), cudaSuccess); }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* bytes() { return static_cast<char*>(ptr); }
};

void upload(void* dst, const HostMatrix& x) {
  const std::vector<unsigned char> b = x.encode();
  ASSERT_EQ(cudaMemcpy(dst, b.data(), b.size(), cudaMemcpyHostToDevice), cudaSuccess);
}

void download(HostMatrix& x, const void* src) {
  std::vector<unsigned char> b(x.bytes());
  ASSERT_EQ(cudaMemcpy(b.data(), src, b.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  x.decode(b);
}

// One handle, descriptors and a preference, destroyed in reverse.
struct Plan {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;

  Plan() { EXPECT_EQ(lt().create(&handle), CUBLAS_STATUS_SUCCESS); }
  ~Plan() {
    release();
    if (handle) lt().destroy(handle);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  void release() {
    if (pref) lt().pref_destroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, c, d})
      if (l) lt().layout_destroy(l);
    if (op) lt().desc_destroy(op);
    pref = nullptr;
    a = b = c = d = nullptr;
    op = nullptr;
  }

  // The descriptors of a Spec; C gets its own layout unless in place.
  void describe(const Spec& s) {
    ASSERT_EQ(lt().desc_create(&op, s.compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    const int32_t ta = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    ASSERT_EQ(lt().desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt().desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), CUBLAS_STATUS_SUCCESS);
    const int a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const int b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    ASSERT_EQ(lt().layout_create(&a, s.ab, a_rows, a_cols, a_rows + s.pad_a), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt().layout_create(&b, s.ab, b_rows, b_cols, b_rows + s.pad_b), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt().layout_create(&d, s.cd, s.m, s.n, s.m + s.pad_d), CUBLAS_STATUS_SUCCESS);
    if (s.in_place) c = nullptr;
    else ASSERT_EQ(lt().layout_create(&c, s.cd, s.m, s.n, s.m + s.pad_c), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt().pref_create(&pref), CUBLAS_STATUS_SUCCESS);
  }
  cublasLtMatrixLayout_t c_layout() const { return c ? c : d; }

  cublasStatus_t query() {
    return lt().heuristic(handle, op, a, b, c_layout(), d, pref, 1, &result, &found);
  }
  void set_alignment(cublasLtMatmulPreferenceAttributes_t which, uint32_t bytes) {
    ASSERT_EQ(lt().pref_set(pref, which, &bytes, sizeof bytes), CUBLAS_STATUS_SUCCESS);
  }
};

class EmulatedCublasLt : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(lt().lib, nullptr);
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Runs one GEMM of the Spec through the library and checks D (and D's padding, untouched)
  // against the reference.
  void check(const Spec& s, uint32_t seed) {
    SCOPED_TRACE(label(s));
    std::mt19937 rng(seed);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const int a_rows = s.ta ? s.k : s.m, a_cols = s.ta ? s.m : s.k;
    const int b_rows = s.tb ? s.n : s.k, b_cols = s.tb ? s.k : s.n;
    // Padding of A, B and C is NaN: a wrong leading dimension reads it into D.
    HostMatrix a(s.ab, a_rows, a_cols, a_rows + s.pad_a, nan);
    HostMatrix b(s.ab, b_rows, b_cols, b_rows + s.pad_b, nan);
    const int ld_d = s.m + s.pad_d;
    const int ld_c = s.in_place ? ld_d : s.m + s.pad_c;
    constexpr float kSentinel = -7.5f;  // D's padding, which the GEMM must leave as it is
    HostMatrix c(s.cd, s.m, s.n, ld_c, s.in_place ? kSentinel : nan);
    fill(a, rng);
    fill(b, rng);
    if (s.nan_c) std::fill(c.values.begin(), c.values.end(), nan);
    else fill(c, rng);
    HostMatrix d(s.cd, s.m, s.n, ld_d, kSentinel);
    for (int j = 0; j < s.n; ++j)
      for (int i = 0; i < s.m; ++i) d.at(i, j) = 1234.0f;  // overwritten by any correct GEMM

    const HostMatrix expected = reference(s, a, b, c, ld_d);

    DeviceBuffer da(a.bytes()), db(b.bytes()), dc(c.bytes()), dd(d.bytes());
    upload(da.ptr, a);
    upload(db.ptr, b);
    upload(dc.ptr, c);
    upload(dd.ptr, d);
    void* d_ptr = s.in_place ? dc.ptr : dd.ptr;

    Plan plan;
    plan.describe(s);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(plan.found, 1);
    EXPECT_EQ(plan.result.state, CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(plan.result.workspaceSize, 0u);
    ASSERT_EQ(lt().matmul(plan.handle, plan.op, &s.alpha, da.ptr, plan.a, db.ptr, plan.b, &s.beta, dc.ptr,
                          plan.c_layout(), d_ptr, plan.d, &plan.result.algo, nullptr, 0, stream_),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);

    HostMatrix got(s.cd, s.m, s.n, ld_d, 0.0f);
    download(got, d_ptr);
    int reported = 0;
    for (int j = 0; j < s.n; ++j)
      for (int i = 0; i < ld_d; ++i) {
        const float g = got.at(i, j);
        if (i >= s.m) {
          EXPECT_EQ(g, kSentinel) << "D padding (" << i << ", " << j << ") written";
          continue;
        }
        const double want = expected.at(i, j);
        const double tol = tolerance(s, a, b, c, i, j, want);
        if (!(std::fabs(g - want) <= tol) && reported++ < 5)
          ADD_FAILURE() << "D(" << i << ", " << j << ") = " << g << ", expected " << want << " +- " << tol;
      }
    EXPECT_EQ(reported, 0) << "elements wrong";
  }

  cudaStream_t stream_ = nullptr;
};

// ---- The tests. -------------------------------------------------------------------------------

TEST_F(EmulatedCublasLt, VersionAndStatusNames) {
  // CUBLAS_VERSION's encoding, CUDA 13 era, and no release of NVIDIA's (13.99.99).
  EXPECT_GE(lt().version(), size_t{130000});
  EXPECT_LT(lt().version(), size_t{140000});
  EXPECT_STREQ(lt().status_name(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(lt().status_name(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(lt().status_name(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_NE(std::string(lt().status_string(CUBLAS_STATUS_NOT_SUPPORTED)), "");
  EXPECT_EQ(lt().create(nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

// Every transpose combination, in each precision the backend uses, on odd shapes with ld > rows.
TEST_F(EmulatedCublasLt, EveryTransposeAndPrecisionAgainstTheLoop) {
  struct Precision {
    cublasComputeType_t compute;
    cudaDataType ab, cd;
  };
  const Precision precisions[] = {{CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F},
                                  {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F},
                                  {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_32F},
                                  {CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF}};
  struct Shape {
    int m, n, k;
  };
  const Shape shapes[] = {{1, 1, 1}, {3, 7, 17}, {17, 3, 7}, {7, 17, 1}, {1, 17, 3}};
  uint32_t seed = 1;
  for (const Precision& p : precisions)
    for (int t = 0; t < 4; ++t)
      for (const Shape& sh : shapes)
        for (int pad : {0, 3}) {
          Spec s;
          s.compute = p.compute;
          s.ab = p.ab;
          s.cd = p.cd;
          s.ta = (t & 1) != 0;
          s.tb = (t & 2) != 0;
          s.m = sh.m;
          s.n = sh.n;
          s.k = sh.k;
          s.pad_a = pad;
          s.pad_b = pad + 1;
          s.pad_c = pad;
          s.pad_d = pad + 2;
          s.alpha = 0.75f;
          s.beta = 0.5f;
          check(s, seed++);
        }
}

TEST_F(EmulatedCublasLt, AlphaAndBeta) {
  for (cudaDataType cd : {CUDA_R_32F, CUDA_R_16BF}) {
    Spec s;
    s.ab = CUDA_R_16BF;
    s.cd = cd;
    s.m = 7;
    s.n = 3;
    s.k = 17;
    for (float alpha : {1.0f, -2.5f, 0.125f})
      for (float beta : {0.0f, 1.0f, -0.5f}) {
        s.alpha = alpha;
        s.beta = beta;
        check(s, 100);
      }
  }
}

// beta == 0: C is not read, so NaN in C does not reach D.
TEST_F(EmulatedCublasLt, BetaZeroIgnoresC) {
  for (cudaDataType cd : {CUDA_R_32F, CUDA_R_16BF}) {
    Spec s;
    s.ab = cd;
    s.cd = cd;
    s.m = 17;
    s.n = 7;
    s.k = 3;
    s.pad_c = 2;
    s.alpha = 1.5f;
    s.beta = 0.0f;
    s.nan_c = true;
    check(s, 7);
  }
}

// C == D with one layout: D = alpha op(A) op(B) + beta D, the backend's accumulating GEMMs.
TEST_F(EmulatedCublasLt, InPlace) {
  for (cudaDataType ab : {CUDA_R_32F, CUDA_R_16BF})
    for (cudaDataType cd : {CUDA_R_32F, CUDA_R_16BF}) {
      if (ab == CUDA_R_32F && cd == CUDA_R_16BF) continue;  // not a listed combination
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        Spec s;
        s.ab = ab;
        s.cd = cd;
        s.ta = true;
        s.m = 3;
        s.n = 17;
        s.k = 7;
        s.pad_d = 4;
        s.alpha = 0.25f;
        s.beta = beta;
        s.in_place = true;
        check(s, 11);
      }
    }
}

// Runs one 1 x 1 GEMM with k = the size of the inputs (A a row, B a column) and returns D.
float dot(cublasComputeType_t compute, cudaDataType ab, cudaDataType cd, const std::vector<float>& a,
          const std::vector<float>& b, cudaStream_t stream) {
  const int k = static_cast<int>(a.size());
  HostMatrix ha(ab, 1, k, 1, 0.0f), hb(ab, k, 1, k, 0.0f), hd(cd, 1, 1, 1, 0.0f);
  ha.values = a;
  hb.values = b;
  DeviceBuffer da(ha.bytes()), db(hb.bytes()), dd(hd.bytes());
  upload(da.ptr, ha);
  upload(db.ptr, hb);
  Spec s;
  s.compute = compute;
  s.ab = ab;
  s.cd = cd;
  s.k = k;
  Plan plan;
  plan.describe(s);
  EXPECT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(plan.found, 1);
  const float alpha = 1.0f, beta = 0.0f;
  EXPECT_EQ(lt().matmul(plan.handle, plan.op, &alpha, da.ptr, plan.a, db.ptr, plan.b, &beta, dd.ptr, plan.d, dd.ptr,
                        plan.d, &plan.result.algo, nullptr, 0, stream),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  download(hd, dd.ptr);
  return hd.values[0];
}

// FAST_TF32 rounds fp32 A and B to 10 mantissa bits, to nearest with ties away from zero; COMPUTE_32F
// keeps them. 1 + 2^-11 is halfway between TF32's 1 and 1 + 2^-10.
TEST_F(EmulatedCublasLt, Tf32RoundsInputsToTenMantissaBits) {
  const float half = 1.0f + std::ldexp(1.0f, -11);
  const float above = half + std::ldexp(1.0f, -20);
  const float below = 1.0f + std::ldexp(1.0f, -12);
  const float tf32_up = 1.0f + std::ldexp(1.0f, -10);
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, {half}, {1.0f}, stream_), tf32_up);
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, {1.0f}, {-half}, stream_), -tf32_up);
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, {above}, {1.0f}, stream_), tf32_up);
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, {below}, {1.0f}, stream_), 1.0f);
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, {half}, {1.0f}, stream_), half);
  // Both operands are rounded: (1 + 2^-11)^2 under TF32 is (1 + 2^-10)^2.
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, CUDA_R_32F, {half}, {half}, stream_), tf32_up * tf32_up);
  EXPECT_EQ(tf32_reference(half), tf32_up);
}

// A bf16 D is rounded once, to nearest even, from the fp32 result: sums of bf16 products that land
// exactly halfway between two bf16 values.
TEST_F(EmulatedCublasLt, Bf16OutputRoundsOnceToNearestEven) {
  const float e7 = std::ldexp(1.0f, -7), e8 = std::ldexp(1.0f, -8);
  // 1 + 2^-8: halfway between 1 (even) and 1 + 2^-7.
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, {1.0f, 1.0f}, {1.0f, e8}, stream_), 1.0f);
  // 1 + 2^-7 + 2^-8: halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, {1.0f, 1.0f, 1.0f}, {1.0f, e7, e8}, stream_),
            1.0f + 2 * e7);
  // Rounding each partial sum to bf16 would lose every 2^-9 term: 1 + 16 * 2^-9 = 1 + 2^-5.
  std::vector<float> ones(17, 1.0f), terms(17, std::ldexp(1.0f, -9));
  terms[0] = 1.0f;
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_16BF, ones, terms, stream_), 1.0f + std::ldexp(1.0f, -5));
  // The same sums kept in an fp32 D are exact.
  EXPECT_EQ(dot(CUBLAS_COMPUTE_32F, CUDA_R_16BF, CUDA_R_32F, {1.0f, 1.0f}, {1.0f, e8}, stream_), 1.0f + e8);
  EXPECT_EQ(bf16_reference(1.0f + e7 + e8), 1.0f + 2 * e7);
}

// Out of place, C and D may have different leading dimensions.
TEST_F(EmulatedCublasLt, OutOfPlaceWithDifferentLeadingDimensions) {
  Spec s;
  s.m = 7;
  s.n = 3;
  s.k = 17;
  s.pad_c = 5;
  s.pad_d = 0;
  s.beta = 1.0f;
  check(s, 21);
}

// The GEMM is queued on the stream: behind a host function that has not returned it has not run,
// and it needs nothing the caller owned once the call returned (descriptors, alpha, beta).
TEST_F(EmulatedCublasLt, RunsInStreamOrder) {
  Spec s;
  s.m = 3;
  s.n = 7;
  s.k = 17;
  HostMatrix a(CUDA_R_32F, 3, 17, 3, 0.0f), b(CUDA_R_32F, 17, 7, 17, 0.0f), c(CUDA_R_32F, 3, 7, 3, 0.0f);
  std::mt19937 rng(5);
  fill(a, rng);
  fill(b, rng);
  fill(c, rng);
  s.alpha = 2.0f;
  s.beta = 1.0f;
  const HostMatrix expected = reference(s, a, b, c, 3);
  DeviceBuffer da(a.bytes()), db(b.bytes()), dc(c.bytes());
  upload(da.ptr, a);
  upload(db.ptr, b);
  upload(dc.ptr, c);

  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  // Bounded, so that a runtime running host functions inline fails this test instead of hanging.
  const auto block = [](void* f) { static_cast<std::shared_future<void>*>(f)->wait_for(std::chrono::seconds(20)); };
  ASSERT_EQ(cudaLaunchHostFunc(stream_, block, &opened), cudaSuccess);
  {
    Spec in_place = s;
    in_place.in_place = true;
    Plan plan;
    plan.describe(in_place);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    float alpha = s.alpha, beta = s.beta;
    ASSERT_EQ(lt().matmul(plan.handle, plan.op, &alpha, da.ptr, plan.a, db.ptr, plan.b, &beta, dc.ptr, plan.d,
                          dc.ptr, plan.d, &plan.result.algo, nullptr, 0, stream_),
              CUBLAS_STATUS_SUCCESS);
    alpha = beta = std::numeric_limits<float>::quiet_NaN();
  }  // descriptors and handle destroyed while the GEMM waits

  // Read C on a second stream that does not wait for the first: still its old contents.
  cudaStream_t reader = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> before(c.values.size());
  ASSERT_EQ(cudaMemcpyAsync(before.data(), dc.ptr, c.bytes(), cudaMemcpyDeviceToHost, reader), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
  EXPECT_EQ(before, c.values) << "the GEMM ran before the host function ahead of it on its stream returned";
  ASSERT_EQ(cudaStreamDestroy(reader), cudaSuccess);

  gate.set_value();
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  HostMatrix got(CUDA_R_32F, 3, 7, 3, 0.0f);
  download(got, dc.ptr);
  for (int j = 0; j < 7; ++j)
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got.at(i, j), expected.at(i, j), tolerance(s, a, b, c, i, j, expected.at(i, j)));
}

// Configurations outside the emulated surface are NOT_SUPPORTED (the backend then falls back or
// reports), malformed ones INVALID_VALUE.
TEST_F(EmulatedCublasLt, NotSupportedAndInvalid) {
  const auto heuristic_status = [](const Spec& s, auto&& tweak) {
    Plan plan;
    plan.describe(s);
    tweak(plan);
    return plan.query();
  };
  const auto nothing = [](Plan&) {};
  Spec fp32;
  fp32.m = 3;
  fp32.n = 7;
  fp32.k = 17;
  Spec bf16 = fp32;
  bf16.ab = CUDA_R_16BF;
  bf16.cd = CUDA_R_16BF;

  // Data-type combinations absent from cublasLtMatmul()'s table, or not emulated.
  Spec s = bf16;
  s.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  EXPECT_EQ(heuristic_status(s, nothing), CUBLAS_STATUS_NOT_SUPPORTED);
  s = fp32;
  s.cd = CUDA_R_16BF;
  EXPECT_EQ(heuristic_status(s, nothing), CUBLAS_STATUS_NOT_SUPPORTED);
  s = fp32;
  s.compute = CUBLAS_COMPUTE_16F;
  EXPECT_EQ(heuristic_status(s, nothing), CUBLAS_STATUS_NOT_SUPPORTED);
  s = bf16;
  s.cd = CUDA_R_16F;
  EXPECT_EQ(heuristic_status(s, nothing), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               const int32_t scale = CUDA_R_16BF;
                               EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale),
                                         CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // Mixed A / B types.
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               lt().layout_destroy(p.b);
                               EXPECT_EQ(lt().layout_create(&p.b, CUDA_R_16BF, 17, 7, 17), CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // Descriptor attributes beyond the defaults.
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               const int32_t mode = CUBLASLT_POINTER_MODE_DEVICE;
                               EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_POINTER_MODE, &mode, sizeof mode),
                                         CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               const uint32_t epilogue = CUBLASLT_EPILOGUE_RELU;
                               EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
                                         CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               const int32_t t = CUBLAS_OP_T;
                               EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_TRANSC, &t, sizeof t),
                                         CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               const uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
                               EXPECT_EQ(lt().pref_set(p.pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof mode),
                                         CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_NOT_SUPPORTED);
  {
    Plan p;
    p.describe(fp32);
    const void* bias = nullptr;
    EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), CUBLAS_STATUS_NOT_SUPPORTED);
    const float waves = 1.0f;
    EXPECT_EQ(lt().pref_set(p.pref, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, &waves, sizeof waves),
              CUBLAS_STATUS_NOT_SUPPORTED);
    // Attribute storage sizes are checked: TRANSA is an int32_t, MAX_WORKSPACE_BYTES a uint64_t.
    const int64_t wide = CUBLAS_OP_T;
    EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4), CUBLAS_STATUS_INVALID_VALUE);
    const uint32_t narrow = 1 << 20;
    EXPECT_EQ(lt().pref_set(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &narrow, sizeof narrow),
              CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulHeuristicResult_t r{};
    int found = -1;
    EXPECT_EQ(lt().heuristic(p.handle, p.op, p.a, p.b, p.d, p.d, p.pref, 0, &r, &found), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(lt().heuristic(nullptr, p.op, p.a, p.b, p.d, p.d, p.pref, 1, &r, &found),
              CUBLAS_STATUS_NOT_INITIALIZED);
  }
  // Shapes that do not agree, and ld < rows.
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               lt().layout_destroy(p.b);
                               EXPECT_EQ(lt().layout_create(&p.b, CUDA_R_32F, 16, 7, 17), CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               lt().layout_destroy(p.d);
                               EXPECT_EQ(lt().layout_create(&p.d, CUDA_R_32F, 7, 3, 7), CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(heuristic_status(fp32,
                             [](Plan& p) {
                               lt().layout_destroy(p.a);
                               EXPECT_EQ(lt().layout_create(&p.a, CUDA_R_32F, 3, 17, 2), CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_INVALID_VALUE);
  // The transposes are what make shapes agree: op(A) = A^T needs A stored k x m.
  s = fp32;
  EXPECT_EQ(heuristic_status(s,
                             [](Plan& p) {
                               const int32_t t = CUBLAS_OP_T;
                               EXPECT_EQ(lt().desc_set(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
                                         CUBLAS_STATUS_SUCCESS);
                             }),
            CUBLAS_STATUS_INVALID_VALUE);
}

// A, B and D of a Spec, each placed `offset` bytes past a 256-byte boundary of its own buffer.
struct Operands {
  HostMatrix a, b, d;
  DeviceBuffer da, db, dd;
  char* pa;
  char* pb;
  char* pd;
  Operands(const Spec& s, int offset_a, int offset_b, int offset_d, uint32_t seed)
      : a(s.ab, s.ta ? s.k : s.m, s.ta ? s.m : s.k, (s.ta ? s.k : s.m) + s.pad_a, 0.0f),
        b(s.ab, s.tb ? s.n : s.k, s.tb ? s.k : s.n, (s.tb ? s.n : s.k) + s.pad_b, 0.0f),
        d(s.cd, s.m, s.n, s.m + s.pad_d, 0.0f),
        da(a.bytes() + 256),
        db(b.bytes() + 256),
        dd(d.bytes() + 256),
        pa(da.bytes() + offset_a),
        pb(db.bytes() + offset_b),
        pd(dd.bytes() + offset_d) {
    std::mt19937 rng(seed);
    fill(a, rng);
    fill(b, rng);
    fill(d, rng);
    upload(pa, a);
    upload(pb, b);
    upload(pd, d);
  }
  // D = A B in place of D (beta = 0).
  cublasStatus_t run(const Plan& plan, cudaStream_t stream) const {
    const float alpha = 1.0f, beta = 0.0f;
    return lt().matmul(plan.handle, plan.op, &alpha, pa, plan.a, pb, plan.b, &beta, pd, plan.d, pd, plan.d,
                       &plan.result.algo, nullptr, 0, stream);
  }
  void expect_product(const Spec& s) {
    const HostMatrix want = reference(s, a, b, d, d.ld);
    HostMatrix got(s.cd, s.m, s.n, d.ld, 0.0f);
    download(got, pd);
    for (int j = 0; j < s.n; ++j)
      for (int i = 0; i < s.m; ++i) EXPECT_NEAR(got.at(i, j), want.at(i, j), tolerance(s, a, b, d, i, j, want.at(i, j)));
  }
  void expect_unchanged() {
    HostMatrix got(d.type, d.rows, d.cols, d.ld, 0.0f);
    download(got, pd);
    EXPECT_EQ(got.values, d.values) << "a refused GEMM wrote D";
  }
};

// The heuristic honours MIN_ALIGNMENT_* and the leading dimensions it sees; cublasLtMatmul refuses
// a pointer less aligned than the algorithm was selected for, and leaves D alone.
TEST_F(EmulatedCublasLt, Alignment) {
  Spec s;
  s.m = 4;
  s.n = 4;
  s.k = 4;
  {  // Default preferences (256 bytes): the algorithm found needs 16-byte alignment.
    Plan plan;
    plan.describe(s);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(plan.found, 1);
    Operands off(s, 4, 4, 4, 1);
    EXPECT_EQ(off.run(plan, stream_), CUBLAS_STATUS_INVALID_VALUE);
    Operands off_b(s, 0, 8, 0, 2);
    EXPECT_EQ(off_b.run(plan, stream_), CUBLAS_STATUS_INVALID_VALUE);
    Operands aligned(s, 0, 0, 16, 3);
    EXPECT_EQ(aligned.run(plan, stream_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    off.expect_unchanged();
    off_b.expect_unchanged();
    aligned.expect_product(s);
  }
  {  // Preferences of 4 bytes: an algorithm that takes pointers one float past a boundary.
    Plan plan;
    plan.describe(s);
    for (auto which : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                       CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      plan.set_alignment(which, 4);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(plan.found, 1);
    Operands off(s, 4, 4, 4, 4);
    EXPECT_EQ(off.run(plan, stream_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    off.expect_product(s);
  }
  {  // Below one element no algorithm exists: 2 bytes is too little for fp32, enough for bf16.
    Plan plan;
    plan.describe(s);
    plan.set_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 2);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(plan.found, 0);
    Spec bf = s;
    bf.ab = CUDA_R_16BF;
    Plan bf_plan;
    bf_plan.describe(bf);
    bf_plan.set_alignment(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 2);
    ASSERT_EQ(bf_plan.query(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(bf_plan.found, 1);
    Operands off(bf, 2, 0, 0, 5);
    EXPECT_EQ(off.run(bf_plan, stream_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    off.expect_product(bf);
  }
  {  // lda = 17 floats (68 bytes) keeps only 4-byte alignment from column to column, so under the
     // default preferences the algorithm found takes an A one float past a boundary.
    Spec odd = s;
    odd.pad_a = 13;
    Plan plan;
    plan.describe(odd);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(plan.found, 1);
    Operands off(odd, 4, 0, 0, 6);
    EXPECT_EQ(off.run(plan, stream_), CUBLAS_STATUS_SUCCESS);
    Operands off_b(odd, 4, 4, 0, 7);
    EXPECT_EQ(off_b.run(plan, stream_), CUBLAS_STATUS_INVALID_VALUE);  // ldb = 4 floats: 16 bytes
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    off.expect_product(odd);
    off_b.expect_unchanged();
  }
}

// A host (pageable) pointer, or a matrix that runs past its allocation, is refused: on a GPU the
// kernel would fault.
TEST_F(EmulatedCublasLt, MatricesMustBeDeviceMemory) {
  Spec s;
  s.m = 3;
  s.n = 3;
  s.k = 3;
  DeviceBuffer da(9 * 4), db(9 * 4), dd(9 * 4);
  std::vector<float> host(9, 1.0f);
  Plan plan;
  plan.describe(s);
  ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1.0f, beta = 0.0f;
  EXPECT_EQ(lt().matmul(plan.handle, plan.op, &alpha, host.data(), plan.a, db.ptr, plan.b, &beta, dd.ptr, plan.d,
                        dd.ptr, plan.d, &plan.result.algo, nullptr, 0, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  DeviceBuffer short_d(8 * 4);  // one float short of 3 x 3
  EXPECT_EQ(lt().matmul(plan.handle, plan.op, &alpha, da.ptr, plan.a, db.ptr, plan.b, &beta, short_d.ptr, plan.d,
                        short_d.ptr, plan.d, &plan.result.algo, nullptr, 0, stream_),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt().matmul(plan.handle, plan.op, &alpha, da.ptr, plan.a, db.ptr, plan.b, &beta, dd.ptr, plan.d, dd.ptr,
                        plan.d, &plan.result.algo, nullptr, 0, stream_),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

// OOMB_EMULATED_CUBLASLT_NO_BF16=1: no algorithm for bf16 operands (found = 0, as a GPU without
// one reports), fp32 unaffected, and an implicit query (algo = NULL) is NOT_SUPPORTED.
TEST_F(EmulatedCublasLt, NoBf16Switch) {
  struct Env {
    Env() { setenv("OOMB_EMULATED_CUBLASLT_NO_BF16", "1", 1); }
    ~Env() { unsetenv("OOMB_EMULATED_CUBLASLT_NO_BF16"); }
  };
  Spec fp32;
  fp32.m = 3;
  fp32.n = 3;
  fp32.k = 3;
  Spec bf16 = fp32;
  bf16.ab = CUDA_R_16BF;
  {
    Plan plan;
    plan.describe(bf16);
    ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(plan.found, 1) << "bf16 available without the switch";
  }
  Env env;
  for (cudaDataType cd : {CUDA_R_32F, CUDA_R_16BF}) {
    bf16.cd = cd;
    Plan plan;
    plan.describe(bf16);
    plan.found = -1;
    EXPECT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(plan.found, 0);
    DeviceBuffer da(64), db(64), dd(64);
    const float alpha = 1.0f, beta = 0.0f;
    EXPECT_EQ(lt().matmul(plan.handle, plan.op, &alpha, da.ptr, plan.a, db.ptr, plan.b, &beta, dd.ptr, plan.d, dd.ptr,
                          plan.d, nullptr, nullptr, 0, stream_),
              CUBLAS_STATUS_NOT_SUPPORTED);
  }
  Plan plan;
  plan.describe(fp32);
  ASSERT_EQ(plan.query(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(plan.found, 1);
}

}  // namespace
}  // namespace oomb::emulated_cuda
