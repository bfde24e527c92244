#include "executor/cuda/common.cuh"
#include "executor/cuda/embedding.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

// One block per row (grid-strided over rows), threads over the hidden dimension. A negative id
// (tensor parallelism's vocabulary-parallel embedding: another rank's token) is a zero row forward
// and adds no gradient.
__global__ void embedding_fwd_kernel(const int32_t* __restrict__ ids, int64_t rows, InView table, int64_t hidden,
                                     OutView out) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int32_t id = ids[t];
    const int64_t src = int64_t{id} * hidden, dst = t * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out.store(dst + i, id < 0 ? 0.0f : table[src + i]);
  }
}

__global__ void embedding_bwd_kernel(const int32_t* __restrict__ ids, int64_t rows, InView dout, int64_t hidden,
                                     float* __restrict__ dtable) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    if (ids[t] < 0) continue;
    float* dst = dtable + int64_t{ids[t]} * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) atomicAdd(dst + i, dout[t * hidden + i]);
  }
}

// bf16 table gradient: only the block of an id's first occurrence writes that id's row, so each
// touched row gets one fp32 sum (its rows in row order) and one rounding, without atomics.
__global__ void embedding_bwd_bf16_kernel(const int32_t* __restrict__ ids, int64_t rows, InView dout, int64_t hidden,
                                          OutView dtable) {
  for (int64_t t = blockIdx.x; t < rows; t += gridDim.x) {
    const int32_t id = ids[t];
    if (id < 0) continue;  // uniform over the block: before the block-wide vote
    int seen = 0;
    for (int64_t r = threadIdx.x; r < t; r += blockDim.x) seen |= ids[r] == id;
    if (__syncthreads_or(seen)) continue;
    const int64_t dst = int64_t{id} * hidden;
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
      float acc = 0.0f;
      for (int64_t r = t; r < rows; ++r)
        if (ids[r] == id) acc += dout[r * hidden + i];
      dtable.store(dst + i, dtable.load(dst + i) + acc);
    }
  }
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

}  // namespace

void launch_embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out,
                          cudaStream_t s) {
  if (rows <= 0 || hidden <= 0) return;
  OOMB_LAUNCH(row_blocks(rows), kThreads, 0, s, embedding_fwd_kernel)(ids, rows, view(table), hidden, view(out));
  OOMB_CUDA_LAUNCH_CHECK("embedding_fwd_kernel");
}

void launch_embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden, Tensor dtable_acc,
                          cudaStream_t s) {
  if (rows <= 0 || hidden <= 0) return;
  if (dtable_acc.dtype == DType::f32) {
    OOMB_LAUNCH(row_blocks(rows), kThreads, 0, s, embedding_bwd_kernel)(ids, rows, view(dout), hidden,
                                                                        dtable_acc.f32());
    OOMB_CUDA_LAUNCH_CHECK("embedding_bwd_kernel");
  } else {
    OOMB_LAUNCH(row_blocks(rows), kThreads, 0, s, embedding_bwd_bf16_kernel)(ids, rows, view(dout), hidden,
                                                                             view(dtable_acc));
    OOMB_CUDA_LAUNCH_CHECK("embedding_bwd_bf16_kernel");
  }
}

}  // namespace oomb::executor::cuda
