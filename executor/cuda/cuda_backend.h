#pragma once
// The CUDA backend (name "cuda"): the Backend interface of executor/runtime/backend.h on one GPU.
// This header includes no CUDA header (pimpl), so the CLI and tests can use it anywhere.
//
// Memory tiers. Device: an arena over a few cudaMalloc'd blocks (reserved at construction, grown
// only by allocate(), which the runtime calls while it sets up, never inside a step); the page
// pools' single allocations are carved from it. Host: the same arena over a few large pinned and
// mapped cudaHostAlloc slabs (never one pin per page); kernels may read and write host-tier
// buffers directly (page summaries with bounded selection memory, host optimizer state).
//
// Streams and events. One compute stream and one stream per copy direction, all non-blocking.
//  - copy_async: the copy stream first waits (cudaStreamWaitEvent) on an event recorded on the
//    compute stream at the call (so a copy never reads a page before the kernels that write it, nor
//    overwrites a page that queued kernels still read), then on the device event of every `after`
//    event, then records a start event, issues the regions (adjacent ones merged) as one
//    cudaMemcpyBatchAsync (CUDA 12.8+; a single region, or an older driver: cudaMemcpyAsync each),
//    and records an end event. A completion thread per direction waits for the
//    end events in issue order (cudaEventSynchronize, blocking-sync events, so it sleeps), calls
//    on_done(start, end) with the copy's device-measured duration ending at the moment it saw
//    completion (steady clock), and then signals the returned oomb Event. So Event::wait() blocks
//    the host until the copy is done and on_done has run.
//  - wait(e): the compute stream waits on e's device event (cudaStreamWaitEvent); the host does
//    not block. Every later op, and through the compute-stream event every later copy, is ordered
//    after e. An Event not made by this backend is waited for on the host.
//  - ops run on the compute stream in call order. upload() and op metadata go through a ring of
//    pinned slots in slot-sized pieces (so they do not stall the host), download() and ops that
//    return host values (cross_entropy, select_pages: the interface returns them) synchronise the
//    compute stream. The op scratch grows without a synchronisation (the old one is freed at the
//    next synchronize()).
//  - fill_zero of host-tier memory waits (host) for the in-flight copies that touch that range.
//  - deallocate() synchronises all three streams first (it is never called inside a step).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "executor/runtime/backend.h"
#include "step/allocator.h"
#include "step/cuda_layout.h"

