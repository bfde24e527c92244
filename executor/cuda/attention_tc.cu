// Paged flash attention on bf16 tensor cores (see attention_tc.cuh). 256 threads = 8 warps; every
// matrix product is nvcuda::wmma m16n16k16 with bf16 operands from shared memory and fp32
// accumulator fragments. Operands are converted fp32 -> bf16 (round to nearest even) while they
// are staged: global rows are read as float4 (one warp reads 512 contiguous bytes at head_dim
// 128), converted, and stored as 8-byte pairs of bf16x2. Prefix K / V rows from bf16 pages
// (PageDtype::bf16) already hold bf16: they are staged as they are (8-byte loads, no rounding), so
// the products use exactly the stored values. Prefix gradient pages of bf16 are read, added to in
// fp32 and rounded once per element by the owning block (write_tile, runtime/bf16.h's rounding).
//
// Shared-memory rows are padded (bf16 rows to HD + 8 elements, fp32 score rows to 68 floats): a row
// stride of 16 bytes more than a multiple of 128 puts the 8 rows that one 16-byte-per-lane fragment
// load touches at once on different bank groups, and keeps every fragment pointer 32-byte aligned
// as load_matrix_sync requires (16 rows x stride and 16-column steps are multiples of 32 bytes).
//
// WMMA leaves the placement of accumulator elements in the lanes unspecified. Where per-row or
// per-element work on an accumulator is needed (rescaling O by the online-softmax factor, masks and
// P / dS from S and dP in the backward), each kernel measures that placement once (FragMap: a
// fragment loaded from a matrix holding its own coordinates) instead of assuming one.
#include <cuda_bf16.h>
#include <mma.h>

#include <atomic>
#include <cfloat>
#include <climits>
#include <cstring>

#include "core/error.h"
#include "executor/cuda/attention_keys.cuh"
#include "executor/cuda/attention_tc.cuh"
#include "executor/cuda/common.cuh"

// bf16 WMMA exists from sm_80 on; for older targets the kernels compile to empty bodies and
// attention_tc_supported() refuses to launch them (it checks the loaded image's version).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define OOMB_TC_DEVICE 1
#else
#define OOMB_TC_DEVICE 0
#endif

namespace oomb::executor::cuda {

namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int NT = 256;   // threads: 8 warps
constexpr int NW = NT / 32;
constexpr int BQ = 128;   // forward / dQ: query rows per block, 16 per warp
constexpr int BK = 64;    // forward / dQ: keys per tile
constexpr int BKV = 64;   // dK / dV: keys per block
constexpr int BQV = 64;   // dK / dV: query rows per tile
constexpr int LDS = BK + 4;  // fp32 score rows (272 bytes)
constexpr int LDP = BK + 8;  // bf16 P / dS rows (144 bytes)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kNegInf = -INFINITY;
// A missing key's own-token index and a missing query row's token: "key own <= row token" is the
// one mask test (causal, key present, row present), and a prefix key's own index is -1.
constexpr int kNoKey = INT_MAX;
constexpr int kNoRow = -2;

static_assert(BQ == 16 * NW, "forward / dQ: one 16-row WMMA tile per warp");
static_assert(BKV == 64 && BQV == 64 && NW == 8,
              "dK / dV: S and dP in 4 x 2 warp tiles of 16 rows x 32 keys, dV by warps 0-3 and dK by 4-7");

template <int HD>
constexpr int kLdh = HD + 8;  // bf16 row of Q, dO, K, V (272 bytes at 128, 144 at 64)

// Dynamic shared memory per block (bytes); the README quotes these.
template <int HD>
constexpr size_t fwd_smem() {
  return sizeof(bf16) * (BQ + 2 * BK) * kLdh<HD> + sizeof(float) * BQ * LDS;
}
template <int HD>
constexpr size_t dq_smem() {
  return sizeof(bf16) * ((2 * BQ + 2 * BK) * kLdh<HD> + BQ * LDP);
}
template <int HD>
constexpr size_t dkv_smem() {
  return sizeof(bf16) * ((2 * BKV + 2 * BQV) * kLdh<HD> + 2 * BQV * LDP);
}
static_assert(fwd_smem<128>() == 104448 && dq_smem<128>() == 122880 && dkv_smem<128>() == 88064, "README");
static_assert(fwd_smem<64>() == 71680 && dq_smem<64>() == 73728 && dkv_smem<64>() == 55296, "README");

// Launch scalars and the key sequence: attention_keys.cuh (shared with the other kernel family).
using attention_keys::attends;
using attention_keys::Dims;
using attention_keys::dims_of;
using attention_keys::key_rows;
using attention_keys::key_rows_bf16;
using attention_keys::page_row;
using attention_keys::Ptrs;
using attention_keys::ptrs_of;
using attention_keys::slot_list;
using attention_keys::SlotList;

#if OOMB_TC_DEVICE

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;  // A stored as A^T rows
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // B stored as B^T rows
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
constexpr int kAccElems = FragC::num_elements;

// Row and column (0..15) of element x[i] of this lane's accumulator fragments, one byte each. The
// mapping is measured: a fragment loaded from the matrix M[r][c] = 16 r + c holds its elements'
// coordinates (load_matrix_sync, mma_sync and store_matrix_sync agree on one placement).
struct FragMap {
  uint32_t packed[(kAccElems + 3) / 4];
  __device__ __forceinline__ int row(int i) const { return (packed[i >> 2] >> (8 * (i & 3) + 4)) & 15; }
  __device__ __forceinline__ int col(int i) const { return (packed[i >> 2] >> (8 * (i & 3))) & 15; }
};

// coords: shared float[256] with coords[e] == e (written before a __syncthreads).
__device__ __forceinline__ FragMap frag_map(const float* coords) {
  FragC f;
  wmma::load_matrix_sync(f, coords, 16, wmma::mem_row_major);
  FragMap m;
#pragma unroll
  for (int w = 0; w < (kAccElems + 3) / 4; ++w) m.packed[w] = 0;
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) m.packed[i >> 2] |= static_cast<uint32_t>(f.x[i]) << (8 * (i & 3));
  return m;
}

