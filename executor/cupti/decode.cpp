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
using traces::Lane;

bool same_key(const Event& a, const Event& b, Detail d) {
  if (a.kind != b.kind || a.lane != b.lane || a.stage != b.stage) return false;
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
  std::map<traces::Lane, size_t> last;  // lane -> index in out
  for (auto& e : ev) {
    if (d == Detail::chunk || d == Detail::step) e.layer = -1;
    if (d == Detail::step) e.chunk = -1;
    auto it = last.find(e.lane);
    if (it != last.end() && same_key(out[it->second], e, d)) {
      Event& m = out[it->second];
      m.end_ns = std::max(m.end_ns, e.end_ns);
      m.bytes += e.bytes;
      m.flops += e.flops;
      if (m.op != e.op) m.op = stage_op(e.stage);
      m.name = m.op == Op::none ? m.name : to_string(m.op);
      continue;
    }
    if (e.op != Op::none) e.name = to_string(e.op);
    out.push_back(std::move(e));
    last[out.back().lane] = out.size() - 1;
  }
  return out;
}

}  // namespace

Decoder::Decoder(DecodeOptions options)
    : o_(std::move(options)),
      windowed_(o_.windowed || !o_.windows.empty()),
      // A fixed list of windows is all there will be: nothing waits for another.
      settled_ns_(o_.windowed ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max()) {
  for (size_t i = 1; i < o_.windows.size(); ++i)
    if (o_.windows[i].first < o_.windows[i - 1].first) {  // any order is fine for a fixed list
      std::sort(o_.windows.begin(), o_.windows.end());
      break;
    }
}

bool Decoder::inside(int64_t t) const {
  if (!windowed_) return true;
  for (auto it = o_.windows.rbegin(); it != o_.windows.rend(); ++it)  // the latest first: where new work falls
    if (t >= it->first && t <= it->second) return true;
  return false;
}

int64_t Decoder::horizon() const {
  return std::max(settled_ns_, o_.windows.empty() ? std::numeric_limits<int64_t>::min() : o_.windows.back().first);
}

void Decoder::place(Work w) {
  if (inside(w.start_ns)) {
    kept_.push_back(w);
  } else if (w.start_ns < horizon()) {
    ++st_.outside;
  } else {
    waiting_.push_back(w);
  }
}

void Decoder::consume(const Record& r) {
  ++st_.records;
  switch (r.kind) {
    case RecordKind::external_correlation:
      tag_of_[r.correlation_id] = r.external_id;
      ++st_.correlations;
      return;
    case RecordKind::memory:
      ++st_.memory;
      memory_.push_back({r.start_ns, r.bytes, r.address, r.memory_op, r.memory_kind});
      return;
    case RecordKind::other: ++st_.ignored; return;
    case RecordKind::kernel: ++st_.kernels; break;
    case RecordKind::memcpy: ++st_.memcpys; break;
    case RecordKind::memset: ++st_.memsets; break;
  }
  if (!(r.start_ns > 0 && r.end_ns >= r.start_ns)) {  // no or inverted timestamps: incomplete
    ++st_.invalid;
    return;
  }
  Work w{r.start_ns, r.end_ns, r.bytes, seq_++, 0, r.correlation_id, r.stream_id, -1, r.kind, r.copy, false, false};
  if (r.kind == RecordKind::kernel) {
    auto [it, added] = name_index_.try_emplace(r.name, static_cast<int32_t>(names_.size()));
    if (added) names_.push_back(short_kernel_name(r.name));
    w.name = it->second;
  }
  resolve(w, false);
  place(w);
}

void Decoder::add_window(int64_t begin_ns, int64_t end_ns) {
  if (!o_.windowed || end_ns < begin_ns || (!o_.windows.empty() && begin_ns < o_.windows.back().first))
    throw Error("cupti decode", "window", "[" + std::to_string(begin_ns) + ", " + std::to_string(end_ns) + "]",
                "windows in increasing order of their begin, on a decoder made with DecodeOptions::windowed");
  o_.windows.emplace_back(begin_ns, end_ns);
  std::vector<Work> waiting;
  waiting.swap(waiting_);
  for (const Work& w : waiting) place(w);
}

