// Test helper of cli_test.sh: writes a "cuda-cupti" trace without a GPU, for `oomb validate`.
//   oomb_cupti_synth PLAN.json OUT.json
// Runs one step of the plan's scenario on the CPU reference backend behind the CUPTI stand-in of
// tests/executor/fake_cupti.h (the driver's tags -> synthetic activity records -> the real decoder)
// plus one untagged kernel, and writes the trace the way `oomb run --backend cuda --trace` does
// (Engine::device_timed_trace). The times are CPU times: only the trace's shape is realistic.
#include <cstdio>
#include <exception>

#include "../executor/fake_cupti.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "planner/plan.h"

int main(int argc, char** argv) {
  using namespace oomb;
  using namespace oomb::executor;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PLAN.json OUT.json\n", argv[0]);
    return 2;
  }
  try {
    const simulator::Scenario s = planner::load_plan(argv[1]).scenario();
    const models::ModelSpec m = effective_model(s.model, s.config);
    CpuBackend cpu;
    test::FakeCupti fake(cpu);
    EngineOptions o;
    o.record_trace = true;
    o.detail = traces::Detail::layer;
    o.tagger = &fake;
    Engine e(fake, s.model, s.config, random_weights(m, 1234, 0.02f), o);
    const int64_t begin = steady_now_ns();
    e.step(TokenSource::synthetic(m.vocab, 1234).sequence(0, s.config.context_tokens));
    fake.untagged_kernel("stray_kernel");
    const int64_t end = steady_now_ns() + 1000000;
    cupti::DecodeOptions opt = fake.decode_options();
    opt.origin_ns = e.trace_origin_ns();
    opt.detail = traces::Detail::layer;
    opt.windows = {{begin, end}};
    cupti::DecodeStats st;
    traces::Metadata md;
    md.device = "CUPTI stand-in (cpu reference backend, tests/executor/fake_cupti.h)";
    traces::Trace dev = cupti::decode(fake.records(), opt, 0, md, &st);
    dev.metadata.extra["cupti"] = {{"records", st.records}, {"untagged", st.untagged}, {"outside", st.outside}};
    traces::write_trace(e.device_timed_trace(std::move(dev), "oomb_cupti_synth"), argv[2]);
    std::printf("wrote %s (%lld records, %lld untagged)\n", argv[2], static_cast<long long>(st.records),
                static_cast<long long>(st.untagged));
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "oomb_cupti_synth: %s\n", ex.what());
    return 2;
  }
}
