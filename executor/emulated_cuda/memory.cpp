// Allocations, copies and memset of the emulated CUDA runtime (runtime.h). Device memory is host
// memory allocated with its exact size (so AddressSanitizer sees overruns in kernels), 256-byte
// aligned as cudaMalloc guarantees, filled with 0xFF bytes so a read of memory nobody wrote is a NaN.
// Copies follow CUDA's documented synchronisation ("API synchronization behavior"): pageable host
// memory is consumed before an async copy returns and a copy into it has completed when the call
// returns; pinned and device memory are read and written in stream order, after the call returns.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string_view>
#include <vector>

#include "executor/emulated_cuda/activity.h"
#include "executor/emulated_cuda/runtime.h"

namespace oomb::emulated_cuda {
namespace {

// models/gpu/h200.json, hbm_capacity_bytes (nvidia-smi total memory on H200 SXM: 143771 MiB).
constexpr size_t kH200MemoryBytes = 150754820096;
constexpr size_t kAlignment = 256;  // cudaMalloc's guaranteed alignment
constexpr unsigned char kPoison = 0xFF;

enum class Space { device, pinned, pageable };

struct Allocation {
  size_t bytes = 0;
  Space space = Space::device;
  unsigned flags = 0;  // cudaHostAlloc flags
};

struct Memory {
  std::shared_mutex mu;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  size_t device_in_use = 0;
  size_t capacity = 0;  // 0: not set by a test
};

Memory& memory() {
  static Memory* m = new Memory;  // never destroyed: worker threads may still copy at exit
  return *m;
}

size_t default_capacity() {
  static const size_t bytes = [] {
    if (const char* v = std::getenv("OOMB_EMULATED_GPU_MEMORY_BYTES"); v && *v) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v, &end, 10);
      if (end && *end == '\0' && n > 0) return static_cast<size_t>(n);
    }
    return kH200MemoryBytes;
  }();
  return bytes;
}

size_t rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The allocation holding p (null when none: pageable host memory). Caller holds the lock.
const std::pair<const uintptr_t, Allocation>* find_locked(Memory& m, const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = m.allocations.upper_bound(a);
  if (it == m.allocations.begin()) return nullptr;
  --it;
  return a - it->first < it->second.bytes ? &*it : nullptr;
}

// Where [p, p + bytes) lives; cudaErrorInvalidValue when it starts in an allocation and runs past
// its end (CUDA checks a copy or memset against the allocation it names).
cudaError_t classify(const void* p, size_t bytes, Space* space) {
  Memory& m = memory();
  std::shared_lock lock(m.mu);
  const auto* hit = find_locked(m, p);
  if (!hit) {
    *space = Space::pageable;
    return cudaSuccess;
  }
  *space = hit->second.space;
  const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - hit->first;
  return bytes <= hit->second.bytes - offset ? cudaSuccess : cudaErrorInvalidValue;
}

activity::Work::Where where(Space s) {
  switch (s) {
    case Space::device: return activity::Work::Where::device;
    case Space::pinned: return activity::Work::Where::pinned;
    case Space::pageable: break;
  }
  return activity::Work::Where::pageable;
}

// `correlation`: the API call's (activity.h), for the allocation's record.
void* allocate(size_t bytes, Space space, unsigned flags, uint32_t correlation) {
  void* p = ::operator new(bytes, std::align_val_t{kAlignment}, std::nothrow);
  if (!p) return nullptr;
  std::memset(p, kPoison, bytes);
  Memory& m = memory();
  {
    std::lock_guard lock(m.mu);
    m.allocations[reinterpret_cast<uintptr_t>(p)] = {bytes, space, flags};
    if (space == Space::device) m.device_in_use += rounded(bytes);
  }
  activity::memory(true, space == Space::device, p, bytes, correlation);
  return p;
}

// Frees the allocation starting exactly at p if it lives in `space`.
cudaError_t release(void* p, Space space, uint32_t correlation) {
  // cudaFree and cudaFreeHost synchronise the device: no queued work may still use the memory.
  detail::synchronize_device();
  Memory& m = memory();
  size_t bytes = 0;
  {
    std::lock_guard lock(m.mu);
    auto it = m.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.allocations.end() || it->second.space != space) return cudaErrorInvalidValue;
    bytes = it->second.bytes;
    if (space == Space::device) m.device_in_use -= rounded(bytes);
    m.allocations.erase(it);
  }
  activity::memory(false, space == Space::device, p, bytes, correlation);
  ::operator delete(p, std::align_val_t{kAlignment});
  return cudaSuccess;
}

