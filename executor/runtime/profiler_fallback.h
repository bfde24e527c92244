#pragma once
// A run whose device profiler (the CUPTI collector, executor/cupti) cannot start, or fails while it
// decodes, keeps going host-timed instead of losing the run: oomb run starts the collector through
// start_or_fall_back(), says so on stderr (fallback_message()), and the trace records it
// (record_profiler_fallback(): metadata.extra.trace_timing = "host", extra.cupti_unavailable = why),
// which tests/gpu/run.sh reports. Backend-independent (no CUDA header): tested on the CPU with a
// collector that throws (tests/executor/profiler_fallback_test.cpp).
#include <exception>
#include <string>
#include <utility>

#include "traces/trace.h"

namespace oomb::executor {

// start() (returning an owning pointer) or, when it throws, a null pointer with the reason in
// *failure.
template <class Start>
auto start_or_fall_back(Start&& start, std::string* failure) -> decltype(start()) {
  try {
    return std::forward<Start>(start)();
  } catch (const std::exception& e) {
    *failure = e.what();
    return nullptr;
  }
}

inline std::string fallback_message(const std::string& failure) {
  return "oomb run: CUPTI gave no device times (" + failure + "): the run goes on and its trace is host-timed";
}

// The trace (host-timed) of a run whose profiler could not start or failed: says so and why.
inline void record_profiler_fallback(traces::Trace& t, const std::string& failure) {
  if (!t.metadata.extra.is_object()) t.metadata.extra = Json::object();
  t.metadata.extra["trace_timing"] = "host";
  t.metadata.extra["cupti_unavailable"] = failure;
}

}  // namespace oomb::executor
