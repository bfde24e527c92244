#pragma once
// Planning requests beyond the one plan: the baselines a reader compares it with (standard
// training at the same context) and the multi-GPU comparison of a node (oomb on one GPU, oomb
// replicas and tensor parallelism, context parallelism on paper). `oomb plan` prints them.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "planner/parallel.h"
#include "planner/search.h"

namespace oomb::planner {

// Standard training at the same context, the two baselines a reader trusts: the best standard
// configuration (planned: fused chunked loss, checkpointing searched) and the published one
// (full-sequence unfused logits, checkpointing on).
struct Baseline {
  std::string label;
  std::optional<Candidate> result;  // the plan, or the closest miss
  bool fits = false;
};
std::vector<Baseline> baselines(const Request& r, int64_t context);

// "--gpus N" on `oomb plan` is a node of N GPUs: the oomb plan uses the largest tensor-parallel
// degree that divides N and the model's heads (the rest are data-parallel replicas); the
// comparison uses all N. `model` is loaded only when N is a node size (2, 4 or 8).
struct NodeGpus {
  int64_t gpus = 1, tp = 1;
  std::string note;  // why tp < gpus
};
NodeGpus node_gpus(int64_t gpus, const std::string& model);

// oomb next to context parallelism on the node's GPUs: per GPU memory, step, tokens/s, GPU-hours.
struct Comparison {
  std::vector<ParallelPlan> rows;
  std::vector<std::string> notes;
  Json to_json() const {
    Json j = {{"rows", Json::array()}, {"notes", notes}};
    for (const auto& r : rows) j["rows"].push_back(r.to_json());
    return j;
  }
};
Comparison compare_multi_gpu(const Request& r, const NodeGpus& node, const std::optional<Candidate>& chosen,
                             int64_t context);

}  // namespace oomb::planner
