#pragma once
// Hardware and model specifications: the inputs to every prediction.
//
// Specs are data (JSON in models/llm, models/gpu, models/host, embedded into the binary at build
// time) and can also be given as a path to a user's own JSON file of the same schema. Loading
// validates everything and throws oomb::Error naming the file, the key and what would be valid.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"
#include "core/units.h"
#include "models/layer_attention.h"
#include "models/rope.h"

namespace oomb::models {

const char* to_string(LayerAttention a);  // "global", "sliding", "chunked"

// How a mixture-of-experts layer weighs the experts a token is routed to, from the router's logits.
//   softmax_topk: softmax over the k largest logits (Mixtral, gpt-oss; Qwen3-MoE with
//                 norm_topk_prob true, which renormalises the full softmax over the top k: the same)
//   softmax_all:  softmax over every expert, the k largest kept unnormalised (norm_topk_prob false)
//   sigmoid_topk: the sigmoid of each of the k largest logits (Llama 4)
enum class Routing : uint8_t { softmax_topk, softmax_all, sigmoid_topk };
const char* to_string(Routing r);  // "softmax_topk", "softmax_all", "sigmoid_topk"

// How weights are stored in the checkpoint, where a group differs from the model's dtype.
//   native: the checkpoint's dtype (bf16 for every catalog model)
//   mxfp4:  OCP microscaling FP4 (gpt-oss experts): 4-bit E2M1 values in blocks of 32 sharing one
//           8-bit E8M0 scale, 17 bytes per 32 weights
enum class WeightFormat : uint8_t { native, mxfp4 };
const char* to_string(WeightFormat f);  // "native", "mxfp4"

// The MLP's gated unit. swiglu: silu(gate) * up (Qwen, Llama, Mistral, Mixtral); geglu_tanh:
// gelu_tanh(gate) * up (Gemma 3's gelu_pytorch_tanh); gpt_oss: gpt-oss's clamped unit (gate clamped
// above at swiglu_limit, up to +-swiglu_limit, gate * sigmoid(1.702 gate) * (up + 1)).
enum class Mlp : uint8_t { swiglu, geglu_tanh, gpt_oss };
const char* to_string(Mlp m);  // "swiglu", "geglu_tanh", "gpt_oss"

// Mixture of experts (absent: a dense MLP of ffn_hidden in every layer). A MoE layer has a router
// (hidden x experts), `experts` routed MLPs of expert_ffn_hidden of which each token uses
// experts_per_token, and `shared_experts` MLPs of shared_ffn_hidden that every token uses.
struct MoeSpec {
  int64_t experts = 0;            // routed experts per MoE layer; 0: no mixture of experts
  int64_t experts_per_token = 0;  // top-k
  int64_t expert_ffn_hidden = 0;  // one routed expert's MLP width
  int64_t shared_experts = 0;     // always-used experts (Llama 4: 1)
  int64_t shared_ffn_hidden = 0;  // one shared expert's MLP width
  std::vector<int64_t> dense_layers;  // layers whose MLP is dense (ffn_hidden) instead, ascending
  Routing routing = Routing::softmax_topk;
  bool router_bias = false;  // gpt-oss
  bool expert_bias = false;  // gpt-oss: a bias on each expert's gate, up and down projections
  WeightFormat expert_weights = WeightFormat::native;  // gpt-oss: mxfp4
  bool present() const { return experts > 0; }
  // The shared experts' summed width: they run as one MLP of it over every token.
  int64_t shared_width() const { return shared_experts * shared_ffn_hidden; }
};

// Bytes of `params` weights stored in `f`, given the model's element size for native weights.
int64_t weight_bytes(WeightFormat f, int64_t params, int64_t native_bytes);

// Schema "oomb.model/1": a decoder-only transformer. The dense families (Qwen2/Qwen3/Llama/Mistral)
// use only the first block of fields; mixture-of-experts and per-layer attention kinds add the
// rest (docs: models/README.md "Layer kinds and experts"). Absent keys are the dense defaults, so a
// dense model's file and plans are byte-identical to the older schema's.
struct ModelSpec {
  std::string id;
  std::string family;  // "qwen2", "qwen3", "llama", "mistral", "tiny"
  std::string source;  // where the numbers come from (the published config)
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  bool qk_norm = false;  // Qwen3: RMSNorm over each q and k head (weight [head_dim]) before RoPE
  double rope_theta = 10000.0;
  double norm_eps = 1e-6;
  int64_t max_position = 0;
  Json rope_scaling;  // optional, kept as published (null when absent)

