// The CUPTI collector on a real device: kernels and copies of the CUDA backend come back as trace
// events on the backend's named streams, tagged with the (stage, chunk, layer, op) pushed around
// them, with the bytes of each copy.
// Built only with the CUPTI collector (tests/CMakeLists.txt defines OOMB_HAVE_CUPTI then).
#ifdef OOMB_HAVE_CUPTI
#include <gtest/gtest.h>

#include <cstdlib>

#include "cuda_test_util.h"
#include "executor/cupti/collector.h"

namespace oomb::executor::cudatest {
namespace {

class CudaCupti : public CudaTest {};

TEST_F(CudaCupti, TaggedKernelsAndCopiesOnNamedStreams) {
  const int64_t n = 1 << 20, bytes = n * 4;
  Buffer host(*gpu, Tier::host, bytes), dev(*gpu, Tier::device, bytes);
  traces::Trace t;
  {
    cupti::CuptiCollector collector;
    EXPECT_THROW(cupti::CuptiCollector second, std::exception) << "one collector per process";
    collector.name_stream(gpu->stream(CudaStream::compute), traces::Lane::compute);
    collector.name_stream(gpu->stream(CudaStream::h2d), traces::Lane::h2d);
    collector.name_stream(gpu->stream(CudaStream::d2h), traces::Lane::d2h);
    EventPtr e;
    {
      cupti::ScopedTag tag(&collector, 1, 2, 3, Op::layer_fwd);
      CopyRequest in;
      in.dir = CopyDir::h2d;
      in.regions = {{dev.data(), host.data(), bytes}};
      e = gpu->copy_async(std::move(in));
      gpu->wait(e);
      gpu->scale(dev.f32(), n, 2.0f);
    }
    {
      cupti::ScopedTag tag(&collector, 2, 0, -1, Op::lm_head);
      gpu->scale(dev.f32(), n, 0.5f);
    }
    gpu->synchronize();
    e->wait();
    cupti::DecodeStats st;
    t = collector.trace({}, traces::Detail::op, -1, &st);
    EXPECT_GE(st.kernels, 2);
    EXPECT_GE(st.memcpys, 1);
    EXPECT_EQ(t.metadata.dropped_records, 0);
  }
  int fwd_kernels = 0, head_kernels = 0, h2d = 0;
  for (const auto& ev : t.events) {
    if (ev.kind == traces::EventKind::copy_h2d && ev.bytes == bytes) {
      ++h2d;
      EXPECT_EQ(ev.lane, traces::Lane::h2d);
      EXPECT_EQ(ev.op, Op::layer_fwd);
      EXPECT_EQ(ev.layer, 3);
    }
    if (ev.kind == traces::EventKind::compute && ev.name == "scale_kernel") {
      EXPECT_EQ(ev.lane, traces::Lane::compute);
      if (ev.op == Op::layer_fwd) {
        ++fwd_kernels;
        EXPECT_EQ(ev.stage, 1);
        EXPECT_EQ(ev.chunk, 2);
      }
      if (ev.op == Op::lm_head) {
        ++head_kernels;
        EXPECT_EQ(ev.layer, -1);
      }
    }
  }
  EXPECT_EQ(h2d, 1);
  EXPECT_EQ(fwd_kernels, 1);
  EXPECT_EQ(head_kernels, 1);
  EXPECT_EQ(t.summary.h2d_bytes, bytes);
}

// Buffers far smaller than a step's records: every kernel still arrives, across many buffers. On
// the emulated device, a switch then drops every fifth record as CUPTI does when it has no buffer:
// the collector's count of drops is the trace's.
TEST_F(CudaCupti, SmallBuffersLoseNothingAndDroppedRecordsAreCounted) {
  constexpr int kKernels = 200;
  const int64_t n = 1024;
  Buffer dev(*gpu, Tier::device, n * 4);
  auto count_kernels = [&](const traces::Trace& t) {
    int k = 0;
    for (const auto& ev : t.events) k += ev.kind == traces::EventKind::compute && ev.name == "scale_kernel";
    return k;
  };
  cupti::CollectorOptions small;
  small.buffer_bytes = 4096;
  {
    cupti::CuptiCollector collector(small);
    {
      cupti::ScopedTag tag(&collector, 1, 0, 0, Op::layer_fwd);
      for (int i = 0; i < kKernels; ++i) gpu->scale(dev.f32(), n, 1.0f);
    }
    gpu->synchronize();
    cupti::DecodeStats st;
    const traces::Trace t = collector.trace({}, traces::Detail::op, -1, &st);
    EXPECT_EQ(count_kernels(t), kKernels);
    EXPECT_EQ(st.untagged, 0);
    EXPECT_EQ(collector.dropped(), 0);
    EXPECT_EQ(collector.pool_bytes(), step::cuda_scratch::kCuptiPoolBuffers * 4096);
    EXPECT_GE(collector.buffers_held_high_water(), 1);
#ifdef OOMB_CUDA_EMULATED_BACKEND
    // One queue, whose buffer is handed back before the next is asked for: the pool suffices.
    EXPECT_EQ(collector.buffers_beyond_pool(), 0);
    EXPECT_EQ(collector.buffers_held_high_water(), 1);
#endif
  }
  {  // Without a pool, every buffer is CUPTI's own request, and nothing is lost.
    cupti::CollectorOptions none = small;
    none.pool_buffers = 0;
    cupti::CuptiCollector collector(none);
    {
      cupti::ScopedTag tag(&collector, 1, 0, 0, Op::layer_fwd);
      for (int i = 0; i < kKernels; ++i) gpu->scale(dev.f32(), n, 1.0f);
    }
    gpu->synchronize();
    const traces::Trace t = collector.trace({}, traces::Detail::op);
    EXPECT_EQ(count_kernels(t), kKernels);
    EXPECT_EQ(collector.pool_bytes(), 0);
    EXPECT_GT(collector.buffers_beyond_pool(), 1);
  }
#ifdef OOMB_CUDA_EMULATED_BACKEND
  setenv("OOMB_EMULATED_CUPTI_DROP_EVERY", "5", 1);
  traces::Trace t;
  int64_t dropped = 0;
  {
    cupti::CuptiCollector collector(small);
    {
      cupti::ScopedTag tag(&collector, 1, 0, 0, Op::layer_fwd);
      for (int i = 0; i < kKernels; ++i) gpu->scale(dev.f32(), n, 1.0f);
    }
    gpu->synchronize();
    t = collector.trace({}, traces::Detail::op);
    dropped = collector.dropped();
  }
  unsetenv("OOMB_EMULATED_CUPTI_DROP_EVERY");
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(t.metadata.dropped_records, dropped);
  EXPECT_LT(count_kernels(t), kKernels);
#endif
}

}  // namespace
}  // namespace oomb::executor::cudatest

#endif  // OOMB_HAVE_CUPTI
