#include "traces/trace.h"

#include <algorithm>
#include <climits>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/files.h"

namespace oomb::traces {

namespace {

constexpr const char* kSchema = "oomb.trace/1";
constexpr const char* kKindNames[] = {"compute", "copy_h2d", "copy_d2h", "alloc", "free", "phase", "collective"};
constexpr const char* kDetailNames[] = {"step", "chunk", "layer", "op"};
constexpr const char* kLaneNames[] = {"compute", "h2d", "d2h", "comm", "step"};  // Lane::compute ..

template <size_t N>
std::string one_of(const char* const (&names)[N]) {
  std::string s = "expected one of:";
  for (const char* n : names) s += std::string(" ") + n;
  return s;
}

// Prefixes the key of an Error thrown while reading a nested object ("events[12]" + "end_ns").
[[noreturn]] void rethrow_under(const Error& e, const std::string& prefix) {
  throw Error(e.where(), e.key().empty() ? prefix : prefix + "." + e.key(), e.problem(), e.hint());
}

void require_object(const Json& j, const std::string& where, const char* expected) {
  if (!j.is_object()) throw Error(where, "", "is not a JSON object (" + json_excerpt(j) + ")", expected);
}

// Optional string that may be empty (JsonReader::str_or insists on non-empty).
std::string text_or_empty(const JsonReader& r, const std::string& key) {
  if (!r.has(key)) return {};
  const Json& v = r.json().at(key);
  if (!v.is_string()) r.fail(key, "is not a string (" + json_excerpt(v) + ")", "expected a string");
  return v.get<std::string>();
}

// Optional index where -1 means "not applicable" (stage, chunk, layer).
int64_t index_or_na(const JsonReader& r, const std::string& key, int64_t max) {
  if (!r.has(key)) return -1;
  const Json& v = r.json().at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > max)
    r.fail(key, "is not a valid index (" + json_excerpt(v) + ")", "expected an integer >= 0, or -1 for n/a");
  return v.get<int64_t>();
}

// Events are written compactly: fields equal to their defaults are left out (multi-million-event
// traces stay small); the reader fills them back in, so both forms read the same.
Json event_to_json(const Event& e) {
  Json j = {{"kind", to_string(e.kind)}, {"start_ns", e.start_ns}, {"end_ns", e.end_ns}};
  if (!e.name.empty()) j["name"] = e.name;
  if (e.lane != Lane::none) j["stream"] = to_string(e.lane);
  if (e.bytes != 0) j["bytes"] = e.bytes;
  if (e.flops != 0) j["flops"] = e.flops;
  if (e.stage != -1) j["stage"] = e.stage;
  if (e.chunk != -1) j["chunk"] = e.chunk;
  if (e.layer != -1) j["layer"] = e.layer;
  if (e.op != Op::none) j["op"] = to_string(e.op);
  return j;
}

Event event_from_json(const Json& j, const std::string& where) {
  require_object(j, where, "expected {\"kind\": ..., \"start_ns\": ..., \"end_ns\": ...}");
  JsonReader r(j, where);
  Event e;
  const std::string kind = r.str("kind");
  try {
    e.kind = event_kind_from_string(kind, where);
  } catch (const Error& err) {
    r.fail("kind", err.problem(), err.hint());
  }
  e.name = text_or_empty(r, "name");
  try {
    e.lane = lane_from_string(text_or_empty(r, "stream"), where);
  } catch (const Error& err) {
    r.fail("stream", err.problem(), err.hint());
  }
  e.start_ns = r.i64("start_ns");
  e.end_ns = r.i64("end_ns");
  if (e.end_ns < e.start_ns)
    r.fail("end_ns", "end_ns (" + std::to_string(e.end_ns) + ") is before start_ns (" + std::to_string(e.start_ns) + ")",
           "expected end_ns >= start_ns");
  e.bytes = r.i64_or("bytes", 0);
  e.flops = r.f64_or("flops", 0);
  e.stage = static_cast<int>(index_or_na(r, "stage", INT_MAX));
  e.chunk = index_or_na(r, "chunk", INT64_MAX);
  e.layer = index_or_na(r, "layer", INT64_MAX);
  try {
    e.op = op_from_string(text_or_empty(r, "op"), where);
  } catch (const Error& err) {
    r.fail("op", err.problem(), err.hint());
  }
  return e;
}

Json sample_to_json(const MemorySample& m) {
  return {{"t_ns", m.t_ns}, {"device_bytes", m.device_bytes}, {"host_bytes", m.host_bytes},
          {"pool_pages_used", m.pool_pages_used}};
}

MemorySample sample_from_json(const Json& j, const std::string& where) {
  require_object(j, where, "expected {\"t_ns\": ..., \"device_bytes\": ..., \"host_bytes\": ...}");
  JsonReader r(j, where);
  MemorySample m;
  m.t_ns = r.i64("t_ns");
  m.device_bytes = r.i64_or("device_bytes", 0);
  m.host_bytes = r.i64_or("host_bytes", 0);
  m.pool_pages_used = r.i64_or("pool_pages_used", 0);
  return m;
}

Json metadata_to_json(const Metadata& m) {
  return {{"source", m.source},         {"device", m.device},   {"plan_digest", m.plan_digest},
          {"git_commit", m.git_commit}, {"time", m.time},       {"command", m.command},
          {"detail", to_string(m.detail)}, {"dropped_records", m.dropped_records}, {"extra", m.extra}};
}

Metadata metadata_from_json(const Json& j, const std::string& where) {
  require_object(j, where, "expected {\"source\": ..., \"device\": ..., \"detail\": ...}");
  JsonReader r(j, where);
  Metadata m;
  m.source = text_or_empty(r, "source");
  m.device = text_or_empty(r, "device");
  m.plan_digest = text_or_empty(r, "plan_digest");
  m.git_commit = text_or_empty(r, "git_commit");
  m.time = text_or_empty(r, "time");
  m.command = text_or_empty(r, "command");
  if (r.has("detail")) {
    const std::string detail = r.str("detail");
    try {
      m.detail = detail_from_string(detail, where);
    } catch (const Error& err) {
      r.fail("detail", err.problem(), err.hint());
    }
  }
  m.dropped_records = r.i64_or("dropped_records", 0);
  if (r.has("extra")) m.extra = r.object("extra");
  return m;
}

Json summary_to_json(const Summary& s) {
  return {{"peak_device_bytes", s.peak_device_bytes}, {"peak_host_bytes", s.peak_host_bytes},
          {"h2d_bytes", s.h2d_bytes},                 {"d2h_bytes", s.d2h_bytes},
          {"step_ns", s.step_ns},                     {"compute_busy_ns", s.compute_busy_ns},
          {"exposed_copy_ns", s.exposed_copy_ns},     {"pool_pages_peak", s.pool_pages_peak}};
}

Summary summary_from_json(const Json& j, const std::string& where) {
  require_object(j, where, "expected {\"peak_device_bytes\": ..., \"step_ns\": ..., ...}");
  JsonReader r(j, where);
  Summary s;
  s.peak_device_bytes = r.i64_or("peak_device_bytes", 0);
  s.peak_host_bytes = r.i64_or("peak_host_bytes", 0);
  s.h2d_bytes = r.i64_or("h2d_bytes", 0);
  s.d2h_bytes = r.i64_or("d2h_bytes", 0);
  s.step_ns = r.i64_or("step_ns", 0);
  s.compute_busy_ns = r.i64_or("compute_busy_ns", 0);
  s.exposed_copy_ns = r.i64_or("exposed_copy_ns", 0);
  s.pool_pages_peak = r.i64_or("pool_pages_peak", 0);
  return s;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The Chrome track an event lands on: its lane, or the natural lane of its kind, or "other".
std::string track_of(const Event& e) {
  const Lane l = e.lane != Lane::none ? e.lane : natural_lane(e.kind);
  return l == Lane::none ? "other" : to_string(l);
}

double us(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Relative error with a finite value when the prediction is 0: both 0 -> 0; predicted 0 and
// measured non-zero -> 1.0 (a 100% miss), so tables and thresholds never see inf or NaN.
double relative_error(double predicted, double measured) {
  if (predicted == 0) return measured == 0 ? 0.0 : 1.0;
  return (measured - predicted) / predicted;
}

std::string op_key(int stage, const std::string& what) {
  return "stage" + std::to_string(stage) + "/" + (what.empty() ? "(none)" : what);
}

}  // namespace

const char* to_string(EventKind k) {
  const auto i = static_cast<size_t>(k);
  OOMB_ASSERT(i < std::size(kKindNames), "EventKind out of range");
  return kKindNames[i];
}

EventKind event_kind_from_string(const std::string& s, const std::string& where) {
  for (size_t i = 0; i < std::size(kKindNames); ++i)
    if (s == kKindNames[i]) return static_cast<EventKind>(i);
  throw Error(where, "", "unknown event kind \"" + s + "\"", one_of(kKindNames));
}

const char* to_string(Detail d) {
  const auto i = static_cast<size_t>(d);
  OOMB_ASSERT(i < std::size(kDetailNames), "Detail out of range");
  return kDetailNames[i];
}

Detail detail_from_string(const std::string& s, const std::string& where) {
  for (size_t i = 0; i < std::size(kDetailNames); ++i)
    if (s == kDetailNames[i]) return static_cast<Detail>(i);
  throw Error(where, "", "unknown detail level \"" + s + "\"", one_of(kDetailNames));
}

const char* to_string(Lane l) {
  if (l == Lane::none) return "";
  const auto i = static_cast<size_t>(l) - 1;
  OOMB_ASSERT(i < std::size(kLaneNames), "Lane out of range");
  return kLaneNames[i];
}

Lane lane_from_string(const std::string& s, const std::string& where) {
  if (s.empty()) return Lane::none;
  for (size_t i = 0; i < std::size(kLaneNames); ++i)
    if (s == kLaneNames[i]) return static_cast<Lane>(i + 1);
  throw Error(where, "", "unknown lane \"" + s + "\"", one_of(kLaneNames));
}

Lane natural_lane(EventKind k) {
  switch (k) {
    case EventKind::compute: return Lane::compute;
    case EventKind::copy_h2d: return Lane::h2d;
    case EventKind::copy_d2h: return Lane::d2h;
    case EventKind::collective: return Lane::comm;
    case EventKind::phase: return Lane::step;
    default: return Lane::none;
  }
}

Json to_json(const Trace& t) {
  Json events = Json::array();
  for (const Event& e : t.events) events.push_back(event_to_json(e));
  Json memory = Json::array();
  for (const MemorySample& m : t.memory) memory.push_back(sample_to_json(m));
  return {{"schema", kSchema}, {"metadata", metadata_to_json(t.metadata)}, {"events", std::move(events)},
          {"memory", std::move(memory)}, {"summary", summary_to_json(t.summary)}};
}

Trace trace_from_json(const Json& j, const std::string& where) {
  JsonReader r(j, where);
  r.expect_schema(kSchema);
  Trace t;
  const Json& metadata = r.object("metadata");
  try {
    t.metadata = metadata_from_json(metadata, where);
  } catch (const Error& e) {
    rethrow_under(e, "metadata");
  }
  const Json& events = r.array("events");
  t.events.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    try {
      t.events.push_back(event_from_json(events[i], where));
    } catch (const Error& e) {
      rethrow_under(e, "events[" + std::to_string(i) + "]");
    }
  }
  if (r.has("memory")) {
    const Json& memory = r.array("memory");
    t.memory.reserve(memory.size());
    for (size_t i = 0; i < memory.size(); ++i) {
      try {
        t.memory.push_back(sample_from_json(memory[i], where));
      } catch (const Error& e) {
        rethrow_under(e, "memory[" + std::to_string(i) + "]");
      }
    }
  }
  if (r.has("summary")) {
    const Json& summary = r.object("summary");
    try {
      t.summary = summary_from_json(summary, where);
    } catch (const Error& e) {
      rethrow_under(e, "summary");
    }
  }
  return t;
}

Trace read_trace(const std::string& path) { return trace_from_json(read_json_file(path), path); }

namespace {
// Appends to a buffer and hands it to the stream a megabyte at a time: a writer of millions of
// small records without a whole document in memory, nor a stream call per record.
class Chunked {
 public:
  explicit Chunked(std::ostream& out) : out_(out) { buf_.reserve(kFlush + 4096); }
  ~Chunked() { flush(); }
  Chunked& operator<<(const std::string& s) {
    buf_ += s;
    if (buf_.size() >= kFlush) flush();
    return *this;
  }
  Chunked& operator<<(const char* s) {
    buf_ += s;
    return *this;
  }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  static constexpr size_t kFlush = size_t{1} << 20;
  std::ostream& out_;
  std::string buf_;
};
}  // namespace

// Same document as to_json, but streamed to the file one event per line: no whole-trace Json tree
// nor text in memory, and the file stays greppable.
void write_trace(const Trace& t, const std::string& path) {
  write_file_atomically(path, [&t](std::ostream& os) {
    Chunked out(os);
    out << "{\"schema\":\"" << kSchema << "\",\n\"metadata\":" << dump(metadata_to_json(t.metadata))
        << ",\n\"summary\":" << dump(summary_to_json(t.summary)) << ",\n\"events\":[";
    for (size_t i = 0; i < t.events.size(); ++i) out << (i == 0 ? "\n" : ",\n") << dump(event_to_json(t.events[i]));
    out << "\n],\n\"memory\":[";
    for (size_t i = 0; i < t.memory.size(); ++i) out << (i == 0 ? "\n" : ",\n") << dump(sample_to_json(t.memory[i]));
    out << "\n]}\n";
  });
}

namespace {

using Interval = std::pair<int64_t, int64_t>;  // [begin, end) ns

// The union of the intervals clipped to [lo, hi), as sorted disjoint intervals.
std::vector<Interval> union_within(const std::vector<Interval>& v, int64_t lo, int64_t hi) {
  std::vector<Interval> clipped;
  for (const auto& [b, e] : v) {
    const int64_t cb = std::max(b, lo), ce = std::min(e, hi);
    if (cb < ce) clipped.emplace_back(cb, ce);
  }
  std::sort(clipped.begin(), clipped.end());
  std::vector<Interval> out;
  for (const Interval& i : clipped) {
    if (!out.empty() && i.first <= out.back().second) out.back().second = std::max(out.back().second, i.second);
    else out.push_back(i);
  }
  return out;
}

int64_t total_length(const std::vector<Interval>& v) {
  int64_t n = 0;
  for (const auto& [b, e] : v) n += e - b;
  return n;
}

// Length of a minus b, both sorted and disjoint.
int64_t uncovered_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t n = 0;
  size_t j = 0;
  for (const auto& [ab, ae] : a) {
    int64_t at = ab;
    while (j < b.size() && b[j].second <= at) ++j;
    for (size_t k = j; k < b.size() && b[k].first < ae; ++k) {
      if (b[k].first > at) n += b[k].first - at;
      at = std::max(at, b[k].second);
      if (at >= ae) break;
    }
    if (at < ae) n += ae - at;
  }
  return n;
}

}  // namespace

