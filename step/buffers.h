#pragma once
// The buffer table of one step (docs/model.md): every buffer the run holds is a row {name,
// category, tier, shape, dtype, bytes, lifetime}, sized here and nowhere else. The simulator
// prices the table (peak over phases), the plan carries it, the executor allocates every device-
// and host-tier buffer under its rows and its allocator measures each row's use against it.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"
#include "models/specs.h"
#include "step/config.h"
#include "step/geometry.h"
#include "step/phase.h"
#include "step/target.h"

namespace oomb::step {

// Row names used by more than the table itself (the executor's allocations, the simulator's pools).
namespace row {
inline constexpr const char* kWeights = "weights";
inline constexpr const char* kExpertWeights = "expert_weights";
inline constexpr const char* kParameterGradients = "parameter_gradients";
inline constexpr const char* kLoraAdapters = "lora_adapters";
inline constexpr const char* kMasterWeights = "master_weights";
inline constexpr const char* kAdamwMoments = "adamw_moments";
inline constexpr const char* kAdamwDecayMask = "adamw_decay_mask";
inline constexpr const char* kHostParameterGradients = "host_parameter_gradients";
inline constexpr const char* kHostWeights = "host_weights";
inline constexpr const char* kGradientAllreduceStaging = "gradient_allreduce_staging";
inline constexpr const char* kTensorParallelStaging = "tensor_parallel_staging";
inline constexpr const char* kTensorParallelLossStatistics = "tensor_parallel_loss_statistics";
inline constexpr const char* kTokenIds = "token_ids";
inline constexpr const char* kRouterAuxStatistics = "router_aux_statistics";
inline constexpr const char* kHiddenStates = "hidden_states";
inline constexpr const char* kLayerInputCheckpoints = "layer_input_checkpoints";
inline constexpr const char* kAllLayerActivations = "all_layer_activations";
inline constexpr const char* kLayerActivations = "layer_activations";
inline constexpr const char* kLayerNormRstd = "layer_norm_rstd";
inline constexpr const char* kAttentionLse = "attention_lse";
inline constexpr const char* kKeptLayerActivations = "kept_layer_activations";
inline constexpr const char* kKeptLayerNormRstd = "kept_layer_norm_rstd";
inline constexpr const char* kKeptAttentionLse = "kept_attention_lse";
inline constexpr const char* kHiddenGradients = "hidden_gradients";
inline constexpr const char* kLayerBackwardTemporaries = "layer_backward_temporaries";
inline constexpr const char* kFinalNorm = "final_norm";
inline constexpr const char* kFinalNormRstd = "final_norm_rstd";
inline constexpr const char* kLogits = "logits";
inline constexpr const char* kLogitsUpcast = "logits_upcast";
inline constexpr const char* kLogitsGradient = "logits_gradient";
inline constexpr const char* kLogSoftmaxGradient = "log_softmax_gradient";
inline constexpr const char* kKvPool = "kv_pool";
inline constexpr const char* kKvGradPool = "kv_grad_pool";
inline constexpr const char* kLocalKvPool = "local_kv_pool";
inline constexpr const char* kLocalKvGradPool = "local_kv_grad_pool";
inline constexpr const char* kKvPoolBackwardSlot = "kv_pool_backward_slot";
inline constexpr const char* kKvGradPoolBackwardSlot = "kv_grad_pool_backward_slot";
inline constexpr const char* kKvPagesInFlight = "kv_pages_in_flight";
inline constexpr const char* kKvGradPagesInFlight = "kv_grad_pages_in_flight";
inline constexpr const char* kHostKvPages = "host_kv_pages";
inline constexpr const char* kHostKvGradPages = "host_kv_grad_pages";
inline constexpr const char* kPageSummaries = "page_summaries";
inline constexpr const char* kHostPageSummaries = "host_page_summaries";
inline constexpr const char* kGemmWorkspace = "gemm_workspace";
inline constexpr const char* kOpScratch = "op_scratch";
inline constexpr const char* kCommunicatorBuffers = "communicator_buffers";
inline constexpr const char* kStagingRing = "host_staging_ring";
inline constexpr const char* kReadback = "host_readback";
inline constexpr const char* kLossSlots = "host_loss_slots";
inline constexpr const char* kCuptiActivityBuffers = "cupti_activity_buffers";
inline constexpr const char* kRuntimeReserve = "runtime_reserve";
inline constexpr const char* kAllocatorBlocks = "allocator_blocks";
}  // namespace row

// The categories of the table's rows (the breakdown's keys, docs/model.md), in the order of their
// names (so that a breakdown built in enum order is in key order). A row keeps its category as text
// (BufferRow::category, what plans carry); the table's own rows are sized with these.
enum class Category : uint8_t {
  allocator,            // what the backend's allocator holds beyond the buffers (step/allocator.h)
  attention_workspace,
  backend_scratch,
  checkpoints,
  communication,        // NCCL's own device buffers (tensor and data parallelism on the CUDA backend)
  hidden_states,
  inputs,
  kv_grad_pages,
  kv_pages,
  layer_working_set,
  logits,
  optimizer_state,
  page_summaries,
  page_tables,
  parameter_gradients,
  runtime_reserve,      // the CUDA context: on the GPU, not allocated by the executor
  selection_scores,
  weights,
};
inline constexpr int kCategoryCount = 18;
inline constexpr const char* kCategoryNames[kCategoryCount] = {
    "allocator",     "attention_workspace", "backend_scratch", "checkpoints",         "communication", "hidden_states",
    "inputs",        "kv_grad_pages",       "kv_pages",        "layer_working_set",   "logits",
    "optimizer_state", "page_summaries",    "page_tables",     "parameter_gradients", "runtime_reserve",
    "selection_scores", "weights"};
constexpr const char* to_string(Category c) { return kCategoryNames[static_cast<int>(c)]; }

// The category of the runtime reserve (the CUDA context: on the GPU, not allocated by the executor).
inline constexpr const char* kRuntimeReserveCategory = to_string(Category::runtime_reserve);
// What the backend's allocator holds beyond the buffers (the reserved measure: block rounding and
// the CUDA arena's slack, step/allocator.h); not allocated by the executor either.
inline constexpr const char* kAllocatorCategory = to_string(Category::allocator);
// Rows of the reserved measure only: the runtime reserve and the allocator's blocks.
inline bool reserved_only(std::string_view category) {
  // Views of known length: the lengths are compared first (the planner's inner loop calls this).
  constexpr std::string_view reserve{kRuntimeReserveCategory}, allocator{kAllocatorCategory};
  return category == reserve || category == allocator;
}
constexpr bool reserved_only(Category c) { return c == Category::runtime_reserve || c == Category::allocator; }

// What a node's host holds of a table's host tier: every row is one rank's, and the node's host RAM
// and pinned memory serve the ranks on the node: its data-parallel replicas (data_parallel / nodes)
// times their tensor-parallel GPUs.
inline int64_t ranks_per_node(const Config& c) { return c.gpus * std::max<int64_t>(1, c.data_parallel / std::max<int64_t>(1, c.nodes)); }
inline int64_t node_host_bytes(int64_t rank_host_bytes, const Config& c) {
  return checked_mul(rank_host_bytes, ranks_per_node(c));
}

// A GPU profile plans for the CUDA backend, a "cpu" profile (calibrated CPU) for the CPU backend.
Target target_of(const models::GpuSpec& gpu);

// One tensor a row holds: the executor allocates it as one buffer in the row's phases (llm.c's one
// allocation carved into named tensors). Names are unique within the row; in a row of several
// layers' sets, layer l's are "layers.<l>.<name>".
struct RowTensor {
  std::string name;
  int64_t elements = 0;
  Dtype dtype = Dtype::fp32;
};

// One row of the table: a buffer (or a class of identical buffers), its bytes and the phases in
// which it is alive. Totals are derived from the rows, never hand-summed.
struct BufferRow {
  std::string name;      // "kv_pool", "layer_input_checkpoints", ...
  std::string category;  // breakdown key: "weights", "kv_pages", ...
  Tier tier = Tier::device;
  std::string shape;     // dimensions, e.g. "[28, 4096, 3584]" (describe only)
  Dtype dtype = Dtype::fp32;  // element type
  int64_t bytes = 0;
  PhaseMask phases = 0;  // where it is alive (always set, also on the fast path)
  std::string lifetime;  // the phases in words, for people (describe only)
  std::string formula;   // how bytes are computed (GUI tooltips, --explain; describe only)
  // What it holds (bytes = the sum of elements x element bytes). Built with the row, not in plans.
  std::vector<RowTensor> tensors;
  const RowTensor* tensor(std::string_view name) const;  // null when absent
};

// A row as a plan carries it: {"name", "category", "tier" ("device" | "host"), "shape" (text),
// "dtype", "bytes", "phases" (names)}. Strict parse: errors name `where` and the key.
Json to_json(const BufferRow& r);
BufferRow buffer_row_from_json(const Json& j, const std::string& where);

// Page geometry and counts (docs/schedule.md); all counts per GPU.
struct PageCounts {
  int64_t layers = 0;             // effective layers
  int64_t chunks = 0;             // n
  int64_t pages_per_layer = 0;    // P
  int64_t pages_per_chunk = 0;    // C / p
  int64_t kv_page_bytes = 0;
  int64_t grad_page_bytes = 0;
  int64_t kv_pool_pages = 0;      // device pool high-water marks (sparse: with the modelled union)
  int64_t grad_pool_pages = 0;
  // Device pool allocations: the high-water marks in dense mode; sparse pools are allocated for the
  // union's bound (B pages per query page and selection group), not the modelled overlap. The
  // published implementation allocates per page: its pool rows' pages (set with the table's rows).
  int64_t kv_pool_capacity_pages = 0;
  int64_t grad_pool_capacity_pages = 0;
  int64_t host_kv_pages = 0;      // host tier (offload only)
  int64_t host_grad_pages = 0;
  int64_t max_union_pages = 0;    // sparse: largest prefix set of a chunk (dense: the prefix)
  // The published implementation with offload: pages (of each kind) whose write-back has not
  // finished at the pool's peak, over the pool pages above (Target::pages_in_flight); else 0.
  int64_t pages_in_flight = 0;
};

// Pages copied in for chunk c under the modelled selection overlap (dense: the prefix).
int64_t union_pages(const Geometry& g, int64_t c);
int64_t attended_prefix_pages(const Geometry& g, int64_t c);  // pages each query page attends
PageCounts page_counts(const Geometry& g);

// The selection overlap a run's measured unions imply: union_pages's formula inverted,
// overlap = 1 - (union / B - 1) / (q_c - 1), for each measured (chunk, union) whose chunk has more
// than one query page and a prefix that caps no union the formula can give (prefix > B x q_c), held
// in [0, 1] (per-KV-head selections can pick beyond B x q_c: 0, the formula's worst case).
// at_largest: the overlap under which the formula reaches the largest of those unions (the pools'
// high-water; rounded down, planning with it covers every measured union); mean: over the pairs
// (the copies). pairs = 0 (and the figures meaningless) when no measured union is informative.
struct ImpliedOverlap {
  int64_t pairs = 0;
  double at_largest = 1, mean = 0;
};
// One (chunk, layer)'s selection union as the executor measures it (executor Measured::union_pages,
// the trace's measured.union_pages).
struct MeasuredUnion {
  int64_t chunk = 0, layer = 0, pages = 0;
};
ImpliedOverlap implied_overlap(const Geometry& g, const std::vector<MeasuredUnion>& unions);

// The peak is the maximum over the schedule's phases of the bytes alive in a phase (pools at
// their allocated capacity); ties go to the first phase in step order.
struct BufferTable {
  std::vector<BufferRow> rows;
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
  int64_t device_bytes(bool include_reserve = true) const;
  int64_t host_bytes() const;
  const BufferRow* find(const std::string& name, Tier tier) const;  // null when absent
};

// A row's figures without its text: what peaks and the arena layout read (the name is one of the
// table's literals, step/buffers.cpp).
struct RowSize {
  const char* name = "";
  Category category = Category::weights;
  Tier tier = Tier::device;
  int64_t bytes = 0;
  PhaseMask phases = 0;
};

// The rows of buffer_table as figures only, for the simulator's fast path (which needs the peaks, not
// the rows): the same rows, in the same order, sized by the same code, built without a string or an
// allocation (a row's std::strings and the vector holding them were most of an evaluation's time).
struct TableSizes {
  static constexpr int kMaxRows = 64;  // a table has about 20 rows; more is a bug (asserted)
  std::array<RowSize, kMaxRows> row_storage;
  int row_count = 0;
  PageCounts pages;
  Schedule schedule = Schedule::oomb;
  std::span<const RowSize> rows() const { return {row_storage.data(), static_cast<size_t>(row_count)}; }
  // As BufferTable's.
  BufferTable::PhasePeak device_peak(bool include_reserve = true) const;
  BufferTable::PhasePeak host_peak() const;
};

// The table of the step for `target` (describe = false: bytes and phases only, for the planner's
// inner loop). g must be geometry(model, config).
BufferTable buffer_table(const models::ModelSpec& m, const Config& c, const Target& target, const Geometry& g,
                         bool describe);
BufferTable buffer_table(const models::ModelSpec& m, const Config& c, const Target& target, bool describe = true);
// The same table's figures (TableSizes). g must be geometry(model, config).
TableSizes table_sizes(const models::ModelSpec& m, const Config& c, const Target& target, const Geometry& g);

}  // namespace oomb::step
