#include "step/allocator.h"

#include <algorithm>
#include <string_view>

#include "core/error.h"
#include "core/units.h"
#include "step/buffers.h"

namespace oomb::step::allocator {

namespace {
int64_t up(int64_t v, int64_t a) { return checked_add(v, a - 1, "the CUDA arena's block") / a * a; }

// A device row but the reserved measure's own, the backend's scratch and NCCL's buffers (allocated
// outside the block, by cudaMalloc and by NCCL) (a row's text, or the table's own category).
bool arena_row(Tier tier, std::string_view category) {
  return tier == Tier::device && !reserved_only(category) && category != to_string(Category::backend_scratch) &&
         category != to_string(Category::communication);
}
bool arena_row(Tier tier, Category category) {
  return tier == Tier::device && !reserved_only(category) && category != Category::backend_scratch &&
         category != Category::communication;
}

// One layout for both forms of the rows: the table's (BufferRow) and their figures (RowSize).
template <class Row>
ArenaLayout layout_of(std::span<const Row> rows, bool ranges) {
  auto in_cuda_arena = [](const Row& r) { return arena_row(r.tier, r.category); };
  ArenaLayout out;
  // Groups by phase mask (a handful: the planner evaluates this in its inner loop).
  struct Group {
    PhaseMask phases = 0;
    int64_t bytes = 0, offset = 0;
    bool placed = false;
  };
  Group groups[64];
  int n = 0;
  int64_t totals[kPhaseCount] = {};
  for (const Row& r : rows) {
    if (!in_cuda_arena(r) || r.bytes <= 0) continue;
    int i = 0;
    while (i < n && groups[i].phases != r.phases) ++i;
    if (i == n) {
      OOMB_ASSERT(n < 64, "more than 64 lifetimes in a buffer table");
      groups[n++].phases = r.phases;
    }
    groups[i].bytes = checked_add(groups[i].bytes, up(r.bytes, kCudaArenaAlignmentBytes), "the CUDA arena's block");
    for (PhaseMask m = r.phases & 0x3Fu; m != 0; m &= m - 1) {  // the six phases
      int64_t& total = totals[__builtin_ctz(m)];
      total = checked_add(total, r.bytes);
    }
  }
  out.buffer_peak_bytes = *std::max_element(totals, totals + kPhaseCount);
  // Largest first; each at the lowest offset (0 or the end of a placed group it is alive with)
  // that overlaps none of the placed groups it is alive with.
  int order[64];
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order, order + n, [&](int a, int b) { return groups[a].bytes > groups[b].bytes; });
  for (int k = 0; k < n; ++k) {
    Group& g = groups[order[k]];
    int64_t best = -1;
    auto fits = [&](int64_t at) {
      for (int j = 0; j < n; ++j) {
        const Group& o = groups[j];
        if (!o.placed || !(o.phases & g.phases)) continue;
        if (at < o.offset + o.bytes && o.offset < at + g.bytes) return false;
      }
      return true;
    };
    if (fits(0)) best = 0;
    for (int j = 0; j < n; ++j) {
      const Group& o = groups[j];
      if (!o.placed || !(o.phases & g.phases)) continue;
      const int64_t at = o.offset + o.bytes;
      if ((best < 0 || at < best) && fits(at)) best = at;
    }
    g.offset = best;
    g.placed = true;
    out.layout_bytes = std::max(out.layout_bytes, checked_add(g.offset, g.bytes, "the CUDA arena's block"));
  }
  out.block_bytes = up(checked_add(out.layout_bytes, kCudaArenaSlackBytes, "the CUDA arena's block"),
                       kCudaMallocGranularityBytes);
  if (ranges) {
    int64_t next[64];
    for (int i = 0; i < n; ++i) next[i] = groups[i].offset;
    for (const Row& r : rows) {
      if (!in_cuda_arena(r) || r.bytes <= 0) continue;
      int i = 0;
      while (groups[i].phases != r.phases) ++i;
      const int64_t b = up(r.bytes, kCudaArenaAlignmentBytes);
      out.ranges.push_back({std::string(r.name), next[i], b});
      next[i] += b;
    }
  }
  return out;
}
}  // namespace

bool in_cuda_arena(const BufferRow& r) { return arena_row(r.tier, r.category); }

ArenaLayout cuda_arena_layout(const std::vector<BufferRow>& rows, bool ranges) {
  return layout_of<BufferRow>(rows, ranges);
}

ArenaLayout cuda_arena_layout(std::span<const RowSize> rows) { return layout_of<RowSize>(rows, false); }

}  // namespace oomb::step::allocator