__device__ __forceinline__ void fill_coords(float* coords) {
  for (int e = threadIdx.x; e < 256; e += NT) coords[e] = static_cast<float>(e);
}

// 4 floats times mul -> 4 bf16 (round to nearest even), one 8-byte store (dst 8-byte aligned).
__device__ __forceinline__ void put_bf16x4(bf16* dst, float4 v, float mul) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x * mul, v.y * mul);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z * mul, v.w * mul);
  uint2 u;
  memcpy(&u.x, &lo, 4);
  memcpy(&u.y, &hi, 4);
  *reinterpret_cast<uint2*>(dst) = u;
}

// Stages NROWS query rows (row rho = token r0 + rho / group, head g * group + rho % group) of `src`
// ([T, qd]) times `mul` as bf16 into dst [NROWS][HD + 8]; rows past `rows` are zero.
template <int HD, int NROWS>
__device__ __forceinline__ void stage_rows(const Dims& D, const float* __restrict__ src, int r0, int rho0, int rows,
                                           int g, float mul, bf16* dst) {
  constexpr int V = HD / 4;
  for (int e = threadIdx.x; e < NROWS * V; e += NT) {
    const int r = e / V, c = (e % V) * 4, rho = rho0 + r;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (rho < rows) {
      const int t = r0 + rho / D.group, h = g * D.group + rho % D.group;
      x = __ldg(reinterpret_cast<const float4*>(src + t * D.qd + h * HD + c));
    }
    put_bf16x4(dst + r * kLdh<HD> + c, x, mul);
  }
}

// Per-row scalars of a query tile: token (kNoRow past `rows`), lse in log2 units, D.
template <int NROWS>
__device__ __forceinline__ void stage_row_info(const Dims& D, int r0, int rho0, int rows, int g,
                                               const float* __restrict__ lse, const float* __restrict__ drow,
                                               int* tok, float* lse2, float* dsum) {
  for (int r = threadIdx.x; r < NROWS; r += NT) {
    const int rho = rho0 + r;
    if (rho < rows) {
      const int t = r0 + rho / D.group, h = g * D.group + rho % D.group;
      tok[r] = t;
      if (lse) lse2[r] = lse[t * D.qh + h] * kLog2e;
      if (drow) dsum[r] = drow[t * D.qh + h];
    } else {
      tok[r] = kNoRow;
      if (lse) lse2[r] = 0.0f;
      if (drow) dsum[r] = 0.0f;
    }
  }
}

// 4 bf16 stored at src (8-byte aligned: a bf16 page row) -> dst as they are.
__device__ __forceinline__ void copy_bf16x4(bf16* dst, const void* src) {
  *reinterpret_cast<uint2*>(dst) = __ldg(reinterpret_cast<const uint2*>(src));
}

// Resolves keys k0 .. k0 + BK - 1 of the sequence (L, g) (threads < BK) into shared row-address and
// own-index tables; keys from `nkeys` on are missing.
__device__ __forceinline__ void resolve_keys(const Dims& D, const Ptrs& P, const SlotList& L, int g, int k0,
                                             int nkeys, const void** kp, const void** vp, int* own) {
  if (threadIdx.x < BK) {
    const int kappa = k0 + threadIdx.x;
    const void *kr = nullptr, *vr = nullptr;
    int o = kNoKey;
    if (kappa < nkeys) key_rows(D, P, L, g, kappa, kr, vr, o);
    kp[threadIdx.x] = kr;
    vp[threadIdx.x] = vr;
    own[threadIdx.x] = o;
  }
}

// Stages the K and V rows of the resolved tile as bf16 into Ks, Vs [BK][HD + 8] (missing keys zero):
// fp32 rows rounded to nearest even, bf16 page rows (key_rows_bf16) copied.
template <int HD>
__device__ __forceinline__ void stage_keys(const Dims& D, const void* const* kp, const void* const* vp,
                                           const int* own, bf16* Ks, bf16* Vs) {
  constexpr int V = HD / 4;
  for (int e = threadIdx.x; e < BK * V; e += NT) {
    const int c = e / V, d = (e % V) * 4;
    const void* kr = kp[c];
    if (kr && key_rows_bf16(D, own[c])) {
      copy_bf16x4(Ks + c * kLdh<HD> + d, static_cast<const uint16_t*>(kr) + d);
      copy_bf16x4(Vs + c * kLdh<HD> + d, static_cast<const uint16_t*>(vp[c]) + d);
      continue;
    }
    float4 kx = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vx = kx;
    if (kr) {
      kx = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(kr) + d));
      vx = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(vp[c]) + d));
    }
    put_bf16x4(Ks + c * kLdh<HD> + d, kx, 1.0f);
    put_bf16x4(Vs + c * kLdh<HD> + d, vx, 1.0f);
  }
}

