// Timeline of the chosen chunk range: stage 1 (fill) and stage 2 (recompute + backward), each
// with the three streams compute / h2d / d2h, and a fourth, comm, where the plan's ranks all-reduce. Mouse wheel zooms around the cursor, dragging pans,
// hovering an event shows it (and the aligned measured event when a trace is overlaid). The
// simulation runs in the background (ViewModel::poll_timeline); this panel never waits for it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/format.h"
#include "gui/panels/chart.h"
#include "gui/panels/panels.h"

namespace oomb::gui {

namespace {

// The rows, top to bottom (comm only where ranks all-reduce); an event sits on its kind's lane.
constexpr traces::Lane kLaneOrder[] = {traces::Lane::compute, traces::Lane::h2d, traces::Lane::d2h, traces::Lane::comm};

int lane_of(const traces::Event& e) {
  const traces::Lane lane = traces::natural_lane(e.kind);
  for (int i = 0; i < 3; ++i)
    if (lane == kLaneOrder[i]) return i;
  return 3;  // collectives
}

std::string describe(const traces::Event& e) {
  std::string s = std::string(to_string(e.op)) + "  stage " + std::to_string(e.stage);
  if (e.chunk >= 0) s += ", chunk " + std::to_string(e.chunk);
  if (e.layer >= 0) s += ", layer " + std::to_string(e.layer);
  s += '\n';
  s += format_duration_s(static_cast<double>(e.duration_ns()) * 1e-9);
  s += " (at ";
  s += format_duration_s(static_cast<double>(e.start_ns) * 1e-9);
  s += ')';
  if (e.bytes > 0) s += ", " + format_bytes(e.bytes);
  if (e.flops > 0) s += ", " + format_count(e.flops) + " FLOP";
  return s;
}

void stage_lanes(const Timeline& t, const Overlay* ov, int st, UiState& ui, float lane_h) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float lh = ImGui::GetTextLineHeight();
  const float label_w = lh * 5.5f;
  const char* title = st == 0 ? "stage 1: fill" : "stage 2: recompute + backward";
  const int lanes = t.has_comm ? 4 : 3;
  const float height = lh * 1.2f + lane_h * static_cast<float>(lanes) + lh * 1.2f;
  chart::Area a = chart::reserve(st == 0 ? "##tl_stage1" : "##tl_stage2", height);
  const ImVec2 pmin{a.min.x + label_w, a.min.y + lh * 1.2f},
      pmax{a.max.x - 4, a.min.y + lh * 1.2f + lane_h * static_cast<float>(lanes)};
  const double t0 = static_cast<double>(t.stage_t0_ns[st]), t1 = static_cast<double>(t.stage_t1_ns[st]);
  const double span = std::max(1.0, t1 - t0);
  const double v0 = t0 + span * ui.timeline_pan, v1 = v0 + span / ui.timeline_zoom;
  auto px = [&](double ns) { return pmin.x + static_cast<float>((ns - v0) / (v1 - v0)) * (pmax.x - pmin.x); };

  dl->AddText({a.min.x, a.min.y}, IM_COL32(220, 220, 225, 255), title);
  const std::string span_text = "from " + format_duration_s(t0 * 1e-9) + " into the step, span " +
                                format_duration_s(span * 1e-9) + (ui.timeline_zoom > 1.001f ? ", zoomed" : "");
  dl->AddText({a.min.x + ImGui::CalcTextSize(title).x + lh, a.min.y}, chart::kAxisText, span_text.c_str());
  if (st == 0) {  // legend: copies take the colour of the pass they serve
    float x = a.max.x;
    for (const char* op : {"lm_head", "layer_bwd", "layer_recompute", "layer_fwd"}) {
      x -= ImGui::CalcTextSize(op).x + lh * 1.6f;
      dl->AddRectFilled({x, a.min.y + 2}, {x + lh * 0.7f, a.min.y + 2 + lh * 0.7f}, chart::op_color(op));
      dl->AddText({x + lh * 0.9f, a.min.y}, chart::kAxisText, op);
    }
  }
  for (int l = 0; l < lanes; ++l) {
    const float y = pmin.y + lane_h * static_cast<float>(l);
    dl->AddRectFilled({pmin.x, y + 1}, {pmax.x, y + lane_h - 1}, IM_COL32(30, 30, 36, 255));
    dl->AddText({a.min.x + 8, y + (lane_h - lh) / 2}, chart::kAxisText, traces::to_string(kLaneOrder[l]));
  }
  // Time ticks.
  for (int k = 0; k <= 5; ++k) {
    const double ns = v0 + (v1 - v0) * k / 5.0;
    const float x = px(ns);
    dl->AddLine({x, pmin.y}, {x, pmax.y}, chart::kGrid);
    std::string txt = format_duration_s((ns - t0) * 1e-9);
    txt.insert(txt.begin(), '+');
    const float w = ImGui::CalcTextSize(txt.c_str()).x;
    dl->AddText({std::clamp(x - w / 2, pmin.x, pmax.x - w), pmax.y + 1}, chart::kAxisText, txt.c_str());
  }

