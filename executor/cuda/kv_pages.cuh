#pragma once
// The chunk's own K/V rows <-> its pages ([K rows p][V rows p], each row kv_dim elements of the page
// dtype: fp32, or bf16 when `bf16`, as executor/runtime/backend.h PageDtype; a ragged last page uses
// its first rows). `pages` is a device array of page pointers. bf16 stores round to nearest even
// with runtime/bf16.h's routine (bit for bit the CPU backend's), loads are exact. The rows k, v, dk, dv
// are typed views of either storage dtype (dk / dv: loaded, added to in fp32, rounded once).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

// page j gets rows [j p, min(rows, (j+1) p)) of k and v.
void launch_write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           void* const* pages, int64_t npages, bool bf16, cudaStream_t s);
// dk += the dK rows of the pages, dv += the dV rows.
void launch_add_from_grad_pages(const void* const* pages, int64_t npages, int64_t rows, int64_t kv_dim,
                                int64_t page_tokens, Tensor dk, Tensor dv, bool bf16, cudaStream_t s);

}  // namespace oomb::executor::cuda
