#include "view/report.h"

#include <gtest/gtest.h>

#include <iterator>
#include <string>

#include "core/error.h"
#include "view/palette.h"

namespace oomb::view {
using traces::Trace;
using traces::Event;
using traces::EventKind;
using traces::Detail;
namespace {

constexpr size_t kMaxHugeReportBytes = 5u << 20;  // a 200k-event trace must still make a small file
constexpr const char* kSvgNs = "xmlns=\"http://www.w3.org/2000/svg\"";

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + needle.size())) ++n;
  return n;
}

Event ev(EventKind kind, int stage, int64_t chunk, int64_t start, int64_t end, const std::string& op,
         int64_t bytes = 0) {
  Event e;
  e.kind = kind;
  e.name = op;
  e.lane = kind == EventKind::compute    ? traces::Lane::compute
           : kind == EventKind::copy_h2d ? traces::Lane::h2d
           : kind == EventKind::copy_d2h ? traces::Lane::d2h
                                         : traces::Lane::none;
  e.start_ns = start;
  e.end_ns = end;
  e.stage = stage;
  e.chunk = chunk;
  e.op = find_op(op).value_or(Op::none);
  e.bytes = bytes;
  return e;
}

// Three chunks: stage 1 forward (compute 100 ns each, d2h of its output overlapping the next
// chunk), stage 2 in reverse (compute, h2d prefetch starting 20 ns before). Times are scaled and
// shifted, as a measured trace of the same plan would be.
Trace three_chunks(double scale, int64_t offset, const std::string& source) {
  auto t = [&](int64_t ns) { return offset + static_cast<int64_t>(static_cast<double>(ns) * scale); };
  Trace tr;
  tr.metadata.source = source;
  tr.metadata.detail = Detail::chunk;
  for (int64_t c = 0; c < 3; ++c) {
    tr.events.push_back(ev(EventKind::compute, 1, c, t(100 * c), t(100 * c + 100), "layer_fwd"));
    tr.events.push_back(ev(EventKind::copy_d2h, 1, c, t(100 * c + 50), t(100 * c + 110), "layer_fwd", 1 << 20));
  }
  for (int64_t c = 2; c >= 0; --c) {
    const int64_t s = 300 + 100 * (2 - c);
    tr.events.push_back(ev(EventKind::compute, 2, c, t(s), t(s + 100), "layer_bwd"));
    tr.events.push_back(ev(EventKind::copy_h2d, 2, c, t(s - 20), t(s + 40), "layer_bwd", 3 << 20));
  }
  tr.events.push_back(ev(EventKind::alloc, 1, 2, t(200), t(200), "kv_pool", 1 << 30));  // no lane: not drawn
  for (int64_t i = 0; i <= 12; ++i)
    tr.memory.push_back({t(50 * i), (int64_t{1} << 30) + i * (int64_t{1} << 26), int64_t{3} << 29, i});
  tr.summary = summarize(tr);
  return tr;
}

ReportInput input(const Trace& p, const Trace* m) {
  ReportInput in;
  in.title = "Report <&> \"quoted\"";
  in.facts = {{"model", "tiny"}, {"a<b", "x & y"}};
  in.predicted = &p;
  in.measured = m;
  ReportTerm good{"peak_device_bytes", 2e9, 2.1e9, 0.05, 0.10, true, "bytes", ""};
  ReportTerm bad{"step_s", 1.5, 2.0, 1.0 / 3.0, 0.10, false, "s", "slow <link>"};
  ReportTerm none{"device_pool_pages", 4096, std::nullopt, 0, 0, std::nullopt, "pages", ""};
  in.terms = {good, bad, none};
  return in;
}

