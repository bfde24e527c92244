#pragma once
// The chunk-recurrent driver (ALGORITHM.md section 2): stage 1 fills the paged KV cache chunk by
// chunk without gradients; stage 2 walks the chunks in reverse, recomputes each chunk's forward
// keeping only layer inputs, and runs the backward layer by layer (recomputing each layer from its
// checkpoint), accumulating dK/dV into earlier chunks' gradient pages and reading the chunk's own
// accumulated gradient pages as the gradient of its own K/V. Written once against Backend.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "executor/runtime/backend.h"
#include "executor/runtime/comm.h"
#include "executor/runtime/memory_account.h"
#include "executor/runtime/offload.h"
#include "executor/runtime/op_tagger.h"
#include "executor/runtime/selection.h"
#include "executor/runtime/trace_recorder.h"
#include "executor/runtime/weights.h"
#include "models/specs.h"
#include "step/config.h"
#include "step/buffers.h"
#include "step/cuda_scratch.h"
#include "step/geometry.h"
#include "step/run_record.h"
#include "traces/trace.h"

namespace oomb::executor {

struct AdamWOptions {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  int64_t grad_accum = 1;  // optimizer step every grad_accum training steps (mean of their gradients)
};

struct Progress {
  int stage = 1;
  int64_t chunk = 0, chunks = 0;  // chunk being worked on (0-based) of `chunks`
  double fraction = 0;            // of the step's estimated work
  double elapsed_s = 0, eta_s = 0, tokens_per_s = 0;
  int64_t device_bytes = 0;
};

// A run's buffer table: the step's table for the backend less the rows the executor does not
// allocate (run_table), and what checking a plan's rows against it noted (check_plan_rows).
struct RunTable {
  step::BufferTable table;
  std::vector<std::string> notes;
};

struct EngineOptions {
  bool record_trace = false;
  traces::Detail detail = traces::Detail::layer;
  AdamWOptions adamw;  // used when config.optimizer != none
  std::function<void(const Progress&)> progress;  // called after every layer pass
  int64_t host_slab_bytes = int64_t{256} << 20;
  // Host buffers the run holds beside the backend's, each charged under its row of the table when
  // the table has one (the CUPTI collector's activity buffers: step::row::kCuptiActivityBuffers).
  std::vector<BackendBuffer> host_buffers;
  // Sparse only: per (chunk, layer) of stage 1, the share of the dense attention probability mass
  // the selected pages (plus the causal own chunk) capture (Measured::recall). Keeps a host copy of
  // every layer's post-RoPE keys (L x N x kv_dim floats, not in the memory account) and computes
  // dense scores over the whole causal prefix: for small contexts, and it slows the step. The keys
  // are the fp32 rows the pages are written from (before any bf16 page rounding), as the page
  // summaries the selection uses are.
  bool measure_recall = false;
  // A mixture of experts: keeps each MoE layer's routes of stage 1 (every token's experts, in the
  // routing's order) on the host, for routes() (one read-back of T x k ids per MoE layer pass).
  bool record_routes = false;
  // Tags every op, page step and copy of a step with its (stage, chunk, layer, op) for a device
  // profiler (op_tagger.h; the CLI's CUPTI timing). Not owned; must outlive the Engine. Null: no
  // tagging (the driver only tests the pointer).
  OpTagger* tagger = nullptr;
  // The run's table as the runner built it and checked it against the plan (runner::check_run): the
  // Engine allocates from its rows and records its notes (Measured::notes). No rows: the step's
  // table for the backend's target (run_table).
  RunTable table;
  // A plan's buffer table for an Engine run without the runner. Non-empty: at construction (before
  // anything is allocated) every row the run needs is compared with the plan's row of that name
  // (check_plan_rows), and the notes are that check's.
  std::vector<step::BufferRow> planned;
  // Data and tensor parallelism (config.data_parallel x config.gpus > 1): the job's communicator,
  // one rank per GPU (not owned; its size must be data_parallel x gpus), reducing in the memory the
  // backend computes in (MPI for the CPU backend, NCCL for the CUDA backend). With both degrees > 1
  // it is split into the tensor-parallel groups' and the replicas' (Communicator::split). The
  // replicas' gradients are all-reduced (summed, then averaged) before every optimizer step. Null:
  // one process.
  Communicator* comm = nullptr;
  // The groups of `comm` (parallel_groups) when the caller made them; null: the Engine splits comm.
  const ParallelGroups* groups = nullptr;
  // LoRA (config.lora_rank > 0): the adapters' initial values, laid out as
  // adapter_layout(effective_model(model, config), config) (adapters.h: init_adapters, read_adapter).
  ParamTensors adapters;
  // Tests only: the rows the memory account measures the run's allocations against, instead of the
  // table they are carved from (to see an undersized, missing or mis-phased row caught). Empty: the
  // step's table for the backend's target.
  std::vector<step::BufferRow> table_override;
};

// The phases of a step (the oomb schedule's phases of step/phase.h).
using StepPhase = step::Phase;

// The run's buffer table: the step's table for `target` (step/buffers.h, described) less the rows the
// executor does not allocate (the runtime reserve: the CUDA context).
step::BufferTable run_table(const models::ModelSpec& model, const step::Config& config, const step::Target& target);
std::vector<step::BufferRow> run_rows(const models::ModelSpec& model, const step::Config& config,
                                      const step::Target& target);

// The start-of-run check of a plan: every row the run needs must be in the plan (name and tier) with
// at least its bytes, or oomb::Error naming the row is thrown; planned rows larger than needed or
// not allocated by `backend_name` are returned as notes. Runs before any device call.
std::vector<std::string> check_plan_rows(const std::vector<step::BufferRow>& planned,
                                         const std::vector<step::BufferRow>& needed, const std::string& backend_name);

using UnionSize = step::MeasuredUnion;

// Of one (chunk, layer): the dense attention mass its selection captures (step/run_record.h).
using RecallSample = step::RecallSample;

// What a run measured (the executor's side of `oomb validate`): the run's one record, filled as the
// Engine runs and written into its trace (step/run_record.h).
using Measured = step::RunRecord;

struct StepResult {
  double loss = 0;
  double seconds = 0;
};

// Review 3, finding 8: every GEMM-running call of the step (step/cuda_scratch.h step_linear_calls),
// planned by the backend as it will run (planned_op_scratch: on the CUDA backend, cuBLASLt's
// heuristic decides bf16 or the fp32 fallback per GEMM), fits the op_scratch row of `row_bytes`;
// else an oomb::Error naming the op, before the first step (never "a bug of the declaration" in
// the middle of one). bf16_gemm: the path the row was declared for (for the message).
void check_op_scratch(Backend& backend, const std::vector<step::cuda_scratch::LinearCall>& calls, int64_t row_bytes,
                      bool bf16_gemm);

class Engine {
 public:
  // A data-parallel gradient bucket: `count` elements of the trained gradients at `offset`, final
  // at point `final_at` of the last chunk's backward (Engine::gradient_buckets_final).
  struct GradientRange {
    int64_t offset = 0, count = 0, final_at = 0;
  };

