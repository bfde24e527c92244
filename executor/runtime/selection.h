#pragma once
// Sparse page selection records (ALGORITHM.md section 5): made in stage 1, reused unchanged in
// stage 2 (so the gradient is exactly that of the sparse forward), and the source of the measured
// union sizes (the pages a chunk really needs on the device).
#include <cstdint>
#include <vector>

namespace oomb::executor {

struct ChunkSelection {
  int64_t chunk = -1, layer = -1;
  bool dense = true;   // attends every earlier page (dense mode, or <= B earlier pages)
  int64_t groups = 0;  // when !dense: 1 (one set per query page shared by all heads) or kv_heads
  std::vector<std::vector<int32_t>> pages;  // [j * groups + g]: earlier page ids, ascending
  std::vector<int64_t> union_pages;         // ascending; dense: 0 .. prefix_pages - 1
};

// One entry per (chunk, layer).
class SelectionLog {
 public:
  void reset(int64_t chunks, int64_t layers);
  ChunkSelection& at(int64_t chunk, int64_t layer);
  const ChunkSelection& at(int64_t chunk, int64_t layer) const;
  bool recorded(int64_t chunk, int64_t layer) const;
  int64_t chunks() const { return chunks_; }
  int64_t layers() const { return layers_; }

 private:
  int64_t chunks_ = 0, layers_ = 0;
  std::vector<ChunkSelection> entries_;
};

// Dense record of chunk c (prefix_pages earlier pages).
ChunkSelection dense_selection(int64_t chunk, int64_t layer, int64_t prefix_pages);
// Record of a sparse selection: lists per (query page, group); computes the union.
ChunkSelection sparse_selection(int64_t chunk, int64_t layer, int64_t groups,
                                std::vector<std::vector<int32_t>> pages);

}  // namespace oomb::executor
