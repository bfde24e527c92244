#include <cfloat>

#include "executor/cuda/common.cuh"
#include "executor/cuda/launch_shape.h"
#include "executor/cuda/selection.cuh"
#include "executor/cuda/typed.cuh"
#include "step/cuda_layout.h"

namespace oomb::executor::cuda {

namespace {

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

// Scores as a tiled product: a block computes the [kTileTokens x kTilePages] tile of
// sc * qsum[t, g, :] . summaries[k, g, :] for one KV head g, staging both operands through shared
// memory kChunkDim dimensions at a time (coalesced rows of head_dim floats), each thread 2 tokens x 4
// pages. Every score is accumulated in the same order (d ascending, explicit FMA) in both passes,
// so the normaliser and the probabilities agree bit for bit.
constexpr int kTileTokens = 32;
constexpr int kTilePages = 64;
constexpr int kChunkDim = 32;
constexpr int kTileThreads = 256;  // 16 x 16: tokens ty, ty + 16; pages tx + 16 j

struct TileSmem {
  float q[kTileTokens][kChunkDim + 1];
  float s[kTilePages][kChunkDim + 1];
  float score[kTileTokens][kTilePages + 1];
};

// Tokens [t0, t1) (at most kTileTokens) x pages [k0, min(k0 + kTilePages, P)) of KV head g into
// sm.score (unscaled dot products; rows and columns beyond the ranges hold 0).
__device__ void score_tile(const float* __restrict__ qsum, int64_t kv_heads, int64_t hd,
                           const float* __restrict__ summaries, int64_t P, int64_t g, int64_t t0, int64_t t1,
                           int64_t k0, TileSmem& sm) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t kvd = kv_heads * hd;
  float acc[2][4] = {};
  for (int64_t d0 = 0; d0 < hd; d0 += kChunkDim) {
    __syncthreads();
    for (int e = threadIdx.x; e < kTileTokens * kChunkDim; e += kTileThreads) {
      const int i = e / kChunkDim, dd = e % kChunkDim;
      const int64_t t = t0 + i, d = d0 + dd;
      sm.q[i][dd] = t < t1 && d < hd ? qsum[(t * kv_heads + g) * hd + d] : 0.0f;
    }
    for (int e = threadIdx.x; e < kTilePages * kChunkDim; e += kTileThreads) {
      const int k = e / kChunkDim, dd = e % kChunkDim;
      const int64_t page = k0 + k, d = d0 + dd;
      sm.s[k][dd] = page < P && d < hd ? summaries[page * kvd + g * hd + d] : 0.0f;
    }
    __syncthreads();
    const int n = hd - d0 < kChunkDim ? static_cast<int>(hd - d0) : kChunkDim;
    for (int dd = 0; dd < n; ++dd) {
      const float a0 = sm.q[ty][dd], a1 = sm.q[ty + 16][dd];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float b = sm.s[tx + 16 * j][dd];
        acc[0][j] = __fmaf_rn(a0, b, acc[0][j]);
        acc[1][j] = __fmaf_rn(a1, b, acc[1][j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    sm.score[ty][tx + 16 * j] = acc[0][j];
    sm.score[ty + 16][tx + 16 * j] = acc[1][j];
  }
  __syncthreads();
}

// Block per (tile of tokens, KV head): online max and sum of exp of the page scores over all page
// tiles (a warp per 4 tokens, 2 pages per lane).
__global__ void page_norm_kernel(const float* __restrict__ qsum, int64_t rows, int64_t kv_heads, int64_t hd,
                                 const float* __restrict__ summaries, int64_t P, float sc, float* __restrict__ norm_m,
                                 float* __restrict__ norm_l) {
  __shared__ TileSmem sm;
  __shared__ float m_s[kTileTokens], l_s[kTileTokens];
  const int64_t t0 = blockIdx.x * int64_t{kTileTokens}, t1 = t0 + kTileTokens < rows ? t0 + kTileTokens : rows;
  const int64_t g = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x < kTileTokens) {
    m_s[threadIdx.x] = -FLT_MAX;
    l_s[threadIdx.x] = 0;
  }
  for (int64_t k0 = 0; k0 < P; k0 += kTilePages) {
    score_tile(qsum, kv_heads, hd, summaries, P, g, t0, t1, k0, sm);
    const bool v0 = k0 + lane < P, v1 = k0 + lane + 32 < P;
    for (int i = warp * 4; i < warp * 4 + 4; ++i) {
      const float s0 = v0 ? sc * sm.score[i][lane] : -FLT_MAX, s1 = v1 ? sc * sm.score[i][lane + 32] : -FLT_MAX;
      float mx = fmaxf(s0, s1);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_s[i], mx);
      float e = (v0 ? expf(s0 - m_new) : 0.0f) + (v1 ? expf(s1 - m_new) : 0.0f);
      for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(0xffffffffu, e, o);
      __syncwarp();
      if (lane == 0) {
        l_s[i] = l_s[i] * expf(m_s[i] - m_new) + e;
        m_s[i] = m_new;
      }
      __syncwarp();
    }
  }
  __syncthreads();
  if (threadIdx.x < t1 - t0) {
    const int64_t ig = (t0 + threadIdx.x) * kv_heads + g;
    norm_m[ig] = m_s[threadIdx.x];
    norm_l[ig] = l_s[threadIdx.x];
  }
}

// Block per (query page x group, tile of pages), striding over query page x group beyond the grid's
// y limit (launch_shape.h): the sum (double) of the softmax probabilities over the KV heads of the
// group and the tokens of the query page, in the CPU reference's order (heads outer, tokens inner),
// one thread per page.
__global__ void page_scores_kernel(const float* __restrict__ qsum, int64_t rows, int64_t kv_heads, int64_t hd,
                                   int64_t p, const float* __restrict__ summaries, int64_t P, float sc,
                                   const float* __restrict__ norm_m, const float* __restrict__ norm_l, int64_t groups,
                                   int64_t query_groups, double* __restrict__ scores) {
  __shared__ TileSmem sm;
  const int64_t k0 = blockIdx.x * int64_t{kTilePages};
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int64_t jg = blockIdx.y; jg < query_groups; jg += gridDim.y) {  // uniform per block
    const int64_t j = jg / groups, gsel = jg % groups;
    const int64_t t0 = j * p, t1 = t0 + p < rows ? t0 + p : rows;
    const int64_t g0 = groups == 1 ? 0 : gsel, g1 = groups == 1 ? kv_heads : gsel + 1;
    double acc = 0;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t tb = t0; tb < t1; tb += kTileTokens) {
        const int64_t te = tb + kTileTokens < t1 ? tb + kTileTokens : t1;
        score_tile(qsum, kv_heads, hd, summaries, P, g, tb, te, k0, sm);
        // Probabilities in place (each thread its own 2 x 4 entries), then summed per page.
        for (int a = 0; a < 2; ++a) {
          const int i = ty + 16 * a;
          if (tb + i >= te) continue;
          const int64_t ig = (tb + i) * kv_heads + g;
          const float m = norm_m[ig], l = norm_l[ig];
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) sm.score[i][tx + 16 * jj] = expf(sc * sm.score[i][tx + 16 * jj] - m) / l;
        }
        __syncthreads();
        if (threadIdx.x < kTilePages)
          for (int64_t i = 0; i < te - tb; ++i) acc += static_cast<double>(sm.score[i][threadIdx.x]);
      }
    }
    const int64_t k = k0 + threadIdx.x;
    if (threadIdx.x < kTilePages && k < P) scores[jg * P + k] = acc;
  }
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
  return step::cuda_scratch::select_layout(rows, kv_heads, head_dim, qpages, groups, prefix_pages, budget).bytes;
}

