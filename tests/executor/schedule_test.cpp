// The executor performs exactly the page allocations and copies of docs/schedule.md (dense mode):
// bytes per copy direction and pool high-water pages against the closed forms, computed here by
// hand from N, C, p, L, R. Also the measured trace's contents and detail levels.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

struct ScheduleCase {
  int64_t N, C, p, L, R;
};

struct Expected {
  int64_t h2d = 0, d2h = 0, kv_high = 0, grad_high = 0;
  int64_t host_kv_pages = 0, host_grad_pages = 0;  // host pool capacities (offload)
};

// docs/schedule.md, dense: prefix(c) = cC/p pages, own(c) = ceil(len_c / p), P = ceil(N / p).
// KV pages of kv_page_bytes (p * 2 * kv_dim * kv_dtype), gradient pages of grad_page_bytes.
Expected closed_form(const ScheduleCase& k, int64_t kv_page_bytes, int64_t grad_page_bytes) {
  const int64_t n = (k.N + k.C - 1) / k.C, P = (k.N + k.p - 1) / k.p;
  Expected e;
  if (k.R >= k.L) {  // no offload: everything resident, nothing copied
    e.kv_high = k.L * P;
    e.grad_high = k.L * P;
    return e;
  }
  int64_t kv_in = 0, grad_in = 0, kv_out = 0, grad_out = 0;
  for (int64_t c = 0; c < n; ++c) {
    const int64_t prefix = c * k.C / k.p;
    const int64_t len = std::min(k.N, (c + 1) * k.C) - c * k.C;
    const int64_t own = (len + k.p - 1) / k.p;
    // stage 1: KV(prefix) in, KV(own) out; recompute: KV(prefix) in;
    // backward: KV(prefix) + dKV(prefix) + dKV(own) in, dKV(prefix) out.
    kv_in += prefix + prefix + prefix;
    grad_in += prefix + own;
    kv_out += own;
    grad_out += prefix;
  }
  e.h2d = k.L * (kv_in * kv_page_bytes + grad_in * grad_page_bytes);
  e.d2h = k.L * (kv_out * kv_page_bytes + grad_out * grad_page_bytes);
  e.host_kv_pages = e.host_grad_pages = k.L * P;
  const int64_t last_prefix = (n - 1) * k.C / k.p;
  const int64_t last_own = (k.N - (n - 1) * k.C + k.p - 1) / k.p;
  e.kv_high = k.R * P;                          // stage 1 of the last chunk: all pages, R slots
  e.grad_high = k.R * (last_prefix + last_own);  // backward of the last chunk
  return e;
}

class ScheduleMatchesClosedForm : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(ScheduleMatchesClosedForm, BytesAndHighWater) {
  const ScheduleCase k = GetParam();
  const auto m = test::small_model(k.L, 2, 1, 8, 16, false, false, 31, 16);
  const Weights w = random_weights(m, 1, 0.02f);
  CpuBackend backend;
  Engine e(backend, m, test::small_config(k.N, k.C, k.p, k.R), w);
  e.step(TokenSource::synthetic(m.vocab, 1).sequence(0, k.N));
  const Measured& got = e.measured();
  const int64_t page_bytes = k.p * 2 * m.kv_heads * m.head_dim * 4;
  EXPECT_EQ(got.kv_page_bytes, page_bytes);
  const Expected want = closed_form(k, page_bytes, page_bytes);
  EXPECT_EQ(got.h2d_bytes, want.h2d);
  EXPECT_EQ(got.d2h_bytes, want.d2h);
  EXPECT_EQ(got.kv_pool_high_water_pages, want.kv_high);
  EXPECT_EQ(got.grad_pool_high_water_pages, want.grad_high);
  // Pools are allocated at exactly their high-water size (dense).
  EXPECT_EQ(got.kv_pool_pages, want.kv_high);
  EXPECT_EQ(got.grad_pool_pages, want.grad_high);
  // A second step repeats the same schedule.
  e.step(TokenSource::synthetic(m.vocab, 1).sequence(1, k.N));
  EXPECT_EQ(e.measured().h2d_bytes, want.h2d);
  EXPECT_EQ(e.measured().kv_pool_high_water_pages, want.kv_high);
}

const auto kScheduleCases = ::testing::Values(ScheduleCase{37, 16, 8, 3, 1},  // ragged chunk and page
                                              ScheduleCase{37, 16, 8, 3, 2},
                                              ScheduleCase{64, 16, 4, 4, 2},
                                              ScheduleCase{64, 16, 4, 4, 3},
                                              ScheduleCase{17, 8, 8, 2, 1},
                                              ScheduleCase{20, 32, 4, 3, 2},  // single chunk
                                              ScheduleCase{37, 16, 8, 3, 3},  // no offload
                                              ScheduleCase{64, 16, 4, 2, 8});
