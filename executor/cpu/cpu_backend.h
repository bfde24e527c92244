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
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "executor/runtime/backend.h"

namespace oomb::executor {

struct CpuBackendOptions {
  // Compute threads (OpenMP loops and BLAS GEMMs, process-wide: cpu::set_threads); 0 = the CPUs
  // this process may run on. The copy workers are two more threads, outside this count.
  int threads = 0;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});
  int threads() const { return threads_; }
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }

  void* allocate(Tier tier, int64_t bytes) override;
  void deallocate(Tier tier, void* p, int64_t bytes) override;
  void fill_zero(void* p, int64_t bytes) override;
  void upload(void* device_dst, const void* src, int64_t bytes) override;
  void download(void* dst, const void* device_src, int64_t bytes) override;
  EventPtr copy_async(CopyRequest req) override;
  void wait(const EventPtr& e) override;

  void embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out) override;
  void embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dtable_acc) override;
  void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y,
                   float* rstd) override;
  void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                   float* dx_acc, float* dw_acc) override;
  void linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out,
                  float* y) override;
  void linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy, float* dx,
                  bool accumulate_dx, float* dw_acc, float* db_acc) override;
  void rope_fwd(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) override;
  void rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) override;
  void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out) override;
  void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                  float* dup) override;
  void add(float* y, const float* x, int64_t n) override;
  void copy(float* dst, const float* src, int64_t n) override;
  void attention_fwd(const PagedAttention& a, float* o, float* lse) override;
  void attention_bwd(const PagedAttention& a, const float* o, const float* lse, const float* dout, float* dq,
                     float* dk_own, float* dv_own, const std::vector<float*>& prefix_grad_pages) override;
  void write_kv_pages(const float* k, const float* v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                      const std::vector<float*>& pages, PageDtype dtype) override;
  void add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           float* dk, float* dv, PageDtype dtype) override;
  void page_summaries(const float* k, int64_t rows, int64_t kv_dim, int64_t page_tokens, float* out) override;
  std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) override;
  double cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale) override;
  void scale(float* x, int64_t n, float s) override;
  void adamw(float* param, const float* grad, float* m, float* v, const uint8_t* decay_mask, int64_t n, float lr,
             float beta1, float beta2, float eps, float weight_decay, int64_t step) override;

 private:
  struct Job {
    CopyRequest req;
    EventPtr done;
  };
  struct Stream {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Job> queue;
    std::thread worker;
    bool stop = false;
  };
  void run_stream(Stream& s);
  // a with its bf16 prefix pages replaced by fp32 copies in kv_scratch_ (a itself when fp32).
  const PagedAttention& fp32_pages(const PagedAttention& a, PagedAttention& converted);

  int threads_ = 1;
  Stream streams_[2];  // h2d, d2h
  std::vector<float> kv_scratch_, grad_scratch_;  // fp32 copies of bf16 KV / gradient pages
};

}  // namespace oomb::executor