  // Layer kinds and experts (all absent in the dense families).
  std::vector<LayerAttention> layer_attention;  // one per layer; empty: global in every layer
  int64_t sliding_window = 0;   // tokens a sliding layer attends, itself included
  int64_t attention_chunk = 0;  // a chunked layer's block of tokens
  std::vector<int64_t> nope_layers;  // layers without RoPE (Llama 4's global layers), ascending
  bool attention_sinks = false;  // one learned logit per q head joins each softmax (gpt-oss)
  bool o_bias = false;           // an o_proj bias (gpt-oss's attention_bias: on q, k, v and o)
  bool sandwich_norms = false;   // RMSNorms after attention and after the MLP too (Gemma 3): 4 per layer
  Mlp mlp = Mlp::swiglu;
  double swiglu_limit = 0;  // Mlp::gpt_oss's clamp (7.0)
  MoeSpec moe;

  // Derived, never stored.
  // The MLP activation's clamp: swiglu_limit for Mlp::gpt_oss, 0 (plain SwiGLU) otherwise.
  double mlp_clamp() const { return mlp == Mlp::gpt_oss ? swiglu_limit : 0.0; }
  int64_t q_dim() const { return q_heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  LayerAttention attention_of(int64_t layer) const {
    return layer_attention.empty() ? LayerAttention::global : layer_attention[static_cast<size_t>(layer)];
  }
  int64_t layers_of(LayerAttention a) const;  // layers of that kind
  bool uniform_layers() const;   // every layer global with one MLP: the dense families' shape
  bool moe_layer(int64_t layer) const;  // the MLP of `layer` is a mixture of experts
  // Parameters of one layer: attention (q, k, v, o and their biases, sinks, q/k norms), its norms,
  // and its MLP (dense, or router + every routed expert + shared experts).
  int64_t layer_params(int64_t layer) const;
  // The one layer's parameters of a model whose layers are all alike (asserts it: a mixture with
  // dense layers has no single figure; use layer_params).
  int64_t params_per_layer() const;
  int64_t embedding_params() const { return checked_mul(vocab, hidden, "embedding parameters"); }
  int64_t lm_head_params() const { return tied_embeddings ? 0 : embedding_params(); }
  int64_t param_count() const;
  // Parameters one token's forward uses: all but the routed experts it is not sent to (the
  // embedding table and the LM head included; OpenAI's "active" figure for gpt-oss leaves the
  // embedding table out, Qwen's and Mistral's keep it). Equal to param_count() without experts.
  int64_t active_param_count() const;
  // One routed expert's parameters: gate, up and down projections (and their biases).
  int64_t expert_params() const;
  // Parameters of the routed experts (all of them, every MoE layer); 0 without experts.
  int64_t routed_expert_params() const;
  // K and V of one token over all layers: 2 * layers * kv_heads * head_dim * dtype_bytes.
  int64_t kv_bytes_per_token(int64_t dtype_bytes) const;
  // The same over the global layers only: the KV that grows with the context in every layer's
  // pool. Sliding and chunked layers attend at most window_tokens() tokens each (bounded_kv_bytes);
  // a chunk-recurrent step keeps their window before each chunk boundary (step::local_reach).
  int64_t growing_kv_bytes_per_token(int64_t dtype_bytes) const;
  // Tokens a layer of kind `a` attends at most: sliding_window, attention_chunk, 0 for global (all).
  int64_t window_tokens(LayerAttention a) const;
  // KV of the sliding and chunked layers at their window (one sequence, dtype_bytes per element).
  int64_t bounded_kv_bytes(int64_t dtype_bytes) const;
  // The positions the model's RoPE is made for: max_position, or where a yarn or linear scaling
  // reaches further, its factor times the length it extends (original_max_position_embeddings, else
  // max_position): Qwen3 with YaRN factor 4 from 32768 reaches 131072 past its max_position 40960.
  int64_t rope_reach() const;
  // "global", or the kinds with their counts and windows: "12 sliding (128) + 12 global".
  std::string layer_kinds_text() const;
  // "32 x top-4 (mxfp4)", "16 x top-1 + 1 shared", "-" without experts.
  std::string experts_text() const;

  Json to_json() const;
};

// Efficiency of the hardware per op class: achieved / peak. Calibration fits these.
struct Efficiency {
  double gemm = 0.7;          // large bf16 GEMMs vs the dense tensor-core peak
  // A mixture of experts' routed-expert GEMMs (T x top-k / experts rows each: a few hundred, far
  // smaller than a dense layer's) vs the same peak. Optional in JSON: equal to `gemm` when absent
  // (datasheet profiles, calibrations without an expert model); `oomb calibrate` measures it on the
  // expert shapes of the MoE models it benchmarks.
  double expert_gemm = 0.7;
  double attention = 0.5;     // flash attention forward vs the same peak
  // Flash attention backward (its flops counted as 2.5x the forward's) vs the same peak. Optional
  // in JSON: equal to `attention` when absent (datasheet profiles); calibrated profiles fit it
  // separately because kernels rarely run both directions at one rate (the CPU's backward is ~2x).
  double attention_backward = 0.5;
  double memory_bound = 0.8;  // elementwise / norms / softmax vs HBM bandwidth
  double copy = 1.0;          // achieved share of the h2d/d2h link figures
};

// Schema "oomb.gpu/1". kind "gpu" or "cpu" (calibrated CPU profiles use the same schema).
struct GpuSpec {
  std::string id;
  std::string name;
  std::string kind = "gpu";
  std::string source;
  std::map<std::string, std::string> sources;  // per-key provenance
  int64_t hbm_capacity_bytes = 0;
  double hbm_bytes_per_s = 0;
  double bf16_flops_per_s = 0;  // dense (no sparsity)
  double fp32_flops_per_s = 0;  // dense, non-tensor-core
  double h2d_bytes_per_s = 0;   // realistic pinned-memory rate
  double d2h_bytes_per_s = 0;
  double duplex_factor = 1.0;   // per-direction share kept when both directions run (0..1]
  int64_t copy_engines = 2;
  int64_t sm_count = 0;
  int64_t reserved_bytes = 0;   // CUDA context + library workspaces, not available to the run
  double interconnect_bytes_per_s = 0;  // GPU-GPU (NVLink) per direction, for tensor parallelism
  // One ring all-reduce over N ranks costs collective_latency_s + 2 (N - 1) x collective_step_latency_s
  // beyond its bytes (docs/model.md "Communication"): a launch's fixed cost and each ring step's
  // hand-off. 0 when absent (older profiles: bytes only).
  double collective_latency_s = 0;
  double collective_step_latency_s = 0;
  // Measured all-reduces (oomb calibrate under mpirun): the time of one all-reduce of `bytes` bytes
  // per rank over `allreduce_curve_ranks` ranks on one node, ascending in bytes, of fp32 data
  // (seconds) and of bf16 data as a run sums it (bf16_seconds: through the communicator's fp32
  // staging where it stages; 0 = not measured). Where it applies (that rank count, one node) the
  // simulator prices a call by interpolating it: a CPU's all-reduce is far from one latency + one
  // rate (a message in cache moves several times faster than one in DRAM). Empty for datasheet
  // profiles.
  struct AllReducePoint {
    int64_t bytes = 0;
    double seconds = 0;
    double bf16_seconds = 0;
    // An all-gather of `bytes` per rank (every rank's block; ZeRO-1's weights), 0 = not measured.
    double all_gather_seconds = 0;
  };
  std::vector<AllReducePoint> allreduce_curve;
  int64_t allreduce_curve_ranks = 0;
  double launch_overhead_s = 5e-6;
  std::string default_host;
  // The names the CUDA runtime reports for this GPU (cudaGetDeviceProperties: "NVIDIA H200"):
  // `oomb validate` judges a CUPTI trace's times against this profile only when the device that ran
  // has one of them. Empty: unknown (a profile that names none is not checked).
  std::vector<std::string> cuda_device_names;
  // NCCL channels a communicator of this GPU's nodes connects (its device buffers: the table's
  // communicator_buffers row, step/cuda_scratch.h). 0: not stated, kDefaultNcclChannels.
  int64_t nccl_channels = 0;
  Efficiency efficiency;
  std::string calibrated_from;  // non-empty for calibrated or projected profiles
  int64_t cpu_threads = 0;      // kind cpu, calibrated: compute threads it was measured at (0 = unknown)
  Json to_json() const;
};

// Schema "oomb.host/1".
struct HostSpec {
  std::string id;
  std::string name;
  std::string source;
  std::map<std::string, std::string> sources;  // per-key provenance (optional)
  int64_t ram_bytes = 0;
  int64_t pinnable_bytes = 0;   // how much the job may pin (page-locked) for offloaded pages
  double mem_bytes_per_s = 0;   // host DRAM bandwidth
  int64_t nvme_bytes = 0;       // optional third tier (0 = none)
  double nvme_bytes_per_s = 0;
  // The node's network to other nodes (several-node plans, --nodes): per GPU and direction (each
  // GPU's share of the node's NICs) and the latency of one ring step across it. 0 = no network.
  double network_bytes_per_s = 0;
  double network_step_latency_s = 0;
  Json to_json() const;
};

// The model's RoPE as the executor computes it: rope_theta and, for rope_scaling {"rope_type":
// "llama3", ...}, its four parameters. Any other rope_scaling (linear and yarn, which a spec may
// hold and a plan prices like any RoPE; dynamic, longrope, ...) throws Error naming the key, the
// type and what is supported: a scaling is implemented or refused, never ignored. key: the name the messages
// give the scaling (a transformers v5 config's is rope_parameters).
Rope rope_of(const ModelSpec& m, const std::string& where = "model", const std::string& key = "rope_scaling");
// The type of m's rope_scaling, its keys validated: "default" (none), "llama3", "linear" or "yarn"
// (the last two are planned, not run: rope_of refuses them). Any other type throws naming it.
std::string rope_scaling_type(const ModelSpec& m, const std::string& where = "model",
                              const std::string& key = "rope_scaling");

// Parse from JSON (where = file path or "catalog:<id>" for messages).
ModelSpec model_from_json(const Json& j, const std::string& where);
GpuSpec gpu_from_json(const Json& j, const std::string& where);
HostSpec host_from_json(const Json& j, const std::string& where);

// Loads a catalog id ("qwen2.5-7b"; also as typed: "Qwen2.5-7B", "H200", an entry's aliases) or a
// path to a JSON file (contains '/' or ends in ".json"). load_model also takes a Hugging Face
// config.json or a folder holding one (models/hf_config.h). Unknown ids throw Error with the
// closest ids ("did you mean") and the known ones.
ModelSpec load_model(const std::string& id_or_path);
GpuSpec load_gpu(const std::string& id_or_path);
HostSpec load_host(const std::string& id_or_path);

// The embedded catalog.
std::vector<std::string> model_ids();
std::vector<std::string> gpu_ids();
std::vector<std::string> host_ids();


}  // namespace oomb::models
