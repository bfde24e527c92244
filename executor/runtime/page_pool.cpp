#include "executor/runtime/page_pool.h"

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace oomb::executor {

PagePool::PagePool(Backend& backend, Tier tier, std::string name, int64_t page_bytes, int64_t capacity_pages,
                   MemoryAccount& account, int64_t max_slab_bytes)
    : backend_(backend),
      tier_(tier),
      name_(std::move(name)),
      page_bytes_(page_bytes),
      capacity_(capacity_pages),
      account_(account) {
  OOMB_ASSERT(page_bytes > 0 && capacity_pages >= 0, name_);
  // Device: exactly one allocation. Host: slabs of at most max_slab_bytes, the last one sized to fit.
  pages_per_slab_ = tier == Tier::device ? std::max<int64_t>(capacity_pages, 1)
                                         : std::max<int64_t>(1, max_slab_bytes / page_bytes);
  for (int64_t first = 0; first < capacity_pages; first += pages_per_slab_) {
    const int64_t pages = std::min(pages_per_slab_, capacity_pages - first);
    slabs_.emplace_back(backend_, tier_, checked_mul(pages, page_bytes, "page pool bytes"), &account_, name_);
  }
  for (int64_t i = 0; i < capacity_pages; ++i) free_.insert(free_.end(), i);
  used_.assign(static_cast<size_t>(capacity_pages), 0);
}

int64_t PagePool::allocate(bool zero) {
  OOMB_ASSERT(!free_.empty(), "page pool '" + name_ + "' exhausted at " + std::to_string(capacity_) +
                                  " pages: the schedule's pool size was computed wrongly");
  return allocate_at(*free_.begin(), zero);
}

int64_t PagePool::allocate_at(int64_t page, bool zero) {
  OOMB_ASSERT(page >= 0 && page < capacity_ && !used_[static_cast<size_t>(page)],
              "page " + std::to_string(page) + " of pool '" + name_ + "' is not free");
  free_.erase(page);
  used_[static_cast<size_t>(page)] = 1;
  ++in_use_;
  high_water_ = std::max(high_water_, in_use_);
  if (zero) backend_.fill_zero(ptr(page), page_bytes_);
  if (tier_ == Tier::device) account_.add_pool_pages(1);
  return page;
}

void PagePool::free(int64_t page) {
  OOMB_ASSERT(page >= 0 && page < capacity_ && used_[static_cast<size_t>(page)], "bad free in pool " + name_);
  used_[static_cast<size_t>(page)] = 0;
  free_.insert(page);
  --in_use_;
  if (tier_ == Tier::device) account_.add_pool_pages(-1);
}

float* PagePool::ptr(int64_t page) const {
  OOMB_ASSERT(page >= 0 && page < capacity_, name_);
  const auto slab = static_cast<size_t>(page / pages_per_slab_);
  return reinterpret_cast<float*>(static_cast<char*>(slabs_[slab].data()) + (page % pages_per_slab_) * page_bytes_);
}

}  // namespace oomb::executor
