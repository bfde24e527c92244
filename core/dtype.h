#pragma once
// Element types, named once. The configuration's storage dtypes (weights, gradients, activations,
// KV pages, the loss tile) and the buffer table's tensors are `Dtype` values everywhere inside oomb;
// the names ("fp32", "bf16", ...) are written and read only at the edges: JSON (to_json/from_json
// below, so a Dtype in a Json is always its name) and the CLI's flags.
#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string_view>

namespace oomb {

// Declared in the order of their names: a container ordered by dtype (the planner's search keys)
// iterates as it did when dtypes were names, so plans stay byte-identical.
enum class Dtype : uint8_t {
  bf16,
  fp16,
  fp32,
  fp64,   // buffer-table tensors only (host-side sums)
  fp8,
  int32,  // buffer-table tensors only (indices, counts)
  uint8,  // buffer-table tensors only (masks, raw bytes)
};

const char* to_string(Dtype d);  // "fp32", "bf16", "fp16", "fp8", "int32", "uint8", "fp64"
// Bytes of one element: fp32 4, bf16/fp16 2, fp8 1, int32 4, uint8 1, fp64 8.
int64_t dtype_bytes(Dtype d);
// Any name above; nullopt for anything else.
std::optional<Dtype> find_dtype(std::string_view name);
// A dtype a configuration may store its weights, gradients, activations, pages or loss in: fp32,
// bf16, fp16 or fp8 (int32, uint8 and fp64 are the buffer table's tensors only).
bool is_storage_dtype(Dtype d);
// A storage dtype as a user writes it (fp32, bf16, fp16 or fp8); Error naming `where` (the flag or
// the key) and the valid names otherwise.
Dtype storage_dtype_from_string(std::string_view name, std::string_view where);

// Text: its name (messages, test output).
std::ostream& operator<<(std::ostream& os, Dtype d);

// JSON: a Dtype is written as its name and read from one (any name of to_string; an unknown one
// throws oomb::Error naming the value).
void to_json(nlohmann::json& j, Dtype d);
void from_json(const nlohmann::json& j, Dtype& d);

}  // namespace oomb
