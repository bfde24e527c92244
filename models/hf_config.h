#pragma once
// Hugging Face transformers `config.json` as a model: what a user has in a downloaded model folder.
//
// Read by `architectures` (or `model_type`): Qwen2ForCausalLM, LlamaForCausalLM, MistralForCausalLM
// and Qwen3ForCausalLM. Everything else (mixture of experts, multimodal, latent attention,
// sliding-window attention in use, quantised checkpoints) is refused by name: the architecture
// and the keys that make it unsupported.
#include <optional>
#include <string>

#include "core/json.h"
#include "models/specs.h"

namespace oomb::models {

// A config.json document (not oomb's own schema): it has "architectures" or "model_type" and no
// "schema".
bool is_hf_config(const Json& j);

// The ModelSpec of a Hugging Face config. where: the file, for messages and `source`. The id is
// the catalog id whose shapes it equals (so `--model Qwen2.5-7B/config.json` plans exactly like
// `--model qwen2.5-7b`), else `fallback_id` (the folder's name, normalised).
ModelSpec model_from_hf_config(const Json& j, const std::string& where, const std::string& fallback_id);

// A path to a config.json, or to a folder that holds one: the spec. A file that is not in the
// Hugging Face form is read as an oomb.model/1 document (read once: the path may be a pipe);
// nullopt only when no such file exists (the caller's usual error then names it).
std::optional<ModelSpec> load_hf_model(const std::string& path);

// The id a Hugging Face config falls back to when it matches no catalog model: its folder's name,
// lower-cased; empty (the family's name) for a file with no folder of its own (a pipe).
std::string hf_fallback_id(const std::string& file);

// The config.json a path names: `path` itself, or `path`/config.json for a folder.
std::string hf_config_path(const std::string& path);

}  // namespace oomb::models
