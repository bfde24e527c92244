// The memory model: the simulator prices the step's buffer table (step/buffers.h, docs/model.md);
// it never sizes a buffer itself.
#include "simulator/detail.h"
#include "simulator/simulator.h"

namespace oomb::simulator {

namespace detail {

step::Geometry geometry(const Scenario& s) { return step::geometry(s.model, s.config); }

step::Target target_of(const Scenario& s) {
  step::Target t = step::target_of(s.gpu);
  t.cupti = s.cupti_timed && t.backend == step::BackendKind::cuda;
  return t;
}

step::BufferTable memory_table(const Scenario& s, bool describe) { return memory_table(s, geometry(s), describe); }

namespace {
step::Target table_target(const Scenario& s, const step::Geometry& g) {
  step::Target target = target_of(s);
  target.pages_in_flight = published_pages_in_flight(s, g);  // 0 but for the published preset
  return target;
}

bool optimizer_state(const step::BufferRow& r) { return r.category == to_string(step::Category::optimizer_state); }
bool optimizer_state(const step::RowSize& r) { return r.category == step::Category::optimizer_state; }

// One rank's host rows outside the optimizer state: what the node pins (finish_summary).
template <class Rows>  // of Buffer or step::RowSize
int64_t pinned_host_bytes(const Rows& rows) {
  int64_t pinned = 0;
  for (const auto& r : rows)
    if (r.tier == step::Tier::host && !optimizer_state(r)) pinned += r.bytes;
  return pinned;
}
}  // namespace

step::BufferTable memory_table(const Scenario& s, const step::Geometry& g, bool describe) {
  return step::buffer_table(s.model, s.config, table_target(s, g), g, describe);
}

step::TableSizes table_sizes(const Scenario& s, const step::Geometry& g) {
  return step::table_sizes(s.model, s.config, table_target(s, g), g);
}

MemoryFigures memory_figures(const step::BufferTable& t) {
  return {t.device_peak(), t.host_peak(), pinned_host_bytes(t.rows), t.pages};
}

MemoryFigures memory_figures(const step::TableSizes& t) {
  return {t.device_peak(), t.host_peak(), pinned_host_bytes(t.rows()), t.pages};
}

}  // namespace detail

step::BufferTable memory_table(const Scenario& s) { return detail::memory_table(s, true); }

step::PageCounts page_counts(const Scenario& s) { return step::page_counts(detail::geometry(s)); }

}  // namespace oomb::simulator
