// CPU executor speed and memory: tokens/s of the chunk-recurrent step against the full-sequence
// reference path (plain backprop through the same ops) measured in the same run, on the tiny model
// and on qwen2.5-0.5b cut to 2 layers, at 4K tokens; then the chunked path's device memory as the
// context doubles (the working set outside the KV page pools must stay flat; the pools hold the
// KV cache, which is O(N) by nature).
#include <chrono>
#include <cstdio>

#include "core/format.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"

using namespace oomb;
using namespace oomb::executor;
using Clock = std::chrono::steady_clock;

static double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

static simulator::Config config(int64_t context, int64_t layers_override) {
  simulator::Config c;
  c.context_tokens = context;
  c.chunk_tokens = 1024;
  c.page_tokens = 128;
  c.resident_layers = 1;  // offload on: the realistic path
  c.layers_override = layers_override;
  c.kv_dtype = c.kv_grad_dtype = "fp32";  // against the fp32 full-sequence reference, like for like
  return c;
}

int main() {
  std::printf("oomb executor bench (cpu backend, fp32, one process)\n");
  std::printf("%-28s %12s %14s %14s %10s\n", "model @ 4K tokens", "chunked s", "chunked tok/s", "reference tok/s",
              "overhead");
  struct Case {
    const char* model;
    int64_t layers;
  };
  for (const Case& k : {Case{"tiny", 0}, Case{"qwen2.5-0.5b", 2}}) {
    const models::ModelSpec full = models::load_model(k.model);
    const simulator::Config c = config(4096, k.layers);
    const models::ModelSpec m = effective_model(full, c);
    const Weights w = random_weights(m, 7);
    const std::vector<int32_t> tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, c.context_tokens);
    CpuBackend backend;
    Engine e(backend, full, c, w);
    auto t0 = Clock::now();
    e.step(tokens);
    const double chunked = since(t0);
    t0 = Clock::now();
    cpu::full_sequence_reference(m, w, tokens);
    const double reference = since(t0);
    char name[64];
    std::snprintf(name, sizeof name, "%s%s", k.model, k.layers ? " (2 layers)" : "");
    std::printf("%-28s %12.2f %14.0f %14.0f %9.2fx\n", name, chunked, 4096 / chunked, 4096 / reference,
                chunked / reference);
  }
  std::printf("\nchunked path, tiny, chunk 1K, page 128, 1 resident layer: device memory as the context doubles\n");
  std::printf("%10s %16s %16s %16s\n", "context", "peak device", "page pools", "outside pools");
  const models::ModelSpec tiny = models::load_model("tiny");
  for (int64_t n : {2048, 4096, 8192, 16384}) {
    const simulator::Config c = config(n, 0);
    const Weights w = random_weights(tiny, 7);
    CpuBackend backend;
    Engine e(backend, tiny, c, w);
    e.step(TokenSource::synthetic(tiny.vocab, 7).sequence(0, n));
    const Measured& ms = e.measured();
    int64_t pools = 0;
    for (const auto& [k, v] : ms.device_breakdown_bytes)
      if (k == "kv_pool" || k == "kv_grad_pool") pools += v;
    std::printf("%10s %16s %16s %16s\n", format_tokens(n).c_str(), format_bytes(ms.peak_device_bytes).c_str(),
                format_bytes(pools).c_str(), format_bytes(ms.peak_device_bytes - pools).c_str());
  }
  return 0;
}
