#include "executor/cuda/common.cuh"
#include "executor/cuda/moe.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

// One thread per token: its k largest logits (descending; equal logits by ascending expert, as the
// CPU's partial sort) and their weights.
__global__ void moe_topk_kernel(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                                int32_t* route_experts, float* route_weights) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < rows; t += int64_t{gridDim.x} * blockDim.x) {
    const float* l = logits + t * experts;
    int32_t* sel = route_experts + t * k;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < experts; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || sel[i] == e;
        if (!taken && (best < 0 || l[e] > l[best])) best = e;
      }
      sel[j] = static_cast<int32_t>(best);
    }
    const float mx = l[sel[0]];
    double denom = 0;
    if (renormalize)
      for (int64_t j = 0; j < k; ++j) denom += exp(static_cast<double>(l[sel[j]] - mx));
    else
      for (int64_t e = 0; e < experts; ++e) denom += exp(static_cast<double>(l[e] - mx));
    for (int64_t j = 0; j < k; ++j)
      route_weights[t * k + j] = static_cast<float>(exp(static_cast<double>(l[sel[j]] - mx)) / denom);
  }
}

// One block: each thread owns experts e = threadIdx.x, + blockDim.x, ...; counts its rows, then
// (after a prefix sum over the experts in shared memory) numbers them in token order.
__global__ void moe_pack_kernel(const int32_t* route_experts, int64_t routed, int64_t experts, int32_t* route_rows,
                                int32_t* offsets) {
  OOMB_DYNAMIC_SHARED(int32_t, first);  // experts + 1
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int32_t n = 0;
    for (int64_t i = 0; i < routed; ++i) n += route_experts[i] == e;
    first[e + 1] = n;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    first[0] = 0;
    for (int64_t e = 0; e < experts; ++e) first[e + 1] += first[e];
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e <= experts; e += blockDim.x) offsets[e] = first[e];
  for (int64_t e = threadIdx.x; e < experts; e += blockDim.x) {
    int32_t next = first[e];
    for (int64_t i = 0; i < routed; ++i)
      if (route_experts[i] == e) route_rows[i] = next++;
  }
}

// One thread per token (the CPU reference's formulas, executor/cpu/moe.cpp).
__global__ void moe_route_bwd_kernel(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                                     const int32_t* route_experts, const float* route_weights, const float* d_weights,
                                     float* d_logits) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < rows; t += int64_t{gridDim.x} * blockDim.x) {
    const float* w = route_weights + t * k;
    const float* g = d_weights + t * k;
    float* d = d_logits + t * experts;
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(w[j]) * g[j];
    if (renormalize) {
      for (int64_t e = 0; e < experts; ++e) d[e] = 0.0f;
      for (int64_t j = 0; j < k; ++j) d[route_experts[t * k + j]] = static_cast<float>(w[j] * (g[j] - dot));
      continue;
    }
    const float* l = logits + t * experts;
    float mx = l[0];
    for (int64_t e = 1; e < experts; ++e) mx = fmaxf(mx, l[e]);
    double denom = 0;
    for (int64_t e = 0; e < experts; ++e) denom += exp(static_cast<double>(l[e] - mx));
    for (int64_t e = 0; e < experts; ++e) d[e] = static_cast<float>(exp(static_cast<double>(l[e] - mx)) / denom * -dot);
    for (int64_t j = 0; j < k; ++j) d[route_experts[t * k + j]] += static_cast<float>(w[j] * g[j]);
  }
}

__global__ void moe_gather_kernel(InView x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                                  OutView packed) {
  const int64_t n = rows * k * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t pair = i / dim, c = i % dim;
    packed.store(static_cast<int64_t>(route_rows[pair]) * dim + c, x[(pair / k) * dim + c]);
  }
}

__global__ void moe_combine_kernel(InView packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                                   const float* weights, OutView y, bool accumulate) {
  const int64_t n = rows * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / dim, c = i % dim;
    float s = accumulate ? y.load(i) : 0.0f;
    // In the token's routing order, product and sum rounded apart (no FMA), as the CPU: the same bits.
    for (int64_t j = 0; j < k; ++j)
      s = __fadd_rn(s, __fmul_rn(weights ? weights[t * k + j] : 1.0f,
                                 packed[static_cast<int64_t>(route_rows[t * k + j]) * dim + c]));
    y.store(i, s);
  }
}

__global__ void moe_combine_bwd_rows_kernel(InView dy, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                                            const float* weights, OutView d_packed) {
  const int64_t n = rows * k * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t pair = i / dim, c = i % dim;
    d_packed.store(static_cast<int64_t>(route_rows[pair]) * dim + c, weights[pair] * dy[(pair / k) * dim + c]);
  }
}

// One thread per (token, j): the dot product in double, in element order.
__global__ void moe_combine_bwd_weights_kernel(InView dy, InView packed, int64_t rows, int64_t dim, int64_t k,
                                               const int32_t* route_rows, float* d_weights) {
  for (int64_t pair = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; pair < rows * k;
       pair += int64_t{gridDim.x} * blockDim.x) {
    const int64_t g = (pair / k) * dim, in = static_cast<int64_t>(route_rows[pair]) * dim;
    double dot = 0;
    for (int64_t c = 0; c < dim; ++c) dot += static_cast<double>(dy[g + c]) * packed[in + c];
    d_weights[pair] = static_cast<float>(dot);
  }
}

}  // namespace

