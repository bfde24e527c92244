#pragma once
// Human-readable reports shared by simulate, plan and sweep.
#include "simulator/simulator.h"

namespace oomb::cli {

void print_scenario_header(const simulator::Scenario& s);
void print_memory_report(const simulator::Scenario& s, const step::BufferTable& t, const simulator::Summary& sum);
void print_time_report(const simulator::Scenario& s, const simulator::Summary& sum);

}  // namespace oomb::cli
