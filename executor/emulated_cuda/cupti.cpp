// The emulated CUPTI activity API: the functions executor/cupti/collector.cpp calls, with the
// toolkit's prototypes (cupti_activity.h) and record structs, written from the documentation in
// that header (quoted by function below), so that the collector and its decoder run unchanged on
// the emulated device.
//
// Records are made by the emulated runtime (activity.h): an API record per call that queues work or
// allocates, preceded by one CUpti_ActivityExternalCorrelation per external-correlation kind whose
// stack is non-empty on the calling thread ("When a CUPTI activity API record is created while
// within an external API region and CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION is enabled, the
// activity API record will be preceded by a CUpti_ActivityExternalCorrelation record for each
// CUpti_ExternalCorrelationKind", cuptiActivityPushExternalCorrelationId); kernel (Kernel10),
// memcpy (Memcpy6; a batch folded into one record with copyCount, as its documentation says),
// memset (Memset4) records as the work completes on its stream's thread; memory (Memory4) records
// at allocation and free. Timestamps come from the client's timestamp callback, else the steady
// clock.
//
// Buffers: "all buffers returned by this callback are global buffers" (context and stream id of
// the completion callback are always null): one queue. Records are appended, each padded to 8
// bytes, until the next does not fit (or the client's maxNumRecords is reached); that buffer is
// then completed and a new one requested. A record for which the client gives no buffer (null, or
// smaller than the record) is dropped and counted (cuptiActivityGetNumDroppedRecords, reset when
// read). cuptiActivityFlushAll completes the current buffer. Callbacks run on the thread whose
// record filled the buffer (a stream's thread or the caller), under the emulation's lock, which
// is recursive: a callback may call CUPTI again.
//
// Test switches, read when a buffer is requested and a record is made:
//   OOMB_EMULATED_CUPTI_BUFFER_BYTES=<n>  use at most n bytes of each buffer the client gives, so
//                                          that records cross many buffer boundaries;
//   OOMB_EMULATED_CUPTI_DROP_EVERY=<n>    drop every n-th record, as CUPTI does when it has no buffer.
#include <cupti.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "executor/emulated_cuda/activity.h"

namespace oomb::emulated_cuda::activity {
namespace {

constexpr size_t kRecordAlign = 8;
constexpr uint32_t kContextId = 1;  // the one context of the one device
constexpr uint32_t kLegacyStreamId = 7;

size_t padded(size_t bytes) { return (bytes + kRecordAlign - 1) / kRecordAlign * kRecordAlign; }

// The bytes of a record of this kind in the buffer (0: a kind the emulation never writes).
size_t record_bytes(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return padded(sizeof(CUpti_ActivityKernel10));
    case CUPTI_ACTIVITY_KIND_MEMCPY: return padded(sizeof(CUpti_ActivityMemcpy6));
    case CUPTI_ACTIVITY_KIND_MEMSET: return padded(sizeof(CUpti_ActivityMemset4));
    case CUPTI_ACTIVITY_KIND_MEMORY2: return padded(sizeof(CUpti_ActivityMemory4));
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: return padded(sizeof(CUpti_ActivityAPI));
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return padded(sizeof(CUpti_ActivityExternalCorrelation));
    default: return 0;
  }
}

int64_t env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end && *end == '\0' && n > 0 ? n : 0;
}

struct State {
  std::recursive_mutex mu;  // buffers, callbacks, stream ids, names
  std::atomic<int> enabled_kinds{0};
  std::atomic<bool> kind[CUPTI_ACTIVITY_KIND_COUNT]{};
  std::atomic<bool> driver_launches{false};  // cuptiActivityEnableDriverApi(cuLaunchKernel*)
  std::atomic<CUpti_TimestampCallbackFunc> timestamp{nullptr};
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  uint8_t* buffer = nullptr;
  size_t buffer_size = 0, used = 0, max_records = 0, records = 0;  // buffer_size: what the emulation uses
  size_t given_size = 0;                                             // what the client gave
  std::atomic<uint64_t> made{0};     // records made (for the drop switch)
  std::atomic<size_t> dropped{0};    // since the last cuptiActivityGetNumDroppedRecords
  std::atomic<uint32_t> next_correlation{1};
  std::unordered_map<cudaStream_t, uint32_t> stream_ids;
  uint32_t next_stream_id = kLegacyStreamId + 6;
  std::set<std::string> names;  // kernel names: the records point into this set for the process
};

State& state() {
  static State* s = new State;  // never destroyed: stream threads may record while the process exits
  return *s;
}

