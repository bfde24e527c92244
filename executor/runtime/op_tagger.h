#pragma once
// Tags the work the driver issues with its (stage, chunk, layer, op), so that a device profiler can
// attribute every kernel and copy to the pass that launched it. Backend-independent (no CUDA
// header): the CLI adapts it to the CUPTI collector's external correlation tags
// (executor/cupti/collector.h); tests implement it to check the tags.
//
// The driver (Engine) pushes a tag around every op it times (the same (stage, chunk, layer, op) as
// the TraceRecorder's compute events, with the op's name), around the page work of each pass
// (acquire / release: gradient pages zeroed, write-backs), and the offload engine pushes the copy's
// own pass around each copy_async (prefetches are tagged with the pass they prefetch for, not the
// pass running at the time). Tags nest: the innermost is the one that applies. push and pop are
// called on the thread that issues the work (the driver's thread), in strictly nested pairs.
// Without a tagger (EngineOptions::tagger == nullptr) the driver only tests the pointer.
#include <cstdint>

namespace oomb::executor {

class OpTagger {
 public:
  virtual ~OpTagger() = default;
  // stage: 1 or 2 (-1 n/a); chunk, layer: -1 n/a. op: the pass as in the trace's Event::op
  // ("embedding", "layer_fwd", "layer_recompute", "layer_bwd", "lm_head", "embedding_bwd",
  // "optimizer"); name: what runs inside it ("attention_fwd", "mlp_bwd", "pages", copies:
  // "kv_prefix", "dkv", "kv_own", "dkv_prefix"). Both are string literals (valid for the program's
  // lifetime).
  virtual void push(int stage, int64_t chunk, int64_t layer, const char* op, const char* name) = 0;
  // Must not throw: it runs in destructors (TagScope), also while an exception unwinds.
  virtual void pop() noexcept = 0;
};

// push() for the lifetime of the scope; nothing when the tagger is null.
class TagScope {
 public:
  TagScope(OpTagger* t, int stage, int64_t chunk, int64_t layer, const char* op, const char* name) : t_(t) {
    if (t_) t_->push(stage, chunk, layer, op, name);
  }
  ~TagScope() {
    if (t_) t_->pop();
  }
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  OpTagger* t_;
};

}  // namespace oomb::executor