bool valid_kind(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
    case cudaMemcpyHostToDevice:
    case cudaMemcpyDeviceToHost:
    case cudaMemcpyDeviceToDevice:
    case cudaMemcpyDefault:
      return true;
  }
  return false;
}

bool on_host(Space s) { return s != Space::device; }

// One copy queued on `stream`, with CUDA's synchronisation for the kind of memory at each end
// (unified addressing: the kind argument only has to be valid, the pointers say where they are).
// `sync`: the synchronous cudaMemcpy, which returns when the copy is done except device to device.
cudaError_t copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  const uint32_t correlation = activity::api_call(sync ? activity::Call::memcpy : activity::Call::memcpy_async);
  if (!valid_kind(kind)) return detail::fail(cudaErrorInvalidMemcpyDirection);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return detail::fail(cudaErrorInvalidValue);
  Space ds{}, ss{};
  if (classify(dst, count, &ds) != cudaSuccess || classify(src, count, &ss) != cudaSuccess)
    return detail::fail(cudaErrorInvalidValue);
  const bool host_to_host = on_host(ds) && on_host(ss);
  const bool device_to_device = ds == Space::device && ss == Space::device;
  const bool wait_done = host_to_host || ds == Space::pageable || (sync && !device_to_device);
  std::function<void()> fn;
  if (ss == Space::pageable && !wait_done) {
    // Staged at the call, as the driver stages pageable memory: the caller may reuse src at once.
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    fn = [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); };
  } else {
    fn = [dst, src, count] { std::memmove(dst, src, count); };
  }
  activity::Work work;
  work.type = activity::Work::Type::memcpy;
  work.src = where(ss);
  work.dst = where(ds);
  work.bytes = count;
  detail::MarkPtr done;
  if (const cudaError_t e = detail::enqueue(stream, activity::recorded(stream, correlation, work, std::move(fn)), &done);
      e != cudaSuccess)
    return detail::fail(e);
  if (wait_done) {
    detail::wait(done);
    if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  }
  return cudaSuccess;
}

cudaError_t fill(void* p, int value, size_t count, cudaStream_t stream, bool sync) {
  const uint32_t correlation = activity::api_call(sync ? activity::Call::memset : activity::Call::memset_async);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  if (count == 0) return cudaSuccess;
  Space space{};
  if (!p || classify(p, count, &space) != cudaSuccess || space == Space::pageable)
    return detail::fail(cudaErrorInvalidValue);
  detail::MarkPtr done;
  const auto byte = static_cast<unsigned char>(value);
  activity::Work work;
  work.type = activity::Work::Type::memset;
  work.dst = where(space);
  work.bytes = count;
  work.value = byte;
  if (const cudaError_t e = detail::enqueue(
          stream, activity::recorded(stream, correlation, work, [p, byte, count] { std::memset(p, byte, count); }), &done);
      e != cudaSuccess)
    return detail::fail(e);
  // CUDA: the synchronous cudaMemset is asynchronous to the host unless it targets pinned memory.
  if (sync && space == Space::pinned) detail::wait(done);
  return cudaSuccess;
}

cudaError_t host_alloc(void** p, size_t size, unsigned flags, activity::Call call) {
  const uint32_t correlation = activity::api_call(call);
  constexpr unsigned kKnown = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
  if (!p || (flags & ~kKnown) != 0) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  *p = nullptr;
  if (size == 0) return cudaSuccess;
  *p = allocate(size, Space::pinned, flags, correlation);
  return *p ? cudaSuccess : detail::fail(cudaErrorMemoryAllocation);
}

}  // namespace

bool device_accessible(const void* p) {
  if (!p) return false;
  Memory& m = memory();
  std::shared_lock lock(m.mu);
  return find_locked(m, p) != nullptr;
}

void set_device_memory_capacity(size_t bytes) {
  Memory& m = memory();
  std::lock_guard lock(m.mu);
  m.capacity = bytes;
}

