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
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/op.h"

namespace oomb::executor {

class OpTagger {
 public:
  virtual ~OpTagger() = default;
  // stage: 1 or 2 (-1 n/a); chunk, layer: -1 n/a. op: the pass as in the trace's Event::op
  // (core/op.h); name: what runs inside it ("attention_fwd", "mlp_bwd", "pages", copies:
  // "kv_prefix", "dkv", "kv_own", "dkv_prefix"), a string literal (valid for the program's lifetime).
  virtual void push(int stage, int64_t chunk, int64_t layer, Op op, const char* name) = 0;
  // Must not throw: it runs in destructors (TagScope), also while an exception unwinds.
  virtual void pop() noexcept = 0;
};

// push() for the lifetime of the scope; nothing when the tagger is null.
class TagScope {
 public:
  TagScope(OpTagger* t, int stage, int64_t chunk, int64_t layer, Op op, const char* name) : t_(t) {
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

// Where a step failed: keeps the tag stack (forwarding to an optional inner tagger, e.g. the CUPTI
// one) and, at the first pop that runs while an exception unwinds, records the innermost tag: the
// (stage, chunk, layer, op, name) the failing op or copy was issued under. A CUDA fault is raised
// where it is detected (the next launch check or synchronisation; OOMB_CUDA_SYNC_CHECK=1 makes that
// the launch that caused it).
class FaultTagger final : public OpTagger {
 public:
  struct Tag {
    int stage = -1;
    int64_t chunk = -1, layer = -1;
    Op op = Op::none;
    std::string name;
    std::string to_string() const {
      return "stage " + std::to_string(stage) + ", chunk " + std::to_string(chunk) + ", layer " +
             std::to_string(layer) + ", " + oomb::to_string(op) + " / " + name;
    }
  };
  explicit FaultTagger(OpTagger* inner = nullptr) : inner_(inner) {}
  void push(int stage, int64_t chunk, int64_t layer, Op op, const char* name) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stack_.push_back({stage, chunk, layer, op, name ? name : ""});
    }
    if (inner_) inner_->push(stage, chunk, layer, op, name);
  }
  void pop() noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stack_.empty()) {
        if (!fault_ && std::uncaught_exceptions() > 0) fault_ = stack_.back();
        stack_.pop_back();
      }
    }
    if (inner_) inner_->pop();
  }
  std::optional<Tag> fault() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fault_;
  }

 private:
  OpTagger* inner_;
  mutable std::mutex mu_;
  std::vector<Tag> stack_;
  std::optional<Tag> fault_;
};

}  // namespace oomb::executor
