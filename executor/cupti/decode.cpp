#include "executor/cupti/decode.h"

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <memory>
#include <unordered_map>

#include "core/error.h"

namespace oomb::executor::cupti {

namespace {

constexpr int kStageBits = 4, kOpBits = 12, kLayerBits = 16, kChunkBits = 32;
constexpr int kChunkShift = 0, kLayerShift = kChunkBits, kOpShift = kLayerShift + kLayerBits,
              kStageShift = kOpShift + kOpBits;
static_assert(kStageShift + kStageBits == 64);

uint64_t field(int64_t v, int bits, const char* what) {
  const uint64_t ones = (uint64_t{1} << bits) - 1;
  if (v == -1) return ones;
  if (v < 0 || static_cast<uint64_t>(v) >= ones)
    throw Error("cupti tag", what, "value " + std::to_string(v) + " does not fit in " + std::to_string(bits) + " bits",
                "0 .. " + std::to_string(ones - 1) + " or -1");
  return static_cast<uint64_t>(v);
}

int64_t unfield(uint64_t packed, int shift, int bits) {
  const uint64_t ones = (uint64_t{1} << bits) - 1;
  const uint64_t v = (packed >> shift) & ones;
  return v == ones ? -1 : static_cast<int64_t>(v);
}

}  // namespace

uint64_t pack_tag(const Tag& t) {
  return field(t.stage, kStageBits, "stage") << kStageShift | field(t.op, kOpBits, "op") << kOpShift |
         field(t.layer, kLayerBits, "layer") << kLayerShift | field(t.chunk, kChunkBits, "chunk") << kChunkShift;
}

Tag unpack_tag(uint64_t packed) {
  Tag t;
  t.stage = static_cast<int>(unfield(packed, kStageShift, kStageBits));
  t.op = static_cast<int>(unfield(packed, kOpShift, kOpBits));
  t.layer = unfield(packed, kLayerShift, kLayerBits);
  t.chunk = unfield(packed, kChunkShift, kChunkBits);
  return t;
}

std::string nccl_collective(const std::string& short_name) {
  std::string rest;
  for (const char* prefix : {"ncclDevKernel_", "ncclKernel_"})
    if (const size_t at = short_name.find(prefix); rest.empty() && at != std::string::npos)
      rest = short_name.substr(at + std::strlen(prefix));
  if (rest.empty()) return "";
  std::string out = "nccl_";
  for (char c : rest.substr(0, rest.find('_'))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string short_kernel_name(const std::string& name) {
  std::string s = name;
  int status = -1;
  std::unique_ptr<char, void (*)(void*)> dem(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), std::free);
  if (status == 0 && dem) s = dem.get();
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  // Drop the parameter list: the trailing (...) group.
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      else if (s[i] == '(' && --depth == 0) {
        s.resize(i);
        break;
      }
    }
  }
  // Drop template arguments (outermost <...> blocks).
  std::string out;
  int depth = 0;
  for (char c : s) {
    if (c == '<') ++depth;
    else if (c == '>') depth = std::max(0, depth - 1);
    else if (depth == 0) out += c;
  }
  // Return type and namespaces: keep what follows the last space and the last "::".
  if (auto sp = out.rfind(' '); sp != std::string::npos) out = out.substr(sp + 1);
  if (auto ns = out.rfind("::"); ns != std::string::npos) out = out.substr(ns + 2);
  return out.empty() ? name : out;
}

