#pragma once
// Collects a measured oomb.trace/1 while the executor runs: compute events per (stage, chunk, layer,
// op) timed with a steady clock, copy events from the copy streams (thread-safe), memory samples.
// Names follow the simulator: op = the pass (core/op.h: embedding, layer_fwd, layer_recompute,
// lm_head, layer_bwd, embedding_bwd, optimizer_step, the collectives); name = the op inside it ("attention_fwd", "mlp_bwd",
// ...; copies: "kv_prefix", "kv_own", "dkv_prefix", "dkv_own"). Coarser detail merges consecutive
// events of a stream that share the level's key (as the simulator does).
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "traces/trace.h"

namespace oomb::executor {

int64_t steady_now_ns();

class TraceRecorder {
 public:
  TraceRecorder(bool enabled, traces::Detail detail);
  bool enabled() const { return enabled_; }
  traces::Detail detail() const { return detail_; }
  int64_t origin_ns() const { return origin_; }

  // Absolute steady-clock times; stored relative to the recorder's origin.
  void compute(const char* name, Op op, int stage, int64_t chunk, int64_t layer, int64_t start_ns,
               int64_t end_ns, double flops);
  void copy(bool h2d, const char* name, Op op, int stage, int64_t chunk, int64_t layer, int64_t start_ns,
            int64_t end_ns, int64_t bytes);
  // A collective (the comm lane): one call's transfer, from the last rank's arrival to this rank's
  // exit (CollectiveClock). Never merged with another at layer detail (a pass makes several).
  void collective(const char* name, Op op, int stage, int64_t chunk, int64_t layer, int64_t start_ns,
                  int64_t end_ns, int64_t bytes);
  void memory(int64_t device_bytes, int64_t host_bytes, int64_t pool_pages);
  // A phase event (traces::kStepPhase around each step, op Op::step); never merged with another.
  void phase(const char* name, int64_t start_ns, int64_t end_ns);

  // Merged at the recorder's detail, with the summary recomputed from the events.
  traces::Trace finish(traces::Metadata metadata) const;

 private:
  void add(traces::Event e);
  // An event of the given stream, times made relative to the origin (an end before its start is
  // clamped to the start).
  traces::Event event(traces::EventKind kind, traces::Lane lane, const char* name, Op op, int stage,
                      int64_t chunk, int64_t layer, int64_t start_ns, int64_t end_ns) const;
  bool enabled_;
  traces::Detail detail_;
  int64_t origin_;
  mutable std::mutex mu_;
  std::vector<traces::Event> events_;
  std::vector<traces::MemorySample> memory_;
};

}  // namespace oomb::executor
