// Streams, events and host functions of the emulated CUDA runtime (runtime.h). Each stream is an
// in-order queue with its own worker thread, so work runs asynchronously to the host as on a GPU:
// host code that reads a result without synchronising sees stale data. One mutex and one condition
// variable guard every queue and every completion mark; operations run outside the lock.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "executor/emulated_cuda/runtime.h"

namespace oomb::emulated_cuda::detail {
namespace {

struct Op {
  std::function<void()> fn;  // null for markers (event records, waits on events)
  std::vector<MarkPtr> after;
  MarkPtr done;
};

struct Stream {
  bool blocking = true;  // synchronises with the legacy default stream (not cudaStreamNonBlocking)
  bool legacy = false;
  bool closing = false;  // destroyed: the worker drains the queue, then ends
  std::deque<Op> queue;
  MarkPtr last;  // the completion of the most recently queued operation
};

struct Event {
  unsigned flags = 0;
  MarkPtr record;  // the most recent cudaEventRecord (null: never recorded)
};

struct Scheduler {
  std::mutex mu;
  std::condition_variable cv;  // any queue or mark changed
  std::shared_ptr<Stream> legacy;
  std::unordered_map<cudaStream_t, std::shared_ptr<Stream>> streams;
  // Destroyed streams whose queued work has not finished: still "prior work" for the legacy stream
  // and cudaDeviceSynchronize.
  std::vector<std::shared_ptr<Stream>> retiring;
  std::unordered_map<cudaEvent_t, std::shared_ptr<Event>> events;
};

void serve(Scheduler& s, const std::shared_ptr<Stream>& stream);

Scheduler& scheduler() {
  // Never destroyed: workers are detached and may still wait on it while the process exits.
  static Scheduler* s = [] {
    auto* sc = new Scheduler;
    sc->legacy = std::make_shared<Stream>();
    sc->legacy->legacy = true;
    std::thread([sc, st = sc->legacy] { serve(*sc, st); }).detach();
    return sc;
  }();
  return *s;
}

void serve(Scheduler& s, const std::shared_ptr<Stream>& stream) {
  std::unique_lock lock(s.mu);
  for (;;) {
    s.cv.wait(lock, [&] { return !stream->queue.empty() || stream->closing; });
    if (stream->queue.empty()) return;  // destroyed and drained
    Op op = std::move(stream->queue.front());
    stream->queue.pop_front();
    s.cv.wait(lock, [&] {
      return std::all_of(op.after.begin(), op.after.end(), [](const MarkPtr& m) { return m->done; });
    });
    lock.unlock();
    // After a sticky error the context is unusable: later work is skipped, as a faulted GPU context
    // runs nothing more, but still completes so that waits return (with the error).
    if (op.fn && sticky_error() == cudaSuccess) op.fn();
    op.fn = nullptr;  // captured state (staged copies) released outside the lock
    lock.lock();
    op.done->when = std::chrono::steady_clock::now();
    op.done->done = true;
    s.cv.notify_all();
  }
}

// Null when the handle names no live stream.
std::shared_ptr<Stream> find_stream(Scheduler& s, cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread) return s.legacy;
  auto it = s.streams.find(h);
  return it == s.streams.end() ? nullptr : it->second;
}

std::shared_ptr<Event> find_event(Scheduler& s, cudaEvent_t h) {
  auto it = s.events.find(h);
  return it == s.events.end() ? nullptr : it->second;
}

bool pending(const MarkPtr& m) { return m && !m->done; }

// The legacy default stream's implicit ordering: its work waits for all earlier work on blocking
// streams, and a blocking stream's work waits for earlier work on the legacy stream. Non-blocking
// streams take no part.
MarkPtr push(Scheduler& s, Stream& stream, std::function<void()> fn, std::vector<MarkPtr> after) {
  if (stream.legacy) {
    std::erase_if(s.retiring, [](const std::shared_ptr<Stream>& st) { return !pending(st->last); });
    for (const auto& [h, other] : s.streams)
      if (other->blocking && pending(other->last)) after.push_back(other->last);
    for (const auto& other : s.retiring)
      if (other->blocking) after.push_back(other->last);
  } else if (stream.blocking && pending(s.legacy->last)) {
    after.push_back(s.legacy->last);
  }
  auto done = std::make_shared<Mark>();
  stream.queue.push_back({std::move(fn), std::move(after), done});
  stream.last = done;
  s.cv.notify_all();
  return done;
}

void wait_locked(Scheduler& s, std::unique_lock<std::mutex>& lock, const MarkPtr& m) {
  if (m) s.cv.wait(lock, [&] { return m->done; });
}

cudaError_t status_after_wait() {
  const cudaError_t e = sticky_error();
  return e == cudaSuccess ? cudaSuccess : fail(e);
}

cudaError_t create_stream(cudaStream_t* out, unsigned flags) {
  if (!out || (flags & ~unsigned{cudaStreamNonBlocking}) != 0) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  Scheduler& s = scheduler();
  auto stream = std::make_shared<Stream>();
  stream->blocking = (flags & cudaStreamNonBlocking) == 0;
  {
    std::lock_guard lock(s.mu);
    *out = reinterpret_cast<cudaStream_t>(stream.get());
    s.streams[*out] = stream;
  }
  std::thread([&s, stream] { serve(s, stream); }).detach();
  return cudaSuccess;
}

cudaError_t create_event(cudaEvent_t* out, unsigned flags) {
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!out || (flags & ~kKnown) != 0) return fail(cudaErrorInvalidValue);
  // CUDA requires an interprocess event to be created without timing.
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  Scheduler& s = scheduler();
  auto event = std::make_shared<Event>();
  event->flags = flags;
  std::lock_guard lock(s.mu);
  *out = reinterpret_cast<cudaEvent_t>(event.get());
  s.events[*out] = std::move(event);
  return cudaSuccess;
}

}  // namespace

