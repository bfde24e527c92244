#pragma once
// Fixed-size pages carved out of one allocation per pool (device tier) or a few large slabs (host
// tier: the pinned slabs of a CUDA run): no fragmentation, no reallocation during a step. The free
// set hands out the lowest free page (so pages taken in a row form ascending runs, whatever order
// they were freed in); allocate_at takes a given page (the offload engine lays pages out so that a
// copy's regions are contiguous on both sides, see offload.h). High-water is kept in pages.
// Gradient pages are zeroed when created.
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "executor/runtime/backend.h"
#include "executor/runtime/memory_account.h"

namespace oomb::executor {

class PagePool {
 public:
  // Every pool accounts its allocation (its slabs, whole, from construction: a pool is allocated
  // once for the run) under the buffer-table category of its kind of page (kv_pages /
  // kv_grad_pages); the pages in use are counted apart (MemoryAccount::pool_pages_in_use).
  PagePool(Backend& backend, Tier tier, std::string name, int64_t page_bytes, int64_t capacity_pages,
           MemoryAccount& account, int64_t max_slab_bytes = std::numeric_limits<int64_t>::max());
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  int64_t allocate(bool zero);  // physical page id: the lowest free one
  int64_t allocate_at(int64_t page, bool zero);  // `page`, which must be free
  void free(int64_t page);
  float* ptr(int64_t page) const;

  const std::string& name() const { return name_; }
  Tier tier() const { return tier_; }
  int64_t page_bytes() const { return page_bytes_; }
  int64_t capacity() const { return capacity_; }
  int64_t in_use() const { return in_use_; }
  int64_t high_water() const { return high_water_; }
  int64_t slabs() const { return static_cast<int64_t>(slabs_.size()); }

 private:
  Backend& backend_;
  Tier tier_;
  std::string name_;
  int64_t page_bytes_;
  int64_t capacity_;
  MemoryAccount& account_;
  int64_t pages_per_slab_ = 0;
  std::vector<Buffer> slabs_;
  std::set<int64_t> free_;
  std::vector<uint8_t> used_;
  int64_t in_use_ = 0;
  int64_t high_water_ = 0;
};

// Logical page index -> physical page id of one layer and one page kind (-1 = none).
struct PageTable {
  std::vector<int64_t> phys;
  void resize(int64_t pages) { phys.assign(static_cast<size_t>(pages), -1); }
  int64_t& operator[](int64_t logical) { return phys[static_cast<size_t>(logical)]; }
  int64_t operator[](int64_t logical) const { return phys[static_cast<size_t>(logical)]; }
};

}  // namespace oomb::executor
