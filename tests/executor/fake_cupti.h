#pragma once
// A stand-in for CUPTI on machines without a GPU: a Backend that forwards every call to another
// backend (the CPU reference) and produces the activity records the CUPTI collector would hand over
// for the same calls on the CUDA backend, and an OpTagger that keeps the external-correlation tag
// stack the way CUPTI does (push / pop on the calling thread; every API call is correlated with the
// top of the stack). Each backend call is one API call: a correlation id, one work record timed with
// the steady clock around the call (ops: a kernel on the compute stream; upload / download: a
// memcpy on the compute stream, as the CUDA backend's staged transfers; fill_zero: a memset;
// copy_async: one memcpy on the h2d / d2h stream timed by its on_done, none without regions) and, under a tag, one
// external-correlation record with the packed tag. allocate / deallocate give memory records.
// host_syncs() counts the calls that make the CUDA backend's host wait for the device (its own
// count, CudaBackend::host_syncs): download, select_pages, cross_entropy, take_losses, a host-tier
// deallocate; loss_readbacks() the cross_entropy and take_losses calls among them. (Tensor
// parallelism's shard loss ops are kernels: no host wait.)
// decode() (executor/cupti/decode.h) then turns the records into a "cuda-cupti" trace exactly as it
// does for a real collector's.
#include <algorithm>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "executor/cupti/decode.h"
#include "executor/runtime/backend.h"
#include "executor/runtime/op_tagger.h"
#include "executor/runtime/trace_recorder.h"

namespace oomb::executor::test {

class FakeCupti final : public Backend, public OpTagger {
 public:
  static constexpr uint32_t kCompute = 11, kH2d = 12, kD2h = 13;  // "CUPTI stream ids"

  explicit FakeCupti(Backend& inner) : b_(inner) {}

  // ---- OpTagger
  void push(int stage, int64_t chunk, int64_t layer, Op op, const char*) override {
    std::lock_guard<std::mutex> lock(mu_);
    stack_.push_back(cupti::pack_tag({stage, chunk, layer, op == Op::none ? -1 : static_cast<int>(op)}));
    max_depth_ = std::max(max_depth_, static_cast<int64_t>(stack_.size()));
    ++pushes_;
  }
  void pop() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    if (stack_.empty()) ++unbalanced_;
    else stack_.pop_back();
  }

