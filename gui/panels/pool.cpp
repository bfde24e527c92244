// Device page-pool occupancy over the whole step (from the event simulation), against the pool's
// size; the time windows of the timeline's chunk range are shaded.
#include <algorithm>

#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

void draw_pool_panel(const ViewModel& vm) {
  const Timeline* t = vm.timeline();
  if (!vm.results().ok) {
    ImGui::TextDisabled("no result (see the summary)");
    return;
  }
  if (!t || !t->ok) {
    ImGui::TextDisabled(t && t->refused ? "no event simulation (see the timeline)" : "waiting for the event simulation ...");
    return;
  }
  const PoolSeries& p = t->pool;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float lh = ImGui::GetTextLineHeight();
  chart::Area a = chart::reserve("##pool", ImGui::GetContentRegionAvail().y);
  const ImVec2 pmin{a.min.x + lh * 3.5f, a.min.y + lh * 1.3f}, pmax{a.max.x - 6, a.max.y - lh * 1.3f};
  dl->AddRectFilled(pmin, pmax, IM_COL32(30, 30, 36, 255));
  dl->AddText({a.min.x, a.min.y}, IM_COL32(220, 220, 225, 255), "device pool pages in use over the step");
  if (p.t_s.empty() || p.step_s <= 0) return;
  int64_t top = std::max(p.pool_capacity_pages, p.pool_allocated_pages);
  for (int64_t v : p.pool_pages) top = std::max(top, v);
  const double ymax = static_cast<double>(std::max<int64_t>(top, 1)) * 1.1;
  auto px = [&](double s) { return pmin.x + static_cast<float>(s / p.step_s) * (pmax.x - pmin.x); };
  auto py = [&](double v) { return pmax.y - static_cast<float>(v / ymax) * (pmax.y - pmin.y); };
  // Chunk-range windows of the timeline.
  for (int st = 0; st < 2; ++st)
    if (t->stage_t1_ns[st] > t->stage_t0_ns[st])
      dl->AddRectFilled({px(static_cast<double>(t->stage_t0_ns[st]) * 1e-9), pmin.y},
                        {std::max(px(static_cast<double>(t->stage_t1_ns[st]) * 1e-9), px(static_cast<double>(t->stage_t0_ns[st]) * 1e-9) + 2), pmax.y},
                        IM_COL32(255, 255, 255, 30));
  // Time labels about 8 characters wide each: fewer of them when the panel is narrow (a multi-rank
  // overlay shares the row with the ranks panel).
  const int time_ticks = std::clamp(static_cast<int>((pmax.x - pmin.x) / (lh * 6.5f)), 2, 4);
  for (int k = 0; k <= 4; ++k) {
    const double v = ymax / 1.1 * k / 4.0;
    dl->AddLine({pmin.x, py(v)}, {pmax.x, py(v)}, chart::kGrid);
    const std::string txt = std::to_string(static_cast<long long>(v));
    dl->AddText({a.min.x, py(v) - lh / 2}, chart::kAxisText, txt.c_str());
  }
  for (int k = 0; k <= time_ticks; ++k) {
    const double s = p.step_s * k / time_ticks;
    const std::string ts = format_duration_s(s);
    const float w = ImGui::CalcTextSize(ts.c_str()).x;
    dl->AddText({std::clamp(px(s) - w / 2, pmin.x, pmax.x - w), pmax.y + 1}, chart::kAxisText, ts.c_str());
  }
  // Occupancy as a filled step curve.
  const ImU32 fill = IM_COL32(89, 161, 79, 140), line = IM_COL32(120, 200, 110, 255);
  for (size_t i = 0; i < p.t_s.size(); ++i) {
    const double t1 = i + 1 < p.t_s.size() ? p.t_s[i + 1] : p.step_s;
    const float x0 = px(p.t_s[i]), x1 = std::max(px(t1), x0 + 1);
    const float y = py(static_cast<double>(p.pool_pages[i]));
    dl->AddRectFilled({x0, y}, {x1, pmax.y}, fill);
    dl->AddLine({x0, y}, {x1, y}, line, 1.5f);
  }
  // A measured trace's pool occupancy over its own step (its time axis scaled to the same width:
  // a CPU run and a GPU prediction do not share a clock), as a white step line.
  if (const Overlay* o = vm.overlay(); o && !o->trace.memory.empty()) {
    const auto& mem = o->trace.memory;
    const double t0 = static_cast<double>(mem.front().t_ns);
    const double span = std::max(static_cast<double>(mem.back().t_ns) - t0, 1.0);
    auto mx_of = [&](double t_ns) { return pmin.x + static_cast<float>((t_ns - t0) / span) * (pmax.x - pmin.x); };
    const ImU32 white = IM_COL32(240, 240, 240, 230);
    for (size_t i = 0; i + 1 < mem.size(); ++i) {
      const float x0 = mx_of(static_cast<double>(mem[i].t_ns)), x1 = mx_of(static_cast<double>(mem[i + 1].t_ns));
      const float y0 = py(static_cast<double>(mem[i].pool_pages_used));
      const float y1 = py(static_cast<double>(mem[i + 1].pool_pages_used));
      dl->AddLine({x0, y0}, {x1, y0}, white, 1.5f);
      dl->AddLine({x1, y0}, {x1, y1}, white, 1.0f);
    }
    dl->AddText({pmin.x + 4, pmin.y + lh + 4}, white, "white: measured (its own step, scaled to this width)");
  }
  // Dense: one line, the pools' size. Sparse: the allocation (the union's bound) above the modelled
  // high-water (what --selection-overlap predicts the selections fill).
  auto level = [&](int64_t pages, ImU32 colour, const std::string& txt) {
    const float y = py(static_cast<double>(pages));
    chart::dashed_line(dl, {pmin.x, y}, {pmax.x, y}, colour, 6, 1.5f);
    dl->AddText({pmax.x - ImGui::CalcTextSize(txt.c_str()).x - 4, y - lh - 1}, colour, txt.c_str());
  };
  const bool bound_above = p.pool_allocated_pages > p.pool_capacity_pages;
  if (bound_above)
    level(p.pool_allocated_pages, chart::kOomRed,
          "pools allocated " + std::to_string(p.pool_allocated_pages) + " pages (the union's bound)");
  if (p.pool_capacity_pages > 0)
    level(p.pool_capacity_pages, bound_above ? IM_COL32(230, 170, 60, 255) : chart::kOomRed,
          (bound_above ? "modelled high-water " : "pool size ") + std::to_string(p.pool_capacity_pages) + " pages");
  if (a.hovered) {
    const float mx = ImGui::GetIO().MousePos.x;
    const double s = (mx - pmin.x) / (pmax.x - pmin.x) * p.step_s;
    const auto it = std::upper_bound(p.t_s.begin(), p.t_s.end(), s);
    if (it != p.t_s.begin()) {
      const size_t i = static_cast<size_t>(it - p.t_s.begin()) - 1;
      ImGui::SetTooltip("t = %s: %lld pool pages in use (of %lld), device %s\n(maximum over %s buckets)",
                        format_duration_s(p.t_s[i]).c_str(), static_cast<long long>(p.pool_pages[i]),
                        static_cast<long long>(p.pool_capacity_pages), format_bytes(p.device_bytes[i]).c_str(),
                        format_duration_s(p.step_s / static_cast<double>(p.t_s.size())).c_str());
    }
  }
}

}  // namespace oomb::gui
