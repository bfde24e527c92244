#include "executor/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "executor/cuda/cuda_check.h"

namespace oomb::executor::cuda {

inline bool status_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
inline const char* status_name(cublasStatus_t s) { return cublasLtGetStatusName(s); }
inline const char* status_message(cublasStatus_t s) { return cublasLtGetStatusString(s); }

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

// Largest power of two (<= 256) that divides the address (bf16 operands may sit at 2 bytes).
int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 256;
  while (a > 2 && v % static_cast<uintptr_t>(a) != 0) a /= 2;
  return a;
}

cublasLtHandle_t h(void* p) { return static_cast<cublasLtHandle_t>(p); }

}  // namespace

Gemm::Gemm(void* workspace, int64_t workspace_bytes) : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t handle = nullptr;
  OOMB_CUDA_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
}

Gemm::~Gemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(h(handle_));
}

Gemm::Plan* Gemm::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  const auto [prec, ta, tb, m, n, k, lda, ldb, ldc, al_a, al_b, al_c, c_bf16] = key;
  const auto precision = static_cast<CudaGemmPrecision>(prec);
  auto p = std::make_unique<Plan>();
  // fp32 and bf16 operands accumulate in fp32 (CUBLAS_COMPUTE_32F); TF32 rounds fp32 operands to
  // 10-bit mantissas on tensor cores. The scale type (alpha, beta) is fp32 in all three.
  const cublasComputeType_t compute =
      precision == CudaGemmPrecision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t in_type = precision == CudaGemmPrecision::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  OOMB_CUDA_CHECK(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  OOMB_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  OOMB_CUDA_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  OOMB_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->a, in_type, u(ta ? k : m), u(ta ? m : k), lda));
  OOMB_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->b, in_type, u(tb ? n : k), u(tb ? k : n), ldb));
  OOMB_ASSERT(!c_bf16 || precision == CudaGemmPrecision::bf16, "a bf16 GEMM output needs bf16 operands");
  OOMB_CUDA_CHECK(cublasLtMatrixLayoutCreate(&p->c, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, u(m), u(n), ldc));

  cublasLtMatmulPreference_t pref = nullptr;
  OOMB_CUDA_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const auto ws = static_cast<uint64_t>(workspace_bytes_);
  OOMB_CUDA_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t align[4] = {static_cast<uint32_t>(al_a), static_cast<uint32_t>(al_b), static_cast<uint32_t>(al_c),
                             static_cast<uint32_t>(al_c)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    OOMB_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i], sizeof align[i]));
  if (c_bf16) {
    // One rounding of D: no split-K partial sums stored (and summed) in bf16.
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    OOMB_CUDA_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                                         sizeof schemes));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(h(handle_), p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;  // no algorithm for this combination
  else OOMB_CUDA_CHECK(st);
  // A result is usable only with state SUCCESS (cublasLtMatmulAlgoGetHeuristic's documentation:
  // inspect each returned result's state); otherwise it is no algorithm, like none found.
  if (found > 0 && result.state != CUBLAS_STATUS_SUCCESS) found = 0;
  if (found == 0) {
    plans_[key] = nullptr;
    return nullptr;
  }
  p->algo = result.algo;
  return (plans_[key] = std::move(p)).get();
}

bool Gemm::try_matmul(CudaGemmPrecision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                      cudaStream_t s, bool c_bf16, float alpha) {
  if (m <= 0 || n <= 0) return true;
  OOMB_ASSERT(k > 0, "GEMM with an empty inner dimension");
  std::lock_guard<std::mutex> lock(mu_);
  const Key key{static_cast<int>(precision), trans_a, trans_b, m, n, k, lda, ldb, ldc,
                alignment_of(A),             alignment_of(B), alignment_of(C), c_bf16};
  const Plan* p = plan(key);
  if (!p) return false;
  OOMB_CUDA_CHECK(cublasLtMatmul(h(handle_), p->op, &alpha, A, p->a, B, p->b, &beta, C, p->c, C, p->c, &p->algo,
                                 workspace_, static_cast<size_t>(workspace_bytes_), s));
  return true;
}

bool Gemm::supported(CudaGemmPrecision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                     const void* A, int64_t lda, const void* B, int64_t ldb, const void* C, int64_t ldc,
                     bool c_bf16) {
  if (m <= 0 || n <= 0) return true;
  OOMB_ASSERT(k > 0, "GEMM with an empty inner dimension");
  std::lock_guard<std::mutex> lock(mu_);
  return plan(Key{static_cast<int>(precision), trans_a, trans_b, m, n, k, lda, ldb, ldc, alignment_of(A),
                  alignment_of(B), alignment_of(C), c_bf16}) != nullptr;
}

void Gemm::matmul(CudaGemmPrecision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                  cudaStream_t s, bool c_bf16, float alpha) {
  if (!try_matmul(precision, trans_a, trans_b, m, n, k, A, lda, B, ldb, beta, C, ldc, s, c_bf16, alpha))
    throw Error("cuBLASLt", "", std::string("no algorithm for a ") + std::to_string(m) + " x " + std::to_string(n) +
                                    " x " + std::to_string(k) + " " + to_string(precision) + " GEMM");
}

}  // namespace oomb::executor::cuda
