#pragma once
// CUPTI activity records -> oomb.trace/1, in plain C++ with no CUPTI header, so that the decoding
// is unit-tested on machines without a GPU. The collector (collector.h, CUDA builds only) copies
// every CUPTI record it receives into a Record below; everything after that happens here.
//
// Records are tagged through CUPTI's external correlation: the driver pushes a packed
// (stage, chunk, layer, op) Tag before it launches work, CUPTI emits one external-correlation
// record per API call made under it (correlation id -> tag), and decode() joins kernels, copies and
// memsets to their tag by correlation id, whatever order the records arrived in.
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "traces/trace.h"

namespace oomb::executor::cupti {

// (stage, chunk, layer, op); -1 = n/a. op: an oomb::Op as its number (-1 for Op::none).
struct Tag {
  int stage = -1;
  int64_t chunk = -1;
  int64_t layer = -1;
  int op = -1;
  bool operator==(const Tag&) const = default;
};

// 64-bit layout, most significant first: stage 4 bits | op 12 | layer 16 | chunk 32. A field of
// all ones means -1. Out-of-range values (stage > 14, op > 4094, layer > 65534, chunk > 2^32 - 2)
// throw oomb::Error: a tag that cannot be represented must not silently alias another.
uint64_t pack_tag(const Tag& t);
Tag unpack_tag(uint64_t packed);

enum class RecordKind : uint8_t { kernel, memcpy, memset, memory, external_correlation, other };
enum class CopyKind : uint8_t { h2d, d2h, d2d, h2h, other };
enum class MemoryOp : uint8_t { allocation, release, other };
enum class MemoryKind : uint8_t { device, pinned, other };

// One activity record, in CUPTI's clock (ns; the collector registers the steady clock as CUPTI's
// timestamp source so that records line up with the executor's own TraceRecorder).
struct Record {
  RecordKind kind = RecordKind::other;
  uint32_t correlation_id = 0;
  uint32_t stream_id = 0;
  int64_t start_ns = 0;  // memory records: the timestamp of the operation
  int64_t end_ns = 0;
  int64_t bytes = 0;     // memcpy, memset, memory
  CopyKind copy = CopyKind::other;
  MemoryOp memory_op = MemoryOp::other;
  MemoryKind memory_kind = MemoryKind::other;
  uint64_t address = 0;      // memory
  uint64_t external_id = 0;  // external_correlation: the packed Tag
  std::string name;          // kernel: its (possibly mangled) function name
};

struct DecodeOptions {
  std::map<uint32_t, traces::Lane> streams;  // CUPTI stream id -> its lane (compute, h2d, d2h)
  int64_t origin_ns = -1;                   // event times are relative to this; -1 = earliest record
  traces::Detail detail = traces::Detail::op;
  // Bytes already allocated when collection started (memory samples start from these).
  int64_t base_device_bytes = 0, base_host_bytes = 0;
  // When non-empty: only work (kernels, copies, memsets) starting inside one of these [begin, end]
  // intervals (CUPTI clock, ns) is decoded (e.g. the training steps, leaving out set-up and the work
  // of anything run between steps); the rest is counted in DecodeStats::outside. Memory records
  // before the first interval are folded into the base bytes; later ones become samples.
  std::vector<std::pair<int64_t, int64_t>> windows;
  // Windows come later, through Decoder::add_window (a collector decoding while the run goes on).
  bool windowed = false;
};

struct DecodeStats {
  int64_t records = 0;
  int64_t kernels = 0, memcpys = 0, memsets = 0, memory = 0, correlations = 0;
  int64_t collectives = 0;  // of the kernels, NCCL's (collective events on "comm")
  int64_t ignored = 0;   // kinds this decoder does not use
  int64_t invalid = 0;   // no or inverted timestamps (incomplete records)
  int64_t untagged = 0;  // work records with no external correlation (op "untagged")
  int64_t outside = 0;   // work records outside DecodeOptions::windows
  int64_t dropped = 0;   // records CUPTI reported as dropped (buffers full)
};

// Kernel names for the trace: demangled, without parameter list, template arguments or namespace
// ("void oomb::cuda::attn_fwd<128>(Args)" -> "attn_fwd").
std::string short_kernel_name(const std::string& name);
// The collective of an NCCL kernel's short name, as a trace event name ("ncclDevKernel_AllReduce_
// Sum_bf16_RING_LL" -> "nccl_allreduce"; "ncclKernel_..." of older NCCL likewise); "" for others.
std::string nccl_collective(const std::string& short_name);

// Incremental decoding: the same trace as decode() from records handed over in pieces, keeping
// only what the trace needs, so that a collector can decode each CUPTI buffer as it completes and
// free it (review 3, finding 12) instead of holding every record of the run:
//   - work records (kernels, copies, memsets) are kept compact (no name string: kernel names are
//     interned) and only once they fall inside a window; those outside every window are counted
//     and dropped as soon as no later window can hold them;
//   - external correlations are kept until settle(): work already tagged carries its tag, and the
//     rest is untagged from then on;
//   - memory records are kept (few: allocations and frees) and folded at finish().
// Windows: DecodeOptions::windows is a fixed list (decode()); with DecodeOptions::windowed, more
// come through add_window() in order of their begin, and a record past the last window's end
// waits until a window takes it or settle() says none will.
class Decoder {
 public:
  explicit Decoder(DecodeOptions options);
  void consume(const Record& r);
  void consume(const std::vector<Record>& records) {
    for (const Record& r : records) consume(r);
  }
  // A window of the run (begin <= end, begins in increasing order; windowed decoders only).
  void add_window(int64_t begin_ns, int64_t end_ns);
  // Every record of the work issued before this call has been consumed (the device synchronised and
  // CUPTI flushed), and no window added later begins before now_ns: work waiting for a correlation
  // is untagged from here on, and the correlations seen so far are released.
  void settle(int64_t now_ns);
  // The trace; streams, detail and origin are those of options() at this call.
  traces::Trace finish(int64_t dropped, traces::Metadata metadata, DecodeStats* stats = nullptr);
  DecodeOptions& options() { return o_; }
  // What the decoder holds: work records kept or waiting, correlations, memory records.
  int64_t held_records() const;

