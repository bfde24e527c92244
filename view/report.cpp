#include "view/report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/format.h"
#include "view/palette.h"

namespace oomb::view {

using traces::Event;
using traces::EventKind;
using traces::MemorySample;
using traces::Metadata;
using traces::Trace;
using traces::to_string;

namespace {

// SVG geometry in user units. The SVGs scale to the content width (max 1200 px, which is what a
// 1280 px window leaves), so one unit is one CSS pixel there and text stays at its nominal size.
constexpr double kSvgWidth = 1200;
constexpr double kMemLeft = 92, kMemRight = 16, kMemTop = 34, kMemBottom = 40, kMemPlotHeight = 300;
constexpr double kLaneLeft = 150, kLaneRight = 16, kLaneHeight = 24, kLaneGap = 5, kSetHeader = 22;
constexpr double kMinRectWidth = 0.75;    // a zero-length event stays visible
constexpr double kOutlineMinWidth = 4.0;  // narrower rects are drawn without an outline
// The three lanes every producer has, and comm where ranks all-reduce (drawn only then).
constexpr int kLanes = 4;
constexpr traces::Lane kLaneOrder[kLanes] = {traces::Lane::compute, traces::Lane::h2d, traces::Lane::d2h,
                                             traces::Lane::comm};
constexpr const char* kDeviceColor = "#1f6fb4";
constexpr const char* kHostColor = "#e8710a";
constexpr const char* kMixedColor = "#8a8f98";  // a merged rect holding several ops

std::string esc(const std::string& s) { return html_escape(s); }

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

// The row of an event: its lane when that is one of the four, else the natural lane of its kind;
// -1 for alloc / free / phase events, which have no row.
int lane_of(const Event& e) {
  for (traces::Lane lane : {e.lane, traces::natural_lane(e.kind)})
    for (int i = 0; i < kLanes; ++i)
      if (lane == kLaneOrder[i]) return i;
  return -1;
}

std::string op_of(const Event& e) {
  if (e.op != Op::none) return to_string(e.op);
  if (!e.name.empty()) return e.name;
  return to_string(e.kind);
}

// An op's colour: the one palette (view/palette.h), which the GUI uses too.
std::string op_fill(const std::string& op) { return hex(op_color(op)); }

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks over `range`.
double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

std::string format_value(double v, const std::string& unit) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : (v < 0 ? "-inf" : "n/a");
  if (unit == "bytes") return format_bytes(static_cast<int64_t>(std::llround(v)));
  if (unit == "s") return format_duration_s(v);
  if (unit == "pages") return format_count(v) + " pages";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// ---- windows -------------------------------------------------------------------------------

struct Span {
  int64_t t0 = 0, t1 = 0;
  bool empty = true;
  int64_t length() const { return t1 - t0; }
};

bool in_chunks(const Event& e, int64_t b, int64_t end) { return b < 0 || (e.chunk >= b && e.chunk <= end); }

// Time span of the lane events of chunks [b, end] (b = -1: all lane events).
Span window_span(const Trace& t, int64_t b, int64_t end) {
  Span s;
  for (const Event& e : t.events) {
    if (lane_of(e) < 0 || !in_chunks(e, b, end)) continue;
    if (s.empty) {
      s = {e.start_ns, e.end_ns, false};
    } else {
      s.t0 = std::min(s.t0, e.start_ns);
      s.t1 = std::max(s.t1, e.end_ns);
    }
  }
  return s;
}

// Events drawn for a span: every lane event overlapping it (so the copies that overlap the window's
// compute show too, clipped), and zero-length events inside it.
bool overlaps(const Event& e, const Span& s) {
  if (s.empty) return false;
  if (e.start_ns == e.end_ns) return e.start_ns >= s.t0 && e.start_ns <= s.t1;
  return e.start_ns < s.t1 && e.end_ns > s.t0;
}

// Start of the trace's timeline: the earliest event or memory sample.
int64_t trace_origin(const Trace& t) {
  int64_t o = INT64_MAX;
  for (const Event& e : t.events) o = std::min(o, e.start_ns);
  for (const MemorySample& m : t.memory) o = std::min(o, m.t_ns);
  return o == INT64_MAX ? 0 : o;
}

int64_t trace_end(const Trace& t) {
  int64_t o = INT64_MIN;
  for (const Event& e : t.events) o = std::max(o, e.end_ns);
  for (const MemorySample& m : t.memory) o = std::max(o, m.t_ns);
  return o == INT64_MIN ? 0 : o;
}

// First start of a stage-2 event (-1 if none): where the memory chart marks the stage boundary.
int64_t stage2_start(const Trace& t) {
  int64_t s = INT64_MAX;
  for (const Event& e : t.events)
    if (e.stage == 2 && lane_of(e) >= 0) s = std::min(s, e.start_ns);
  return s == INT64_MAX ? -1 : s;
}

// ---- memory chart ----------------------------------------------------------------------------

// A step line (the value holds until the next sample, the last until `end`) as an SVG path,
// decimated to one pixel column: within a column only the entry, minimum, maximum and last values
// are kept, so a million samples still make at most ~4 commands per pixel.
std::string step_path(std::vector<std::pair<int64_t, int64_t>> pts, int64_t origin, int64_t end, double x_left,
                      double px_per_ns, double y_top, double plot_h, double y_max) {
  std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  auto X = [&](int64_t t) { return x_left + static_cast<double>(t - origin) * px_per_ns; };
  auto Y = [&](int64_t v) { return y_top + plot_h - static_cast<double>(v) / y_max * plot_h; };
  std::string d;
  if (pts.empty()) return d;
  appendf(d, "M%.1f %.1f", X(pts[0].first), Y(pts[0].second));
  int64_t cur = pts[0].second;
  size_t i = 1;
  while (i < pts.size()) {
    const double col = std::floor(X(pts[i].first));
    const double x_first = X(pts[i].first);
    int64_t mn = cur, mx = cur, last = cur;
    for (; i < pts.size() && std::floor(X(pts[i].first)) == col; ++i) {
      last = pts[i].second;
      mn = std::min(mn, last);
      mx = std::max(mx, last);
    }
    if (mn == cur && mx == cur) continue;  // no change in this column
    appendf(d, "H%.1f", x_first);
    if (last == mx) {
      if (mn != mx) appendf(d, "V%.1f", Y(mn));
    } else if (last == mn) {
      appendf(d, "V%.1f", Y(mx));
    } else {
      appendf(d, "V%.1fV%.1f", Y(mn), Y(mx));
    }
    appendf(d, "V%.1f", Y(last));
    cur = last;
  }
  appendf(d, "H%.1f", X(std::max(end, pts.back().first)));
  return d;
}

struct Series {
  const Trace* trace;
  bool measured;
};

// pred_window: the timeline's window in the predicted trace, shaded (empty: not shaded).
void memory_chart(std::string& out, const ReportInput& in, const Span& pred_window) {
  std::vector<Series> series = {{in.predicted, false}};
  if (in.measured) series.push_back({in.measured, true});

  int64_t y_max = 0, duration = 1;
  bool any = false;
  for (const Series& s : series) {
    for (const MemorySample& m : s.trace->memory) y_max = std::max({y_max, m.device_bytes, m.host_bytes});
    any |= !s.trace->memory.empty();
    duration = std::max(duration, trace_end(*s.trace) - trace_origin(*s.trace));
  }
  const double plot_w = kSvgWidth - kMemLeft - kMemRight;
  const double height = kMemTop + kMemPlotHeight + kMemBottom;
  appendf(out,
          "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
          "aria-label=\"memory over time\">\n",
          kSvgWidth, height);
  if (!any) {
    appendf(
        out,
        "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" class=\"muted\">no memory samples in the trace</text>\n",
        kSvgWidth / 2, height / 2);
    out += "</svg>\n";
    return;
  }

  // Y axis: ticks at a nice step of the largest binary unit below the peak (GiB, MiB, ...).
  double unit = 1;
  while (unit * 1024 <= static_cast<double>(y_max)) unit *= 1024;
  const double y_step = nice_step(static_cast<double>(y_max) / unit, 5) * unit;
  const double y_top_value = std::max(1.0, std::ceil(static_cast<double>(y_max) * 1.06 / y_step) * y_step);
  auto Y = [&](double v) { return kMemTop + kMemPlotHeight - v / y_top_value * kMemPlotHeight; };
  out += "<g class=\"grid\">\n";
  for (int i = 0; i * y_step <= y_top_value * (1 + 1e-9); ++i) {
    const double v = i * y_step;
    appendf(out, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\"/>", kMemLeft, kMemLeft + plot_w, Y(v), Y(v));
    appendf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" dy=\"0.32em\">%s</text>\n", kMemLeft - 6, Y(v),
            esc(format_bytes(static_cast<int64_t>(std::llround(v)))).c_str());
  }
  // X axis: time since the start of each trace.
  const double dur_s = seconds(duration);
  const double x_step = nice_step(dur_s, 8);
  const double px_per_ns = plot_w / static_cast<double>(duration);
  for (int i = 0; i * x_step <= dur_s * (1 + 1e-9); ++i) {
    const double v = i * x_step;
    const double x = kMemLeft + v / dur_s * plot_w;
    appendf(out, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\"/>", x, x, kMemTop, kMemTop + kMemPlotHeight);
    appendf(out, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%s</text>\n", x, kMemTop + kMemPlotHeight + 16,
            esc(format_duration_s(v)).c_str());
  }
  out += "</g>\n";
  appendf(out, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" class=\"axis-title\">time since step start</text>\n",
          kMemLeft + plot_w / 2, height - 4);

