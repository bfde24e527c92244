#pragma once
// LoRA adapters as Hugging Face PEFT stores them: a folder with adapter_config.json (peft_type LORA,
// r, lora_alpha, target_modules, bias "none", base_model_name_or_path) and adapter_model.safetensors
// (base_model.model.model.layers.N.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r]).
// The tensors' layout is ParamLayout::lora (weights.h); the scale is lora_alpha / r (PEFT without
// rsLoRA). What oomb does not run is refused by key: rsLoRA, DoRA, biases, modules_to_save, a subset
// of layers, fan_in_fan_out, target_modules outside the seven projections.
#include <cstdint>
#include <string>
#include <vector>

#include "executor/runtime/weights.h"
#include "models/specs.h"
#include "step/config.h"

namespace oomb::executor {

struct AdapterConfig {
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> targets;  // PEFT module names, in lora_target_names() order
  std::string base_model;            // base_model_name_or_path
  // The adapter_config.json it was read from (null when made here): write_adapter keeps its keys,
  // setting only those oomb determines.
  Json file;
};

// The adapter a run of config c (c.lora_rank > 0) trains, for the base model `base_model`.
AdapterConfig adapter_config(const step::Config& c, const std::string& base_model);
// The layout of c's adapters on model m (its layers as run).
ParamLayout adapter_layout(const models::ModelSpec& m, const step::Config& c);

// PEFT's initialisation (init_lora_weights true): A kaiming-uniform with a = sqrt(5), i.e.
// U(-1/sqrt(in), 1/sqrt(in)), and B zero, so that the adapted model starts as the base. b_std > 0
// draws B from N(0, b_std^2) instead (the first step's A gradients are then not zero: for checks).
// Seeded and the same on every platform.
ParamTensors init_adapters(const models::ModelSpec& m, const step::Config& c, uint64_t seed, float b_std = 0);

// adapter_config.json of the PEFT folder `dir` (errors name the file and the key).
AdapterConfig read_adapter_config(const std::string& dir);
// The adapter a run that started from `loaded` (read_adapter_config) saves: the loaded file's keys and
// base model (where it names one), the run's rank, alpha and targets.
AdapterConfig continued_adapter_config(const AdapterConfig& loaded, const step::Config& c,
                                       const std::string& run_base);
// A warning when the adapter names a base model other than the run's (empty when they agree or the
// adapter names none): the names compared are the last path component, case-insensitive
// ("Qwen/Qwen2.5-0.5B" is the catalog's qwen2.5-0.5b and a folder .../Qwen2.5-0.5B).
std::string adapter_base_warning(const AdapterConfig& a, const std::string& dir, const std::string& run_base);
// The adapter in `dir` for a run of c on m: its config must agree with c's rank, alpha and targets
// (an error names the key and the flag to pass), and adapter_model.safetensors must hold every
// tensor of adapter_layout(m, c) with its shape and no other (tensors of layers that --layers
// leaves out are skipped when the checkpoint has them: checkpoint_layers, -1 any).
ParamTensors read_adapter(const std::string& dir, const models::ModelSpec& m, const step::Config& c,
                          int64_t checkpoint_layers = -1);
// Writes both files into `dir` (created), aside first and switched in together: a failure or an
// interrupt leaves the earlier adapter there whole. Returns the files written.
std::vector<std::string> write_adapter(const ParamTensors& adapters, const std::string& dir, const AdapterConfig& cfg);
// Error naming `flag` when write_adapter(dir) could not write there (called before any work).
void check_adapter_writable(const std::string& dir, const std::string& flag);

}  // namespace oomb::executor
