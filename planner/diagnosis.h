#pragma once
// Diagnosis of a target that does not fit: which limit fails by how much, and the cheapest
// concrete changes that make it fit, each re-planned so that its predicted effect is real.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "planner/search.h"

namespace oomb::planner {

struct Suggestion {
  std::string change;  // "bf16 KV gradients", "host dgx-h200", ...
  std::string flags;   // the command-line change, e.g. "--kv-grad-dtype bf16"
  std::string model_id, gpu_id, host_id;
  Candidate result;    // the best plan with the change (it fits)
  Json to_json() const;
};

struct Diagnosis {
  std::string target;              // "dense attention (exact gradients)", "sparse attention", "any attention"
  // The closest configuration per class: offloading KV pages to the host (the method's normal
  // mode) and keeping all layers on the GPU. The binding constraint is the offloading one's when
  // offloading was possible: that is the limit to lift.
  struct Failure {
    std::string label;               // "with offload (2 resident layers, chunk 512)"
    simulator::Binding binding = simulator::Binding::device_memory;
    std::vector<std::string> violations;
    Candidate closest;
  };
  std::vector<Failure> failures;
  std::optional<simulator::Binding> binding;  // the first failure's (none: nothing was tried)
  std::vector<std::string> violations;  // of every failure, prefixed by its label
  std::vector<Suggestion> suggestions;  // cheapest first: settings, context, then hardware
  Json to_json() const;
};

// `failed` is the search that did not reach the target (nothing fit, or only a sparse fallback).
Diagnosis diagnose(const Request& r, int64_t context_tokens, const SearchResult& failed);

}  // namespace oomb::planner
