#include "executor/cupti/collector.h"

#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "executor/cuda/cuda_check.h"

namespace oomb::executor::cuda {
// CUPTI statuses through the one status macro.
inline bool status_ok(CUptiResult s) { return s == CUPTI_SUCCESS; }
inline const char* status_name(CUptiResult s) {
  const char* str = nullptr;
  return cuptiGetResultString(s, &str) == CUPTI_SUCCESS && str ? str : "CUPTI_ERROR";
}
inline const char* status_message(CUptiResult) { return "CUPTI"; }
}  // namespace oomb::executor::cuda

namespace oomb::executor::cupti {

namespace {

std::atomic<CuptiCollector*> g_active{nullptr};
constexpr size_t kBufferAlign = 8;

uint64_t CUPTIAPI steady_timestamp() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  CuptiCollector* c = g_active.load();
  *buffer = c ? c->take_buffer() : nullptr;  // none: CUPTI drops the records and counts them
  *size = *buffer ? static_cast<size_t>(c->buffer_bytes()) : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  CuptiCollector* c = g_active.load();
  if (!c) {  // after the collector ended (CUPTI's last flush): nothing to decode into
    std::free(buffer);
    return;
  }
  c->on_buffer(ctx, stream_id, buffer, valid);
  c->give_back(buffer);
}

CopyKind copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return CopyKind::h2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return CopyKind::d2h;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return CopyKind::d2d;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return CopyKind::h2h;
    default: return CopyKind::other;
  }
}

// RUNTIME: CUPTI emits an external-correlation record only in front of an API activity record
// ("activity API record", cupti_activity.h, cuptiActivityPushExternalCorrelationId), so without
// API records no work would carry its tag. Our calls go through the runtime; cuBLASLt launches its
// kernels through the driver, so the driver's launch calls are recorded too (kDriverLaunches, one
// by one where CUPTI can: the DRIVER kind would add a record for every driver call the libraries
// make). API records are dropped in on_buffer (only the correlation counts).
const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                     CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_MEMORY2};
#if CUPTI_API_VERSION >= 130001  // cuptiActivityEnableDriverApi (checked against CUDA 13.0's CUPTI)
const CUpti_CallbackId kDriverLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz};
#endif

}  // namespace

CuptiCollector::CuptiCollector(CollectorOptions options) : options_(options) {
  if (options_.buffer_bytes < 1024 || options_.buffer_bytes % static_cast<int64_t>(kBufferAlign) != 0 ||
      options_.pool_buffers < 0)
    throw Error("cupti", "buffer_bytes", std::to_string(options_.buffer_bytes) + " x " +
                                             std::to_string(options_.pool_buffers) + " buffers",
                "buffers of at least 1 KiB, a multiple of 8 bytes, and a pool of 0 or more");
  CuptiCollector* expected = nullptr;
  if (!g_active.compare_exchange_strong(expected, this))
    throw Error("cupti", "", "a CUPTI collector is already active in this process");
  try {
    for (int64_t i = 0; i < options_.pool_buffers; ++i) {
      auto* b = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, static_cast<size_t>(options_.buffer_bytes)));
      if (!b) throw std::bad_alloc();
      pool_.push_back(b);
    }
    free_ = pool_;
    // Before any kind is enabled, so that every record uses the steady clock.
    steady_clock_ = cuptiActivityRegisterTimestampCallback(steady_timestamp) == CUPTI_SUCCESS;
    if (!steady_clock_) std::fprintf(stderr, "oomb: CUPTI timestamps are not on the steady clock (callback refused)\n");
    windowed_ = options_.windowed && steady_clock_;
    DecodeOptions d;
    d.windowed = windowed_;
    decoder_ = std::make_unique<Decoder>(std::move(d));
    OOMB_CUDA_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    for (CUpti_ActivityKind k : kKinds)
      if (k != CUPTI_ACTIVITY_KIND_MEMORY2 || options_.memory) OOMB_CUDA_CHECK(cuptiActivityEnable(k));
    driver_records_ = "all";
#if CUPTI_API_VERSION >= 130001
    bool launches_only = true;
    for (CUpti_CallbackId id : kDriverLaunches) launches_only &= cuptiActivityEnableDriverApi(id, 1) == CUPTI_SUCCESS;
    if (launches_only) driver_records_ = "launches";
#endif
    if (driver_records_ == "all") OOMB_CUDA_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
  } catch (...) {
    disable();
    g_active.store(nullptr);
    for (uint8_t* b : pool_) std::free(b);
    throw;
  }
}

uint8_t* CuptiCollector::take_buffer() {
  uint8_t* b = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    }
  }
  if (!b) {
    b = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, static_cast<size_t>(options_.buffer_bytes)));
    if (!b) return nullptr;
    ++beyond_pool_;
  }
  const int64_t held = ++held_;
  for (int64_t hw = held_high_water_.load(); held > hw && !held_high_water_.compare_exchange_weak(hw, held);) {
  }
  return b;
}

void CuptiCollector::give_back(uint8_t* buffer) {
  --held_;
  if (std::find(pool_.begin(), pool_.end(), buffer) != pool_.end()) {
    std::lock_guard<std::mutex> lock(pool_mu_);
    free_.push_back(buffer);
  } else {
    std::free(buffer);
  }
}

// Everything the constructor may have enabled; errors ignored (CUPTI may refuse at exit).
void CuptiCollector::disable() {
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_DRIVER);
#if CUPTI_API_VERSION >= 130001
  for (CUpti_CallbackId id : kDriverLaunches) cuptiActivityEnableDriverApi(id, 0);