// Per thread and external-correlation kind: the pushed ids.
thread_local std::vector<uint64_t> t_external[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

uint64_t now() {
  if (const CUpti_TimestampCallbackFunc f = state().timestamp.load()) return f();
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

bool enabled(CUpti_ActivityKind k) { return k < CUPTI_ACTIVITY_KIND_COUNT && state().kind[k].load(); }

uint32_t thread_id() { return static_cast<uint32_t>(std::hash<std::thread::id>{}(std::this_thread::get_id())); }

// Completes the current buffer (caller holds mu).
void complete_locked(State& s) {
  if (!s.buffer) return;
  uint8_t* b = s.buffer;
  const size_t size = s.given_size, valid = s.used;
  s.buffer = nullptr;
  s.buffer_size = s.given_size = s.used = s.records = s.max_records = 0;
  if (s.complete) s.complete(nullptr, 0, b, size, valid);
}

// Appends one record of `size` bytes (its first member is its kind) in its slot, or drops it.
void append_bytes(const void* record, size_t size, CUpti_ActivityKind kind) {
  State& s = state();
  const size_t bytes = record_bytes(kind);
  if (const int64_t every = env_int("OOMB_EMULATED_CUPTI_DROP_EVERY");
      every > 0 && (s.made.fetch_add(1) + 1) % static_cast<uint64_t>(every) == 0) {
    ++s.dropped;
    return;
  }
  std::lock_guard lock(s.mu);
  const bool full = s.buffer && (s.used + bytes > s.buffer_size || (s.max_records && s.records >= s.max_records));
  if (full) complete_locked(s);
  if (!s.buffer) {
    uint8_t* b = nullptr;
    size_t given = 0, max_records = 0;
    if (s.request) s.request(&b, &given, &max_records);
    size_t usable = given;
    if (const int64_t cap = env_int("OOMB_EMULATED_CUPTI_BUFFER_BYTES"); cap > 0)
      usable = std::min(usable, static_cast<size_t>(cap));
    if (!b || usable < bytes || reinterpret_cast<uintptr_t>(b) % kRecordAlign != 0) {
      // No buffer for this record: dropped. A buffer too small for it is handed back at once.
      if (b && s.complete) s.complete(nullptr, 0, b, given, 0);
      ++s.dropped;
      return;
    }
    s.buffer = b;
    s.buffer_size = usable;
    s.given_size = given;
    s.max_records = max_records;
  }
  std::memset(s.buffer + s.used, 0, bytes);
  std::memcpy(s.buffer + s.used, record, std::min(size, bytes));
  s.used += bytes;
  ++s.records;
}

template <class Record>
void append(const Record& r) {
  append_bytes(&r, sizeof r, r.kind);
}

uint32_t stream_id(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return kLegacyStreamId;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto [it, inserted] = s.stream_ids.try_emplace(stream, s.next_stream_id);
  if (inserted) ++s.next_stream_id;
  return it->second;
}

uint8_t memory_kind(Work::Where w) {
  switch (w) {
    case Work::Where::device: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    case Work::Where::pinned: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    case Work::Where::pageable: return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  }
  return CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
}

uint8_t copy_kind(Work::Where src, Work::Where dst) {
  const bool src_device = src == Work::Where::device, dst_device = dst == Work::Where::device;
  if (src_device && dst_device) return CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
  if (src_device) return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  if (dst_device) return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
}

CUpti_CallbackId callback_id(Call call) {
  switch (call) {
    case Call::launch_kernel: return CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    case Call::memcpy: return CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020;
    case Call::memcpy_async: return CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020;
    case Call::memcpy_batch_async: return CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000;
    case Call::memset: return CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020;
    case Call::memset_async: return CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020;
    case Call::malloc: return CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020;
    case Call::free: return CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020;
    case Call::malloc_host: return CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020;
    case Call::host_alloc: return CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020;
    case Call::free_host: return CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020;
    case Call::driver_launch_kernel: return CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  }
  return 0;
}

const char* interned(const char* name) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.names.insert(name ? name : "").first->c_str();
}

}  // namespace

