#pragma once
// The memory and cost model of one training step (ALGORITHM.md, docs/schedule.md, docs/model.md).
//
// Two paths over the same model: `evaluate` (closed form, microseconds, for the planner and the
// GUI) and `simulate_events` (discrete-event simulation over the compute / h2d / d2h streams,
// giving the timeline, pool occupancy and exposed copy time). Tests keep the two in agreement.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "models/specs.h"
#include "step/config.h"
#include "step/buffers.h"
#include "traces/trace.h"

namespace oomb::simulator {

struct Scenario {
  models::ModelSpec model;
  models::GpuSpec gpu;
  models::HostSpec host;
  step::Config config;
  // The run is timed by the CUPTI collector (a cuda-cupti trace): its activity buffers are a host
  // row of the table (step::Target::cupti). Plans leave it false; validate sets it for such a trace.
  bool cupti_timed = false;
};

// What binds a configuration: the first memory limit it exceeds, else what bounds its step; and,
// for the planner's context search (planner/search.h MaxContext), what stops it. Typed, so that
// the GUI and the planner branch on the value; its one name (to_string: "device memory", ...) is
// written only at the edges (JSON, the CLI's and the GUI's text).
enum class Binding : uint8_t {
  device_memory,
  pinned_host_memory,
  host_ram,
  h2d_link,
  d2h_link,
  compute,
  search_cap,        // a context search: it fits at the cap
  step_time_limit,   // a context search: the fastest plan that fits is over --max-step-time
  throughput_limit,  // a context search: ... under --min-tokens-per-s
};
inline constexpr Binding kBindings[] = {Binding::device_memory,  Binding::pinned_host_memory, Binding::host_ram,
                                        Binding::h2d_link,       Binding::d2h_link,           Binding::compute,
                                        Binding::search_cap,     Binding::step_time_limit,    Binding::throughput_limit};
const char* to_string(Binding b);
std::optional<Binding> find_binding(const std::string& name);  // none: not a binding's name
std::string binding_names();                                   // "device memory, pinned host memory, ..."
bool is_memory(Binding b);  // device memory, pinned host memory or host RAM

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
  Binding binding = Binding::compute;  // JSON "binding_constraint"
  // Supporting figures.
  double compute_s = 0;
  double flops = 0;
  int64_t device_capacity_bytes = 0;  // usable: hbm capacity
  int64_t host_capacity_bytes = 0;    // pinnable bytes
  int64_t kv_pool_pages = 0;
  int64_t grad_pool_pages = 0;
  int64_t max_union_pages = 0;
  // The published implementation with offload: pages (of each kind) still being written back at
  // the pool's peak, beyond device_pool_pages (docs/model.md); 0 otherwise, and then not in JSON.
  int64_t pages_in_flight = 0;
  // Data parallelism (config.data_parallel > 1): the gradients' all-reduce per step (its bytes per
  // rank and time, inside step_s); 0 otherwise, and then not in JSON.
  int64_t allreduce_bytes = 0;
  double allreduce_s = 0;
  // Tensor parallelism (config.gpus > 1): the activations' all-reduces of one step (their count,
  // the bytes each rank gives them, their ring time on the profile's link; inside step_s); 0
  // otherwise, and then not in JSON.
  int64_t tp_allreduces = 0, tp_allreduce_bytes = 0;
  double tp_allreduce_s = 0;
  std::vector<std::string> notes;     // violated constraints and remarks, human-readable
};

Json to_json(const Summary& s);  // exactly the DESIGN.md keys first, then the supporting ones

// Validates the scenario (throws oomb::Error) and builds the memory table.
step::BufferTable memory_table(const Scenario& s);
step::PageCounts page_counts(const Scenario& s);

// Closed-form fast path.
Summary evaluate(const Scenario& s);

// Event-level path: the timeline at the given detail (memory samples included) and its summary.
struct EventResult {
  traces::Trace trace;
  Summary summary;
  // The published implementation with offload: the most pages (of each kind) whose write-back had
  // been issued and had not finished at any layer switch, timed on the timeline (docs/model.md).
  int64_t pages_in_flight_peak = 0;
};
EventResult simulate_events(const Scenario& s, traces::Detail detail);

// Event-level simulations (simulate --timeline/--chrome/--report, validate's re-simulation, the
// GUI's timeline) hold every (chunk, layer) pass in memory whatever the detail: beyond
// kMaxEventPairs pairs they are refused with an Error naming `where` and `key` and the size they
// would need.
constexpr int64_t kMaxEventPairs = int64_t{1} << 16;
void check_event_simulation_size(const Scenario& s, const std::string& where, const std::string& key,
                                 const std::string& hint);

}  // namespace oomb::simulator
