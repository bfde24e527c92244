#pragma once
// Sizes of one chunk-recurrent step (docs/schedule.md notation): N tokens, chunk C, page p,
// L layers, R resident layers, n = ceil(N / C) chunks, P = ceil(N / p) pages per layer.
#include <algorithm>
#include <cstdint>

#include "core/units.h"
#include "executor/runtime/backend.h"

namespace oomb::executor {

struct Geometry {
  int64_t N = 0, C = 0, p = 0, L = 0, R = 0, n = 0, P = 0;
  bool offload = false;
  bool sparse = false;
  int64_t budget = 0;         // B (sparse)
  int64_t select_groups = 1;  // selections per query page: 1, or kv_heads (per-KV-head rule)
  // Page storage (config kv_dtype, kv_grad_dtype): sets the bytes of a page of each kind.
  PageDtype kv_dtype = PageDtype::f32, grad_dtype = PageDtype::f32;

  Geometry() = default;
  Geometry(int64_t tokens, int64_t chunk, int64_t page, int64_t layers, int64_t resident, bool sparse_mode,
           int64_t page_budget, int64_t groups = 1)
      : N(tokens),
        C(chunk),
        p(page),
        L(layers),
        R(std::min(resident, layers)),
        n(ceil_div(tokens, chunk)),
        P(ceil_div(tokens, page)),
        offload(resident < layers),
        sparse(sparse_mode),
        budget(page_budget),
        select_groups(groups) {}

  // docs/schedule.md: a KV page is p * 2 * kv_dim elements of kv_dtype, a gradient page the same
  // count of kv_grad_dtype.
  int64_t kv_page_bytes(int64_t kv_dim) const {
    return checked_mul(checked_mul(p, 2 * kv_dim, "page size"), page_dtype_bytes(kv_dtype), "page size");
  }
  int64_t grad_page_bytes(int64_t kv_dim) const {
    return checked_mul(checked_mul(p, 2 * kv_dim, "page size"), page_dtype_bytes(grad_dtype), "page size");
  }

  int64_t chunk_start(int64_t c) const { return c * C; }
  int64_t chunk_len(int64_t c) const { return std::min(N, (c + 1) * C) - c * C; }
  int64_t prefix_pages(int64_t c) const { return c * C / p; }  // pages of tokens [0, cC)
  int64_t own_pages(int64_t c) const { return ceil_div(chunk_len(c), p); }
  int64_t first_own_page(int64_t c) const { return c * C / p; }
  // Upper bound of the pages a chunk attends among its prefix: all (dense, or <= B earlier pages),
  // else at most B per query page (and KV head, for per-head selections).
  int64_t union_bound(int64_t c) const {
    return sparse ? std::min(prefix_pages(c), own_pages(c) * budget * select_groups) : prefix_pages(c);
  }
  // Largest slot of any pass (pages of each kind): union + own.
  int64_t max_slot_pages() const {
    int64_t m = 0;
    for (int64_t c = 0; c < n; ++c) m = std::max(m, union_bound(c) + own_pages(c));
    return m;
  }
};

}  // namespace oomb::executor
