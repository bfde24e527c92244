#pragma once
// The memory and cost model of one training step (ALGORITHM.md, docs/schedule.md, docs/model.md).
//
// Two paths over the same model: `evaluate` (closed form, microseconds, for the planner and the
// GUI) and `simulate_events` (discrete-event simulation over the compute / h2d / d2h streams,
// giving the timeline, pool occupancy and exposed copy time). Tests keep the two in agreement.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "models/specs.h"
#include "simulator/config.h"
#include "traces/trace.h"

namespace oomb::simulator {

struct Scenario {
  models::ModelSpec model;
  models::GpuSpec gpu;
  models::HostSpec host;
  Config config;
};

enum class Tier { device, host };

// The phases of one step in which buffers live (docs/model.md). oomb: stage 1 layer forward
// (fill), stage 2 forward recompute, loss, layer backward, optimizer step; standard: forward,
// loss, backward, optimizer.
enum class Phase : uint8_t { fill, recompute, loss, backward, optimizer, forward };
const char* to_string(Phase p);
Phase phase_from_string(const std::string& s, const std::string& where);  // throws oomb::Error
using PhaseMask = uint32_t;                                                // bit i = Phase i
constexpr PhaseMask phase_bit(Phase p) { return PhaseMask{1} << static_cast<unsigned>(p); }
std::vector<Phase> phases_of(Schedule s);  // in step order
PhaseMask all_phases(Schedule s);          // the mask of phases_of(s)
std::vector<std::string> phase_names(PhaseMask m);  // in enum order

// One row of the memory table: a buffer (or a class of identical buffers), its bytes and the
// phases in which it is alive. Totals are derived from the rows, never hand-summed.
struct Buffer {
  std::string name;      // "kv_pool", "layer_input_checkpoints", ...
  std::string category;  // breakdown key: "weights", "kv_pages", ...
  Tier tier = Tier::device;
  std::string shape;     // dimensions, e.g. "[28, 4096, 3584]" (describe only)
  std::string dtype;     // element type: "fp32", "bf16", "int32", "uint8", ...
  int64_t bytes = 0;
  PhaseMask phases = 0;  // where it is alive (always set, also on the fast path)
  std::string lifetime;  // the phases in words, for people
  std::string formula;   // how bytes are computed (GUI tooltips, --explain)
};

// Page geometry and counts of one scenario (docs/schedule.md); all counts per GPU.
struct PageCounts {
  int64_t layers = 0;             // effective layers
  int64_t chunks = 0;             // n
  int64_t pages_per_layer = 0;    // P
  int64_t pages_per_chunk = 0;    // C / p
  int64_t kv_page_bytes = 0;
  int64_t grad_page_bytes = 0;
  int64_t kv_pool_pages = 0;      // device pool sizes (high-water marks)
  int64_t grad_pool_pages = 0;
  int64_t host_kv_pages = 0;      // host tier (offload only)
  int64_t host_grad_pages = 0;
  int64_t max_union_pages = 0;    // sparse: largest prefix set of a chunk (dense: the prefix)
};

// The peak is the maximum over the schedule's phases of the bytes alive in a phase (pools at
// their allocated capacity); ties go to the first phase in step order.
struct MemoryTable {
  std::vector<Buffer> rows;
  PageCounts pages;
  Schedule schedule = Schedule::oomb;
  struct PhasePeak {
    Phase phase = Phase::fill;
    int64_t bytes = 0;
    std::map<std::string, int64_t> breakdown;  // by category, at that phase
  };
  PhasePeak device_peak(bool include_reserve = true) const;
  PhasePeak host_peak() const;
  // Bytes alive in one phase (no breakdown).
  int64_t device_bytes_in(Phase p, bool include_reserve = true) const;
  // The peaks over phases (device_peak().bytes, host_peak().bytes) and their breakdowns.
  int64_t device_bytes(bool include_reserve = true) const;
  int64_t host_bytes() const;
  std::map<std::string, int64_t> device_breakdown() const;
  std::map<std::string, int64_t> host_breakdown() const;
};

// The simulation summary (DESIGN.md section 2) plus supporting figures.
struct Summary {
  int64_t peak_device_bytes = 0;
  int64_t peak_host_bytes = 0;
  double step_s = 0;
  double tokens_per_s = 0;
  int64_t h2d_bytes = 0;
  int64_t d2h_bytes = 0;
  double exposed_copy_s = 0;
  double required_h2d_bytes_per_s = 0;
  double required_d2h_bytes_per_s = 0;
  int64_t device_pool_pages = 0;
  std::map<std::string, int64_t> device_breakdown_bytes;  // at the peak phase
  std::map<std::string, int64_t> host_breakdown_bytes;
  std::string peak_phase;  // the phase that holds the device peak
  bool feasible = false;
  std::string binding_constraint;  // "device memory", "host memory", "pinned memory", "h2d link", "compute", ...
  // Supporting figures.
  double compute_s = 0;
  double flops = 0;
  int64_t device_capacity_bytes = 0;  // usable: hbm capacity
  int64_t host_capacity_bytes = 0;    // pinnable bytes
  int64_t kv_pool_pages = 0;
  int64_t grad_pool_pages = 0;
  int64_t max_union_pages = 0;
  std::vector<std::string> notes;     // violated constraints and remarks, human-readable
};

Json to_json(const Summary& s);  // exactly the DESIGN.md keys first, then the supporting ones

// Validates the scenario (throws oomb::Error) and builds the memory table.
MemoryTable memory_table(const Scenario& s);
PageCounts page_counts(const Scenario& s);

// Closed-form fast path.
Summary evaluate(const Scenario& s);

// Event-level path: the timeline at the given detail (memory samples included) and its summary.
struct EventResult {
  traces::Trace trace;
  Summary summary;
};
EventResult simulate_events(const Scenario& s, traces::Detail detail);

}  // namespace oomb::simulator
