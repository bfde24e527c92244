#include "executor/cuda/common.cuh"
#include "executor/cuda/embedding.cuh"

namespace oomb::executor::cuda {

namespace {

// One block per row (grid-strided over rows), threads over the hidden dimension.
__global__ void embedding_fwd_kernel(const int32_t* __restrict__ ids, int64_t rows, const float* __restrict__ table,
                                     int64_t hidden, float* __restrict__ out) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const float* src = table + int64_t{ids[t]} * hidden;
    float* dst = out + t * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void embedding_bwd_kernel(const int32_t* __restrict__ ids, int64_t rows, const float* __restrict__ dout,
                                     int64_t hidden, float* __restrict__ dtable) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    float* dst = dtable + int64_t{ids[t]} * hidden;
    const float* src = dout + t * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) atomicAdd(dst + i, src[i]);
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void launch_embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out,
                          cudaStream_t s) {
  if (rows <= 0 || hidden <= 0) return;
  embedding_fwd_kernel<<<row_blocks(rows), kThreads, 0, s>>>(ids, rows, table, hidden, out);
  OOMB_CUDA_LAUNCH_CHECK("embedding_fwd_kernel");
}

void launch_embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dtable_acc,
                          cudaStream_t s) {
  if (rows <= 0 || hidden <= 0) return;
  embedding_bwd_kernel<<<row_blocks(rows), kThreads, 0, s>>>(ids, rows, dout, hidden, dtable_acc);
  OOMB_CUDA_LAUNCH_CHECK("embedding_bwd_kernel");
}

}  // namespace oomb::executor::cuda