void Decoder::settle(int64_t now_ns) {
  settled_ns_ = std::max(settled_ns_, now_ns);
  std::vector<Work> waiting;
  waiting.swap(waiting_);
  for (const Work& w : waiting) place(w);
  // Every correlation of the work so far has arrived: what is still untagged stays so. (Work kept
  // before the last settle is final already: only what came since is looked at.)
  for (size_t i = settled_kept_; i < kept_.size(); ++i) resolve(kept_[i], true);
  for (Work& w : waiting_) resolve(w, true);
  settled_kept_ = kept_.size();
  tag_of_.clear();
}

void Decoder::resolve(Work& w, bool final_tag) {
  if (w.tagged || w.untagged) return;
  if (auto t = tag_of_.find(w.correlation_id); t != tag_of_.end()) {
    w.tag = t->second;
    w.tagged = true;
  } else {
    w.untagged = final_tag;
  }
}

int64_t Decoder::held_records() const {
  return static_cast<int64_t>(kept_.size() + waiting_.size() + tag_of_.size() + memory_.size());
}

traces::Trace Decoder::finish(int64_t dropped, traces::Metadata metadata, DecodeStats* stats_out) {
  // Work past the last window: no window will come now.
  settled_ns_ = std::numeric_limits<int64_t>::max();
  {
    std::vector<Work> waiting;
    waiting.swap(waiting_);
    for (const Work& w : waiting) place(w);
  }
  DecodeStats st = st_;
  st.dropped = dropped;
  const DecodeOptions& o = o_;

  auto stream_name = [&](uint32_t id, Lane fallback) {
    auto it = o.streams.find(id);
    return it != o.streams.end() ? it->second : fallback;
  };
  auto compute_stream = [&](uint32_t id) {
    auto it = o.streams.find(id);
    return it != o.streams.end() && it->second == Lane::compute;
  };
  // Memory records before this belong to the base (no windows: none does).
  int64_t first_window = std::numeric_limits<int64_t>::min();
  if (windowed_) {
    first_window = std::numeric_limits<int64_t>::max();
    for (const auto& w : o.windows) first_window = std::min(first_window, w.first);
  }

  int64_t origin = o.origin_ns;
  if (origin < 0) {
    origin = std::numeric_limits<int64_t>::max();
    for (const Memory& m : memory_)
      if (m.t_ns > 0 && m.t_ns >= first_window) origin = std::min(origin, m.t_ns);
    for (const Work& w : kept_) origin = std::min(origin, w.start_ns);
    if (origin == std::numeric_limits<int64_t>::max()) origin = 0;
  }

  // Work not settled since it arrived: its correlation may have come after it.
  for (Work& w : kept_) resolve(w, true);
  std::sort(kept_.begin(), kept_.end(), [](const Work& a, const Work& b) { return a.seq < b.seq; });
  struct Placed {
    Event e;
    uint64_t seq;
  };
  std::vector<Placed> placed;
  placed.reserve(kept_.size());
  for (const Work& w : kept_) {
    Event e;
    switch (w.kind) {
      case RecordKind::kernel:
        e.name = names_[static_cast<size_t>(w.name)];
        if (const std::string c = nccl_collective(e.name); !c.empty()) {
          // NCCL's kernels spin until the last rank arrives: a collective on the communication lane,
          // never compute (it would fill the pass's compute time and hide exposed copies).
          ++st.collectives;
          e.kind = EventKind::collective;
          e.name = c;
          e.lane = Lane::comm;
        } else {
          e.kind = EventKind::compute;
          e.lane = stream_name(w.stream_id, Lane::compute);
        }
        break;
      case RecordKind::memset:
        e.kind = EventKind::compute;
        e.name = "memset";
        e.lane = stream_name(w.stream_id, Lane::compute);
        e.bytes = w.bytes;
        break;
      default:  // memcpy
        e.bytes = w.bytes;
        if ((w.copy == CopyKind::h2d || w.copy == CopyKind::d2h) && compute_stream(w.stream_id)) {
          e.kind = EventKind::compute;
          e.name = w.copy == CopyKind::h2d ? "memcpy_h2d" : "memcpy_d2h";
          e.lane = Lane::compute;
        } else if (w.copy == CopyKind::h2d) {
          e.kind = EventKind::copy_h2d;
          e.name = "memcpy_h2d";
          e.lane = stream_name(w.stream_id, Lane::h2d);
        } else if (w.copy == CopyKind::d2h) {
          e.kind = EventKind::copy_d2h;
          e.name = "memcpy_d2h";
          e.lane = stream_name(w.stream_id, Lane::d2h);
        } else {
          e.kind = EventKind::compute;
          e.name = w.copy == CopyKind::d2d ? "memcpy_d2d" : w.copy == CopyKind::h2h ? "memcpy_h2h" : "memcpy";
          e.lane = stream_name(w.stream_id, Lane::compute);
        }
        break;
    }
    e.start_ns = w.start_ns - origin;
    e.end_ns = w.end_ns - origin;
    if (!w.tagged) {
      ++st.untagged;
      e.op = Op::untagged;
    } else {
      const Tag t = unpack_tag(w.tag);
      e.stage = t.stage;
      e.chunk = t.chunk;
      e.layer = t.layer;
      if (t.op > 0 && t.op < kOpCount) e.op = static_cast<Op>(t.op);
    }
    placed.push_back({std::move(e), w.seq});
  }
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    if (a.e.start_ns != b.e.start_ns) return a.e.start_ns < b.e.start_ns;
    if (a.e.lane != b.e.lane) return a.e.lane < b.e.lane;
    return a.seq < b.seq;
  });
  std::vector<Event> events;
  events.reserve(placed.size());
  for (Placed& p : placed) events.push_back(std::move(p.e));

  // Memory: device and pinned bytes in use, from the base on.
  struct MemOp {
    int64_t t;
    int64_t device_delta, host_delta;
  };
  std::vector<MemOp> mem;
  std::unordered_map<uint64_t, int64_t> live;  // address -> bytes of allocations seen
  int64_t base_device = o.base_device_bytes, base_host = o.base_host_bytes;
  for (const Memory& m : memory_) {
    if (m.t_ns <= 0 || m.op == MemoryOp::other || (m.kind != MemoryKind::device && m.kind != MemoryKind::pinned)) {
      ++st.invalid;
      continue;
    }
    int64_t bytes = m.bytes;
    if (m.op == MemoryOp::allocation) {
      live[m.address] = bytes;
    } else {
      auto it = live.find(m.address);
      if (bytes <= 0 && it != live.end()) bytes = it->second;
      if (it != live.end()) live.erase(it);
    }
    if (bytes <= 0) {
      ++st.invalid;
      continue;
    }
    const int64_t delta = m.op == MemoryOp::allocation ? bytes : -bytes;
    const bool device = m.kind == MemoryKind::device;
    if (m.t_ns < first_window) {  // before the decoded intervals: part of the base
      (device ? base_device : base_host) += delta;
      continue;
    }
    mem.push_back({m.t_ns - origin, device ? delta : 0, device ? 0 : delta});
  }

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

traces::Trace decode(const std::vector<Record>& records, const DecodeOptions& options, int64_t dropped,
                     traces::Metadata metadata, DecodeStats* stats) {
  DecodeOptions o = options;
  o.windowed = false;  // the windows given are all there are
  Decoder d(std::move(o));
  d.consume(records);
  return d.finish(dropped, std::move(metadata), stats);
}

}  // namespace oomb::executor::cupti
