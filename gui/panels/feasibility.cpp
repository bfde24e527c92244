// Feasibility map: chunk (rows) x attention (dense | sparse budget, columns) under the current
// knobs. Feasible cells are coloured by step time (green = fastest, yellow = slowest, log scale);
// infeasible cells are red and name their binding constraint. Click a cell to adopt it.
#include <algorithm>
#include <cmath>

#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

namespace {

ImU32 speed_color(double t, double lo, double hi) {
  double f = hi > lo && lo > 0 ? std::log(t / lo) / std::log(hi / lo) : 0;
  f = std::clamp(f, 0.0, 1.0);
  const int r = static_cast<int>(60 + 170 * f), g = static_cast<int>(170 - 10 * f), b = static_cast<int>(90 - 50 * f);
  return IM_COL32(r, g, b, 255);
}

const char* short_binding(simulator::Binding b) {
  switch (b) {
    case simulator::Binding::device_memory: return "OOM";
    case simulator::Binding::pinned_host_memory: return "pinned";
    case simulator::Binding::host_ram: return "RAM";
    default: return "over";
  }
}

}  // namespace

namespace {

// The multi-GPU layouts of the inputs' GPUs (ViewModel::layouts): one row each, its rows per GPU,
// notes and recipe in the tooltip, against this configuration's peak and step.
void draw_layouts(ViewModel& vm) {
  const Results& r = vm.results();
  const auto& rows = vm.layouts();
  const int64_t gpus = vm.layout_gpus_per_node();
  const int64_t nodes = std::max<int64_t>(1, r.scenario.config.nodes);
  ImGui::Text("%lld x %s%s, context %s; this configuration: %s per GPU, step %s", static_cast<long long>(gpus),
              r.scenario.gpu.id.c_str(), nodes > 1 ? (" x " + std::to_string(nodes) + " nodes").c_str() : "",
              format_tokens(r.scenario.config.context_tokens).c_str(), format_bytes(r.summary.peak_device_bytes).c_str(),
              format_duration_s(r.summary.step_s).c_str());
  if (rows.empty()) {
    ImGui::TextDisabled("no FSDP / ZeRO-3 layout suits these inputs");
    return;
  }
  const ImGuiTableFlags flags = ImGuiTableFlags_ScrollX | ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg |
                                ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingFixedFit;
  if (ImGui::BeginTable("layouts", 5, flags, ImGui::GetContentRegionAvail())) {
    ImGui::TableSetupScrollFreeze(1, 1);
    ImGui::TableSetupColumn("layout");
    ImGui::TableSetupColumn("mem per GPU");
    ImGui::TableSetupColumn("pinned per node");
    ImGui::TableSetupColumn("step");
    ImGui::TableSetupColumn("fits");
    ImGui::TableHeadersRow();
    for (const auto& p : rows) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      chart::cell_text(p.label.c_str());
      std::string tip = p.recipe.empty() ? std::string() : p.recipe + "\n";
      for (const auto& row : p.rows) tip += row.name + "  " + format_bytes(row.bytes) + "  = " + row.formula + "\n";
      for (const auto& n : p.notes) tip += n + "\n";
      chart::formula_tooltip(tip);
      ImGui::TableNextColumn();
      chart::cell_text(format_bytes(p.device_bytes).c_str());
      ImGui::TableNextColumn();
      chart::cell_text(p.host_pinned_bytes > 0 ? format_bytes(p.host_pinned_bytes).c_str() : "-", p.host_pinned_bytes == 0);
      ImGui::TableNextColumn();
      chart::cell_text(format_duration_s(p.step_s).c_str());
      ImGui::TableNextColumn();
      chart::cell_text(p.fits ? "yes" : ("no: " + p.binding).c_str(), !p.fits);
    }
    ImGui::EndTable();
  }
}

void draw_map(ViewModel& vm);

}  // namespace

void draw_feasibility_panel(ViewModel& vm) {
  // With several GPUs the slot holds two tabs: the map and the multi-GPU layouts.
  if (vm.results().ok && vm.layout_gpus_per_node() * std::max<int64_t>(1, vm.results().scenario.config.nodes) > 1) {
    if (ImGui::BeginTabBar("##feasibility_tabs")) {
      if (ImGui::BeginTabItem("Multi-GPU layouts")) {
        draw_layouts(vm);
        ImGui::EndTabItem();
      }
      if (ImGui::BeginTabItem("Feasibility map")) {
        draw_map(vm);
        ImGui::EndTabItem();
      }
      ImGui::EndTabBar();
    }
    return;
  }
  draw_map(vm);
}

