#pragma once
// A self-contained HTML report of one step: the facts of the run, memory over time, the stream
// timeline of a window of chunks, and a table of predicted / measured terms. One file with inline
// CSS and inline SVG only (tooltips are SVG <title> elements, no script, no fonts, no images), so
// it opens offline from a CI artifact or an e-mail and stays the same forever.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "traces/trace.h"

namespace oomb::traces {

struct ReportTerm {
  std::string name;  // "peak_device_bytes", "step_s", ...
  double predicted = 0;
  std::optional<double> measured;  // absent: a prediction only
  double error = 0;                // (measured - predicted) / predicted
  double tolerance = 0;            // allowed |error| (0: none given)
  std::optional<bool> ok;          // absent: not judged
  std::string unit;                // "bytes", "s", "pages" or "" (a plain number)
  std::string note;
};

struct ReportInput {
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // key / value lines: model, gpu, context, knobs
  const Trace* predicted = nullptr;                        // required
  const Trace* measured = nullptr;                         // nullable
  std::vector<ReportTerm> terms;
  // Inclusive window of chunk indices the timeline shows; both -1: auto_chunk_window(); one of them
  // -1: a single chunk.
  int64_t chunk_begin = -1, chunk_end = -1;
};

// Above this many events in a trace's window, adjacent events of a lane closer than one pixel are
// merged into one rect (its tooltip says how many), which bounds the SVG at ~2 rects per pixel.
inline constexpr size_t kReportMergeEvents = 20000;
// A trace with at most this many timeline events, or at most 4 chunks, is shown whole.
inline constexpr size_t kReportSmallTraceEvents = 200;

// The window the timeline shows by default: the last 2 chunks of stage 1 and the first 2 of stage 2
// (in time order; stage 2 runs chunks in reverse, so this is the stage boundary) as an inclusive
// chunk range, or {-1, -1} (everything) when the trace is small or has no chunk indices.
std::pair<int64_t, int64_t> auto_chunk_window(const Trace& t);

// The report as one HTML document. Throws Error when the chunk window is inverted.
std::string html_report(const ReportInput& in);

// &, <, >, " and ' as entities: safe in element text and in quoted attributes.
std::string html_escape(const std::string& s);

}  // namespace oomb::traces