SelectWorkspace SelectWorkspace::carve(void* base, int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t qpages,
                                       int64_t groups, int64_t prefix_pages, int64_t budget) {
  const step::cuda_scratch::SelectLayout l =
      step::cuda_scratch::select_layout(rows, kv_heads, head_dim, qpages, groups, prefix_pages, budget);
  char* p = static_cast<char*>(base);
  SelectWorkspace w;
  w.qsum = reinterpret_cast<float*>(p + l.qsum);
  w.norm_m = reinterpret_cast<float*>(p + l.norm_m);
  w.norm_l = reinterpret_cast<float*>(p + l.norm_l);
  w.scores = reinterpret_cast<double*>(p + l.scores);
  w.selected = reinterpret_cast<int32_t*>(p + l.selected);
  w.staged = reinterpret_cast<float*>(p + l.staged);
  return w;
}

void launch_page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out,
                           cudaStream_t s) {
  const int64_t n = (rows + page_tokens - 1) / page_tokens * kv_dim;
  if (n <= 0) return;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, page_summaries_kernel)(view(k), rows, kv_dim, page_tokens, view(out));
  OOMB_CUDA_LAUNCH_CHECK("page_summaries_kernel");
}

void launch_page_scores(const float* q, int64_t rows, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                        int64_t page_tokens, const float* summaries, int64_t prefix_pages, bool per_kv_head,
                        bool stage, const SelectWorkspace& ws, cudaStream_t s) {
  if (rows <= 0 || prefix_pages <= 0) return;
  const int64_t qpages = (rows + page_tokens - 1) / page_tokens, groups = per_kv_head ? kv_heads : 1;
  const float sc = 1.0f / sqrtf(static_cast<float>(head_dim));
  const int64_t n = rows * kv_heads * head_dim;
  // One read of the layer's summaries (over the host link when they live in the host tier), then
  // both passes read the device copy.
  const float* sums = summaries;
  if (stage) {
    OOMB_CUDA_CHECK(cudaMemcpyAsync(ws.staged, summaries, static_cast<size_t>(prefix_pages * kv_heads * head_dim) * 4,
                                    cudaMemcpyDefault, s));
    sums = ws.staged;
  }
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, group_sum_kernel)(q, rows, q_heads, kv_heads, head_dim, ws.qsum);
  OOMB_CUDA_LAUNCH_CHECK("group_sum_kernel");
  const dim3 norm_grid(static_cast<unsigned>((rows + kTileTokens - 1) / kTileTokens), static_cast<unsigned>(kv_heads));
  OOMB_LAUNCH(norm_grid, kTileThreads, 0, s, page_norm_kernel)(ws.qsum, rows, kv_heads, head_dim, sums,
                                                                prefix_pages, sc, ws.norm_m, ws.norm_l);
  OOMB_CUDA_LAUNCH_CHECK("page_norm_kernel");
  const GridShape g = page_scores_grid(prefix_pages, kTilePages, qpages, groups, grid_yz_limit());
  const dim3 grid(static_cast<unsigned>(g.x), static_cast<unsigned>(g.y));
  OOMB_LAUNCH(grid, kTileThreads, 0, s, page_scores_kernel)(ws.qsum, rows, kv_heads, head_dim, page_tokens, sums,
                                                   prefix_pages, sc, ws.norm_m, ws.norm_l, groups, qpages * groups,
                                                   ws.scores);
  OOMB_CUDA_LAUNCH_CHECK("page_scores_kernel");
}

void launch_top_pages(int64_t rows, int64_t page_tokens, int64_t groups, int64_t prefix_pages, int64_t budget,
                      const SelectWorkspace& ws, cudaStream_t s) {
  if (rows <= 0 || prefix_pages <= 0 || budget <= 0) return;
  const int64_t qpages = (rows + page_tokens - 1) / page_tokens;
  OOMB_LAUNCH(static_cast<unsigned>(qpages * groups), kThreads, 0, s, topk_kernel)(ws.scores, prefix_pages, budget,
                                                                          ws.selected);
  OOMB_CUDA_LAUNCH_CHECK("topk_kernel");
}

}  // namespace oomb::executor::cuda