  // ---- what the "collector" saw
  std::vector<cupti::Record> records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }
  cupti::DecodeOptions decode_options() const {
    std::lock_guard<std::mutex> lock(mu_);
    cupti::DecodeOptions o;
    o.streams = {{kCompute, traces::Lane::compute}, {kH2d, traces::Lane::h2d}, {kD2h, traces::Lane::d2h}};
    return o;
  }
  int64_t depth() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(stack_.size());
  }
  int64_t max_depth() const {
    std::lock_guard<std::mutex> lock(mu_);
    return max_depth_;
  }
  int64_t pushes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pushes_;
  }
  int64_t unbalanced() const {
    std::lock_guard<std::mutex> lock(mu_);
    return unbalanced_;
  }
  // A kernel launched with no tag pushed (what work the driver forgot to tag would look like).
  void untagged_kernel(const char* name) {
    const int64_t t0 = steady_now_ns();
    work(cupti::RecordKind::kernel, name, kCompute, t0, t0 + 1000, 0, cupti::CopyKind::other, /*tagged=*/false);
  }

  // ---- Backend
  std::string name() const override { return b_.name(); }
  std::vector<BackendBuffer> device_buffers() const override { return b_.device_buffers(); }
  void* allocate(Tier tier, int64_t bytes) override {
    void* p = b_.allocate(tier, bytes);
    memory(cupti::MemoryOp::allocation, tier, p, bytes);
    return p;
  }
  void deallocate(Tier tier, void* p, int64_t bytes) override {
    if (tier == Tier::host) sync();
    b_.deallocate(tier, p, bytes);
    memory(cupti::MemoryOp::release, tier, p, bytes);
  }
  void fill_zero(void* p, int64_t bytes) override {
    timed(cupti::RecordKind::memset, "", kCompute, bytes, [&] { b_.fill_zero(p, bytes); });
  }
  void upload(void* dst, const void* src, int64_t bytes) override {
    timed(cupti::RecordKind::memcpy, "", kCompute, bytes, [&] { b_.upload(dst, src, bytes); }, cupti::CopyKind::h2d);
  }
  void download(void* dst, const void* src, int64_t bytes) override {
    sync();
    timed(cupti::RecordKind::memcpy, "", kCompute, bytes, [&] { b_.download(dst, src, bytes); }, cupti::CopyKind::d2h);
  }
  EventPtr copy_async(CopyRequest req) override {
    // No regions (the offload engine's end-of-step fence): the CUDA backend issues no memcpy.
    if (req.regions.empty()) return b_.copy_async(std::move(req));
    int64_t bytes = 0;
    for (const auto& r : req.regions) bytes += r.bytes;
    const bool h2d = req.dir == CopyDir::h2d;
    uint32_t corr = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      corr = correlate();
    }
    auto inner = std::move(req.on_done);
    req.on_done = [this, corr, h2d, bytes, inner](int64_t t0, int64_t t1) {
      cupti::Record r;
      r.kind = cupti::RecordKind::memcpy;
      r.copy = h2d ? cupti::CopyKind::h2d : cupti::CopyKind::d2h;
      r.correlation_id = corr;
      r.stream_id = h2d ? kH2d : kD2h;
      r.start_ns = t0;
      r.end_ns = std::max(t0, t1);
      r.bytes = bytes;
      {
        std::lock_guard<std::mutex> lock(mu_);
        records_.push_back(std::move(r));
      }
      if (inner) inner(t0, t1);
    };
    return b_.copy_async(std::move(req));
  }
  void wait(const EventPtr& e) override { b_.wait(e); }

  void embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out) override {
    kernel("embedding_fwd", [&] { b_.embedding_fwd(ids, rows, table, hidden, out); });
  }
  void embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden, Tensor acc) override {
    kernel("embedding_bwd", [&] { b_.embedding_bwd(ids, rows, dout, hidden, acc); });
  }
  void rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y,
                   float* rstd) override {
    kernel("rmsnorm_fwd", [&] { b_.rmsnorm_fwd(x, w, rows, dim, eps, y, rstd); });
  }
  void rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows, int64_t dim,
                   Tensor dx, Tensor dw) override {
    kernel("rmsnorm_bwd", [&] { b_.rmsnorm_bwd(x, w, rstd, dy, rows, dim, dx, dw); });
  }
  void linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out,
                  Tensor y) override {
    kernel("gemm", [&] { b_.linear_fwd(x, rows, in, w, b, out, y); });
  }
  void linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy, Tensor dx,
                  bool acc, Tensor dw, Tensor db) override {
    kernel("gemm", [&] { b_.linear_bwd(x, rows, in, w, out, dy, dx, acc, dw, db); });
  }
  void lora_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank, int64_t out,
                float scale, Tensor u, Tensor y) override {
    kernel("gemm", [&] { b_.lora_fwd(x, rows, in, a, b, rank, out, scale, u, y); });
  }
  void lora_bwd(ConstTensor x, ConstTensor u, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
                int64_t out, float scale, ConstTensor dy, Tensor du, Tensor dx, Tensor da, Tensor db) override {
    kernel("gemm", [&] { b_.lora_bwd(x, u, rows, in, a, b, rank, out, scale, dy, du, dx, da, db); });
  }
  void rope_fwd(Tensor x, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, const models::Rope& rope) override {
    kernel("rope_fwd", [&] { b_.rope_fwd(x, rows, heads, hd, pos0, rope); });
  }
  void rope_bwd(Tensor dx, int64_t rows, int64_t heads, int64_t hd, int64_t pos0, const models::Rope& rope) override {
    kernel("rope_bwd", [&] { b_.rope_bwd(dx, rows, heads, hd, pos0, rope); });
  }
  void swiglu_fwd(ConstTensor g, ConstTensor u, int64_t n, Tensor out, float limit = 0) override {
    kernel("swiglu_fwd", [&] { b_.swiglu_fwd(g, u, n, out, limit); });
  }
  void swiglu_bwd(ConstTensor g, ConstTensor u, ConstTensor dout, int64_t n, Tensor dg, Tensor du, float limit = 0) override {
    kernel("swiglu_bwd", [&] { b_.swiglu_bwd(g, u, dout, n, dg, du, limit); });
  }
  void geglu_fwd(ConstTensor g, ConstTensor u, int64_t n, Tensor out) override {
    kernel("geglu_fwd", [&] { b_.geglu_fwd(g, u, n, out); });
  }
  void geglu_bwd(ConstTensor g, ConstTensor u, ConstTensor dout, int64_t n, Tensor dg, Tensor du) override {
    kernel("geglu_bwd", [&] { b_.geglu_bwd(g, u, dout, n, dg, du); });
  }
  void add(Tensor y, ConstTensor x, int64_t n) override {
    kernel("add", [&] { b_.add(y, x, n); });
  }
  void moe_route(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize, int32_t* route_experts,
                 float* route_weights, int32_t* route_rows, int32_t* offsets) override {
    kernel("moe_route", [&] {
      b_.moe_route(logits, rows, experts, k, renormalize, route_experts, route_weights, route_rows, offsets);
    });
  }
  void moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k, const int32_t* route_experts,
                          double* counts, double* prob_sums) override {
    kernel("moe_aux_statistics", [&] { b_.moe_aux_statistics(logits, rows, experts, k, route_experts, counts, prob_sums); });
  }
  void moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                    float* d_logits) override {
    kernel("moe_aux_grad", [&] { b_.moe_aux_grad(logits, rows, experts, shares, scale, d_logits); });
  }
  void moe_route_bwd(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                     const int32_t* route_experts, const float* route_weights, const float* d_weights,
                     Tensor d_logits) override {
    kernel("moe_route_bwd", [&] {
      b_.moe_route_bwd(logits, rows, experts, k, renormalize, route_experts, route_weights, d_weights, d_logits);
    });
  }
  void moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                  Tensor packed) override {
    kernel("moe_gather", [&] { b_.moe_gather(x, rows, dim, k, route_rows, packed); });
  }
  void moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                   const float* weights, Tensor y, bool accumulate) override {
    kernel("moe_combine", [&] { b_.moe_combine(packed, rows, dim, k, route_rows, weights, y, accumulate); });
  }
  void moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                       const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights) override {
    kernel("moe_combine_bwd",
           [&] { b_.moe_combine_bwd(dy, packed, rows, dim, k, route_rows, weights, d_packed, d_weights); });
  }
  void copy(Tensor dst, ConstTensor src, int64_t n) override {
    timed(cupti::RecordKind::memcpy, "", kCompute, n * dtype_bytes(dst.dtype), [&] { b_.copy(dst, src, n); }, cupti::CopyKind::d2d);
  }
  void attention_fwd(const PagedAttention& a, Tensor o, float* lse) override {
    kernel("attn_fwd", [&] { b_.attention_fwd(a, o, lse); });
  }
  void attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                           float* lse) override {
    kernel("attention_sinks_fwd", [&] { b_.attention_sinks_fwd(sinks, rows, q_heads, head_dim, o, lse); });
  }
  void attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                           const float* lse, ConstTensor dout, Tensor d_sinks) override {
    kernel("attention_sinks_bwd", [&] { b_.attention_sinks_bwd(sinks, rows, q_heads, head_dim, o, lse, dout, d_sinks); });
  }
  void attention_bwd(const PagedAttention& a, ConstTensor o, const float* lse, ConstTensor dout, Tensor dq,
                     Tensor dk, Tensor dv, const std::vector<float*>& pages) override {
    kernel("attn_bwd", [&] { b_.attention_bwd(a, o, lse, dout, dq, dk, dv, pages); });
  }
  void write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t p,
                      const std::vector<float*>& pages, PageDtype dtype) override {
    kernel("write_kv_pages", [&] { b_.write_kv_pages(k, v, rows, kv_dim, p, pages, dtype); });
  }
  void add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim, int64_t p, Tensor dk,
                           Tensor dv, PageDtype dtype) override {
    kernel("add_from_grad_pages", [&] { b_.add_from_grad_pages(pages, rows, kv_dim, p, dk, dv, dtype); });
  }
  void page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t p, Tensor out) override {
    kernel("page_summaries", [&] { b_.page_summaries(k, rows, kv_dim, p, out); });
  }
  std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) override {
    std::vector<std::vector<int32_t>> r;
    sync();
    kernel("select_pages", [&] { r = b_.select_pages(a); });
    return r;
  }
  double cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float s,
                       Tensor grad) override {
    double r = 0;
    sync(true);
    kernel("cross_entropy", [&] { r = b_.cross_entropy(logits, rows, vocab, targets, s, grad); });
    return r;
  }
  void cross_entropy_acc(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float s,
                         Tensor grad, int64_t slot) override {
    kernel("cross_entropy", [&] { b_.cross_entropy_acc(logits, rows, vocab, targets, s, grad, slot); });
  }
  std::vector<double> take_losses(int64_t n) override {
    sync(true);
    return b_.take_losses(n);
  }
  // Tensor parallelism's loss: three kernels, none of which makes the CUDA backend's host wait (the
  // combine adds the tile's loss to the slot on the device).
  void cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                 float* stats) override {
    kernel("shard_stats_kernel", [&] { b_.cross_entropy_shard_stats(logits, rows, vocab, targets, stats); });
  }
  void cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                   int64_t slot) override {
    kernel("shard_combine_kernel", [&] { b_.cross_entropy_shard_combine(stats, ranks, rows, targets, slot); });
  }
  void cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                const float* max_sum, float s, Tensor grad) override {
    kernel("shard_grad_kernel", [&] { b_.cross_entropy_shard_grad(logits, rows, vocab, targets, max_sum, s, grad); });
  }
  int64_t host_syncs() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return host_syncs_;
  }
  int64_t loss_readbacks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return loss_readbacks_;
  }
  void scale(Tensor x, int64_t n, float s) override {
    kernel("scale_kernel", [&] { b_.scale(x, n, s); });
  }
  void adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* mask, int64_t n,
             float lr, float b1, float b2, float eps, float wd, int64_t step, float grad_scale) override {
    kernel("adamw", [&] { b_.adamw(param, master, grad, m, v, mask, n, lr, b1, b2, eps, wd, step, grad_scale); });
  }

 private:
  void sync(bool loss = false) {
    std::lock_guard<std::mutex> lock(mu_);
    ++host_syncs_;
    if (loss) ++loss_readbacks_;
  }
  // Under mu_: a new correlation id, with its external-correlation record when a tag is pushed.
  uint32_t correlate(bool tagged = true) {
    const uint32_t corr = ++next_corr_;
    if (tagged && !stack_.empty()) {
      cupti::Record x;
      x.kind = cupti::RecordKind::external_correlation;
      x.correlation_id = corr;
      x.external_id = stack_.back();
      records_.push_back(x);
    }
    return corr;
  }
  void work(cupti::RecordKind kind, const char* name, uint32_t stream, int64_t t0, int64_t t1, int64_t bytes,
            cupti::CopyKind copy, bool tagged = true) {
    std::lock_guard<std::mutex> lock(mu_);
    cupti::Record r;
    r.kind = kind;
    r.correlation_id = correlate(tagged);
    r.stream_id = stream;
    r.start_ns = t0;
    r.end_ns = std::max(t0, t1);
    r.bytes = bytes;
    r.copy = copy;
    r.name = name;
    records_.push_back(std::move(r));
  }
  template <class F>
  void timed(cupti::RecordKind kind, const char* name, uint32_t stream, int64_t bytes, F&& f,
             cupti::CopyKind copy = cupti::CopyKind::other) {
    const int64_t t0 = steady_now_ns();
    f();
    work(kind, name, stream, t0, steady_now_ns(), bytes, copy);
  }
  template <class F>
  void kernel(const char* name, F&& f) {
    timed(cupti::RecordKind::kernel, name, kCompute, 0, std::forward<F>(f));
  }
  void memory(cupti::MemoryOp op, Tier tier, void* p, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    cupti::Record r;
    r.kind = cupti::RecordKind::memory;
    r.memory_op = op;
    r.memory_kind = tier == Tier::device ? cupti::MemoryKind::device : cupti::MemoryKind::pinned;
    r.address = reinterpret_cast<uint64_t>(p);
    r.bytes = bytes;
    r.start_ns = steady_now_ns();
    records_.push_back(std::move(r));
  }

  Backend& b_;
  mutable std::mutex mu_;
  std::vector<cupti::Record> records_;
  std::vector<uint64_t> stack_;
  uint32_t next_corr_ = 0;
  int64_t max_depth_ = 0, pushes_ = 0, unbalanced_ = 0;
  int64_t host_syncs_ = 0, loss_readbacks_ = 0;
};

}  // namespace oomb::executor::test