Summary summarize(const Trace& t) {
  Summary s;
  // The steps: the "step" phase events, or (none) the whole trace as one step.
  std::vector<Interval> steps;
  int64_t first = INT64_MAX, last = INT64_MIN;
  std::vector<Interval> compute, copy;
  for (const Event& e : t.events) {
    first = std::min(first, e.start_ns);
    last = std::max(last, e.end_ns);
    if (e.kind == EventKind::phase && e.name == kStepPhase) steps.emplace_back(e.start_ns, e.end_ns);
    if (e.kind == EventKind::compute) compute.emplace_back(e.start_ns, e.end_ns);
    if (e.kind == EventKind::copy_h2d || e.kind == EventKind::copy_d2h) copy.emplace_back(e.start_ns, e.end_ns);
  }
  const bool whole = steps.empty();
  if (whole && !t.events.empty()) steps.emplace_back(first, last);
  std::sort(steps.begin(), steps.end());

  // Per step: compute busy = the union of compute intervals (overlapping kernels count once);
  // exposed copy = the union of copy intervals (either direction) that no compute covers, so that
  // compute idle with no copy in flight (host work, launch gaps) is not blamed on the copies.
  int64_t step_ns = 0, busy_ns = 0, exposed_ns = 0, h2d = 0, d2h = 0;
  for (const auto& [b, e] : steps) {
    step_ns += e - b;
    const std::vector<Interval> busy = union_within(compute, b, e);
    busy_ns += total_length(busy);
    exposed_ns += uncovered_length(union_within(copy, b, e), busy);
  }
  // Bytes: every copy of a trace without steps; else those starting inside a step.
  auto in_a_step = [&](int64_t at) {
    if (whole) return true;
    for (const auto& [b, e] : steps)
      if (at >= b && at < e) return true;
    return false;
  };
  for (const Event& e : t.events) {
    if (e.kind == EventKind::copy_h2d && in_a_step(e.start_ns)) h2d += e.bytes;
    if (e.kind == EventKind::copy_d2h && in_a_step(e.start_ns)) d2h += e.bytes;
  }
  const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(steps.size()));
  auto per_step = [n](int64_t total) { return (total + n / 2) / n; };
  s.step_ns = per_step(step_ns);
  s.compute_busy_ns = per_step(busy_ns);
  s.exposed_copy_ns = per_step(exposed_ns);
  s.h2d_bytes = per_step(h2d);
  s.d2h_bytes = per_step(d2h);

  if (t.memory.empty()) {
    s.peak_device_bytes = t.summary.peak_device_bytes;
    s.peak_host_bytes = t.summary.peak_host_bytes;
    s.pool_pages_peak = t.summary.pool_pages_peak;
  } else {
    for (const MemorySample& m : t.memory) {
      s.peak_device_bytes = std::max(s.peak_device_bytes, m.device_bytes);
      s.peak_host_bytes = std::max(s.peak_host_bytes, m.host_bytes);
      s.pool_pages_peak = std::max(s.pool_pages_peak, m.pool_pages_used);
    }
  }
  return s;
}

