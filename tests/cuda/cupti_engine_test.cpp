// The driver's tags through the CUPTI collector on a real device (what `oomb run --backend cuda
// --trace` records): a tiny model's step on the CUDA backend with offload, sparse selection and
// AdamW; every kernel, memset and copy of the step is attributed to a known pass, the copy streams'
// bytes are the Engine's measured copy bytes, nothing is dropped and the trace is valid. Prints the
// tracing overhead (step time with the collector and tags / without).
// Built only with the CUPTI collector (tests/CMakeLists.txt defines OOMB_HAVE_CUPTI then).
#ifdef OOMB_HAVE_CUPTI
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "../executor/test_util.h"
#include "cuda_test_util.h"
#include "executor/cupti/collector.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"

namespace oomb::executor::cudatest {
namespace {

constexpr int kTimedSteps = 3;

step::Config traced_config() {
  auto c = test::small_config(64, 16, 4, 1);  // 4 chunks, resident layers 1 of 3: offload
  c.attention = step::Attention::sparse;
  c.page_budget = 2;
  c.selection = "published";
  c.optimizer = step::Optimizer::gpu;
  return c;
}

class CudaCuptiEngine : public CudaTest {};

TEST_F(CudaCuptiEngine, EveryRecordOfAStepIsTaggedAndCopiesMatchTheEngine) {
  const auto m = test::small_model(3, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 17, 0.1f);
  const auto tokens = TokenSource::synthetic(m.vocab, 17).sequence(0, 64);
  EngineOptions o;
  o.record_trace = true;
  o.detail = traces::Detail::op;

  // Without the collector: one warm-up step (module loading, cuBLASLt plans), then timed steps.
  double plain_s = 0;
  {
    Engine e(*gpu, m, traced_config(), w, o);
    e.step(tokens);
    gpu->synchronize();
    const int64_t t0 = steady_now_ns();
    for (int s = 0; s < kTimedSteps; ++s) e.step(tokens);
    gpu->synchronize();
    plain_s = static_cast<double>(steady_now_ns() - t0) * 1e-9 / kTimedSteps;
  }

  traces::Trace dev, host;
  Measured measured;
  cupti::DecodeStats st;
  double traced_s = 0;
  int64_t held_between = -1;
  {
    cupti::CollectorOptions co;
    co.windowed = true;  // as oomb run does: decoded step by step, the timed window kept
    cupti::CuptiCollector collector(co);
    ASSERT_TRUE(collector.steady_clock()) << "CUPTI refused the steady-clock timestamps: windows cannot apply";
    ASSERT_TRUE(collector.windowed());
    collector.name_stream(gpu->stream(CudaStream::compute), traces::Lane::compute);
    collector.name_stream(gpu->stream(CudaStream::h2d), traces::Lane::h2d);
    collector.name_stream(gpu->stream(CudaStream::d2h), traces::Lane::d2h);
    cupti::CuptiTagger tagger(collector);
    EngineOptions ot = o;
    ot.tagger = &tagger;
    Engine e(*gpu, m, traced_config(), w, ot);
    e.step(tokens);
    gpu->synchronize();
    collector.settle();
    const int64_t t0 = steady_now_ns();
    for (int s = 0; s + 1 < kTimedSteps; ++s) {
      e.step(tokens);
      gpu->synchronize();
      collector.settle();
    }
    // Review 3, finding 12: between windows the collector holds no work record and no correlation,
    // only the memory records (allocations and frees, folded into the trace's samples at the end).
    held_between = collector.held_records();
    const int64_t begin = steady_now_ns();  // the last step alone is decoded
    e.step(tokens);
    gpu->synchronize();
    const int64_t end = steady_now_ns();
    collector.close_window(begin, end);
    traced_s = static_cast<double>(end - t0) * 1e-9 / kTimedSteps;
    EXPECT_EQ(tagger.error(), "");
    cupti::DecodeOptions d;
    d.detail = traces::Detail::op;
    d.origin_ns = e.trace_origin_ns();
    dev = collector.trace({}, d, &st);
    EXPECT_THROW(collector.trace({}, d), std::exception) << "the decoder's state went into the trace";
    EXPECT_EQ(collector.dropped(), 0);
    measured = e.measured();
    host = e.device_timed_trace(dev, "cupti_engine_test");
  }
  std::printf("[ overhead ] step %.3f ms without the collector, %.3f ms with it and the tags: x%.3f; "
              "%lld CUPTI records in all (set-up and %d steps), %zu events in the decoded step\n",
              plain_s * 1e3, traced_s * 1e3, traced_s / plain_s, static_cast<long long>(st.records),
              kTimedSteps + 1, dev.events.size());
  RecordProperty("tracing_overhead", std::to_string(traced_s / plain_s));

  EXPECT_EQ(st.dropped, 0);
  EXPECT_EQ(dev.metadata.dropped_records, 0);
  EXPECT_GT(st.kernels, 0);
  EXPECT_GT(st.outside, 0) << "set-up and earlier steps are outside the window";
  EXPECT_GE(held_between, 0);
  EXPECT_LE(held_between, st.memory) << "of " << st.records << " records, " << st.outside << " outside the window";
  const std::set<Op> known = {Op::embedding, Op::layer_fwd,      Op::layer_recompute, Op::lm_head,
                              Op::layer_bwd, Op::embedding_bwd, Op::optimizer_step,  Op::gradient_allreduce};
  int64_t h2d = 0, d2h = 0, kernels = 0;
  for (const auto& ev : dev.events) {
    EXPECT_TRUE(known.count(ev.op)) << "untagged or unknown pass '" << ev.op << "' on " << ev.name << " ("
                                    << traces::to_string(ev.lane) << ")";
    EXPECT_TRUE(ev.stage == 1 || ev.stage == 2) << ev.name;
    if (ev.kind == traces::EventKind::compute) {
      EXPECT_EQ(ev.lane, traces::Lane::compute) << ev.name;
      if (ev.name != "memset" && ev.name.rfind("memcpy", 0) != 0) ++kernels;
      continue;
    }
    EXPECT_GE(ev.chunk, 0);
    EXPECT_GE(ev.layer, 0);
    EXPECT_TRUE(ev.op == Op::layer_fwd || ev.op == Op::layer_recompute || ev.op == Op::layer_bwd) << ev.op;
    if (ev.kind == traces::EventKind::copy_h2d) {
      EXPECT_EQ(ev.lane, traces::Lane::h2d);
      h2d += ev.bytes;
    } else {
      EXPECT_EQ(ev.lane, traces::Lane::d2h);
      d2h += ev.bytes;
    }
  }
  EXPECT_EQ(st.untagged, 0);
  EXPECT_GT(kernels, 0);
  EXPECT_GT(measured.h2d_bytes, 0);
  EXPECT_EQ(h2d, measured.h2d_bytes);
  EXPECT_EQ(d2h, measured.d2h_bytes);

  // The trace as the CLI writes it: valid oomb.trace/1, with the Engine's provenance and memory.
  EXPECT_EQ(host.metadata.source, "cuda-cupti");
  EXPECT_TRUE(host.metadata.extra.contains("measured"));
  EXPECT_FALSE(host.memory.empty());
  EXPECT_EQ(host.summary.h2d_bytes, measured.h2d_bytes);
  EXPECT_EQ(host.summary.d2h_bytes, measured.d2h_bytes);
  const traces::Trace back = traces::trace_from_json(traces::to_json(host), "cupti engine trace");
  EXPECT_EQ(back.events.size(), host.events.size());
  EXPECT_GT(back.summary.compute_busy_ns, 0);
  for (const auto& ev : back.events) EXPECT_GE(ev.start_ns, 0) << "origin: the Engine's trace origin";
}

}  // namespace
}  // namespace oomb::executor::cudatest

#endif  // OOMB_HAVE_CUPTI