size_t device_memory_capacity() {
  Memory& m = memory();
  std::shared_lock lock(m.mu);
  return m.capacity ? m.capacity : default_capacity();
}

size_t device_memory_in_use() {
  Memory& m = memory();
  std::shared_lock lock(m.mu);
  return m.device_in_use;
}

void detail::reset_memory() {
  Memory& m = memory();
  std::lock_guard lock(m.mu);
  for (const auto& [base, a] : m.allocations)
    ::operator delete(reinterpret_cast<void*>(base), std::align_val_t{kAlignment});
  m.allocations.clear();
  m.device_in_use = 0;
}

}  // namespace oomb::emulated_cuda

using namespace oomb::emulated_cuda;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  const uint32_t correlation = activity::api_call(activity::Call::malloc);
  if (!devPtr) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;  // CUDA hands back a null pointer for an empty allocation
  {
    Memory& m = memory();
    std::shared_lock lock(m.mu);
    const size_t capacity = m.capacity ? m.capacity : default_capacity();
    // Out of memory is not sticky: the context stays usable and cudaGetLastError clears it.
    if (rounded(size) > capacity - std::min(capacity, m.device_in_use)) return detail::fail(cudaErrorMemoryAllocation);
  }
  *devPtr = allocate(size, Space::device, 0, correlation);
  return *devPtr ? cudaSuccess : detail::fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void* devPtr) {
  if (!devPtr) return cudaSuccess;
  const cudaError_t e = release(devPtr, Space::device, activity::api_call(activity::Call::free));
  if (e != cudaSuccess) return detail::fail(e);
  const cudaError_t sticky = detail::sticky_error();
  return sticky == cudaSuccess ? cudaSuccess : detail::fail(sticky);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return host_alloc(ptr, size, cudaHostAllocDefault, activity::Call::malloc_host);
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  return host_alloc(pHost, size, flags, activity::Call::host_alloc);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  const cudaError_t e = release(ptr, Space::pinned, activity::api_call(activity::Call::free_host));
  if (e != cudaSuccess) return detail::fail(e);
  const cudaError_t sticky = detail::sticky_error();
  return sticky == cudaSuccess ? cudaSuccess : detail::fail(sticky);
}

cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (!pDevice || flags != 0) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  Space space{};
  if (!pHost || classify(pHost, 1, &space) != cudaSuccess || space != Space::pinned)
    return detail::fail(cudaErrorInvalidValue);
  // Unified addressing: all pinned host memory is mapped (with or without cudaHostAllocMapped) and
  // the device pointer is the host pointer itself.
  *pDevice = pHost;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  *attributes = cudaPointerAttributes{};
  Space space = Space::pageable;
  if (ptr) (void)classify(ptr, 1, &space);
  void* p = const_cast<void*>(ptr);
  switch (space) {
    case Space::device:
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = 0;
      attributes->devicePointer = p;
      break;
    case Space::pinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->device = 0;
      attributes->devicePointer = p;
      attributes->hostPointer = p;
      break;
    case Space::pageable:  // CUDA 11 and later: success, unregistered, no device
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = cudaInvalidDeviceId;
      break;
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (!free || !total) return detail::fail(cudaErrorInvalidValue);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  const size_t capacity = device_memory_capacity(), used = device_memory_in_use();
  *total = capacity;
  *free = capacity - std::min(capacity, used);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, cudaStreamLegacy, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, count, kind, stream, false);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return fill(devPtr, value, count, cudaStreamLegacy, true);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return fill(devPtr, value, count, stream, false);
}

cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                 cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 cudaStream_t stream) {
  // OOMB_EMULATED_BATCH_COPY=0 plays a driver without batched copies, so the caller's one-by-one
  // fallback runs. Read per call so a test can switch it.
  const uint32_t correlation = activity::api_call(activity::Call::memcpy_batch_async);
  if (const char* v = std::getenv("OOMB_EMULATED_BATCH_COPY"); v && std::string_view(v) == "0")
    return detail::fail(cudaErrorNotSupported);
  if (const cudaError_t e = detail::sticky_error(); e != cudaSuccess) return detail::fail(e);
  if (count == 0 || !dsts || !srcs || !sizes || !attrs || !attrsIdxs || numAttrs == 0 || numAttrs > count)
    return detail::fail(cudaErrorInvalidValue);
  // The driver refuses the legacy default stream for batched copies.
  if (stream == nullptr || stream == cudaStreamLegacy) return detail::fail(cudaErrorInvalidValue);
  // attrsIdxs: the first copy each attribute applies to; starts at 0, strictly increasing.
  for (size_t a = 0; a < numAttrs; ++a) {
    if (attrsIdxs[a] >= count || (a == 0 && attrsIdxs[a] != 0) || (a > 0 && attrsIdxs[a] <= attrsIdxs[a - 1]))
      return detail::fail(cudaErrorInvalidValue);
    const cudaMemcpySrcAccessOrder order = attrs[a].srcAccessOrder;
    if (order != cudaMemcpySrcAccessOrderStream && order != cudaMemcpySrcAccessOrderDuringApiCall &&
        order != cudaMemcpySrcAccessOrderAny)
      return detail::fail(cudaErrorInvalidValue);
    if ((attrs[a].flags & ~unsigned{cudaMemcpyFlagPreferOverlapWithCompute}) != 0)
      return detail::fail(cudaErrorInvalidValue);
  }
  struct Piece {
    void* dst;
    const void* src;
    size_t bytes;
    std::shared_ptr<std::vector<unsigned char>> staged;
    Space src_space, dst_space;
  };
  std::vector<Piece> pieces;
  pieces.reserve(count);
  bool wait_done = false;
  size_t attr = 0;
  for (size_t i = 0; i < count; ++i) {
    while (attr + 1 < numAttrs && attrsIdxs[attr + 1] <= i) ++attr;
    if (sizes[i] == 0) continue;
    if (!dsts[i] || !srcs[i]) return detail::fail(cudaErrorInvalidValue);
    Space ds{}, ss{};
    if (classify(dsts[i], sizes[i], &ds) != cudaSuccess || classify(srcs[i], sizes[i], &ss) != cudaSuccess)
      return detail::fail(cudaErrorInvalidValue);
    Piece piece{dsts[i], srcs[i], sizes[i], nullptr, ss, ds};
    // A pageable source, or one the caller said may be read during the call, is read now.
    if (ss == Space::pageable || attrs[attr].srcAccessOrder == cudaMemcpySrcAccessOrderDuringApiCall) {
      const auto* s = static_cast<const unsigned char*>(srcs[i]);
      piece.staged = std::make_shared<std::vector<unsigned char>>(s, s + sizes[i]);
    }
    if (ds == Space::pageable || (on_host(ds) && on_host(ss))) wait_done = true;
    pieces.push_back(std::move(piece));
  }
  // The batch runs in stream order as a whole; CUDA promises no order inside it, so the emulation
  // copies last to first, which breaks a batch that depends on one. For CUPTI, the copies of one
  // direction are one memcpy record (copyCount: "multiple memcpy operations are batched together"):
  // a batch of mixed directions runs as one operation per direction, the last direction first.
  std::vector<std::vector<Piece>> groups;
  for (Piece& p : pieces) {
    const auto g = std::find_if(groups.begin(), groups.end(), [&](const std::vector<Piece>& v) {
      return v.front().src_space == p.src_space && v.front().dst_space == p.dst_space;
    });
    if (g != groups.end())
      g->push_back(std::move(p));
    else
      groups.push_back({std::move(p)});
  }
  detail::MarkPtr done;
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
    activity::Work work;
    work.type = activity::Work::Type::memcpy;
    work.src = where(g->front().src_space);
    work.dst = where(g->front().dst_space);
    work.copy_count = g->size();
    for (const Piece& p : *g) work.bytes += p.bytes;
    auto fn = [group = std::move(*g)] {
      for (auto it = group.rbegin(); it != group.rend(); ++it)
        std::memmove(it->dst, it->staged ? it->staged->data() : it->src, it->bytes);
    };
    if (const cudaError_t e = detail::enqueue(stream, activity::recorded(stream, correlation, work, std::move(fn)), &done);
        e != cudaSuccess)
      return detail::fail(e);
  }
  if (wait_done) detail::wait(done);
  return cudaSuccess;
}

}  // extern "C"