namespace oomb::executor {

// Which kernels run attention_fwd / attention_bwd (executor/cuda/README.md, "Attention"). Both
// families read KV pages and accumulate KV-gradient pages of either PageDtype.
enum class CudaAttentionKernel {
  // fp32 on CUDA cores (attention.cu): the correctness reference, matches the CPU to ~1e-5 (with bf16
  // pages too: both compute in fp32 on the same stored values).
  fp32,
  // bf16 tensor cores (attention_tc.cu): WMMA products of operands rounded to bf16, fp32 softmax and
  // accumulation; ~3e-3 relative error against fp32. Only head_dim 64 or 128 (and 16-byte-aligned
  // buffers, an sm_80+ device); other calls fall back to fp32 (attention_calls() tells which ran)
  // unless attention_kernel_strict. This is `oomb run --attention-kernel auto` (the CLI's default).
  bf16_tensor_core,
};

// The arithmetic of linear_fwd / linear_bwd's (and lora_fwd / lora_bwd's) GEMMs on fp32 storage
// (cuBLASLt; executor/cuda/README.md, "Precision"), accumulating in fp32 in all three. A GEMM whose
// two operands are stored as bf16 runs as the bf16 GEMM on them as stored whatever this says, with
// C / D in the output's dtype (README.md, "Storage dtypes").
enum class CudaGemmPrecision {
  // fp32 operands, CUBLAS_COMPUTE_32F: the correctness reference (~1e-5 from the CPU backend).
  fp32,
  // fp32 operands rounded to 10-bit mantissas by the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32).
  tf32,
  // Operands converted to bf16 (round to nearest even, runtime/bf16.h's routine, one kernel into the
  // op scratch, rows padded to a multiple of 8 elements) and multiplied on tensor cores: CUDA_R_16BF
  // A / B, CUBLAS_COMPUTE_32F, fp32 C / D (beta = 1 where the op accumulates). ~2e-3 relative error
  // against fp32. A GEMM cuBLASLt has no bf16 algorithm for runs in fp32 instead (gemm_calls() tells).
  // `oomb run --backend cuda`'s default (--gemm-precision bf16).
  bf16,
};
const char* to_string(CudaGemmPrecision p);

struct CudaBackendOptions {
  int device = 0;
  int64_t device_reserve_bytes = 0;                // first device block (0: none until needed)
  int64_t device_grow_bytes = int64_t{1} << 30;    // each further device block, at least the request
  int64_t host_slab_bytes = int64_t{1} << 30;      // each pinned slab, at least the request
  int64_t workspace_bytes = int64_t{64} << 20;     // device scratch of the ops (grows unless fixed)
  // The op scratch is exactly workspace_bytes and a larger request throws oomb::Error naming the
  // op_scratch row (a run of a buffer table: the size is the row's, step/cuda_scratch.h). Off: it
  // grows, the old block freed at the next synchronize() (tests and benchmarks of single ops).
  bool fixed_workspace = false;
  int64_t staging_slot_bytes = step::cuda_scratch::kStagingSlotBytes;  // pinned slot for upload() / op metadata
  int staging_slots = static_cast<int>(step::cuda_scratch::kStagingSlots);
  // linear_fwd / linear_bwd's GEMMs; fp32 by default (the reference the others are tested against).
  CudaGemmPrecision gemm_precision = CudaGemmPrecision::fp32;
  // Paged attention kernels; fp32 by default (the reference the tensor-core kernels are tested against).
  CudaAttentionKernel attention_kernel = CudaAttentionKernel::fp32;
  // With bf16_tensor_core: a call the tensor-core kernels cannot take (head_dim, device, alignment)
  // throws an oomb::Error naming --attention-kernel instead of running the fp32 kernels
  // (`oomb run --attention-kernel bf16-tc`).
  bool attention_kernel_strict = false;
  // The device block's layout by the buffer table (step/allocator.h: the run reserves the layout's
  // block as device_reserve_bytes): a row's buffers are placed in its range, one that does not fit
  // there goes anywhere in the block (a spill) or, past it, to a new block (a grow).
  std::vector<step::allocator::RowRange> device_layout;
  // Called once the streams exist and before the device block is reserved, with the compute
  // stream (a cudaStream_t): what must take device memory before the block does (the runner: NCCL's
  // communicators, whose buffers are a row of the table and are measured as the device's free bytes
  // fall; reserved after the block, they would find the block's slack taken or fail to fit).
  std::function<void(void* compute_stream)> before_device_block;
};

struct CudaMemoryStats {
  int64_t device_reserved_bytes = 0, device_in_use_bytes = 0, device_blocks = 0, device_grows = 0;
  int64_t device_spills = 0;  // row buffers placed outside their layout range
  int64_t host_reserved_bytes = 0, host_in_use_bytes = 0, host_slabs = 0, host_grows = 0;
  int64_t workspace_bytes = 0, workspace_grows = 0;
  int64_t gemm_workspace_bytes = 0;
};

enum class CudaStream { compute, h2d, d2h };

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaBackendOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  std::string name() const override { return "cuda"; }
  // The cuBLASLt workspace and the op scratch (its size now: it grows when an op needs more).
  std::vector<BackendBuffer> device_buffers() const override;
  std::vector<BackendBuffer> host_buffers() const override;
  void size_loss_slots(int64_t slots) override;
  step::Target target() const override;  // cuda, bf16_gemm when gemm_precision is bf16
  // The op scratch becomes exactly `bytes` (the table's op_scratch row) and fixed: a larger request
  // throws. Synchronises when the size changes (the Engine calls it at set-up).
  void size_op_scratch(int64_t bytes) override;
  int64_t planned_op_scratch(const step::cuda_scratch::LinearCall& call) override;