  // Where the timeline window and stage 2 are (predicted time base).
  const int64_t origin = trace_origin(*in.predicted);
  if (!pred_window.empty) {
    const double x0 = kMemLeft + static_cast<double>(pred_window.t0 - origin) * px_per_ns;
    const double w = std::max(2.0, static_cast<double>(pred_window.length()) * px_per_ns);
    appendf(
        out,
        "<rect class=\"window\" x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\"><title>stream timeline window: "
        "%s .. %s</title></rect>\n",
        x0, kMemTop, w, kMemPlotHeight, esc(format_duration_s(seconds(pred_window.t0 - origin))).c_str(),
        esc(format_duration_s(seconds(pred_window.t1 - origin))).c_str());
  }
  const int64_t s2 = stage2_start(*in.predicted);
  if (s2 >= 0) {
    const double x = kMemLeft + static_cast<double>(s2 - origin) * px_per_ns;
    appendf(out, "<line class=\"stage\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\"/>", x, x, kMemTop,
            kMemTop + kMemPlotHeight);
    appendf(out, "<text x=\"%.1f\" y=\"%.0f\" class=\"stage-label\">stage 2 &#8594;</text>\n", x + 4, kMemTop + 12);
  }

  // Lines, with a legend across the top.
  double legend_x = kMemLeft;
  for (const Series& s : series) {
    const int64_t o = trace_origin(*s.trace);
    for (int which = 0; which < 2; ++which) {
      std::vector<std::pair<int64_t, int64_t>> pts;
      pts.reserve(s.trace->memory.size());
      int64_t peak = 0;
      for (const MemorySample& m : s.trace->memory) {
        const int64_t v = which == 0 ? m.device_bytes : m.host_bytes;
        pts.emplace_back(m.t_ns, v);
        peak = std::max(peak, v);
      }
      if (pts.empty()) continue;
      const char* color = which == 0 ? kDeviceColor : kHostColor;
      const std::string label = std::string(which == 0 ? "device" : "host") +
                                (s.measured ? " (measured)" : " (predicted)") + ", peak " + format_bytes(peak);
      const std::string d =
          step_path(std::move(pts), o, trace_end(*s.trace), kMemLeft, px_per_ns, kMemTop, kMemPlotHeight, y_top_value);
      appendf(out, "<path class=\"series%s\" stroke=\"%s\" d=\"%s\"><title>%s</title></path>\n",
              s.measured ? " measured" : "", color, d.c_str(), esc(label).c_str());
      appendf(out,
              "<line class=\"series%s\" stroke=\"%s\" x1=\"%.0f\" x2=\"%.0f\" y1=\"14\" y2=\"14\"/><text x=\"%.0f\" "
              "y=\"18\">%s</text>\n",
              s.measured ? " measured" : "", color, legend_x, legend_x + 26, legend_x + 32, esc(label).c_str());
      legend_x += 32 + 6.4 * static_cast<double>(label.size()) + 24;
    }
  }
  out += "</svg>\n";
}

// ---- stream timeline -----------------------------------------------------------------------

struct LaneSet {
  const Trace* trace;
  std::string label;
  Span span;
  std::vector<const Event*> lanes[kLanes];
  size_t events = 0;
};

LaneSet collect_lanes(const Trace& t, std::string label, const Span& span) {
  LaneSet s{&t, std::move(label), span, {}, 0};
  for (const Event& e : t.events) {
    const int lane = lane_of(e);
    if (lane < 0 || !overlaps(e, span)) continue;
    s.lanes[lane].push_back(&e);
    ++s.events;
  }
  for (auto& lane : s.lanes)
    std::stable_sort(lane.begin(), lane.end(),
                     [](const Event* a, const Event* b) { return a->start_ns < b->start_ns; });
  return s;
}

std::string index_text(const Event& e) {
  std::string s;
  auto add = [&](const char* what, int64_t v) {
    if (v < 0) return;
    s += s.empty() ? "" : ", ";
    s += what + std::to_string(v);
  };
  add("stage ", e.stage);
  add("chunk ", e.chunk);
  add("layer ", e.layer);
  return s;
}

std::string event_tooltip(const Event& e, int64_t origin) {
  std::string s = op_of(e);
  if (!e.name.empty() && e.name != s) s += " (" + e.name + ")";
  const std::string idx = index_text(e);
  if (!idx.empty()) s += "\n" + idx;
  s += "\nduration " + format_duration_s(seconds(e.duration_ns()));
  if (e.bytes != 0) s += ", bytes " + format_bytes(e.bytes);
  if (e.duration_ns() > 0 && e.bytes != 0 && e.kind != EventKind::compute)
    s += " (" + format_rate_bytes_per_s(static_cast<double>(e.bytes) / seconds(e.duration_ns())) + ")";
  if (e.flops > 0 && e.duration_ns() > 0) s += ", " + format_flops_per_s(e.flops / seconds(e.duration_ns()));
  s += "\nstarts at " + format_duration_s(seconds(e.start_ns - origin));
  return s;
}

// A short label drawn inside a wide rect: "s2 c63" or "s1 c4 L12".
std::string short_label(const Event& e) {
  std::string s;
  auto add = [&](const char* p, int64_t v) {
    if (v < 0) return;
    s += (s.empty() ? "" : " ") + std::string(p) + std::to_string(v);
  };
  add("s", e.stage);
  add("c", e.chunk);
  add("L", e.layer);
  return s;
}

struct Run {
  double x0 = 0, x1 = 0;
  std::vector<const Event*> events;
};

// Draws one set of `lanes` lanes at y; returns the number of event rects drawn.
size_t draw_lanes(std::string& out, const LaneSet& set, double y, double px_per_ns, bool merge, int lanes) {
  const double x_left = kLaneLeft, x_right = kSvgWidth - kLaneRight;
  const int64_t origin = trace_origin(*set.trace);
  appendf(out, "<text x=\"4\" y=\"%.1f\" class=\"set-label\">%s</text>\n", y + 15, esc(set.label).c_str());
  if (set.events > 0) {
    std::string note = std::to_string(set.events) + " events, window starts at " +
                       format_duration_s(seconds(set.span.t0 - origin)) + ", lasts " +
                       format_duration_s(seconds(set.span.length()));
    if (merge) note += "; events closer than 1 px merged";
    appendf(out, "<text x=\"%.0f\" y=\"%.1f\" class=\"muted\">%s</text>\n", x_left, y + 15, esc(note).c_str());
  } else {
    appendf(out, "<text x=\"%.0f\" y=\"%.1f\" class=\"muted\">no events in this window</text>\n", x_left, y + 15);
  }
  size_t rects = 0;
  auto X = [&](int64_t t) {
    return std::clamp(x_left + static_cast<double>(t - set.span.t0) * px_per_ns, x_left, x_right);
  };
  for (int lane = 0; lane < lanes; ++lane) {
    const double ly = y + kSetHeader + lane * (kLaneHeight + kLaneGap);
    appendf(out, "<rect class=\"lane\" x=\"%.0f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\"/>", x_left, ly,
            x_right - x_left, kLaneHeight);
    appendf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" class=\"lane-label\">%s</text>\n", x_left - 8,
            ly + kLaneHeight / 2 + 4, to_string(kLaneOrder[lane]));

    auto emit_one = [&](const Event& e) {
      const double x0 = X(e.start_ns);
      const double w = std::max(kMinRectWidth, X(e.end_ns) - x0);
      const std::string op = op_of(e);
      // Wide rects get a hairline so back-to-back events of one op stay apart; narrow ones none,
      // or the outline would paint over them.
      appendf(out,
              "<rect class=\"ev\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" "
              "fill=\"%s\"%s><title>%s</title></rect>",
              x0, ly, w, kLaneHeight, op_fill(op).c_str(), w >= kOutlineMinWidth ? " stroke=\"#fff\"" : "",
              esc(event_tooltip(e, origin)).c_str());
      const std::string text = short_label(e);
      if (!text.empty() && w > 7.0 * static_cast<double>(text.size()) + 8)
        appendf(out, "<text x=\"%.1f\" y=\"%.1f\" class=\"in-rect\">%s</text>", x0 + 4, ly + kLaneHeight / 2 + 4,
                esc(text).c_str());
      out += "\n";
      ++rects;
    };
    auto emit_run = [&](const Run& r) {
      if (r.events.size() == 1) return emit_one(*r.events[0]);
      std::set<std::string> ops;
      int64_t busy = 0, bytes = 0, c_lo = INT64_MAX, c_hi = -1;
      for (const Event* e : r.events) {
        ops.insert(op_of(*e));
        busy += e->duration_ns();
        bytes += e->bytes;
        if (e->chunk >= 0) c_lo = std::min(c_lo, e->chunk), c_hi = std::max(c_hi, e->chunk);
      }
      std::string tip = std::to_string(r.events.size()) + " events merged (each under 1 px)\nops:";
      for (const std::string& op : ops) tip += " " + op;
      if (c_hi >= 0) tip += "\nchunks " + std::to_string(c_lo) + ".." + std::to_string(c_hi);
      tip += "\nbusy " + format_duration_s(seconds(busy));
      if (bytes != 0) tip += ", bytes " + format_bytes(bytes);
      tip += "\nfrom " + format_duration_s(seconds(r.events.front()->start_ns - origin));
      const std::string color = ops.size() == 1 ? op_fill(*ops.begin()) : std::string(kMixedColor);
      appendf(out,
              "<rect class=\"ev\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" "
              "fill=\"%s\"><title>%s</title></rect>\n",
              r.x0, ly, std::max(kMinRectWidth, r.x1 - r.x0), kLaneHeight, color.c_str(), esc(tip).c_str());
      ++rects;
    };

    const auto& events = set.lanes[lane];
    if (!merge) {
      for (const Event* e : events) emit_one(*e);
      continue;
    }
    // Merge while the run is under a pixel and the next event starts within a pixel of it: rects
    // are then either >= 1 px wide or separated by >= 1 px, at most ~2 per pixel per lane.
    Run run;
    for (const Event* e : events) {
      const double x0 = X(e->start_ns), x1 = X(e->end_ns);
      if (!run.events.empty() && run.x1 - run.x0 < 1.0 && x0 - run.x1 < 1.0) {
        run.x1 = std::max(run.x1, x1);
        run.events.push_back(e);
        continue;
      }
      if (!run.events.empty()) emit_run(run);
      run = Run{x0, x1, {e}};
    }
    if (!run.events.empty()) emit_run(run);
  }
  return rects;
}