namespace {

using traces::Detail;
using traces::Event;
using traces::EventKind;

bool same_key(const Event& a, const Event& b, Detail d) {
  if (a.kind != b.kind || a.stream != b.stream || a.stage != b.stage) return false;
  switch (d) {
    case Detail::op: return false;
    case Detail::layer: return a.chunk == b.chunk && a.layer == b.layer && a.op == b.op;
    case Detail::chunk: return a.chunk == b.chunk;
    case Detail::step: return true;
  }
  return false;
}

// Consecutive events of a stream sharing the detail's key become one (events sorted by start).
std::vector<Event> merge(std::vector<Event> ev, Detail d) {
  if (d == Detail::op) return ev;
  std::vector<Event> out;
  std::unordered_map<std::string, size_t> last;  // stream -> index in out
  for (auto& e : ev) {
    if (d == Detail::chunk || d == Detail::step) e.layer = -1;
    if (d == Detail::step) e.chunk = -1;
    auto it = last.find(e.stream);
    if (it != last.end() && same_key(out[it->second], e, d)) {
      Event& m = out[it->second];
      m.end_ns = std::max(m.end_ns, e.end_ns);
      m.bytes += e.bytes;
      m.flops += e.flops;
      if (m.op != e.op) m.op = e.stage == 1 ? "stage1" : e.stage == 2 ? "stage2" : "";
      m.name = m.op.empty() ? m.name : m.op;
      continue;
    }
    if (!e.op.empty()) e.name = e.op;
    out.push_back(std::move(e));
    last[out.back().stream] = out.size() - 1;
  }
  return out;
}

}  // namespace