INSTANTIATE_TEST_SUITE_P(Dense, ScheduleMatchesClosedForm, kScheduleCases);

// bf16 pages: the same schedule with pages of half the bytes. Copies and pools against the closed
// forms with the bf16 page size of each kind, and against an fp32 run of the same shape: KV bytes
// (pool, host pool, copies) halve, gradient bytes halve only with bf16 gradient pages, page counts
// stay.
class ScheduleWithBf16Pages : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(ScheduleWithBf16Pages, BytesHalveAndMatchTheClosedForm) {
  const ScheduleCase k = GetParam();
  const auto m = test::small_model(k.L, 2, 1, 8, 16, false, false, 31, 16);
  const Weights w = random_weights(m, 1, 0.02f);
  const auto tokens = TokenSource::synthetic(m.vocab, 1).sequence(0, k.N);
  CpuBackend backend;
  Engine e32(backend, m, test::small_config(k.N, k.C, k.p, k.R), w);
  e32.step(tokens);
  const Measured f = e32.measured();
  const int64_t fp32_page = k.p * 2 * m.kv_heads * m.head_dim * 4, bf16_page = fp32_page / 2;
  for (Dtype grads : {Dtype::fp32, Dtype::bf16}) {
    const bool bf16_grads = grads == Dtype::bf16;
    step::Config c = test::small_config(k.N, k.C, k.p, k.R);
    c.kv_dtype = Dtype::bf16;
    c.kv_grad_dtype = grads;
    Engine e(backend, m, c, w);
    e.step(tokens);
    const Measured& got = e.measured();
    const int64_t grad_page = bf16_grads ? bf16_page : fp32_page;
    EXPECT_EQ(got.kv_dtype, Dtype::bf16);
    EXPECT_EQ(got.kv_grad_dtype, grads);
    EXPECT_EQ(got.kv_page_bytes, bf16_page);
    EXPECT_EQ(got.grad_page_bytes, grad_page);
    const Expected want = closed_form(k, bf16_page, grad_page);
    EXPECT_EQ(got.h2d_bytes, want.h2d) << grads;
    EXPECT_EQ(got.d2h_bytes, want.d2h) << grads;
    EXPECT_EQ(got.kv_pool_high_water_pages, want.kv_high);
    EXPECT_EQ(got.grad_pool_high_water_pages, want.grad_high);
    EXPECT_EQ(got.kv_pool_pages, want.kv_high);
    EXPECT_EQ(got.grad_pool_pages, want.grad_high);
    // Against the fp32 run: the same pages, KV bytes halved, gradient bytes halved when bf16.
    EXPECT_EQ(got.kv_pool_pages, f.kv_pool_pages);
    EXPECT_EQ(got.grad_pool_pages, f.grad_pool_pages);
    EXPECT_EQ(2 * got.kv_pool_pages * got.kv_page_bytes, f.kv_pool_pages * f.kv_page_bytes);
    EXPECT_EQ((bf16_grads ? 2 : 1) * got.grad_pool_pages * got.grad_page_bytes, f.grad_pool_pages * f.grad_page_bytes);
    const Expected kv_only = closed_form(k, fp32_page, 0), grads_only = closed_form(k, 0, fp32_page);
    EXPECT_EQ(got.h2d_bytes, kv_only.h2d / 2 + (bf16_grads ? grads_only.h2d / 2 : grads_only.h2d)) << grads;
    EXPECT_EQ(f.h2d_bytes, kv_only.h2d + grads_only.h2d);
    // Host pools (offload): all L * P pages of each kind in slabs, the only host allocations here.
    if (k.R < k.L) {
      EXPECT_EQ(got.host_kv_pages, want.host_kv_pages);
      EXPECT_EQ(got.host_grad_pages, want.host_grad_pages);
      EXPECT_EQ(got.peak_host_bytes, want.host_kv_pages * bf16_page + want.host_grad_pages * grad_page) << grads;
      EXPECT_EQ(f.peak_host_bytes, want.host_kv_pages * fp32_page + want.host_grad_pages * fp32_page);
    } else {
      EXPECT_EQ(got.host_kv_pages, 0);
      EXPECT_EQ(got.h2d_bytes + got.d2h_bytes, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dense, ScheduleWithBf16Pages, kScheduleCases);

TEST(Trace, EventsCopiesAndMemoryAreRecorded) {
  const auto m = test::small_model(3, 2, 1, 8, 16, false, false, 31, 16);
  const Weights w = random_weights(m, 1, 0.02f);
  const auto tokens = TokenSource::synthetic(m.vocab, 1).sequence(0, 40);
  CpuBackend backend;
  EngineOptions o;
  o.record_trace = true;
  o.detail = traces::Detail::op;
  Engine e(backend, m, test::small_config(40, 16, 8, 2), w, o);
  e.step(tokens);
  const traces::Trace t = e.trace("test");
  EXPECT_EQ(t.metadata.source, "cpu");
  EXPECT_EQ(t.summary.h2d_bytes, e.measured().h2d_bytes);
  EXPECT_EQ(t.summary.d2h_bytes, e.measured().d2h_bytes);
  EXPECT_FALSE(t.memory.empty());
  EXPECT_GT(t.summary.peak_device_bytes, 0);
  bool attention = false, bwd_copy = false;
  for (const auto& ev : t.events) {
    EXPECT_LE(ev.start_ns, ev.end_ns);
    if (ev.name == "attention_bwd" && ev.stage == 2 && ev.layer == 1 && ev.op == Op::layer_bwd) attention = true;
    if (ev.kind == traces::EventKind::copy_h2d && ev.op == Op::layer_bwd && ev.lane == traces::Lane::h2d) bwd_copy = true;
  }
  EXPECT_TRUE(attention);
  EXPECT_TRUE(bwd_copy);

  // Coarser levels merge: fewer events, same bytes; step level has no chunk or layer.
  for (auto d : {traces::Detail::layer, traces::Detail::chunk, traces::Detail::step}) {
    EngineOptions oc = o;
    oc.detail = d;
    Engine ec(backend, m, test::small_config(40, 16, 8, 2), w, oc);
    ec.step(tokens);
    const traces::Trace tc = ec.trace();
    EXPECT_LT(tc.events.size(), t.events.size()) << traces::to_string(d);
    EXPECT_EQ(tc.summary.h2d_bytes, t.summary.h2d_bytes) << traces::to_string(d);
    for (const auto& ev : tc.events) {
      if (d == traces::Detail::step) {
        EXPECT_EQ(ev.chunk, -1);
      }
      if (d == traces::Detail::layer) {
        EXPECT_EQ(ev.name, to_string(ev.op));
      }
    }
  }
}

// Every step is a phase event (never merged, at any detail), its work inside it, and the summary
// describes one step: the mean over the steps, bytes included.
TEST(Trace, EachStepIsAPhaseAndTheSummaryIsPerStep) {
  const auto m = test::small_model(3, 2, 1, 8, 16, false, false, 31, 16);
  const Weights w = random_weights(m, 1, 0.02f);
  const TokenSource tokens = TokenSource::synthetic(m.vocab, 1);
  CpuBackend backend;
  for (auto d : {traces::Detail::op, traces::Detail::layer, traces::Detail::chunk, traces::Detail::step}) {
    SCOPED_TRACE(traces::to_string(d));
    EngineOptions o;
    o.record_trace = true;
    o.detail = d;
    Engine e(backend, m, test::small_config(40, 16, 8, 2), w, o);
    e.step(tokens.sequence(0, 40));
    e.step(tokens.sequence(1, 40));
    const traces::Trace t = e.trace();
    std::vector<traces::Event> steps;
    for (const auto& ev : t.events)
      if (ev.kind == traces::EventKind::phase && ev.name == traces::kStepPhase) steps.push_back(ev);
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_LE(steps[0].end_ns, steps[1].start_ns);
    for (const auto& ev : t.events) {
      if (ev.kind == traces::EventKind::phase) continue;
      const bool inside = (ev.start_ns >= steps[0].start_ns && ev.end_ns <= steps[0].end_ns) ||
                          (ev.start_ns >= steps[1].start_ns && ev.end_ns <= steps[1].end_ns);
      EXPECT_TRUE(inside) << ev.name << " [" << ev.start_ns << ", " << ev.end_ns << ")";
    }
    const int64_t mean_ns = (steps[0].duration_ns() + steps[1].duration_ns() + 1) / 2;
    EXPECT_EQ(t.summary.step_ns, mean_ns);
    EXPECT_LE(t.summary.compute_busy_ns, t.summary.step_ns);
    EXPECT_GT(e.measured().h2d_bytes, 0);
    EXPECT_EQ(t.summary.h2d_bytes, e.measured().h2d_bytes);  // dense: the same copies every step
    EXPECT_EQ(t.summary.d2h_bytes, e.measured().d2h_bytes);
  }
}

}  // namespace
}  // namespace oomb::executor
