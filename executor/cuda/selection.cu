#include <cfloat>

#include "executor/cuda/common.cuh"
#include "executor/cuda/selection.cuh"
#include "executor/cuda/typed.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr int kPagesPerBlock = 128;
constexpr int kTokenTile = 16;

__global__ void page_summaries_kernel(InView k, int64_t rows, int64_t kvd, int64_t p, OutView out) {
  const int64_t pages = (rows + p - 1) / p;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < pages * kvd;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t j = e / kvd, d = e % kvd, r0 = j * p, r1 = r0 + p < rows ? r0 + p : rows;
    float acc = 0;
    for (int64_t r = r0; r < r1; ++r) acc += k[r * kvd + d];
    out.store(e, acc / static_cast<float>(r1 - r0));
  }
}

// qsum[i][g][:] = sum over the query heads of KV head g (in head order).
__global__ void group_sum_kernel(const float* __restrict__ q, int64_t rows, int64_t q_heads, int64_t kv_heads,
                                 int64_t hd, float* __restrict__ qsum) {
  const int64_t group = q_heads / kv_heads;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < rows * kv_heads * hd;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e / (kv_heads * hd), g = (e / hd) % kv_heads, d = e % hd;
    float acc = 0;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) acc += q[i * q_heads * hd + h * hd + d];
    qsum[e] = acc;
  }
}

// The score of one page for one query: computed identically (fixed order, explicit FMA) wherever it
// is needed, so the normaliser and the probabilities agree bit for bit.
__device__ __forceinline__ float page_score(const float* q, const float* summary, int64_t hd, float sc) {
  float dot = 0;
  for (int64_t d = 0; d < hd; ++d) dot = __fmaf_rn(q[d], summary[d], dot);
  return sc * dot;
}

// Block per (token, KV head): max and sum of exp of the page scores.
__global__ void page_norm_kernel(const float* __restrict__ qsum, int64_t kv_heads, int64_t hd,
                                 const float* __restrict__ summaries, int64_t P, float sc, float* __restrict__ norm_m,
                                 float* __restrict__ norm_l) {
  __shared__ float red[32];
  const int64_t ig = blockIdx.x, g = ig % kv_heads;
  const float* qv = qsum + ig * hd;
  const int64_t kvd = kv_heads * hd;
  float m = -FLT_MAX;
  for (int64_t k = threadIdx.x; k < P; k += blockDim.x)
    m = fmaxf(m, page_score(qv, summaries + k * kvd + g * hd, hd, sc));
  m = block_max(m, red);
  float l = 0;
  for (int64_t k = threadIdx.x; k < P; k += blockDim.x)
    l += expf(page_score(qv, summaries + k * kvd + g * hd, hd, sc) - m);
  l = block_sum(l, red);
  if (threadIdx.x == 0) {
    norm_m[ig] = m;
    norm_l[ig] = l;
  }
}

// Block per (query page x group, tile of pages); thread per page: sum (double) of the softmax
// probabilities over the KV heads of the group and the tokens of the query page, in the CPU
// reference's order (heads outer, tokens inner).
__global__ void page_scores_kernel(const float* __restrict__ qsum, int64_t rows, int64_t kv_heads, int64_t hd,
                                   int64_t p, const float* __restrict__ summaries, int64_t P, float sc,
                                   const float* __restrict__ norm_m, const float* __restrict__ norm_l, int64_t groups,
                                   double* __restrict__ scores) {
  extern __shared__ float qtile[];  // [kTokenTile][hd]
  const int64_t jg = blockIdx.y, j = jg / groups, gsel = jg % groups;
  const int64_t k = blockIdx.x * int64_t{kPagesPerBlock} + threadIdx.x;
  const int64_t kvd = kv_heads * hd;
  const int64_t t0 = j * p, t1 = t0 + p < rows ? t0 + p : rows;
  const int64_t g0 = groups == 1 ? 0 : gsel, g1 = groups == 1 ? kv_heads : gsel + 1;
  double acc = 0;
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t tb = t0; tb < t1; tb += kTokenTile) {
      const int64_t nt = t1 - tb < kTokenTile ? t1 - tb : kTokenTile;
      __syncthreads();
      for (int64_t e = threadIdx.x; e < nt * hd; e += blockDim.x)
        qtile[e] = qsum[((tb + e / hd) * kv_heads + g) * hd + e % hd];
      __syncthreads();
      if (k < P) {
        const float* summary = summaries + k * kvd + g * hd;
        for (int64_t i = 0; i < nt; ++i) {
          const int64_t ig = (tb + i) * kv_heads + g;
          const float s = page_score(qtile + i * hd, summary, hd, sc);
          acc += static_cast<double>(expf(s - norm_m[ig]) / norm_l[ig]);
        }
      }
    }
  }
  if (k < P) scores[jg * P + k] = acc;
}

// Exclusive prefix sum over the block (blockDim.x a multiple of 32); *total gets the block sum.
__device__ int block_exclusive_scan(int v, int* total, int* warp_sums) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int result = (warp == 0 ? 0 : warp_sums[warp - 1]) + inc - v;
  *total = warp_sums[warps - 1];
  __syncthreads();
  return result;
}

