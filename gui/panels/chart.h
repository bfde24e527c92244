#pragma once
// Shared drawing helpers for the panels: colours, log axes, formula tooltips. Charts are drawn
// with ImDrawList only (ImPlot is not packaged).
#include <imgui.h>

#include <cstdint>
#include <string>

namespace oomb::gui::chart {

ImU32 category_color(const std::string& category);  // memory-table categories
ImU32 series_color(int i);                           // curves: oomb dense, oomb sparse, standard
ImU32 op_color(const std::string& op);               // timeline ops

constexpr ImU32 kOomRed = IM_COL32(235, 70, 60, 255);
constexpr ImU32 kGrid = IM_COL32(255, 255, 255, 28);
constexpr ImU32 kAxisText = IM_COL32(190, 190, 200, 255);
constexpr ImU32 kCurrent = IM_COL32(255, 255, 255, 200);

// Maps a value on a log10 axis to pixels between p0 and p1.
struct LogAxis {
  double lo = 1, hi = 10;
  float p0 = 0, p1 = 1;
  float map(double v) const;
  double unmap(float p) const;
};

// Tooltip with the formula behind the last item (a derived number).
void formula_tooltip(const std::string& formula);
// Label: value, with the formula as the tooltip of the value.
void figure_row(const char* label, const std::string& value, const std::string& formula, ImU32 value_color = 0);

// Text in a table cell, counted when it is wider than the cell (the screenshot's layout check: a
// column that cuts its buffer names, tiers or byte figures fails gui.screenshot). disabled: greyed.
void cell_text(const char* text, bool disabled = false);
// Cells cut since the last reset (oomb-gui resets it each frame and reports the last frame's).
int cut_cells();
void reset_cut_cells();

// A dashed horizontal or vertical line.
void dashed_line(ImDrawList* dl, ImVec2 a, ImVec2 b, ImU32 col, float dash = 5, float thickness = 1.5f);

// Reserves a chart area of the given height (full width) and returns its rectangle.
struct Area {
  ImVec2 min, max;
  bool hovered = false;
  float w() const { return max.x - min.x; }
  float h() const { return max.y - min.y; }
};
Area reserve(const char* id, float height, float width = 0);

}  // namespace oomb::gui::chart
