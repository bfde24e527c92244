// Simulator speed: closed-form evaluations per second and the event path's wall time for a full
// Qwen2.5-7B 4M-token step at layer detail. Targets (issue #2): >= 100,000 evaluations/s,
// event path < 1 s on one core. Prints measured / target ratios.
#include <chrono>
#include <cstdio>

#include "simulator/simulator.h"

using namespace oomb;
using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main() {
  simulator::Scenario s;
  s.model = models::load_model("qwen2.5-7b");
  s.gpu = models::load_gpu("h200");
  s.host = models::load_host(s.gpu.default_host);
  s.config.context_tokens = 4 * 1024 * 1024;

  std::printf("oomb simulator bench: qwen2.5-7b, h200, 4M tokens, chunk 4K, page 128\n");
  for (auto attention : {step::Attention::dense, step::Attention::sparse}) {
    s.config.attention = attention;
    volatile double sink = 0;
    int evals = 0;
    auto t0 = Clock::now();
    while (seconds_since(t0) < 1.0) {
      for (int i = 0; i < 100; ++i) sink = sink + simulator::evaluate(s).step_s;
      evals += 100;
    }
    const double per_s = evals / seconds_since(t0);
    std::printf("fast path (%s): %.0f evaluations/s (%.1f us each); target 100000/s: ratio %.2f\n",
                step::to_string(attention), per_s, 1e6 / per_s, per_s / 100000.0);
  }
  for (auto attention : {step::Attention::dense, step::Attention::sparse}) {
    s.config.attention = attention;
    auto t0 = Clock::now();
    auto r = simulator::simulate_events(s, traces::Detail::layer);
    const double wall = seconds_since(t0);
    std::printf("event path (%s, layer detail): %.3f s wall, %zu events, %zu memory samples; target < 1 s: ratio %.2f\n",
                step::to_string(attention), wall, r.trace.events.size(), r.trace.memory.size(), wall / 1.0);
  }
  return 0;
}