namespace {

void draw_map(ViewModel& vm) {
  const Results& r = vm.results();
  if (!r.ok) {
    ImGui::TextDisabled("no result (see the summary)");
    return;
  }
  const FeasibilityMap& fm = r.feasibility;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float lh = ImGui::GetTextLineHeight();
  chart::Area a = chart::reserve("##feas", ImGui::GetContentRegionAvail().y);
  const float left = lh * 3.2f, top = lh * 2.4f;
  const float cw = (a.w() - left) / static_cast<float>(fm.budgets.size());
  const float ch = (a.h() - top) / static_cast<float>(fm.chunks.size());
  dl->AddText({a.min.x, a.min.y}, IM_COL32(220, 220, 225, 255), "chunk x attention (oomb schedule), colour = step time");
  dl->AddText({a.min.x, a.min.y + lh * 1.2f}, chart::kAxisText, "chunk");
  const auto& c = r.scenario.config;
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  int hover_i = -1, hover_j = -1;
  for (size_t j = 0; j < fm.budgets.size(); ++j) {
    const std::string h = fm.budgets[j] == 0 ? "dense" : "B=" + std::to_string(fm.budgets[j]);
    const float x = a.min.x + left + cw * static_cast<float>(j);
    dl->AddText({x + (cw - ImGui::CalcTextSize(h.c_str()).x) / 2, a.min.y + lh * 1.2f}, chart::kAxisText, h.c_str());
  }
  for (size_t i = 0; i < fm.chunks.size(); ++i) {
    const float y = a.min.y + top + ch * static_cast<float>(i);
    const std::string rl = format_tokens(fm.chunks[i]);
    dl->AddText({a.min.x, y + (ch - lh) / 2}, chart::kAxisText, rl.c_str());
    for (size_t j = 0; j < fm.budgets.size(); ++j) {
      const FeasibilityCell& cell = fm.at(i, j);
      const ImVec2 p0{a.min.x + left + cw * static_cast<float>(j) + 1, y + 1}, p1{p0.x + cw - 2, p0.y + ch - 2};
      ImU32 col = IM_COL32(70, 70, 76, 255);
      std::string txt = "n/a";
      if (cell.valid && cell.feasible) {
        col = speed_color(cell.step_s, fm.min_step_s, fm.max_step_s);
        txt = format_duration_s(cell.step_s);
      } else if (cell.valid) {
        col = IM_COL32(150, 45, 45, 255);
        txt = short_binding(cell.binding);
      }
      dl->AddRectFilled(p0, p1, col, 2.0f);
      const bool current = c.schedule == step::Schedule::oomb && fm.chunks[i] == c.chunk_tokens &&
                           (fm.budgets[j] == 0 ? c.attention == step::Attention::dense
                                               : c.attention == step::Attention::sparse && fm.budgets[j] == c.page_budget);
      if (current) dl->AddRect({p0.x - 1, p0.y - 1}, {p1.x + 1, p1.y + 1}, IM_COL32(255, 255, 255, 255), 2.0f, 0, 2.5f);
      ImVec2 ts = ImGui::CalcTextSize(txt.c_str());
      float size = ImGui::GetFontSize();
      if (ts.x >= cw - 4 && txt.find(' ') != std::string::npos) {
        // "59m 12.3s" on two smaller lines when one does not fit.
        txt[txt.find(' ')] = '\n';
        size *= 0.85f;
        ts = ImGui::GetFont()->CalcTextSizeA(size, 1e9f, 0, txt.c_str());
      }
      if (ts.x < cw - 2 && ts.y < ch)
        dl->AddText(ImGui::GetFont(), size, {p0.x + (cw - 2 - ts.x) / 2, p0.y + (ch - 2 - ts.y) / 2},
                    IM_COL32(15, 15, 15, 255), txt.c_str());
      if (a.hovered && mouse.x >= p0.x && mouse.x < p1.x && mouse.y >= p0.y && mouse.y < p1.y) {
        hover_i = static_cast<int>(i);
        hover_j = static_cast<int>(j);
      }
    }
  }
  if (hover_i >= 0) {
    const FeasibilityCell& cell = fm.at(static_cast<size_t>(hover_i), static_cast<size_t>(hover_j));
    const int64_t budget = fm.budgets[static_cast<size_t>(hover_j)];
    ImGui::BeginTooltip();
    ImGui::Text("chunk %s, %s", format_tokens(fm.chunks[static_cast<size_t>(hover_i)]).c_str(),
                budget == 0 ? "dense attention" : ("sparse, budget " + std::to_string(budget) + " pages").c_str());
    if (!cell.valid) ImGui::TextWrapped("invalid: %s", cell.invalid.c_str());
    else
      ImGui::Text("%s: step %s, peak device %s\nbinding: %s", cell.feasible ? "fits" : "DOES NOT FIT",
                  format_duration_s(cell.step_s).c_str(), format_bytes(cell.peak_device_bytes).c_str(), to_string(cell.binding));
    ImGui::TextDisabled("click to use this chunk and attention");
    ImGui::EndTooltip();
    if (ImGui::IsItemClicked()) {
      Inputs in = vm.inputs();
      in.config.schedule = step::Schedule::oomb;
      in.config.chunk_tokens = fm.chunks[static_cast<size_t>(hover_i)];
      in.config.attention = budget == 0 ? step::Attention::dense : step::Attention::sparse;
      if (budget > 0) in.config.page_budget = budget;
      vm.set_inputs(in);
    }
  }
}

}  // namespace

}  // namespace oomb::gui
