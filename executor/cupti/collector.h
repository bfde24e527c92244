#pragma once
// RAII CUPTI activity collection (CUDA builds only; this header includes no CUDA or CUPTI header).
//
// While a CuptiCollector lives, CUPTI records kernels (CONCURRENT_KERNEL: does not serialise
// kernels), memcpys, memsets, memory allocations and frees (MEMORY2), and external correlations
// (which CUPTI emits only in front of API records: the RUNTIME ones and the driver's kernel-launch
// calls, which cuBLASLt uses, are enabled too and discarded on arrival; the whole DRIVER kind only
// where CUPTI cannot enable single driver calls, driver_records()).
// CUPTI hands full buffers to a completion callback, which converts them into decode.h Records
// without taking any lock of the caller (only the collector's own mutex, for the append, never
// held while CUPTI is called) and adds CUPTI's dropped-record count. CUPTI's timestamps are taken
// from the steady clock (cuptiActivityRegisterTimestampCallback) so records line up with the
// executor's TraceRecorder.
//
// Tags: push_tag(stage, chunk, layer, op) pushes the packed Tag as a CUSTOM0 external correlation
// id on the calling thread; every CUDA API call until pop_tag() is correlated with it, and so are
// the kernels and copies it launches. One collector at a time per process (CUPTI's callbacks are
// global); a second one throws.
#include <atomic>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "executor/cupti/decode.h"
#include "executor/runtime/op_tagger.h"
#include "step/cuda_layout.h"
#include "traces/trace.h"

namespace oomb::executor::cupti {

struct CollectorOptions {
  int64_t buffer_bytes = step::cuda_scratch::kCuptiBufferBytes;  // per CUPTI activity buffer
  // Buffers allocated with the collector and handed to CUPTI over and over (the table's
  // cupti_activity_buffers row: buffers x buffer_bytes). A request past them gets a buffer of its
  // own, freed when CUPTI hands it back, and counted (buffers_beyond_pool()).
  int64_t pool_buffers = step::cuda_scratch::kCuptiPoolBuffers;
  bool memory = true;  // MEMORY2 records (allocations and frees)
  // Decode as the run goes (review 3, finding 12): each buffer is decoded when CUPTI completes it
  // and handed back, and only the work inside the windows given to close_window() is kept, so the
  // collector holds the steps' events, not every record of the run. Needs steady_clock() (the
  // windows are on the steady clock); without it every record is kept (windowed() is false).
  bool windowed = false;
};

class CuptiCollector {
 public:
  explicit CuptiCollector(CollectorOptions options = {});
  ~CuptiCollector();
  CuptiCollector(const CuptiCollector&) = delete;
  CuptiCollector& operator=(const CuptiCollector&) = delete;

  // The lane of a cudaStream_t in the trace (compute, h2d, d2h).
  void name_stream(void* cuda_stream, traces::Lane lane);

  void push_tag(int stage, int64_t chunk, int64_t layer, Op op);
  void pop_tag();

  void flush();  // forces CUPTI to hand over every buffer (completed records only)
  // Whether windows apply (CollectorOptions::windowed and CUPTI on the steady clock).
  bool windowed() const { return windowed_; }
  // After the device finished the work issued so far (a synchronised step): flushes CUPTI, keeps
  // the work inside [begin_ns, end_ns] (steady clock; windows in order), and discards everything
  // else the decoder held for the work before now (records outside every window, correlations).
  // Only on a windowed() collector.
  void close_window(int64_t begin_ns, int64_t end_ns);
  // The same without a window (a warm-up step: its work is discarded).
  void settle();
  // Flushes and decodes everything collected so far (once: the decoder's state goes into the trace).
  traces::Trace trace(traces::Metadata metadata, traces::Detail detail = traces::Detail::op, int64_t origin_ns = -1,
                      DecodeStats* stats = nullptr);
  // The same with the decode options detail, origin and base bytes; the streams are the
  // collector's (name_stream, push_tag), whatever `options` holds. Windows come through
  // close_window(): `options.windows` must be empty.
  traces::Trace trace(traces::Metadata metadata, DecodeOptions options, DecodeStats* stats = nullptr);
  // What the decoder holds now (decode.h Decoder::held_records).
  int64_t held_records() const;
  // Whether CUPTI accepted the steady-clock timestamp callback: records are then on
  // std::chrono::steady_clock (the executor's clock: origins and windows from steady_now_ns() apply).
  bool steady_clock() const { return steady_clock_; }
  // Records CUPTI dropped (its buffers full), summed over every queue a buffer came from (each
  // buffer's context and stream).
  int64_t dropped() const { return dropped_.load(); }
  // Which driver API records are enabled: "launches" (the kernel-launch calls only) or "all".
  const std::string& driver_records() const { return driver_records_; }