uint32_t api_call(Call call) {
  State& s = state();
  if (s.enabled_kinds.load(std::memory_order_relaxed) == 0) return 0;
  const uint32_t correlation = s.next_correlation.fetch_add(1);
  const bool driver = call == Call::driver_launch_kernel;
  const CUpti_ActivityKind kind = driver ? CUPTI_ACTIVITY_KIND_DRIVER : CUPTI_ACTIVITY_KIND_RUNTIME;
  const bool api_record = enabled(kind) || (driver && s.driver_launches.load());
  if (!api_record) return correlation;
  if (enabled(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) {
    for (int k = CUPTI_EXTERNAL_CORRELATION_KIND_UNKNOWN; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++k) {
      if (t_external[k].empty()) continue;
      CUpti_ActivityExternalCorrelation x{};
      x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      x.externalKind = static_cast<CUpti_ExternalCorrelationKind>(k);
      x.externalId = t_external[k].back();
      x.correlationId = correlation;
      append(x);
    }
  }
  CUpti_ActivityAPI a{};
  a.kind = kind;
  a.cbid = callback_id(call);
  a.start = a.end = now();
  a.processId = static_cast<uint32_t>(getpid());
  a.threadId = thread_id();
  a.correlationId = correlation;
  append(a);
  return correlation;
}

namespace {
// The fields every timed work record shares (kernel, memcpy, memset): its span on the stream, the
// context, the stream and the API call it came from.
template <class R>
void stamp(R& r, uint64_t start, uint64_t end, uint32_t stream_id, uint32_t correlation) {
  r.start = start;
  r.end = end;
  r.contextId = kContextId;
  r.streamId = stream_id;
  r.correlationId = correlation;
}
}  // namespace

std::function<void()> recorded(cudaStream_t stream, uint32_t correlation, const Work& work, std::function<void()> fn) {
  if (correlation == 0) return fn;
  const uint32_t sid = stream_id(stream);
  Work w = work;
  if (w.type == Work::Type::kernel) w.name = interned(w.name);
  return [fn = std::move(fn), w, sid, correlation] {
    const uint64_t start = now();
    fn();
    const uint64_t end = now();
    switch (w.type) {
      case Work::Type::kernel: {
        const CUpti_ActivityKind kind = enabled(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ? CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
                                        : enabled(CUPTI_ACTIVITY_KIND_KERNEL)          ? CUPTI_ACTIVITY_KIND_KERNEL
                                                                                       : CUPTI_ACTIVITY_KIND_INVALID;
        if (kind == CUPTI_ACTIVITY_KIND_INVALID) return;
        CUpti_ActivityKernel10 k{};
        k.kind = kind;
        stamp(k, start, end, sid, correlation);
        k.completed = end;
        k.deviceId = 0;
        k.gridX = static_cast<int32_t>(w.grid.x);
        k.gridY = static_cast<int32_t>(w.grid.y);
        k.gridZ = static_cast<int32_t>(w.grid.z);
        k.blockX = static_cast<int32_t>(w.block.x);
        k.blockY = static_cast<int32_t>(w.block.y);
        k.blockZ = static_cast<int32_t>(w.block.z);
        k.dynamicSharedMemory = w.dynamic_shared_bytes;
        k.gridId = correlation;
        k.name = w.name;
        k.queued = k.submitted = CUPTI_TIMESTAMP_UNKNOWN;
        append(k);
        return;
      }
      case Work::Type::memcpy: {
        if (!enabled(CUPTI_ACTIVITY_KIND_MEMCPY)) return;
        CUpti_ActivityMemcpy6 m{};
        m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
        m.copyKind = copy_kind(w.src, w.dst);
        m.srcKind = memory_kind(w.src);
        m.dstKind = memory_kind(w.dst);
        m.bytes = w.bytes;
        stamp(m, start, end, sid, correlation);
        m.copyCount = w.copy_count;
        append(m);
        return;
      }
      case Work::Type::memset: {
        if (!enabled(CUPTI_ACTIVITY_KIND_MEMSET)) return;
        CUpti_ActivityMemset4 m{};
        m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
        m.value = w.value;
        m.bytes = w.bytes;
        stamp(m, start, end, sid, correlation);
        m.memoryKind = memory_kind(w.dst);
        append(m);
        return;
      }
    }
  };
}

void memory(bool allocation, bool device, const void* address, uint64_t bytes, uint32_t correlation) {
  if (correlation == 0 || !enabled(CUPTI_ACTIVITY_KIND_MEMORY2)) return;
  CUpti_ActivityMemory4 m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
  m.memoryOperationType = allocation ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
                                     : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
  m.memoryKind = device ? CUPTI_ACTIVITY_MEMORY_KIND_DEVICE : CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  m.correlationId = correlation;
  m.address = reinterpret_cast<uint64_t>(address);
  m.bytes = bytes;
  m.timestamp = now();
  m.processId = static_cast<uint32_t>(getpid());
  m.contextId = kContextId;
  m.streamId = kLegacyStreamId;
  append(m);
}

}  // namespace oomb::emulated_cuda::activity

using oomb::emulated_cuda::activity::state;

namespace {
bool known_kind(CUpti_ActivityKind k) { return oomb::emulated_cuda::activity::record_bytes(k) > 0; }
}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_INVALID_KIND: *str = "CUPTI_ERROR_INVALID_KIND"; break;
    case CUPTI_ERROR_NOT_COMPATIBLE: *str = "CUPTI_ERROR_NOT_COMPATIBLE"; break;
    case CUPTI_ERROR_MAX_LIMIT_REACHED: *str = "CUPTI_ERROR_MAX_LIMIT_REACHED"; break;
    case CUPTI_ERROR_QUEUE_EMPTY: *str = "CUPTI_ERROR_QUEUE_EMPTY"; break;
    case CUPTI_ERROR_INVALID_OPERATION: *str = "CUPTI_ERROR_INVALID_OPERATION"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; return CUPTI_ERROR_INVALID_PARAMETER;
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc funcTimestamp) {
  if (!funcTimestamp) return CUPTI_ERROR_INVALID_PARAMETER;
  state().timestamp.store(funcTimestamp);
  return CUPTI_SUCCESS;
}

