#pragma once
// The passes and collectives of one training step, named once: what a trace's events belong to
// (traces::Event::op, JSON key "op"), the simulator's schedule, the executor's passes and the tags
// its device work carries, and what validation and calibration compare pass by pass. Inside oomb an
// op is an `Op`; its name is written and read only at the JSON edge (to_string / op_from_string).
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

namespace oomb {

// Declared in the order of their names ("" first): containers ordered by op (validation's per-pass
// rows, compare's) iterate as they did when ops were names.
enum class Op : uint8_t {
  none,                     // "": not given
  embedding,                // a chunk's embedding (stage 1 fill, stage 2 recompute)
  embedding_bwd,            // the embedding's backward
  gradient_allreduce,       // data parallelism: the gradients' all-reduce
  gradient_reduce_scatter,  // ZeRO-1: the gradients' reduce-scatter
  layer_bwd,                // a layer's backward (step::PassKind::backward)
  layer_fwd,                // a layer's forward in stage 1 (step::PassKind::fill)
  layer_recompute,          // a layer's recompute in stage 2 (step::PassKind::recompute)
  lm_head,                  // a chunk's LM head and loss
  optimizer_grads,          // the host optimizer: the gradients' copy out
  optimizer_params,         // the host optimizer: the weights' copy back
  optimizer_step,           // the update (and the executor's round trip and zeroing around it)
  stage1,                   // a stage's passes merged (chunk and step detail)
  stage2,
  step,                     // a step phase (its span)
  untagged,                 // CUPTI: device work that carried no tag
  weight_all_gather,        // ZeRO-1: the weights' all-gather
};
inline constexpr int kOpCount = static_cast<int>(Op::weight_all_gather) + 1;

const char* to_string(Op o);  // "" for none
std::optional<Op> find_op(std::string_view name);
// An op as a trace names it ("" -> none); Error naming `where` and the valid names otherwise.
Op op_from_string(std::string_view name, const std::string& where);
// The stage's merged pass: stage1 or stage2 (none for another stage).
Op stage_op(int stage);

std::ostream& operator<<(std::ostream& os, Op o);

}  // namespace oomb
