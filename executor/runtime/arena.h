#pragma once
// A first-fit arena over a few large blocks (plain C++: the CUDA backend gives it cudaMalloc or
// cudaHostAlloc as `grow`, tests give it malloc). Blocks are obtained only when a request does not
// fit (at least grow_bytes each) and are released only when the arena is destroyed, so a run that
// allocates its buffers up front never calls the system allocator again. Freed ranges are merged
// with their free neighbours. Not thread-safe (the backend serialises calls).
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace oomb::executor {

class Arena {
 public:
  using Grow = std::function<void*(int64_t bytes)>;
  using Release = std::function<void(void* p, int64_t bytes)>;

  Arena(Grow grow, Release release, int64_t grow_bytes, int64_t alignment = 256);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  void reserve(int64_t bytes);          // adds one block of exactly this size (rounded up)
  void* allocate(int64_t bytes);        // aligned; grows when nothing fits
  // First fit inside [lo, hi) of the first block (offsets; a range of a layout); nullptr when
  // nothing there fits (the caller falls back to allocate). Never grows.
  void* allocate_within(int64_t bytes, int64_t lo, int64_t hi);
  void deallocate(void* p);             // p from allocate
  bool contains(const void* p) const;   // inside any block
  int64_t size_of(const void* p) const;  // of a live allocation, 0 if none

  int64_t reserved_bytes() const { return reserved_; }
  int64_t in_use_bytes() const { return in_use_; }
  int64_t peak_in_use_bytes() const { return peak_; }
  int64_t blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t grows() const { return grows_; }  // blocks added by allocate (not by reserve)

 private:
  struct Block {
    char* base = nullptr;
    int64_t bytes = 0;
    std::map<int64_t, int64_t> free;  // offset -> length
  };
  void add_block(int64_t bytes);
  // [start, start + need) of the free range `range` of block bi, in use from now on.
  char* carve(size_t bi, std::map<int64_t, int64_t>::iterator range, int64_t start, int64_t need);

  Grow grow_;
  Release release_;
  int64_t grow_bytes_, align_;
  std::vector<Block> blocks_;
  std::map<const char*, std::pair<size_t, int64_t>> live_;  // pointer -> (block, rounded bytes)
  int64_t reserved_ = 0, in_use_ = 0, peak_ = 0, grows_ = 0;
};

}  // namespace oomb::executor
