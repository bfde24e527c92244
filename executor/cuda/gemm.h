#pragma once
// fp32 GEMMs through cuBLASLt for linear_fwd / linear_bwd (row-major operands mapped onto
// column-major cuBLASLt calls), with a plan cache keyed by shape, transposes, epilogue and the
// pointers' alignment (so that an algorithm needing 16-byte alignment is never picked for a
// parameter tensor that starts at an odd float offset). TF32 tensor cores are optional. Biases are
// added by a kernel of ours (elementwise.cuh), not by a cuBLASLt epilogue, whose bias-pointer
// alignment rules are not documented.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace oomb::executor::cuda {

class Gemm {
 public:
  // workspace: device memory of workspace_bytes owned by the caller.
  Gemm(void* workspace, int64_t workspace_bytes, bool tf32);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Column-major: C[m, n] = op(A) op(B) + beta C.
  // op(A) is [m, k]: A stored [k, m] (lda >= k) when trans_a, else [m, k] (lda >= m); same for B.
  void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc, cudaStream_t s);

  bool tf32() const { return tf32_; }

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int>;
  Plan& plan(const Key& key);

  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_;
  int64_t workspace_bytes_;
  bool tf32_;
  std::mutex mu_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace oomb::executor::cuda
