// The driver's tagging hook (EngineOptions::tagger, executor/runtime/op_tagger.h) without a GPU:
// tags are balanced, cover every op and copy the trace records with the same (stage, chunk, layer,
// op), and change nothing of the step or its host trace; through a CUPTI stand-in (fake_cupti.h)
// and the real decoder, every record of a step is attributed to its pass and the copies carry the
// Engine's measured bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "fake_cupti.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

using Key = std::tuple<int, int64_t, int64_t, Op, std::string>;  // stage, chunk, layer, op, name

class RecordingTagger final : public OpTagger {
 public:
  void push(int stage, int64_t chunk, int64_t layer, Op op, const char* name) override {
    ++depth;
    max_depth = std::max(max_depth, depth);
    ++pushes;
    keys.insert({stage, chunk, layer, op, name});
  }
  void pop() noexcept override {
    if (--depth < 0) unbalanced = true;
  }
  int depth = 0, max_depth = 0;
  int64_t pushes = 0;
  bool unbalanced = false;
  std::set<Key> keys;
};

// Sparse selection (load_prefix after select), offload with prefetch, AdamW on the device.
step::Config tagged_config() {
  auto c = test::small_config(64, 16, 4, 2);
  c.attention = step::Attention::sparse;
  c.page_budget = 2;
  c.selection = "published";
  c.optimizer = step::Optimizer::gpu;
  return c;
}

using EventKey = std::tuple<int, std::string, Op, traces::Lane, int, int64_t, int64_t, int64_t>;
std::multiset<EventKey> event_keys(const traces::Trace& t) {
  std::multiset<EventKey> s;
  for (const auto& e : t.events)
    s.insert({static_cast<int>(e.kind), e.name, e.op, e.lane, e.stage, e.chunk, e.layer, e.bytes});
  return s;
}

// The (stage, chunk, layer, pass) of every compute event.
using ComputeKey = std::tuple<int, int64_t, int64_t, Op>;
std::set<ComputeKey> compute_keys(const traces::Trace& t) {
  std::set<ComputeKey> s;
  for (const auto& ev : t.events)
    if (ev.kind == traces::EventKind::compute) s.insert({ev.stage, ev.chunk, ev.layer, ev.op});
  return s;
}

// Options that record an op-detail trace and tag every pass through `tagger`.
EngineOptions tagged_options(OpTagger* tagger) {
  EngineOptions o;
  o.record_trace = true;
  o.detail = traces::Detail::op;
  o.tagger = tagger;
  return o;
}

// The stand-in's records of the window [begin_ns, end_ns), decoded on e's trace clock (at `detail`
// when given, else the stand-in's).
traces::Trace decode_window(const test::FakeCupti& fake, const Engine& e, int64_t begin_ns, int64_t end_ns,
                            cupti::DecodeStats* st, std::optional<traces::Detail> detail = std::nullopt) {
  cupti::DecodeOptions opt = fake.decode_options();
  opt.origin_ns = e.trace_origin_ns();
  opt.windows = {{begin_ns, end_ns}};
  if (detail) opt.detail = *detail;
  return cupti::decode(fake.records(), opt, 0, {}, st);
}

TEST(OpTagger, TagsAreBalancedCoverEveryRecordedOpAndChangeNothing) {
  const auto m = test::small_model(3, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 21, 0.1f);
  const auto tokens = TokenSource::synthetic(m.vocab, 21).sequence(0, 64);
  CpuBackend cpu;
  Engine plain(cpu, m, tagged_config(), w, tagged_options(nullptr));
  RecordingTagger tagger;
  Engine tagged(cpu, m, tagged_config(), w, tagged_options(&tagger));
  for (int s = 0; s < 2; ++s) {
    const auto seq = TokenSource::synthetic(m.vocab, 21).sequence(s, 64);
    EXPECT_EQ(tagged.step(seq).loss, plain.step(seq).loss) << "step " << s;
  }
  EXPECT_EQ(tagged.weights().data, plain.weights().data);
  EXPECT_FALSE(tagger.unbalanced);
  EXPECT_EQ(tagger.depth, 0);
  EXPECT_GE(tagger.max_depth, 2);  // a prefetch copy issued inside a pass's page work
  EXPECT_GT(tagger.pushes, 0);

  // The host trace is the same (times aside) with and without the tagger.
  const traces::Trace a = plain.trace(), b = tagged.trace();
  EXPECT_EQ(event_keys(a), event_keys(b));
  EXPECT_EQ(a.memory.size(), b.memory.size());
  EXPECT_EQ(a.summary.h2d_bytes, b.summary.h2d_bytes);

  // Every recorded compute op and copy was issued under a tag with its own key.
  int compute = 0, copies = 0;
  for (const auto& e : b.events) {
    if (e.kind == traces::EventKind::phase) continue;  // the steps' intervals: no work of their own
    const Key k{e.stage, e.chunk, e.layer, e.op, e.name};
    EXPECT_TRUE(tagger.keys.count(k)) << e.op << "/" << e.name << " stage " << e.stage << " chunk " << e.chunk
                                      << " layer " << e.layer;
    (e.kind == traces::EventKind::compute ? compute : copies) += 1;
  }
  EXPECT_GT(compute, 0);
  EXPECT_GT(copies, 0);
  EXPECT_TRUE(tagger.keys.count({2, -1, -1, Op::optimizer_step, "zero_gradients"}));
}

