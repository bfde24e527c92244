#pragma once
// The key sequence both paged-attention kernel families walk (attention.cu on CUDA cores,
// attention_tc.cu on tensor cores): launch scalars, the prefix slots a query page attends, and key
// kappa's K / V rows. For query page j and KV head g the keys are the attended prefix slots' rows
// (slot order, p per page), then the chunk's own rows (causal). Host and device code; one copy so
// that the two kernels cannot disagree about which keys exist.
//
// Rows are addressed, not typed: a prefix key's rows lie in a page of the page dtype (fp32 or bf16,
// Dims::kv_bf16), an own key's rows in the fp32 k_own / v_own. key_rows gives the rows' addresses
// and the own index; key_rows_bf16 says which dtype they hold, and each kernel's tile loader reads
// them accordingly (row_elem here; attention_tc.cu stages bf16 rows without rounding). page_row is
// the one definition of a page row's address, for KV pages and gradient pages alike.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "executor/cuda/attention.cuh"
#include "executor/runtime/bf16.h"

namespace oomb::executor::cuda::attention_keys {

// Scalars of one launch (passed by value).
struct Dims {
  int T, qh, kvh, hd, p, group, U, qpages, select_groups;
  int64_t qd, kvd;
  float scale;
  bool kv_bf16;    // prefix KV pages hold bf16
  bool grad_bf16;  // prefix gradient pages hold bf16 (backward; set by the launcher from AttentionGrads)
  models::LayerAttention local;  // AttentionArgs::local, window, q_pos0
  int64_t window, q_pos0;
};

inline Dims dims_of(const AttentionArgs& a) {
  Dims d;
  d.T = static_cast<int>(a.rows);
  d.qh = static_cast<int>(a.q_heads);
  d.kvh = static_cast<int>(a.kv_heads);
  d.hd = static_cast<int>(a.head_dim);
  d.p = static_cast<int>(a.page_tokens);
  d.group = d.qh / d.kvh;
  d.U = static_cast<int>(a.prefix_slots);
  d.qpages = (d.T + d.p - 1) / d.p;
  d.select_groups = static_cast<int>(a.select_groups);
  d.qd = a.q_heads * a.head_dim;
  d.kvd = a.kv_heads * a.head_dim;
  d.scale = 1.0f / sqrtf(static_cast<float>(a.head_dim));
  d.kv_bf16 = a.kv_bf16;
  d.grad_bf16 = false;
  d.local = a.local;
  d.window = a.window;
  d.q_pos0 = a.q_pos0;
  return d;
}

struct Ptrs {
  const float* q;
  const float* k_own;
  const float* v_own;
  const void* const* pages;
  const int32_t* sel_off;
  const int32_t* sel_slots;
};

inline Ptrs ptrs_of(const AttentionArgs& a) {
  return {a.q, a.k_own, a.v_own, a.pages, a.select_offsets, a.select_slots};
}

// The prefix slots query page j attends for KV head g: `slots` == nullptr means all U (dense).
struct SlotList {
  const int32_t* slots;
  int n;
};

__device__ __forceinline__ SlotList slot_list(const Dims& D, const Ptrs& P, int j, int g) {
  if (D.select_groups == 0) return {nullptr, D.U};
  const int idx = j * D.select_groups + (D.select_groups == 1 ? 0 : g);
  return {P.sel_slots + P.sel_off[idx], P.sel_off[idx + 1] - P.sel_off[idx]};
}

__device__ __forceinline__ bool attends(const Dims& D, const Ptrs& P, int j, int g, int slot) {
  const SlotList L = slot_list(D, P, j, g);
  if (!L.slots) return true;
  int lo = 0, hi = L.n;  // ascending list: binary search
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (L.slots[mid] < slot) lo = mid + 1;
    else hi = mid;
  }
  return lo < L.n && L.slots[lo] == slot;
}

// Page layout: [K rows p][V rows p], each row kv_dim elements of the page dtype. The first element of
// KV head g's part of page row `row` (0 .. 2p - 1: V rows from p), in a page of bf16 (`bf16`) or
// fp32 elements.
__host__ __device__ __forceinline__ const void* page_row(const Dims& D, const void* page, int row, int g,
                                                         bool bf16) {
  const int64_t e = row * D.kvd + g * D.hd;
  return static_cast<const char*>(page) + e * (bf16 ? 2 : 4);
}
__host__ __device__ __forceinline__ void* page_row(const Dims& D, void* page, int row, int g, bool bf16) {
  const int64_t e = row * D.kvd + g * D.hd;
  return static_cast<char*>(page) + e * (bf16 ? 2 : 4);
}

// Element d of a row holding bf16 (`bf16`) or fp32 elements, as fp32 (bf16 -> fp32 is exact).
__device__ __forceinline__ float row_elem(const void* row, bool bf16, int d) {
  return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(row)[d]) : static_cast<const float*>(row)[d];
}

// row[d] += x on a gradient page row: fp32 in place, or bf16: read, add in fp32, round once to
// nearest even (runtime/bf16.h, bit for bit the CPU backend's rounding).
__device__ __forceinline__ void row_add(void* row, bool bf16, int d, float x) {
  if (bf16) {
    uint16_t* h = static_cast<uint16_t*>(row) + d;
    *h = f32_to_bf16(bf16_to_f32(*h) + x);
  } else {
    static_cast<float*>(row)[d] += x;
  }
}

// A local layer's mask: whether query token tq of the chunk sees the key at chunk-relative position
// rel (an own key: its token; prefix slot u, row r: (u - U) p + r, AttentionArgs::local). Every key
// of a global layer's sequence is in its window; causality is the caller's test.
__host__ __device__ __forceinline__ bool in_window(const Dims& D, int tq, int rel) {
  return D.local == models::LayerAttention::global ||
         D.q_pos0 + rel >= models::first_key(D.local, D.window, D.q_pos0 + tq);
}

// Key `kappa` of the sequence of (slot list L, KV head g): the addresses of its K and V rows and its
// own-token index (-1 for a prefix key). The rows hold bf16 exactly when key_rows_bf16(D, own).
__device__ __forceinline__ void key_rows(const Dims& D, const Ptrs& P, const SlotList& L, int g, int kappa,
                                         const void*& k, const void*& v, int& own) {
  const int np = L.n * D.p;
  if (kappa < np) {
    const int u = L.slots ? L.slots[kappa / D.p] : kappa / D.p, r = kappa % D.p;
    const void* page = P.pages[u];
    k = page_row(D, page, r, g, D.kv_bf16);
    v = page_row(D, page, D.p + r, g, D.kv_bf16);
    own = -1;
  } else {
    const int t = kappa - np;
    k = P.k_own + t * D.kvd + g * D.hd;
    v = P.v_own + t * D.kvd + g * D.hd;
    own = t;
  }
}

// Whether the rows key_rows gave for own index `own` hold bf16: prefix keys' rows (own < 0) are in
// the page dtype, the chunk's own rows are fp32.
__host__ __device__ __forceinline__ bool key_rows_bf16(const Dims& D, int own) { return D.kv_bf16 && own < 0; }

}  // namespace oomb::executor::cuda::attention_keys
