#pragma once
// Micro-benchmarks of a Backend, written once against the Backend interface: GEMM rates over the
// shapes a model's layers and LM head use, paged attention forward/backward, the memory-bound ops
// (RMSNorm, SwiGLU, add), streaming bandwidth, async copies per direction and both at once, and
// the per-op overhead. `device_profile` turns the measurement into a device profile (oomb.gpu/1)
// whose efficiencies are the measured rates over the backend's own compute peak (the best GEMM
// rate), so that the simulator's cost model predicts runs on that backend (`oomb calibrate`).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json.h"
#include "executor/runtime/backend.h"
#include "models/specs.h"

namespace oomb::executor {

// Repeated timings of one measurement: a rate (flops/s, bytes/s) or a time (s).
struct Stat {
  double median = 0, min = 0, max = 0;
  int samples = 0;
  double spread() const { return median > 0 ? (max - min) / median : 0; }  // (max - min) / median
  Json to_json() const;
};

struct GemmShape {
  std::string name;  // "qwen2.5-0.5b mlp_up", ...; a routed expert's: "qwen3-30b-a3b expert_gate_up"
  int64_t rows = 0, in = 0, out = 0;
  // Share of the model's GEMM flops in a step (per model: the dense shapes sum to 1, the expert
  // shapes, each at the rows one expert receives, to 1 among themselves)
  double weight = 0;
  Stat fwd, bwd;      // flops/s (fwd 2 r i o, bwd 4 r i o)
};

struct AttentionPoint {
  std::string model;
  int64_t rows = 0, prefix_tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  Stat fwd, bwd;  // flops/s counted as the cost model counts them (fwd 4 pairs d h, bwd 2.5 x that)
};

struct ModelRates {
  std::string model;
  double gemm_flops_per_s = 0;       // step mix: fill + recompute (fwd) and backward (fwd + bwd) over the shapes
  double attention_flops_per_s = 0;  // step mix: 3 forward passes and one backward per layer
  double attention_fwd_flops_per_s = 0, attention_bwd_flops_per_s = 0;  // each direction alone (medians)
  double gemm_spread = 0, attention_spread = 0;
  // A mixture of experts: the same step mix over the routed experts' shapes at their per-expert
  // rows (chunk x top-k / experts), 0 for a dense model.
  double expert_gemm_flops_per_s = 0;
};

struct MicrobenchResult {
  std::string backend;
  std::string host;  // description of the machine (CPU model, cores)
  std::string date;  // ISO-8601 UTC
  int threads = 0;   // cpu backend: the compute threads it ran at (cpu::threads()); 0 for other backends
  std::vector<GemmShape> gemms;
  std::vector<AttentionPoint> attention;
  std::vector<ModelRates> models;
  double peak_flops_per_s = 0;  // best median GEMM or attention rate (the backend's compute peak)
  Stat stream_bytes_per_s;      // large copy, read + write bytes
  Stat rmsnorm_bytes_per_s, swiglu_bytes_per_s, add_bytes_per_s;
  Stat h2d_bytes_per_s, d2h_bytes_per_s;  // copy_async, one direction alone
  Stat duplex_h2d_bytes_per_s, duplex_d2h_bytes_per_s;  // both directions at once
  Stat op_overhead_s;  // a 1-element op, call to return
  double seconds = 0;  // wall time of the benchmarks
  Json to_json() const;
};

struct MicrobenchOptions {
  std::vector<models::ModelSpec> models;  // shapes to benchmark (GEMMs, attention)
  int64_t chunk_tokens = 1024;            // rows of the layer GEMMs and attention queries
  double seconds_per_point = 0.02;        // timing budget of each repetition
  int repetitions = 5;
  std::function<void(const std::string&)> progress;  // one line per measurement
  // Waits until the backend finished what was issued (asynchronous backends: the CUDA backend's
  // synchronize()); called after each timed repetition so that a repetition's time is its work's.
  std::function<void()> sync;
};

MicrobenchResult run_microbench(Backend& backend, const MicrobenchOptions& options);

// The device profile (kind "cpu" for the CPU backend): bf16_flops_per_s = the measured compute
// peak; efficiencies = rate / peak per op class (gemm and attention for `model_for_efficiency`, or
// the mean over the benchmarked models when empty); hbm = streaming bandwidth; h2d / d2h =
// copy_async rates; the full measurement with spreads in a "calibration" object the loader ignores.
Json device_profile(const MicrobenchResult& r, const std::string& id, int64_t capacity_bytes,
                    const std::string& model_for_efficiency = {});

// "Intel(R) Xeon(R) ..., 2 cores" from /proc/cpuinfo (or "unknown CPU").
std::string host_description();
// MemTotal of /proc/meminfo in bytes (0 when unknown).
int64_t host_ram_bytes();

}  // namespace oomb::executor