// A mixture of experts' step (routing, gather, per-expert GEMMs, combine, the offsets read back)
// through the stand-in: every record under its pass's tag, and the step the same as without it.
TEST(OpTagger, ThroughACuptiStandInAMixtureOfExpertsStepIsTaggedAndUnchanged) {
  const models::ModelSpec m = models::load_model("tiny-moe");
  const Weights w = random_weights(m, 5, 0.1f);
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, 64);
  CpuBackend cpu, plain;
  test::FakeCupti fake(cpu);
  Engine e(fake, m, tagged_config(), w, tagged_options(&fake));
  const int64_t begin = steady_now_ns();
  const double loss = e.step(tokens).loss;
  const int64_t end = steady_now_ns() + 1000000;
  EXPECT_EQ(fake.unbalanced(), 0);
  cupti::DecodeStats st;
  const traces::Trace dev = decode_window(fake, e, begin, end, &st);
  EXPECT_EQ(st.untagged, 0);
  EXPECT_EQ(compute_keys(dev), compute_keys(e.trace()));
  Engine ref(plain, m, tagged_config(), w);
  EXPECT_EQ(loss, ref.step(tokens).loss);
  EXPECT_EQ(e.gradients().data, ref.gradients().data);
}

TEST(OpTagger, ThroughACuptiStandInEveryRecordOfAStepBelongsToItsPass) {
  const auto m = test::small_model(3, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 5, 0.1f);
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, 64);
  CpuBackend cpu;
  test::FakeCupti fake(cpu);
  Engine e(fake, m, tagged_config(), w, tagged_options(&fake));
  const int64_t begin = steady_now_ns();
  e.step(tokens);
  fake.untagged_kernel("stray");  // inside the step's window, under no tag
  const int64_t end = steady_now_ns() + 1000000;
  EXPECT_EQ(fake.depth(), 0);
  EXPECT_EQ(fake.unbalanced(), 0);

  cupti::DecodeStats st;
  const traces::Trace dev = decode_window(fake, e, begin, end, &st);
  EXPECT_EQ(st.untagged, 1);  // only the stray kernel
  EXPECT_GT(st.outside, 0);   // set-up: weights upload, mask, pool zeroing
  EXPECT_EQ(dev.metadata.source, "cuda-cupti");

  const traces::Trace host = e.trace();
  const std::set<Op> known = {Op::embedding, Op::layer_fwd,      Op::layer_recompute, Op::lm_head,
                              Op::layer_bwd, Op::embedding_bwd, Op::optimizer_step,  Op::gradient_allreduce};
  std::set<ComputeKey> dev_keys;
  int untagged = 0;
  std::multiset<std::tuple<int, int, int64_t, int64_t, Op, int64_t>> host_copies, dev_copies;
  for (const auto& ev : dev.events) {
    if (ev.op == Op::untagged) {
      ++untagged;
      EXPECT_EQ(ev.name, "stray");
      EXPECT_EQ(ev.stage, -1);
      continue;
    }
    EXPECT_TRUE(known.count(ev.op)) << ev.op;
    EXPECT_TRUE(ev.stage == 1 || ev.stage == 2) << ev.name;
    if (ev.kind == traces::EventKind::compute) dev_keys.insert({ev.stage, ev.chunk, ev.layer, ev.op});
    else dev_copies.insert({static_cast<int>(ev.kind), ev.stage, ev.chunk, ev.layer, ev.op, ev.bytes});
  }
  EXPECT_EQ(untagged, 1);
  EXPECT_EQ(dev_keys, compute_keys(host)) << "the same (stage, chunk, layer, pass) keys as the host trace's compute events";
  for (const auto& ev : host.events)
    if (ev.kind == traces::EventKind::copy_h2d || ev.kind == traces::EventKind::copy_d2h)
      host_copies.insert({static_cast<int>(ev.kind), ev.stage, ev.chunk, ev.layer, ev.op, ev.bytes});
  EXPECT_EQ(dev_copies, host_copies) << "each copy with its pass's stage, chunk, layer and bytes";
  EXPECT_GT(dev.summary.h2d_bytes, 0);
  EXPECT_EQ(dev.summary.h2d_bytes, e.measured().h2d_bytes);
  EXPECT_EQ(dev.summary.d2h_bytes, e.measured().d2h_bytes);

  // The trace the CLI writes: device events, the Engine's provenance and memory samples.
  const traces::Trace t = e.device_timed_trace(dev, "oomb run --backend cuda");
  EXPECT_EQ(t.metadata.source, "cuda-cupti");
  EXPECT_EQ(t.metadata.command, "oomb run --backend cuda");
  EXPECT_TRUE(t.metadata.extra.contains("measured"));
  EXPECT_TRUE(t.metadata.extra.contains("config"));
  EXPECT_EQ(t.metadata.extra["model"], "test");
  EXPECT_EQ(t.memory.size(), host.memory.size());
  EXPECT_EQ(t.summary.peak_device_bytes, host.summary.peak_device_bytes);
  EXPECT_EQ(t.summary.h2d_bytes, e.measured().h2d_bytes);
  // The device events and the Engine's step interval (one step).
  ASSERT_EQ(t.events.size(), dev.events.size() + 1);
  EXPECT_EQ(std::count_if(t.events.begin(), t.events.end(),
                          [](const traces::Event& ev) {
                            return ev.kind == traces::EventKind::phase && ev.name == traces::kStepPhase;
                          }),
            1);
  const traces::Trace back = traces::trace_from_json(traces::to_json(t), "device-timed trace");
  EXPECT_EQ(back.events.size(), t.events.size());
  EXPECT_EQ(back.metadata.source, "cuda-cupti");

  // Layer detail: merged per (stage, chunk, layer, pass) like the host trace's.
  const traces::Trace layer = decode_window(fake, e, begin, end, nullptr, traces::Detail::layer);
  EXPECT_LT(layer.events.size(), dev.events.size());
  EXPECT_EQ(layer.summary.h2d_bytes, dev.summary.h2d_bytes);
}

}  // namespace
}  // namespace oomb::executor