// x[i] *= scale[row of element i] for every fragment of a warp's 16-row tile.
template <int NF>
__device__ __forceinline__ void scale_rows(FragC (&acc)[NF], const FragMap& map, const float* scale) {
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) {
    const float s = scale[map.row(i)];
#pragma unroll
    for (int f = 0; f < NF; ++f) acc[f].x[i] *= s;
  }
}

// How write_tile puts a tile into its rows: overwrite fp32 rows (outputs, own dK / dV), or
// read-add-write fp32 or bf16 rows (prefix gradient pages; bf16: one rounding per element).
enum class TileOut { store_f32, add_f32, add_bf16 };

// Adds 4 fp32 values to 4 bf16 stored at dst (8-byte aligned), rounding each sum once.
__device__ __forceinline__ void add_bf16x4(uint16_t* dst, float4 x) {
  uint2 h = *reinterpret_cast<const uint2*>(dst);
  const float a[4] = {x.x, x.y, x.z, x.w};
  uint32_t w[2] = {h.x, h.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t& word = w[i >> 1];
    const int shift = 16 * (i & 1);  // little endian: the element at the lower address is the low half
    const uint16_t old = static_cast<uint16_t>(word >> shift);
    const uint32_t sum = f32_to_bf16(bf16_to_f32(old) + a[i]);
    word = (word & ~(0xffffu << shift)) | (sum << shift);
  }
  h.x = w[0];
  h.y = w[1];
  *reinterpret_cast<uint2*>(dst) = h;
}

// Writes a warp's 16 x HD accumulator tile to global rows: row_ptr(i) is the start of tile row i's
// destination (fp32, or bf16 for TileOut::add_bf16; nullptr: skip). Goes through `stage`,
// 16 x (HD / 2 + 4) floats of shared memory that only this warp uses, in two passes of HD / 2
// columns, so that the global accesses are float4 rows (8-byte bf16x4 for bf16 rows).
template <int HD, class RowPtr>
__device__ __forceinline__ void write_tile(const FragC* acc, float* stage, RowPtr row_ptr, TileOut mode) {
  constexpr int CW = HD / 2, LD = CW + 4, V = CW / 4;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    __syncwarp();  // the previous pass's reads are done
#pragma unroll
    for (int f = 0; f < CW / 16; ++f)
      wmma::store_matrix_sync(stage + f * 16, acc[pass * (CW / 16) + f], LD, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * V; e += 32) {
      const int r = e / V, c = (e % V) * 4;
      void* dst = row_ptr(r);
      if (!dst) continue;
      float4 x = *reinterpret_cast<const float4*>(stage + r * LD + c);
      if (mode == TileOut::add_bf16) {
        add_bf16x4(static_cast<uint16_t*>(dst) + pass * CW + c, x);
        continue;
      }
      float4* out = reinterpret_cast<float4*>(static_cast<float*>(dst) + pass * CW + c);
      if (mode == TileOut::add_f32) {
        const float4 y = *out;
        x.x += y.x;
        x.y += y.y;
        x.z += y.z;
        x.w += y.w;
      }
      *out = x;
    }
  }
}

#endif  // OOMB_TC_DEVICE

// ---------------------------------------------------------------- forward