void launch_moe_route(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                      int32_t* route_experts, float* route_weights, int32_t* route_rows, int32_t* offsets,
                      cudaStream_t s) {
  if (rows > 0) {
    OOMB_LAUNCH(grid_for(rows), kThreads, 0, s, moe_topk_kernel)
    (logits, rows, experts, k, renormalize, route_experts, route_weights);
    OOMB_CUDA_LAUNCH_CHECK("moe_topk_kernel");
  }
  const int threads = experts < kThreads ? static_cast<int>((experts + 31) / 32 * 32) : kThreads;
  OOMB_LAUNCH(1, threads, (experts + 1) * sizeof(int32_t), s, moe_pack_kernel)
  (route_experts, rows * k, experts, route_rows, offsets);
  OOMB_CUDA_LAUNCH_CHECK("moe_pack_kernel");
}

void launch_moe_route_bwd(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                          const int32_t* route_experts, const float* route_weights, const float* d_weights,
                          float* d_logits, cudaStream_t s) {
  if (rows <= 0) return;
  OOMB_LAUNCH(grid_for(rows), kThreads, 0, s, moe_route_bwd_kernel)
  (logits, rows, experts, k, renormalize, route_experts, route_weights, d_weights, d_logits);
  OOMB_CUDA_LAUNCH_CHECK("moe_route_bwd_kernel");
}

namespace {

// Block e: expert e's routed copies and probability sum over the rows, in double (one writer).
__global__ void moe_aux_statistics_kernel(const float* __restrict__ logits, int64_t rows, int64_t experts, int64_t k,
                                          const int32_t* __restrict__ route_experts, double* __restrict__ counts,
                                          double* __restrict__ prob_sums) {
  __shared__ double red[32];
  const int64_t e = blockIdx.x;
  double count = 0, prob = 0;
  for (int64_t t = threadIdx.x; t < rows; t += blockDim.x) {
    const float* l = logits + t * experts;
    double m = l[0], z = 0;
    for (int64_t i = 1; i < experts; ++i) m = fmax(m, static_cast<double>(l[i]));
    for (int64_t i = 0; i < experts; ++i) z += exp(static_cast<double>(l[i]) - m);
    prob += exp(static_cast<double>(l[e]) - m) / z;
    for (int64_t j = 0; j < k; ++j) count += route_experts[t * k + j] == e ? 1.0 : 0.0;
  }
  count = block_sum(count, red);
  prob = block_sum(prob, red);
  if (threadIdx.x == 0) {
    counts[e] += count;
    prob_sums[e] += prob;
  }
}

// One thread per row.
__global__ void moe_aux_grad_kernel(const float* __restrict__ logits, int64_t rows, int64_t experts,
                                    const float* __restrict__ shares, float scale, float* __restrict__ d_logits) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < rows; t += int64_t{gridDim.x} * blockDim.x) {
    const float* l = logits + t * experts;
    double m = l[0], z = 0, dot = 0;
    for (int64_t i = 1; i < experts; ++i) m = fmax(m, static_cast<double>(l[i]));
    for (int64_t i = 0; i < experts; ++i) z += exp(static_cast<double>(l[i]) - m);
    for (int64_t i = 0; i < experts; ++i) dot += exp(static_cast<double>(l[i]) - m) / z * shares[i];
    for (int64_t i = 0; i < experts; ++i)
      d_logits[t * experts + i] += static_cast<float>(scale * (exp(static_cast<double>(l[i]) - m) / z) * (shares[i] - dot));
  }
}

}  // namespace

void launch_moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k,
                               const int32_t* route_experts, double* counts, double* prob_sums, cudaStream_t s) {
  if (rows <= 0 || experts <= 0) return;
  OOMB_LAUNCH(static_cast<unsigned>(experts), kThreads, 0, s, moe_aux_statistics_kernel)
  (logits, rows, experts, k, route_experts, counts, prob_sums);
  OOMB_CUDA_LAUNCH_CHECK("moe_aux_statistics_kernel");
}

void launch_moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                         float* d_logits, cudaStream_t s) {
  if (rows <= 0 || experts <= 0) return;
  OOMB_LAUNCH(grid_for(rows), kThreads, 0, s, moe_aux_grad_kernel)(logits, rows, experts, shares, scale, d_logits);
  OOMB_CUDA_LAUNCH_CHECK("moe_aux_grad_kernel");
}

void launch_moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows, Tensor packed,
                       cudaStream_t s) {
  if (rows * k * dim <= 0) return;
  OOMB_LAUNCH(grid_for(rows * k * dim), kThreads, 0, s, moe_gather_kernel)(view(x), rows, dim, k, route_rows,
                                                                            view(packed));
  OOMB_CUDA_LAUNCH_CHECK("moe_gather_kernel");
}

void launch_moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                        const float* weights, Tensor y, bool accumulate, cudaStream_t s) {
  if (rows * dim <= 0) return;
  OOMB_LAUNCH(grid_for(rows * dim), kThreads, 0, s, moe_combine_kernel)(view(packed), rows, dim, k, route_rows,
                                                                         weights, view(y), accumulate);
  OOMB_CUDA_LAUNCH_CHECK("moe_combine_kernel");
}

void launch_moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                            const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights,
                            cudaStream_t s) {
  if (rows * k * dim <= 0) return;
  OOMB_LAUNCH(grid_for(rows * k * dim), kThreads, 0, s, moe_combine_bwd_rows_kernel)(view(dy), rows, dim, k,
                                                                                      route_rows, weights,
                                                                                      view(d_packed));
  OOMB_CUDA_LAUNCH_CHECK("moe_combine_bwd_rows_kernel");
  OOMB_LAUNCH(grid_for(rows * k), kThreads, 0, s, moe_combine_bwd_weights_kernel)(view(dy), view(packed), rows, dim, k,
                                                                                   route_rows, d_weights);
  OOMB_CUDA_LAUNCH_CHECK("moe_combine_bwd_weights_kernel");
}

}  // namespace oomb::executor::cuda
