// CUPTI record decoding (executor/cupti/decode.h) on synthetic records: what a GPU run's collector
// hands over, checked without a GPU.
#include "executor/cupti/decode.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

namespace oomb::executor::cupti {
namespace {

constexpr uint32_t kCompute = 7, kH2d = 8, kD2h = 9;  // CUPTI stream ids of the backend's streams

// Tag::op carries an oomb::Op by its number.
constexpr int kFwd = static_cast<int>(Op::layer_fwd), kBwd = static_cast<int>(Op::layer_bwd),
              kHead = static_cast<int>(Op::lm_head);

DecodeOptions options(traces::Detail detail = traces::Detail::op) {
  DecodeOptions o;
  o.streams = {{kCompute, traces::Lane::compute}, {kH2d, traces::Lane::h2d}, {kD2h, traces::Lane::d2h}};
  o.origin_ns = 1000;
  o.detail = detail;
  return o;
}

Record kernel(uint32_t corr, uint32_t stream, int64_t start, int64_t end, const std::string& name = "k") {
  Record r;
  r.kind = RecordKind::kernel;
  r.correlation_id = corr;
  r.stream_id = stream;
  r.start_ns = start;
  r.end_ns = end;
  r.name = name;
  return r;
}

Record copy(uint32_t corr, uint32_t stream, CopyKind kind, int64_t start, int64_t end, int64_t bytes) {
  Record r = kernel(corr, stream, start, end);
  r.kind = RecordKind::memcpy;
  r.copy = kind;
  r.bytes = bytes;
  r.name.clear();
  return r;
}

Record correlation(uint32_t corr, const Tag& t) {
  Record r;
  r.kind = RecordKind::external_correlation;
  r.correlation_id = corr;
  r.external_id = pack_tag(t);
  return r;
}

Record memory(MemoryOp op, MemoryKind kind, int64_t t, uint64_t address, int64_t bytes) {
  Record r;
  r.kind = RecordKind::memory;
  r.memory_op = op;
  r.memory_kind = kind;
  r.start_ns = t;
  r.address = address;
  r.bytes = bytes;
  return r;
}

TEST(CuptiTag, PackRoundTripsEveryFieldIncludingNotApplicable) {
  for (const Tag& t : {Tag{1, 0, 0, 0}, Tag{2, 4095, 27, 2}, Tag{-1, -1, -1, -1}, Tag{14, 4294967294LL, 65534, 4094},
                       Tag{2, -1, 3, -1}}) {
    EXPECT_EQ(unpack_tag(pack_tag(t)), t) << t.stage << " " << t.chunk << " " << t.layer << " " << t.op;
  }
  // Distinct tags stay distinct (no field bleeds into another).
  EXPECT_NE(pack_tag({1, 1, 0, 0}), pack_tag({1, 0, 1, 0}));
  EXPECT_NE(pack_tag({1, 0, 0, 1}), pack_tag({2, 0, 0, 0}));
}

TEST(CuptiTag, OutOfRangeFieldsAreRejected) {
  EXPECT_THROW(pack_tag({15, 0, 0, 0}), Error);
  EXPECT_THROW(pack_tag({1, 4294967295LL, 0, 0}), Error);
  EXPECT_THROW(pack_tag({1, 0, 65535, 0}), Error);
  EXPECT_THROW(pack_tag({1, 0, 0, 4095}), Error);
  EXPECT_THROW(pack_tag({-2, 0, 0, 0}), Error);
}

TEST(CuptiDecode, KernelsAndCopiesGoToTheirStreamsWithTagsAndBytes) {
  // Correlation records arrive after the work they tag (separate CUPTI buffers).
  const std::vector<Record> recs = {
      kernel(10, kCompute, 2000, 3000, "_ZN4oomb4cuda8attn_fwdILi128EEEvv"),
      copy(11, kH2d, CopyKind::h2d, 1500, 2500, 4096),
      copy(12, kD2h, CopyKind::d2h, 3000, 3600, 1024),
      correlation(10, {1, 3, 5, kFwd}),
      correlation(11, {1, 3, 6, kFwd}),
      correlation(12, {2, 0, 27, kBwd}),
  };
  DecodeStats st;
  const traces::Trace t = decode(recs, options(), 4, traces::Metadata{}, &st);
  EXPECT_EQ(t.metadata.source, "cuda-cupti");
  EXPECT_EQ(t.metadata.dropped_records, 4);
  EXPECT_EQ(st.dropped, 4);
  EXPECT_EQ(st.kernels, 1);
  EXPECT_EQ(st.memcpys, 2);
  EXPECT_EQ(st.correlations, 3);
  EXPECT_EQ(st.untagged, 0);
  ASSERT_EQ(t.events.size(), 3u);
  // Sorted by start; times relative to origin 1000.
  const traces::Event& h2d = t.events[0];
  EXPECT_EQ(h2d.kind, traces::EventKind::copy_h2d);
  EXPECT_EQ(h2d.lane, traces::Lane::h2d);
  EXPECT_EQ(h2d.start_ns, 500);
  EXPECT_EQ(h2d.end_ns, 1500);
  EXPECT_EQ(h2d.bytes, 4096);
  EXPECT_EQ(h2d.layer, 6);
  const traces::Event& k = t.events[1];
  EXPECT_EQ(k.kind, traces::EventKind::compute);
  EXPECT_EQ(k.lane, traces::Lane::compute);
  EXPECT_EQ(k.name, "attn_fwd");
  EXPECT_EQ(k.stage, 1);
  EXPECT_EQ(k.chunk, 3);
  EXPECT_EQ(k.layer, 5);
  EXPECT_EQ(k.op, Op::layer_fwd);
  const traces::Event& d2h = t.events[2];
  EXPECT_EQ(d2h.kind, traces::EventKind::copy_d2h);
  EXPECT_EQ(d2h.lane, traces::Lane::d2h);
  EXPECT_EQ(d2h.bytes, 1024);
  EXPECT_EQ(d2h.stage, 2);
  EXPECT_EQ(d2h.op, Op::layer_bwd);
  EXPECT_EQ(t.summary.h2d_bytes, 4096);
  EXPECT_EQ(t.summary.d2h_bytes, 1024);
  EXPECT_EQ(t.summary.step_ns, 2100);  // first start 500 .. last end 2600
}

TEST(CuptiDecode, UnknownStreamsFallBackByKindAndUntaggedWorkIsCounted) {
  const std::vector<Record> recs = {kernel(1, 99, 1100, 1200), copy(2, 98, CopyKind::d2h, 1100, 1300, 8),
                                    copy(3, 97, CopyKind::d2d, 1200, 1250, 16)};
  DecodeStats st;
  const traces::Trace t = decode(recs, options(), 0, {}, &st);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(st.untagged, 3);
  for (const auto& e : t.events) {
    EXPECT_EQ(e.stage, -1);
    EXPECT_EQ(e.op, Op::untagged);
    if (e.kind == traces::EventKind::copy_d2h) EXPECT_EQ(e.lane, traces::Lane::d2h);
    else EXPECT_EQ(e.lane, traces::Lane::compute);
  }
  EXPECT_EQ(t.events[2].name, "memcpy_d2d");  // device-to-device copies are compute-stream work
}

TEST(CuptiDecode, CopiesOnTheComputeStreamAreComputeWork) {
  // The backend's staged uploads and read-backs run on the compute stream: not copy-stream traffic.
  const std::vector<Record> recs = {copy(1, kCompute, CopyKind::h2d, 1100, 1200, 256),
                                    copy(2, kCompute, CopyKind::d2h, 1300, 1400, 8),
                                    copy(3, kH2d, CopyKind::h2d, 1100, 1500, 4096), correlation(1, {1, 0, 0, kFwd}),
                                    correlation(2, {2, 0, -1, kHead}), correlation(3, {1, 0, 0, kFwd})};
  const traces::Trace t = decode(recs, options(), 0, {});
  ASSERT_EQ(t.events.size(), 3u);
  int compute = 0;
  for (const auto& e : t.events) {
    if (e.lane != traces::Lane::compute) continue;
    ++compute;
    EXPECT_EQ(e.kind, traces::EventKind::compute);
    EXPECT_TRUE(e.name == "memcpy_h2d" || e.name == "memcpy_d2h") << e.name;
  }
  EXPECT_EQ(compute, 2);
  EXPECT_EQ(t.summary.h2d_bytes, 4096);
  EXPECT_EQ(t.summary.d2h_bytes, 0);
}

TEST(CuptiDecode, WindowsKeepOnlyTheStepsAndFoldEarlierAllocationsIntoTheBase) {
  DecodeOptions o = options();
  o.origin_ns = -1;
  o.windows = {{2000, 3000}, {5000, 6000}};
  const std::vector<Record> recs = {
      memory(MemoryOp::allocation, MemoryKind::device, 1100, 0xA0, 1000),  // set-up: base
      kernel(1, kCompute, 1200, 1300),                                     // set-up work: left out
      kernel(2, kCompute, 2100, 2200), correlation(2, {1, 0, 0, kFwd}),
      kernel(3, kCompute, 4000, 4100),                                     // between steps: left out
      copy(4, kH2d, CopyKind::h2d, 5100, 5300, 64), correlation(4, {2, 0, 1, kBwd}),
      memory(MemoryOp::allocation, MemoryKind::device, 5200, 0xB0, 24)};
  DecodeStats st;
  const traces::Trace t = decode(recs, o, 0, {}, &st);
  EXPECT_EQ(st.outside, 2);
  EXPECT_EQ(st.untagged, 0);  // work outside the windows is not counted as untagged
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].start_ns, 0);  // origin: the first work inside a window
  EXPECT_EQ(t.events[1].start_ns, 3000);
  EXPECT_EQ(t.events[1].op, Op::layer_bwd);
  ASSERT_EQ(t.memory.size(), 2u);
  EXPECT_EQ(t.memory[0].device_bytes, 1000);
  EXPECT_EQ(t.memory[1].device_bytes, 1024);
  EXPECT_EQ(t.memory[1].t_ns, 3100);
}