#endif
}

CuptiCollector::~CuptiCollector() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  disable();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  g_active.store(nullptr);
  // A buffer CUPTI still holds is freed by buffer_completed (std::free) once the collector is gone;
  // the pool's are ours (CUPTI holds none after the forced flushes).
  for (uint8_t* b : pool_) std::free(b);
}

namespace {
// The fields every timed CUPTI activity record shares (kernel, memcpy, memset).
template <class Activity>
void copy_timing(Record& r, const Activity* a) {
  r.start_ns = static_cast<int64_t>(a->start);
  r.end_ns = static_cast<int64_t>(a->end);
  r.stream_id = a->streamId;
  r.correlation_id = a->correlationId;
}
}  // namespace

void CuptiCollector::on_buffer(void* context, uint32_t stream_id, uint8_t* buffer, size_t valid) {
  std::vector<Record> out;
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    Record r;
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        r.kind = RecordKind::kernel;
        copy_timing(r, k);
        r.name = k->name ? k->name : "";
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        r.kind = RecordKind::memcpy;
        r.copy = copy_kind(m->copyKind);
        r.bytes = static_cast<int64_t>(m->bytes);
        copy_timing(r, m);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        r.kind = RecordKind::memset;
        r.bytes = static_cast<int64_t>(m->bytes);
        copy_timing(r, m);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(rec);
        r.kind = RecordKind::memory;
        r.memory_op = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION ? MemoryOp::allocation
                      : m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE  ? MemoryOp::release
                                                                                                : MemoryOp::other;
        r.memory_kind = m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE   ? MemoryKind::device
                        : m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED ? MemoryKind::pinned
                                                                             : MemoryKind::other;
        r.address = m->address;
        r.bytes = static_cast<int64_t>(m->bytes);
        r.start_ns = static_cast<int64_t>(m->timestamp);
        r.stream_id = m->streamId;
        r.correlation_id = m->correlationId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: continue;  // enabled for the correlations only
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) continue;
        r.kind = RecordKind::external_correlation;
        r.correlation_id = x->correlationId;
        r.external_id = x->externalId;
        break;
      }
      default: r.kind = RecordKind::other; break;
    }
    out.push_back(std::move(r));
  }
  // The drops of this buffer's own queue (its context and stream; null: the global queue), not
  // only the global queue's: per-context buffers are where kernels and copies go.
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(static_cast<CUcontext>(context), stream_id, &dropped) == CUPTI_SUCCESS &&
      dropped > 0)
    dropped_ += static_cast<int64_t>(dropped);
  std::lock_guard<std::mutex> lock(mu_);
  if (!decoded_) decoder_->consume(out);
}

void CuptiCollector::name_stream(void* cuda_stream, traces::Lane lane) {
  uint32_t id = 0;
  OOMB_CUDA_CHECK(cuptiGetStreamIdEx(nullptr, static_cast<CUstream>(cuda_stream), 0, &id));
  std::lock_guard<std::mutex> lock(mu_);
  streams_[id] = lane;
}

void CuptiCollector::push_tag(int stage, int64_t chunk, int64_t layer, Op op) {
  const uint64_t id = pack_tag({stage, chunk, layer, op == Op::none ? -1 : static_cast<int>(op)});
  OOMB_CUDA_CHECK(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id));
}

void CuptiCollector::pop_tag() {
  uint64_t last = 0;
  OOMB_CUDA_CHECK(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last));
}

void CuptiCollector::flush() { OOMB_CUDA_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)); }

void CuptiCollector::close_window(int64_t begin_ns, int64_t end_ns) {
  if (!windowed_)
    throw Error("cupti", "close_window", "this collector keeps every record",
                "CollectorOptions::windowed, with CUPTI on the steady clock (steady_clock())");
  flush();
  const int64_t now = steady_timestamp();
  std::lock_guard<std::mutex> lock(mu_);
  decoder_->add_window(begin_ns, end_ns);
  decoder_->settle(now);
}

void CuptiCollector::settle() {
  if (!windowed_) return;  // nothing is discarded: every record goes into the trace
  flush();
  const int64_t now = steady_timestamp();
  std::lock_guard<std::mutex> lock(mu_);
  decoder_->settle(now);
}

int64_t CuptiCollector::held_records() const {
  std::lock_guard<std::mutex> lock(mu_);
  return decoded_ ? 0 : decoder_->held_records();
}

traces::Trace CuptiCollector::trace(traces::Metadata metadata, traces::Detail detail, int64_t origin_ns,
                                    DecodeStats* stats) {
  DecodeOptions o;
  o.detail = detail;
  o.origin_ns = origin_ns;
  return trace(std::move(metadata), std::move(o), stats);
}

traces::Trace CuptiCollector::trace(traces::Metadata metadata, DecodeOptions o, DecodeStats* stats) {
  if (!o.windows.empty())
    throw Error("cupti", "windows", "are given to the collector as the run goes",
                "CollectorOptions::windowed and close_window() after each step");
  flush();
  std::lock_guard<std::mutex> lock(mu_);
  if (decoded_) throw Error("cupti", "trace", "was already taken from this collector", "one trace() per collector");
  decoded_ = true;
  DecodeOptions& d = decoder_->options();
  d.streams = streams_;
  d.detail = o.detail;
  d.origin_ns = o.origin_ns;
  d.base_device_bytes = o.base_device_bytes;
  d.base_host_bytes = o.base_host_bytes;
  return decoder_->finish(dropped(), std::move(metadata), stats);
}

}  // namespace oomb::executor::cupti