// Block per (query page x group): the `budget` largest scores (non-negative doubles, compared as
// their bit patterns) by an 8-bit radix select, then the chosen pages in ascending order.
__global__ void topk_kernel(const double* __restrict__ scores, int64_t P, int64_t budget, int32_t* __restrict__ out) {
  __shared__ unsigned hist[256];
  __shared__ unsigned long long s_prefix;
  __shared__ int64_t s_remaining;
  __shared__ int warp_sums[32];
  const double* row = scores + blockIdx.x * P;
  int32_t* dst = out + blockIdx.x * budget;
  const int64_t take = budget < P ? budget : P;
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_remaining = take;
  }
  __syncthreads();
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const unsigned long long prefix = s_prefix;
    const unsigned long long hi = shift == 56 ? 0ull : ~0ull << (shift + 8);
    for (int64_t k = threadIdx.x; k < P; k += blockDim.x) {
      const auto key = static_cast<unsigned long long>(__double_as_longlong(row[k]));
      if ((key & hi) == prefix) atomicAdd(&hist[(key >> shift) & 255], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t rem = s_remaining;
      int64_t cum = 0;
      for (int d = 255; d >= 0; --d) {
        if (cum + hist[d] >= rem) {
          s_prefix = prefix | (static_cast<unsigned long long>(d) << shift);
          s_remaining = rem - cum;
          break;
        }
        cum += hist[d];
      }
    }
    __syncthreads();
  }
  const unsigned long long threshold = s_prefix;
  const int64_t take_equal = s_remaining;  // how many of the keys equal to the threshold are taken
  int64_t seen_equal = 0, written = 0;
  for (int64_t base = 0; base < P; base += blockDim.x) {
    const int64_t k = base + threadIdx.x;
    const unsigned long long key = k < P ? static_cast<unsigned long long>(__double_as_longlong(row[k])) : 0ull;
    const int eq = k < P && key == threshold, gt = k < P && key > threshold;
    int eq_total = 0, sel_total = 0;
    const int eq_rank = block_exclusive_scan(eq, &eq_total, warp_sums);
    const int sel = gt || (eq && seen_equal + eq_rank < take_equal);
    const int pos = block_exclusive_scan(sel, &sel_total, warp_sums);
    if (sel) dst[written + pos] = static_cast<int32_t>(k);
    seen_equal += eq_total;
    written += sel_total;
  }
}

}  // namespace

int64_t SelectWorkspace::bytes(int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t qpages, int64_t groups,
                               int64_t prefix_pages, int64_t budget) {
  auto up = [](int64_t b) { return (b + 255) / 256 * 256; };
  return up(rows * kv_heads * head_dim * 4) + 2 * up(rows * kv_heads * 4) + up(qpages * groups * prefix_pages * 8) +
         up(qpages * groups * budget * 4);
}

SelectWorkspace SelectWorkspace::carve(void* base, int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t qpages,
                                       int64_t groups, int64_t prefix_pages, int64_t budget) {
  auto up = [](int64_t b) { return (b + 255) / 256 * 256; };
  char* p = static_cast<char*>(base);
  SelectWorkspace w;
  w.qsum = reinterpret_cast<float*>(p);
  p += up(rows * kv_heads * head_dim * 4);
  w.norm_m = reinterpret_cast<float*>(p);
  p += up(rows * kv_heads * 4);
  w.norm_l = reinterpret_cast<float*>(p);
  p += up(rows * kv_heads * 4);
  w.scores = reinterpret_cast<double*>(p);
  p += up(qpages * groups * prefix_pages * 8);
  w.selected = reinterpret_cast<int32_t*>(p);
  return w;
}

void launch_page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out,
                           cudaStream_t s) {
  const int64_t n = (rows + page_tokens - 1) / page_tokens * kv_dim;
  if (n <= 0) return;
  page_summaries_kernel<<<grid_for(n), kThreads, 0, s>>>(view(k), rows, kv_dim, page_tokens, view(out));
  OOMB_CUDA_LAUNCH_CHECK("page_summaries_kernel");
}

void launch_select_pages(const float* q, int64_t rows, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                         int64_t page_tokens, const float* summaries, int64_t prefix_pages, int64_t budget,
                         bool per_kv_head, const SelectWorkspace& ws, cudaStream_t s) {
  if (rows <= 0 || prefix_pages <= 0 || budget <= 0) return;
  const int64_t qpages = (rows + page_tokens - 1) / page_tokens, groups = per_kv_head ? kv_heads : 1;
  const float sc = 1.0f / sqrtf(static_cast<float>(head_dim));
  const int64_t n = rows * kv_heads * head_dim;
  group_sum_kernel<<<grid_for(n), kThreads, 0, s>>>(q, rows, q_heads, kv_heads, head_dim, ws.qsum);
  OOMB_CUDA_LAUNCH_CHECK("group_sum_kernel");
  page_norm_kernel<<<static_cast<unsigned>(rows * kv_heads), kThreads, 0, s>>>(ws.qsum, kv_heads, head_dim, summaries,
                                                                              prefix_pages, sc, ws.norm_m, ws.norm_l);
  OOMB_CUDA_LAUNCH_CHECK("page_norm_kernel");
  const dim3 grid(static_cast<unsigned>((prefix_pages + kPagesPerBlock - 1) / kPagesPerBlock),
                  static_cast<unsigned>(qpages * groups));
  const size_t smem = static_cast<size_t>(kTokenTile * head_dim) * sizeof(float);
  if (smem > 48 * 1024)
    OOMB_CUDA_CHECK(cudaFuncSetAttribute(page_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem)));
  page_scores_kernel<<<grid, kPagesPerBlock, smem, s>>>(ws.qsum, rows, kv_heads, head_dim, page_tokens, summaries,
                                                        prefix_pages, sc, ws.norm_m, ws.norm_l, groups, ws.scores);
  OOMB_CUDA_LAUNCH_CHECK("page_scores_kernel");
  topk_kernel<<<static_cast<unsigned>(qpages * groups), kThreads, 0, s>>>(ws.scores, prefix_pages, budget,
                                                                          ws.selected);
  OOMB_CUDA_LAUNCH_CHECK("topk_kernel");
}

}  // namespace oomb::executor::cuda
