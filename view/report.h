#pragma once
// A self-contained HTML report of one step: the facts of the run, memory over time, the stream
// timeline of a window of chunks, and a table of predicted / measured terms (of a multi-rank run:
// also every rank's file, verdict, step, peak and collectives, and its terms). One file with inline
// CSS and inline SVG only (tooltips are SVG <title> elements, no script, no fonts, no images), so
// it opens offline from a CI artifact or an e-mail and stays the same forever.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "traces/trace.h"

namespace oomb::view {

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

// A number with its unit in its name's suffix (_bytes, _s; else a count), e.g. a rank's collectives.
struct ReportFigure {
  std::string name;
  double value = 0;
  std::string unit;  // "bytes", "s" or "" (a count)
};

// One rank of a multi-rank run (tensor or data parallelism): its trace, its verdict and its terms.
struct ReportRank {
  int rank = 0;
  std::string trace;      // its file
  bool found = false;     // false: the trace is missing (never judged, never ok)
  std::optional<bool> ok; // absent: not judged
  std::string note;       // why it was not judged, when it was not
  std::optional<double> step_s;             // measured
  std::optional<int64_t> peak_device_bytes; // measured
  std::vector<ReportFigure> collectives;    // as the rank recorded them
  bool binds = false;     // its step is the job's (the slowest)
  std::vector<ReportTerm> terms;
};

struct ReportInput {
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // key / value lines: model, gpu, context, knobs
  const traces::Trace* predicted = nullptr;                        // required
  const traces::Trace* measured = nullptr;                         // nullable
  std::vector<ReportTerm> terms;
  // A multi-rank run: every rank, rank 0 (whose trace is `measured`) first; empty for one process.
  std::vector<ReportRank> ranks;
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
std::pair<int64_t, int64_t> auto_chunk_window(const traces::Trace& t);

// The report as one HTML document. Throws Error when the chunk window is inverted.
std::string html_report(const ReportInput& in);

// &, <, >, " and ' as entities: safe in element text and in quoted attributes.
std::string html_escape(const std::string& s);

}  // namespace oomb::view
