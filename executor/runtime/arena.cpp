#include "executor/runtime/arena.h"

#include <algorithm>
#include <new>

#include "core/error.h"

namespace oomb::executor {

namespace {
int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
}  // namespace

Arena::Arena(Grow grow, Release release, int64_t grow_bytes, int64_t alignment)
    : grow_(std::move(grow)), release_(std::move(release)), grow_bytes_(grow_bytes), align_(alignment) {
  OOMB_ASSERT(alignment > 0 && (alignment & (alignment - 1)) == 0, "arena alignment must be a power of two");
  OOMB_ASSERT(grow_bytes >= 0);
}

Arena::~Arena() {
  for (Block& b : blocks_) release_(b.base, b.bytes);
}

void Arena::add_block(int64_t bytes) {
  bytes = round_up(std::max<int64_t>(bytes, align_), align_);
  void* p = grow_(bytes);
  if (!p) throw std::bad_alloc();
  OOMB_ASSERT(reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align_) == 0, "block not aligned");
  Block b;
  b.base = static_cast<char*>(p);
  b.bytes = bytes;
  b.free[0] = bytes;
  blocks_.push_back(std::move(b));
  reserved_ += bytes;
}

void Arena::reserve(int64_t bytes) {
  if (bytes > 0) add_block(bytes);
}

void* Arena::allocate(int64_t bytes) {
  OOMB_ASSERT(bytes >= 0);
  const int64_t need = round_up(std::max<int64_t>(bytes, 1), align_);
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (size_t bi = 0; bi < blocks_.size(); ++bi) {
      Block& b = blocks_[bi];
      for (auto it = b.free.begin(); it != b.free.end(); ++it) {
        if (it->second < need) continue;
        return carve(bi, it, it->first, need);
      }
    }
    if (attempt == 0) {
      add_block(std::max(need, grow_bytes_));
      ++grows_;
    }
  }
  throw std::bad_alloc();
}

void* Arena::allocate_within(int64_t bytes, int64_t lo, int64_t hi) {
  OOMB_ASSERT(bytes >= 0 && lo >= 0 && lo <= hi);
  if (blocks_.empty()) return nullptr;
  const int64_t need = round_up(std::max<int64_t>(bytes, 1), align_);
  Block& b = blocks_[0];
  hi = std::min(hi, b.bytes);
  lo = round_up(lo, align_);
  // The free ranges that overlap [lo, hi): from the one starting at or before lo.
  auto it = b.free.upper_bound(lo);
  if (it != b.free.begin()) --it;
  for (; it != b.free.end() && it->first < hi; ++it) {
    const int64_t start = std::max(it->first, lo);
    if (start + need <= std::min(it->first + it->second, hi)) return carve(0, it, start, need);
  }
  return nullptr;
}

char* Arena::carve(size_t bi, std::map<int64_t, int64_t>::iterator range, int64_t start, int64_t need) {
  Block& b = blocks_[bi];
  const int64_t off = range->first, len = range->second;
  b.free.erase(range);
  if (start > off) b.free[off] = start - off;
  if (off + len > start + need) b.free[start + need] = off + len - (start + need);
  char* p = b.base + start;
  live_[p] = {bi, need};
  in_use_ += need;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void Arena::deallocate(void* p) {
  auto it = live_.find(static_cast<const char*>(p));
  OOMB_ASSERT(it != live_.end(), "arena: freeing a pointer it did not allocate");
  Block& b = blocks_[it->second.first];
  int64_t off = static_cast<const char*>(p) - b.base, len = it->second.second;
  in_use_ -= len;
  live_.erase(it);
  // Merge with the following and the preceding free range.
  auto next = b.free.lower_bound(off);
  if (next != b.free.end() && next->first == off + len) {
    len += next->second;
    next = b.free.erase(next);
  }
  if (next != b.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      len += prev->second;
      b.free.erase(prev);
    }
  }
  b.free[off] = len;
}

bool Arena::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return std::any_of(blocks_.begin(), blocks_.end(),
                     [&](const Block& b) { return c >= b.base && c < b.base + b.bytes; });
}

int64_t Arena::size_of(const void* p) const {
  auto it = live_.find(static_cast<const char*>(p));
  return it == live_.end() ? 0 : it->second.second;
}

}  // namespace oomb::executor