cudaError_t enqueue(cudaStream_t stream, std::function<void()> fn, MarkPtr* done, std::vector<MarkPtr> after) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Stream> st = find_stream(s, stream);
  if (!st) return cudaErrorInvalidResourceHandle;
  MarkPtr m = push(s, *st, std::move(fn), std::move(after));
  if (done) *done = std::move(m);
  return cudaSuccess;
}

void wait(const MarkPtr& mark) {
  if (!mark) return;
  Scheduler& s = scheduler();
  std::unique_lock lock(s.mu);
  wait_locked(s, lock, mark);
}

void synchronize_device() {
  Scheduler& s = scheduler();
  std::unique_lock lock(s.mu);
  // Work queued so far: each stream is in order, so its last mark covers it.
  std::vector<MarkPtr> marks{s.legacy->last};
  for (const auto& [h, st] : s.streams) marks.push_back(st->last);
  for (const auto& st : s.retiring) marks.push_back(st->last);
  for (const MarkPtr& m : marks) wait_locked(s, lock, m);
}

void reset_streams_and_events() {
  synchronize_device();
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  for (auto& [h, st] : s.streams) st->closing = true;
  s.streams.clear();
  s.retiring.clear();
  s.events.clear();
  s.cv.notify_all();
}

}  // namespace oomb::emulated_cuda::detail

using namespace oomb::emulated_cuda;
using namespace oomb::emulated_cuda::detail;

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return create_stream(pStream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return create_stream(pStream, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  auto it = stream ? s.streams.find(stream) : s.streams.end();
  if (it == s.streams.end()) return fail(cudaErrorInvalidResourceHandle);
  // CUDA returns at once; work already queued still runs and the stream's resources go after it.
  it->second->closing = true;
  if (pending(it->second->last)) s.retiring.push_back(it->second);
  s.streams.erase(it);
  s.cv.notify_all();
  const cudaError_t e = sticky_error();
  return e == cudaSuccess ? cudaSuccess : fail(e);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Scheduler& s = scheduler();
  std::unique_lock lock(s.mu);
  const std::shared_ptr<Stream> st = find_stream(s, stream);
  if (!st) return fail(cudaErrorInvalidResourceHandle);
  wait_locked(s, lock, st->last);
  lock.unlock();
  return status_after_wait();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Stream> st = find_stream(s, stream);
  if (!st) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  return pending(st->last) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if ((flags & ~unsigned{cudaEventWaitExternal}) != 0) return fail(cudaErrorInvalidValue);
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Stream> st = find_stream(s, stream);
  const std::shared_ptr<Event> ev = find_event(s, event);
  if (!st || !ev) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  // The record as of this call: a later cudaEventRecord makes a new mark this wait never sees. An
  // event never recorded is complete, so there is nothing to wait for.
  if (ev->record) push(s, *st, nullptr, {ev->record});
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!fn) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  return fail(enqueue(stream, [fn, userData] { fn(userData); }));
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return create_event(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) { return create_event(event, flags); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  // A record still queued keeps its own mark alive: destroying the event does not wait for it.
  if (s.events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  const cudaError_t e = sticky_error();
  return e == cudaSuccess ? cudaSuccess : fail(e);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Stream> st = find_stream(s, stream);
  const std::shared_ptr<Event> ev = find_event(s, event);
  if (!st || !ev) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  // The record is a marker in the stream: it completes, timestamped, when the worker reaches it,
  // i.e. after all work queued on the stream before it.
  ev->record = push(s, *st, nullptr, {});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Event> ev = find_event(s, event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  return pending(ev->record) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  Scheduler& s = scheduler();
  std::unique_lock lock(s.mu);
  const std::shared_ptr<Event> ev = find_event(s, event);
  if (!ev) return fail(cudaErrorInvalidResourceHandle);
  const MarkPtr record = ev->record;  // the record as of this call
  wait_locked(s, lock, record);
  lock.unlock();
  return status_after_wait();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return fail(cudaErrorInvalidValue);
  Scheduler& s = scheduler();
  std::lock_guard lock(s.mu);
  const std::shared_ptr<Event> a = find_event(s, start), b = find_event(s, end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = sticky_error(); e != cudaSuccess) return fail(e);
  // CUDA: either event created with cudaEventDisableTiming, or either never recorded, is an invalid
  // handle for timing; a record not yet reached is "not ready".
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!a->record || !b->record) return fail(cudaErrorInvalidResourceHandle);
  if (!a->record->done || !b->record->done) return cudaErrorNotReady;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(b->record->when - a->record->when).count();
  *ms = static_cast<float>(static_cast<double>(ns) * 1e-6);
  return cudaSuccess;
}

}  // extern "C"
