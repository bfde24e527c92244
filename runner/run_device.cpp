#include "runner/run_device.h"

#include <algorithm>

#include "core/error.h"
#include "core/format.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/threads.h"
#include "executor/runtime/profiler_fallback.h"
#include "runner/calibrate.h"
#include "step/allocator.h"
#ifdef OOMB_HAVE_CUDA_BACKEND
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_info.h"
#endif
#ifdef OOMB_HAVE_NCCL
#include "executor/cuda/nccl_comm.h"
#endif

namespace oomb::runner::detail {

using namespace oomb::executor;

void open_device(const RunRequest& r, const RunTable& table, RunResult& res, RunDevice& d) {
  const step::Config& c = r.scenario.config;
  (void)c;  // read only in builds with NCCL
  (void)table, (void)res;  // read only in builds with the CUDA backend
  if (r.backend == "cpu") {
    CpuBackendOptions copt;
    // Data-parallel ranks on one node share its cores: by default each takes its share of them.
    copt.threads = rank_cpu_threads(r.cpu_threads, r.comm);
    d.backend = std::make_unique<CpuBackend>(copt);
  } else {
#ifdef OOMB_HAVE_CUDA_BACKEND
    std::string why;
    if (!cuda_device_available(&why)) throw Error("--backend", "cuda", "no usable CUDA device: " + why, "use --backend cpu");
#ifdef OOMB_HAVE_CUPTI
    // Before the backend exists, so that CUPTI sees its allocations (memory records). Asked for by
    // name (--trace-timing cupti), a refusal is an error; by default the run falls back to host timing.
    if (r.record_trace && r.trace_timing != "host") {  // a CUDA run's trace: CUPTI-timed unless host timing is asked for
      d.collector = start_or_fall_back(
          [] {
            cupti::CollectorOptions co;
            co.windowed = true;  // decoded step by step: only the timed steps' work is kept
            return std::make_unique<cupti::CuptiCollector>(co);
          },
          &res.cupti_failure);
      if (!d.collector && r.trace_timing == "cupti")
        throw Error("--trace-timing", "cupti", "CUPTI could not start: " + res.cupti_failure, "use --trace-timing host");
      if (!d.collector) say(r, fallback_message(res.cupti_failure));
    }
#endif
    try {
      CudaBackendOptions copt;
      const std::string ak = res.attention_kernel, gp = res.gemm_precision;
      copt.attention_kernel = ak == "fp32" ? CudaAttentionKernel::fp32 : CudaAttentionKernel::bf16_tensor_core;
      copt.attention_kernel_strict = ak == "bf16-tc";
      copt.gemm_precision = gp == "fp32"   ? CudaGemmPrecision::fp32
                            : gp == "tf32" ? CudaGemmPrecision::tf32
                                           : CudaGemmPrecision::bf16;
      // The op scratch is the table's op_scratch row, allocated once; no op grows it.
      for (const step::BufferRow& row : table.table.rows)
        if (row.name == step::row::kOpScratch) copt.workspace_bytes = row.bytes;
      copt.fixed_workspace = true;
      // The device buffers in one block reserved up front and laid out by the table (step/allocator.h),
      // as its allocator_blocks row prices it: no growth in 1 GiB blocks, no holes first fit leaves.
      step::allocator::ArenaLayout layout = step::allocator::cuda_arena_layout(table.table.rows, true);
      copt.device_reserve_bytes = layout.block_bytes;
      copt.device_layout = std::move(layout.ranges);
      // One GPU per rank: the rank's place among its host's ranks (a shared-memory split of the job,
      // whatever launched it) modulo the devices this process sees, so that a job with one visible
      // GPU per rank (CUDA_VISIBLE_DEVICES set per rank) drives device 0 in each, and the emulated
      // device (one per process) runs any number of ranks.
      if (r.comm && r.comm->size() > 1) {
        const int devices = cuda_device_count();
        if (devices > 0) copt.device = r.comm->host_rank() % devices;
      }
#ifdef OOMB_HAVE_NCCL
      // NCCL before the device block (review 3, finding 5): its communicators are created and
      // connected first, the groups this rank trains with made here (the world is connected only
      // when it is one of them), and the device memory they took is measured (the
      // communicator_buffers row).
      if (r.comm && r.comm->size() > 1)
        copt.before_device_block = [&](void* stream) {
          d.nccl = oomb::executor::cuda::nccl_communicator(*r.comm, stream, false);
          d.groups = parallel_groups(*d.nccl, c.gpus, c.data_parallel);
          for (Communicator* g : {d.groups.tp, d.groups.dp})
            if (g) g->connect();
        };
#endif
      auto cuda = std::make_unique<CudaBackend>(copt);
      res.device_name = cuda->device_name();
      res.cuda_device = cuda_device_info(copt.device).name;
      res.emulated_device = CudaBackend::emulated();
      if (ak == "bf16-tc" && !cuda->attention_tc_available())
        throw Error("--attention-kernel", "bf16-tc",
                    "the bf16 tensor-core kernels do not run on " + res.device_name +
                        " (they need sm_80 or later and a kernel image for it)",
                    "--attention-kernel auto or fp32");
      CudaBackend* cb = cuda.get();
      d.cuda_summary = [cb, ak, gp] {
        const CudaMemoryStats mem = cb->memory_stats();
        return Json{{"attention_kernel", ak},
                    {"attention_calls",
                     {{"fp32", cb->attention_calls(CudaAttentionKernel::fp32)},
                      {"bf16_tc", cb->attention_calls(CudaAttentionKernel::bf16_tensor_core)}}},
                    {"gemm_precision", gp},
                    {"gemm_calls",
                     {{"fp32", cb->gemm_calls(CudaGemmPrecision::fp32)},
                      {"tf32", cb->gemm_calls(CudaGemmPrecision::tf32)},
                      {"bf16", cb->gemm_calls(CudaGemmPrecision::bf16)}}},
                    // The backend's own device buffers: cuBLASLt's workspace, the ops' scratch.
                    {"gemm_workspace_bytes", cb->gemm_workspace_bytes()},
                    {"scratch_bytes", cb->scratch_bytes()},
                    // The device block the table laid out (step/allocator.h): a grow or a spill is
                    // memory the plan did not place.
                    {"device_arena",
                     {{"reserved_bytes", mem.device_reserved_bytes},
                      {"grows", mem.device_grows},
                      {"spills", mem.device_spills}}}};
      };
#ifdef OOMB_HAVE_CUPTI
      if (d.collector) {
        try {
          d.collector->name_stream(cuda->stream(CudaStream::compute), traces::Lane::compute);
          d.collector->name_stream(cuda->stream(CudaStream::h2d), traces::Lane::h2d);
          d.collector->name_stream(cuda->stream(CudaStream::d2h), traces::Lane::d2h);
          d.tagger = std::make_unique<cupti::CuptiTagger>(*d.collector);
        } catch (const std::exception& ex) {
          if (r.trace_timing == "cupti")
            throw Error("--trace-timing", "cupti", std::string("CUPTI failed: ") + ex.what(), "use --trace-timing host");
          res.cupti_failure = ex.what();
          say(r, fallback_message(res.cupti_failure));
          d.collector.reset();
        }
      }
#endif
      d.backend = std::move(cuda);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("--backend", "cuda", std::string("no usable CUDA device: ") + e.what(), "use --backend cpu");
    }
#endif
  }
}

#ifdef OOMB_HAVE_CUPTI
std::optional<traces::Trace> cupti_trace(const RunRequest& r, Engine& e, RunDevice& device,
                                         const std::vector<std::pair<int64_t, int64_t>>& windows, RunResult& res,
                                         bool& engine_clock) {
  cupti::DecodeOptions d;
  d.detail = r.detail;
  if (device.collector->steady_clock()) {  // the Engine's clock: same origin as its memory samples
    d.origin_ns = e.trace_origin_ns();  // the windows were given step by step (close_window)
  } else {
    say(r, "oomb run: warning: CUPTI refused the steady clock; the trace keeps every record (set-up and warm-up "
           "included) on CUPTI's clock");
    engine_clock = false;
  }
  traces::Metadata md;
  md.device = res.device_name + ", CUPTI device times";
  cupti::DecodeStats st;
  std::optional<traces::Trace> decoded;
  try {
    decoded = device.collector->trace(md, d, &st);
  } catch (const std::exception& ex) {  // the host trace is still good: keep it, say why
    res.cupti_failure = ex.what();
    say(r, fallback_message(res.cupti_failure));
    engine_clock = true;
  }
  // A CUPTI that started but recorded no kernel in the timed steps (a virtualised runtime, a
  // driver that refuses the activity kinds, every record dropped) would give a device trace with
  // no compute, which validate would judge: the host-timed trace instead, saying why.
  if (decoded && st.kernels == 0) {
    res.cupti_failure = "it started but recorded no kernel in the timed steps (" + std::to_string(st.records) +
                        " records decoded, " + std::to_string(st.dropped) + " dropped)";
    say(r, fallback_message(res.cupti_failure));
    decoded.reset();
    engine_clock = true;
  }
  if (decoded) {
    traces::Trace& dev = *decoded;
    int64_t reserved_device = 0, reserved_host = 0;  // cudaMalloc'd / pinned, as CUPTI saw them
    for (const auto& sample : dev.memory) {
      reserved_device = std::max(reserved_device, sample.device_bytes);
      reserved_host = std::max(reserved_host, sample.host_bytes);
    }
    dev.metadata.extra = {{"gpu", res.device_name},
                          {"gpu_name", res.cuda_device},
                          {"trace_timing", "cupti"},
                          {"cupti",
                           {{"records", st.records},
                            {"kernels", st.kernels},
                            {"memcpys", st.memcpys},
                            {"memsets", st.memsets},
                            {"memory", st.memory},
                            {"correlations", st.correlations},
                            {"untagged", st.untagged},
                            {"outside_steps", st.outside},
                            {"invalid", st.invalid},
                            {"ignored", st.ignored},
                            {"dropped", st.dropped},
                            {"steady_clock", device.collector->steady_clock()},
                            {"driver_api_records", device.collector->driver_records()},
                            {"reserved_device_bytes", reserved_device},
                            {"reserved_pinned_bytes", reserved_host},
                            {"activity_buffer_bytes", device.collector->buffer_bytes()},
                            {"activity_pool_bytes", device.collector->pool_bytes()},
                            {"activity_buffers_held_high_water", device.collector->buffers_held_high_water()},
                            {"activity_buffers_beyond_pool", device.collector->buffers_beyond_pool()}}}};
    if (device.collector->buffers_beyond_pool() > 0)
      say(r, "oomb run: note: CUPTI asked for " + std::to_string(device.collector->buffers_beyond_pool()) +
                 " activity buffers beyond the collector's pool of " + format_bytes(device.collector->pool_bytes()) +
                 " (at most " + std::to_string(device.collector->buffers_held_high_water()) +
                 " held at once): host memory past the cupti_activity_buffers row");
    traces::Trace t = e.device_timed_trace(std::move(dev), r.command);
    // Review 3, finding 3: NCCL's host calls only enqueue; its kernels' spans over the fastest timed
    // step are the collectives' device times (the data-parallel ones by their ops, the rest tensor
    // parallelism's), each rank's wait for the slowest included.
    if (res.world > 1 && engine_clock && !res.step_times_s.empty() && windows.size() == res.step_times_s.size()) {
      const size_t k = static_cast<size_t>(std::min_element(res.step_times_s.begin(), res.step_times_s.end()) -
                                           res.step_times_s.begin());
      const int64_t a = windows[k].first - e.trace_origin_ns(), b = windows[k].second - e.trace_origin_ns();
      double tp_s = 0, dp_s = 0;
      for (const traces::Event& ev : t.events) {
        if (ev.kind != traces::EventKind::collective || ev.start_ns < a || ev.start_ns >= b) continue;
        (Engine::data_parallel_op(ev.op) ? dp_s : tp_s) += static_cast<double>(ev.duration_ns()) * 1e-9;
      }
      Measured& m = res.measured;
      m.collectives_device_timed = true;
      m.tp_allreduce_s = m.tp_allreduce_transfer_s = tp_s;
      m.allreduce_s = m.allreduce_transfer_s = dp_s;
      m.tp_allreduce_wait_s = m.allreduce_wait_s = 0;
    }
    if (!engine_clock) {  // the Engine's step intervals are on another clock: one step, first to last
      std::erase_if(t.events, [](const traces::Event& ev) {
        return ev.kind == traces::EventKind::phase && ev.name == traces::kStepPhase;
      });
      t.summary = traces::summarize(t);
    }
    res.cupti = CuptiSummary{st.records, st.kernels, st.memcpys, st.memsets, st.untagged, st.outside, st.dropped};
    if (st.dropped > 0)
      say(r, "oomb run: warning: CUPTI dropped " + std::to_string(st.dropped) +
                 " activity records (its buffers were full): the trace misses work");
    if (!device.tagger->error().empty())
      say(r, "oomb run: warning: a CUPTI tag could not be popped (" + device.tagger->error() + "): later tags may be wrong");
    return t;
  }
  return std::nullopt;
}
#endif

}  // namespace oomb::runner::detail