TEST(CuptiDecode, UnknownKindsAreIgnoredAndIncompleteRecordsDropped) {
  Record other;
  other.kind = RecordKind::other;
  other.start_ns = 1100;
  other.end_ns = 1200;
  const std::vector<Record> recs = {other, kernel(1, kCompute, 1500, 1400), kernel(2, kCompute, 0, 0),
                                    kernel(3, kCompute, 1200, 1300)};
  DecodeStats st;
  const traces::Trace t = decode(recs, options(), 0, {}, &st);
  EXPECT_EQ(st.ignored, 1);
  EXPECT_EQ(st.invalid, 2);
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].start_ns, 200);
  // The trace survives its own JSON round trip (which rejects end < start).
  EXPECT_NO_THROW(traces::trace_from_json(traces::to_json(t), "decoded"));
}

TEST(CuptiDecode, OverlappingRecordsCountComputeOnceAndExposeOnlyUncoveredCopyTime) {
  // Two kernels overlapping in time (concurrent kernels, or timestamp interpolation) and a copy
  // partly hidden behind them.
  const std::vector<Record> recs = {kernel(1, kCompute, 1000, 2000), kernel(2, kCompute, 1500, 2500),
                                    copy(3, kH2d, CopyKind::h2d, 2200, 3000, 64)};
  const traces::Trace t = decode(recs, options(), 0, {});
  EXPECT_EQ(t.summary.compute_busy_ns, 1500);
  EXPECT_EQ(t.summary.step_ns, 2000);
  EXPECT_EQ(t.summary.exposed_copy_ns, 500);
}

