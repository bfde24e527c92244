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
#include <utility>
#include <vector>

#include "traces/trace.h"

namespace oomb::executor::cupti {

// (stage, chunk, layer, op); -1 = n/a. op indexes DecodeOptions::ops (the collector interns names).
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
  std::map<uint32_t, std::string> streams;  // CUPTI stream id -> "compute" | "h2d" | "d2h"
  std::vector<std::string> ops;             // Tag::op -> op name ("layer_fwd", ...)
  int64_t origin_ns = -1;                   // event times are relative to this; -1 = earliest record
  traces::Detail detail = traces::Detail::op;
  // Bytes already allocated when collection started (memory samples start from these).
  int64_t base_device_bytes = 0, base_host_bytes = 0;
  // When non-empty: only work (kernels, copies, memsets) starting inside one of these [begin, end]
  // intervals (CUPTI clock, ns) is decoded (e.g. the training steps, leaving out set-up and the work
  // of anything run between steps); the rest is counted in DecodeStats::outside. Memory records
  // before the first interval are folded into the base bytes; later ones become samples.
  std::vector<std::pair<int64_t, int64_t>> windows;
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
// options.streams fall back to "compute" (kernels, memsets, D2D) or the copy's direction.
// metadata.source becomes "cuda-cupti", metadata.dropped_records = dropped; the summary is
// recomputed from the events (traces::summarize).
traces::Trace decode(const std::vector<Record>& records, const DecodeOptions& options, int64_t dropped,
                     traces::Metadata metadata, DecodeStats* stats = nullptr);

}  // namespace oomb::executor::cupti
