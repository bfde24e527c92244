// Summary: the headline numbers of the current inputs, each with its formula as a tooltip; the
// error message when the inputs cannot be evaluated.
#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

void draw_summary_panel(const ViewModel& vm) {
  const Results& r = vm.results();
  if (!r.ok) {
    ImGui::PushStyleColor(ImGuiCol_Text, chart::kOomRed);
    ImGui::TextWrapped("Cannot evaluate: %s", r.error.c_str());
    ImGui::PopStyleColor();
    return;
  }
  const auto& s = r.summary;
  const ImU32 verdict = s.feasible ? IM_COL32(120, 210, 120, 255) : chart::kOomRed;
  ImGui::PushStyleColor(ImGuiCol_Text, verdict);
  ImGui::Text("%s", s.feasible ? "FITS" : "DOES NOT FIT");
  ImGui::PopStyleColor();
  ImGui::SameLine();
  ImGui::TextDisabled("%s, %s, %s tokens", r.scenario.model.id.c_str(), r.scenario.gpu.id.c_str(),
                      format_tokens(r.scenario.config.context_tokens).c_str());
  for (const auto& f : r.figures)
    chart::figure_row(f.label.c_str(), f.value, f.formula,
                      f.label == "Binding" ? verdict : 0);
  ImGui::TextDisabled("recompute %.2f ms, %.0f fps", r.compute_ms, static_cast<double>(ImGui::GetIO().Framerate));
  chart::formula_tooltip("wall time of the last recompute: summary, memory table, 3 curves x 12 contexts, 8 x 8 map");
}

}  // namespace oomb::gui