// Block (128 query rows of page j, j, g); warp w owns rows 16 w .. 16 w + 15. Per key tile of 64:
// S = Q K^T (WMMA) -> the warp's fp32 score rows; online softmax on them by lane quads (a lane per
// quarter row, so a row's max and sum need two shuffles), two passes of 8 rows; P (bf16) over the
// same rows; O = alpha O + P V in accumulator fragments (alpha applied per element via FragMap).
template <int HD>
__global__ void __launch_bounds__(NT, 2) attention_tc_fwd_kernel(Dims D, Ptrs P, float* __restrict__ o,
                                                                 float* __restrict__ lse) {
#if OOMB_TC_DEVICE
  constexpr int LDH = kLdh<HD>, NF = HD / 16;
  OOMB_DYNAMIC_SHARED_ALIGNED(unsigned char, smem, 128);
  bf16* Qs = reinterpret_cast<bf16*>(smem);              // [BQ][LDH], pre-scaled; warp rows = its out staging
  bf16* Ks = Qs + BQ * LDH;                              // [BK][LDH]
  bf16* Vs = Ks + BK * LDH;                              // [BK][LDH]
  float* Ss = reinterpret_cast<float*>(Vs + BK * LDH);   // [BQ][LDS]: S; P (bf16) over each row's start
  __shared__ __align__(32) float coords[256];
  __shared__ float row_scale[BQ];
  __shared__ int row_tok[BQ], key_own[BK];
  __shared__ const void* key_k[BK];
  __shared__ const void* key_v[BK];

  const int j = blockIdx.y, g = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = j * D.p, nq = min(D.p, D.T - r0), rows = nq * D.group, rho0 = blockIdx.x * BQ;
  if (rho0 >= rows) return;
  stage_rows<HD, BQ>(D, P.q, r0, rho0, rows, g, D.scale, Qs);
  stage_row_info<BQ>(D, r0, rho0, rows, g, nullptr, nullptr, row_tok, nullptr, nullptr);
  fill_coords(coords);
  const SlotList L = slot_list(D, P, j, g);
  const int last_tok = r0 + (min(rho0 + BQ, rows) - 1) / D.group;
  const int nkeys = L.n * D.p + last_tok + 1;
  __syncthreads();
  const FragMap map = frag_map(coords);

  const int wr0 = warp * 16;
  const bool warp_has_rows = rho0 + wr0 < rows;
  const int warp_last_tok = warp_has_rows ? r0 + (min(rho0 + wr0 + 16, rows) - 1) / D.group : -1;
  // Softmax: the four lanes 4 r .. 4 r + 3 hold the running max m (log2 units) and sum l of rows
  // r and r + 8 (one per pass); lane 4 r + quad reads columns 4 i + quad, so with the 68-float row
  // stride the 32 lanes of a pass hit 32 different banks.
  const int sr = lane >> 2, quad = lane & 3;
  const int my_tok[2] = {row_tok[wr0 + sr], row_tok[wr0 + sr + 8]};
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  float* Sw = Ss + wr0 * LDS;
  bf16* Pw = reinterpret_cast<bf16*>(Sw);  // P row r starts where S row r does: ldm 2 LDS bf16
  FragC acc[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) wmma::fill_fragment(acc[f], 0.0f);

  for (int k0 = 0; k0 < nkeys; k0 += BK) {
    __syncthreads();  // every warp is done with the previous tile
    resolve_keys(D, P, L, g, k0, nkeys, key_k, key_v, key_own);
    __syncthreads();
    stage_keys<HD>(D, key_k, key_v, key_own, Ks, Vs);
    __syncthreads();
    // Keys are in sequence order, so own indices ascend: the tile is causally invisible to this
    // warp's rows when its first key is.
    if (!warp_has_rows || key_own[0] > warp_last_tok) continue;

    // S in two halves of 32 keys, not unrolled: 16 accumulator registers live beside O's 64 (at
    // head_dim 128) instead of 32, which keeps the kernel within 128 registers without spills (two
    // blocks per SM).
#pragma unroll 1
    for (int n0 = 0; n0 < BK / 16; n0 += 2) {
      FragC s[2];
      wmma::fill_fragment(s[0], 0.0f);
      wmma::fill_fragment(s[1], 0.0f);
#pragma unroll
      for (int kk = 0; kk < NF; ++kk) {
        FragA a;
        wmma::load_matrix_sync(a, Qs + wr0 * LDH + kk * 16, LDH);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          FragBt b;
          wmma::load_matrix_sync(b, Ks + (n0 + n) * 16 * LDH + kk * 16, LDH);
          wmma::mma_sync(s[n], a, b, s[n]);
        }
      }
      wmma::store_matrix_sync(Sw + n0 * 16, s[0], LDS, wmma::mem_row_major);
      wmma::store_matrix_sync(Sw + (n0 + 1) * 16, s[1], LDS, wmma::mem_row_major);
    }
    __syncwarp();

#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = sr + 8 * h;
      float sv[16];
      float mx = kNegInf;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int c = 4 * i + quad;
        const float x = key_own[c] <= my_tok[h] ? Sw[r * LDS + c] * kLog2e : kNegInf;
        sv[i] = x;
        mx = fmaxf(mx, x);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx);
      const float alpha = m[h] == kNegInf ? 0.0f : exp2f(m[h] - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float pr = sv[i] == kNegInf ? 0.0f : exp2f(sv[i] - m_new);
        sv[i] = pr;
        sum += pr;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l[h] = l[h] * alpha + sum;
      m[h] = m_new;
      __syncwarp();  // row r's four lanes have read its scores before P overwrites them
#pragma unroll
      for (int i = 0; i < 16; ++i) Pw[r * (2 * LDS) + 4 * i + quad] = __float2bfloat16_rn(sv[i]);
      if (quad == 0) row_scale[wr0 + r] = alpha;
    }
    __syncwarp();
    scale_rows(acc, map, row_scale + wr0);
#pragma unroll 1  // unrolled, the compiler hoists every V fragment load and spills
    for (int kk = 0; kk < BK / 16; ++kk) {
      FragA pa;
      wmma::load_matrix_sync(pa, Pw + kk * 16, 2 * LDS);
#pragma unroll
      for (int f = 0; f < NF; ++f) {
        FragB vb;
        wmma::load_matrix_sync(vb, Vs + kk * 16 * LDH + f * 16, LDH);
        wmma::mma_sync(acc[f], pa, vb, acc[f]);
      }
    }
  }
  if (!warp_has_rows) return;  // no __syncthreads below
  if (quad == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = sr + 8 * h;
      row_scale[wr0 + r] = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
      if (my_tok[h] >= 0)
        lse[my_tok[h] * D.qh + g * D.group + (rho0 + wr0 + r) % D.group] = m[h] * kLn2 + logf(l[h]);
    }
  }
  __syncwarp();
  scale_rows(acc, map, row_scale + wr0);
  write_tile<HD>(acc, reinterpret_cast<float*>(Qs + wr0 * LDH),
                 [&](int i) -> void* {
                   const int rho = rho0 + wr0 + i;
                   if (rho >= rows) return nullptr;
                   return o + (r0 + rho / D.group) * D.qd + (g * D.group + rho % D.group) * HD;
                 },
                 TileOut::store_f32);
#endif
}