  // Measured events are shifted so that the first aligned pair starts together.
  double shift = 0;
  bool have_shift = false;
  if (ov)
    for (size_t i : t.stage_events[st]) {
      const auto it = ov->by_key.find(event_key(t.trace.events[i]));
      if (it != ov->by_key.end()) {
        shift = static_cast<double>(ov->trace.events[it->second].start_ns - t.trace.events[i].start_ns);
        have_shift = true;
        break;
      }
    }

  dl->PushClipRect(pmin, pmax, true);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  const traces::Event* hovered = nullptr;
  const traces::Event* hovered_measured = nullptr;
  const float bar_h = ov ? lane_h * 0.62f : lane_h - 4;
  for (size_t i : t.stage_events[st]) {
    const auto& e = t.trace.events[i];
    if (static_cast<double>(e.end_ns) < v0 || static_cast<double>(e.start_ns) > v1) continue;
    const int l = lane_of(e);
    const float y = pmin.y + lane_h * static_cast<float>(l) + 2;
    float x0 = px(static_cast<double>(e.start_ns)), x1 = std::max(px(static_cast<double>(e.end_ns)), x0 + 1.0f);
    const ImU32 col = chart::op_color(to_string(e.op));
    dl->AddRectFilled({x0, y}, {x1, y + bar_h}, col);
    if (x1 - x0 > 4) dl->AddLine({x0, y}, {x0, y + bar_h}, IM_COL32(0, 0, 0, 160));  // event boundary
    if (x1 - x0 > 40) {
      const std::string lbl = e.layer >= 0 ? std::string(to_string(e.op)) + " L" + std::to_string(e.layer) : to_string(e.op);
      if (ImGui::CalcTextSize(lbl.c_str()).x < x1 - x0 - 4)
        dl->AddText({x0 + 2, y + (bar_h - lh) / 2}, IM_COL32(15, 15, 15, 255), lbl.c_str());
    }
    const traces::Event* m = nullptr;
    if (ov && have_shift) {
      const auto it = ov->by_key.find(event_key(e));
      if (it != ov->by_key.end()) {
        m = &ov->trace.events[it->second];
        const float mx0 = px(static_cast<double>(m->start_ns) - shift);
        const float mx1 = std::max(px(static_cast<double>(m->end_ns) - shift), mx0 + 1.0f);
        dl->AddRectFilled({mx0, y + bar_h + 1}, {mx1, y + lane_h - 3}, IM_COL32(245, 245, 245, 200));
      }
    }
    if (a.hovered && mouse.x >= x0 && mouse.x <= x1 && mouse.y >= y && mouse.y <= y + lane_h - 2) {
      hovered = &e;
      hovered_measured = m;
    }
  }
  dl->PopClipRect();

