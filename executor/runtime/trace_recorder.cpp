#include "executor/runtime/trace_recorder.h"

#include <algorithm>
#include <chrono>

namespace oomb::executor {

using traces::Detail;
using traces::Event;
using traces::EventKind;

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

TraceRecorder::TraceRecorder(bool enabled, Detail detail)
    : enabled_(enabled), detail_(detail), origin_(steady_now_ns()) {}

void TraceRecorder::add(Event e) {
  std::lock_guard<std::mutex> lock(mu_);
  // Layer (and coarser) detail: merge into the previous event of the stream when the key matches.
  if (detail_ != Detail::op && e.kind != EventKind::phase && e.kind != EventKind::collective) {
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (it->lane != e.lane) continue;
      if (it->kind == e.kind && it->stage == e.stage && it->chunk == e.chunk && it->layer == e.layer &&
          it->op == e.op) {
        it->end_ns = std::max(it->end_ns, e.end_ns);
        it->bytes += e.bytes;
        it->flops += e.flops;
        return;
      }
      break;
    }
    e.name = to_string(e.op);
  }
  events_.push_back(std::move(e));
}

traces::Event TraceRecorder::event(EventKind kind, traces::Lane lane, const char* name, Op op, int stage,
                                   int64_t chunk, int64_t layer, int64_t start_ns, int64_t end_ns) const {
  Event e;
  e.kind = kind;
  e.lane = lane;
  e.name = name;
  e.op = op;
  e.stage = stage;
  e.chunk = chunk;
  e.layer = layer;
  e.start_ns = start_ns - origin_;
  e.end_ns = std::max(end_ns, start_ns) - origin_;
  return e;
}

void TraceRecorder::compute(const char* name, Op op, int stage, int64_t chunk, int64_t layer,
                            int64_t start_ns, int64_t end_ns, double flops) {
  if (!enabled_) return;
  Event e = event(EventKind::compute, traces::Lane::compute, name, op, stage, chunk, layer, start_ns, end_ns);
  e.flops = flops;
  add(std::move(e));
}

void TraceRecorder::copy(bool h2d, const char* name, Op op, int stage, int64_t chunk, int64_t layer,
                         int64_t start_ns, int64_t end_ns, int64_t bytes) {
  if (!enabled_) return;
  Event e = event(h2d ? EventKind::copy_h2d : EventKind::copy_d2h, h2d ? traces::Lane::h2d : traces::Lane::d2h, name, op, stage, chunk, layer,
                  start_ns, end_ns);
  e.bytes = bytes;
  add(std::move(e));
}

void TraceRecorder::collective(const char* name, Op op, int stage, int64_t chunk, int64_t layer,
                               int64_t start_ns, int64_t end_ns, int64_t bytes) {
  if (!enabled_) return;
  Event e = event(EventKind::collective, traces::Lane::comm, name, op, stage, chunk, layer, start_ns, end_ns);
  e.bytes = bytes;
  add(std::move(e));
}

void TraceRecorder::phase(const char* name, int64_t start_ns, int64_t end_ns) {
  if (!enabled_) return;
  add(event(EventKind::phase, traces::Lane::step, name, Op::step, -1, -1, -1, start_ns, end_ns));
}

void TraceRecorder::memory(int64_t device_bytes, int64_t host_bytes, int64_t pool_pages) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mu_);
  memory_.push_back({steady_now_ns() - origin_, device_bytes, host_bytes, pool_pages});
}

traces::Trace TraceRecorder::finish(traces::Metadata metadata) const {
  std::lock_guard<std::mutex> lock(mu_);
  traces::Trace t;
  t.metadata = std::move(metadata);
  t.metadata.detail = detail_;
  std::vector<Event> ev = events_;
  std::stable_sort(ev.begin(), ev.end(), [](const Event& a, const Event& b) { return a.start_ns < b.start_ns; });
  if (detail_ == Detail::chunk || detail_ == Detail::step) {
    // Consecutive events of a stream in the same stage (and chunk) become one.
    std::vector<Event> out;
    std::vector<std::pair<traces::Lane, size_t>> last;  // lane -> index in out
    for (auto& e : ev) {
      if (e.kind == EventKind::phase) {  // step boundaries stay as they are
        out.push_back(std::move(e));
        continue;
      }
      auto it = std::find_if(last.begin(), last.end(), [&](const auto& p) { return p.first == e.lane; });
      if (it != last.end()) {
        Event& m = out[it->second];
        if (m.stage == e.stage && (detail_ == Detail::step || m.chunk == e.chunk)) {
          m.end_ns = std::max(m.end_ns, e.end_ns);
          m.bytes += e.bytes;
          m.flops += e.flops;
          if (m.op != e.op) {
            m.op = e.stage == 1 ? Op::stage1 : Op::stage2;
            m.name = to_string(m.op);
          }
          continue;
        }
      }
      e.layer = -1;
      if (detail_ == Detail::step) e.chunk = -1;
      out.push_back(std::move(e));
      if (it != last.end()) it->second = out.size() - 1;
      else last.emplace_back(out.back().lane, out.size() - 1);
    }
    ev = std::move(out);
  }
  t.events = std::move(ev);
  // Coarse detail keeps a bounded number of memory samples, each the maximum of its bucket.
  const size_t cap = detail_ == Detail::step ? 256 : detail_ == Detail::chunk ? 4096 : SIZE_MAX;
  if (memory_.size() <= cap) {
    t.memory = memory_;
  } else {
    const size_t per = (memory_.size() + cap - 1) / cap;
    for (size_t i = 0; i < memory_.size(); i += per) {
      traces::MemorySample m = memory_[i];
      for (size_t k = i; k < std::min(memory_.size(), i + per); ++k) {
        m.device_bytes = std::max(m.device_bytes, memory_[k].device_bytes);
        m.host_bytes = std::max(m.host_bytes, memory_[k].host_bytes);
        m.pool_pages_used = std::max(m.pool_pages_used, memory_[k].pool_pages_used);
      }
      t.memory.push_back(m);
    }
  }
  t.summary = traces::summarize(t);
  return t;
}

}  // namespace oomb::executor
