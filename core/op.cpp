#include "core/op.h"

#include <ostream>

#include "core/error.h"

namespace oomb {

namespace {
constexpr const char* kNames[kOpCount] = {
    "",          "embedding",       "embedding_bwd",   "gradient_allreduce", "gradient_reduce_scatter",
    "layer_bwd", "layer_fwd",       "layer_recompute", "lm_head",            "optimizer_grads",
    "optimizer_params", "optimizer_step", "stage1",    "stage2",             "step",
    "untagged",  "weight_all_gather"};
}  // namespace

const char* to_string(Op o) {
  const int i = static_cast<int>(o);
  return i >= 0 && i < kOpCount ? kNames[i] : "?";
}

std::optional<Op> find_op(std::string_view name) {
  for (int i = 0; i < kOpCount; ++i)
    if (name == kNames[i]) return static_cast<Op>(i);
  return std::nullopt;
}

Op op_from_string(std::string_view name, const std::string& where) {
  if (const std::optional<Op> o = find_op(name)) return *o;
  std::string valid;
  for (int i = 1; i < kOpCount; ++i) valid += std::string(i == 1 ? "" : " ") + kNames[i];
  throw Error(where, "", "unknown op \"" + std::string(name) + "\"", "expected one of: " + valid);
}

Op stage_op(int stage) { return stage == 1 ? Op::stage1 : stage == 2 ? Op::stage2 : Op::none; }

std::ostream& operator<<(std::ostream& os, Op o) { return os << to_string(o); }

}  // namespace oomb