  void* allocate(Tier tier, int64_t bytes) override;
  void* allocate_row(Tier tier, int64_t bytes, const std::string& row) override;
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
  void moe_route(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize, int32_t* route_experts,
                 float* route_weights, int32_t* route_rows, int32_t* offsets) override;
  void moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k, const int32_t* route_experts,
                          double* counts, double* prob_sums) override;
  void moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                    float* d_logits) override;
  void moe_route_bwd(ConstTensor logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                     const int32_t* route_experts, const float* route_weights, const float* d_weights,
                     Tensor d_logits) override;
  void moe_gather(ConstTensor x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows, Tensor packed) override;
  void moe_combine(ConstTensor packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                   const float* weights, Tensor y, bool accumulate) override;
  void moe_combine_bwd(ConstTensor dy, ConstTensor packed, int64_t rows, int64_t dim, int64_t k,
                       const int32_t* route_rows, const float* weights, Tensor d_packed, float* d_weights) override;
  void swiglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup,
                  float limit = 0) override;
  void add(Tensor y, ConstTensor x, int64_t n) override;
  void copy(Tensor dst, ConstTensor src, int64_t n) override;
  void attention_fwd(const PagedAttention& a, Tensor o, float* lse) override;
  void attention_sinks_fwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, Tensor o,
                           float* lse) override;
  void attention_sinks_bwd(ConstTensor sinks, int64_t rows, int64_t q_heads, int64_t head_dim, ConstTensor o,
                           const float* lse, ConstTensor dout, Tensor d_sinks) override;
  void attention_bwd(const PagedAttention& a, ConstTensor o, const float* lse, ConstTensor dout, Tensor dq,
                     Tensor dk_own, Tensor dv_own, const std::vector<float*>& prefix_grad_pages) override;
  // Pages of either PageDtype, with the CPU backend's semantics: bf16 stores round to nearest even
  // with runtime/bf16.h's routine (the same bits as the CPU backend), loads are exact, attention
  // computes on the stored values, and bf16 gradient pages get each attention_bwd call's fp32
  // contribution added and rounded once per element.
  void write_kv_pages(ConstTensor k, ConstTensor v, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                      const std::vector<float*>& pages, PageDtype dtype) override;
  void add_from_grad_pages(const std::vector<float*>& pages, int64_t rows, int64_t kv_dim, int64_t page_tokens,
                           Tensor dk, Tensor dv, PageDtype dtype) override;
  void page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out) override;
  std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) override;
  double cross_entropy(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                       Tensor grad) override;
  // The loss slots are pinned host memory the device writes (no read-back per tile); take_losses
  // synchronises the compute stream once.
  void cross_entropy_acc(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale,
                         Tensor grad, int64_t slot) override;
  std::vector<double> take_losses(int64_t n) override;
  // Tensor parallelism's vocabulary-parallel loss (cross_entropy_shard.cu): statistics, their
  // combine (on the device: the tile's loss goes to the slot, nothing is read back) and the gradient.
  void cross_entropy_shard_stats(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                 float* stats) override;
  void cross_entropy_shard_combine(float* stats, int64_t ranks, int64_t rows, const int32_t* targets,
                                   int64_t slot) override;
  void cross_entropy_shard_grad(ConstTensor logits, int64_t rows, int64_t vocab, const int32_t* targets,
                                const float* max_sum, float scale, Tensor grad) override;
  // Counted: read-backs (download, select_pages, cross_entropy, take_losses), synchronize(), a
  // host-tier deallocate, host-side waits for copies (fill_zero on a host range in flight). Not
  // counted: the staging ring's wait for a slot's previous upload, waits on copy events.
  int64_t host_syncs() const override;
  void scale(Tensor x, int64_t n, float s) override;
  void adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* decay_mask, int64_t n,
             float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
             float grad_scale) override;

  // ---- beyond the Backend interface
  void synchronize();                      // all three streams
  void* stream(CudaStream s) const;        // the cudaStream_t (for CUPTI stream ids, benchmarks)
  CudaMemoryStats memory_stats() const;
  // The device buffers the backend allocates for itself, beyond allocate(): cuBLASLt's workspace
  // (fixed) and the ops' scratch (its current size: it grows, with a synchronisation, when an op
  // needs more, e.g. a bf16 GEMM output cuBLASLt cannot write, fp32 copies of bf16 attention rows).
  int64_t gemm_workspace_bytes() const;
  int64_t scratch_bytes() const;
  const CudaBackendOptions& options() const;
  std::string device_name() const;         // "NVIDIA H200 (sm_90, 132 SMs, driver 12.8)"
  // Whether this backend was built on the emulated CUDA device (executor/emulated_cuda), whose
  // times are not a GPU's.
  static bool emulated();
  // attention_fwd + attention_bwd calls so far that ran kernel family k (after the fallback rule of
  // CudaAttentionKernel::bf16_tensor_core), so tests and benchmarks can tell which one ran.
  int64_t attention_calls(CudaAttentionKernel k) const;
  // GEMMs of linear_fwd / linear_bwd and the LoRA ops so far that ran in precision p (after the bf16 ->
  // fp32 fallback of CudaGemmPrecision::bf16): one per linear forward, up to two per linear backward
  // (dx, dW); two per lora_fwd (u, y), up to four per lora_bwd (dB, du, dA, dx).
  int64_t gemm_calls(CudaGemmPrecision p) const;
  // Copy regions copy_async issued so far (after merging adjacent ones) and the API calls that
  // issued them: one cudaMemcpyAsync per region, or one cudaMemcpyBatchAsync per copy_async where
  // the runtime and driver have it (CUDA 12.8+).
  int64_t copy_regions() const;
  int64_t copy_api_calls() const;
  // Whether this device and build can run the tensor-core attention kernels at all (sm_80 or later
  // and a kernel image for it); head_dim and alignment are per call.
  bool attention_tc_available() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether a CUDA device can be used; why not (driver missing, no device) in *why.
bool cuda_device_available(std::string* why = nullptr);
// How many CUDA devices this process sees (0 without a driver or device).
int cuda_device_count();

}  // namespace oomb::executor
