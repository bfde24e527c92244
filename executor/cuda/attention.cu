// Paged flash attention, fp32 on CUDA cores (see attention.cuh). Tiles of 32 query rows x 32 keys
// in shared memory; 128 threads. Products are tile "GEMMs" written so that every shared-memory
// access is either a broadcast or conflict-free: rows whose elements are read by different lanes at
// the same column are padded to MAXD + 1 floats. MAXD (32, 64, 128) bounds head_dim; the loops run
// to the actual head_dim. Prefix K / V rows are read from pages of fp32 or bf16 (converted to fp32 as
// a tile is loaded: the key's dtype is a runtime test per tile element, see attention_keys.cuh), and
// prefix gradient pages of either dtype are accumulated by their owning block (row_add).
#include <cfloat>

#include "core/error.h"
#include "executor/cuda/attention.cuh"
#include "executor/cuda/attention_keys.cuh"
#include "executor/cuda/common.cuh"

namespace oomb::executor::cuda {

namespace {

constexpr int BQ = 32;   // query rows per tile
constexpr int BK = 32;   // keys per tile
constexpr int NT = 128;  // threads: 4 warps
constexpr int NW = NT / 32;
constexpr float kNegInf = -INFINITY;

// Launch scalars and the key sequence: attention_keys.cuh (shared with the other kernel family).
using attention_keys::attends;
using attention_keys::Dims;
using attention_keys::dims_of;
using attention_keys::in_window;
using attention_keys::key_rows;
using attention_keys::key_rows_bf16;
using attention_keys::page_row;
using attention_keys::Ptrs;
using attention_keys::ptrs_of;
using attention_keys::row_add;
using attention_keys::row_elem;
using attention_keys::slot_list;
using attention_keys::SlotList;

template <int LDA, int LDB>
__device__ __forceinline__ float dot_rows(const float* a, const float* b, int hd) {
  float acc = 0;
#pragma unroll 8
  for (int d = 0; d < hd; ++d) acc = fmaf(a[d], b[d], acc);
  return acc;
}

// Loads 32 query rows (row rho = token r0 + rho / group, head g * group + rho % group) of `src`
// ([T, qd]) times `mul` into dst [BQ][MAXD]; rows past `rows` are zero.
template <int MAXD>
__device__ __forceinline__ void load_rows(const Dims& D, const float* src, int r0, int rho0, int rows, int g,
                                          float mul, float* dst) {
  for (int e = threadIdx.x; e < BQ * D.hd; e += NT) {
    const int r = e / D.hd, d = e % D.hd, rho = rho0 + r;
    float val = 0.0f;
    if (rho < rows) {
      const int t = r0 + rho / D.group, h = g * D.group + rho % D.group;
      val = src[t * D.qd + h * D.hd + d] * mul;
    }
    dst[r * MAXD + d] = val;
  }
}

// Per-row scalars of a query tile ([t * qh + h] arrays), -1 token for rows past `rows`.
__device__ __forceinline__ void load_row_info(const Dims& D, int r0, int rho0, int rows, int g, const float* lse,
                                              const float* drow, int* tok, float* lse_s, float* d_s) {
  if (threadIdx.x < BQ) {
    const int rho = rho0 + threadIdx.x;
    if (rho < rows) {
      const int t = r0 + rho / D.group, h = g * D.group + rho % D.group;
      tok[threadIdx.x] = t;
      if (lse) lse_s[threadIdx.x] = lse[t * D.qh + h];
      if (drow) d_s[threadIdx.x] = drow[t * D.qh + h];
    } else {
      tok[threadIdx.x] = -1;
      if (lse) lse_s[threadIdx.x] = 0.0f;
      if (drow) d_s[threadIdx.x] = 0.0f;
    }
  }
}

template <int MAXD>
constexpr size_t fwd_smem() {
  return sizeof(float) * (BQ * MAXD + BK * (MAXD + 1) + BK * MAXD + BQ * (BK + 1));
}
template <int MAXD>
constexpr size_t dq_smem() {
  return sizeof(float) * (2 * BQ * MAXD + 2 * BK * (MAXD + 1) + BQ * (BK + 1));
}
template <int MAXD>
constexpr size_t dkv_smem() {
  return sizeof(float) * (2 * BQ * MAXD + 2 * BK * (MAXD + 1) + 2 * BQ * (BK + 1));
}

template <int MAXD>
__global__ void __launch_bounds__(NT) attention_fwd_kernel(Dims D, Ptrs P, float* __restrict__ o,
                                                           float* __restrict__ lse) {
  OOMB_DYNAMIC_SHARED(float, smem);
  float* Qs = smem;                    // [BQ][MAXD], pre-scaled
  float* Ks = Qs + BQ * MAXD;          // [BK][MAXD + 1]
  float* Vs = Ks + BK * (MAXD + 1);    // [BK][MAXD]
  float* S = Vs + BK * MAXD;           // [BQ][BK + 1]
  __shared__ float row_m[BQ], row_l[BQ], row_alpha[BQ];
  __shared__ int row_tok[BQ], key_own[BK];
  __shared__ const void* key_k[BK];
  __shared__ const void* key_v[BK];

  const int j = blockIdx.y, g = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = j * D.p, nq = min(D.p, D.T - r0), rows = nq * D.group, rho0 = blockIdx.x * BQ;
  if (rho0 >= rows) return;
  load_rows<MAXD>(D, P.q, r0, rho0, rows, g, D.scale, Qs);
  load_row_info(D, r0, rho0, rows, g, nullptr, nullptr, row_tok, nullptr, nullptr);
  if (threadIdx.x < BQ) {
    row_m[threadIdx.x] = kNegInf;
    row_l[threadIdx.x] = 0.0f;
  }
  const SlotList L = slot_list(D, P, j, g);
  const int last_tok = r0 + (min(rho0 + BQ, rows) - 1) / D.group;
  const int nkeys = L.n * D.p + last_tok + 1;
  constexpr int DPT = MAXD / NW;  // output dims per thread: d = warp + NW * i
  float acc[DPT];
#pragma unroll
  for (int i = 0; i < DPT; ++i) acc[i] = 0.0f;

  for (int k0 = 0; k0 < nkeys; k0 += BK) {
    __syncthreads();  // previous tile fully consumed (and the row info written, first time)
    if (threadIdx.x < BK) {
      const int kappa = k0 + threadIdx.x;
      const void *kr = nullptr, *vr = nullptr;
      int own = -1;
      if (kappa < nkeys) key_rows(D, P, L, g, kappa, kr, vr, own);
      key_k[threadIdx.x] = kr;
      key_v[threadIdx.x] = vr;
      key_own[threadIdx.x] = own;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < BK * D.hd; e += NT) {
      const int c = e / D.hd, d = e % D.hd;
      const void* kr = key_k[c];
      const bool h = key_rows_bf16(D, key_own[c]);
      Ks[c * (MAXD + 1) + d] = kr ? row_elem(kr, h, d) : 0.0f;
      Vs[c * MAXD + d] = kr ? row_elem(key_v[c], h, d) : 0.0f;
    }
    __syncthreads();
    // Scores: lane = key, rows warp + NW * i.
    for (int i = 0; i < BQ / NW; ++i) {
      const int r = warp + NW * i, tq = row_tok[r], own = key_own[lane];
      float s = kNegInf;
      if (tq >= 0 && key_k[lane] && own <= tq && in_window(D, tq, k0 + lane - D.U * D.p))
        s = dot_rows<MAXD, MAXD + 1>(Qs + r * MAXD, Ks + lane * (MAXD + 1), D.hd);
      S[r * (BK + 1) + lane] = s;
    }
    __syncthreads();
    // Online softmax: warp w owns rows w * BQ/NW .. ; lane = key.
    for (int i = 0; i < BQ / NW; ++i) {
      const int r = warp * (BQ / NW) + i;
      const float s = S[r * (BK + 1) + lane];
      const float m_old = row_m[r], m_new = fmaxf(m_old, warp_max(s));
      float pr = 0.0f, alpha = 1.0f;
      if (m_new != kNegInf) {
        pr = s == kNegInf ? 0.0f : expf(s - m_new);
        alpha = m_old == kNegInf ? 0.0f : expf(m_old - m_new);
      }
      const float sum = warp_sum(pr);
      S[r * (BK + 1) + lane] = pr;
      if (lane == 0) {
        row_l[r] = row_l[r] * alpha + sum;
        row_m[r] = m_new;
        row_alpha[r] = alpha;
      }
    }
    __syncthreads();
    // O = alpha O + P V: thread (row = lane, dims warp + NW * i).
    const float alpha = row_alpha[lane];
#pragma unroll
    for (int i = 0; i < DPT; ++i) acc[i] *= alpha;
    for (int c = 0; c < BK; ++c) {
      const float pc = S[lane * (BK + 1) + c];
      const float* vr = Vs + c * MAXD + warp;
#pragma unroll
      for (int i = 0; i < DPT; ++i) acc[i] = fmaf(pc, vr[NW * i], acc[i]);
    }
  }
  __syncthreads();
  const int tq = row_tok[lane];
  if (tq < 0) return;
  const int h = g * D.group + (rho0 + lane) % D.group;
  const float inv = 1.0f / row_l[lane];
#pragma unroll
  for (int i = 0; i < DPT; ++i) {
    const int d = warp + NW * i;
    if (d < D.hd) o[tq * D.qd + h * D.hd + d] = acc[i] * inv;
  }
  if (warp == 0) lse[tq * D.qh + h] = row_m[lane] + logf(row_l[lane]);
}

// D[t, h] = dout . o
__global__ void attention_drow_kernel(const float* __restrict__ dout, const float* __restrict__ o, int64_t n,
                                      int64_t hd, float* __restrict__ drow) {
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0;
    for (int64_t d = 0; d < hd; ++d) acc += dout[e * hd + d] * o[e * hd + d];
    drow[e] = acc;
  }
}

template <int MAXD>
__global__ void __launch_bounds__(NT) attention_dq_kernel(Dims D, Ptrs P, const float* __restrict__ lse,
                                                          const float* __restrict__ dout,
                                                          const float* __restrict__ drow, float* __restrict__ dq) {
  OOMB_DYNAMIC_SHARED(float, smem);
  float* Qs = smem;                    // [BQ][MAXD], pre-scaled
  float* dOs = Qs + BQ * MAXD;         // [BQ][MAXD]
  float* Ks = dOs + BQ * MAXD;         // [BK][MAXD + 1]
  float* Vs = Ks + BK * (MAXD + 1);    // [BK][MAXD + 1]
  float* S = Vs + BK * (MAXD + 1);     // [BQ][BK + 1]: dS
  __shared__ float row_lse[BQ], row_d[BQ];
  __shared__ int row_tok[BQ], key_own[BK];
  __shared__ const void* key_k[BK];
  __shared__ const void* key_v[BK];

  const int j = blockIdx.y, g = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = j * D.p, nq = min(D.p, D.T - r0), rows = nq * D.group, rho0 = blockIdx.x * BQ;
  if (rho0 >= rows) return;
  load_rows<MAXD>(D, P.q, r0, rho0, rows, g, D.scale, Qs);
  load_rows<MAXD>(D, dout, r0, rho0, rows, g, 1.0f, dOs);
  load_row_info(D, r0, rho0, rows, g, lse, drow, row_tok, row_lse, row_d);
  const SlotList L = slot_list(D, P, j, g);
  const int last_tok = r0 + (min(rho0 + BQ, rows) - 1) / D.group;
  const int nkeys = L.n * D.p + last_tok + 1;
  constexpr int DPT = MAXD / NW;
  float acc[DPT];
#pragma unroll
  for (int i = 0; i < DPT; ++i) acc[i] = 0.0f;

  for (int k0 = 0; k0 < nkeys; k0 += BK) {
    __syncthreads();
    if (threadIdx.x < BK) {
      const int kappa = k0 + threadIdx.x;
      const void *kr = nullptr, *vr = nullptr;
      int own = -1;
      if (kappa < nkeys) key_rows(D, P, L, g, kappa, kr, vr, own);
      key_k[threadIdx.x] = kr;
      key_v[threadIdx.x] = vr;
      key_own[threadIdx.x] = own;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < BK * D.hd; e += NT) {
      const int c = e / D.hd, d = e % D.hd;
      const void* kr = key_k[c];
      const bool h = key_rows_bf16(D, key_own[c]);
      Ks[c * (MAXD + 1) + d] = kr ? row_elem(kr, h, d) : 0.0f;
      Vs[c * (MAXD + 1) + d] = kr ? row_elem(key_v[c], h, d) : 0.0f;
    }
    __syncthreads();
    for (int i = 0; i < BQ / NW; ++i) {
      const int r = warp + NW * i, tq = row_tok[r], own = key_own[lane];
      float ds = 0.0f;
      if (tq >= 0 && key_k[lane] && own <= tq && in_window(D, tq, k0 + lane - D.U * D.p)) {
        const float s = dot_rows<MAXD, MAXD + 1>(Qs + r * MAXD, Ks + lane * (MAXD + 1), D.hd);
        const float pr = expf(s - row_lse[r]);
        const float dp = dot_rows<MAXD, MAXD + 1>(dOs + r * MAXD, Vs + lane * (MAXD + 1), D.hd);
        ds = pr * (dp - row_d[r]);
      }
      S[r * (BK + 1) + lane] = ds;
    }
    __syncthreads();
    // dQ += dS K: thread (row = lane, dims warp + NW * i).
    for (int c = 0; c < BK; ++c) {
      const float dsc = S[lane * (BK + 1) + c];
      const float* kr = Ks + c * (MAXD + 1) + warp;
#pragma unroll
      for (int i = 0; i < DPT; ++i) acc[i] = fmaf(dsc, kr[NW * i], acc[i]);
    }
  }
  __syncthreads();
  const int tq = row_tok[lane];
  if (tq < 0) return;
  const int h = g * D.group + (rho0 + lane) % D.group;
#pragma unroll
  for (int i = 0; i < DPT; ++i) {
    const int d = warp + NW * i;
    if (d < D.hd) dq[tq * D.qd + h * D.hd + d] = acc[i] * D.scale;
  }
}

// Block (key tile, g). Key tiles: prefix slot u's rows [kr0, kr0 + 32) for tiles < U * tiles per
// page, then the own rows in tiles of 32.
template <int MAXD>
__global__ void __launch_bounds__(NT) attention_dkv_kernel(Dims D, Ptrs P, const float* __restrict__ lse,
                                                           const float* __restrict__ dout,
                                                           const float* __restrict__ drow,
                                                           void* const* __restrict__ grad_pages,
                                                           float* __restrict__ dk_own, float* __restrict__ dv_own) {
  OOMB_DYNAMIC_SHARED(float, smem);
  float* Qs = smem;                    // [BQ][MAXD], pre-scaled
  float* dOs = Qs + BQ * MAXD;         // [BQ][MAXD]
  float* Ks = dOs + BQ * MAXD;         // [BK][MAXD + 1]
  float* Vs = Ks + BK * (MAXD + 1);    // [BK][MAXD + 1]
  float* Pt = Vs + BK * (MAXD + 1);    // [BQ][BK + 1]: P
  float* dSt = Pt + BQ * (BK + 1);     // [BQ][BK + 1]: dS
  __shared__ float row_lse[BQ], row_d[BQ];
  __shared__ int row_tok[BQ];

  const int g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tiles_per_page = (D.p + BK - 1) / BK;
  const int tile = blockIdx.x;
  const bool prefix = tile < D.U * tiles_per_page;
  int u = -1, kr0 = 0, t0 = 0, nk;
  if (prefix) {
    u = tile / tiles_per_page;
    kr0 = (tile % tiles_per_page) * BK;
    nk = min(BK, D.p - kr0);
  } else {
    t0 = (tile - D.U * tiles_per_page) * BK;
    nk = min(BK, D.T - t0);
  }
  // Keys: own token of key c is t0 + c (own tiles) or -1 (prefix: rows of page u, of the page dtype).
  const bool kh = prefix && D.kv_bf16;
  for (int e = threadIdx.x; e < BK * D.hd; e += NT) {
    const int c = e / D.hd, d = e % D.hd;
    float kv = 0.0f, vv = 0.0f;
    if (c < nk) {
      const void* kr = prefix ? page_row(D, P.pages[u], kr0 + c, g, D.kv_bf16)
                              : static_cast<const void*>(P.k_own + (t0 + c) * D.kvd + g * D.hd);
      const void* vr = prefix ? page_row(D, P.pages[u], D.p + kr0 + c, g, D.kv_bf16)
                              : static_cast<const void*>(P.v_own + (t0 + c) * D.kvd + g * D.hd);
      kv = row_elem(kr, kh, d);
      vv = row_elem(vr, kh, d);
    }
    Ks[c * (MAXD + 1) + d] = kv;
    Vs[c * (MAXD + 1) + d] = vv;
  }
  constexpr int DPT = MAXD / NW;
  float dk[DPT], dv[DPT];
#pragma unroll
  for (int i = 0; i < DPT; ++i) dk[i] = dv[i] = 0.0f;
  const int key_tok = prefix ? -1 : t0 + lane;  // of this thread's key (lane)
  const int key_rel = prefix ? (u - D.U) * D.p + kr0 + lane : t0 + lane;  // its chunk-relative position

  for (int j = prefix ? 0 : t0 / D.p; j < D.qpages; ++j) {
    if (prefix && !attends(D, P, j, g, u)) continue;
    const int r0 = j * D.p, nq = min(D.p, D.T - r0), rows = nq * D.group;
    const int rho_start = prefix ? 0 : max(0, t0 - r0) * D.group;
    for (int rho0 = rho_start; rho0 < rows; rho0 += BQ) {
      __syncthreads();  // previous query tile consumed
      load_rows<MAXD>(D, P.q, r0, rho0, rows, g, D.scale, Qs);
      load_rows<MAXD>(D, dout, r0, rho0, rows, g, 1.0f, dOs);
      load_row_info(D, r0, rho0, rows, g, lse, drow, row_tok, row_lse, row_d);
      __syncthreads();
      // P and dS: lane = key, rows warp + NW * i.
      for (int i = 0; i < BQ / NW; ++i) {
        const int r = warp + NW * i, tq = row_tok[r];
        float pr = 0.0f, ds = 0.0f;
        if (tq >= 0 && lane < nk && key_tok <= tq && in_window(D, tq, key_rel)) {
          const float s = dot_rows<MAXD, MAXD + 1>(Qs + r * MAXD, Ks + lane * (MAXD + 1), D.hd);
          pr = expf(s - row_lse[r]);
          const float dp = dot_rows<MAXD, MAXD + 1>(dOs + r * MAXD, Vs + lane * (MAXD + 1), D.hd);
          ds = pr * (dp - row_d[r]);
        }
        Pt[r * (BK + 1) + lane] = pr;
        dSt[r * (BK + 1) + lane] = ds;
      }
      __syncthreads();
      // dV += P^T dO, dK += dS^T Q (Q pre-scaled): thread (key = lane, dims warp + NW * i).
      for (int r = 0; r < BQ; ++r) {
        const float pr = Pt[r * (BK + 1) + lane], ds = dSt[r * (BK + 1) + lane];
        const float* dor = dOs + r * MAXD + warp;
        const float* qr = Qs + r * MAXD + warp;
#pragma unroll
        for (int i = 0; i < DPT; ++i) {
          dv[i] = fmaf(pr, dor[NW * i], dv[i]);
          dk[i] = fmaf(ds, qr[NW * i], dk[i]);
        }
      }
    }
  }
  if (lane >= nk) return;
  // This block is the only writer of its keys' gradients in this call, and dk / dv hold the call's
  // whole fp32 contribution: one read-add-write (bf16 pages: one rounding) per element.
  void* const gpage = prefix ? grad_pages[u] : nullptr;
#pragma unroll
  for (int i = 0; i < DPT; ++i) {
    const int d = warp + NW * i;
    if (d >= D.hd) continue;
    if (prefix) {
      row_add(page_row(D, gpage, kr0 + lane, g, D.grad_bf16), D.grad_bf16, d, dk[i]);
      row_add(page_row(D, gpage, D.p + kr0 + lane, g, D.grad_bf16), D.grad_bf16, d, dv[i]);
    } else {
      dk_own[(t0 + lane) * D.kvd + g * D.hd + d] = dk[i];
      dv_own[(t0 + lane) * D.kvd + g * D.hd + d] = dv[i];
    }
  }
}

template <class Kernel>
void allow_smem(Kernel k, size_t bytes) {
  if (bytes > 48 * 1024)
    OOMB_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

void check_args(const AttentionArgs& a) {
  OOMB_ASSERT(a.rows > 0 && a.head_dim > 0 && a.page_tokens > 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0);
  if (a.head_dim > kMaxAttentionHeadDim)
    throw Error("cuda attention", "head_dim", std::to_string(a.head_dim) + " is not supported",
                "head_dim <= " + std::to_string(kMaxAttentionHeadDim));
  // 32-bit row offsets inside the kernels.
  OOMB_ASSERT(a.rows * a.q_heads * a.head_dim < (int64_t{1} << 31) &&
              a.page_tokens * 2 * a.kv_heads * a.head_dim < (int64_t{1} << 31));
}

dim3 query_grid(const Dims& D) {
  return dim3(static_cast<unsigned>((D.p * D.group + BQ - 1) / BQ), static_cast<unsigned>(D.qpages),
              static_cast<unsigned>(D.kvh));
}

template <int MAXD>
void fwd(const Dims& D, const Ptrs& P, float* o, float* lse, cudaStream_t s) {
  allow_smem(attention_fwd_kernel<MAXD>, fwd_smem<MAXD>());
  OOMB_LAUNCH(query_grid(D), NT, fwd_smem<MAXD>(), s, attention_fwd_kernel<MAXD>)(D, P, o, lse);
  OOMB_CUDA_LAUNCH_CHECK("attention_fwd_kernel");
}

template <int MAXD>
void bwd(const Dims& D, const Ptrs& P, const AttentionGrads& G, cudaStream_t s) {
  allow_smem(attention_dq_kernel<MAXD>, dq_smem<MAXD>());
  OOMB_LAUNCH(query_grid(D), NT, dq_smem<MAXD>(), s, attention_dq_kernel<MAXD>)(D, P, G.lse, G.dout, G.drow, G.dq);
  OOMB_CUDA_LAUNCH_CHECK("attention_dq_kernel");
  const int tiles = D.U * ((D.p + BK - 1) / BK) + (D.T + BK - 1) / BK;
  allow_smem(attention_dkv_kernel<MAXD>, dkv_smem<MAXD>());
  OOMB_LAUNCH(dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(D.kvh)), NT, dkv_smem<MAXD>(), s,
              attention_dkv_kernel<MAXD>)(D, P, G.lse, G.dout, G.drow, G.grad_pages, G.dk_own, G.dv_own);
  OOMB_CUDA_LAUNCH_CHECK("attention_dkv_kernel");
}

}  // namespace

void launch_attention_fwd(const AttentionArgs& a, float* o, float* lse, cudaStream_t s) {
  check_args(a);
  const Dims D = dims_of(a);
  const Ptrs P = ptrs_of(a);
  if (a.head_dim <= 32) fwd<32>(D, P, o, lse, s);
  else if (a.head_dim <= 64) fwd<64>(D, P, o, lse, s);
  else fwd<128>(D, P, o, lse, s);
}

void launch_attention_bwd(const AttentionArgs& a, const AttentionGrads& g, cudaStream_t s) {
  check_args(a);
  Dims D = dims_of(a);
  D.grad_bf16 = g.grad_bf16;
  const Ptrs P = ptrs_of(a);
  const int64_t n = a.rows * a.q_heads;
  OOMB_LAUNCH(grid_for(n), kThreads, 0, s, attention_drow_kernel)(g.dout, g.o, n, a.head_dim, g.drow);
  OOMB_CUDA_LAUNCH_CHECK("attention_drow_kernel");
  if (a.head_dim <= 32) bwd<32>(D, P, g, s);
  else if (a.head_dim <= 64) bwd<64>(D, P, g, s);
  else bwd<128>(D, P, g, s);
}

}  // namespace oomb::executor::cuda
