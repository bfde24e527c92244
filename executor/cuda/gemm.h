#pragma once
// GEMMs through cuBLASLt for linear_fwd / linear_bwd (row-major operands mapped onto column-major
// cuBLASLt calls), with a plan cache keyed by precision, shape, transposes and the pointers'
// alignment (so that an algorithm needing 16-byte alignment is never picked for a parameter tensor
// that starts at an odd float offset). Precisions (CudaGemmPrecision): fp32 (CUBLAS_COMPUTE_32F),
// TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) on fp32 A / B, and bf16 tensor cores: A / B
// bf16 (CUDA_R_16BF: bf16 storage as it is, or operands the caller converted), CUBLAS_COMPUTE_32F, fp32
// scale type. C / D are fp32 in every precision, or bf16 with bf16 A / B (c_bf16: bf16 storage of the
// output). beta = 1 accumulates into C: D = A B + C is formed in fp32 from the fp32 accumulators and the
// loaded C and converted to D's type once. With a bf16 D the heuristic may only offer algorithms
// without split-K or with split-K partials kept in fp32 (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE): the
// in-place and output-type reductions would round partial sums to bf16 and D more than once. Biases
// are added by a kernel of ours (elementwise.cuh), not by a cuBLASLt epilogue, whose bias-pointer
// alignment rules are not documented.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "executor/cuda/cuda_backend.h"

namespace oomb::executor::cuda {

class Gemm {
 public:
  // workspace: device memory of workspace_bytes owned by the caller.
  Gemm(void* workspace, int64_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Column-major: C[m, n] = alpha op(A) op(B) + beta C, C fp32 (or bf16 when c_bf16, bf16 precision
  // only). alpha scales the fp32 accumulators before C is added and D rounded (one rounding of a bf16
  // D; the LoRA ops' scale, executor/cuda/README.md); it is not part of the plan's key.
  // op(A) is [m, k]: A stored [k, m] (lda >= k) when trans_a, else [m, k] (lda >= m); same for B.
  // A and B are float arrays for fp32 / tf32 and bf16 bit patterns (uint16_t) for bf16; lda / ldb
  // count elements. Throws an oomb::Error when cuBLASLt has no algorithm.
  void matmul(CudaGemmPrecision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
              const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
              cudaStream_t s, bool c_bf16 = false, float alpha = 1.0f);
  // The same, but returns false (nothing enqueued, the answer cached) when cuBLASLt's heuristic
  // offers no algorithm for this precision, shape and alignment, so that the caller can fall back.
  bool try_matmul(CudaGemmPrecision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  const void* A, int64_t lda, const void* B, int64_t ldb, float beta, void* C, int64_t ldc,
                  cudaStream_t s, bool c_bf16 = false, float alpha = 1.0f);
  // Whether cuBLASLt's heuristic offers an algorithm for this GEMM (nothing enqueued; the answer, and
  // the plan, cached as try_matmul's). Pointers only count by their alignment.
  bool supported(CudaGemmPrecision precision, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 const void* A, int64_t lda, const void* B, int64_t ldb, const void* C, int64_t ldc, bool c_bf16);

 private:
  struct Plan;
  // precision, trans_a, trans_b, m, n, k, lda, ldb, ldc, alignment of A, B, C (bytes), C / D bf16
  using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, bool>;
  Plan* plan(const Key& key);  // nullptr: no algorithm (cached too)

  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_;
  int64_t workspace_bytes_;
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace oomb::executor::cuda
