#pragma once
// Bytes in use per tier, by category, with peaks. Device bytes in use = pool pages in use (KV and
// gradient pools, counted per page) + every other accounted device buffer (weights, gradients,
// optimizer state, checkpoints, working set, summaries). Backend-internal scratch (the CPU
// backend's attention gather buffers) is not a device buffer of the method and is not counted.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "executor/runtime/backend.h"

namespace oomb::executor {

class MemoryAccount {
 public:
  void add(Tier tier, const std::string& category, int64_t bytes);  // bytes may be negative
  int64_t in_use(Tier tier) const;
  int64_t peak(Tier tier) const;
  std::map<std::string, int64_t> peak_by_category(Tier tier) const;  // at the moment of the tier's peak
  int64_t pool_pages_in_use() const { return pool_pages_; }
  void add_pool_pages(int64_t pages) { pool_pages_ += pages; }
  void reset_peaks();

 private:
  mutable std::mutex mu_;
  int64_t used_[2] = {0, 0};
  int64_t peak_[2] = {0, 0};
  std::map<std::string, int64_t> by_cat_[2];
  std::map<std::string, int64_t> at_peak_[2];
  int64_t pool_pages_ = 0;
};

}  // namespace oomb::executor
