#include "executor/cuda/common.cuh"
#include "executor/cuda/kv_pages.cuh"
#include "executor/cuda/launch_shape.h"
#include "executor/cuda/typed.cuh"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cuda {

namespace {

// Page elements of fp32 or bf16 (runtime/bf16.h: stores round to nearest even, NaN kept; loads exact).
template <bool BF16>
struct PageElem;
template <>
struct PageElem<false> {
  using T = float;
  static __device__ __forceinline__ T store(float x) { return x; }
  static __device__ __forceinline__ float load(T x) { return x; }
};
template <>
struct PageElem<true> {
  using T = uint16_t;
  static __device__ __forceinline__ T store(float x) { return f32_to_bf16(x); }
  static __device__ __forceinline__ float load(T x) { return bf16_to_f32(x); }
};

// Block (page j, slice of the page's rows x kv_dim elements); pages past the grid's y limit (a
// chunk of more than 65,535 pages: one-token pages at a 64K chunk) are strided over.
template <bool BF16>
__global__ void write_kv_pages_kernel(InView k, InView v, int64_t rows, int64_t kvd, int64_t p,
                                      void* const* __restrict__ pages, int64_t npages) {
  using E = PageElem<BF16>;
  for (int64_t j = blockIdx.y; j < npages; j += gridDim.y) {
    const int64_t r0 = j * p;
    const int64_t n = (rows - r0 < p ? rows - r0 : p) * kvd;
    auto* page = static_cast<typename E::T*>(pages[j]);
    for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
      page[e] = E::store(k[r0 * kvd + e]);
      page[p * kvd + e] = E::store(v[r0 * kvd + e]);
    }
  }
}

template <bool BF16>
__global__ void add_from_grad_pages_kernel(const void* const* __restrict__ pages, int64_t npages, int64_t rows,
                                           int64_t kvd, int64_t p, OutView dk, OutView dv) {
  using E = PageElem<BF16>;
  for (int64_t j = blockIdx.y; j < npages; j += gridDim.y) {
    const int64_t r0 = j * p;
    const int64_t n = (rows - r0 < p ? rows - r0 : p) * kvd;
    const auto* page = static_cast<const typename E::T*>(pages[j]);
    for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
      dk.store(r0 * kvd + e, dk.load(r0 * kvd + e) + E::load(page[e]));
      dv.store(r0 * kvd + e, dv.load(r0 * kvd + e) + E::load(page[p * kvd + e]));
    }
  }
}

dim3 grid_of(int64_t npages, int64_t page_elems) {
  const int64_t x = (page_elems + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(x < 1024 ? (x < 1 ? 1 : x) : 1024),
              static_cast<unsigned>(capped_blocks(npages, 1, grid_yz_limit())));
}

}  // namespace

void launch_write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           void* const* pages, int64_t npages, bool bf16, cudaStream_t s) {
  if (npages <= 0 || kv_dim <= 0) return;
  const dim3 grid = grid_of(npages, page_tokens * kv_dim);
  const InView kv = view(k), vv = view(v);
  if (bf16)
    OOMB_LAUNCH(grid, kThreads, 0, s, write_kv_pages_kernel<true>)(kv, vv, rows, kv_dim, page_tokens, pages, npages);
  else
    OOMB_LAUNCH(grid, kThreads, 0, s, write_kv_pages_kernel<false>)(kv, vv, rows, kv_dim, page_tokens, pages, npages);
  OOMB_CUDA_LAUNCH_CHECK("write_kv_pages_kernel");
}

void launch_add_from_grad_pages(const void* const* pages, int64_t npages, int64_t rows, int64_t kv_dim,
                                int64_t page_tokens, Tensor dk, Tensor dv, bool bf16, cudaStream_t s) {
  if (npages <= 0 || kv_dim <= 0) return;
  const dim3 grid = grid_of(npages, page_tokens * kv_dim);
  const OutView dkv = view(dk), dvv = view(dv);
  if (bf16)
    OOMB_LAUNCH(grid, kThreads, 0, s, add_from_grad_pages_kernel<true>)(pages, npages, rows, kv_dim, page_tokens, dkv,
                                                                         dvv);
  else
    OOMB_LAUNCH(grid, kThreads, 0, s, add_from_grad_pages_kernel<false>)(pages, npages, rows, kv_dim, page_tokens, dkv,
                                                                          dvv);
  OOMB_CUDA_LAUNCH_CHECK("add_from_grad_pages_kernel");
}

}  // namespace oomb::executor::cuda