  if (hovered) {
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(describe(*hovered).c_str());
    if (hovered_measured) {
      const double p = static_cast<double>(hovered->duration_ns()), m = static_cast<double>(hovered_measured->duration_ns());
      ImGui::Separator();
      ImGui::Text("measured %s (%s vs predicted)", format_duration_s(m * 1e-9).c_str(),
                  format_percent(p > 0 ? (m - p) / p : 0).c_str());
    }
    ImGui::EndTooltip();
  }
  // Zoom around the cursor with the wheel, pan by dragging.
  if (a.hovered && mouse.x >= pmin.x) {
    const float wheel = ImGui::GetIO().MouseWheel;
    const float f = (mouse.x - pmin.x) / (pmax.x - pmin.x);
    if (wheel != 0) {
      const float at = ui.timeline_pan + f / ui.timeline_zoom;
      ui.timeline_zoom = std::clamp(ui.timeline_zoom * (wheel > 0 ? 1.25f : 0.8f), 1.0f, 1e5f);
      ui.timeline_pan = at - f / ui.timeline_zoom;
    }
  }
  if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left, 0))
    ui.timeline_pan -= ImGui::GetIO().MouseDelta.x / (pmax.x - pmin.x) / ui.timeline_zoom;
  ui.timeline_pan = std::clamp(ui.timeline_pan, 0.0f, 1.0f - 1.0f / ui.timeline_zoom);
}

}  // namespace