// "CUPTI_ERROR_INVALID_PARAMETER if either funcBufferRequested or funcBufferCompleted is NULL".
CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
                                                    CUpti_BuffersCallbackCompleteFunc funcBufferCompleted) {
  if (!funcBufferRequested || !funcBufferCompleted) return CUPTI_ERROR_INVALID_PARAMETER;
  auto& s = state();
  std::lock_guard lock(s.mu);
  s.request = funcBufferRequested;
  s.complete = funcBufferCompleted;
  return CUPTI_SUCCESS;
}

// Kinds the emulation records; any other kind is CUPTI_ERROR_NOT_COMPATIBLE ("if the activity kind
// cannot be enabled"), as a CUPTI without that support answers.
CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  if (!known_kind(kind)) return CUPTI_ERROR_NOT_COMPATIBLE;
  auto& s = state();
  if (!s.kind[kind].exchange(true)) ++s.enabled_kinds;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) return CUPTI_ERROR_INVALID_KIND;
  auto& s = state();
  if (s.kind[kind].exchange(false)) --s.enabled_kinds;
  return CUPTI_SUCCESS;
}

// Only the driver's kernel-launch calls are recorded by the emulation (cuBLASLt's launches).
CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz: break;
    default: return CUPTI_ERROR_INVALID_PARAMETER;
  }
  auto& s = state();
  const bool was = s.driver_launches.exchange(enable != 0);
  if (was != (enable != 0)) s.enabled_kinds += enable ? 1 : -1;
  return CUPTI_SUCCESS;
}

// "returns the activity records associated with all contexts/streams ... to the CUPTI client using
// the callback registered in cuptiActivityRegisterCallbacks"; the emulation writes a record only
// when it is complete, so a default and a forced flush deliver the same.
// "CUPTI_ERROR_INVALID_OPERATION if not preceded by a successful call to cuptiActivityRegisterCallbacks".
CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  if (!s.complete) return CUPTI_ERROR_INVALID_OPERATION;
  if (s.buffer && s.records > 0) oomb::emulated_cuda::activity::complete_locked(s);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t validBufferSizeBytes, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t at = 0;
  if (*record) {
    const auto* r = reinterpret_cast<const uint8_t*>(*record);
    if (r < buffer || r >= buffer + validBufferSizeBytes) return CUPTI_ERROR_INVALID_PARAMETER;
    const size_t bytes = oomb::emulated_cuda::activity::record_bytes((*record)->kind);
    if (bytes == 0) return CUPTI_ERROR_INVALID_KIND;
    at = static_cast<size_t>(r - buffer) + bytes;
  }
  if (at + sizeof(CUpti_Activity) > validBufferSizeBytes) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  auto* next = reinterpret_cast<CUpti_Activity*>(buffer + at);
  const size_t bytes = oomb::emulated_cuda::activity::record_bytes(next->kind);
  if (bytes == 0 || at + bytes > validBufferSizeBytes) return CUPTI_ERROR_INVALID_KIND;  // incomplete or invalid
  *record = next;
  return CUPTI_SUCCESS;
}

// One global queue: "the dropped count maintained for the queue is reset to zero when this function
// is called".
CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = state().dropped.exchange(0);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext, CUstream stream, uint8_t, uint32_t* streamId) {
  if (!streamId) return CUPTI_ERROR_INVALID_PARAMETER;
  *streamId = oomb::emulated_cuda::activity::stream_id(reinterpret_cast<cudaStream_t>(stream));
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  oomb::emulated_cuda::activity::t_external[kind].push_back(id);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t* lastId) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID || kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
    return CUPTI_ERROR_INVALID_PARAMETER;
  auto& stack = oomb::emulated_cuda::activity::t_external[kind];
  if (stack.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (lastId) *lastId = stack.back();
  stack.pop_back();
  return CUPTI_SUCCESS;
}

}  // extern "C"