namespace {
// The Chrome document's parts in its order: the metadata records, then one per event, then two
// counters per memory sample; `emit` takes each.
template <class Emit>
void chrome_records(const Trace& t, const Emit& emit) {
  // Fixed tids for the three streams every producer has; any other stream follows, sorted by name
  // so the mapping does not depend on event order.
  std::map<std::string, int> tid = {{"compute", 1}, {"h2d", 2}, {"d2h", 3}};
  std::set<std::string> used, others;
  for (const Event& e : t.events) {
    std::string track = track_of(e);
    if (!tid.count(track)) others.insert(track);
    used.insert(std::move(track));
  }
  int next = 4;
  for (const std::string& name : others) tid[name] = next++;

  emit(Json{{"ph", "M"}, {"name", "process_name"}, {"pid", 1},
            {"args", {{"name", "oomb " + (t.metadata.source.empty() ? std::string("trace") : t.metadata.source)}}}});
  for (const auto& [name, id] : tid) {
    if (!used.count(name)) continue;
    emit(Json{{"ph", "M"}, {"name", "thread_name"}, {"pid", 1}, {"tid", id}, {"args", {{"name", name}}}});
    emit(Json{{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", 1}, {"tid", id}, {"args", {{"sort_index", id}}}});
  }
  for (const Event& e : t.events) {
    emit(Json{{"ph", "X"}, {"name", e.name.empty() ? std::string(to_string(e.kind)) : e.name},
              {"cat", to_string(e.kind)}, {"ts", us(e.start_ns)}, {"dur", us(e.duration_ns())},
              {"pid", 1}, {"tid", tid.at(track_of(e))},
              {"args", {{"bytes", e.bytes}, {"flops", e.flops}, {"stage", e.stage}, {"chunk", e.chunk},
                        {"layer", e.layer}, {"op", to_string(e.op)}}}});
  }
  for (const MemorySample& m : t.memory) {
    emit(Json{{"ph", "C"}, {"name", "device_bytes"}, {"pid", 1}, {"ts", us(m.t_ns)},
              {"args", {{"device_bytes", m.device_bytes}}}});
    emit(Json{{"ph", "C"}, {"name", "host_bytes"}, {"pid", 1}, {"ts", us(m.t_ns)},
              {"args", {{"host_bytes", m.host_bytes}}}});
  }
}

Json chrome_other_data(const Metadata& md) {
  Json other = {{"schema", kSchema},         {"source", md.source}, {"device", md.device},
                {"plan_digest", md.plan_digest}, {"git_commit", md.git_commit}, {"time", md.time},
                {"command", md.command},      {"detail", to_string(md.detail)},
                {"dropped_records", md.dropped_records}};
  if (!md.extra.is_null()) other["extra"] = dump(md.extra);
  return other;
}
}  // namespace

Json to_chrome_trace(const Trace& t) {
  Json out = Json::array();
  chrome_records(t, [&out](Json&& j) { out.push_back(std::move(j)); });
  return {{"traceEvents", std::move(out)}, {"displayTimeUnit", "ns"}, {"otherData", chrome_other_data(t.metadata)}};
}

void write_chrome_trace(const Trace& t, const std::string& path) {
  // The bytes of to_chrome_trace(t).dump(): its keys in the order the Json object sorts them, each
  // record dumped as the whole document would.
  write_file_atomically(path, [&t](std::ostream& os) {
    Chunked out(os);
    out << "{\"displayTimeUnit\":\"ns\",\"otherData\":" << chrome_other_data(t.metadata).dump() << ",\"traceEvents\":[";
    bool first = true;
    chrome_records(t, [&](Json&& j) {
      out << (first ? "" : ",") << j.dump();
      first = false;
    });
    out << "]}";
  });
}

const CompareRow* Comparison::find(const std::string& name) const {
  for (const CompareRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

Comparison compare(const Trace& predicted, const Trace& measured) {
  Comparison c;
  auto add = [&](std::string name, double p, double m) {
    c.rows.push_back({std::move(name), p, m, relative_error(p, m)});
  };
  const Summary& p = predicted.summary;
  const Summary& m = measured.summary;
  auto d = [](int64_t v) { return static_cast<double>(v); };
  add("peak_device_bytes", d(p.peak_device_bytes), d(m.peak_device_bytes));
  add("peak_host_bytes", d(p.peak_host_bytes), d(m.peak_host_bytes));
  add("h2d_bytes", d(p.h2d_bytes), d(m.h2d_bytes));
  add("d2h_bytes", d(p.d2h_bytes), d(m.d2h_bytes));
  add("step_ns", d(p.step_ns), d(m.step_ns));
  add("compute_busy_ns", d(p.compute_busy_ns), d(m.compute_busy_ns));
  add("exposed_copy_ns", d(p.exposed_copy_ns), d(m.exposed_copy_ns));
  add("pool_pages_peak", d(p.pool_pages_peak), d(m.pool_pages_peak));

  // Per-(stage, op) totals, aligned by key; a key present on one side only compares against 0.
  using Key = std::pair<int, std::string>;
  std::map<Key, std::pair<double, double>> time, bytes, comm;
  auto collect = [&](const Trace& t, bool is_measured) {
    for (const Event& e : t.events) {
      if (e.kind == EventKind::compute || e.kind == EventKind::collective) {
        auto& slot = (e.kind == EventKind::compute ? time : comm)[{e.stage, to_string(e.op)}];
        (is_measured ? slot.second : slot.first) += d(e.duration_ns());
      } else if (e.kind == EventKind::copy_h2d || e.kind == EventKind::copy_d2h) {
        auto& slot = bytes[{e.stage, to_string(e.kind)}];
        (is_measured ? slot.second : slot.first) += d(e.bytes);
      }
    }
  };
  collect(predicted, false);
  collect(measured, true);
  for (const auto& [key, v] : time) add("time:" + op_key(key.first, key.second), v.first, v.second);
  for (const auto& [key, v] : bytes) add("bytes:" + op_key(key.first, key.second), v.first, v.second);
  for (const auto& [key, v] : comm) add("comm:" + op_key(key.first, key.second), v.first, v.second);
  return c;
}

}  // namespace oomb::traces
