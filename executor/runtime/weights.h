#pragma once
// Model parameters as named fp32 tensors with Hugging Face Qwen2/Llama names and layouts, stored
// in one flat array (so gradients, optimizer state and uploads are single buffers), plus
// safetensors reading and (atomic) writing.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "models/specs.h"

namespace oomb::executor {

struct ParamInfo {
  std::string name;             // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;   // HF layout: linear weights [out, in]
  int64_t offset = 0;           // in floats, into the flat array
  int64_t numel = 0;
  bool decay = false;           // AdamW weight decay applies (matrices, not norms or biases)
};

// Index of every tensor of one layer inside a ParamLayout (offsets in floats; -1 = absent).
struct LayerOffsets {
  int64_t input_norm = -1, q = -1, q_bias = -1, k = -1, k_bias = -1, v = -1, v_bias = -1, o = -1;
  int64_t q_norm = -1, k_norm = -1;  // Qwen3 (ModelSpec::qk_norm): RMSNorm weight [head_dim] per q / k head
  int64_t post_norm = -1, gate = -1, up = -1, down = -1;  // a dense MLP's (-1 in a MoE layer)
  // A mixture-of-experts layer (ModelSpec::moe_layer): the router [experts, hidden] (and with
  // moe.router_bias its bias [experts]) and expert 0's gate_proj [fe, hidden]; expert e's gate, up
  // [fe, hidden] and down [hidden, fe] follow one another from experts + e * ParamLayout::expert_stride(),
  // then (moe.expert_bias, gpt-oss) their biases [fe], [fe], [hidden] (ParamLayout::expert_bias()).
  // Every layer's experts come after every other tensor of the layout (from
  // ParamLayout::experts_begin()): the buffer table's expert_weights row.
  int64_t router = -1, router_bias = -1, experts = -1;
  int64_t sinks = -1;  // gpt-oss (ModelSpec::attention_sinks): one logit per q head, self_attn.sinks
  int64_t o_bias = -1;  // gpt-oss (ModelSpec::o_bias): self_attn.o_proj.bias [hidden]
  // A MoE layer's shared experts (moe.shared_experts x shared_ffn_hidden = fs columns, as one SwiGLU
  // MLP: the sum of several is one of their concatenated widths), used by every token and added to
  // the routed experts' combine: <moe module>.shared_expert.gate_proj / up_proj [fs, hidden] and
  // down_proj [hidden, fs]. In the `weights` row (trained as the dense tensors are).
  int64_t shared_gate = -1, shared_up = -1, shared_down = -1;
  // Sandwich norms (ModelSpec::sandwich_norms, Gemma's names): the attention output's RMSNorm
  // (post_attention_layernorm) and the MLP output's (post_feedforward_layernorm), each [hidden]; the
  // norm before the MLP (post_norm above) is then pre_feedforward_layernorm.
  int64_t attn_out_norm = -1, mlp_out_norm = -1;
};

// The projections a LoRA adapter may sit on, in step::lora_target_names() order (PEFT's names).
enum class LoraTarget : int { q = 0, k, v, o, gate, up, down };
inline constexpr int kLoraTargets = 7;

// One projection's adapter inside a LoRA layout: A [rank, in] and B [out, rank] (offsets in floats;
// a = -1: the projection has no adapter).
struct LoraSlot {
  int64_t a = -1, b = -1, in = 0, out = 0;
};

class ParamLayout {
 public:
  ParamLayout() = default;
  explicit ParamLayout(const models::ModelSpec& m);  // m.layers layers
  // LoRA adapters of m (Hugging Face PEFT's layout): per layer, per target in lora_target_names()
  // order, lora_A [rank, in] then lora_B [out, rank], named
  // "base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight" (mlp.*_proj for the MLP's);
  // weight decay on (PEFT trains them as the matrices they are). targets: PEFT module names.
  static ParamLayout lora(const models::ModelSpec& m, int64_t rank, const std::vector<std::string>& targets);
  bool is_lora() const { return lora_rank_ > 0; }
  int64_t lora_rank() const { return lora_rank_; }
  const LoraSlot& lora_slot(int64_t layer, LoraTarget t) const {
    return lora_[static_cast<size_t>(layer * kLoraTargets + static_cast<int>(t))];
  }

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo* find(const std::string& name) const;
  int64_t total() const { return total_; }
  int64_t embed() const { return embed_; }
  int64_t final_norm() const { return final_norm_; }
  int64_t lm_head() const { return lm_head_; }  // == embed() when tied
  // Floats of one routed expert (gate, up, down) and where the routed experts begin: the tensors
  // before experts_begin() are the `weights` row, the rest the `expert_weights` row (total() when
  // the model has none).
  int64_t expert_stride() const { return expert_stride_; }
  // Where an expert's gate bias begins inside its stride (its up and down biases follow; -1 without
  // biases): after the gate, up and down weights, 3 x fe x hidden.
  int64_t expert_bias() const { return expert_bias_; }
  int64_t experts_begin() const { return experts_begin_; }
  const LayerOffsets& layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
  int64_t layers() const { return static_cast<int64_t>(layers_.size()); }

 private:
  int64_t add(std::string name, std::vector<int64_t> shape, bool decay);
  std::vector<ParamInfo> params_;
  std::vector<LayerOffsets> layers_;
  int64_t total_ = 0, embed_ = 0, final_norm_ = 0, lm_head_ = 0, expert_bias_ = -1;
  int64_t expert_stride_ = 0, experts_begin_ = 0;
  int64_t lora_rank_ = 0;
  std::vector<LoraSlot> lora_;  // layers x kLoraTargets (LoRA layouts only)
};

// Parameters (or gradients: same shape) as one flat fp32 array.
struct ParamTensors {
  ParamLayout layout;
  std::vector<float> data;

