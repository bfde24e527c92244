#include "gui/panels/chart.h"

#include <algorithm>
#include <cmath>

#include "view/palette.h"

namespace oomb::gui::chart {

// The one palette (view/palette.h): the HTML report colours the same op and category the same.
ImU32 category_color(const std::string& c) {
  const view::Rgb x = view::category_color(c);
  return IM_COL32(x.r, x.g, x.b, 255);
}

ImU32 series_color(int i) {
  static const ImU32 s[] = {IM_COL32(95, 160, 220, 255), IM_COL32(120, 200, 110, 255), IM_COL32(242, 142, 43, 255)};
  return s[i % 3];
}

ImU32 op_color(const std::string& op) {
  const view::Rgb x = view::op_color(op);
  return IM_COL32(x.r, x.g, x.b, 255);
}

float LogAxis::map(double v) const {
  const double a = std::log10(lo), b = std::log10(hi);
  const double t = (std::log10(std::max(v, lo * 1e-3)) - a) / (b - a);
  return p0 + static_cast<float>(t) * (p1 - p0);
}

double LogAxis::unmap(float p) const {
  const double a = std::log10(lo), b = std::log10(hi);
  return std::pow(10.0, a + (p - p0) / (p1 - p0) * (b - a));
}

namespace {
int g_cut_cells = 0;
}  // namespace

void cell_text(const char* text, bool disabled) {
  // Inside a table cell the content region ends at the column's edge (ImGui's WorkRect).
  if (ImGui::CalcTextSize(text).x > ImGui::GetContentRegionAvail().x + 0.5f) ++g_cut_cells;
  if (disabled) ImGui::TextDisabled("%s", text);
  else ImGui::TextUnformatted(text);
}

int cut_cells() { return g_cut_cells; }
void reset_cut_cells() { g_cut_cells = 0; }

void formula_tooltip(const std::string& formula) {
  if (!formula.empty() && ImGui::IsItemHovered()) {
    ImGui::BeginTooltip();
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40);
    ImGui::TextUnformatted(formula.c_str());
    ImGui::PopTextWrapPos();
    ImGui::EndTooltip();
  }
}

void figure_row(const char* label, const std::string& value, const std::string& formula, ImU32 value_color) {
  ImGui::TextDisabled("%s", label);
  ImGui::SameLine(ImGui::GetFontSize() * 9);
  if (value_color) ImGui::PushStyleColor(ImGuiCol_Text, value_color);
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextUnformatted(value.c_str());
  ImGui::PopTextWrapPos();
  if (value_color) ImGui::PopStyleColor();
  formula_tooltip(formula);
}

void dashed_line(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float dash, float thickness) {
  const float dx = b.x - a.x, dy = b.y - a.y, len = std::sqrt(dx * dx + dy * dy);
  if (len <= 0) return;
  for (float s = 0; s < len; s += 2 * dash) {
    const float e = std::min(len, s + dash);
    dl->AddLine({a.x + dx * s / len, a.y + dy * s / len}, {a.x + dx * e / len, a.y + dy * e / len}, col, thickness);
  }
}

Area reserve(const char* id, float height, float width) {
  Area a;
  const float w = width > 0 ? width : ImGui::GetContentRegionAvail().x;
  a.min = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton(id, {std::max(w, 1.0f), std::max(height, 1.0f)});
  a.max = {a.min.x + w, a.min.y + height};
  a.hovered = ImGui::IsItemHovered();
  return a;
}

}  // namespace oomb::gui::chart
