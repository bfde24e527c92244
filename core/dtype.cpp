#include "core/dtype.h"

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "core/error.h"

namespace oomb {

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::fp32: return "fp32";
    case Dtype::bf16: return "bf16";
    case Dtype::fp16: return "fp16";
    case Dtype::fp8: return "fp8";
    case Dtype::int32: return "int32";
    case Dtype::uint8: return "uint8";
    case Dtype::fp64: return "fp64";
  }
  return "?";
}

int64_t dtype_bytes(Dtype d) {
  switch (d) {
    case Dtype::fp32: return 4;
    case Dtype::bf16: return 2;
    case Dtype::fp16: return 2;
    case Dtype::fp8: return 1;
    case Dtype::int32: return 4;
    case Dtype::uint8: return 1;
    case Dtype::fp64: return 8;
  }
  return 0;
}

std::optional<Dtype> find_dtype(std::string_view name) {
  for (Dtype d : {Dtype::fp32, Dtype::bf16, Dtype::fp16, Dtype::fp8, Dtype::int32, Dtype::uint8, Dtype::fp64})
    if (name == to_string(d)) return d;
  return std::nullopt;
}

bool is_storage_dtype(Dtype d) {
  return d == Dtype::fp32 || d == Dtype::bf16 || d == Dtype::fp16 || d == Dtype::fp8;
}

Dtype storage_dtype_from_string(std::string_view name, std::string_view where) {
  const std::optional<Dtype> d = find_dtype(name);
  if (!d || !is_storage_dtype(*d))
    throw Error(std::string(where), std::string(name), "unknown dtype", "one of fp32, bf16, fp16, fp8");
  return *d;
}

std::ostream& operator<<(std::ostream& os, Dtype d) { return os << to_string(d); }

void to_json(nlohmann::json& j, Dtype d) { j = to_string(d); }

void from_json(const nlohmann::json& j, Dtype& d) {
  const std::string name = j.is_string() ? j.get<std::string>() : j.dump();
  const std::optional<Dtype> found = find_dtype(name);
  if (!found) throw Error("dtype", name, "unknown dtype", "one of fp32, bf16, fp16, fp8, int32, uint8, fp64");
  d = *found;
}

}  // namespace oomb
