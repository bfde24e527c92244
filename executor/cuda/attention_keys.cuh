#pragma once
// The key sequence both paged-attention kernel families walk (attention.cu on CUDA cores,
// attention_tc.cu on tensor cores): launch scalars, the prefix slots a query page attends, and key
// kappa's K / V rows. For query page j and KV head g the keys are the attended prefix slots' rows
// (slot order, p per page), then the chunk's own rows (causal). Host and device code; one copy so
// that the two kernels cannot disagree about which keys exist.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "executor/cuda/attention.cuh"

namespace oomb::executor::cuda::attention_keys {

// Scalars of one launch (passed by value).
struct Dims {
  int T, qh, kvh, hd, p, group, U, qpages, select_groups;
  int64_t qd, kvd;
  float scale;
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
  return d;
}

struct Ptrs {
  const float* q;
  const float* k_own;
  const float* v_own;
  const float* const* pages;
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

// Key `kappa` of the sequence of (slot list L, KV head g): its K and V rows and its own-token index
// (-1 for a prefix key).
__device__ __forceinline__ void key_rows(const Dims& D, const Ptrs& P, const SlotList& L, int g, int kappa,
                                         const float*& k, const float*& v, int& own) {
  const int np = L.n * D.p;
  if (kappa < np) {
    const int u = L.slots ? L.slots[kappa / D.p] : kappa / D.p, r = kappa % D.p;
    const float* page = P.pages[u];
    k = page + r * D.kvd + g * D.hd;
    v = page + (D.p + r) * D.kvd + g * D.hd;
    own = -1;
  } else {
    const int t = kappa - np;
    k = P.k_own + t * D.kvd + g * D.hd;
    v = P.v_own + t * D.kvd + g * D.hd;
    own = t;
  }
}

}  // namespace oomb::executor::cuda::attention_keys
