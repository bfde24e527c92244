#include "executor/runtime/selection.h"

#include <algorithm>

#include "core/error.h"

namespace oomb::executor {

void SelectionLog::reset(int64_t chunks, int64_t layers) {
  chunks_ = chunks;
  layers_ = layers;
  entries_.assign(static_cast<size_t>(chunks * layers), ChunkSelection{});
}

ChunkSelection& SelectionLog::at(int64_t chunk, int64_t layer) {
  OOMB_ASSERT(chunk >= 0 && chunk < chunks_ && layer >= 0 && layer < layers_);
  return entries_[static_cast<size_t>(chunk * layers_ + layer)];
}

const ChunkSelection& SelectionLog::at(int64_t chunk, int64_t layer) const {
  OOMB_ASSERT(chunk >= 0 && chunk < chunks_ && layer >= 0 && layer < layers_);
  return entries_[static_cast<size_t>(chunk * layers_ + layer)];
}

bool SelectionLog::recorded(int64_t chunk, int64_t layer) const { return at(chunk, layer).chunk >= 0; }

ChunkSelection dense_selection(int64_t chunk, int64_t layer, int64_t prefix_pages) {
  ChunkSelection s;
  s.chunk = chunk;
  s.layer = layer;
  s.dense = true;
  s.union_pages.resize(static_cast<size_t>(prefix_pages));
  for (int64_t i = 0; i < prefix_pages; ++i) s.union_pages[static_cast<size_t>(i)] = i;
  return s;
}

ChunkSelection sparse_selection(int64_t chunk, int64_t layer, int64_t groups, std::vector<std::vector<int32_t>> pages) {
  ChunkSelection s;
  s.chunk = chunk;
  s.layer = layer;
  s.dense = false;
  s.groups = groups;
  s.pages = std::move(pages);
  for (const auto& l : s.pages) s.union_pages.insert(s.union_pages.end(), l.begin(), l.end());
  std::sort(s.union_pages.begin(), s.union_pages.end());
  s.union_pages.erase(std::unique(s.union_pages.begin(), s.union_pages.end()), s.union_pages.end());
  return s;
}

}  // namespace oomb::executor