// ---------------------------------------------------------------- backward

// D[t, h] = dout . o: a warp per row (coalesced), fp32.
__global__ void attention_tc_drow_kernel(const float* __restrict__ dout, const float* __restrict__ o, int64_t n,
                                         int hd, float* __restrict__ drow) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t e = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; e < n; e += warps) {
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc = fmaf(dout[e * hd + d], o[e * hd + d], acc);
    acc = warp_sum(acc);
    if (lane == 0) drow[e] = acc;
  }
}

// dQ: the forward's blocks. Per key tile: S = Q K^T and dP = dO V^T (WMMA, sharing each Q / dO
// fragment across the tile's four key columns), then P = exp(S - lse) and dS = P (dP - D) straight
// from the accumulators (FragMap gives each element's row and key), dS as bf16 into the warp's
// rows, dQ += dS K (WMMA). dQ = scale * sum, as Q is pre-scaled.
template <int HD>
__global__ void __launch_bounds__(NT, 1) attention_tc_dq_kernel(Dims D, Ptrs P, const float* __restrict__ lse,
                                                                const float* __restrict__ dout,
                                                                const float* __restrict__ drow,
                                                                float* __restrict__ dq) {
#if OOMB_TC_DEVICE
  constexpr int LDH = kLdh<HD>, NF = HD / 16;
  OOMB_DYNAMIC_SHARED_ALIGNED(unsigned char, smem, 128);
  bf16* Qs = reinterpret_cast<bf16*>(smem);  // [BQ][LDH], pre-scaled; warp rows = its out staging
  bf16* dOs = Qs + BQ * LDH;                 // [BQ][LDH]
  bf16* Ks = dOs + BQ * LDH;                 // [BK][LDH]
  bf16* Vs = Ks + BK * LDH;                  // [BK][LDH]
  bf16* dSs = Vs + BK * LDH;                 // [BQ][LDP]
  __shared__ __align__(32) float coords[256];
  __shared__ float row_lse2[BQ], row_d[BQ];
  __shared__ int row_tok[BQ], key_own[BK];
  __shared__ const void* key_k[BK];
  __shared__ const void* key_v[BK];

  const int j = blockIdx.y, g = blockIdx.z, warp = threadIdx.x >> 5;
  const int r0 = j * D.p, nq = min(D.p, D.T - r0), rows = nq * D.group, rho0 = blockIdx.x * BQ;
  if (rho0 >= rows) return;
  stage_rows<HD, BQ>(D, P.q, r0, rho0, rows, g, D.scale, Qs);
  stage_rows<HD, BQ>(D, dout, r0, rho0, rows, g, 1.0f, dOs);
  stage_row_info<BQ>(D, r0, rho0, rows, g, lse, drow, row_tok, row_lse2, row_d);
  fill_coords(coords);
  const SlotList L = slot_list(D, P, j, g);
  const int last_tok = r0 + (min(rho0 + BQ, rows) - 1) / D.group;
  const int nkeys = L.n * D.p + last_tok + 1;
  __syncthreads();
  const FragMap map = frag_map(coords);

  const int wr0 = warp * 16;
  const bool warp_has_rows = rho0 + wr0 < rows;
  const int warp_last_tok = warp_has_rows ? r0 + (min(rho0 + wr0 + 16, rows) - 1) / D.group : -1;
  bf16* dSw = dSs + wr0 * LDP;
  FragC acc[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) wmma::fill_fragment(acc[f], 0.0f);

  for (int k0 = 0; k0 < nkeys; k0 += BK) {
    __syncthreads();
    resolve_keys(D, P, L, g, k0, nkeys, key_k, key_v, key_own);
    __syncthreads();
    stage_keys<HD>(D, key_k, key_v, key_own, Ks, Vs);
    __syncthreads();
    if (!warp_has_rows || key_own[0] > warp_last_tok) continue;

    FragC s[BK / 16], dp[BK / 16];
#pragma unroll
    for (int n = 0; n < BK / 16; ++n) {
      wmma::fill_fragment(s[n], 0.0f);
      wmma::fill_fragment(dp[n], 0.0f);
    }
#pragma unroll
    for (int kk = 0; kk < NF; ++kk) {
      FragA a, ad;
      wmma::load_matrix_sync(a, Qs + wr0 * LDH + kk * 16, LDH);
      wmma::load_matrix_sync(ad, dOs + wr0 * LDH + kk * 16, LDH);
#pragma unroll
      for (int n = 0; n < BK / 16; ++n) {
        FragBt b;
        wmma::load_matrix_sync(b, Ks + n * 16 * LDH + kk * 16, LDH);
        wmma::mma_sync(s[n], a, b, s[n]);
        wmma::load_matrix_sync(b, Vs + n * 16 * LDH + kk * 16, LDH);
        wmma::mma_sync(dp[n], ad, b, dp[n]);
      }
    }
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) {
      const int r = map.row(i), cc = map.col(i), tq = row_tok[wr0 + r];
      const float l2 = row_lse2[wr0 + r], dd = row_d[wr0 + r];
#pragma unroll
      for (int n = 0; n < BK / 16; ++n) {
        const int c = n * 16 + cc;
        const float pr = key_own[c] <= tq ? exp2f(s[n].x[i] * kLog2e - l2) : 0.0f;
        dSw[r * LDP + c] = __float2bfloat16_rn(pr * (dp[n].x[i] - dd));
      }
    }
    __syncwarp();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      FragA da;
      wmma::load_matrix_sync(da, dSw + kk * 16, LDP);
#pragma unroll
      for (int f = 0; f < NF; ++f) {
        FragB kb;
        wmma::load_matrix_sync(kb, Ks + kk * 16 * LDH + f * 16, LDH);
        wmma::mma_sync(acc[f], da, kb, acc[f]);
      }
    }
  }
  if (!warp_has_rows) return;
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) acc[f].x[i] *= D.scale;
  write_tile<HD>(acc, reinterpret_cast<float*>(Qs + wr0 * LDH),
                 [&](int i) -> void* {
                   const int rho = rho0 + wr0 + i;
                   if (rho >= rows) return nullptr;
                   return dq + (r0 + rho / D.group) * D.qd + (g * D.group + rho % D.group) * HD;
                 },
                 TileOut::store_f32);
