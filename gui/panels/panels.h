#pragma once
// One function per panel (one file each); the app lays them out (gui/main.cpp).
#include <string>

#include "gui/view_model.h"

namespace oomb::gui {

// UI-only state (not part of the model): view windows, text fields, messages.
struct UiState {
  float timeline_zoom = 1.0f;  // >= 1: visible share of each stage's span is 1 / zoom
  float timeline_pan = 0.0f;   // start of the visible window as a share of the span
  char trace_path[512] = {};
  std::string trace_message;
  std::string rank_message;  // why the rank picked cannot be shown
  bool rank_combo_drawn = false;  // the ranks panel drew its rank combo (said by --screenshot)
  char context_text[32] = {};
  char plan_path[512] = "plan.json";
  std::string plan_message;
};

void draw_inputs_panel(ViewModel& vm, UiState& ui);
void draw_summary_panel(const ViewModel& vm);
void draw_memory_panel(const ViewModel& vm);
void draw_curves_panel(const ViewModel& vm);
void draw_timeline_panel(ViewModel& vm, UiState& ui);
void draw_pool_panel(const ViewModel& vm);
void draw_feasibility_panel(ViewModel& vm);
void draw_ranks_panel(ViewModel& vm, UiState& ui);

}  // namespace oomb::gui
