#include <optional>
#include <set>
#include <string>

#include "core/format.h"
#include "step/buffers.h"
#include "validation/judged.h"

namespace oomb::validation::detail {

using namespace simulator;

void memory_terms(const Judged& j, Validation& v) {
  const step::RunRecord& run = j.run;
  const Scenario& s = j.s;
  const EventResult& pred = j.pred;
  const std::string& backend = j.backend;
  const double copy_tol = j.copy_tolerance;
  const std::string& sparse_note = j.sparse_note;
  std::vector<ValidationTerm>& terms = v.terms;
  const step::PageCounts pc = page_counts(s);
  const double kv_hw = static_cast<double>(run.kv_pool_high_water_pages);
  const double grad_hw = static_cast<double>(run.grad_pool_high_water_pages);
  // Device memory: the runtime's allocations, measured by its memory account under the rows of the
  // run's buffer table, against the predicted table's peak over phases, and the breakdown at the
  // peak category by category. The table is the backend's that ran (a cpu run holds none of the
  // CUDA backend's rows).
  Scenario mem = s;
  if (backend == "cpu") mem.gpu.kind = "cpu";
  // A CUPTI-timed run holds the collector's activity buffers (a host row the plan leaves out).
  mem.cupti_timed = backend == "cuda" && run.cupti_timed;
  const Summary mem_pred = mem.gpu.kind == s.gpu.kind && !mem.cupti_timed ? pred.summary : evaluate(mem);
  add_term(v, "peak_device_bytes", "bytes", static_cast<double>(mem_pred.peak_device_bytes),
      static_cast<double>(run.peak_device_bytes), kPeakBytesTolerance,
      mem_pred.peak_phase.empty() ? "" : "peak phase " + mem_pred.peak_phase);
  if (!run.device_breakdown_bytes.empty()) {
    std::set<std::string> cats;
    for (const auto& [cat, b] : mem_pred.device_breakdown_bytes) cats.insert(cat);
    for (const auto& [cat, b] : run.device_breakdown_bytes) cats.insert(cat);
    for (const std::string& cat : cats) {
      auto p = mem_pred.device_breakdown_bytes.find(cat);
      auto q = run.device_breakdown_bytes.find(cat);
      add_term(v, "peak:" + cat, "bytes",
               p == mem_pred.device_breakdown_bytes.end() ? 0.0 : static_cast<double>(p->second),
               q == run.device_breakdown_bytes.end() ? 0.0 : static_cast<double>(q->second), kExactTolerance,
               "at the peak");
    }
  }
  // CUDA: what the device really gave the run (every cudaMalloc CUPTI recorded: the arena's blocks,
  // cuBLASLt's and the backend's own buffers) must stay within what the plan holds the GPU for, the
  // table's peak plus the profile's runtime reserve (the CUDA context and libraries' share). A
  // judged bound: an allocator that reserves more than it uses, or scratch outside the table,
  // fails it.
  // The arena's block beyond the buffers (the table's allocator_blocks row) is part of the plan.
  if (run.cupti_reserved_device_bytes) {
    Scenario reserved = mem;
    reserved.config.peak_measure = step::PeakMeasure::reserved;
    const Summary rp = evaluate(reserved);
    const auto blocks = rp.device_breakdown_bytes.find(step::kAllocatorCategory);
    const int64_t arena_slack = blocks == rp.device_breakdown_bytes.end() ? 0 : blocks->second;
    add_term(v, "reserved_device_bytes", "bytes",
        static_cast<double>(mem_pred.peak_device_bytes + arena_slack + s.gpu.reserved_bytes),
        static_cast<double>(*run.cupti_reserved_device_bytes), kExactTolerance,
        "at most: the table's peak + the arena block's slack (" + format_bytes(arena_slack) +
            ") + the runtime reserve (" + format_bytes(s.gpu.reserved_bytes) +
            "); measured: device bytes CUDA allocated (CUPTI)");
    terms.back().at_most = true;
  }
  add_term(v, "device_pool_bytes", "bytes",
      static_cast<double>(pc.kv_pool_pages * pc.kv_page_bytes + pc.grad_pool_pages * pc.grad_page_bytes),
      kv_hw * static_cast<double>(run.kv_page_bytes) + grad_hw * static_cast<double>(run.grad_page_bytes), copy_tol,
      sparse_note);
  add_term(v, "pool_pages", "pages", static_cast<double>(pc.kv_pool_pages + pc.grad_pool_pages), kv_hw + grad_hw,
           copy_tol, sparse_note);
  add_term(v, "kv_pool_pages", "pages", static_cast<double>(pc.kv_pool_pages), kv_hw, copy_tol, sparse_note);
  add_term(v, "grad_pool_pages", "pages", static_cast<double>(pc.grad_pool_pages), grad_hw, copy_tol, sparse_note);
  add_term(v, "host_pool_bytes", "bytes",
      static_cast<double>(pc.host_kv_pages * pc.kv_page_bytes + pc.host_grad_pages * pc.grad_page_bytes),
      static_cast<double>(run.host_kv_pages * run.kv_page_bytes + run.host_grad_pages * run.grad_page_bytes),
      kExactTolerance);
  add_term(v, "peak_host_bytes", "bytes", static_cast<double>(mem_pred.peak_host_bytes),
           static_cast<double>(run.peak_host_bytes), kPeakHostBytesTolerance);
}

}  // namespace oomb::validation::detail