#endif
}

// dK / dV: block (key tile, g). Key tiles: prefix slot u's rows [kr0, kr0 + 64) for tiles below
// U * tiles per page, then the own rows in tiles of 64 (so the heavier tiles start first). Per
// query tile of 64 rows: warp w computes S and dP for rows 16 (w / 2) .., keys 32 (w % 2) .. (two
// 16 x 16 blocks, one after the other) and writes P and dS (bf16); then warps 0-3 accumulate
// dV += P^T dO and warps 4-7 dK += dS^T Q for keys 16 (w % 4) .. 16 (w % 4) + 15 (each 16 x HD in
// accumulator fragments for the whole block).
template <int HD>
__global__ void __launch_bounds__(NT, 2) attention_tc_dkv_kernel(Dims D, Ptrs P, const float* __restrict__ lse,
                                                                 const float* __restrict__ dout,
                                                                 const float* __restrict__ drow,
                                                                 void* const* __restrict__ grad_pages,
                                                                 float* __restrict__ dk_own,
                                                                 float* __restrict__ dv_own) {
#if OOMB_TC_DEVICE
  constexpr int LDH = kLdh<HD>, NF = HD / 16;
  OOMB_DYNAMIC_SHARED_ALIGNED(unsigned char, smem, 128);
  bf16* Ks = reinterpret_cast<bf16*>(smem);  // [BKV][LDH]
  bf16* Vs = Ks + BKV * LDH;                 // [BKV][LDH]
  bf16* Qs = Vs + BKV * LDH;                 // [BQV][LDH], pre-scaled; Qs + dOs = out staging at the end
  bf16* dOs = Qs + BQV * LDH;                // [BQV][LDH]
  bf16* Ps = dOs + BQV * LDH;                // [BQV][LDP]
  bf16* dSs = Ps + BQV * LDP;                // [BQV][LDP]
  __shared__ __align__(32) float coords[256];
  __shared__ float row_lse2[BQV], row_d[BQV];
  __shared__ int row_tok[BQV], key_tok[BKV];

  const int g = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tiles_per_page = (D.p + BKV - 1) / BKV;
  const int tile = blockIdx.x;
  const bool prefix = tile < D.U * tiles_per_page;
  int u = -1, kr0 = 0, t0 = 0, nk;
  if (prefix) {
    u = tile / tiles_per_page;
    kr0 = (tile % tiles_per_page) * BKV;
    nk = min(BKV, D.p - kr0);
  } else {
    t0 = (tile - D.U * tiles_per_page) * BKV;
    nk = min(BKV, D.T - t0);
  }
  {
    constexpr int V = HD / 4;
    for (int e = threadIdx.x; e < BKV * V; e += NT) {
      const int c = e / V, d = (e % V) * 4;
      float4 kx = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vx = kx;
      if (c < nk && prefix && D.kv_bf16) {  // bf16 page rows: staged as stored
        copy_bf16x4(Ks + c * LDH + d, static_cast<const uint16_t*>(page_row(D, P.pages[u], kr0 + c, g, true)) + d);
        copy_bf16x4(Vs + c * LDH + d,
                    static_cast<const uint16_t*>(page_row(D, P.pages[u], D.p + kr0 + c, g, true)) + d);
        continue;
      }
      if (c < nk) {
        const float* kr = prefix ? static_cast<const float*>(page_row(D, P.pages[u], kr0 + c, g, false))
                                 : P.k_own + (t0 + c) * D.kvd + g * HD;
        const float* vr = prefix ? static_cast<const float*>(page_row(D, P.pages[u], D.p + kr0 + c, g, false))
                                 : P.v_own + (t0 + c) * D.kvd + g * HD;
        kx = __ldg(reinterpret_cast<const float4*>(kr + d));
        vx = __ldg(reinterpret_cast<const float4*>(vr + d));
      }
      put_bf16x4(Ks + c * LDH + d, kx, 1.0f);
      put_bf16x4(Vs + c * LDH + d, vx, 1.0f);
    }
    for (int c = threadIdx.x; c < BKV; c += NT) key_tok[c] = c < nk ? (prefix ? -1 : t0 + c) : kNoKey;
  }
  fill_coords(coords);
  __syncthreads();
  const FragMap map = frag_map(coords);

  const int sq0 = 16 * (warp >> 1), sk0 = 32 * (warp & 1);  // this warp's S / dP block
  const bool dv_warp = warp < 4;                             // warp-uniform role
  const int kw0 = 16 * (warp & 3);                           // its 16 keys of dV or dK
  const bf16* A = dv_warp ? Ps : dSs;
  const bf16* B = dv_warp ? dOs : Qs;
  FragC acc[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) wmma::fill_fragment(acc[f], 0.0f);

  for (int j = prefix ? 0 : t0 / D.p; j < D.qpages; ++j) {
    if (prefix && !attends(D, P, j, g, u)) continue;
    const int r0 = j * D.p, nq = min(D.p, D.T - r0), rows = nq * D.group;
    const int rho_start = prefix ? 0 : max(0, t0 - r0) * D.group;
    for (int rho0 = rho_start; rho0 < rows; rho0 += BQV) {
      __syncthreads();  // the previous query tile is consumed
      stage_rows<HD, BQV>(D, P.q, r0, rho0, rows, g, D.scale, Qs);
      stage_rows<HD, BQV>(D, dout, r0, rho0, rows, g, 1.0f, dOs);
      stage_row_info<BQV>(D, r0, rho0, rows, g, lse, drow, row_tok, row_lse2, row_d);
      __syncthreads();
      const bool rows_here = rho0 + sq0 < rows;
      const int last_tok = rows_here ? r0 + (min(rho0 + sq0 + 16, rows) - 1) / D.group : -1;
      if (rows_here && key_tok[sk0] <= last_tok) {
        // One 16 x 16 key block at a time: S, then P (fp32, kept for dS; bf16 into shared memory),
        // then dP and dS. Keeps 16 accumulator registers live beside dK / dV's 64.
#pragma unroll 1
        for (int n = 0; n < 2; ++n) {
          const int kc = sk0 + n * 16;
          FragC sp, dp;
          wmma::fill_fragment(sp, 0.0f);
          wmma::fill_fragment(dp, 0.0f);
#pragma unroll
          for (int kk = 0; kk < NF; ++kk) {
            FragA a;
            FragBt b;
            wmma::load_matrix_sync(a, Qs + sq0 * LDH + kk * 16, LDH);
            wmma::load_matrix_sync(b, Ks + kc * LDH + kk * 16, LDH);
            wmma::mma_sync(sp, a, b, sp);
          }
#pragma unroll
          for (int kk = 0; kk < NF; ++kk) {
            FragA a;
            FragBt b;
            wmma::load_matrix_sync(a, dOs + sq0 * LDH + kk * 16, LDH);
            wmma::load_matrix_sync(b, Vs + kc * LDH + kk * 16, LDH);
            wmma::mma_sync(dp, a, b, dp);
          }
#pragma unroll
          for (int i = 0; i < kAccElems; ++i) {
            const int r = map.row(i), c = kc + map.col(i);
            const float pr = key_tok[c] <= row_tok[sq0 + r] ? exp2f(sp.x[i] * kLog2e - row_lse2[sq0 + r]) : 0.0f;
            Ps[(sq0 + r) * LDP + c] = __float2bfloat16_rn(pr);
            dSs[(sq0 + r) * LDP + c] = __float2bfloat16_rn(pr * (dp.x[i] - row_d[sq0 + r]));
          }
        }
      } else {
        // Nothing of this block is visible: zeros (16 rows x 32 keys = 256 bf16 pairs per matrix).
        for (int e = lane; e < 256; e += 32) {
          const int r = e / 16, c = sk0 + (e % 16) * 2;
          *reinterpret_cast<uint32_t*>(Ps + (sq0 + r) * LDP + c) = 0u;
          *reinterpret_cast<uint32_t*>(dSs + (sq0 + r) * LDP + c) = 0u;
        }
      }
      __syncthreads();
#pragma unroll 1  // as in the forward: unrolled, the hoisted fragment loads spill
      for (int kk = 0; kk < BQV / 16; ++kk) {
        if (rho0 + kk * 16 >= rows) break;  // rows past the page's end are all zero
        FragAt a;
        wmma::load_matrix_sync(a, A + kk * 16 * LDP + kw0, LDP);
#pragma unroll
        for (int f = 0; f < NF; ++f) {
          FragB b;
          wmma::load_matrix_sync(b, B + kk * 16 * LDH + f * 16, LDH);
          wmma::mma_sync(acc[f], a, b, acc[f]);
        }
      }
    }
  }
  __syncthreads();  // Qs and dOs become the warps' output staging
  float* stage = reinterpret_cast<float*>(Qs) + warp * 16 * (HD / 2 + 4);
  // acc holds the call's whole contribution to these keys, and this block is their only writer: one
  // read-add-write per prefix gradient element (bf16 pages: one rounding), own dK / dV overwritten.
  void* page = prefix ? grad_pages[u] : nullptr;
  const TileOut mode = !prefix ? TileOut::store_f32 : D.grad_bf16 ? TileOut::add_bf16 : TileOut::add_f32;
  write_tile<HD>(acc, stage,
                 [&](int i) -> void* {
                   const int c = kw0 + i;
                   if (c >= nk) return nullptr;
                   if (prefix) return page_row(D, page, (dv_warp ? D.p : 0) + kr0 + c, g, D.grad_bf16);
                   return (dv_warp ? dv_own : dk_own) + (t0 + c) * D.kvd + g * HD;
                 },
                 mode);
#endif
}