TEST(Report, SectionsChartsAndEscaping) {
  const Trace p = three_chunks(1.0, 0, "simulator");
  const Trace m = three_chunks(1.1, 1000, "cpu");
  const std::string h = html_report(input(p, &m));

  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(h.find("<meta charset=\"utf-8\">"), std::string::npos);
  EXPECT_NE(h.find("<h1>Report &lt;&amp;&gt; &quot;quoted&quot;</h1>"), std::string::npos);
  EXPECT_EQ(h.find("<&>"), std::string::npos);
  EXPECT_NE(h.find("a&lt;b"), std::string::npos);
  EXPECT_NE(h.find("x &amp; y"), std::string::npos);
  EXPECT_NE(h.find("slow &lt;link&gt;"), std::string::npos);
  EXPECT_NE(h.find("Memory over time"), std::string::npos);
  EXPECT_NE(h.find("Stream timeline"), std::string::npos);
  EXPECT_NE(h.find("Terms"), std::string::npos);

  EXPECT_EQ(count(h, "<svg"), 2u);  // memory chart, stream timeline
  EXPECT_EQ(count(h, "</svg>"), 2u);
  EXPECT_EQ(count(h, "class=\"series\""), 4u);           // predicted device + host: line + legend each
  EXPECT_EQ(count(h, "class=\"series measured\""), 4u);  // measured, the same, dashed
  EXPECT_NE(h.find("measured (cpu)"), std::string::npos);

  // Small trace: the whole step, every lane event of both traces, nothing for the alloc.
  EXPECT_EQ(count(h, "class=\"ev\""), 2 * 12u);
  EXPECT_NE(h.find("The whole step"), std::string::npos);
}

// One palette (view/palette.h) for the report and the GUI: the passes keep fixed colours
// (forward blue, recompute teal, backward red, the LM head purple), page onloads green and
// write-backs yellow by name, and any other op one of the rest by a hash of its name that is the
// same everywhere; the report draws each op in its palette colour.
TEST(Palette, PassesHaveFixedColoursAndOtherOpsAStableOne) {
  EXPECT_EQ(hex(op_color("layer_fwd")), "#4e79a7");
  EXPECT_EQ(op_color("stage1"), op_color("layer_fwd"));
  EXPECT_EQ(hex(op_color("layer_recompute")), "#76b7b2");
  EXPECT_EQ(hex(op_color("layer_bwd")), "#e15759");
  EXPECT_EQ(op_color("stage2"), op_color("layer_bwd"));
  EXPECT_EQ(hex(op_color("lm_head")), "#b07aa1");
  EXPECT_EQ(op_color("kv_onload"), op_color("kv"));
  EXPECT_EQ(op_color("memcpy_h2d"), op_color("kv"));
  EXPECT_EQ(op_color("dkv_writeback"), op_color("dkv"));
  EXPECT_EQ(op_color("memcpy_d2h"), op_color("dkv"));
  EXPECT_NE(op_color("kv"), op_color("dkv"));
  // Every pass the simulator schedules has a colour of its own kind: no two of forward, recompute,
  // backward, the head and the embedding share one.
  const Rgb passes[] = {op_color("layer_fwd"), op_color("layer_recompute"), op_color("layer_bwd"), op_color("lm_head"),
                        op_color("embedding")};
  for (size_t i = 0; i < std::size(passes); ++i)
    for (size_t j = i + 1; j < std::size(passes); ++j) EXPECT_NE(passes[i], passes[j]) << i << " " << j;
  // Any other name: FNV-1a of the name (not std::hash, which differs between libraries).
  EXPECT_EQ(hex(op_color("nccl_allreduce")), hex(op_color(std::string("nccl_") + "allreduce")));
  EXPECT_EQ(hex(op_color("nccl_allreduce")), "#86bcb6");  // FNV-1a("nccl_allreduce") mod 7 = 4
  EXPECT_EQ(hex(category_color("kv_pages")), "#ff9da7");
  EXPECT_EQ(hex(category_color("runtime_reserve")), "#6e6e78");

  const Trace p = three_chunks(1.0, 0, "simulator");
  const std::string h = html_report(input(p, nullptr));
  EXPECT_NE(h.find("fill=\"" + hex(op_color("layer_fwd")) + "\""), std::string::npos);
  EXPECT_NE(h.find("fill=\"" + hex(op_color("layer_bwd")) + "\""), std::string::npos);
  EXPECT_NE(h.find("background:" + hex(op_color("layer_bwd"))), std::string::npos);
}

