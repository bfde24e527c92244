// Ranks of a measured multi-rank run (shown while one is overlaid): the rank combo that picks which
// rank's trace the timeline and pool panels overlay, and one row per rank (its step, device peak,
// time in collectives and verdict against the current inputs), the rank whose step binds marked.
#include <cstdio>
#include <string>

#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

namespace {

constexpr ImU32 kBinds = IM_COL32(245, 200, 80, 255);
constexpr ImU32 kOk = IM_COL32(90, 200, 120, 255);

std::string rank_label(const validation::RankVerdict& r) {
  std::string s = "rank " + std::to_string(r.rank);
  if (!r.found) s += " (missing)";
  else if (r.binds) s += " (binds)";
  return s;
}

// What a rank's row says on hover: its file, its collectives as recorded, the terms beyond tolerance.
std::string rank_tooltip(const validation::RankVerdict& r) {
  std::string s = r.trace;
  if (!r.error.empty()) s += "\n" + r.error;
  for (const auto& f : r.collectives) {
    const std::string u = f.unit();
    s += "\n" + f.name + ": " +
         (u == "bytes" ? format_bytes(static_cast<int64_t>(f.value)) : u == "s" ? format_duration_s(f.value) : format_count(f.value));
  }
  if (r.validation)
    for (const auto& t : r.validation->terms)
      if (t.ok() == std::optional<bool>(false))
        s += "\nbeyond tolerance: " + t.name + " (" + format_signed_percent(t.error()) + ")";
  if (r.binds) s += "\nthe slowest measured step: the job's step is this rank's";
  return s;
}

}  // namespace

void draw_ranks_panel(ViewModel& vm, UiState& ui) {
  const Overlay* ov = vm.overlay();
  if (!ov || ov->ranks.empty()) {
    ImGui::TextDisabled("no multi-rank run overlaid");
    return;
  }
  const auto& shown = ov->ranks[static_cast<size_t>(ov->rank)];
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 10.5f);
  ui.rank_combo_drawn = true;
  if (ImGui::BeginCombo("rank", rank_label(shown).c_str())) {
    for (const auto& r : ov->ranks) {
      if (!r.found) ImGui::PushStyleColor(ImGuiCol_Text, chart::kOomRed);
      if (ImGui::Selectable(rank_label(r).c_str(), r.rank == ov->rank)) ui.rank_message = vm.select_rank(r.rank);
      if (!r.found) ImGui::PopStyleColor();
    }
    ImGui::EndCombo();
  }
  chart::formula_tooltip("the rank whose trace the timeline and pool panels overlay (oomb-gui --rank K); every rank "
                         "is validated against the inputs as `oomb validate` validates rank 0's trace of the run");
  ImGui::SameLine();
  ImGui::TextDisabled("of %d", ov->world);
  if (!ui.rank_message.empty()) ImGui::TextColored(ImColor(chart::kOomRed), "%s", ui.rank_message.c_str());

  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerH | ImGuiTableFlags_ScrollX |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingFixedFit;
  const float legend_h = ImGui::GetTextLineHeightWithSpacing();
  if (!ImGui::BeginTable("##ranks", 5, flags, {0, ImGui::GetContentRegionAvail().y - legend_h})) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("rank");
  ImGui::TableSetupColumn("step");
  ImGui::TableSetupColumn("peak");
  ImGui::TableSetupColumn("coll.");
  ImGui::TableSetupColumn("ok");
  ImGui::TableHeadersRow();
  for (const auto& r : ov->ranks) {
    ImGui::TableNextRow();
    if (r.rank == ov->rank) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(70, 90, 130, 150));
    ImGui::TableNextColumn();
    if (r.binds) ImGui::TextColored(ImColor(kBinds), "%d *", r.rank);
    else ImGui::Text("%d", r.rank);
    chart::formula_tooltip(rank_tooltip(r) + (r.rank == ov->rank ? "\n(shown: the timeline and pool overlay it)" : ""));
    ImGui::TableNextColumn();
    chart::cell_text(r.step_s ? format_duration_s(*r.step_s).c_str() : "-");
    chart::formula_tooltip("the rank's fastest timed step, as measured");
    ImGui::TableNextColumn();
    chart::cell_text(r.peak_device_bytes ? format_bytes(*r.peak_device_bytes).c_str() : "-");
    chart::formula_tooltip("the rank's device peak, as measured");
    ImGui::TableNextColumn();
    const auto coll = r.collective_s();
    chart::cell_text(coll ? format_duration_s(*coll).c_str() : "-");
    chart::formula_tooltip("time in collectives (tp_allreduce_s + allreduce_s, as measured)\n" + rank_tooltip(r));
    ImGui::TableNextColumn();
    if (!r.found) ImGui::TextColored(ImColor(chart::kOomRed), "MISSING");
    else if (r.ok()) ImGui::TextColored(ImColor(kOk), "OK");
    else if (r.validation) ImGui::TextColored(ImColor(chart::kOomRed), "FAILED");
    else ImGui::TextDisabled("n/a");
    chart::formula_tooltip("the rank's trace validated against the inputs (oomb validate)\n" + rank_tooltip(r));
  }
  ImGui::EndTable();
  if (ov->binding_rank >= 0)
    ImGui::TextColored(ImColor(kBinds), "* binds: the slowest step");
}

}  // namespace oomb::gui