void draw_timeline_panel(ViewModel& vm, UiState& ui) {
  TimelineRequest req = vm.timeline_request();
  const Timeline* t = vm.timeline();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 5);
  int detail = req.detail == traces::Detail::chunk ? 0 : 1;
  if (ImGui::Combo("detail", &detail, "chunk\0layer\0")) req.detail = detail == 0 ? traces::Detail::chunk : traces::Detail::layer;
  chart::formula_tooltip("chunk: one event per chunk and stream; layer: one per layer pass (bounded to ~3M events)");
  int first = static_cast<int>(t ? t->chunk_first : std::max<int64_t>(req.chunk_first, 0));
  int last = static_cast<int>(t ? t->chunk_last : std::max<int64_t>(req.chunk_last, 0));
  const int n = t ? static_cast<int>(t->chunks) : 1;
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 11);
  int range[2] = {first, last};
  if (ImGui::DragInt2("chunks", range, 0.25f, 0, std::max(0, n - 1))) {
    req.chunk_first = std::clamp(range[0], 0, std::max(0, n - 1));
    req.chunk_last = std::clamp(range[1], static_cast<int>(req.chunk_first), std::max(0, n - 1));
  }
  chart::formula_tooltip("first and last chunk shown (of " + std::to_string(n) + "); drag or double-click to type");
  ImGui::SameLine();
  if (ImGui::Button("reset zoom")) {
    ui.timeline_zoom = 1;
    ui.timeline_pan = 0;
  }
  ImGui::SameLine();
  ImGui::SetNextItemWidth(ImGui::GetFontSize() * 16);
  const bool enter = ImGui::InputTextWithHint("##trace", "measured trace .json", ui.trace_path, sizeof(ui.trace_path),
                                              ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::SameLine();
  if (ImGui::Button("overlay") || enter) {
    ui.trace_message = vm.load_trace(ui.trace_path);
    ui.rank_message.clear();
    if (ui.trace_message.empty()) ui.trace_message = "loaded";
  }
  chart::formula_tooltip("oomb.trace/1 (e.g. from the executor or CUPTI); aligned by (stage, chunk, layer, op). Rank 0's "
                         "trace of a multi-rank run brings every rank's (t.rank1.json, ... beside it): pick one in "
                         "the ranks panel");
  if (vm.overlay()) {
    ImGui::SameLine();
    if (ImGui::SmallButton("clear")) {
      vm.clear_overlay();
      ui.rank_message.clear();
    }
  }
  vm.set_timeline_request(req);
  t = vm.timeline();

  if (!vm.results().ok) {
    ImGui::TextDisabled("no result (see the summary)");
    return;
  }
  if (!t) {
    ImGui::TextDisabled("simulating the step in the background ...");
    return;
  }
  if (!t->ok) {
    ImGui::TextColored(ImColor(chart::kOomRed), "event simulation %s: %s", t->refused ? "not run" : "failed",
                       t->error.c_str());
    return;
  }
  ImGui::TextDisabled("chunks %lld..%lld of %lld, %s detail, %zu events in the step, simulated in %s%s%s",
                      static_cast<long long>(t->chunk_first), static_cast<long long>(t->chunk_last),
                      static_cast<long long>(t->chunks), traces::to_string(t->detail), t->trace.events.size(),
                      format_duration_s(t->simulate_s).c_str(), t->note.empty() ? "" : "; ", t->note.c_str());
  if (const Overlay* ov = vm.overlay()) {
    ImGui::SameLine();
    if (ov->ranks.empty())
      ImGui::TextColored(ImColor(IM_COL32(245, 245, 245, 255)), "| overlay: %zu measured events (white)",
                         ov->trace.events.size());
    else
      ImGui::TextColored(ImColor(IM_COL32(245, 245, 245, 255)), "| overlay: rank %d of %d, %zu events (white)",
                         ov->rank, ov->world, ov->trace.events.size());
    if (ImGui::IsItemHovered() && !ov->comparison.rows.empty()) {
      ImGui::BeginTooltip();
      ImGui::Text("%s: predicted / measured / error", ov->path.c_str());
      for (const auto& row : ov->comparison.rows)
        ImGui::Text("%-34s %12.4g %12.4g %8s", row.name.c_str(), row.predicted, row.measured,
                    format_percent(row.error).c_str());
      ImGui::EndTooltip();
    }
    // `oomb validate`'s verdict on the same trace against these inputs (validation::validate_run).
    ImGui::SameLine();
    if (ov->validation) {
      int beyond = 0;
      for (const auto& term : ov->validation->terms) beyond += term.ok() == std::optional<bool>(false);
      if (ov->validation->ok) ImGui::TextColored(ImColor(IM_COL32(90, 200, 120, 255)), "| validate: OK");
      else ImGui::TextColored(ImColor(chart::kOomRed), "| validate: FAILED (%d terms beyond tolerance)", beyond);
      if (ImGui::IsItemHovered()) {
        ImGui::BeginTooltip();
        ImGui::Text("%-24s %14s %14s %9s %9s", "term", "predicted", "measured", "error", "tolerance");
        for (const auto& term : ov->validation->terms) {
          const auto ok = term.ok();
          char measured[32] = "-";
          if (term.measured) std::snprintf(measured, sizeof measured, "%.6g", *term.measured);
          ImGui::Text("%-24s %14.6g %14s %9s %9s  %s", term.name.c_str(), term.predicted, measured,
                      term.measured ? format_percent(term.error()).c_str() : "-", format_percent(term.tolerance).c_str(),
                      !ok ? (term.measured ? "info" : "n/a") : *ok ? "ok" : "FAIL");
        }
        for (const auto& note : ov->validation->notes) ImGui::TextDisabled("note: %s", note.c_str());
        ImGui::EndTooltip();
      }
      // Sparse: predict with the overlap the run's selections had, when it differs from the inputs'
      // (on a line of its own: the overlay's line is full).
      if (const auto& io = ov->validation->implied_selection_overlap;
          io && std::abs(*io - vm.inputs().config.selection_overlap) > 1e-9) {
        char label[64];
        std::snprintf(label, sizeof label, "use the run's overlap (%.2f)", *io);
        if (ImGui::SmallButton(label)) ui.trace_message = vm.use_measured_overlap();
        chart::formula_tooltip("--selection-overlap that the run's measured selection unions imply, at the largest "
                               "(docs/model.md, \"Sparse union assumption\"): the pools and copies predicted as the "
                               "run selected");
      }
    } else {
      ImGui::TextDisabled("| validate: n/a");
      if (ImGui::IsItemHovered() && !ov->validation_error.empty()) ImGui::SetTooltip("%s", ov->validation_error.c_str());
    }
  } else if (!ui.trace_message.empty() && ui.trace_message != "loaded") {
    ImGui::SameLine();
    ImGui::TextColored(ImColor(chart::kOomRed), "%s", ui.trace_message.c_str());
  }
  const float lh = ImGui::GetTextLineHeight();
  const float lane_h =
      std::max(lh + 4, (ImGui::GetContentRegionAvail().y - lh * 5.2f) / (t->has_comm ? 8.0f : 6.0f));
  stage_lanes(*t, vm.overlay(), 0, ui, lane_h);
  stage_lanes(*t, vm.overlay(), 1, ui, lane_h);
}

}  // namespace oomb::gui