TEST(Report, TermsTable) {
  const Trace p = three_chunks(1.0, 0, "simulator");
  const std::string h = html_report(input(p, nullptr));
  EXPECT_EQ(count(h, "✓"), 1u);
  EXPECT_EQ(count(h, "✗"), 1u);
  EXPECT_EQ(count(h, "<tr class=\"fail\">"), 1u);
  EXPECT_NE(h.find("<td class=\"name\">peak_device_bytes</td><td class=\"num\">1.86 GiB</td>"
                   "<td class=\"num\">1.96 GiB</td><td class=\"num\">+5.0%</td><td class=\"num\">±10.0%</td>"),
            std::string::npos);
  EXPECT_NE(h.find("<td class=\"name\">step_s</td><td class=\"num\">1.50 s</td><td class=\"num\">2.00 s</td>"
                   "<td class=\"num\">+33.3%</td>"),
            std::string::npos);
  EXPECT_NE(h.find("<td class=\"name\">device_pool_pages</td><td class=\"num\">4096 pages</td>"
                   "<td class=\"num\">—</td><td class=\"num\">—</td><td class=\"num\">—</td><td>—</td>"),
            std::string::npos);
  EXPECT_EQ(count(h, "class=\"series measured\""), 0u);
}

TEST(Report, SelfContained) {
  const Trace p = three_chunks(1.0, 0, "simulator");
  const Trace m = three_chunks(1.1, 1000, "cpu");
  std::string h = html_report(input(p, &m));
  EXPECT_EQ(count(h, kSvgNs), 2u);
  for (size_t at = h.find(kSvgNs); at != std::string::npos; at = h.find(kSvgNs))
    h.erase(at, std::string(kSvgNs).size());
  EXPECT_EQ(h.find("http://"), std::string::npos);
  EXPECT_EQ(h.find("https://"), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  EXPECT_EQ(h.find("<img"), std::string::npos);
  EXPECT_EQ(h.find("@import"), std::string::npos);
  EXPECT_EQ(h.find("url("), std::string::npos);
}

// A multi-rank run: a ranks table (file, found, verdict, step, peak, every collective any rank
// recorded, which rank binds) and every rank's terms side by side; a missing rank shows as missing.
TEST(Report, RanksOfAMultiRankRun) {
  const Trace p = three_chunks(1.0, 0, "simulator");
  const Trace m = three_chunks(1.1, 1000, "cpu");
  ReportInput in = input(p, &m);
  {
    const std::string h = html_report(in);  // one process: no rank sections
    EXPECT_EQ(h.find("Ranks ("), std::string::npos);
    EXPECT_EQ(h.find("Terms by rank"), std::string::npos);
    EXPECT_NE(h.find("<h2>Terms</h2>"), std::string::npos);
  }
  ReportTerm peak0{"peak_device_bytes", 1 << 20, double(1 << 20), 0, 0.01, true, "bytes", ""};
  ReportTerm calls{"tp_allreduces", 64, 64.0, 0, 0, true, "", ""};
  ReportTerm peak1 = peak0;
  peak1.measured = double(3 << 19);  // rank 1 held 1.5 MiB: beyond tolerance
  peak1.error = 0.5;
  peak1.ok = false;
  ReportRank r0{0, "runs/t.json", true, true, "", 1.25, int64_t{1} << 20,
                {{"tp_allreduces", 64, ""}, {"tp_allreduce_bytes", 7962624, "bytes"}, {"tp_allreduce_s", 0.5, "s"}},
                false, {peak0, calls}};
  ReportRank r1{1, "runs/t.rank1.json", true, false, "", 1.75, int64_t{3} << 19,
                {{"tp_allreduces", 64, ""}, {"tp_allreduce_bytes", 7962624, "bytes"}, {"tp_allreduce_s", 0.25, "s"},
                 {"tp_allreduce_wait_s", 0.125, "s"}},
                true, {peak1, calls}};
  ReportRank r2{2, "runs/t.rank2.json", false, std::nullopt, "missing: runs/t.rank2.json <not written>", {}, {}, {},
                false, {}};
  in.ranks = {r0, r1, r2};
  const std::string h = html_report(in);
  EXPECT_NE(h.find("<h2>Ranks (3 processes)</h2>"), std::string::npos);
  EXPECT_NE(h.find("1 of 3 ranks within tolerance; 1 trace missing; the step binds on rank 1 (the slowest of the "
                   "ranks found, 1.75 s)"),
            std::string::npos);
  // The columns: every collective any rank recorded, in first-seen order (rank 1's extra figure last).
  EXPECT_NE(h.find("<th class=\"num\">tp_allreduces</th><th class=\"num\">tp_allreduce_bytes</th><th "
                   "class=\"num\">tp_allreduce_s</th><th class=\"num\">tp_allreduce_wait_s</th><th>binds</th>"),
            std::string::npos);
  EXPECT_NE(h.find("<tr><td class=\"num\">0</td><td class=\"name\">runs/t.json</td><td>yes</td><td><span "
                   "class=\"ok\">✓</span></td><td class=\"num\">1.25 s</td><td class=\"num\">1.00 MiB</td><td "
                   "class=\"num\">64</td><td class=\"num\">7.59 MiB</td><td class=\"num\">500.00 ms</td><td "
                   "class=\"num\">—</td><td></td></tr>"),
            std::string::npos);
  EXPECT_NE(h.find("<td class=\"num\">125.00 ms</td><td><span class=\"binds\">binds</span></td></tr>"),
            std::string::npos);
  EXPECT_EQ(count(h, "class=\"binds\""), 1u);
  // The missing rank: said, shaded, with its note escaped; no figures.
  EXPECT_NE(h.find("<tr class=\"fail\"><td class=\"num\">2</td><td class=\"name\">runs/t.rank2.json</td><td><span "
                   "class=\"bad\">MISSING</span></td><td>—</td>"),
            std::string::npos);
  EXPECT_NE(h.find("missing: runs/t.rank2.json &lt;not written&gt;"), std::string::npos);
  // Every rank's terms: rank 0's table stays, and the side-by-side one marks what differs and fails.
  EXPECT_NE(h.find("<h2>Terms (rank 0)</h2>"), std::string::npos);
  EXPECT_NE(h.find("<h2>Terms by rank</h2>"), std::string::npos);
  EXPECT_NE(h.find("<th class=\"num\">rank 1 (binds)</th><th class=\"num\">rank 2 (missing)</th>"), std::string::npos);
  const size_t by_rank = h.find("<h2>Terms by rank</h2>");
  const std::string table = h.substr(h.find("<tbody>", by_rank));
  EXPECT_NE(table.find("<tr class=\"fail\"><td class=\"name\">peak_device_bytes</td><td class=\"num\">1.00 "
                       "MiB</td><td class=\"num\">1.00 MiB <span class=\"muted\">+0.0%</span> <span "
                       "class=\"ok\">✓</span></td><td class=\"num failcell\">1.50 MiB <span "
                       "class=\"muted\">+50.0%</span> <span class=\"bad\">✗</span></td><td class=\"num "
                       "muted\">—</td><td><b>differs</b></td></tr>"),
            std::string::npos);
  EXPECT_NE(table.find("<tr><td class=\"name\">tp_allreduces</td>"), std::string::npos);  // the same on both: not marked
  EXPECT_EQ(count(table, "<b>differs</b>"), 1u);
  EXPECT_EQ(h.find("<script"), std::string::npos);
}

TEST(Report, ExplicitWindowDrawsOverlappingEventsOnly) {
  const Trace p = three_chunks(1.0, 0, "simulator");
  const Trace m = three_chunks(1.1, 1000, "cpu");
  ReportInput in = input(p, &m);
  in.chunk_begin = in.chunk_end = 2;
  // Chunk 2 spans [200, 400): its 4 lane events, plus stage 1's d2h of chunk 1 [150, 210) and
  // stage 2's h2d of chunk 1 [380, 440) that overlap it. Not: compute of chunk 1 ending at 200,
  // compute of stage 2 chunk 1 starting at 400, the alloc. Same for the measured trace.
  const std::string h = html_report(in);
  EXPECT_EQ(count(h, "class=\"ev\""), 2 * 6u);
  EXPECT_NE(h.find("Chunk 2 of 0..2"), std::string::npos);
  EXPECT_NE(h.find("stage 2, chunk 2"), std::string::npos);  // tooltip
  EXPECT_NE(h.find("duration 60 ns, bytes 1.00 MiB"), std::string::npos) << "copies show their bytes";

  in.chunk_begin = 0;
  in.chunk_end = 0;
  in.measured = nullptr;
  // Chunk 0: [0, 100) in stage 1 and [500, 600) in stage 2, so the span covers everything.
  EXPECT_EQ(count(html_report(in), "class=\"ev\""), 12u);

  in.chunk_begin = 2;
  in.chunk_end = 1;
  EXPECT_THROW(html_report(in), Error);
  in.chunk_begin = 7;
  in.chunk_end = 7;
  const std::string empty = html_report(in);
  EXPECT_EQ(count(empty, "class=\"ev\""), 0u);
  EXPECT_NE(empty.find("no events in this window"), std::string::npos);
}

// n chunks x `layers` layers per stage, stage 2 in reverse: compute, h2d and d2h per layer.
Trace layered(int64_t chunks, int64_t layers, int64_t layer_ns, bool stage2_reversed = true) {
  Trace t;
  t.metadata.source = "simulator";
  t.metadata.detail = Detail::layer;
  int64_t now = 0;
  for (int stage = 1; stage <= 2; ++stage) {
    for (int64_t i = 0; i < chunks; ++i) {
      const int64_t c = stage == 2 && stage2_reversed ? chunks - 1 - i : i;
      for (int64_t l = 0; l < layers; ++l) {
        const std::string op = stage == 1 ? "layer_fwd" : "layer_bwd";
        Event e = ev(EventKind::compute, stage, c, now, now + layer_ns, op);
        e.layer = l;
        t.events.push_back(e);
        e = ev(EventKind::copy_h2d, stage, c, now, now + layer_ns / 2, op, 4096);
        e.layer = l;
        t.events.push_back(e);
        e = ev(EventKind::copy_d2h, stage, c, now + layer_ns / 2, now + layer_ns, op, 4096);
        e.layer = l;
        t.events.push_back(e);
        t.memory.push_back({now, 1000 + (now / layer_ns) % 7 * 100, 500, 0});
        now += layer_ns;
      }
    }
  }
  t.summary = summarize(t);
  return t;
}

TEST(Report, AutoWindow) {
  // Stage-1 order 0..9, stage-2 order 9..0: the last two of stage 1 and first two of stage 2.
  EXPECT_EQ(auto_chunk_window(layered(10, 8, 100)), std::make_pair(int64_t{8}, int64_t{9}));
  EXPECT_EQ(auto_chunk_window(layered(17, 3, 100)), std::make_pair(int64_t{15}, int64_t{16}));
  // Stage 2 forward: chunks 8, 9 and 0, 1 -> the range covering both.
  EXPECT_EQ(auto_chunk_window(layered(10, 8, 100, false)), std::make_pair(int64_t{0}, int64_t{9}));
  // Small traces are shown whole: at most 4 chunks, or few events.
  EXPECT_EQ(auto_chunk_window(layered(4, 50, 100)), std::make_pair(int64_t{-1}, int64_t{-1}));
  EXPECT_EQ(auto_chunk_window(layered(7, 1, 100)), std::make_pair(int64_t{-1}, int64_t{-1}));  // 42 events
  Trace no_chunks = layered(10, 8, 100);
  for (Event& e : no_chunks.events) e.chunk = -1;
  EXPECT_EQ(auto_chunk_window(no_chunks), std::make_pair(int64_t{-1}, int64_t{-1}));

  // The report uses it: chunks 8..9 hold 2 stages x 2 chunks x 8 layers x 3 lanes events.
  const Trace t = layered(10, 8, 100);
  ReportInput in;
  in.title = "auto";
  in.predicted = &t;
  const std::string h = html_report(in);
  EXPECT_EQ(count(h, "class=\"ev\""), 2u * 2 * 8 * 3);
  EXPECT_NE(h.find("Chunks 8..9 of 0..9: the last two chunks of stage 1"), std::string::npos);
}

TEST(Report, HugeTraceStaysBounded) {
  // 8 chunks x 2 stages x 4167 layers x 3 lanes = 200k events; the window (chunks 6..7) holds 50k.
  const Trace t = layered(8, 4167, 1000);
  ASSERT_GE(t.events.size(), 200000u);
  ReportInput in;
  in.title = "huge";
  in.predicted = &t;
  in.measured = &t;
  const std::string h = html_report(in);
  EXPECT_LT(h.size(), kMaxHugeReportBytes);
  const size_t rects = count(h, "class=\"ev\"");
  EXPECT_GT(rects, 0u);
  EXPECT_LT(rects, 2u * 3 * 2 * 1100);  // 2 sets x 3 lanes x ~2 rects per pixel
  EXPECT_NE(h.find("events merged"), std::string::npos);
  EXPECT_EQ(count(h, "<svg"), 2u);
}

}  // namespace
}  // namespace oomb::view