// Review 3, finding 2: NCCL's kernels (a tensor-parallel all-reduce on the compute stream, a
// gradient bucket's on the communicator's own stream, which nobody named) are collectives on the
// communication lane with their tags, not compute: they add nothing to compute_busy, and a copy
// they overlap stays exposed.
TEST(CuptiDecode, NcclKernelsAreCollectivesOnTheCommLaneNotCompute) {
  constexpr uint32_t kSide = 42;  // the data-parallel communicator's stream: not in options.streams
  const std::vector<Record> recs = {
      correlation(1, {1, 0, 0, kFwd}), kernel(1, kCompute, 1000, 2000, "attn_fwd"),
      correlation(2, {2, 0, 0, kBwd}),
      kernel(2, kCompute, 2000, 2600, "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
      correlation(3, {2, 0, 1, kBwd}), kernel(3, kSide, 2600, 4000, "ncclKernel_ReduceScatter_RING_LL_Sum_bfloat16"),
      copy(4, kH2d, CopyKind::h2d, 2700, 3000, 64)};
  DecodeStats st;
  const traces::Trace t = decode(recs, options(), 0, {}, &st);
  EXPECT_EQ(st.kernels, 3);
  EXPECT_EQ(st.collectives, 2);
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[0].kind, traces::EventKind::compute);
  EXPECT_EQ(t.events[1].kind, traces::EventKind::collective);
  EXPECT_EQ(t.events[1].name, "nccl_allreduce");
  EXPECT_EQ(t.events[1].lane, traces::Lane::comm);
  EXPECT_EQ(t.events[1].op, Op::layer_bwd);
  EXPECT_EQ(t.events[2].name, "nccl_reducescatter");
  EXPECT_EQ(t.events[2].lane, traces::Lane::comm);
  EXPECT_EQ(t.events[2].layer, 1);
  EXPECT_EQ(t.summary.compute_busy_ns, 1000);  // attn_fwd only
  EXPECT_EQ(t.summary.exposed_copy_ns, 300);   // the collectives hide no copy
  EXPECT_EQ(nccl_collective("attn_fwd"), "");
  EXPECT_EQ(nccl_collective("ncclDevKernel_AllGather_RING_LL"), "nccl_allgather");
  EXPECT_NO_THROW(traces::trace_from_json(traces::to_json(t), "decoded"));
}

