// The memory model: the simulator prices the step's buffer table (step/buffers.h, docs/model.md);
// it never sizes a buffer itself.
#include "simulator/detail.h"
#include "simulator/simulator.h"

namespace oomb::simulator {

namespace detail {

Geometry geometry(const Scenario& s) { return step::geometry(s.model, s.config); }

step::Target target_of(const Scenario& s) { return step::target_of(s.gpu); }

MemoryTable memory_table(const Scenario& s, bool describe) { return memory_table(s, geometry(s), describe); }

MemoryTable memory_table(const Scenario& s, const Geometry& g, bool describe) {
  step::Target target = target_of(s);
  target.pages_in_flight = published_pages_in_flight(s, g);  // 0 but for the published preset
  return step::buffer_table(s.model, s.config, target, g, describe);
}

}  // namespace detail

MemoryTable memory_table(const Scenario& s) { return detail::memory_table(s, true); }

PageCounts page_counts(const Scenario& s) { return step::page_counts(detail::geometry(s)); }

}  // namespace oomb::simulator