  // model: the catalog spec; config.layers_override cuts it. weights must have its layout.
  Engine(Backend& backend, const models::ModelSpec& model, const step::Config& config, const Weights& weights,
         EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // One training step on one sequence of config.context_tokens tokens: forward + backward,
  // parameter gradients accumulated; AdamW (when configured) every grad_accum steps.
  StepResult step(const std::vector<int32_t>& tokens);

  // Accumulated since the last optimizer step, of what the step trains: every parameter (the
  // model's layout), or under LoRA the adapters (their layout). Data parallelism: summed over the
  // replicas (a collective: every rank calls it), in double, rounded once.
  Gradients gradients() const;
  Weights weights() const;        // the base model's (frozen under LoRA)
  ParamTensors adapters() const;  // LoRA: the adapters as trained so far (empty layout otherwise)
  bool lora() const { return lora_; }
  void zero_gradients();
  const Measured& measured() const { return measured_; }
  // Whether `op`, a tag of this Engine's collectives, is data parallelism's (the gradient buckets'
  // all-reduce, ZeRO-1's reduce-scatter and all-gather); every other collective of a step is tensor
  // parallelism's.
  static bool data_parallel_op(Op op);
  // A failed step of a multi-rank run: aborts the communicators this Engine split from
  // EngineOptions::comm (Communicator::abort), before anything waits on a stream; the caller aborts
  // that one. The Engine runs no more steps.
  void abort_communicators();
  traces::Trace trace(const std::string& command = {}) const;
  // Steady-clock time (ns) that the host trace's times are relative to (its origin).
  int64_t trace_origin_ns() const { return recorder_.origin_ns(); }
  // The trace of a run timed by a device profiler (CUPTI: executor/cupti, source "cuda-cupti"):
  // `device`'s events, source, device string and dropped-record count, with this Engine's provenance
  // (metadata.extra: model, layers, config, measured; time, command), its memory samples (the
  // runtime's device and host allocations and pool pages; on the device events' clock when they were
  // decoded with origin trace_origin_ns()), its steps' phase events (traces::kStepPhase) and the
  // summary recomputed. Needs record_trace.
  traces::Trace device_timed_trace(traces::Trace device, const std::string& command = {}) const;
  const SelectionLog& selections() const { return log_; }  // of the last step
  // With EngineOptions::record_routes: per layer (empty for a dense MLP) the last step's N x k
  // experts (token-major), what cpu::full_sequence_reference routes by to give this step's exact
  // gradient when a rounding (bf16 storage) moved a token to another expert.
  const std::vector<std::vector<int32_t>>& routes() const { return routes_; }
  // The run's buffer table (every allocation it makes is under one of these rows, measured by the
  // memory account against their bytes).
  const std::vector<step::BufferRow>& buffers() const { return rows_; }
  const models::ModelSpec& model() const { return model_; }
  const Geometry& geometry() const { return g_; }

 private:
  // The constructor's jobs, in order.
  void check_config(const models::ModelSpec& model, const step::Config& config);
  void join_ranks(const step::Config& config);
  void choose_storage(const models::ModelSpec& model, const step::Config& config);
  // The run's buffer table: every buffer is one of its rows' tensors, and the memory account measures
  // each row's use against its bytes and phases.
  step::BufferTable bind_table(const models::ModelSpec& model, const step::Config& config);
  void allocate_parameters(const Weights& weights, const models::ModelSpec& model, const step::Config& config);
  void allocate_pages(const step::BufferTable& table, const step::Config& config);
  // What the backend holds for itself and what the communicators took, under their rows.
  void account_backend_buffers(const models::ModelSpec& model, const step::Config& config);
  void allocate_step_state(const step::Config& config);
  struct Work;
  struct LayerSet;
  struct LayerPtrs;
  LayerSet& layer_set(int64_t layer) const;
  LayerPtrs layer_ptrs(int64_t l) const;
  void embed(int64_t c, int stage, Tensor x);
  void adapter_fwd(const LayerPtrs& P, LayerSet& w, LoraTarget t, ConstTensor x, int64_t rows, Tensor y);
  void adapter_bwd(const LayerPtrs& P, LayerSet& w, LoraTarget t, ConstTensor x, int64_t rows, ConstTensor dy,
                   Tensor dx);
  double adapter_flops(int64_t layer, std::initializer_list<LoraTarget> targets, int64_t rows, double per_mac) const;
  // The MLP's gated activation (models::Mlp, for every MLP of the model: dense, routed and shared
  // experts): SwiGLU (gpt-oss's clamped one with its limit) or GeGLU (tanh GELU).
  void gated_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out);
  void gated_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup);
  // A MoE layer's MLP on w.h2 (the routes, the experts' rows; out: x2 + the combine, or null in a
  // recompute) and its backward from dy into the work set's dh2 (overwritten).
  void moe_forward(const Pass& pass, const LayerPtrs& P, LayerSet& w, Tensor out);
  float swiglu_limit() const { return static_cast<float>(model_.mlp_clamp()); }  // the backends' float
  void moe_backward(const Pass& pass, const LayerPtrs& P, LayerSet& a, ConstTensor dy);
  // Each expert's first packed row (E + 1) of a layer set's routes, on the host.
  std::vector<int32_t> host_expert_offsets(const LayerSet& w) const;
  void layer_forward(const Pass& pass, int64_t pass_index, PassPages& pages, ConstTensor in, Tensor out);
  void layer_backward(const Pass& pass, PassPages& pages, ConstTensor in, ConstTensor dy, Tensor dx);
  void head_forward_backward(int64_t c, ConstTensor x_last, Tensor dy);  // chunk c's loss: backend slot c
  // The working set of phase p (enter's rows), its device memory zeroed on the compute stream under
  // the tag of the work the phase begins with (stage, chunk, layer, op), so that a device trace
  // attributes the zeroing to that pass instead of leaving it untagged.
  void enter(StepPhase p, int stage, int64_t chunk, int64_t layer, Op op);
  Buffer allocate(const step::BufferRow& row, const step::RowTensor& t);
  Buffer row_tensor(const char* row, Tier tier, const char* tensor);  // of table_'s row (name, tier)
  // The Work member a working-set tensor is carved into (by the row's and the tensor's names).
  Buffer& work_slot(const std::string& row, const std::string& tensor);
  void upload_weights(const std::vector<float>& w);
  // Where elements [first, first + n) of a flat parameter array live on the device: f(view, offset
  // in the range, count) once per row holding some of them. The base weights: params_, and a
  // mixture of experts' routed experts in experts_ from ParamLayout::experts_begin(). The trained
  // parameters: those, or under LoRA adapters_.
  void for_each_weight_piece(int64_t first, int64_t n,
                             const std::function<void(Tensor, int64_t, int64_t)>& f) const;
  void for_each_trained_piece(int64_t first, int64_t n,
                              const std::function<void(Tensor, int64_t, int64_t)>& f) const;
  void download_f32(ConstTensor src, int64_t n, float* dst) const;
  void select(const Pass& pass, int64_t pass_index);
  PagedAttention attention_args(const Pass& pass, const PassPages& pages) const;
  void optimizer_step();
  void report(const Pass& pass);
  void measure_recall(const Pass& pass);
  template <class F>
  void timed(const char* name, const Pass& pass, double flops, F&& f);
  template <class F>
  void timed(const char* name, Op op, int stage, int64_t chunk, double flops, F&& f);

