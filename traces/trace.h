#pragma once
// oomb.trace/1: one event schema for predicted (simulator) and measured (cpu executor, CUPTI)
// timelines, so that both can be written, read, exported to Perfetto and compared.
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/op.h"

namespace oomb::traces {

// collective: a collective of several ranks (an all-reduce), on the comm lane; its bytes are what
// this rank gives it. A collective runs inside a compute event's span on the CPU backend (the
// compute thread makes the call), so it is never counted as compute time.
enum class EventKind { compute, copy_h2d, copy_d2h, alloc, free, phase, collective };
enum class Detail { step, chunk, layer, op };  // coarsest .. finest

const char* to_string(EventKind k);
EventKind event_kind_from_string(const std::string& s, const std::string& where);
const char* to_string(Detail d);
Detail detail_from_string(const std::string& s, const std::string& where);

// The lane an event ran on (JSON key "stream"): the compute stream, the two copy directions, the
// collectives' communication lane, and the step boundaries (phase events). none: not given; such an
// event is drawn on its kind's natural lane (natural_lane), or on a track of its own ("other").
enum class Lane : uint8_t { none, compute, h2d, d2h, comm, step };
const char* to_string(Lane l);  // "" for none
Lane lane_from_string(const std::string& s, const std::string& where);  // "" -> none
Lane natural_lane(EventKind k);  // the kind's lane; none for allocations

// A phase event with this name spans one training step; summarize() describes the mean step over
// them (a trace without any is one step: first event to last).
inline constexpr const char* kStepPhase = "step";

struct Event {
  EventKind kind = EventKind::compute;
  std::string name;       // e.g. "attention_fwd", "kv_prefix", "stage1"
  Lane lane = Lane::none;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t bytes = 0;      // bytes moved (copies) or allocated (alloc/free)
  double flops = 0;       // compute events
  int stage = -1;         // 1 = forward fill, 2 = recompute + backward; -1 = n/a
  int64_t chunk = -1;     // -1 = n/a
  int64_t layer = -1;     // -1 = n/a (e.g. embedding, LM head)
  Op op = Op::none;       // the pass or collective it belongs to (core/op.h)
  int64_t duration_ns() const { return end_ns - start_ns; }
};

struct MemorySample {
  int64_t t_ns = 0;
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
  int64_t pool_pages_used = 0;
};

struct Summary {
  int64_t peak_device_bytes = 0;
  int64_t peak_host_bytes = 0;
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
  int64_t step_ns = 0;
  int64_t compute_busy_ns = 0;
  int64_t exposed_copy_ns = 0;
  int64_t pool_pages_peak = 0;
};

struct Metadata {
  std::string source;       // "simulator" | "cpu" | "cuda-cupti"
  std::string device;       // e.g. "h200" or "NVIDIA H200 (driver 570.x)"
  std::string plan_digest;  // digest of the plan JSON the run followed ("" = none)
  std::string git_commit;
  std::string time;         // ISO-8601 UTC
  std::string command;      // command line that produced it
  Detail detail = Detail::layer;
  int64_t dropped_records = 0;  // CUPTI records lost
  Json extra;               // free-form provenance (driver version, calibration, ...)
};

struct Trace {
  Metadata metadata;
  std::vector<Event> events;
  std::vector<MemorySample> memory;
  Summary summary;
};

// JSON (schema "oomb.trace/1"). Readers reject wrong schema, missing fields, end < start,
// unknown kinds and detail levels, naming the file and the event index.
Json to_json(const Trace& t);
Trace trace_from_json(const Json& j, const std::string& where);
Trace read_trace(const std::string& path);
void write_trace(const Trace& t, const std::string& path);

// Chrome trace-event format (opens in Perfetto and chrome://tracing): one track per stream,
// counters for device/host memory.
Json to_chrome_trace(const Trace& t);
// The same document streamed to the file record by record (byte for byte to_chrome_trace(t).dump(),
// without the whole tree in memory); atomic like write_trace.
void write_chrome_trace(const Trace& t, const std::string& path);

// Compares a predicted and a measured trace: summary terms, and per-(stage, op) time totals
// aligned by key. error = (measured - predicted) / predicted (0 when both are 0).
struct CompareRow {
  std::string name;      // "peak_device_bytes", "h2d_bytes", "time:stage2/layer_bwd", ...
  double predicted = 0;
  double measured = 0;
  double error = 0;
};
struct Comparison {
  std::vector<CompareRow> rows;
  const CompareRow* find(const std::string& name) const;
};
Comparison compare(const Trace& predicted, const Trace& measured);

// Recomputes summary.step_ns / compute_busy_ns / exposed_copy_ns / h2d_bytes / d2h_bytes from the
// events (peaks from memory samples); used by producers so that summaries are never hand-made.
// They describe one step: the mean over the trace's kStepPhase events (each step's work clipped to
// its interval; work outside every step, e.g. checks run between steps, is left out), or the whole
// trace as one step when it has none. compute_busy_ns = the union of compute intervals;
// exposed_copy_ns = the union of copy intervals (both directions) not covered by compute.
Summary summarize(const Trace& t);

}  // namespace oomb::traces
