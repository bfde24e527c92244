#include "runner/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>

#include "core/error.h"
#include "core/format.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/cpu/threads.h"
#include "runner/calibrate.h"
#include "runner/run_device.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/microbench.h"
#include "executor/runtime/op_tagger.h"
#include "executor/runtime/profiler_fallback.h"
#include "executor/runtime/trace_recorder.h"
#include "planner/executable.h"
#include "simulator/calibration.h"
#include "step/allocator.h"
#include "step/capability.h"
#include "step/describe.h"
#include "step/run_record.h"
#ifdef OOMB_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_info.h"
#endif
#ifdef OOMB_HAVE_NCCL
#include "executor/cuda/nccl_comm.h"
#endif
#ifdef OOMB_HAVE_CUPTI
#include "executor/cupti/collector.h"
#endif

namespace oomb::runner {

using namespace oomb::executor;

void detail::say(const RunRequest& r, const std::string& line) {
  if (r.message) r.message(line);
}
using detail::say;

PlannedRun plan_run(const planner::Plan& plan, const std::string& plan_path, const PlanOverrides& o) {
  // A plan is made for a GPU; one the CUDA backend does not run may still run on the CPU backend (a
  // mixture of experts): the run's own backend is checked with the rest of the request (check_run).
  if (std::string why; !planner::executable(plan.model, plan.config, &why) &&
                       !step::capability(plan.model, plan.config, step::Target{}).executable())
    throw Error("--plan", plan_path, "is not executable", why);
  PlannedRun r;
  simulator::Scenario& s = r.scenario;
  s = plan.scenario();
  if (!o.layers && !o.kv_dtype && !o.kv_grad_dtype) r.planned = plan.buffers;
  if (o.layers) {
    s.config.layers_override = *o.layers;
    // A quick run on fewer layers keeps at most all but one of them (the trace records it).
    if (s.config.checkpointing) s.config.kept_layers = std::min(s.config.kept_layers, *o.layers - 1);
  }
  if (o.kv_dtype) s.config.kv_dtype = storage_dtype_from_string(*o.kv_dtype, "--kv-dtype");
  if (o.kv_grad_dtype) s.config.kv_grad_dtype = storage_dtype_from_string(*o.kv_grad_dtype, "--kv-grad-dtype");
  step::validate(s.config, s.model);
  return r;
}

simulator::Scenario unplanned_run(simulator::Scenario s, const std::set<std::string>& given, const std::string& backend) {
  auto unless_given = [&](const char* key, Dtype& field, Dtype value) {
    if (!given.count(key)) field = value;
  };
  unless_given("kv_dtype", s.config.kv_dtype, Dtype::fp32);
  unless_given("kv_grad_dtype", s.config.kv_grad_dtype, Dtype::fp32);
  unless_given("param_dtype", s.config.param_dtype, backend == "cuda" ? Dtype::bf16 : Dtype::fp32);
  unless_given("param_grad_dtype", s.config.param_grad_dtype, Dtype::fp32);
  unless_given("activation_dtype", s.config.activation_dtype, Dtype::fp32);
  unless_given("loss_dtype", s.config.loss_dtype, Dtype::fp32);
  return s;
}

namespace {

// Whether any stored tensor is bf16 (the CPU backend then rounds to bf16 exactly where the GPU would).
bool any_bf16(const step::Config& c) {
  for (Dtype d : {c.param_dtype, c.param_grad_dtype, c.activation_dtype, c.kv_dtype, c.kv_grad_dtype, c.loss_dtype})
    if (d == Dtype::bf16) return true;
  return false;
}

bool built_with_cupti() {
#ifdef OOMB_HAVE_CUPTI
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#ifdef OOMB_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool built_with_mpi() {
#ifdef OOMB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string attention_kernel_of(const RunRequest& r) { return r.attention_kernel.empty() ? "auto" : r.attention_kernel; }

// The GEMM precision, unless given: bf16; without a plan, that of the weights (fp32 weights with
// bf16 GEMMs would be converted at every call).
std::string gemm_precision_of(const RunRequest& r) {
  if (!r.gemm_precision.empty()) return r.gemm_precision;
  return r.plan_path.empty() && r.scenario.config.param_dtype == Dtype::fp32 ? "fp32" : "bf16";
}

bool uses_cupti(const RunRequest& r) {
  return r.record_trace && r.backend == "cuda" && built_with_cupti() && r.trace_timing != "host";
}

// Page dtypes the executor stores (fp32, bf16), refused by flag; a plan's other dtype is named as the plan's.
PageDtype page_dtype(const RunRequest& r, Dtype d, const char* flag) {
  try {
    return page_dtype_of(d, flag);
  } catch (const Error& e) {
    if (r.plan_path.empty()) throw;
    throw Error(flag, to_string(d), e.problem() + "; the plan asks for it", std::string("override it: ") + flag + " fp32 or bf16");
  }
}

void check_reference_size(const models::ModelSpec& m, int64_t context_tokens) {
  const auto n = static_cast<double>(context_tokens);
  const double probs_bytes = 4.0 * static_cast<double>(m.q_heads) * n * n * static_cast<double>(m.layers);
  if (probs_bytes > 4.0 * (1ull << 30))
    throw Error("--reference", "", "the full-sequence reference keeps every layer's N x N attention probabilities (" +
                                       format_bytes(static_cast<int64_t>(std::min(probs_bytes, 9e18))) + " here)",
                "use a shorter --context (e.g. 4K) or fewer --layers");
}

step::Target target_of(const RunRequest& r) {
  step::Target t;
  t.backend = r.backend == "cuda" ? step::BackendKind::cuda : step::BackendKind::cpu;
  t.bf16_gemm = gemm_precision_of(r) == "bf16";
  t.cupti = uses_cupti(r);  // the collector's activity buffers (a host row)
  return t;
}

// What the executor does not run (step::capability), refused naming the flag that asks for it, or
// the plan, with what runs instead.
[[noreturn]] void refuse(const RunRequest& r, const step::Config& c, const step::Capability& cap) {
  const std::string& key = cap.key;
  const bool planned = !r.plan_path.empty();
  const Error named = step::capability_error(cap, c);  // the flag that sets the key, and its value
  // The storage dtypes: refused by the parsers the run converts them with.
  if (key == "kv_dtype" || key == "kv_grad_dtype")
    page_dtype(r, key == "kv_dtype" ? c.kv_dtype : c.kv_grad_dtype, named.where().c_str());
  for (const auto& [k, d] : {std::pair{"param_dtype", c.param_dtype}, {"param_grad_dtype", c.param_grad_dtype},
                             {"activation_dtype", c.activation_dtype}, {"loss_dtype", c.loss_dtype}})
    if (key == k) storage_dtype_of(d, named.where());
  if (key == "schedule")
    throw Error("--schedule", step::to_string(c.schedule), "the executor runs the oomb schedule",
                "--schedule oomb (use --reference for a full-sequence run on the CPU)");
  if (key == "selection")
    throw Error("--selection", c.selection, "is not implemented by the executor yet", "published or per-kv-head");
  if (key == "lora_rank")
    throw Error(planned ? "--plan" : "--lora-rank", planned ? r.plan_path : std::to_string(c.lora_rank),
                "LoRA (--lora-rank) with tensor parallelism (--gpus " + std::to_string(c.gpus) +
                    ") is planned and simulated, not executed yet",
                "--gpus 1 with LoRA, or full fine-tuning with --gpus");
  if (key == "lora_train_embeddings")
    throw Error(planned ? "--plan" : "--lora-train-embeddings", r.plan_path,
                "trains the embeddings and the LM head beside the adapters: planned and simulated, not executed yet "
                "(the executor trains adapters on a wholly frozen base)",
                "drop --lora-train-embeddings to run; plan and simulate take it");
  if (planned) throw Error("--plan", r.plan_path, "is not executable", cap.reason);
  throw named;
}

ReferenceCheck check_against_reference(const models::ModelSpec& m, const step::Config& c, const Weights& w,
                                       const ParamTensors& adapters, const std::vector<int32_t>& tokens,
                                       const Engine& e, double loss) {
  check_reference_size(m, static_cast<int64_t>(tokens.size()));
  std::vector<cpu::MaskedAttention> masks;
  if (c.attention == step::Attention::sparse)
    for (int64_t l = 0; l < m.layers; ++l)
      masks.push_back(cpu::selection_mask(m, c.context_tokens, c.chunk_tokens, c.page_tokens, e.selections(), l));
  const auto* mask = masks.empty() ? nullptr : &masks;
  const auto* routes = m.moe.present() ? &e.routes() : nullptr;  // the run's (EngineOptions::record_routes)
  // LoRA: the adapters' gradients by the merged weights and the chain rule.
  const cpu::ReferenceResult ref =
      c.lora_rank > 0 ? cpu::lora_reference(m, w, adapters, c.lora_alpha / static_cast<double>(c.lora_rank), tokens, mask,
                                            routes, c.router_aux_loss_coef)
                      : cpu::full_sequence_reference(m, w, tokens, mask, routes, c.router_aux_loss_coef);
  const Gradients g = e.gradients();
  ReferenceCheck r;
  r.loss = ref.loss;
  r.loss_rel_error = std::abs(loss - ref.loss) / std::max(std::abs(ref.loss), 1e-30);
  const WorstTensor worst = worst_relative_l2(g, ref.grads);
  r.max_grad_rel_error = worst.rel_l2;
  r.worst_tensor = worst.name;
  return r;
}

void status(const RunRequest& r, const std::string& line) {
  if (r.status) r.status(line);
}

}  // namespace

// The plan's rows for this run. A plan made for the other backend (a GPU plan run on the CPU
// backend, or the reverse) lacks the rows only this backend needs (the CPU's MPI all-reduce
// staging): they are this backend's own, sized by the same table for it, added and said.
// `needed`: the run's rows (run_table for this run's backend).
std::vector<step::BufferRow> planned_rows(const RunRequest& r, const step::Config& c,
                                          const std::vector<step::BufferRow>& needed) {
  std::vector<step::BufferRow> planned = r.planned;
  if (planned.empty()) return planned;
  const step::Target ours = target_of(r);
  step::Target plan_target = step::target_of(r.scenario.gpu);
  plan_target.bf16_gemm = ours.bf16_gemm;
  // A plan is made for an untimed run on its GPU profile's backend: the rows only this run needs (the
  // other backend's, the CUPTI collector's) are the ones the plan's target lacks.
  const bool other_backend = plan_target.backend != ours.backend;
  if (!other_backend && !ours.cupti) return planned;
  const std::vector<step::BufferRow> theirs = run_rows(r.scenario.model, c, plan_target);
  for (const step::BufferRow& row : needed) {
    auto same = [&row](const step::BufferRow& o) { return o.name == row.name && o.tier == row.tier; };
    if (std::none_of(theirs.begin(), theirs.end(), same) && std::none_of(planned.begin(), planned.end(), same)) {
      planned.push_back(row);
      say(r, "buffer " + row.name + " (" + format_bytes(row.bytes) + ", " + to_string(row.tier) + "): " +
                 (other_backend ? "the " + r.backend + " backend's own, not in this plan for the other backend"
                                : std::string("the CUPTI collector's, which the plan (made for an untimed run) leaves out")) +
                 "; sized for this run");
    }
  }
  return planned;
}

RunTable check_run(const RunRequest& r) {
#ifndef OOMB_HAVE_CUDA_BACKEND
  if (r.backend == "cuda")
    throw Error("--backend", "cuda", "this build has no CUDA backend",
                "use --backend cpu, or build on a machine with nvcc (OOMB_CUDA=AUTO|ON)");
#endif
  if (r.backend != "cpu" && r.backend != "cuda") throw Error("--backend", r.backend, "unknown backend", "cpu or cuda");
  // The cuda backend's attention kernels (CudaAttentionKernel): auto = bf16 tensor cores where they
  // run (head_dim 64 / 128, sm_80+, aligned buffers), fp32 elsewhere; fp32 = the CUDA-core reference;
  // bf16-tc = tensor cores or an error.
  const std::string& ak = r.attention_kernel;
  if (!ak.empty() && ak != "auto" && ak != "fp32" && ak != "bf16-tc")
    throw Error("--attention-kernel", ak, "unknown attention kernel", "auto, fp32 or bf16-tc");
  if (!ak.empty() && r.backend != "cuda")
    throw Error("--attention-kernel", ak,
                "chooses the cuda backend's attention kernels; a " + r.backend + " run computes attention in fp32 on the CPU",
                "drop --attention-kernel, or use --backend cuda");
  // The cuda backend's linear GEMMs (CudaGemmPrecision): bf16 (the method's bf16 training), tf32, or
  // fp32 (the reference).
  const std::string& gp = r.gemm_precision;
  if (!gp.empty() && gp != "fp32" && gp != "tf32" && gp != "bf16")
    throw Error("--gemm-precision", gp, "unknown GEMM precision", "fp32, tf32 or bf16");
  if (!gp.empty() && r.backend != "cuda")
    throw Error("--gemm-precision", gp,
                "chooses the cuda backend's GEMM precision; a " + r.backend + " run computes its GEMMs in fp32",
                "drop --gemm-precision, or use --backend cuda");
  if (r.cpu_threads < 0 || r.cpu_threads > kMaxCpuThreads)
    throw Error("--threads", std::to_string(r.cpu_threads),
                "must be in [0, " + std::to_string(kMaxCpuThreads) + "] (0 = every CPU this process may use)",
                "e.g. --threads 2");
  if (r.cpu_threads > 0 && r.backend != "cpu")
    throw Error("--threads", std::to_string(r.cpu_threads), "sets the cpu backend's compute threads",
                "drop it, or --backend cpu");
  if (r.warmup_steps < 0) throw Error("--warmup", std::to_string(r.warmup_steps), "must be 0 or more");
  if (r.timed_steps <= 0) throw Error("--steps", std::to_string(r.timed_steps), "must be in [1, 1000000]");
  // How the trace is timed: CUPTI device times (cuda, when built with CUPTI) or host wall clock.
  const std::string& tt = r.trace_timing;
  if (!tt.empty() && tt != "host" && tt != "cupti") throw Error("--trace-timing", tt, "unknown trace timing", "host or cupti");
  if (!tt.empty() && !r.record_trace)
    throw Error("--trace-timing", tt, "times the trace, and no --trace is written", "add --trace FILE");
  if (tt == "cupti" && r.backend != "cuda")
    throw Error("--trace-timing", "cupti", "CUPTI times CUDA work; a " + r.backend + " run is timed on the host",
                "use --backend cuda, or --trace-timing host");
  if (tt == "cupti" && !built_with_cupti())
    throw Error("--trace-timing", "cupti", "this build has no CUPTI collector",
                "build with -DOOMB_CUDA=ON where the CUDA toolkit has CUPTI, or use --trace-timing host");

  const step::Config& c = r.scenario.config;
  if (c.context_tokens <= 0) throw Error("--context", "", "is required (or give --plan)", "e.g. 16K");
  if (c.context_tokens < 2) throw Error("--context", "", "needs at least 2 tokens (one next-token prediction)");
  const int world = r.comm ? r.comm->size() : 1;
  if (c.data_parallel * c.gpus != world) {
    // One process per GPU: the replicas times each one's tensor-parallel GPUs. Tensor parallelism
    // alone is said as such.
    const bool tp_only = c.gpus > 1 && c.data_parallel == 1;
    const std::string n = std::to_string(c.data_parallel * c.gpus), gpus = std::to_string(c.gpus);
    const std::string dp = std::to_string(c.data_parallel);
    const std::string how =
        "mpirun -np " + n + " oomb run " +
        (tp_only ? (r.plan_path.empty() ? "... --gpus " + gpus : "--plan " + r.plan_path) + " --backend " + r.backend
                 : r.plan_path.empty() ? "..." + (c.gpus > 1 ? " --gpus " + gpus : std::string()) + " --data-parallel " + dp
                                       : "--plan " + r.plan_path);
    const std::string flag = !r.plan_path.empty() ? "--plan" : tp_only ? "--gpus" : "--data-parallel";
    const std::string what =
        tp_only ? "tensor parallelism over " + gpus + " GPUs runs as " + gpus + " processes (one per GPU) and this run has " +
                      std::to_string(world) + (world == 1 ? " (not launched by MPI)" : "")
                : dp + " data-parallel replica" + (c.data_parallel == 1 ? "" : "s") +
                      (c.gpus > 1 ? " of " + gpus + " tensor-parallel GPUs" : "") + " and " + std::to_string(world) +
                      " process" + (world == 1 ? "" : "es") +
                      (world == 1 ? " (not launched by MPI)" : " in this MPI job") + ": one process per GPU";
    const bool needs_mpi = world == 1 && c.data_parallel * c.gpus > 1;
    throw Error(flag, r.plan_path.empty() ? (tp_only ? gpus : dp) : r.plan_path, what,
                needs_mpi && !built_with_mpi() ? "this build has no MPI (apt install libopenmpi-dev, rebuild)"
                                               : "run it as: " + how);
  }
  // What the executor runs, before any device or communicator exists (the Engine refuses the rest
  // too, after they do).
  if (const step::Capability cap = step::model_capability(r.scenario.model); !cap.executable())
    throw step::model_capability_error(cap, r.scenario.model);
  if (const step::Capability cap = step::moe_capability(r.scenario.model, c); !cap.executable())
    refuse(r, c, cap);
  if (const step::Capability cap = step::attention_capability(r.scenario.model, c); !cap.executable())
    refuse(r, c, cap);
  if (const step::Capability cap = step::capability(c, target_of(r)); !cap.executable()) refuse(r, c, cap);
  if (c.gpus > 1 && r.compare_dense)
    throw Error("--compare-dense", "", "runs one process's dense step beside the sparse one; not with --gpus > 1",
                "compare without --gpus, or drop --compare-dense");
  if (world > 1 && r.backend == "cuda" && !built_with_nccl())
    throw Error("--backend", "cuda",
                std::string("a ") + (c.gpus > 1 ? "tensor" : "data") +
                    "-parallel CUDA run all-reduces with NCCL, and this build has none",
                "build where the CUDA toolkit has NCCL (nccl.h, libnccl), or --backend cpu (MPI)");
  if (world > 1 && r.reference)
    throw Error("--reference", "",
                c.gpus > 1 ? "checks one process's step; a tensor-parallel run splits each layer over " +
                                 std::to_string(c.gpus) + " ranks, none of which holds the whole step"
                           : std::string("checks one process's step; each replica of a data-parallel run trains its "
                                         "own sequence"),
                "run --reference without mpirun (and without --gpus)");
  if (r.keep_weights && c.lora_rank > 0)
    throw Error("--save-weights", "", "a LoRA run trains adapters on a frozen base: the base weights do not change",
                "--save-adapter DIR writes the trained adapter (PEFT's folder)");
  if (r.keep_adapters && c.lora_rank <= 0)
    throw Error("--save-adapter", "", "writes a LoRA adapter, and this run trains every parameter",
                "add --lora-rank R (with --lora-alpha, --lora-targets), or --save-weights for full fine-tuning");
  const models::ModelSpec m = effective_model(r.scenario.model, c);
  if (r.reference && c.optimizer != step::Optimizer::none)
    throw Error("--reference", "", "compares the gradients of step 1, which an optimizer step consumes",
                "use --optimizer none with --reference");
  const bool sparse = c.attention == step::Attention::sparse;
  if (r.measure_recall && !sparse)
    throw Error("--measure-recall", "", "measures what sparse page selections capture of the dense attention",
                "add --attention sparse");
  if (r.backend == "cuda" && ak == "bf16-tc" && m.head_dim != 64 && m.head_dim != 128)
    throw Error("--attention-kernel", "bf16-tc",
                "the bf16 tensor-core kernels take head_dim 64 or 128; " + m.id + " has head_dim " +
                    std::to_string(m.head_dim),
                "use --attention-kernel auto, which runs the fp32 kernels where the tensor-core ones cannot, or fp32");
  if (r.reference) check_reference_size(m, c.context_tokens);
  {
    // A context no host can hold is refused before the tokens are generated: the simulator's
    // prediction of this run (fp32, as the executor runs it) is a lower bound of what it allocates
    // (the CPU backend's device memory is host memory too), plus the token ids.
    simulator::Scenario need = r.scenario;
    simulator::apply_cpu_run(need);
    const simulator::Summary sum = simulator::evaluate(need);
    const double host_bytes = static_cast<double>(sum.peak_host_bytes) + 8.0 * static_cast<double>(c.context_tokens) +
                              (r.backend == "cpu" ? static_cast<double>(sum.peak_device_bytes) : 0.0);
    const int64_t ram = host_ram_bytes();
    if (ram > 0 && host_bytes > static_cast<double>(ram))
      throw Error(r.plan_path.empty() ? "--context" : "--plan", r.plan_path.empty() ? r.context_flag : r.plan_path,
                  "this run needs at least " + format_bytes(static_cast<int64_t>(std::min(host_bytes, 9e18))) +
                      " of host memory and this machine has " + format_bytes(ram),
                  "a shorter context or fewer --layers");
  }
  if (r.compare_dense && !sparse)
    throw Error("--compare-dense", "", "compares a sparse step with the dense one", "add --attention sparse");
  if (r.compare_dense && c.optimizer != step::Optimizer::none)
    throw Error("--compare-dense", "", "compares the gradients of step 1, which an optimizer step consumes",
                "use --optimizer none with --compare-dense");
  // The run's buffer table for the backend that will run it (the CUDA backend's workspace and op
  // scratch included), built once, and the plan's against it, before any device call: a plan that
  // cannot start is refused here, not after the weights are on the GPU.
  RunTable t;
  t.table = run_table(r.scenario.model, c, target_of(r));
  t.notes = check_plan_rows(planned_rows(r, c, t.table.rows), t.table.rows, r.backend);
  return t;
}

RunInputs read_inputs(const RunRequest& r, const InputFiles& f) {
  const models::ModelSpec m = effective_model(r.scenario.model, r.scenario.config);
  const step::Config& c = r.scenario.config;
  RunInputs in;
  in.tokens = f.tokens.empty() ? TokenSource::synthetic(m.vocab, f.seed) : TokenSource::from_file(f.tokens, m.vocab);
  (void)in.tokens.sequence(0, c.context_tokens);  // a file too short is refused now
  // A checkpoint has the model's own layers; tensors of layers --layers leaves out are skipped.
  in.weights = f.weights.empty() ? random_weights(m, f.seed, f.init_std)
                                 : read_checkpoint(f.weights, m, r.scenario.model.layers);
  if (c.lora_rank <= 0 && !f.adapter.empty())
    throw Error("--adapter", f.adapter, "loads a LoRA adapter, and the plan trains every parameter",
                "re-plan with --lora-rank (and the adapter's alpha and targets), or run without --plan");
  if (c.lora_rank <= 0 && f.lora_init_b_std != 0)
    throw Error("--lora-init-b-std", "", "initialises LoRA adapters, and this run trains every parameter",
                "add --lora-rank R");
  // LoRA: the adapter to train, loaded (a PEFT folder) or initialised as PEFT does (seeded). A loaded
  // adapter's file is what the saved one keeps (its base model, its other keys).
  in.base = f.weights.empty() ? m.id : f.weights;
  if (c.lora_rank > 0 && !f.adapter.empty()) {
    in.loaded_adapter = read_adapter_config(f.adapter);
    const std::string warning = adapter_base_warning(*in.loaded_adapter, f.adapter, in.base);
    if (!warning.empty() && f.warning) f.warning(warning);
  }
  if (c.lora_rank > 0)
    in.adapters = f.adapter.empty() ? init_adapters(m, c, f.seed + 1, f.lora_init_b_std)
                                    : read_adapter(f.adapter, m, c, r.scenario.model.layers);
  return in;
}

void check_finite(const ParamTensors& t, const std::string& flag, const char* what) {
  for (const auto& p : t.layout.params()) {
    const float* x = t.at(p);
    for (int64_t i = 0; i < p.numel; ++i)
      if (!std::isfinite(x[i]))
        throw Error(flag, p.name, std::string("the run's ") + what + " hold a non-finite value (element " +
                                      std::to_string(i) + "); nothing was written",
                    "a lower --lr, or finite --weights");
  }
}

Json RunResult::step_timing() const {
  return {{"warmup_steps", warmup_steps},
          {"timed_steps", timed_steps},
          {"statistic", "fastest"},
          {"step_s", fastest_step_s},
          {"timed_mean_step_s", timed_mean_step_s},
          {"step_times_s", step_times_s},
          {"why", "the step time validate compares: the fastest timed step after the warm-up, as the fidelity "
                  "suite and the calibration time (interference only adds time)"}};
}

RunResult run(const RunRequest& r, const Weights& w, const TokenSource& tokens, const ParamTensors& adapters) {
  return run(r, check_run(r), w, tokens, adapters);
}

namespace {

// What a run is, before it runs: the request's model, configuration, backend and kernels, and the
// steps asked for.
RunResult start_result(const RunRequest& r, const ParamTensors& adapters) {
  const step::Config& c = r.scenario.config;
  RunResult res;
  res.model = effective_model(r.scenario.model, c);
  if (c.lora_rank > 0 && adapters.layout.total() != executor::adapter_layout(res.model, c).total())
    throw Error("--lora-rank", std::to_string(c.lora_rank), "internal: the run's adapters do not have its layout");
  res.config = c;
  res.backend = r.backend;
  res.attention_kernel = attention_kernel_of(r);
  res.gemm_precision = gemm_precision_of(r);
  res.kv_pages = to_string(page_dtype(r, c.kv_dtype, "--kv-dtype"));
  res.grad_pages = to_string(page_dtype(r, c.kv_grad_dtype, "--kv-grad-dtype"));
  res.warmup_steps = r.warmup_steps;
  res.timed_steps = r.timed_steps;
  res.steps_requested = r.warmup_steps + r.timed_steps;
  return res;
}

// The Engine's options: the table it allocates from, what it records, the optimizer, the run's
// adapters, its communicator (NCCL's on a multi-process CUDA run) and the CUPTI tagger.
EngineOptions engine_options(const RunRequest& r, const RunTable& table, const ParamTensors& adapters,
                             detail::RunDevice& device) {
  EngineOptions o;
  o.table = table;
  o.record_trace = r.record_trace;
  o.detail = r.detail;
  o.adamw.lr = r.lr;
  o.adamw.grad_accum = r.grad_accum;
  o.measure_recall = r.measure_recall;
  // --reference of a mixture of experts: the reference routes as the run did (a bf16 run's rounding
  // may send a token to another expert than fp32 logits would).
  o.record_routes = r.reference && r.scenario.model.moe.present();
  o.adapters = adapters;
  o.comm = device.nccl ? device.nccl.get() : r.comm;
  if (device.nccl) o.groups = &device.groups;
#ifdef OOMB_HAVE_CUPTI
  o.tagger = device.tagger.get();
  if (device.collector)
    o.host_buffers.push_back({step::row::kCuptiActivityBuffers, "backend_scratch", device.collector->pool_bytes()});
#else
  (void)device;
#endif
  return o;
}

// The step loop's record: the steps' intervals for CUPTI, the first timed step's start, every step's
// time (warm-up included) and the measurement after the fastest timed step.
struct StepLoop {
  // CUPTI: the timed steps' intervals on the steady clock, each closed after the device finished
  // its work; only work inside them goes into the trace (not set-up, nor the checks run between steps).
  std::vector<std::pair<int64_t, int64_t>> windows;
  int64_t timed_start_ns = 0;            // steady clock at the first timed step
  std::vector<double> all_step_times_s;  // warm-up included
  std::optional<Measured> fastest_comm;  // the measurement after the fastest timed step (its collectives)
};

// Runs the steps (stopping early when asked), checks the first against the reference or the dense
// step when asked; a step that fails is recorded on `res` (failure, failed_step) after the run's
// communicators are aborted, and bad input and host memory exhaustion are rethrown.
StepLoop run_steps(const RunRequest& r, Engine& e, detail::RunDevice& device, const Weights& w,
                   const TokenSource& tokens, const ParamTensors& adapters, FaultTagger& fault_tagger,
                   int64_t& current, RunResult& res) {
  const step::Config& c = r.scenario.config;
  Backend& backend = *device.backend;
  const int64_t total_steps = res.steps_requested;
  StepLoop loop;
  // Data parallelism: rank r of N trains on sequence step x N + r (one process: step).
  const int world = r.comm ? r.comm->size() : 1, rank = r.comm ? r.comm->rank() : 0;
  res.rank = rank;
  res.world = world;
  // Tensor parallelism: the ranks of one group train the same sequence.
  const int replicas = world / static_cast<int>(c.gpus), replica = rank / static_cast<int>(c.gpus);
  auto sequence_of = [&](int64_t step) { return tokens.sequence(step * replicas + replica, c.context_tokens); };
  const std::vector<int32_t> first = sequence_of(0);
  // Review 3, finding 6: a rank whose step failed aborts its NCCL communicators before it unwinds
  // (the Engine, the backend and the communicators wait on their streams as they are destroyed, and
  // a collective that a peer never joins would hold them there, so the rank would never reach the
  // launcher's abort); its peers' collectives then fail instead of waiting for it.
  auto abort_communicators = [&] {
    if (world <= 1) return;
    e.abort_communicators();
    if (device.nccl) device.nccl->abort();
  };
  try {
    for (current = 0; current < total_steps; ++current) {
      if (r.stop && r.stop()) {
        res.interrupted = true;
        break;
      }
      const std::vector<int32_t> seq = current == 0 ? first : sequence_of(current);
      const int64_t t0 = steady_now_ns();
      if (current == r.warmup_steps) loop.timed_start_ns = t0;
      const StepResult sr = e.step(seq);
      res.losses.push_back(sr.loss);
      loop.all_step_times_s.push_back(sr.seconds);
      if (current >= r.warmup_steps) {
        // The collectives' times of the step validate compares (the fastest timed one), not of the last.
        if (res.step_times_s.empty() || sr.seconds < *std::min_element(res.step_times_s.begin(), res.step_times_s.end()))
          loop.fastest_comm = e.measured();
        res.step_times_s.push_back(sr.seconds);
      }
#ifdef OOMB_HAVE_CUPTI
      if (device.collector) {
        static_cast<CudaBackend&>(backend).synchronize();
        // The warm-up's device work is left out, as on the host-timed path. The collector decodes
        // the step's records now and keeps only its window's work (review 3, finding 12).
        if (current >= r.warmup_steps) loop.windows.emplace_back(t0, steady_now_ns());
        if (device.collector->windowed()) {
          if (current >= r.warmup_steps) device.collector->close_window(loop.windows.back().first, loop.windows.back().second);
          else device.collector->settle();
        }
      }
#else
      (void)t0;
#endif
      if (current == 0 && r.reference) {
        status(r, "running the full-sequence reference ...");
        res.reference = check_against_reference(res.model, c, w, adapters, seq, e, res.losses.back());
      }
      if (current == 0 && r.compare_dense) {
        status(r, "running the dense step ...");
        res.dense = compare_with_dense(backend, r.scenario.model, c, w, seq, res.losses.back(), e.gradients(), adapters);
      }
    }
  } catch (const Error&) {
    abort_communicators();
    throw;
  } catch (const std::bad_alloc&) {
    abort_communicators();
    throw;  // out of host memory: the caller's exit 3, not a failed step's 4
  } catch (const std::exception& ex) {
    abort_communicators();
    const std::optional<FaultTagger::Tag> at = fault_tagger.fault();
    res.failure = ex.what() + (at ? " (in " + at->to_string() + ")" : std::string());
    res.failed_step = current + 1;
  }
  return loop;
}

// The run's measurement (the Engine's, with the collectives of the fastest timed step) and what is
// kept of it; false when the run has nothing more to give (a failed step: the host trace so far is
// kept; an interrupt before any step).
bool finish_measurement(const RunRequest& r, Engine& e, detail::RunDevice& device, StepLoop& loop, RunResult& res) {
  const int64_t total_steps = res.steps_requested;
  res.measured = e.measured();
  res.measured.job = r.job;
  res.measured.emulated_device = res.emulated_device;
  if (loop.fastest_comm) {
    Measured& m = res.measured;
    const Measured& f = *loop.fastest_comm;
    m.allreduce_s = f.allreduce_s;
    m.allreduce_wait_s = f.allreduce_wait_s;
    m.allreduce_transfer_s = f.allreduce_transfer_s;
    m.tp_allreduce_s = f.tp_allreduce_s;
    m.tp_allreduce_wait_s = f.tp_allreduce_wait_s;
    m.tp_allreduce_transfer_s = f.tp_allreduce_transfer_s;
  }
  if (auto* cpu = dynamic_cast<CpuBackend*>(device.backend.get())) res.allocator_reserved_bytes = cpu->reserved_high_bytes();
  res.cuda = device.cuda_summary();
  if (!res.failure.empty()) {
    // What was measured still goes out: the completed steps and the host trace so far.
    if (r.record_trace) res.trace = e.trace(r.command);
    return false;
  }
  res.steps_completed = static_cast<int64_t>(res.losses.size());
  if (res.interrupted) {
    if (res.steps_completed == 0) return false;  // nothing measured
    if (res.step_times_s.empty()) {  // stopped in the warm-up: its steps are what was measured
      res.warmup_steps = 0;
      res.step_times_s = loop.all_step_times_s;
      loop.timed_start_ns = e.trace_origin_ns();
    }
    res.timed_steps = static_cast<int64_t>(res.step_times_s.size());
  }
  const int world = res.world, rank = res.rank;
  if (world > 1) {
    // Every rank's losses, for the job's summary (rank 0 prints it).
    std::vector<double> all(static_cast<size_t>(world * total_steps), 0.0);
    std::copy(res.losses.begin(), res.losses.end(), all.begin() + rank * total_steps);
    r.comm->all_reduce_sum_host(all.data(), static_cast<int64_t>(all.size()));
    for (int k = 0; k < world; ++k)
      res.rank_losses.emplace_back(all.begin() + k * total_steps, all.begin() + (k + 1) * total_steps);
  }
  if (r.keep_weights && !res.interrupted) res.weights = e.weights();
  if (r.keep_gradients && !res.interrupted) res.gradients = e.gradients();
  if (r.keep_adapters && !res.interrupted) res.adapters = e.adapters();
  res.fastest_step_s = *std::min_element(res.step_times_s.begin(), res.step_times_s.end());
  for (double x : res.step_times_s) res.timed_mean_step_s += x / static_cast<double>(res.step_times_s.size());
  return true;
}

// The run's trace: CUPTI's device times where they were recorded, else the Engine's host-timed
// events; the warm-up left out, and the run record and its step timing in the metadata.
traces::Trace run_trace(const RunRequest& r, Engine& e, detail::RunDevice& device, const StepLoop& loop,
                        RunResult& res) {
  std::string step_timing_events = "every step's";
  traces::Trace t;
  bool engine_clock = true;  // the events' times are on the Engine's steady clock
#ifdef OOMB_HAVE_CUPTI
  if (device.collector) {
    if (std::optional<traces::Trace> timed = detail::cupti_trace(r, e, device, loop.windows, res, engine_clock))
      t = std::move(*timed);
  }
#else
  (void)device;
#endif
  if (!res.cupti) t = e.trace(r.command);
  // Either timing: the warm-up's events (and its step phase) are left out, so that per-step times
  // (the summary's, and validate's stage and pass rows, which divide by the measured block's steps)
  // describe the timed steps only. CUPTI decoded only the timed steps' windows already.
  int64_t record_steps = 0;  // 0: the Engine's count (every step)
  if (res.warmup_steps > 0 && engine_clock) {
    const int64_t cut = loop.timed_start_ns - e.trace_origin_ns();
    std::erase_if(t.events, [cut](const traces::Event& ev) { return ev.start_ns < cut; });
    t.summary = traces::summarize(t);
    record_steps = res.timed_steps;
    step_timing_events = "timed steps only (the warm-up's events are left out)";
  }
  if (!res.cupti) {
    if (r.backend == "cuda") {
      t.metadata.device = res.device_name + ", host-timed (enqueue times)";
      t.metadata.extra["gpu"] = res.device_name;
      t.metadata.extra["gpu_name"] = res.cuda_device;
      t.metadata.extra["trace_timing"] = "host";
    }
    if (!res.cupti_failure.empty()) record_profiler_fallback(t, res.cupti_failure);
  }
  if (r.backend == "cuda") t.metadata.extra["cuda"] = res.cuda;
  // The run's measurement: the collectives' times of the fastest timed step, as the step time is.
  if (t.metadata.extra.contains("measured")) t.metadata.extra["measured"] = step::to_json(res.measured)["measured"];
  // What validate compares as the step time: the fastest timed step (the mean over all steps stays
  // as mean_step_s), and how it was timed.
  step::record_step_timing(t.metadata.extra, record_steps, res.fastest_step_s, res.measured.step_s);
  t.metadata.extra["step_timing"] = res.step_timing();
  t.metadata.extra["step_timing"]["events"] = step_timing_events;
  if (r.backend == "cpu") t.metadata.extra["cpu_threads"] = res.cpu_threads;
  if (res.interrupted)
    t.metadata.extra["interrupted"] = {{"steps_completed", res.steps_completed},
                                       {"steps_requested", res.steps_requested},
                                       {"note", "the run was interrupted: the trace holds the completed steps"}};
  return t;
}

}  // namespace

RunResult run(const RunRequest& r, const RunTable& table, const Weights& w, const TokenSource& tokens,
              const ParamTensors& adapters) {
  const step::Config& c = r.scenario.config;
  RunResult res = start_result(r, adapters);
  const int64_t total_steps = res.steps_requested;
  detail::RunDevice device;
  detail::open_device(r, table, res, device);
  Backend& backend = *device.backend;
  if (r.backend == "cpu") res.cpu_threads = static_cast<CpuBackend&>(backend).threads();
  EngineOptions o = engine_options(r, table, adapters, device);
  // Remembers the (stage, chunk, layer, op) a failing step was in (forwarding to the CUPTI tagger).
  FaultTagger fault_tagger(o.tagger);
  o.tagger = &fault_tagger;
  int64_t current = 0;
  if (r.progress) o.progress = [&](const Progress& p) { r.progress(current, total_steps, p); };
  Engine e(backend, r.scenario.model, c, w, o);
  res.offload = e.geometry().offload;
#ifdef OOMB_HAVE_CUDA_BACKEND
  // The set-up the constructor queued (zeroed buffers, the weights' upload) ends before the first
  // step starts, so that neither its time nor its device work counts in step 1 (a run without
  // warm-up measures it; a CUPTI window opened at the step would hold its records, untagged).
  if (r.backend == "cuda") static_cast<CudaBackend&>(backend).synchronize();
#endif
  StepLoop loop = run_steps(r, e, device, w, tokens, adapters, fault_tagger, current, res);
  if (!finish_measurement(r, e, device, loop, res)) return res;
  if (r.record_trace) res.trace = run_trace(r, e, device, loop, res);
  return res;
}

Json to_json(const RunResult& r) {
  if (!r.failure.empty())
    return {{"error", r.failure},   {"failed_step", r.failed_step}, {"losses", r.losses},
            {"backend", r.backend}, {"model", r.model.id},          {"config", r.config.to_json()},
            {"measured", r.measured.steps > 0 ? step::to_json(r.measured)["measured"] : Json()}};
  Json j = {{"loss", r.losses.back()},      {"losses", r.losses},    {"tokens_per_s", r.measured.tokens_per_s},
            {"measured", step::to_json(r.measured)["measured"]}, {"backend", r.backend}, {"model", r.model.id},
            {"config", r.config.to_json()}, {"step_timing", r.step_timing()}};
  if (r.backend == "cpu") j["cpu_threads"] = r.cpu_threads;
  if (r.backend == "cuda") j["cuda"] = r.cuda;
  if (r.reference)
    j["reference"] = {{"loss", r.reference->loss},
                      {"loss_rel_error", r.reference->loss_rel_error},
                      {"max_grad_rel_error", r.reference->max_grad_rel_error},
                      {"worst_tensor", r.reference->worst_tensor}};
  if (r.dense) j["compare_dense"] = r.dense->to_json();
  if (r.measured.tp > 1)
    j["tensor_parallel"] = {{"tp", r.measured.tp},
                            {"rank", r.rank},
                            {"world", r.world},
                            {"rank_losses", r.rank_losses},
                            {"allreduces", r.measured.tp_allreduces},
                            {"allreduce_bytes", r.measured.tp_allreduce_bytes},
                            {"allreduce_s", r.measured.tp_allreduce_s},
                            {"allreduce_wait_s", r.measured.tp_allreduce_wait_s},
                            {"allreduce_transfer_s", r.measured.tp_allreduce_transfer_s}};
  if (r.world > r.measured.tp)
    j["data_parallel"] = {{"world", r.world},
                          {"rank", r.rank},
                          {"rank_losses", r.rank_losses},
                          {"allreduce_bytes", r.measured.allreduce_bytes},
                          {"allreduce_s", r.measured.allreduce_s},
                          {"allreduce_wait_s", r.measured.allreduce_wait_s},
                          {"allreduce_transfer_s", r.measured.allreduce_transfer_s}};
  if (r.trace) {
    j["trace"] = {{"timing", r.cupti ? "cupti" : "host"}, {"step_s", r.fastest_step_s}};
    if (!r.cupti_failure.empty()) j["trace"]["cupti_unavailable"] = r.cupti_failure;
    if (r.cupti)
      j["trace"]["cupti"] = {{"records", r.cupti->records},   {"kernels", r.cupti->kernels},
                             {"memcpys", r.cupti->memcpys},   {"memsets", r.cupti->memsets},
                             {"untagged", r.cupti->untagged}, {"dropped", r.cupti->dropped}};
  }
  if (!r.measured.recall.empty()) {
    j["mean_recall"] = r.measured.mean_recall();
    j["min_recall"] = r.measured.min_recall();
  }
  return j;
}



namespace {
// A collective's wait for the slowest rank, as the summary states it.
std::string wait_text(const Measured& m, double wait_s) {
  if (m.collectives_device_timed) return "not told apart on the device (NCCL kernel spans)";
  return m.collective_split ? format_duration_s(wait_s) : "unknown (no shared clock)";
}
}  // namespace

std::string describe(const RunResult& r, const RunRequest& req, const std::string& tokens, const std::string& weights,
                     const std::string& trace_file) {
  std::string out;
  const step::Config& c = r.config;
  const Measured& ms = r.measured;
  const bool sparse = c.attention == step::Attention::sparse;
  appendf(out, "oomb run: %s (%lld layers), context %s, chunk %s, page %s, %s attention, %s\n", r.model.id.c_str(),
          static_cast<long long>(r.model.layers), format_tokens(c.context_tokens).c_str(),
          format_tokens(c.chunk_tokens).c_str(), format_tokens(c.page_tokens).c_str(), step::attention_text(c).c_str(),
          step::residency_text(c, r.model).c_str());
  appendf(out, "backend %s, tokens %s, weights %s\n",
          r.backend == "cpu" ? ("cpu (" + std::string(any_bf16(c) ? "bf16 storage emulated exactly, " : "") +
                                std::to_string(r.cpu_threads) + " compute threads)")
                                   .c_str()
                             : "cuda",
          tokens.c_str(), weights.c_str());
  const bool lora = c.lora_rank > 0;
  appendf(out, "storage: weights %s, gradients %s, activations %s, loss %s; pages: KV %s, KV-grad %s\n",
          to_string(c.param_dtype), lora ? "fp32 (the adapters')" : to_string(c.param_grad_dtype),
          to_string(c.activation_dtype), to_string(c.loss_dtype), r.kv_pages.c_str(), r.grad_pages.c_str());
  if (r.measured.tp > 1)
    appendf(out,
            "tensor parallel: rank %d of %lld (%s; this rank holds 1/%lld of the heads, MLP columns and vocabulary), "
            "%lld activation all-reduces, %s per step (%s on this rank: %s waiting for the other ranks, %s "
            "transfer)\n",
            r.rank, static_cast<long long>(r.measured.tp), r.measured.comm.c_str(),
            static_cast<long long>(r.measured.tp), static_cast<long long>(r.measured.tp_allreduces),
            format_bytes(r.measured.tp_allreduce_bytes).c_str(), format_duration_s(r.measured.tp_allreduce_s).c_str(),
            wait_text(r.measured, r.measured.tp_allreduce_wait_s).c_str(),
            format_duration_s(r.measured.tp_allreduce_transfer_s).c_str());
  if (r.world > r.measured.tp)
    appendf(out,
            "data parallel: rank %d of %d (%s), gradient all-reduce %s per optimizer step (%s on this rank: %s "
            "waiting for the other replicas, %s transfer)\n",
            r.rank, r.world, r.measured.comm.c_str(), format_bytes(r.measured.allreduce_bytes).c_str(),
            format_duration_s(r.measured.allreduce_s).c_str(),
            wait_text(r.measured, r.measured.allreduce_wait_s).c_str(),
            format_duration_s(r.measured.allreduce_transfer_s).c_str());
  if (lora)
    appendf(out, "training: LoRA rank %lld (alpha %g, scale %g) on %s: %s adapter parameters (fp32), the base frozen\n",
            static_cast<long long>(c.lora_rank), c.lora_alpha, c.lora_alpha / static_cast<double>(c.lora_rank),
            step::lora_targets_text(c.lora_targets).c_str(),
            format_count(static_cast<double>(executor::adapter_layout(r.model, c).total())).c_str());
  if (r.backend == "cuda" && r.cuda.is_object()) {
    const Json& cs = r.cuda;
    appendf(out, "attention kernel %s: %lld calls on bf16 tensor cores, %lld on fp32 CUDA cores\n",
            r.attention_kernel.c_str(), static_cast<long long>(cs["attention_calls"]["bf16_tc"].get<int64_t>()),
            static_cast<long long>(cs["attention_calls"]["fp32"].get<int64_t>()));
    appendf(out, "GEMM precision %s: %lld GEMMs in bf16, %lld in tf32, %lld in fp32\n", r.gemm_precision.c_str(),
            static_cast<long long>(cs["gemm_calls"]["bf16"].get<int64_t>()),
            static_cast<long long>(cs["gemm_calls"]["tf32"].get<int64_t>()),
            static_cast<long long>(cs["gemm_calls"]["fp32"].get<int64_t>()));
  }
  for (size_t i = 0; i < r.losses.size(); ++i)
    appendf(out, "  step %zu  loss %.6f%s\n", i + 1, r.losses[i],
            static_cast<int64_t>(i) < r.warmup_steps ? "  (warm-up)" : "");
  // One statement of the step time: the fastest timed step (what the trace records and validate
  // judges) first, then the mean over every step and what the first one paid for set-up.
  if (r.warmup_steps > 0 || r.timed_steps > 1) {
    appendf(out, "\nstep time %s: the fastest of %lld timed step%s after %lld warm-up%s%s\n",
            format_duration_s(r.fastest_step_s).c_str(), static_cast<long long>(r.timed_steps),
            r.timed_steps == 1 ? "" : "s", static_cast<long long>(r.warmup_steps), r.warmup_steps == 1 ? "" : "s",
            r.trace ? " (the trace's step_s, what validate compares)" : "");
    std::string spread = "  mean " + format_duration_s(ms.step_s) + " over all " +
                         std::to_string(ms.step_times_s.size()) + " steps, " + format_count(ms.tokens_per_s) +
                         " tokens/s";
    if (ms.step_times_s.size() > 1) {  // the first step pays one-time set-up (scratch growth, caches)
      double later = 0;
      for (size_t i = 1; i < ms.step_times_s.size(); ++i) later += ms.step_times_s[i];
      spread += "; first step " + format_duration_s(ms.step_times_s[0]) + ", later steps " +
                format_duration_s(later / static_cast<double>(ms.step_times_s.size() - 1)) + " on average";
    }
    appendf(out, "%s\n", spread.c_str());
  } else {
    appendf(out, "\nstep time %s, %s tokens/s\n", format_duration_s(ms.step_s).c_str(),
            format_count(ms.tokens_per_s).c_str());
  }
  if (r.emulated_device)
    appendf(out, "  (the emulated CUDA device: its times are the emulator's, not a GPU's; memory and copies are "
                 "the run's)\n");
  if (!req.planned.empty())
    appendf(out, "buffer table: checked against the plan's (%zu rows)%s\n", req.planned.size(),
            ms.notes.empty() ? ", every row as planned" : "");
  for (const std::string& n : ms.notes) appendf(out, "  note: %s\n", n.c_str());
  if (r.allocator_reserved_bytes > 0)
    appendf(out, "allocator: %s held at most (blocks in use and cached; %s in use at the peak)\n",
            format_bytes(r.allocator_reserved_bytes).c_str(), format_bytes(ms.peak_device_bytes + ms.peak_host_bytes).c_str());
  appendf(out, "peak device %s, peak host %s\n", format_bytes(ms.peak_device_bytes).c_str(),
          format_bytes(ms.peak_host_bytes).c_str());
  appendf(out, "device pools: KV %lld / %lld pages of %s, KV-grad %lld / %lld pages of %s (high-water / capacity)\n",
          static_cast<long long>(ms.kv_pool_high_water_pages), static_cast<long long>(ms.kv_pool_pages),
          format_bytes(ms.kv_page_bytes).c_str(), static_cast<long long>(ms.grad_pool_high_water_pages),
          static_cast<long long>(ms.grad_pool_pages), format_bytes(ms.grad_page_bytes).c_str());
  if (ms.local_kv_pool_pages > 0)
    appendf(out, "local pools (sliding and chunked layers): KV %lld / %lld pages, KV-grad %lld / %lld pages\n",
            static_cast<long long>(ms.local_kv_high_water_pages), static_cast<long long>(ms.local_kv_pool_pages),
            static_cast<long long>(ms.local_grad_high_water_pages), static_cast<long long>(ms.local_grad_pool_pages));
  appendf(out, "copies per step: h2d %s, d2h %s, in %lld contiguous regions\n", format_bytes(ms.h2d_bytes).c_str(),
          format_bytes(ms.d2h_bytes).c_str(), static_cast<long long>(ms.copy_regions));
  if (sparse) {
    int64_t mx = 0;
    double sum = 0;
    for (const auto& u : ms.union_pages) {
      mx = std::max(mx, u.pages);
      sum += static_cast<double>(u.pages);
    }
    // Against the plan's assumption: the overlap these unions imply (validate judges the pools by it).
    const step::ImpliedOverlap io = step::implied_overlap(step::geometry(r.model, c), ms.union_pages);
    std::string vs;
    if (io.pairs > 0) {
      char b[160];
      std::snprintf(b, sizeof b, " (--selection-overlap %.2f assumed; these imply %.2f at the largest, mean %.2f)",
                    c.selection_overlap, io.at_largest, io.mean);
      vs = b;
    }
    appendf(out, "selection union per (chunk, layer): mean %.1f pages, max %lld pages%s\n",
            ms.union_pages.empty() ? 0.0 : sum / static_cast<double>(ms.union_pages.size()), static_cast<long long>(mx),
            vs.c_str());
  }
  if (!ms.recall.empty())
    appendf(out, "recall of the dense attention mass (last step, %zu (chunk, layer) pairs): mean %.4f, min %.4f\n",
            ms.recall.size(), ms.mean_recall(), ms.min_recall());
  if (r.dense)
    appendf(out,
            "dense comparison (step 1): loss %.6f vs dense %.6f (diff %+.3e), max gradient rel. L2 error %.3e (%s)\n",
            r.dense->loss, r.dense->dense_loss, r.dense->loss_diff, r.dense->max_grad_rel_error,
            r.dense->worst_tensor.c_str());
  if (r.reference)
    appendf(out, "reference (full sequence): loss %.6f (rel. error %.2e), max gradient rel. L2 error %.2e (%s)\n",
            r.reference->loss, r.reference->loss_rel_error, r.reference->max_grad_rel_error,
            r.reference->worst_tensor.c_str());
  if (!trace_file.empty())
    appendf(out, "trace (oomb.trace/1, %s detail, %s): %s\n", traces::to_string(req.detail),
            r.cupti ? "CUPTI device times" : "host wall-clock times", trace_file.c_str());
  if (r.cupti)
    appendf(out,
            "  CUPTI: %lld records (%lld kernels, %lld memcpys, %lld memsets), %lld dropped, %lld untagged; step time "
            "with the collector %s (tracing overhead: divide by the step time of the same run without --trace)\n",
            static_cast<long long>(r.cupti->records), static_cast<long long>(r.cupti->kernels),
            static_cast<long long>(r.cupti->memcpys), static_cast<long long>(r.cupti->memsets),
            static_cast<long long>(r.cupti->dropped), static_cast<long long>(r.cupti->untagged),
            format_duration_s(ms.step_s).c_str());
  return out;
}

}  // namespace oomb::runner
