#include "gui/panels/chart.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace oomb::gui::chart {

namespace {
// Tableau-like palette, readable on the dark ImGui theme.
constexpr ImU32 kPalette[] = {IM_COL32(78, 121, 167, 255),  IM_COL32(242, 142, 43, 255), IM_COL32(225, 87, 89, 255),
                              IM_COL32(118, 183, 178, 255), IM_COL32(89, 161, 79, 255),  IM_COL32(237, 201, 72, 255),
                              IM_COL32(176, 122, 161, 255), IM_COL32(255, 157, 167, 255), IM_COL32(156, 117, 95, 255),
                              IM_COL32(186, 176, 172, 255), IM_COL32(95, 160, 220, 255),  IM_COL32(160, 200, 90, 255)};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
}  // namespace

ImU32 category_color(const std::string& c) {
  static const char* known[] = {"weights",         "parameter_gradients", "optimizer_state", "checkpoints",
                                "layer_working_set", "logits",            "attention_workspace", "kv_pages",
                                "kv_grad_pages",   "page_summaries",      "selection_scores", "page_tables"};
  for (int i = 0; i < static_cast<int>(sizeof(known) / sizeof(known[0])); ++i)
    if (c == known[i]) return kPalette[i % kPaletteSize];
  if (c == "runtime_reserve") return IM_COL32(110, 110, 120, 255);
  if (c == "allocator") return IM_COL32(140, 140, 150, 255);  // the arena's block beyond the buffers
  return kPalette[std::hash<std::string>{}(c) % kPaletteSize];
}

ImU32 series_color(int i) {
  static const ImU32 s[] = {IM_COL32(95, 160, 220, 255), IM_COL32(120, 200, 110, 255), IM_COL32(242, 142, 43, 255)};
  return s[i % 3];
}

ImU32 op_color(const std::string& op) {
  if (op == "layer_fwd" || op == "stage1") return IM_COL32(78, 121, 167, 255);
  if (op == "layer_recompute") return IM_COL32(118, 183, 178, 255);
  if (op == "layer_bwd" || op == "stage2") return IM_COL32(176, 122, 161, 255);
  if (op == "lm_head" || op == "embedding") return IM_COL32(237, 201, 72, 255);
  if (op.rfind("kv", 0) == 0 || op.find("h2d") != std::string::npos) return IM_COL32(89, 161, 79, 255);
  if (op.rfind("dkv", 0) == 0 || op.find("d2h") != std::string::npos) return IM_COL32(225, 87, 89, 255);
  return kPalette[std::hash<std::string>{}(op) % kPaletteSize];
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
