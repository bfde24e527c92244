// validate_run (validation/validation.h) on hand-made run records: the CUDA reserved-bytes bound.
#include <gtest/gtest.h>

#include "validation/validation.h"
#include "validation_test_util.h"
#include "step/run_record.h"

namespace oomb::validation {
namespace {

// A CUPTI-timed cuda run of `s` that measured exactly the prediction, CUDA having reserved
// `reserved` device bytes (nullopt: no CUPTI memory records).
traces::Trace cuda_run(const simulator::Scenario& s, std::optional<int64_t> reserved) {
  traces::Trace t = testing::cuda_record_as_predicted(s);
  if (reserved) t.metadata.extra["cupti"] = {{"reserved_device_bytes", *reserved}, {"untagged", 0}};
  return t;
}

// tiny at 2K: chunks of 512, pages of 64, one resident layer (so its pages are offloaded).
simulator::Scenario tiny_2k_offload() {
  simulator::Scenario s = testing::request("tiny", "h200").scenario;
  s.config.context_tokens = 2048;
  s.config.chunk_tokens = 512;
  s.config.page_tokens = 64;
  s.config.resident_layers = 1;
  return s;
}

using testing::term;

// validate_run of trace t against the plan s (p.json), as `oomb validate --plan p.json --trace t.json`.
Validation validate_as_plan(const simulator::Scenario& s, const traces::Trace& t) {
  ValidationRequest r;
  r.trace = &t;
  r.trace_where = "t.json";
  r.scenario = s;
  r.plan_where = "p.json";
  return validate_run(r);
}

TEST(Validation, CudaReservedBytesAreABoundOnThePlansPeakPlusReserve) {
  simulator::Scenario s = tiny_2k_offload();
  simulator::Scenario as_run = s;
  as_run.config.peak_measure = step::PeakMeasure::allocated;
  // The plan's reserved peak: its buffers, the arena block's slack beyond them (step/allocator.h:
  // the CUDA run reserves that block up front) and the runtime reserve.
  ASSERT_EQ(s.config.peak_measure, step::PeakMeasure::reserved);
  const int64_t bound = simulator::evaluate(s).peak_device_bytes;
  EXPECT_GT(bound, simulator::evaluate(as_run).peak_device_bytes + s.gpu.reserved_bytes);
  auto judge = [&](std::optional<int64_t> reserved) {
    const traces::Trace t = cuda_run(s, reserved);
    return validate_as_plan(s, t);
  };
  {
    const Validation v = judge(bound);
    const ValidationTerm* t = term(v, "reserved_device_bytes");
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(t->judged);
    EXPECT_TRUE(t->at_most);
    EXPECT_DOUBLE_EQ(t->predicted, static_cast<double>(bound));
    EXPECT_EQ(t->ok(), std::optional<bool>(true));
  }
  EXPECT_EQ(term(judge(bound / 2), "reserved_device_bytes")->ok(), std::optional<bool>(true));  // a bound
  {
    const Validation v = judge(bound + 1);  // one byte the plan does not hold the GPU for
    EXPECT_EQ(term(v, "reserved_device_bytes")->ok(), std::optional<bool>(false));
    EXPECT_FALSE(v.ok);
  }
  EXPECT_EQ(term(judge(std::nullopt), "reserved_device_bytes"), nullptr);  // no CUPTI memory records
}

// The stage times are judged over the step that step_s is (the run's fastest timed step), not as
// means over every step: a slow first step must not inflate the stages of the fastest one.
TEST(Validation, StageTimesAreTheFastestStepsLikeStepS) {
  simulator::Scenario s = tiny_2k_offload();
  traces::Trace t = cuda_run(s, std::nullopt);
  // Two timed steps: a slow one (stage 1: 3 s, stage 2: 5 s of a 9 s step) and the fastest (stage
  // 1: 0.4 s, stage 2: 1.1 s of a 1.5 s step, the record's step_s).
  t.metadata.extra["measured"]["steps"] = 2;
  t.metadata.extra["measured"]["step_s"] = 1.5;
  t.metadata.extra["measured"]["mean_step_s"] = 5.25;
  const int64_t s1 = 1'000'000'000;  // ns
  auto ev = [&](traces::EventKind k, const char* name, int stage, double b, double e) {
    traces::Event x;
    x.kind = k;
    x.name = name;
    x.lane = traces::Lane::compute;
    x.stage = stage;
    x.op = stage > 0 ? Op::layer_fwd : Op::none;
    x.start_ns = static_cast<int64_t>(b * s1);
    x.end_ns = static_cast<int64_t>(e * s1);
    t.events.push_back(x);
  };
  ev(traces::EventKind::phase, traces::kStepPhase, -1, 0.0, 9.0);
  ev(traces::EventKind::compute, "stage1", 1, 0.5, 3.5);
  ev(traces::EventKind::compute, "stage2", 2, 3.5, 8.5);
  ev(traces::EventKind::phase, traces::kStepPhase, -1, 10.0, 11.5);
  ev(traces::EventKind::compute, "stage1", 1, 10.0, 10.4);
  ev(traces::EventKind::compute, "stage2", 2, 10.4, 11.5);
  const Validation v = validate_as_plan(s, t);
  const ValidationTerm* step = term(v, "step_s");
  const ValidationTerm* st1 = term(v, "time:stage1");
  const ValidationTerm* st2 = term(v, "time:stage2");
  ASSERT_TRUE(step && st1 && st2);
  ASSERT_TRUE(step->measured && st1->measured && st2->measured);
  EXPECT_DOUBLE_EQ(*step->measured, 1.5);
  EXPECT_NEAR(*st1->measured, 0.4, 1e-9);
  EXPECT_NEAR(*st2->measured, 1.1, 1e-9);
  EXPECT_LE(*st1->measured + *st2->measured, *step->measured + 1e-9);  // the stages fit in their step
}

std::string notes_of(const Validation& v) {
  std::string all;
  for (const auto& n : v.notes) all += n + "\n";
  return all;
}

// tiny at 4K, sparse with a budget of 2 pages: chunks of 8 query pages, one resident layer.
simulator::Scenario tiny_4k_sparse(double overlap) {
  simulator::Scenario s = tiny_2k_offload();
  s.config.context_tokens = 4096;
  s.config.attention = step::Attention::sparse;
  s.config.page_budget = 2;
  s.config.selection_overlap = overlap;
  return s;
}

// The implied overlap inverts the union model: fed the unions the model gives at an overlap, it
// gives one no larger, at which the model covers every one of them; chunks whose prefix caps the
// union (prefix <= B x query pages) say nothing and are left out.
TEST(ImpliedOverlap, InvertsTheUnionModelAndCoversTheLargestUnion) {
  for (double ov : {0.0, 0.14, 0.5, 0.75, 1.0}) {
    const simulator::Scenario s = tiny_4k_sparse(ov);
    const step::Geometry g = step::geometry(s.model, s.config);
    ASSERT_EQ(g.q, 8);
    std::vector<step::MeasuredUnion> unions;
    int64_t informative = 0;
    for (int64_t c = 0; c < g.n; ++c) {
      unions.push_back({c, 0, step::union_pages(g, c)});
      informative += g.prefix_pages(c) > g.B * g.own_pages(c);
    }
    const step::ImpliedOverlap io = step::implied_overlap(g, unions);
    EXPECT_EQ(io.pairs, informative) << ov;
    EXPECT_GT(io.pairs, 0) << ov;
    EXPECT_LE(io.at_largest, ov + 1e-12) << ov;
    EXPECT_GE(io.at_largest, ov - 0.08) << ov;  // the model rounds its union to whole pages
    simulator::Scenario again = s;
    again.config.selection_overlap = io.at_largest;
    const step::Geometry g2 = step::geometry(again.model, again.config);
    for (const auto& u : unions) EXPECT_GE(step::union_pages(g2, u.chunk), u.pages) << ov << " chunk " << u.chunk;
  }
  // Disjoint selections (B per query page, none shared): 0. Beyond what the model can give
  // (per-KV-head selections): held at 0. Out-of-range chunks are ignored.
  const simulator::Scenario s = tiny_4k_sparse(0.75);
  const step::Geometry g = step::geometry(s.model, s.config);
  EXPECT_DOUBLE_EQ(step::implied_overlap(g, {{g.n - 1, 0, g.B * g.q}}).at_largest, 0.0);
  EXPECT_DOUBLE_EQ(step::implied_overlap(g, {{g.n - 1, 0, 4 * g.B * g.q}}).at_largest, 0.0);
  EXPECT_DOUBLE_EQ(step::implied_overlap(g, {{g.n - 1, 0, g.B}}).at_largest, 1.0);
  EXPECT_EQ(step::implied_overlap(g, {{g.n, 0, 3}, {-1, 0, 3}, {0, 0, 3}}).pairs, 0);
  // Dense: nothing to imply.
  simulator::Scenario d = s;
  d.config.attention = step::Attention::dense;
  EXPECT_EQ(step::implied_overlap(step::geometry(d.model, d.config), {{g.n - 1, 0, 6}}).pairs, 0);
}

// validate reads the run's unions from its record: it states the overlap they imply, and when the
// sparse pools disagree with the plan's assumption, it names the overlap to re-plan with.
TEST(Validation, SparsePoolsThatDisagreeNameTheOverlapTheRunsUnionsImply) {
  const simulator::Scenario s = tiny_4k_sparse(0.75);
  const step::Geometry g = step::geometry(s.model, s.config);
  const step::PageCounts pc = simulator::page_counts(s);
  simulator::Scenario in_place = s;
  in_place.config.selection_memory = step::SelectionMemory::device;
  const simulator::Summary copies = simulator::simulate_events(in_place, traces::Detail::step).summary;
  auto judge = [&](int64_t measured_union) {
    traces::Trace t = testing::cuda_record_as_predicted(s);
    Json& m = t.metadata.extra["measured"];
    Json unions = Json::array();
    int64_t slot = 0;
    for (int64_t c = 0; c < g.n; ++c) {
      const int64_t u = std::min(g.prefix_pages(c), measured_union);
      unions.push_back({{"chunk", c}, {"layer", 0}, {"pages", u}});
      slot = std::max(slot, u + g.own_pages(c));
    }
    m["union_pages"] = unions;
    m["kv_pool_high_water_pages"] = slot;  // one resident layer: one slot
    m["grad_pool_high_water_pages"] = slot;
    m["kv_page_bytes"] = pc.kv_page_bytes;
    m["grad_page_bytes"] = pc.grad_page_bytes;
    m["host_kv_pages"] = pc.host_kv_pages;
    m["host_grad_pages"] = pc.host_grad_pages;
    m["h2d_bytes"] = copies.h2d_bytes;  // as modelled (the summaries read in place, as the executor does)
    m["d2h_bytes"] = copies.d2h_bytes;
    return validate_as_plan(s, t);
  };
  auto note_with = [](const Validation& v, const std::string& text) {
    for (const auto& n : v.notes)
      if (n.find(text) != std::string::npos) return true;
    return false;
  };
  {  // as modelled: 6 pages of union (2 x (1 + 7 x 0.25), rounded), the pools as predicted
    const Validation v = judge(6);
    ASSERT_EQ(pc.kv_pool_pages, 6 + 8);
    EXPECT_EQ(term(v, "kv_pool_pages")->ok(), std::optional<bool>(true));
    EXPECT_TRUE(note_with(v, "imply --selection-overlap 0.71 at the largest")) << notes_of(v);
    EXPECT_FALSE(note_with(v, "re-plan with")) << notes_of(v);
  }
  {  // nearly disjoint: 14 pages of union, 1 - (14 / 2 - 1) / 7 = 0.142..., the pools 22 pages
    const Validation v = judge(14);
    EXPECT_EQ(term(v, "kv_pool_pages")->ok(), std::optional<bool>(false));
    EXPECT_NE(term(v, "kv_pool_pages")->note.find("the run's unions imply 0.14"), std::string::npos);
    EXPECT_TRUE(note_with(v, "re-plan with --selection-overlap 0.14 ")) << notes_of(v);
  }
}

// A CUPTI trace's times are judged only against the profile of the GPU that ran (the trace's
// gpu_name among the profile's cuda_device_names); an H100's run against an H200 plan is "not
// comparable" and names the profile to plan with; a run on the emulated device has no time judged.
TEST(Validation, CuptiTimesAreJudgedOnlyAgainstTheProfileOfTheGpuThatRan) {
  const simulator::Scenario s = tiny_2k_offload();
  ASSERT_EQ(s.gpu.id, "h200");
  auto step_term = [&](const std::string& gpu_name, bool emulated) {
    traces::Trace t = cuda_run(s, std::nullopt);
    t.metadata.extra["gpu_name"] = gpu_name;
    if (emulated) t.metadata.extra["measured"]["emulated_device"] = true;
    const Validation v = validate_as_plan(s, t);
    const ValidationTerm* st = term(v, "step_s");
    EXPECT_NE(st, nullptr);
    return st ? *st : ValidationTerm{};
  };
  const ValidationTerm same = step_term("NVIDIA H200", false);
  ASSERT_TRUE(same.measured.has_value()) << same.note;
  EXPECT_EQ(same.ok(), std::optional<bool>(true));

  const ValidationTerm other = step_term("NVIDIA H100 80GB HBM3", false);
  EXPECT_FALSE(other.measured.has_value());
  EXPECT_NE(other.note.find("measured on NVIDIA H100 80GB HBM3"), std::string::npos) << other.note;
  EXPECT_NE(other.note.find("--gpu h100-sxm"), std::string::npos) << other.note;

  const ValidationTerm unknown = step_term("NVIDIA Some Future GPU", false);
  EXPECT_FALSE(unknown.measured.has_value());
  EXPECT_NE(unknown.note.find("plan with the profile of the GPU that ran"), std::string::npos) << unknown.note;

  const ValidationTerm emulated = step_term("oomb emulated CUDA device (H200 limits)", true);
  EXPECT_FALSE(emulated.measured.has_value());
  EXPECT_NE(emulated.note.find("emulated CUDA device"), std::string::npos) << emulated.note;
  // Memory is still judged on the emulated device.
  traces::Trace t = cuda_run(s, std::nullopt);
  t.metadata.extra["measured"]["emulated_device"] = true;
  const Validation v = validate_as_plan(s, t);
  const ValidationTerm* peak = term(v, "peak_device_bytes");
  ASSERT_NE(peak, nullptr);
  EXPECT_EQ(peak->ok(), std::optional<bool>(true));
}

// Event order (issue 42): a trace on the emulated device has no GPU times, its order is still the
// program's. The passes of the compute stream must run in the simulator's order, and each copy must
// respect its pass: an onload ends before the pass that reads it ends, an offload starts after the
// pass that wrote it starts.
TEST(Validation, PassesRunInTheSimulatorsOrderAndCopiesRespectTheirPass) {
  const simulator::Scenario s = tiny_2k_offload();
  // A run that did exactly what the simulator schedules, with the simulator's own clock.
  traces::Trace t = cuda_run(s, std::nullopt);
  t.metadata.detail = traces::Detail::layer;
  t.events = simulator::simulate_events(s, traces::Detail::layer).trace.events;
  auto order = [&](const traces::Trace& tr) {
    const Validation v = validate_as_plan(s, tr);
    const ValidationTerm* passes = term(v, "order:passes");
    const ValidationTerm* copies = term(v, "order:copies_out_of_order");
    EXPECT_NE(passes, nullptr);
    return std::make_pair(passes ? *passes : ValidationTerm{}, copies ? *copies : ValidationTerm{});
  };
  const auto [passes, copies] = order(t);
  // tiny has 2 layers; 4 chunks: per chunk embedding + 2 fills, then embedding, 2 recomputes, head,
  // 2 backwards and the embedding's gradient; a GPU optimizer's update last.
  ASSERT_NE(term(validate_as_plan(s, t), "order:copies_out_of_order"), nullptr);
  EXPECT_EQ(passes.predicted, 4 * 3 + 4 * 7 + (s.config.optimizer == step::Optimizer::gpu ? 1 : 0));
  EXPECT_EQ(passes.ok(), std::optional<bool>(true)) << passes.note;
  EXPECT_EQ(copies.ok(), std::optional<bool>(true)) << copies.note;
  EXPECT_NE(copies.note.find(" copies tagged with a layer pass"), std::string::npos) << copies.note;
  EXPECT_EQ(copies.note.rfind("0 copies", 0), std::string::npos) << "the plan offloads: " << copies.note;

  auto find = [](traces::Trace& tr, traces::EventKind k, int stage, int64_t chunk, int64_t layer, Op op) {
    for (auto& e : tr.events)
      if (e.kind == k && e.stage == stage && e.chunk == chunk && e.layer == layer && e.op == op) return &e;
    ADD_FAILURE() << "no " << op << " event of chunk " << chunk << " layer " << layer;
    static traces::Event none;
    return &none;
  };
  {
    // The last chunk's two layer backwards in the wrong order (layer 0 before layer 1).
    traces::Trace bad = t;
    traces::Event* b1 = find(bad, traces::EventKind::compute, 2, 3, 1, Op::layer_bwd);
    traces::Event* b0 = find(bad, traces::EventKind::compute, 2, 3, 0, Op::layer_bwd);
    std::swap(b1->start_ns, b0->start_ns);
    std::swap(b1->end_ns, b0->end_ns);
    const ValidationTerm p = order(bad).first;
    EXPECT_EQ(p.ok(), std::optional<bool>(false));
    EXPECT_NE(p.note.find("ran layer_bwd stage 2 chunk 3 layer 0, predicted layer_bwd stage 2 chunk 3 layer 1"),
              std::string::npos)
        << p.note;
  }
  {
    // One pass more than scheduled: chunk 0's layer 1 recomputed again after the step's last pass.
    traces::Trace extra = t;
    traces::Event again = *find(extra, traces::EventKind::compute, 2, 0, 1, Op::layer_recompute);
    int64_t last = 0;
    for (const auto& e : extra.events) last = std::max(last, e.end_ns);
    again.start_ns = last + 1;
    again.end_ns = last + 2;
    extra.events.push_back(again);
    const ValidationTerm p = order(extra).first;
    EXPECT_EQ(p.measured, std::optional<double>(p.predicted + 1));
    EXPECT_EQ(p.ok(), std::optional<bool>(false));
    EXPECT_NE(p.note.find("ran layer_recompute stage 2 chunk 0 layer 1, predicted nothing more"), std::string::npos)
        << p.note;
  }
  {
    // An onload that ends after the pass that reads it (a missing stream wait on a GPU).
    traces::Trace late = t;
    const traces::Event* pass = find(late, traces::EventKind::compute, 1, 1, 0, Op::layer_fwd);
    traces::Event* in = find(late, traces::EventKind::copy_h2d, 1, 1, 0, Op::layer_fwd);
    in->end_ns = pass->end_ns + 1;
    const ValidationTerm c = order(late).second;
    EXPECT_EQ(c.measured, std::optional<double>(1));
    EXPECT_EQ(c.ok(), std::optional<bool>(false));
    EXPECT_NE(c.note.find("the onload of layer_fwd stage 1 chunk 1 layer 0 ended after its pass"), std::string::npos)
        << c.note;
  }
  {
    // An offload that starts before the pass that writes its pages.
    traces::Trace early = t;
    const traces::Event* pass = find(early, traces::EventKind::compute, 1, 0, 1, Op::layer_fwd);
    traces::Event* out = find(early, traces::EventKind::copy_d2h, 1, 0, 1, Op::layer_fwd);
    out->start_ns = pass->start_ns - 1;
    const ValidationTerm c = order(early).second;
    EXPECT_EQ(c.ok(), std::optional<bool>(false));
    EXPECT_NE(c.note.find("the offload of layer_fwd stage 1 chunk 0 layer 1 started before its pass"),
              std::string::npos)
        << c.note;
  }
  {
    // A trace without passes (a record only) has nothing to order: not comparable, not a failure.
    const traces::Trace empty = cuda_run(s, std::nullopt);
    const ValidationTerm p = order(empty).first;
    EXPECT_FALSE(p.measured.has_value());
    EXPECT_EQ(term(validate_as_plan(s, empty), "order:copies_out_of_order"), nullptr);
  }
}

}  // namespace
}  // namespace oomb::validation
