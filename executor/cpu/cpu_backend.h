#pragma once
// The CPU reference backend: fp32 ops (executor/cpu/ops.h), a "device" tier that is ordinary
// memory accounted separately from the host tier, and one worker thread per copy direction that
// runs queued copies in order after their dependency events and signals completion events.
//
// bf16 pages (PageDtype::bf16) by conversion: write_kv_pages rounds the fp32 K/V rows to bf16;
// attention converts the attended bf16 pages to an fp32 scratch and runs the fp32 kernels on it;
// with bf16 gradient pages, attention_bwd accumulates the chunk's contribution in a zeroed fp32
// scratch and then adds it into the bf16 pages (one fp32 add and one rounding per element and
// call); add_from_grad_pages reads bf16. The scratches are owned here, reused and grown as needed.
//
// bf16 storage of weights, gradients and activations (typed views, backend.h) the same way: every
// op loads its bf16 operands to fp32 (exact), runs the fp32 op and rounds its outputs once on store
// (accumulating outputs: load, add in fp32, round), with the one routine of runtime/bf16.h. So a CPU
// run stores exactly the bytes a GPU run would, and computes on the values a GPU run stores.
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "executor/runtime/backend.h"

namespace oomb::executor {

// Most compute threads a CpuBackend takes (oomb run / calibrate --threads): far more than any CPU
// this runs on has, a fixed number so that a command line means the same on every machine, and far
// below what libgomp fails to create (32768 threads: "Thread creation failed"; 100000: a crash).
constexpr int kMaxCpuThreads = 1024;

// Test doubles of a real device's behaviour (all off by default).
struct CpuBackendOptions {
  // A slow link: each copy request takes at least bytes x this (its stream's thread sleeps), so
  // tests can see whether copies overlap compute the way the simulator assumes.
  double copy_ns_per_byte[2] = {0, 0};  // h2d, d2h
  // A completion thread that reports late, as the CUDA backend's: a copy's data is in place (and
  // wait() and `after` lists see it) when its stream finishes it, but on_done runs and the returned
  // Event signals only this long afterwards (on a reporting thread).
  int64_t report_lag_ns = 0;
  // A sticky device error: every deallocate frees the memory and then throws, as the CUDA
  // backend's does once the context is broken.
  bool deallocate_throws = false;
  // A device fault: copy_async throws once this many copies were issued (-1: never).
  int64_t fail_copy_after = -1;
  // Compute threads (OpenMP loops and BLAS GEMMs, process-wide: cpu::set_threads); 0 = the CPUs
  // this process may run on. The copy workers are two more threads, outside this count.
  int threads = 0;
  // Called after every allocate and before every deallocate of a block with the requested bytes
  // (tests replay a run's allocation sequence through another allocator policy). Under the
  // allocator's lock: it must not call back into the backend.
  // `row`: the buffer table's row of the buffer (empty for a plain allocate).
  std::function<void(Tier tier, const void* p, int64_t bytes, const std::string& row, bool allocated)> on_allocation;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});
  int threads() const { return threads_; }
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  // Copies whose on_done has not run yet (only with report_lag_ns).
  int64_t reports_pending();
  // The caching allocator keeps each tier's freed blocks apart (a tier's cache never holds more
  // than that tier's high-water in use), so each tier's held bytes are measured on their own.
  // Bytes of freed blocks kept for reuse (both tiers, or one).
  int64_t cached_bytes();
  int64_t cached_bytes(Tier tier);
  // The most memory the allocator held at once (blocks in use, rounded to its alignment, plus the
  // cached ones): what a process-level measurement of it sees, as PyTorch's max_memory_reserved.
  // Both tiers (the process's footprint), or one tier's (the plan's reserved device peak).
  int64_t reserved_high_bytes();
  int64_t reserved_high_bytes(Tier tier);
  // The allocator's rounding of every block (bytes up to a multiple of it).
  static constexpr int64_t kAllocationAlignment = 64;

  void* allocate(Tier tier, int64_t bytes) override { return allocate_impl(tier, bytes, {}); }
  void* allocate_row(Tier tier, int64_t bytes, const std::string& row) override {
    return allocate_impl(tier, bytes, row);
  }
  void deallocate(Tier tier, void* p, int64_t bytes) override;
  void fill_zero(void* p, int64_t bytes) override;
  void upload(void* device_dst, const void* src, int64_t bytes) override;
  void download(void* dst, const void* device_src, int64_t bytes) override;
  EventPtr copy_async(CopyRequest req) override;
  void wait(const EventPtr& e) override;

  void embedding_fwd(const int32_t* ids, int64_t rows, ConstTensor table, int64_t hidden, Tensor out) override;
  void embedding_bwd(const int32_t* ids, int64_t rows, ConstTensor dout, int64_t hidden, Tensor dtable_acc) override;
  void rmsnorm_fwd(ConstTensor x, ConstTensor w, int64_t rows, int64_t dim, float eps, Tensor y,
                   float* rstd) override;
  void rmsnorm_bwd(ConstTensor x, ConstTensor w, const float* rstd, ConstTensor dy, int64_t rows, int64_t dim,
                   Tensor dx_acc, Tensor dw_acc) override;
  void linear_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, ConstTensor b, int64_t out,
                  Tensor y) override;
  void linear_bwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor w, int64_t out, ConstTensor dy, Tensor dx,
                  bool accumulate_dx, Tensor dw_acc, Tensor db_acc) override;
  void lora_fwd(ConstTensor x, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank, int64_t out,
                float scale, Tensor u, Tensor y) override;
  void lora_bwd(ConstTensor x, ConstTensor u, int64_t rows, int64_t in, ConstTensor a, ConstTensor b, int64_t rank,
                int64_t out, float scale, ConstTensor dy, Tensor du, Tensor dx_acc, Tensor da_acc,
                Tensor db_acc) override;
  void rope_fwd(Tensor x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope) override;
  void rope_bwd(Tensor dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope) override;
  void swiglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out, float limit = 0) override;
  void geglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out) override;
  void geglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup) override;
  void swiglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup,
                  float limit = 0) override;
  void moe_route(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize, int32_t* route_experts,
                 float* route_weights, int32_t* route_rows, int32_t* offsets) override;
  void moe_route_bwd(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                     const int32_t* route_experts, const float* route_weights, const float* d_weights,
                     Tensor d_logits) override;
  void moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k, const int32_t* route_experts,
                          double* counts, double* prob_sums) override;
  void moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                    float* d_logits) override;
  void moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows, Tensor packed) override;
  void moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                   const float* weights, Tensor y, bool accumulate) override;
  void moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                       const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights) override;
  void add(Tensor y, ConstTensor x, int64_t n) override;
  void copy(Tensor dst, ConstTensor src, int64_t n) override;
  void attention_fwd(const PagedAttention& a, Tensor o, float* lse) override;
  void attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                           float* lse) override;
  void attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                           const float* lse, ConstTensor dout, Tensor d_sinks) override;
  void attention_bwd(const PagedAttention& a, ConstTensor o, const float* lse, ConstTensor dout, Tensor dq,
                     Tensor dk_own, Tensor dv_own, const std::vector<float*>& prefix_grad_pages) override;
  void write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                      const std::vector<float*>& pages, PageDtype dtype) override;
  void add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           Tensor dk, Tensor dv, PageDtype dtype) override;
  void page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out) override;
  std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) override;
  double cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                       Tensor grad) override;
  void cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                 float* stats) override;
  void cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                const float* max_sum, float scale, Tensor grad) override;
  void scale(Tensor x, int64_t n, float s) override;
  void adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* decay_mask, int64_t n,
             float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
             float grad_scale) override;

 private:
  struct Job {
    CopyRequest req;
    EventPtr done;
    EventPtr data;  // with report_lag_ns: signalled when the data is in place, before `done`
  };
  struct Report {
    std::function<void(int64_t, int64_t)> on_done;
    int64_t t0 = 0, t1 = 0;
    EventPtr done;
  };
  struct Stream {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> queue;
    std::thread worker;
    bool stop = false;
  };
  void* allocate_impl(Tier tier, int64_t bytes, const std::string& row);
  void run_stream(Stream& s);
  void run_reporter();
  void wait_data(const EventPtr& e);  // the copy's data (report_lag_ns), else e itself
  // a with its bf16 prefix pages replaced by fp32 copies in kv_scratch_ (a itself when fp32).
  const PagedAttention& fp32_pages(const PagedAttention& a, PagedAttention& converted);

  CpuBackendOptions options_;
  int64_t copies_issued_ = 0;
  int threads_ = 1;
  Stream streams_[2];  // h2d, d2h
  std::mutex report_mu_;  // reports_, data_of_, reporter_stop_
  std::condition_variable report_cv_;
  std::deque<Report> reports_;
  std::map<const Event*, EventPtr> data_of_;  // returned event -> its data event, until reported
  bool reporter_stop_ = false;
  std::thread reporter_;
  std::vector<float> kv_scratch_, grad_scratch_;  // fp32 copies of bf16 KV / gradient pages
  std::vector<float> own_scratch_;                // fp32 copies of the chunk's bf16 q, k, v
  // The caching allocator (allocate / deallocate): blocks in use by address (size, tier), freed
  // blocks by size, per tier.
  struct TierHeap {
    std::unordered_multimap<size_t, void*> cached;
    int64_t cached_bytes = 0, in_use_bytes = 0, in_use_high_bytes = 0, reserved_high_bytes = 0;
  };
  std::mutex alloc_mu_;
  struct Live {
    size_t bytes;
    Tier tier;
    std::string row;
  };
  std::unordered_map<void*, Live> live_;
  TierHeap heaps_[2];  // by Tier
  int64_t reserved_high_bytes_ = 0;  // both tiers
};

}  // namespace oomb::executor