void timeline_chart(std::string& out, const std::vector<LaneSet>& sets) {
  const double plot_w = kSvgWidth - kLaneLeft - kLaneRight;
  int64_t length = 1;
  for (const LaneSet& s : sets) length = std::max(length, s.span.length());
  const double px_per_ns = plot_w / static_cast<double>(length);
  int lanes = kLanes - 1;
  for (const LaneSet& s : sets)
    if (!s.lanes[kLanes - 1].empty()) lanes = kLanes;
  const double set_h = kSetHeader + lanes * (kLaneHeight + kLaneGap) + 8;
  const double axis_y = 6 + set_h * static_cast<double>(sets.size());
  const double height = axis_y + 40;
  appendf(out,
          "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
          "aria-label=\"stream timeline\">\n",
          kSvgWidth, height);
  double y = 6;
  for (const LaneSet& s : sets) {
    draw_lanes(out, s, y, px_per_ns, s.events > kReportMergeEvents, lanes);
    y += set_h;
  }
  // Time axis, relative to each set's window start (sets share the scale, so durations compare).
  const double len_s = seconds(length);
  const double step = nice_step(len_s, 10);
  out += "<g class=\"grid\">\n";
  appendf(out, "<line x1=\"%.0f\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", kLaneLeft, kLaneLeft + plot_w, axis_y,
          axis_y);
  for (int i = 0; i * step <= len_s * (1 + 1e-9); ++i) {
    const double v = i * step;
    const double x = kLaneLeft + v / len_s * plot_w;
    appendf(out, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>", x, x, axis_y, axis_y + 5);
    appendf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">+%s</text>\n", x, axis_y + 18,
            esc(format_duration_s(v)).c_str());
  }
  out += "</g>\n";
  appendf(out,
          "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" class=\"axis-title\">time since window start</text>\n",
          kLaneLeft + plot_w / 2, height - 4);
  out += "</svg>\n";
}

