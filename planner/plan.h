#pragma once
// A Plan (`oomb.plan/1`): everything the executor needs to run one training configuration and
// everything a reader needs to trust it. It is self-contained: the model, GPU and host specs are
// embedded, next to every knob, the sizes the executor must allocate and the prediction the plan
// was chosen on, so a plan file still means the same thing after the catalog changes.
#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "models/specs.h"
#include "simulator/simulator.h"

namespace oomb::planner {

inline constexpr const char* kPlanSchema = "oomb.plan/1";

// What the executor allocates, per GPU. Pools are one allocation of whole pages each
// (docs/schedule.md); the workspace is every other device buffer of the memory table alive at the
// peak phase.
struct Allocation {
  int64_t kv_pool_pages = 0;
  int64_t grad_pool_pages = 0;
  int64_t kv_page_bytes = 0;
  int64_t grad_page_bytes = 0;
  int64_t device_pool_bytes = 0;      // kv_pool_pages x kv_page_bytes + grad_pool_pages x grad_page_bytes
  int64_t workspace_bytes = 0;        // device bytes outside the pools and the reserve, at the peak phase
  int64_t runtime_reserve_bytes = 0;  // CUDA context + library workspaces: on the GPU, not allocated by the executor
  int64_t host_kv_pages = 0;          // host tier (offload only)
  int64_t host_grad_pages = 0;
  int64_t host_pool_bytes = 0;        // pinned slabs holding the host KV and KV-gradient pages
  int64_t host_other_bytes = 0;       // other host-tier buffers (page tables, summaries, optimizer state)

  Json to_json() const;
};

struct Plan {
  std::string model_id, gpu_id, host_id;
  int64_t context_tokens = 0;
  step::Config config;  // every knob, context included
  Allocation allocation;
  Json prediction;           // simulator::to_json(Summary) of the fast path the plan was chosen on
  // The step's buffer table (step/buffers.h), device and host rows, as the simulator priced it; the
  // executor allocates under these rows and refuses to start when its own need exceeds one. JSON
  // per row: name, category, tier, shape (text), dtype, bytes, phases (empty in older plans).
  std::vector<step::BufferRow> buffers;
  std::string objective;     // "time", "memory" or "context"
  double headroom = 0.05;    // share of HBM capacity the plan leaves free
  std::vector<std::string> notes;  // loud remarks: sparse fallback, tensor parallelism on paper
  models::ModelSpec model;   // embedded specs
  models::GpuSpec gpu;
  models::HostSpec host;

  Json to_json() const;
  simulator::Scenario scenario() const;  // the specs and config the plan was made from
};

// Builds the plan of a chosen configuration (fills the allocation and the buffers from the memory table).
Plan make_plan(const simulator::Scenario& s, const simulator::Summary& prediction, const std::string& objective,
               double headroom, std::vector<std::string> notes = {});

// Strict parse: unknown or older schema, missing keys, negative sizes and inconsistent fields throw
// oomb::Error naming `where` (the file) and the key.
Plan plan_from_json(const Json& j, const std::string& where);
Plan load_plan(const std::string& path);
void save_plan(const std::string& path, const Plan& p);  // atomic

// Throws oomb::Error when the plan was made for another model or GPU (names both).
void check_plan_against(const Plan& p, const models::ModelSpec& model, const models::GpuSpec& gpu);

}  // namespace oomb::planner