  Backend& backend_;
  models::ModelSpec model_;
  models::Rope rope_;  // the model's RoPE frequencies (plain or llama3-scaled), models::rope_of
  step::Config config_;
  int64_t head_rows_ = 0;  // rows per LM-head / loss tile (config logits_chunk_tokens, or the chunk)
  EngineOptions options_;
  Geometry g_;
  PageDtype kv_dtype_ = PageDtype::f32, grad_page_dtype_ = PageDtype::f32;  // KV and KV-gradient pages
  MemoryAccount account_;
  TraceRecorder recorder_;
  std::unique_ptr<OffloadEngine> store_;
  ParamLayout layout_;
  // LoRA: the adapters' layout and scale (alpha / r); the base is frozen (no gradients, no
  // optimizer state) and the trained parameters are the adapters (fp32, row lora_adapters).
  bool lora_ = false;
  ParamLayout lora_layout_;
  float lora_scale_ = 0;
  Buffer adapters_;
  DType param_dtype_ = DType::f32, grad_dtype_ = DType::f32, act_dtype_ = DType::f32, loss_dtype_ = DType::f32;
  bool fused_loss_ = false;
  StepPhase phase_ = StepPhase::optimizer;
  std::vector<step::BufferRow> table_;  // the step's table for the backend: what the run allocates
  std::vector<step::BufferRow> rows_;   // what the memory account measures it against (table_ unless overridden)
  // The working set: table_'s device rows alive in some phases only, and whether enter() holds them.
  struct HeldRow {
    const step::BufferRow* row = nullptr;
    bool held = false;
  };
  std::vector<HeldRow> working_set_;
  int64_t recomputed_ = 0;  // layers 0 .. recomputed_-1 re-run their forward in the backward; the rest kept
  std::vector<std::string> notes_;
  Buffer params_, grads_, master_, adam_m_, adam_v_, decay_mask_;
  // A mixture of experts: the routed experts (the layout's floats from experts_begin(), the
  // expert_weights row); params_ holds the rest. Empty for a dense model.
  Buffer experts_;
  std::vector<std::vector<int32_t>> routes_;  // EngineOptions::record_routes
  Buffer host_grads_, host_weights_;  // optimizer on the host: its gradients and working weights
  step::OptimizerShard zero_;         // ZeRO-1's padded buffers and this replica's shard of them
  bool sharded_ = false;              // the AdamW state sharded over the replicas (ZeRO-1)
  int64_t optimizer_h2d_bytes_ = 0, optimizer_d2h_bytes_ = 0;  // of the last step
  int64_t allreduce_bytes_ = 0;                                 // of the last step
  // The last step's collectives as the ranks met them (wait for the slowest rank vs transfer).
  CollectiveClock dp_clock_, tp_clock_;
  // Data parallelism: the gradient buckets (offsets into grads_, in the order they become final),
  // the next to all-reduce, and MPI's fp32 staging of bf16 gradients while they are.
  std::vector<GradientRange> buckets_;
  size_t next_bucket_ = 0;
  Buffer dp_staging_;
  bool reduces_gradients() const;  // this step ends with a data-parallel update
  void begin_gradient_buckets();
  // Every bucket final at `point` (0: after the LM head's backward, L - l: after layer l's, L + 1:
  // after the embedding's) is all-reduced.
  void gradient_buckets_final(int64_t point);
  // Where the op being timed runs (set by timed()): the tag of the collectives it makes.
  CollectiveClock::Tag comm_tag_;
  // After the step: each communicator's calls split into wait and transfer (a collective of its
  // ranks), their transfers recorded as the trace's collective events.
  void resolve_collectives();
  // Tensor parallelism (config.gpus > 1; docs/model.md "Tensor parallelism"): model_ is this rank's
  // shard of full_model_ (step::tensor_parallel_shard), its vocabulary [vocab0_, vocab0_ + model_.vocab).
  models::ModelSpec full_model_;
  int64_t tp_ = 1, tp_rank_ = 0, vocab0_ = 0;
  Buffer tp_staging_, tp_stats_;  // rows tensor_parallel_staging (bf16 activations), _loss_statistics
  // The group's ranks (tensor parallelism) and the replicas' (data parallelism): the job's
  // communicator itself when the other degree is 1, else split from it (owned).
  Communicator* tp_comm_ = nullptr;
  Communicator* dp_comm_ = nullptr;
  ParallelGroups groups_;  // the split communicators when the Engine made them
  int64_t tp_allreduces_ = 0, tp_allreduce_bytes_ = 0;
  // The sum over the tensor-parallel ranks, in place (n elements of t); nothing with one rank.
  void tp_all_reduce(Tensor t, int64_t n);
  void tp_counted(int64_t t0_ns, int64_t bytes);  // one all-reduce since t0 into the step's measure
  // A token as this rank's vocabulary index, or `elsewhere` when another rank holds it.
  int32_t local_vocab_id(int64_t token, int32_t elsewhere) const;
  // One loss tile of the vocabulary-parallel cross-entropy (rows r0.. of chunk c; its loss to slot c).
  void tp_cross_entropy(ConstTensor logits, int64_t rows, int64_t V, int64_t r0, float scale, Tensor grad, int64_t c);
  // The gradients (or weights) of the rank's shard written into the full model's layout, summed
  // over the ranks (a collective): every rank gets the whole model's.
  ParamTensors gather_shards(const ParamTensors& local) const;
  Buffer summaries_;  // sparse: [L][P][kv_dim] page key means
  // The load-balancing loss (Config::router_aux_loss_coef > 0, a mixture of experts): stage 1's
  // per-expert routed copies and router probabilities (fp64, row router_aux_statistics), the copies'
  // shares uploaded for stage 2, its gradient's scale (coef x E / M, M = MoE layers x N) and the
  // step's term of the loss (coef x E x sum_e share_e P_e).
  Buffer aux_counts_, aux_prob_sums_, aux_shares_;
  float aux_scale_ = 0;
  double aux_loss_ = 0;
  bool aux_loss_on() const { return static_cast<bool>(aux_counts_.data()); }
  void aux_loss_from_statistics();  // after stage 1: the shares, the scale and the loss term
  std::unique_ptr<Work> w_;
  SelectionLog log_;
  std::vector<std::vector<int64_t>> dense_prefix_;  // per chunk: 0 .. prefix_pages - 1
  // Sliding and chunked layers: each one's attention kind and window (global: none), and the pages
  // each chunk reaches back to, per distinct (kind, window) [class][chunk] (local_class_ per layer,
  // -1 for a global layer). A global layer's ordinal among them: OffloadEngine::global_index.
  LocalPages local_;
  std::vector<std::vector<std::vector<int64_t>>> reach_;
  std::vector<int64_t> local_class_;
  bool local_layer(int64_t l) const { return local_.local(l); }
  std::vector<int32_t> tokens_;
  Measured measured_;
  int64_t steps_ = 0, adam_steps_ = 0, accumulated_ = 0;
  double total_s_ = 0;
  int64_t step_start_ns_ = 0;
  double work_total_ = 0, work_done_ = 0;
  std::vector<double> chunk_work_;  // stage-1 work units of each chunk
  std::vector<std::vector<float>> recall_keys_;  // measure_recall: per layer [N][kv_dim] post-RoPE keys
  std::vector<RecallSample> recall_;             // measure_recall: this step's samples
};

// --compare-dense: the same step with dense attention (same weights and tokens, no optimizer)
// against a sparse step's loss and accumulated gradients.
struct DenseComparison {
  double loss = 0, dense_loss = 0;
  double loss_diff = 0;             // loss - dense_loss
  double max_grad_rel_error = 0;    // max over tensors of relative_l2(sparse, dense)
  std::string worst_tensor;
  Json to_json() const;
};
DenseComparison compare_with_dense(Backend& backend, const models::ModelSpec& model, const step::Config& config,
                                   const Weights& weights, const std::vector<int32_t>& tokens, double loss,
                                   const Gradients& grads, const ParamTensors& adapters = {});

// The model as run: model with config.layers_override applied.
models::ModelSpec effective_model(const models::ModelSpec& m, const step::Config& c);

}  // namespace oomb::executor