// ---- page ----------------------------------------------------------------------------------

constexpr const char* kCss = R"(
*{box-sizing:border-box}
body{margin:0;background:#fff;color:#1d2330;
  font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:18px 20px 40px}
h1{font-size:23px;margin:6px 0 2px}
h2{font-size:17px;margin:30px 0 8px;padding-bottom:4px;border-bottom:1px solid #dde2ea}
p{margin:4px 0 8px}
.sub,.muted,.hint{color:#5b6577}
.hint{font-size:12.5px}
.facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:3px 26px;margin:12px 0 4px}
.facts div{display:flex;gap:10px;border-bottom:1px solid #eef0f4;padding:2px 0}
.facts .k{color:#5b6577;flex:0 0 150px;white-space:nowrap}
.facts .v{font-weight:500;overflow-wrap:anywhere}
svg.chart{display:block;width:100%;height:auto;margin:6px 0}
svg text{font-size:12px;fill:#3b4252}
svg .muted{fill:#6b7385}
svg .axis-title{fill:#6b7385;font-size:11.5px}
svg .grid line{stroke:#e4e8ef;stroke-width:1}
svg .series{fill:none;stroke-width:2;stroke-linejoin:round}
svg .series.measured{stroke-dasharray:7 4}
svg .window{fill:#f6d365;fill-opacity:.28}
svg .stage{stroke:#8a93a6;stroke-dasharray:3 3}
svg .stage-label{fill:#6b7385;font-size:11.5px}
svg .lane{fill:#f4f6f9}
svg .lane-label{font-weight:600}
svg .set-label{font-weight:700;font-size:12.5px}
svg .ev{stroke-width:.6}
svg .in-rect{fill:#fff;font-size:11px;pointer-events:none}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;font-size:12.5px;margin:2px 0 0 150px}
.legend span{display:inline-flex;align-items:center;gap:6px}
.legend i{display:inline-block;width:14px;height:11px;border-radius:2px}
table.terms{border-collapse:collapse;width:100%;margin-top:6px}
table.terms th,table.terms td{padding:5px 10px;border-bottom:1px solid #e8ebf0;text-align:left;vertical-align:top}
table.terms th{background:#f4f6f9;font-weight:600}
table.terms td.num,table.terms th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.terms td.name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px}
.ok{color:#1a7f37;font-weight:700}
.bad{color:#cf222e;font-weight:700}
tr.fail td{background:#fff5f5}
td.failcell{background:#ffe3e3}
.binds{background:#fff1c2;color:#7a5200;font-weight:700;padding:1px 6px;border-radius:3px}
footer{margin-top:30px;color:#8a93a6;font-size:12px}
)";

std::string window_text(const ReportInput& in, int64_t b, int64_t e, bool automatic) {
  int64_t lo = INT64_MAX, hi = -1;
  for (const Event& ev : in.predicted->events)
    if (lane_of(ev) >= 0 && ev.chunk >= 0) lo = std::min(lo, ev.chunk), hi = std::max(hi, ev.chunk);
  const std::string of = hi >= 0 ? " of " + std::to_string(lo) + ".." + std::to_string(hi) : "";
  if (b < 0) return "The whole step" + std::string(automatic ? " (the trace is small)." : ".");
  std::string s =
      (b == e ? "Chunk " + std::to_string(b) : "Chunks " + std::to_string(b) + ".." + std::to_string(e)) + of;
  if (automatic) s += ": the last two chunks of stage 1 and the first two of stage 2 (stage 2 runs chunks in reverse)";
  return s + ". Copies overlapping the window are drawn clipped to it.";
}

// ---- ranks ---------------------------------------------------------------------------------

std::string ok_mark(const std::optional<bool>& ok) {
  if (!ok) return "—";
  return *ok ? "<span class=\"ok\">✓</span>" : "<span class=\"bad\">✗</span>";
}

// The ranks of a multi-rank run: one row each (its file, verdict, step, peak and collectives),
// the binding rank marked.
void ranks_table(std::string& h, const std::vector<ReportRank>& ranks) {
  std::vector<std::pair<std::string, std::string>> columns;  // collective name, unit (first seen)
  for (const ReportRank& r : ranks)
    for (const ReportFigure& f : r.collectives)
      if (std::none_of(columns.begin(), columns.end(), [&](const auto& c) { return c.first == f.name; }))
        columns.emplace_back(f.name, f.unit);
  int judged_ok = 0, missing = 0;
  const ReportRank* binding = nullptr;
  for (const ReportRank& r : ranks) {
    judged_ok += r.ok.value_or(false);
    missing += !r.found;
    if (r.binds) binding = &r;
  }
  std::string line = std::to_string(judged_ok) + " of " + std::to_string(ranks.size()) + " ranks within tolerance";
  if (missing > 0) line += "; " + std::to_string(missing) + " trace" + (missing > 1 ? "s" : "") + " missing";
  if (binding)
    line += "; the step binds on rank " + std::to_string(binding->rank) + " (the slowest" +
            (missing > 0 ? " of the ranks found" : "") +
            (binding->step_s ? ", " + format_duration_s(*binding->step_s) : "") + ")";
  appendf(h, "<p>%s.</p>\n", esc(line).c_str());
  h += "<p class=\"hint\">Each rank's trace validated against the same plan (every rank's rows are the plan's, "
       "sharded). Step: the rank's fastest timed step as measured. The memory chart and stream timeline below "
       "are rank 0's.</p>\n";
  h += "<table class=\"terms ranks\">\n<thead><tr><th>rank</th><th>trace</th><th>found</th><th>ok</th>"
       "<th class=\"num\">step</th><th class=\"num\">device peak</th>";
  for (const auto& [name, unit] : columns) appendf(h, "<th class=\"num\">%s</th>", esc(name).c_str());
  h += "<th>binds</th></tr></thead>\n<tbody>\n";
  for (const ReportRank& r : ranks) {
    const bool bad = !r.found || (r.ok && !*r.ok);
    appendf(h, "<tr%s><td class=\"num\">%d</td><td class=\"name\">%s</td><td>%s</td><td>%s</td>",
            bad ? " class=\"fail\"" : "", r.rank, esc(r.trace).c_str(),
            r.found ? "yes" : "<span class=\"bad\">MISSING</span>", ok_mark(r.ok).c_str());
    appendf(h, "<td class=\"num\">%s</td><td class=\"num\">%s</td>",
            r.step_s ? esc(format_value(*r.step_s, "s")).c_str() : "—",
            r.peak_device_bytes ? esc(format_bytes(*r.peak_device_bytes)).c_str() : "—");
    for (const auto& [name, unit] : columns) {
      const auto it = std::find_if(r.collectives.begin(), r.collectives.end(),
                                   [&](const ReportFigure& f) { return f.name == name; });
      appendf(h, "<td class=\"num\">%s</td>",
              it == r.collectives.end() ? "—" : esc(format_value(it->value, it->unit)).c_str());
    }
    appendf(h, "<td>%s</td></tr>\n", r.binds ? "<span class=\"binds\">binds</span>" : "");
    if (!r.note.empty())
      appendf(h, "<tr class=\"note\"><td></td><td colspan=\"%zu\" class=\"muted\">%s</td></tr>\n",
              columns.size() + 6, esc(r.note).c_str());
  }
  h += "</tbody>\n</table>\n";
}

// Every rank's terms side by side: a row per term, a column per rank (measured, error, verdict);
// rows where the ranks measured different values are marked, failing cells shaded.
void rank_terms_table(std::string& h, const std::vector<ReportRank>& ranks) {
  std::vector<std::string> names;
  for (const ReportRank& r : ranks)
    for (const ReportTerm& t : r.terms)
      if (std::find(names.begin(), names.end(), t.name) == names.end()) names.push_back(t.name);
  if (names.empty()) {
    h += "<p class=\"muted\">No rank was judged.</p>\n";
    return;
  }
  auto term_of = [](const ReportRank& r, const std::string& name) -> const ReportTerm* {
    for (const ReportTerm& t : r.terms)
      if (t.name == name) return &t;
    return nullptr;
  };
  h += "<p class=\"hint\">Measured value, error against the prediction and verdict of every rank; "
       "<b>differs</b> marks terms the ranks measured differently, shaded cells are beyond tolerance.</p>\n";
  h += "<table class=\"terms\">\n<thead><tr><th>term</th><th class=\"num\">predicted</th>";
  for (const ReportRank& r : ranks)
    appendf(h, "<th class=\"num\">rank %d%s%s</th>", r.rank, r.found ? "" : " (missing)", r.binds ? " (binds)" : "");
  h += "<th>ranks</th></tr></thead>\n<tbody>\n";
  for (const std::string& name : names) {
    const ReportTerm* first = nullptr;
    std::optional<double> seen;
    bool differs = false, any_fail = false;
    for (const ReportRank& r : ranks) {
      const ReportTerm* t = term_of(r, name);
      if (!t) continue;
      if (!first) first = t;
      any_fail |= t->ok.has_value() && !*t->ok;
      if (t->measured) {
        if (seen && *seen != *t->measured) differs = true;
        if (!seen) seen = t->measured;
      }
    }
    appendf(h, "<tr%s><td class=\"name\">%s</td><td class=\"num\">%s</td>", any_fail ? " class=\"fail\"" : "",
            esc(name).c_str(), esc(format_value(first->predicted, first->unit)).c_str());
    for (const ReportRank& r : ranks) {
      const ReportTerm* t = term_of(r, name);
      if (!t) {
        h += "<td class=\"num muted\">—</td>";
        continue;
      }
      const bool failed = t->ok.has_value() && !*t->ok;
      std::string cell = t->measured ? esc(format_value(*t->measured, t->unit)) + " <span class=\"muted\">" +
                                           esc(format_signed_percent(t->error)) + "</span>"
                                     : "—";
      if (t->predicted != first->predicted)
        cell += "<br><span class=\"muted\">predicted " + esc(format_value(t->predicted, t->unit)) + "</span>";
      appendf(h, "<td class=\"num%s\">%s %s</td>", failed ? " failcell" : "", cell.c_str(), ok_mark(t->ok).c_str());
    }
    appendf(h, "<td>%s</td></tr>\n", differs ? "<b>differs</b>" : "");
  }
  h += "</tbody>\n</table>\n";
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::pair<int64_t, int64_t> auto_chunk_window(const Trace& t) {
  std::map<int64_t, int64_t> first[2];  // per stage: chunk -> first start
  std::set<int64_t> chunks;
  size_t lane_events = 0;
  for (const Event& e : t.events) {
    if (lane_of(e) < 0) continue;
    ++lane_events;
    if (e.chunk < 0) continue;
    chunks.insert(e.chunk);
    if (e.stage != 1 && e.stage != 2) continue;
    auto [it, fresh] = first[e.stage - 1].emplace(e.chunk, e.start_ns);
    if (!fresh) it->second = std::min(it->second, e.start_ns);
  }
  if (chunks.size() <= 4 || lane_events <= kReportSmallTraceEvents) return {-1, -1};
  auto in_time_order = [](const std::map<int64_t, int64_t>& m) {
    std::vector<std::pair<int64_t, int64_t>> v;  // (first start, chunk)
    for (const auto& [chunk, start] : m) v.emplace_back(start, chunk);
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto s1 = in_time_order(first[0]), s2 = in_time_order(first[1]);
  std::vector<int64_t> picked;
  for (size_t i = s1.size() >= 2 ? s1.size() - 2 : 0; i < s1.size(); ++i) picked.push_back(s1[i].second);
  for (size_t i = 0; i < std::min<size_t>(2, s2.size()); ++i) picked.push_back(s2[i].second);
  if (picked.empty()) {  // chunk indices but no stages: the first four chunks
    auto it = chunks.begin();
    for (int i = 0; i < 4; ++i, ++it) picked.push_back(*it);
  }
  return {*std::min_element(picked.begin(), picked.end()), *std::max_element(picked.begin(), picked.end())};
}

std::string html_report(const ReportInput& in) {
  OOMB_ASSERT(in.predicted != nullptr, "html_report needs a predicted trace");
  int64_t b = in.chunk_begin, e = in.chunk_end;
  const bool automatic = b < 0 && e < 0;
  if (automatic) {
    std::tie(b, e) = auto_chunk_window(*in.predicted);
  } else {
    if (b < 0) b = e;
    if (e < 0) e = b;
    if (e < b)
      throw Error("report", "chunk window",
                  "the window ends (" + std::to_string(e) + ") before it begins (" + std::to_string(b) + ")",
                  "expected chunk_begin <= chunk_end");
  }

  std::vector<LaneSet> sets;
  sets.push_back(collect_lanes(*in.predicted, "predicted", window_span(*in.predicted, b, e)));
  if (in.measured) {
    const std::string source = in.measured->metadata.source.empty() ? "" : " (" + in.measured->metadata.source + ")";
    sets.push_back(collect_lanes(*in.measured, "measured" + source, window_span(*in.measured, b, e)));
  }

  std::string h;
  h.reserve(64 * 1024);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  appendf(h, "<title>%s</title>\n<style>%s</style>\n</head>\n<body>\n<main>\n", esc(in.title).c_str(), kCss);

  // Header and facts.
  appendf(h, "<header>\n<h1>%s</h1>\n", esc(in.title).c_str());
  auto trace_line = [](const char* what, const Trace& t) {
    const Metadata& m = t.metadata;
    std::string s = std::string(what) + ": " + (m.source.empty() ? "trace" : m.source);
    if (!m.device.empty()) s += " on " + m.device;
    s += ", " + std::string(to_string(m.detail)) + " detail, " + std::to_string(t.events.size()) + " events, " +
         std::to_string(t.memory.size()) + " memory samples";
    if (!m.git_commit.empty()) s += ", commit " + m.git_commit;
    if (!m.time.empty()) s += ", " + m.time;
    if (m.dropped_records > 0) s += ", " + std::to_string(m.dropped_records) + " records dropped";
    return s;
  };
  appendf(h, "<p class=\"sub\">%s", esc(trace_line("predicted", *in.predicted)).c_str());
  if (in.measured) appendf(h, "<br>%s", esc(trace_line("measured", *in.measured)).c_str());
  h += "</p>\n";
  if (!in.facts.empty()) {
    h += "<div class=\"facts\">\n";
    for (const auto& [k, v] : in.facts)
      appendf(h, "<div><span class=\"k\">%s</span><span class=\"v\">%s</span></div>\n", esc(k).c_str(), esc(v).c_str());
    h += "</div>\n";
  }
  h += "</header>\n";

  if (!in.ranks.empty()) {
    appendf(h, "<section>\n<h2>Ranks (%zu processes)</h2>\n", in.ranks.size());
    ranks_table(h, in.ranks);
    h += "</section>\n";
  }

  // Memory over time.
  h += "<section>\n<h2>Memory over time</h2>\n";
  h += "<p class=\"hint\">Device and host bytes in use; predicted solid";
  if (in.measured) h += ", measured dashed";
  if (b >= 0) h += ". The shaded band is the window of the stream timeline below";
  h += ".</p>\n";
  memory_chart(h, in, b >= 0 ? sets[0].span : Span{});  // no band when the window is the whole step
  h += "</section>\n";

  // Stream timeline.
  h += "<section>\n<h2>Stream timeline</h2>\n";
  appendf(h, "<p>%s</p>\n", esc(window_text(in, b, e, automatic)).c_str());
  h += "<p class=\"hint\">Hover a bar for its op, stage, chunk, layer, duration and bytes.</p>\n";
  timeline_chart(h, sets);
  std::set<std::string> ops;
  for (const LaneSet& s : sets)
    for (const auto& lane : s.lanes)
      for (const Event* ev : lane) ops.insert(op_of(*ev));
  if (!ops.empty()) {
    h += "<div class=\"legend\">";
    for (const std::string& op : ops)
      appendf(h, "<span><i style=\"background:%s\"></i>%s</span>", op_fill(op).c_str(), esc(op).c_str());
    for (const LaneSet& s : sets)
      if (s.events > kReportMergeEvents) {
        appendf(h, "<span><i style=\"background:%s\"></i>several ops merged</span>", kMixedColor);
        break;
      }
    h += "</div>\n";
  }
  h += "</section>\n";

  // Terms.
  h += in.ranks.empty() ? "<section>\n<h2>Terms</h2>\n" : "<section>\n<h2>Terms (rank 0)</h2>\n";
  if (in.terms.empty()) {
    h += "<p class=\"muted\">No terms.</p>\n";
  } else {
    h += "<table class=\"terms\">\n<thead><tr><th>term</th><th class=\"num\">predicted</th><th "
         "class=\"num\">measured</th>"
         "<th class=\"num\">error</th><th class=\"num\">tolerance</th><th>ok</th><th>note</th></tr></thead>\n<tbody>\n";
    for (const ReportTerm& t : in.terms) {
      const bool failed = t.ok.has_value() && !*t.ok;
      std::string error = "—", measured = "—", tolerance = "—", ok = "—";
      if (t.measured) {
        measured = esc(format_value(*t.measured, t.unit));
        error = esc((t.error > 0 ? "+" : "") + format_percent(t.error));
      }
      if (t.tolerance > 0) tolerance = "±" + esc(format_percent(t.tolerance));
      if (t.ok) ok = *t.ok ? "<span class=\"ok\">✓</span>" : "<span class=\"bad\">✗</span>";
      appendf(
          h,
          "<tr%s><td class=\"name\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
          "<td class=\"num\">%s</td><td>%s</td><td class=\"muted\">%s</td></tr>\n",
          failed ? " class=\"fail\"" : "", esc(t.name).c_str(), esc(format_value(t.predicted, t.unit)).c_str(),
          measured.c_str(), error.c_str(), tolerance.c_str(), ok.c_str(), esc(t.note).c_str());
    }
    h += "</tbody>\n</table>\n";
  }
  h += "</section>\n";
  if (!in.ranks.empty()) {
    h += "<section>\n<h2>Terms by rank</h2>\n";
    rank_terms_table(h, in.ranks);
    h += "</section>\n";
  }
  h += "<footer>Written by oomb. Self-contained: inline CSS and SVG, no scripts or external resources.</footer>\n";
  h += "</main>\n</body>\n</html>\n";
  return h;
}

}  // namespace oomb::view
