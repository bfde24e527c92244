#pragma once
// Staging of the attention and selection calls of the CUDA backend (cuda_backend.cpp; issue 40,
// part 6: one family per file): the launch metadata laid out as in the device workspace (page
// pointer arrays, selection lists as CSR), the kernels' arguments, the choice between the fp32 and
// the bf16 tensor-core family, and the fp32 forms of bf16 rows in the op scratch. Internal to
// executor/cuda.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "executor/cuda/attention.cuh"
#include "executor/cuda/elementwise.cuh"  // launch_convert
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/gemm_plan.h"  // is_bf16
#include "step/cuda_layout.h"

namespace oomb::executor::cuda::attention_staging {

using gemm_plan::is_bf16;
using step::cuda_scratch::up;

// Host image of a launch's metadata (page pointer arrays, selection lists), laid out as it will be
// in the device workspace; aligned sub-arrays.
class Metadata {
 public:
  template <class T>
  int64_t add(const T* data, int64_t count) {
    const int64_t off = static_cast<int64_t>(bytes_.size());
    const int64_t n = up(count * static_cast<int64_t>(sizeof(T)));
    bytes_.resize(static_cast<size_t>(off + n), 0);
    if (count > 0) std::memcpy(bytes_.data() + off, data, static_cast<size_t>(count) * sizeof(T));
    return off;
  }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  const char* data() const { return bytes_.data(); }

 private:
  std::vector<char> bytes_;
};

struct SelectCsr {
  std::vector<int32_t> offsets, slots;
};

// The selection lists of a call as CSR (offsets per query page and group, then the slots).
SelectCsr csr_of(const PagedAttention& a);
// The kernels' arguments of a call.
AttentionArgs attention_args(const PagedAttention& a);

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class Ptr>
bool all_aligned16(const std::vector<Ptr>& v) {
  return std::all_of(v.begin(), v.end(), [](Ptr p) { return aligned16(p); });
}

// Which family runs a call (after the fallback rule of CudaAttentionKernel::bf16_tensor_core); with
// CudaBackendOptions::attention_kernel_strict a call the tensor-core kernels cannot take is refused.
bool use_tc(const CudaBackendOptions& opt, const AttentionArgs& args, bool buffers_aligned, const char* op);

// fp32 forms of an op's typed rows for the kernels that compute on fp32 rows (attention, selection):
// an fp32 view is used as it is, a bf16 one gets an fp32 copy (exact) in the op scratch; an output
// of bf16 storage gets an fp32 scratch that finish() rounds into it once. Sizes are collected first
// (add_in / add_out), then the scratch is carved after `base` bytes (place), then the copies made.
class Fp32Rows {
 public:
  explicit Fp32Rows(int64_t base) : bytes_(base) {}
  int add_in(ConstTensor t, int64_t n) { return add(t.data, is_bf16(t), n, t, {}); }
  int add_out(Tensor t, int64_t n) { return add(t.data, is_bf16(t), n, {}, t); }
  int64_t bytes() const { return bytes_; }
  // Carves the copies from ws (at least bytes()) and converts the bf16 inputs.
  void place(char* ws, cudaStream_t s) {
    for (Entry& e : entries_) {
      if (e.off < 0) continue;
      e.f32 = reinterpret_cast<float*>(ws + e.off);
      if (e.in) launch_convert(Tensor(e.f32), e.in, e.n, s);
    }
  }
  const float* in(int i) const {
    const Entry& e = entries_[static_cast<size_t>(i)];
    return e.off < 0 ? static_cast<const float*>(e.data) : e.f32;
  }
  float* out(int i) const {
    const Entry& e = entries_[static_cast<size_t>(i)];
    return e.off < 0 ? static_cast<float*>(const_cast<void*>(e.data)) : e.f32;
  }
  // Rounds the fp32 scratch of every bf16 output into its storage.
  void finish(cudaStream_t s) const {
    for (const Entry& e : entries_)
      if (e.off >= 0 && e.out) launch_convert(e.out, e.f32, e.n, s);
  }

 private:
  struct Entry {
    const void* data = nullptr;
    int64_t n = 0, off = -1;
    ConstTensor in;
    Tensor out;
    float* f32 = nullptr;
  };
  int add(const void* data, bool bf16, int64_t n, ConstTensor in, Tensor out) {
    Entry e;
    e.data = data;
    e.n = n;
    e.in = in;
    e.out = out;
    if (bf16 && data && n > 0) {
      e.off = bytes_;
      bytes_ += up(n * 4);
    }
    entries_.push_back(e);
    return static_cast<int>(entries_.size()) - 1;
  }
  int64_t bytes_;
  std::vector<Entry> entries_;
};

}  // namespace oomb::executor::cuda::attention_staging