  // CUPTI callbacks (public for the C trampolines in collector.cpp). context: the buffer's CUcontext
  // (null for the global queue), stream_id: its stream.
  void on_buffer(void* context, uint32_t stream_id, uint8_t* buffer, size_t valid_bytes);
  int64_t buffer_bytes() const { return options_.buffer_bytes; }
  uint8_t* take_buffer();              // a pool buffer, else one of its own (null: out of memory)
  void give_back(uint8_t* buffer);     // to the pool, or freed
  // The pool's bytes (allocated with the collector, held until it ends).
  int64_t pool_bytes() const { return static_cast<int64_t>(pool_.size()) * options_.buffer_bytes; }
  // Buffers CUPTI asked for while the pool was empty (each freed when handed back), and the most
  // held at once.
  int64_t buffers_beyond_pool() const { return beyond_pool_.load(); }
  int64_t buffers_held_high_water() const { return held_high_water_.load(); }

 private:
  void disable();

  CollectorOptions options_;
  std::vector<uint8_t*> pool_;  // every pool buffer (owned)
  std::mutex pool_mu_;          // free_
  std::vector<uint8_t*> free_;  // pool buffers not with CUPTI
  std::atomic<int64_t> beyond_pool_{0}, held_{0}, held_high_water_{0};
  mutable std::mutex mu_;  // decoder_, decoded_, streams_
  std::unique_ptr<Decoder> decoder_;
  bool decoded_ = false;  // trace() took the decoder's state
  bool windowed_ = false;
  std::map<uint32_t, traces::Lane> streams_;
  std::atomic<int64_t> dropped_{0};
  bool steady_clock_ = false;
  std::string driver_records_;
};

// Pushes a tag for the lifetime of the scope.
class ScopedTag {
 public:
  ScopedTag(CuptiCollector* c, int stage, int64_t chunk, int64_t layer, Op op) : c_(c) {
    if (c_) c_->push_tag(stage, chunk, layer, op);
  }
  ~ScopedTag() {
    if (c_) c_->pop_tag();
  }
  ScopedTag(const ScopedTag&) = delete;
  ScopedTag& operator=(const ScopedTag&) = delete;

 private:
  CuptiCollector* c_;
};

// The driver's tagging hook (executor/runtime/op_tagger.h, EngineOptions::tagger) on a collector:
// each push is a push_tag(stage, chunk, layer, op) with op = the pass (the trace's Event::op; the
// op's name inside the pass is not kept: kernels keep their own names).
// A failing pop is remembered (error()), never thrown (pops run in destructors).
class CuptiTagger final : public OpTagger {
 public:
  explicit CuptiTagger(CuptiCollector& c) : c_(c) {}
  void push(int stage, int64_t chunk, int64_t layer, Op op, const char*) override {
    c_.push_tag(stage, chunk, layer, op);
  }
  void pop() noexcept override {
    try {
      c_.pop_tag();
    } catch (const std::exception& e) {
      if (error_.empty()) error_ = e.what();
    }
  }
  const std::string& error() const { return error_; }  // the first failed pop ("" = none)

 private:
  CuptiCollector& c_;
  std::string error_;
};

}  // namespace oomb::executor::cupti