traces::Trace decode(const std::vector<Record>& records, const DecodeOptions& o, int64_t dropped,
                     traces::Metadata metadata, DecodeStats* stats_out) {
  DecodeStats st;
  st.records = static_cast<int64_t>(records.size());
  st.dropped = dropped;

  // Pass 1: correlation id -> packed tag (external-correlation records may come after their work).
  std::unordered_map<uint32_t, uint64_t> tag_of;
  for (const Record& r : records)
    if (r.kind == RecordKind::external_correlation) {
      tag_of[r.correlation_id] = r.external_id;
      ++st.correlations;
    }

  auto stream_name = [&](uint32_t id, const char* fallback) -> std::string {
    auto it = o.streams.find(id);
    return it != o.streams.end() ? it->second : std::string(fallback);
  };
  auto valid = [&](const Record& r) { return r.start_ns > 0 && r.end_ns >= r.start_ns; };
  auto is_work = [](const Record& r) {
    return r.kind == RecordKind::kernel || r.kind == RecordKind::memcpy || r.kind == RecordKind::memset;
  };
  auto inside = [&](int64_t t) {
    if (o.windows.empty()) return true;
    for (const auto& [b, e] : o.windows)
      if (t >= b && t <= e) return true;
    return false;
  };
  // Memory records before this belong to the base (no windows: none does).
  int64_t first_window = std::numeric_limits<int64_t>::min();
  if (!o.windows.empty()) {
    first_window = std::numeric_limits<int64_t>::max();
    for (const auto& w : o.windows) first_window = std::min(first_window, w.first);
  }
  auto compute_stream = [&](uint32_t id) {
    auto it = o.streams.find(id);
    return it != o.streams.end() && it->second == "compute";
  };

  int64_t origin = o.origin_ns;
  if (origin < 0) {
    origin = std::numeric_limits<int64_t>::max();
    for (const Record& r : records) {
      if (r.kind == RecordKind::memory && r.start_ns > 0 && r.start_ns >= first_window)
        origin = std::min(origin, r.start_ns);
      if (is_work(r) && valid(r) && inside(r.start_ns)) origin = std::min(origin, r.start_ns);
    }
    if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  }

  std::vector<Event> events;
  struct MemOp {
    int64_t t;
    int64_t device_delta, host_delta;
  };
  std::vector<MemOp> mem;
  std::unordered_map<uint64_t, int64_t> live;  // address -> bytes of allocations seen
  int64_t base_device = o.base_device_bytes, base_host = o.base_host_bytes;

  for (const Record& r : records) {
    Event e;
    switch (r.kind) {
      case RecordKind::kernel:
        ++st.kernels;
        e.name = short_kernel_name(r.name);
        if (const std::string c = nccl_collective(e.name); !c.empty()) {
          // NCCL's kernels spin until the last rank arrives: a collective on the communication lane,
          // never compute (it would fill the pass's compute time and hide exposed copies).
          ++st.collectives;
          e.kind = EventKind::collective;
          e.name = c;
          e.stream = "comm";
        } else {
          e.kind = EventKind::compute;
          e.stream = stream_name(r.stream_id, "compute");
        }
        break;
      case RecordKind::memset:
        ++st.memsets;
        e.kind = EventKind::compute;
        e.name = "memset";
        e.stream = stream_name(r.stream_id, "compute");
        e.bytes = r.bytes;
        break;
      case RecordKind::memcpy:
        ++st.memcpys;
        e.bytes = r.bytes;
        if ((r.copy == CopyKind::h2d || r.copy == CopyKind::d2h) && compute_stream(r.stream_id)) {
          e.kind = EventKind::compute;
          e.name = r.copy == CopyKind::h2d ? "memcpy_h2d" : "memcpy_d2h";
          e.stream = "compute";
        } else if (r.copy == CopyKind::h2d) {
          e.kind = EventKind::copy_h2d;
          e.name = "memcpy_h2d";
          e.stream = stream_name(r.stream_id, "h2d");
        } else if (r.copy == CopyKind::d2h) {
          e.kind = EventKind::copy_d2h;
          e.name = "memcpy_d2h";
          e.stream = stream_name(r.stream_id, "d2h");
        } else {
          e.kind = EventKind::compute;
          e.name = r.copy == CopyKind::d2d ? "memcpy_d2d" : r.copy == CopyKind::h2h ? "memcpy_h2h" : "memcpy";
          e.stream = stream_name(r.stream_id, "compute");
        }
        break;
      case RecordKind::memory: {
        ++st.memory;
        if (r.start_ns <= 0 || r.memory_op == MemoryOp::other ||
            (r.memory_kind != MemoryKind::device && r.memory_kind != MemoryKind::pinned)) {
          ++st.invalid;
          continue;
        }
        int64_t bytes = r.bytes;
        if (r.memory_op == MemoryOp::allocation) {
          live[r.address] = bytes;
        } else {
          auto it = live.find(r.address);
          if (bytes <= 0 && it != live.end()) bytes = it->second;
          if (it != live.end()) live.erase(it);
        }
        if (bytes <= 0) {
          ++st.invalid;
          continue;
        }
        const int64_t delta = r.memory_op == MemoryOp::allocation ? bytes : -bytes;
        const bool device = r.memory_kind == MemoryKind::device;
        if (r.start_ns < first_window) {  // before the decoded intervals: part of the base
          (device ? base_device : base_host) += delta;
          continue;
        }
        mem.push_back({r.start_ns - origin, device ? delta : 0, device ? 0 : delta});
        continue;
      }
      case RecordKind::external_correlation: continue;
      case RecordKind::other: ++st.ignored; continue;
    }
    if (!valid(r)) {
      ++st.invalid;
      continue;
    }
    if (!inside(r.start_ns)) {
      ++st.outside;
      continue;
    }
    e.start_ns = r.start_ns - origin;
    e.end_ns = r.end_ns - origin;
    auto t = tag_of.find(r.correlation_id);
    if (t == tag_of.end()) {
      ++st.untagged;
      e.op = "untagged";
    } else {
      const Tag tag = unpack_tag(t->second);
      e.stage = tag.stage;
      e.chunk = tag.chunk;
      e.layer = tag.layer;
      if (tag.op >= 0 && tag.op < static_cast<int>(o.ops.size())) e.op = o.ops[static_cast<size_t>(tag.op)];
    }
    events.push_back(std::move(e));
  }

  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.stream < b.stream;
  });

  traces::Trace tr;
  tr.metadata = std::move(metadata);
  tr.metadata.source = "cuda-cupti";
  tr.metadata.detail = o.detail;
  tr.metadata.dropped_records = dropped;
  tr.events = merge(std::move(events), o.detail);

  std::stable_sort(mem.begin(), mem.end(), [](const MemOp& a, const MemOp& b) { return a.t < b.t; });
  int64_t device = base_device, host = base_host;
  if (device > 0 || host > 0) tr.memory.push_back({0, device, host, 0});
  for (const MemOp& m : mem) {
    device += m.device_delta;
    host += m.host_delta;
    tr.memory.push_back({m.t, device, host, 0});
  }
  tr.summary = traces::summarize(tr);
  if (stats_out) *stats_out = st;
  return tr;
}

}  // namespace oomb::executor::cupti
