#pragma once
// The chunk's own K/V rows <-> its pages ([K rows p][V rows p], each row kv_dim floats; a ragged
// last page uses its first rows). `pages` is a device array of page pointers.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace oomb::executor::cuda {

// page j gets rows [j p, min(rows, (j+1) p)) of k and v.
void launch_write_kv_pages(const float* k, const float* v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           float* const* pages, int64_t npages, cudaStream_t s);
// dk += the dK rows of the pages, dv += the dV rows.
void launch_add_from_grad_pages(const float* const* pages, int64_t npages, int64_t rows, int64_t kv_dim,
                                int64_t page_tokens, float* dk, float* dv, cudaStream_t s);

}  // namespace oomb::executor::cuda