// ---------------------------------------------------------------- host side

template <class Kernel>
void prepare(Kernel k, size_t bytes) {
  if (bytes > 48 * 1024)
    OOMB_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  // Several blocks per SM need the largest shared-memory carve-out (a hint; the driver may refuse).
  OOMB_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       static_cast<int>(cudaSharedmemCarveoutMaxShared)));
}

void check_args(const AttentionArgs& a) {
  OOMB_ASSERT(a.rows > 0 && a.page_tokens > 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0);
  if (a.head_dim != 64 && a.head_dim != 128)
    throw Error("cuda tensor-core attention", "head_dim", std::to_string(a.head_dim) + " is not supported",
                "64 or 128 (use the fp32 kernels otherwise)");
  // 32-bit row offsets inside the kernels.
  OOMB_ASSERT(a.rows * a.q_heads * a.head_dim < (int64_t{1} << 31) &&
              a.page_tokens * 2 * a.kv_heads * a.head_dim < (int64_t{1} << 31));
}

dim3 query_grid(const Dims& D) {
  return dim3(static_cast<unsigned>((D.p * D.group + BQ - 1) / BQ), static_cast<unsigned>(D.qpages),
              static_cast<unsigned>(D.kvh));
}

template <int HD>
void fwd(const Dims& D, const Ptrs& P, float* o, float* lse, cudaStream_t s) {
  prepare(attention_tc_fwd_kernel<HD>, fwd_smem<HD>());
  OOMB_LAUNCH(query_grid(D), NT, fwd_smem<HD>(), s, attention_tc_fwd_kernel<HD>)(D, P, o, lse);
  OOMB_CUDA_LAUNCH_CHECK("attention_tc_fwd_kernel");
}

