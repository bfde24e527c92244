#pragma once
// Shared set-up for the simulator tests: a scenario over catalog specs, with the GPU's usual host.
#include <cstdint>
#include <string>

#include "models/specs.h"
#include "simulator/simulator.h"

namespace oomb::simulator::testing {

inline Scenario scenario(const std::string& model, const std::string& gpu, int64_t context) {
  Scenario s;
  s.model = models::load_model(model);
  s.gpu = models::load_gpu(gpu);
  s.host = models::load_host(s.gpu.default_host);
  s.config.context_tokens = context;
  return s;
}

}  // namespace oomb::simulator::testing