 private:
  struct Work {  // a kernel, copy or memset, compactly
    int64_t start_ns, end_ns, bytes;
    uint64_t seq;  // arrival order: events with equal start and stream keep it
    uint64_t tag;
    uint32_t correlation_id, stream_id;
    int32_t name;  // kernels: index into names_; -1 otherwise
    RecordKind kind;
    CopyKind copy;
    bool tagged;    // tag holds its (stage, chunk, layer, op)
    bool untagged;  // settled without a correlation: "untagged" in the trace
  };
  struct Memory {
    int64_t t_ns, bytes;
    uint64_t address;
    MemoryOp op;
    MemoryKind kind;
  };
  void place(Work w);  // inside a window (kept), outside (counted), or waiting
  // Tags w from the correlations seen; final_tag: none will come for it (untagged if absent).
  void resolve(Work& w, bool final_tag);
  bool inside(int64_t t) const;
  int64_t horizon() const;  // no window added later begins before this

  DecodeOptions o_;
  bool windowed_;
  int64_t settled_ns_;
  DecodeStats st_;
  uint64_t seq_ = 0;
  std::unordered_map<uint32_t, uint64_t> tag_of_;
  std::vector<Work> kept_, waiting_;  // waiting: past the last window, not yet placed
  size_t settled_kept_ = 0;           // kept_[0, this) was kept before the last settle: its tags are final
  std::vector<Memory> memory_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, int32_t> name_index_;  // mangled name -> names_ index
};

// Builds the trace: kernels and memsets -> compute events, except NCCL's kernels (nccl_collective):
// collective events on stream "comm", out of the compute time and the passes' sums (a collective's
// kernel spins until the last rank arrives: its span is the rank's wait plus the transfer); H2D / D2H copies -> copy events with
// their bytes, except on the stream named "compute" (the backend's staged uploads, op metadata and
// result read-backs: compute-stream work, "memcpy_h2d" / "memcpy_d2h" compute events, so that copy
// events and the summary's h2d / d2h bytes are the copy streams' traffic); D2D / H2H copies are
// compute work ("memcpy_d2d"). Work with no tag gets op "untagged" (stage, chunk, layer -1).
// Memory records -> memory samples
// (device and pinned host bytes in use, from the base bytes on; no events, so that allocations
// made before the step do not stretch its span). Events are
// sorted by start; at detail coarser than op, consecutive events of a stream with the same key
// (kind, stage, chunk, layer, op) are merged (name = op), as TraceRecorder does. Streams not in
// options.streams fall back to the compute lane (kernels, memsets, D2D) or the copy's direction.
// metadata.source becomes "cuda-cupti", metadata.dropped_records = dropped; the summary is
// recomputed from the events (traces::summarize).
traces::Trace decode(const std::vector<Record>& records, const DecodeOptions& options, int64_t dropped,
                     traces::Metadata metadata, DecodeStats* stats = nullptr);

}  // namespace oomb::executor::cupti