template <int HD>
void bwd(const Dims& D, const Ptrs& P, const AttentionGrads& G, cudaStream_t s) {
  prepare(attention_tc_dq_kernel<HD>, dq_smem<HD>());
  OOMB_LAUNCH(query_grid(D), NT, dq_smem<HD>(), s, attention_tc_dq_kernel<HD>)(D, P, G.lse, G.dout, G.drow, G.dq);
  OOMB_CUDA_LAUNCH_CHECK("attention_tc_dq_kernel");
  const int tiles = D.U * ((D.p + BKV - 1) / BKV) + (D.T + BKV - 1) / BKV;
  prepare(attention_tc_dkv_kernel<HD>, dkv_smem<HD>());
  OOMB_LAUNCH(dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(D.kvh)), NT, dkv_smem<HD>(), s,
              attention_tc_dkv_kernel<HD>)(D, P, G.lse, G.dout, G.drow, G.grad_pages, G.dk_own, G.dv_own);
  OOMB_CUDA_LAUNCH_CHECK("attention_tc_dkv_kernel");
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether the current device runs bf16 WMMA and this build holds an image for it (cached per
// device: 0 unknown, 1 yes, 2 no).
bool device_supports_tc() {
  static std::atomic<int> known[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return false;
  if (dev < 64 && known[dev].load() != 0) return known[dev].load() == 1;
  int major = 0;
  const cudaError_t e1 = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  bool ok = e1 == cudaSuccess && major >= 8;
  if (ok) {
    // binaryVersion: the architecture of the image the runtime loaded for this device (an sm_75
    // image would hold the empty kernel bodies).
    cudaFuncAttributes fa{};
    const cudaError_t e2 = cudaFuncGetAttributes(&fa, attention_tc_fwd_kernel<128>);
    if (e2 != cudaSuccess) cudaGetLastError();  // the failed query must not surface at a later check
    ok = e2 == cudaSuccess && fa.binaryVersion >= 80;
  } else if (e1 != cudaSuccess) {
    cudaGetLastError();
  }
  if (dev < 64) known[dev].store(ok ? 1 : 2);
  return ok;
}

}  // namespace

bool attention_tc_supported(const AttentionArgs& a) {
  if (a.local != models::LayerAttention::global) return false;  // a window: the CUDA-core kernels
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.kv_heads <= 0 || a.q_heads % a.kv_heads != 0) return false;
  if (!aligned16(a.q) || !aligned16(a.k_own) || !aligned16(a.v_own)) return false;
  return device_supports_tc();
}

bool attention_tc_device_supported() { return device_supports_tc(); }

void launch_attention_tc_fwd(const AttentionArgs& a, float* o, float* lse, cudaStream_t s) {
  check_args(a);
  const Dims D = dims_of(a);
  const Ptrs P = ptrs_of(a);
  if (a.head_dim == 64) fwd<64>(D, P, o, lse, s);
  else fwd<128>(D, P, o, lse, s);
}

void launch_attention_tc_bwd(const AttentionArgs& a, const AttentionGrads& g, cudaStream_t s) {
  check_args(a);
  Dims D = dims_of(a);
  D.grad_bf16 = g.grad_bf16;
  const Ptrs P = ptrs_of(a);
  const int64_t n = a.rows * a.q_heads;
  OOMB_LAUNCH(grid_for(n * 32), kThreads, 0, s, attention_tc_drow_kernel)(g.dout, g.o, n, static_cast<int>(a.head_dim),
                                                                  g.drow);
  OOMB_CUDA_LAUNCH_CHECK("attention_tc_drow_kernel");
  if (a.head_dim == 64) bwd<64>(D, P, g, s);
  else bwd<128>(D, P, g, s);
}

}  // namespace oomb::executor::cuda