TEST(CuptiDecode, LayerDetailMergesConsecutiveRecordsOfAKey) {
  const Tag a{1, 0, 0, kFwd}, b{1, 0, 1, kFwd};
  const std::vector<Record> recs = {kernel(1, kCompute, 1000, 1100), kernel(2, kCompute, 1100, 1300),
                                    kernel(3, kCompute, 1300, 1400), copy(4, kH2d, CopyKind::h2d, 1050, 1150, 10),
                                    copy(5, kH2d, CopyKind::h2d, 1150, 1250, 20),
                                    correlation(1, a), correlation(2, a), correlation(3, b), correlation(4, b),
                                    correlation(5, b)};
  const traces::Trace t = decode(recs, options(traces::Detail::layer), 0, {});
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].lane, traces::Lane::compute);
  EXPECT_EQ(t.events[0].layer, 0);
  EXPECT_EQ(t.events[0].end_ns, 300);
  EXPECT_EQ(t.events[0].name, "layer_fwd");
  EXPECT_EQ(t.events[1].lane, traces::Lane::h2d);
  EXPECT_EQ(t.events[1].bytes, 30);
  EXPECT_EQ(t.events[2].layer, 1);
  // Step detail: one event per stream and stage.
  const traces::Trace s = decode(recs, options(traces::Detail::step), 0, {});
  EXPECT_EQ(s.events.size(), 2u);
}

TEST(CuptiDecode, MemoryRecordsBecomeSamplesFromTheBase) {
  DecodeOptions o = options();
  o.base_device_bytes = 100;
  const std::vector<Record> recs = {
      memory(MemoryOp::allocation, MemoryKind::device, 1100, 0xA0, 1000),
      memory(MemoryOp::allocation, MemoryKind::pinned, 1200, 0xB0, 50),
      memory(MemoryOp::release, MemoryKind::device, 1300, 0xA0, 0),  // size taken from the allocation
      memory(MemoryOp::release, MemoryKind::device, 1400, 0xC0, 0),  // unknown address: invalid
      kernel(1, kCompute, 1100, 1500)};
  DecodeStats st;
  const traces::Trace t = decode(recs, o, 0, {}, &st);
  EXPECT_EQ(st.memory, 4);
  EXPECT_EQ(st.invalid, 1);
  ASSERT_EQ(t.memory.size(), 4u);
  EXPECT_EQ(t.memory[0].device_bytes, 100);
  EXPECT_EQ(t.memory[1].device_bytes, 1100);
  EXPECT_EQ(t.memory[2].host_bytes, 50);
  EXPECT_EQ(t.memory[3].device_bytes, 100);
  EXPECT_EQ(t.summary.peak_device_bytes, 1100);
  EXPECT_EQ(t.summary.peak_host_bytes, 50);
  ASSERT_EQ(t.events.size(), 1u);  // memory records are samples, not events
}

