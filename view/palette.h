#pragma once
// The one palette of oomb's views: the HTML report (view/report.cpp) and the GUI (gui/panels/
// chart.cpp) colour the same op, and the same buffer category, the same. Tableau 10's colours,
// readable on the report's white and the GUI's dark background.
#include <cstdint>
#include <string>

namespace oomb::view {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// A trace op or pass (Event::op; the event's name where it has none): fixed for the passes the
// simulator and the executor emit (the forward blue, the recompute teal, the backward red, the LM
// head purple, the optimizer and the collectives green, page onloads green and write-backs yellow:
// "kv..." / "...h2d..." and "dkv..." / "...d2h..."), and a stable colour from the name (FNV-1a) for
// any other, the same on every platform and in every run.
Rgb op_color(const std::string& op);
// A buffer table category (step/buffers.h: "weights", "kv_pages", ...): fixed for the categories,
// grey for what the executor does not allocate (runtime_reserve, allocator).
Rgb category_color(const std::string& category);
std::string hex(Rgb c);  // "#4e79a7"

}  // namespace oomb::view
