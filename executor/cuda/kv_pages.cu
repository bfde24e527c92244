#include "executor/cuda/common.cuh"
#include "executor/cuda/kv_pages.cuh"

namespace oomb::executor::cuda {

namespace {

// Block (page j, slice of the page's rows x kv_dim elements).
__global__ void write_kv_pages_kernel(const float* __restrict__ k, const float* __restrict__ v, int64_t rows,
                                      int64_t kvd, int64_t p, float* const* __restrict__ pages) {
  const int64_t j = blockIdx.y, r0 = j * p;
  const int64_t n = (rows - r0 < p ? rows - r0 : p) * kvd;
  float* page = pages[j];
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    page[e] = k[r0 * kvd + e];
    page[p * kvd + e] = v[r0 * kvd + e];
  }
}

__global__ void add_from_grad_pages_kernel(const float* const* __restrict__ pages, int64_t rows, int64_t kvd,
                                           int64_t p, float* __restrict__ dk, float* __restrict__ dv) {
  const int64_t j = blockIdx.y, r0 = j * p;
  const int64_t n = (rows - r0 < p ? rows - r0 : p) * kvd;
  const float* page = pages[j];
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    dk[r0 * kvd + e] += page[e];
    dv[r0 * kvd + e] += page[p * kvd + e];
  }
}

dim3 grid_of(int64_t npages, int64_t page_elems) {
  const int64_t x = (page_elems + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(x < 1024 ? (x < 1 ? 1 : x) : 1024), static_cast<unsigned>(npages));
}

}  // namespace

void launch_write_kv_pages(const float* k, const float* v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           float* const* pages, int64_t npages, cudaStream_t s) {
  if (npages <= 0 || kv_dim <= 0) return;
  write_kv_pages_kernel<<<grid_of(npages, page_tokens * kv_dim), kThreads, 0, s>>>(k, v, rows, kv_dim, page_tokens,
                                                                                  pages);
  OOMB_CUDA_LAUNCH_CHECK("write_kv_pages_kernel");
}

void launch_add_from_grad_pages(const float* const* pages, int64_t npages, int64_t rows, int64_t kv_dim,
                                int64_t page_tokens, float* dk, float* dv, cudaStream_t s) {
  if (npages <= 0 || kv_dim <= 0) return;
  add_from_grad_pages_kernel<<<grid_of(npages, page_tokens * kv_dim), kThreads, 0, s>>>(pages, rows, kv_dim,
                                                                                       page_tokens, dk, dv);
  OOMB_CUDA_LAUNCH_CHECK("add_from_grad_pages_kernel");
}

}  // namespace oomb::executor::cuda
