// Memory breakdown: a stacked bar of the device bytes alive at the peak phase by category against
// the device capacity, a host bar against host RAM (pinnable marked), and the rows of the memory
// table with their phases and formulas.
#include <algorithm>
#include <map>

#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

namespace {

using step::BufferRow;
using step::Tier;

// One stacked bar: segments per category (in table order), capacity lines, hover = category rows.
// Only the rows alive in `phases` count (the peak phase; all bits for the host).
void stacked_bar(const char* id, const std::vector<step::BufferRow>& rows, step::Tier tier, step::PhaseMask phases, int64_t total,
                 int64_t capacity, const char* capacity_label, int64_t second_line, const char* second_label) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float label_h = ImGui::GetTextLineHeight();
  chart::Area a = chart::reserve(id, label_h * 2.6f);
  const float bar_y0 = a.min.y + label_h * 1.2f, bar_y1 = a.max.y - 2;
  const double scale_max = static_cast<double>(std::max({total, capacity, int64_t{1}})) * 1.02;
  auto px = [&](double v) { return a.min.x + static_cast<float>(v / scale_max) * a.w(); };
  dl->AddRectFilled({a.min.x, bar_y0}, {a.max.x, bar_y1}, IM_COL32(40, 40, 48, 255));
  std::vector<std::string> order;
  std::map<std::string, int64_t> by_cat;
  for (const auto& r : rows)
    if (r.tier == tier && r.bytes > 0 && (r.phases & phases)) {
      if (!by_cat.count(r.category)) order.push_back(r.category);
      by_cat[r.category] += r.bytes;
    }
  double x = 0;
  std::string hovered;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  for (const auto& cat : order) {
    const float x0 = px(x), x1 = px(x + static_cast<double>(by_cat[cat]));
    dl->AddRectFilled({x0, bar_y0}, {std::max(x1, x0 + 1), bar_y1}, chart::category_color(cat));
    if (x1 - x0 > 3) dl->AddLine({x1, bar_y0}, {x1, bar_y1}, IM_COL32(20, 20, 20, 255));
    if (a.hovered && mouse.x >= x0 && mouse.x < x1) hovered = cat;
    x += static_cast<double>(by_cat[cat]);
  }
  const float cx = px(static_cast<double>(capacity));
  if (total > capacity) dl->AddRectFilled({cx, bar_y0}, {px(static_cast<double>(total)), bar_y1}, IM_COL32(255, 40, 40, 70));
  dl->AddLine({cx, a.min.y + label_h}, {cx, a.max.y}, chart::kOomRed, 2.0f);
  // Labels: capacity next to its line, the total at the other end, so that they never overlap.
  const std::string cap_text = std::string(capacity_label) + " " + format_bytes(capacity);
  const float tw = ImGui::CalcTextSize(cap_text.c_str()).x;
  const bool cap_left = cx < (a.min.x + a.max.x) / 2;
  dl->AddText({cap_left ? cx + 4 : std::max(a.min.x, cx - tw - 4), a.min.y}, chart::kOomRed, cap_text.c_str());
  if (second_line > 0 && second_line != capacity) {
    const float sx = px(static_cast<double>(second_line));
    chart::dashed_line(dl, {sx, bar_y0 - 2}, {sx, a.max.y}, IM_COL32(255, 190, 80, 255), 3, 1.5f);
    if (a.hovered && std::abs(mouse.x - sx) < 3)
      ImGui::SetTooltip("%s: %s", second_label, format_bytes(second_line).c_str());
  }
  const std::string used = format_bytes(total) + (total > capacity ? " needed" : " used");
  const float uw = ImGui::CalcTextSize(used.c_str()).x;
  dl->AddText({cap_left ? a.max.x - uw - 2 : a.min.x + 2, a.min.y}, total > capacity ? chart::kOomRed : IM_COL32(230, 230, 230, 255),
              used.c_str());
  if (!hovered.empty()) {
    ImGui::BeginTooltip();
    ImGui::Text("%s: %s (%s of the total)", hovered.c_str(), format_bytes(by_cat[hovered]).c_str(),
                format_percent(static_cast<double>(by_cat[hovered]) / static_cast<double>(std::max<int64_t>(total, 1))).c_str());
    for (const auto& r : rows)
      if (r.tier == tier && r.category == hovered && r.bytes > 0 && (r.phases & phases))
        ImGui::BulletText("%s  %s  %s\n%s", r.name.c_str(), format_bytes(r.bytes).c_str(), r.shape.c_str(),
                          r.formula.c_str());
    ImGui::EndTooltip();
  }
}

}  // namespace

