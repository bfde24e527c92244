// Memory vs context and step time vs context (log-log) for oomb dense, oomb sparse and standard
// under the current knobs; the device capacity (OOM line) and the current context are marked.
// Infeasible points are drawn hollow.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

namespace {

enum class Quantity { memory, time };

// Round tick values: powers of two for bytes (1 GiB, 8 GiB, ...), clock units for time.
std::vector<double> y_ticks(Quantity q, double lo, double hi) {
  std::vector<double> t;
  if (q == Quantity::memory) {
    const int e0 = static_cast<int>(std::ceil(std::log2(lo))), e1 = static_cast<int>(std::floor(std::log2(hi)));
    const int step = std::max(1, (e1 - e0 + 4) / 5);
    for (int e = (e0 + step - 1) / step * step; e <= e1; e += step) t.push_back(std::exp2(e));
  } else {
    for (double v : {1e-3, 1e-2, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 36000.0, 360000.0, 3600000.0})
      if (v >= lo && v <= hi) t.push_back(v);
    if (t.size() > 6) {
      std::vector<double> half;
      for (size_t i = 0; i < t.size(); i += 2) half.push_back(t[i]);
      t = half;
    }
  }
  return t;
}

void curve_chart(const char* id, const Results& r, Quantity q, float width, float height) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float lh = ImGui::GetTextLineHeight();
  chart::Area a = chart::reserve(id, height, width);
  const ImVec2 plot_min{a.min.x + lh * 4.2f, a.min.y + lh * 1.3f}, plot_max{a.max.x - 6, a.max.y - lh * 1.3f};
  dl->AddRectFilled(plot_min, plot_max, IM_COL32(30, 30, 36, 255));
  auto value = [&](const CurvePoint& p) {
    return q == Quantity::memory ? static_cast<double>(p.peak_device_bytes) : p.step_s;
  };
  double lo = INFINITY, hi = 0;
  for (const auto& c : r.curves)
    for (const auto& p : c.points)
      if (p.valid && value(p) > 0) {
        lo = std::min(lo, value(p));
        hi = std::max(hi, value(p));
      }
  const double cap = static_cast<double>(r.scenario.gpu.hbm_capacity_bytes);
  if (q == Quantity::memory) {
    lo = std::min(lo, cap);
    hi = std::max(hi, cap);
  }
  if (!(hi > 0)) return;
  const auto ctx = ViewModel::curve_contexts();
  chart::LogAxis xa{static_cast<double>(ctx.front()), static_cast<double>(ctx.back()), plot_min.x, plot_max.x};
  chart::LogAxis ya{lo / 1.5, hi * 1.5, plot_max.y, plot_min.y};
  // Grid: every other context on x, decades on y.
  for (size_t i = 0; i < ctx.size(); i += 2) {
    const float x = xa.map(static_cast<double>(ctx[i]));
    dl->AddLine({x, plot_min.y}, {x, plot_max.y}, chart::kGrid);
    const std::string t = format_tokens(ctx[i]);
    dl->AddText({x - ImGui::CalcTextSize(t.c_str()).x / 2, plot_max.y + 2}, chart::kAxisText, t.c_str());
  }
  for (double d : y_ticks(q, ya.lo, ya.hi)) {
    const float y = ya.map(d);
    dl->AddLine({plot_min.x, y}, {plot_max.x, y}, chart::kGrid);
    const std::string t = q == Quantity::memory ? format_bytes(static_cast<int64_t>(d)) : format_duration_s(d);
    dl->AddText({a.min.x, y - lh / 2}, chart::kAxisText, t.c_str());
  }
  dl->PushClipRect(plot_min, plot_max, true);
  if (q == Quantity::memory) {
    const float y = ya.map(cap);
    chart::dashed_line(dl, {plot_min.x, y}, {plot_max.x, y}, chart::kOomRed, 6, 1.5f);
    dl->AddText({plot_min.x + 4, y - lh - 1}, chart::kOomRed, ("OOM: " + format_bytes(static_cast<int64_t>(cap))).c_str());
  }
  const float cx = xa.map(static_cast<double>(r.scenario.config.context_tokens));
  dl->AddLine({cx, plot_min.y}, {cx, plot_max.y}, chart::kCurrent, 1.0f);
  for (size_t ci = 0; ci < r.curves.size(); ++ci) {
    const auto& c = r.curves[ci];
    const ImU32 col = chart::series_color(static_cast<int>(ci));
    ImVec2 prev{};
    bool have_prev = false;
    for (const auto& p : c.points) {
      if (!p.valid || value(p) <= 0) {
        have_prev = false;
        continue;
      }
      const ImVec2 pt{xa.map(static_cast<double>(p.context_tokens)), ya.map(value(p))};
      if (have_prev) dl->AddLine(prev, pt, col, 2.0f);
      if (p.feasible) dl->AddCircleFilled(pt, 3.0f, col);
      else dl->AddCircle(pt, 3.5f, col, 0, 1.5f);
      prev = pt;
      have_prev = true;
    }
  }
  dl->PopClipRect();
  // Title and legend.
  dl->AddText({plot_min.x, a.min.y}, IM_COL32(220, 220, 225, 255),
              q == Quantity::memory ? "peak device memory vs context" : "step time vs context");
  // Hover: nearest context, all curves.
  if (a.hovered) {
    const double mx = xa.unmap(ImGui::GetIO().MousePos.x);
    size_t best = 0;
    for (size_t i = 1; i < ctx.size(); ++i)
      if (std::abs(std::log(static_cast<double>(ctx[i]) / mx)) < std::abs(std::log(static_cast<double>(ctx[best]) / mx)))
        best = i;
    const float x = xa.map(static_cast<double>(ctx[best]));
    dl->AddLine({x, plot_min.y}, {x, plot_max.y}, IM_COL32(255, 255, 255, 60));
    ImGui::BeginTooltip();
    ImGui::Text("%s tokens", format_tokens(ctx[best]).c_str());
    for (size_t ci = 0; ci < r.curves.size(); ++ci) {
      const auto& p = r.curves[ci].points[best];
      ImGui::PushStyleColor(ImGuiCol_Text, chart::series_color(static_cast<int>(ci)));
      if (!p.valid)
        ImGui::Text("%-12s invalid: %s", r.curves[ci].label.c_str(), p.invalid.c_str());
      else
        ImGui::Text("%-12s %s device, %s host, step %s  %s (%s)", r.curves[ci].label.c_str(),
                    format_bytes(p.peak_device_bytes).c_str(), format_bytes(p.peak_host_bytes).c_str(),
                    format_duration_s(p.step_s).c_str(), p.feasible ? "fits" : "DOES NOT FIT", to_string(p.binding));
      ImGui::PopStyleColor();
    }
    ImGui::TextDisabled("simulator::evaluate with the current knobs, schedule/attention per curve");
    ImGui::EndTooltip();
  }
}

}  // namespace

void draw_curves_panel(const ViewModel& vm) {
  const Results& r = vm.results();
  if (!r.ok) {
    ImGui::TextDisabled("no result (see the summary)");
    return;
  }
  for (size_t ci = 0; ci < r.curves.size(); ++ci) {
    if (ci) ImGui::SameLine();
    ImGui::PushStyleColor(ImGuiCol_Text, chart::series_color(static_cast<int>(ci)));
    ImGui::Bullet();
    ImGui::SameLine(0, 2);
    ImGui::TextUnformatted(r.curves[ci].label.c_str());
    ImGui::PopStyleColor();
  }
  ImGui::SameLine();
  ImGui::TextDisabled("  hollow: does not fit");
  const float w = (ImGui::GetContentRegionAvail().x - ImGui::GetStyle().ItemSpacing.x) / 2;
  const float h = ImGui::GetContentRegionAvail().y;
  curve_chart("##mem_curve", r, Quantity::memory, w, h);
  ImGui::SameLine();
  curve_chart("##time_curve", r, Quantity::time, w, h);
}

}  // namespace oomb::gui