  float* at(const std::string& name);
  const float* at(const std::string& name) const;
  const float* at(const ParamInfo& p) const { return data.data() + p.offset; }
  float* at(const ParamInfo& p) { return data.data() + p.offset; }
};
using Weights = ParamTensors;
using Gradients = ParamTensors;

ParamTensors zero_params(const models::ModelSpec& m);
ParamTensors zero_params(ParamLayout layout);
// Seeded-random init: matrices and biases N(0, std^2), norm weights 1 + N(0, (std * 2.5)^2) so that
// RMSNorm gradients are non-trivial. Deterministic across platforms (own RNG).
// threads: how many generate it (0: one per hardware thread, a piece of at least 1M elements each);
// the values do not depend on it.
Weights random_weights(const models::ModelSpec& m, uint64_t seed, float std = 0.02f, int threads = 0);

// Tensor parallelism: rank `rank`'s shard of `full` in `local` (the layout of
// step::tensor_parallel_shard of full's model). Each tensor is matched by name: one whose local
// shape is smaller in dim 0 (q/k/v, gate/up, their biases, embedding, LM head) takes the rank's
// block of rows, in dim 1 (o_proj, down_proj) its block of columns; equal shapes (norms) are
// copied whole. Throws on a tensor the two layouts do not share.
ParamTensors shard_params(const ParamTensors& full, ParamLayout local, int64_t rank);
// The inverse: local's blocks written into full at rank's place (the norms too when
// with_replicated), the rest of full untouched.
void unshard_params_into(const ParamTensors& local, int64_t rank, bool with_replicated, ParamTensors& full);

// Relative L2 error ||a - b|| / max(||b||, tiny) of one tensor.
double relative_l2(const float* a, const float* b, int64_t n);

// The largest relative_l2(a's tensor, b's) over the parameters, and that parameter's name (the
// first one on ties). a and b share b's layout.
struct WorstTensor {
  double rel_l2 = 0;
  std::string name;
};
WorstTensor worst_relative_l2(const ParamTensors& a, const ParamTensors& b);

// safetensors: 8-byte little-endian header length, JSON header {name: {dtype, shape,
// data_offsets}}, raw data. Reads F32, BF16 and F16 (converted to fp32); every tensor of the layout
// must be present with its exact shape. Tensors of layers the run leaves out (--layers) are skipped;
// any other tensor the layout lacks is an error (a checkpoint of another model). checkpoint_layers:
// the layers the checkpoint has (the model's own count before --layers). Errors name
// the file and the tensor. (-1: any layer beyond m.layers may be skipped.)
Weights read_safetensors(const std::string& path, const models::ModelSpec& m, int64_t checkpoint_layers = -1);

// A Hugging Face checkpoint: a .safetensors file, a model.safetensors.index.json (weight_map from
// tensor to shard file, shards inside its folder), or a folder holding either (model.safetensors first, as
// Hugging Face's loader). Errors
// name the tensor and the shard (or the index) at fault.
Weights read_checkpoint(const std::string& path, const models::ModelSpec& m, int64_t checkpoint_layers = -1);

// Writes F32 atomically (temp file + rename): a failure leaves no partial file.
void write_safetensors(const ParamTensors& t, const std::string& path);
// The bytes of all of t's tensors as one safetensors file in `dtype` (fp32 or bf16, written as the
// format's F32 / BF16), for a writer (FileSetWriter) that places it; t must outlive the function.
std::function<void(std::ostream&)> safetensors_contents(const ParamTensors& t, Dtype dtype = Dtype::fp32);
// One safetensors file read into `layout`'s tensors (F32, BF16, F16; finite values): each must be
// present with its exact shape; a tensor the layout lacks is an error naming it unless skip(name).
// what_for: what the file should be, for the messages (e.g. "a PEFT adapter of qwen2.5-0.5b").
ParamTensors read_safetensors_layout(const std::string& path, ParamLayout layout,
                                     const std::function<bool(const std::string&)>& skip, const std::string& what_for);

// Hugging Face's default shard size (transformers' max_shard_size "5GB").
constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;

struct CheckpointWrite {
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
  Dtype dtype = Dtype::fp32;  // fp32 or bf16 (rounded to nearest even), the file's F32 / BF16
};

// Writes the layout Hugging Face writes. path: a folder (created; files named model*) or a
// "<stem>.safetensors" file. At most max_shard_bytes of tensor data: one file (the folder's
// model.safetensors, or path itself); above it shards <stem>-00001-of-0000N.safetensors and
// <stem>.safetensors.index.json (weight_map, metadata.total_size), each written atomically, the
// index last. A tensor larger than the limit gets a shard of its own. What an earlier write left
// there in the other form (the single file, or the index) is removed. Returns the files written,
// the index (or single file) first.
// Where write_checkpoint(path) writes: a folder (folder true) or FILE.safetensors, and the files
// that name the checkpoint there (the single file and the index).
struct CheckpointPaths {
  bool folder = false;
  std::string dir, stem;
  std::vector<std::string> files;  // the single file, then the index
};
CheckpointPaths checkpoint_paths(const std::string& path);
// Error naming `flag` when write_checkpoint(path) could not write there (called before any work):
// a folder (existing, even empty, or to be created) or FILE.safetensors, in a writable directory.
void check_checkpoint_writable(const std::string& path, const std::string& flag);
// The files read_checkpoint(path) would read: the single file, or the index and the shards it names
// (those that stay inside the folder); empty when path names nothing readable.
std::vector<std::string> checkpoint_input_files(const std::string& path);

std::vector<std::string> write_checkpoint(const ParamTensors& t, const std::string& path, const CheckpointWrite& how = {});

}  // namespace oomb::executor