void draw_memory_panel(const ViewModel& vm) {
  const Results& r = vm.results();
  if (!r.ok) {
    ImGui::TextDisabled("no result (see the summary)");
    return;
  }
  const auto& s = r.scenario;
  const step::Phase peak = r.table.device_peak().phase;
  ImGui::TextDisabled("Device (per GPU), at the peak phase: %s", step::to_string(peak));
  std::string by_phase;
  for (step::Phase p : step::phases_of(r.table.schedule))
    by_phase += std::string(by_phase.empty() ? "" : "\n") + step::to_string(p) + ": " +
                format_bytes(r.table.device_bytes_in(p)) + (p == peak ? "  (peak)" : "");
  chart::formula_tooltip("device bytes alive per phase (pools at their allocated size):\n" + by_phase);
  stacked_bar("##device", r.table.rows, step::Tier::device, step::phase_bit(peak), r.summary.peak_device_bytes,
              s.gpu.hbm_capacity_bytes, ("HBM " + s.gpu.id).c_str(), 0, "");
  ImGui::TextDisabled("Host");
  stacked_bar("##host", r.table.rows, step::Tier::host, ~step::PhaseMask{0}, r.summary.peak_host_bytes, s.host.ram_bytes,
              ("RAM " + s.host.id).c_str(), s.host.pinnable_bytes, "pinnable");

  // Every column as wide as its widest cell (names, tiers and byte figures are never cut); a panel
  // narrower than the table scrolls sideways with the buffer names frozen on the left.
  const ImGuiTableFlags flags = ImGuiTableFlags_ScrollX | ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  if (ImGui::BeginTable("rows", 5, flags, ImGui::GetContentRegionAvail())) {
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("buffer");
    ImGui::TableSetupColumn("tier");
    ImGui::TableSetupColumn("bytes");
    ImGui::TableSetupColumn("share");
    ImGui::TableSetupColumn("phases");
    ImGui::TableHeadersRow();
    std::vector<const step::BufferRow*> rows;
    for (const auto& b : r.table.rows)
      if (b.bytes > 0) rows.push_back(&b);
    std::stable_sort(rows.begin(), rows.end(), [](auto* x, auto* y) { return x->bytes > y->bytes; });
    for (const auto* b : rows) {
      const bool dev = b->tier == step::Tier::device;
      const int64_t total = dev ? r.summary.peak_device_bytes : r.summary.peak_host_bytes;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const ImVec2 p = ImGui::GetCursorScreenPos();
      const float sq = ImGui::GetTextLineHeight() * 0.7f;
      ImGui::GetWindowDrawList()->AddRectFilled({p.x, p.y + 2}, {p.x + sq, p.y + 2 + sq}, chart::category_color(b->category));
      ImGui::SetCursorScreenPos({p.x + sq + 4, p.y});
      chart::cell_text(b->name.c_str());
      chart::formula_tooltip(b->category + "  " + b->shape + " " + to_string(b->dtype) + "\nalive in: " + b->lifetime +
                             "\nbytes = " + b->formula);
      ImGui::TableNextColumn();
      chart::cell_text(dev ? "device" : "host");
      ImGui::TableNextColumn();
      chart::cell_text(format_bytes(b->bytes).c_str());
      chart::formula_tooltip(b->formula);
      ImGui::TableNextColumn();
      // Share of the peak for the rows alive at the peak phase; the others are freed by then.
      if (!dev || (b->phases & step::phase_bit(peak)))
        chart::cell_text(format_percent(static_cast<double>(b->bytes) / static_cast<double>(std::max<int64_t>(total, 1))).c_str());
      else
        chart::cell_text("-", true);
      ImGui::TableNextColumn();
      chart::cell_text(b->lifetime.c_str(), !(dev && (b->phases & step::phase_bit(peak))));
    }
    ImGui::EndTable();
  }
}

}  // namespace oomb::gui