TEST(CuptiDecode, OriginDefaultsToTheEarliestRecord) {
  DecodeOptions o = options();
  o.origin_ns = -1;
  const traces::Trace t = decode({kernel(1, kCompute, 5000, 5100), kernel(2, kCompute, 4000, 4100)}, o, 0, {});
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].start_ns, 0);
  EXPECT_EQ(t.events[1].start_ns, 1000);
}

// Review 3, finding 12: a collector decodes each CUPTI buffer as it arrives (Decoder) instead of
// holding every record of the run. A synthetic run (set-up, a warm-up step, timed steps with work
// between them; correlations before or after their work, a batched copy's records sharing one;
// allocations in every phase) handed over in buffers of random sizes, with a window added after each
// timed step and a settle at every step's end, gives the trace decode() gives from all records at
// once, byte for byte; and after each settle the decoder holds no correlation and no record from
// outside the windows.
TEST(CuptiDecode, DecodingBufferByBufferGivesTheWholeRunsTraceAndHoldsOnlyTheWindows) {
  std::mt19937_64 rng(20261206);
  for (int trial = 0; trial < 20; ++trial) {
    struct StepEnd {
      size_t records;  // records made before the step's end
      int64_t begin_ns, end_ns;
      bool timed;
    };
    std::vector<Record> recs;
    std::vector<StepEnd> ends;
    uint32_t corr = 1;
    uint64_t address = 0x1000;
    int64_t t = 1000;
    auto work = [&](const Tag& tag, bool tagged, bool batch) {
      const uint32_t id = corr++;
      const bool late = rng() % 3 == 0;  // the correlation after its work (another queue's buffer)
      if (tagged && !late) recs.push_back(correlation(id, tag));
      const int copies = batch ? 3 : 1;
      for (int k = 0; k < copies; ++k) {
        const int64_t d = 10 + static_cast<int64_t>(rng() % 50);
        switch (rng() % 4) {
          case 0: recs.push_back(copy(id, kH2d, CopyKind::h2d, t, t + d, 64 + k)); break;
          case 1: recs.push_back(copy(id, kD2h, CopyKind::d2h, t, t + d, 32)); break;
          default: recs.push_back(kernel(id, kCompute, t, t + d, rng() % 2 ? "_ZN4oomb4cuda8attn_fwdILi128EEEvv" : "k"));
        }
        t += d / (1 + static_cast<int64_t>(rng() % 2));  // some overlap
      }
      if (tagged && late) recs.push_back(correlation(id, tag));
    };
    auto allocate = [&] {
      recs.push_back(memory(MemoryOp::allocation, rng() % 2 ? MemoryKind::device : MemoryKind::pinned, t++,
                            address, 100 + static_cast<int64_t>(rng() % 100)));
      if (rng() % 2) recs.push_back(memory(MemoryOp::release, MemoryKind::device, t++, address, 0));
      address += 0x100;
    };
    allocate();
    for (int i = 0; i < 5; ++i) work({-1, -1, -1, -1}, rng() % 2, false);  // set-up
    const int steps = 4, warmup = 1;
    for (int step = 0; step < steps; ++step) {
      const int64_t begin = t;
      for (int i = 0; i < 30; ++i) {
        if (rng() % 8 == 0) allocate();
        work({1 + static_cast<int>(rng() % 2), step, static_cast<int64_t>(rng() % 3), kBwd + static_cast<int>(rng() % 3)},
             rng() % 10 != 0, rng() % 5 == 0);
      }
      ends.push_back({recs.size(), begin, t, step >= warmup});
      t += 5;
      for (int i = 0; i < 3; ++i) work({2, -1, -1, kHead}, true, false);  // between steps (a check): left out
    }

    DecodeOptions whole = options();
    whole.origin_ns = trial % 2 ? -1 : 900;
    for (const StepEnd& e : ends)
      if (e.timed) whole.windows.emplace_back(e.begin_ns, e.end_ns);
    DecodeStats st_whole;
    const std::string expected = traces::to_json(decode(recs, whole, 3, {}, &st_whole)).dump();

    DecodeOptions streaming = options();
    streaming.origin_ns = -1;  // set at the end, as the runner does
    streaming.windowed = true;
    Decoder d(streaming);
    size_t next = 0, end_index = 0;
    while (next < recs.size() || end_index < ends.size()) {
      const size_t limit = end_index < ends.size() ? ends[end_index].records : recs.size();
      const size_t n = std::min(limit - next, static_cast<size_t>(1 + rng() % 7));
      for (size_t i = 0; i < n; ++i) d.consume(recs[next++]);
      if (end_index < ends.size() && next == ends[end_index].records) {
        const StepEnd& e = ends[end_index++];
        if (e.timed) d.add_window(e.begin_ns, e.end_ns);
        d.settle(e.end_ns + 1);
        // Held: the windows' work and the memory records, nothing else.
        int64_t memory_records = 0, inside = 0;
        for (size_t i = 0; i < next; ++i) {
          const Record& r = recs[i];
          memory_records += r.kind == RecordKind::memory;
          if (r.kind == RecordKind::kernel || r.kind == RecordKind::memcpy)
            for (const StepEnd& w : ends)
              inside += w.timed && &w - ends.data() < static_cast<std::ptrdiff_t>(end_index) &&
                        r.start_ns >= w.begin_ns && r.start_ns <= w.end_ns;
        }
        EXPECT_EQ(d.held_records(), memory_records + inside) << "trial " << trial << ", step " << end_index;
      }
    }
    d.options().origin_ns = whole.origin_ns;
    DecodeStats st_stream;
    const std::string got = traces::to_json(d.finish(3, {}, &st_stream)).dump();
    EXPECT_EQ(got, expected) << "trial " << trial;
    EXPECT_EQ(st_stream.untagged, st_whole.untagged);
    EXPECT_EQ(st_stream.outside, st_whole.outside);
    EXPECT_EQ(st_stream.records, st_whole.records);
    EXPECT_GT(st_whole.outside, 0);
    EXPECT_GT(st_whole.untagged, 0);
  }
  // Windows come in order, and only to a decoder that expects them.
  DecodeOptions w = options();
  w.windowed = true;
  Decoder d(w);
  d.add_window(100, 200);
  EXPECT_THROW(d.add_window(50, 300), Error);
  EXPECT_THROW(d.add_window(300, 250), Error);
  Decoder fixed(options());
  EXPECT_THROW(fixed.add_window(100, 200), Error);
}

TEST(CuptiDecode, ShortKernelNames) {
  EXPECT_EQ(short_kernel_name("_ZN4oomb4cuda8attn_fwdILi128EEEvv"), "attn_fwd");
  EXPECT_EQ(short_kernel_name("void oomb::cuda::rmsnorm_fwd<float>(const float*, int)"), "rmsnorm_fwd");
  EXPECT_EQ(short_kernel_name("sm90_xmma_gemm_f32f32"), "sm90_xmma_gemm_f32f32");
  // A kernel in an anonymous namespace, as nvcc mangles it.
  EXPECT_EQ(short_kernel_name("_ZN4oomb8executor4cuda12_GLOBAL__N_112scale_kernelEPfif"), "scale_kernel");
  EXPECT_EQ(short_kernel_name("void (anonymous namespace)::k<(int)1>(float*)"), "k");
}

}  // namespace
}  // namespace oomb::executor::cupti
