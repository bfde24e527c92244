#include "traces/trace.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "core/error.h"
#include "core/files.h"

namespace oomb::traces {
namespace {

constexpr double kTol = 1e-12;  // relative errors below are exact ratios of small integers

// An event named `name` (its kind's name when empty); its op is the name when the name is an op
// (layer_fwd, lm_head, ...), none otherwise (a copy named "kv" or "dkv").
Event ev(EventKind kind, Lane lane, int64_t start, int64_t end, int stage = -1,
         const std::string& name = "", int64_t bytes = 0) {
  Event e;
  e.kind = kind;
  e.name = name.empty() ? std::string(to_string(kind)) : name;
  e.lane = lane;
  e.start_ns = start;
  e.end_ns = end;
  e.stage = stage;
  e.op = find_op(name).value_or(Op::none);
  e.bytes = bytes;
  return e;
}

// Every field set, including values (0) that sit next to the defaults (-1, "").
Trace full_trace() {
  Trace t;
  t.metadata.source = "cpu";
  t.metadata.device = "NVIDIA H200 (driver 570.86)";
  t.metadata.plan_digest = "sha256:0123abcd";
  t.metadata.git_commit = "ce135a0";
  t.metadata.time = "2025-11-29T15:20:00Z";
  t.metadata.command = "oomb run --plan \"p.json\"";
  t.metadata.detail = Detail::op;
  t.metadata.dropped_records = 3;
  t.metadata.extra = Json{{"calibration", "cpu-1"}, {"driver", 570}};

  Event a;
  a.kind = EventKind::compute;
  a.name = "attention_bwd";
  a.lane = Lane::compute;
  a.start_ns = 17;
  a.end_ns = 1041;
  a.bytes = 3;
  a.flops = 1.5e9 + 0.25;
  a.stage = 2;
  a.chunk = 7;
  a.layer = 27;
  a.op = Op::layer_bwd;
  Event b;  // all defaults, zero length
  b.kind = EventKind::phase;
  b.start_ns = 5;
  b.end_ns = 5;
  Event c;
  c.kind = EventKind::copy_h2d;
  c.name = "kv_prefix";
  c.lane = Lane::h2d;
  c.start_ns = 1;
  c.end_ns = 3;
  c.bytes = 4096;
  c.stage = 1;
  c.chunk = 0;
  c.layer = 0;
  c.op = Op::layer_fwd;
  t.events = {a, b, c};
  t.memory = {{0, 100, 200, 1}, {9, 300, 50, 2}};
  t.summary = {1, 2, 3, 4, 5, 6, 7, 8};
  return t;
}

void expect_same(const Trace& x, const Trace& y) {
  EXPECT_EQ(x.metadata.source, y.metadata.source);
  EXPECT_EQ(x.metadata.device, y.metadata.device);
  EXPECT_EQ(x.metadata.plan_digest, y.metadata.plan_digest);
  EXPECT_EQ(x.metadata.git_commit, y.metadata.git_commit);
  EXPECT_EQ(x.metadata.time, y.metadata.time);
  EXPECT_EQ(x.metadata.command, y.metadata.command);
  EXPECT_EQ(x.metadata.detail, y.metadata.detail);
  EXPECT_EQ(x.metadata.dropped_records, y.metadata.dropped_records);
  EXPECT_EQ(x.metadata.extra, y.metadata.extra);
  ASSERT_EQ(x.events.size(), y.events.size());
  for (size_t i = 0; i < x.events.size(); ++i) {
    SCOPED_TRACE("event " + std::to_string(i));
    const Event& a = x.events[i];
    const Event& b = y.events[i];
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.lane, b.lane);
    EXPECT_EQ(a.start_ns, b.start_ns);
    EXPECT_EQ(a.end_ns, b.end_ns);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.flops, b.flops);  // exact: JSON doubles are written round-trippable
    EXPECT_EQ(a.stage, b.stage);
    EXPECT_EQ(a.chunk, b.chunk);
    EXPECT_EQ(a.layer, b.layer);
    EXPECT_EQ(a.op, b.op);
  }
  ASSERT_EQ(x.memory.size(), y.memory.size());
  for (size_t i = 0; i < x.memory.size(); ++i) {
    EXPECT_EQ(x.memory[i].t_ns, y.memory[i].t_ns);
    EXPECT_EQ(x.memory[i].device_bytes, y.memory[i].device_bytes);
    EXPECT_EQ(x.memory[i].host_bytes, y.memory[i].host_bytes);
    EXPECT_EQ(x.memory[i].pool_pages_used, y.memory[i].pool_pages_used);
  }
  EXPECT_EQ(x.summary.peak_device_bytes, y.summary.peak_device_bytes);
  EXPECT_EQ(x.summary.peak_host_bytes, y.summary.peak_host_bytes);
  EXPECT_EQ(x.summary.h2d_bytes, y.summary.h2d_bytes);
  EXPECT_EQ(x.summary.d2h_bytes, y.summary.d2h_bytes);
  EXPECT_EQ(x.summary.step_ns, y.summary.step_ns);
  EXPECT_EQ(x.summary.compute_busy_ns, y.summary.compute_busy_ns);
  EXPECT_EQ(x.summary.exposed_copy_ns, y.summary.exposed_copy_ns);
  EXPECT_EQ(x.summary.pool_pages_peak, y.summary.pool_pages_peak);
}

// Runs f, expects an oomb::Error with this where and key, and returns it for further checks.
template <class F>
Error expect_error(F&& f, const std::string& where, const std::string& key) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), where);
    EXPECT_EQ(e.key(), key);
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    return e;
  }
  ADD_FAILURE() << "expected oomb::Error at '" << key << "'";
  return Error("none");
}

std::string temp_path(const std::string& name) { return std::string(OOMB_BINARY_DIR) + "/trace_test_" + name; }

TEST(TraceEnums, NamesRoundTripAndUnknownOnesListValid) {
  for (auto k : {EventKind::compute, EventKind::copy_h2d, EventKind::copy_d2h, EventKind::alloc, EventKind::free,
                 EventKind::phase})
    EXPECT_EQ(event_kind_from_string(to_string(k), "x"), k);
  for (auto d : {Detail::step, Detail::chunk, Detail::layer, Detail::op})
    EXPECT_EQ(detail_from_string(to_string(d), "x"), d);
  EXPECT_STREQ(to_string(EventKind::copy_d2h), "copy_d2h");
  EXPECT_STREQ(to_string(Detail::chunk), "chunk");
  Error e = expect_error([] { event_kind_from_string("h2d", "f.json"); }, "f.json", "");
  EXPECT_NE(e.hint().find("copy_h2d"), std::string::npos);
  EXPECT_THROW(detail_from_string("token", "f.json"), Error);
}

TEST(TraceJson, RoundTripKeepsEveryFieldAndWritesEventsCompactly) {
  const Trace t = full_trace();
  const Json j = to_json(t);
  EXPECT_EQ(j["schema"], "oomb.trace/1");
  // The all-defaults event leaves the defaults out; zeros that are not defaults are kept.
  const Json& b = j["events"][1];
  for (const char* key : {"bytes", "flops", "stage", "chunk", "layer", "op"})
    EXPECT_FALSE(b.contains(key)) << key;
  EXPECT_EQ(j["events"][2]["chunk"], 0);
  EXPECT_EQ(j["events"][2]["layer"], 0);
  expect_same(trace_from_json(j, "mem"), t);
  // Through text as well.
  expect_same(trace_from_json(parse_json(j.dump(), "text"), "text"), t);
}

TEST(TraceJson, ReadsTheFullFormWithEveryFieldSpelledOut) {
  const std::string text = R"({"schema":"oomb.trace/1",
    "metadata":{"source":"simulator","device":"h200","plan_digest":"","git_commit":"abc","time":"t",
                "command":"oomb simulate","detail":"chunk","dropped_records":0,"extra":null},
    "events":[
      {"kind":"copy_d2h","name":"dkv","stream":"d2h","start_ns":10,"end_ns":25,"bytes":64,"flops":0,
       "stage":2,"chunk":3,"layer":-1,"op":"layer_bwd"},
      {"kind":"alloc","name":"","stream":"","start_ns":0,"end_ns":0,"bytes":0,"flops":0.0,
       "stage":-1,"chunk":-1,"layer":-1,"op":""}],
    "memory":[{"t_ns":4,"device_bytes":8,"host_bytes":16,"pool_pages_used":2}],
    "summary":{"peak_device_bytes":8,"peak_host_bytes":16,"h2d_bytes":0,"d2h_bytes":64,"step_ns":25,
               "compute_busy_ns":0,"exposed_copy_ns":25,"pool_pages_peak":2}})";
  Trace want;
  want.metadata.source = "simulator";
  want.metadata.device = "h200";
  want.metadata.git_commit = "abc";
  want.metadata.time = "t";
  want.metadata.command = "oomb simulate";
  want.metadata.detail = Detail::chunk;
  Event d = ev(EventKind::copy_d2h, Lane::d2h, 10, 25, 2, "dkv", 64);
  d.chunk = 3;
  d.op = Op::layer_bwd;
  Event a;
  a.kind = EventKind::alloc;
  want.events = {d, a};
  want.memory = {{4, 8, 16, 2}};
  want.summary = {8, 16, 0, 64, 25, 0, 25, 2};
  expect_same(trace_from_json(parse_json(text, "full.json"), "full.json"), want);
}

TEST(TraceJson, WriteThenReadThroughAFile) {
  const Trace t = full_trace();
  const std::string path = temp_path("roundtrip.json");
  write_trace(t, path);
  expect_same(read_trace(path), t);
  // The file is the same document as to_json.
  EXPECT_EQ(read_json_file(path), to_json(t));
  std::remove(path.c_str());
}

TEST(TraceJson, RejectsWrongSchemaAndNonObjects) {
  Json j = to_json(full_trace());
  j["schema"] = "oomb.trace/0";
  expect_error([&] { trace_from_json(j, "bad.json"); }, "bad.json", "schema");
  j.erase("schema");
  expect_error([&] { trace_from_json(j, "bad.json"); }, "bad.json", "schema");
  EXPECT_THROW(trace_from_json(Json::array(), "bad.json"), Error);
  j = to_json(full_trace());
  j["events"][1] = 5;
  expect_error([&] { trace_from_json(j, "bad.json"); }, "bad.json", "events[1]");
}

TEST(TraceJson, RejectsTruncatedFile) {
  const std::string path = temp_path("truncated.json");
  write_trace(full_trace(), path);
  const std::string text = read_text_file(path);
  write_text_file(path, text.substr(0, text.size() / 2));
  try {
    read_trace(path);
    FAIL() << "a truncated trace was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), path);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

TEST(TraceJson, RejectsBadEventsNamingTheIndexAndKey) {
  const Json good = to_json(full_trace());
  Json j = good;
  j["events"][1]["start_ns"] = 10;
  j["events"][1]["end_ns"] = 9;
  Error e = expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[1].end_ns");
  EXPECT_NE(std::string(e.what()).find("start_ns"), std::string::npos) << e.what();

  j = good;
  j["events"][0]["kind"] = "copy";
  e = expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[0].kind");
  EXPECT_NE(e.hint().find("copy_h2d"), std::string::npos);

  j = good;
  j["events"][2].erase("start_ns");
  expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[2].start_ns");

  j = good;
  j["events"][2].erase("kind");
  expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[2].kind");

  j = good;
  j["events"][2]["bytes"] = -4096;
  expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[2].bytes");

  j = good;
  j["events"][0]["layer"] = -2;
  expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[0].layer");

  // A lane is one of the five the producers write ("" or absent: none).
  j = good;
  j["events"][1]["stream"] = "compute2";
  e = expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[1].stream");
  EXPECT_NE(std::string(e.what()).find("unknown lane \"compute2\""), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("compute h2d d2h comm step"), std::string::npos) << e.hint();
  j["events"][1]["stream"] = "";
  EXPECT_EQ(trace_from_json(j, "t.json").events[1].lane, Lane::none);

  // An op is a pass or collective of core/op.h ("" or absent: none).
  j = good;
  j["events"][2]["op"] = "kv";
  e = expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "events[2].op");
  EXPECT_NE(std::string(e.what()).find("unknown op \"kv\""), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("layer_fwd"), std::string::npos) << e.hint();
  j["events"][2]["op"] = "";
  EXPECT_EQ(trace_from_json(j, "t.json").events[2].op, Op::none);

  j = good;
  j["metadata"]["detail"] = "token";
  e = expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "metadata.detail");
  EXPECT_NE(e.hint().find("layer"), std::string::npos);

  j = good;
  j["memory"][1]["device_bytes"] = -1;
  expect_error([&] { trace_from_json(j, "t.json"); }, "t.json", "memory[1].device_bytes");
}

// Hand-made step (ns):
//   compute  [1000,1100) on the compute lane, [1050,1150) on comm, [1060,1070) nested, [1200,1300)
//   h2d      [1000,1080) 1000 B, [1150,1260) 500 B;  d2h [1300,1400) 700 B;  alloc at 1000 (4096 B)
//   phase    [1000,1400)
// union of compute = [1000,1150) + [1200,1300) = 250; step = 1400 - 1000 = 400; exposed = 150.
Trace summary_trace() {
  Trace t;
  t.metadata.source = "simulator";
  t.events = {
      ev(EventKind::compute, Lane::compute, 1200, 1300, 1, "layer_fwd"),
      ev(EventKind::copy_h2d, Lane::h2d, 1000, 1080, 1, "kv", 1000),
      ev(EventKind::compute, Lane::compute, 1000, 1100, 1, "layer_fwd"),
      ev(EventKind::copy_d2h, Lane::d2h, 1300, 1400, 2, "dkv", 700),
      ev(EventKind::compute, Lane::comm, 1050, 1150, 1, "lm_head"),
      ev(EventKind::compute, Lane::compute, 1060, 1070, 1, "layer_fwd"),
      ev(EventKind::copy_h2d, Lane::h2d, 1150, 1260, 2, "kv", 500),
      ev(EventKind::alloc, Lane::none, 1000, 1000, -1, "", 4096),
      ev(EventKind::phase, Lane::none, 1000, 1400),
  };
  t.memory = {{1000, 10, 5, 1}, {1100, 30, 2, 4}, {1300, 20, 9, 3}};
  return t;
}

TEST(TraceSummary, HandComputedStep) {
  const Summary s = summarize(summary_trace());
  EXPECT_EQ(s.step_ns, 400);
  EXPECT_EQ(s.compute_busy_ns, 250);
  EXPECT_EQ(s.exposed_copy_ns, 150);
  EXPECT_EQ(s.h2d_bytes, 1500);
  EXPECT_EQ(s.d2h_bytes, 700);
  EXPECT_EQ(s.peak_device_bytes, 30);
  EXPECT_EQ(s.peak_host_bytes, 9);
  EXPECT_EQ(s.pool_pages_peak, 4);
}

TEST(TraceSummary, EmptyTraceAndPeaksKeptWithoutSamples) {
  Trace t;
  t.summary.peak_device_bytes = 77;
  t.summary.peak_host_bytes = 88;
  t.summary.pool_pages_peak = 9;
  t.summary.step_ns = 1234;  // recomputed: no events -> 0
  Summary s = summarize(t);
  EXPECT_EQ(s.step_ns, 0);
  EXPECT_EQ(s.compute_busy_ns, 0);
  EXPECT_EQ(s.exposed_copy_ns, 0);
  EXPECT_EQ(s.peak_device_bytes, 77);
  EXPECT_EQ(s.peak_host_bytes, 88);
  EXPECT_EQ(s.pool_pages_peak, 9);
  // Copies only: nothing hides them, the whole step is exposed.
  t.events = {ev(EventKind::copy_h2d, Lane::h2d, 7, 24, 1, "kv", 3)};
  s = summarize(t);
  EXPECT_EQ(s.step_ns, 17);
  EXPECT_EQ(s.exposed_copy_ns, 17);
  EXPECT_EQ(s.h2d_bytes, 3);
}

// Exposed copy is copy-busy time that no compute covers, not compute-idle time: the gap
// [150, 300) has no copy in flight and exposes nothing.
//   compute [0,100) [300,400);  h2d [50,150) [380,450);  d2h [350,500)
//   copy union [50,150) + [350,500); minus compute: [100,150) + [400,500) = 150.
TEST(TraceSummary, ExposedCopyIsCopyTimeNoComputeCovers) {
  Trace t;
  t.events = {
      ev(EventKind::compute, Lane::compute, 0, 100, 1, "layer_fwd"),
      ev(EventKind::compute, Lane::compute, 300, 400, 1, "layer_fwd"),
      ev(EventKind::copy_h2d, Lane::h2d, 50, 150, 1, "kv", 10),
      ev(EventKind::copy_h2d, Lane::h2d, 380, 450, 2, "kv", 20),
      ev(EventKind::copy_d2h, Lane::d2h, 350, 500, 2, "dkv", 30),
  };
  const Summary s = summarize(t);
  EXPECT_EQ(s.step_ns, 500);
  EXPECT_EQ(s.compute_busy_ns, 200);
  EXPECT_EQ(s.exposed_copy_ns, 150);
  EXPECT_EQ(s.h2d_bytes, 30);
  EXPECT_EQ(s.d2h_bytes, 30);
}

// With "step" phase events the summary describes one step: the mean over the steps, each clipped
// to its own interval; work between steps (a check run between them) and the gap count nowhere.
//   step 1 [1000,2000): compute [1000,1800), h2d [1700,2000) 100 B             -> busy 800, exposed 200
//   between:            compute [2200,2600), h2d [2300,2400) 999 B             -> ignored
//   step 2 [3000,4000): compute [3000,3500) [3600,3900), d2h [3400,3700) 300 B -> busy 800, exposed 100
TEST(TraceSummary, PerStepMeanOverTheStepPhases) {
  Trace t;
  Event step1 = ev(EventKind::phase, Lane::none, 1000, 2000);
  step1.name = kStepPhase;
  Event step2 = ev(EventKind::phase, Lane::none, 3000, 4000);
  step2.name = kStepPhase;
  t.events = {
      step1,
      ev(EventKind::compute, Lane::compute, 1000, 1800, 1, "layer_fwd"),
      ev(EventKind::copy_h2d, Lane::h2d, 1700, 2000, 1, "kv", 100),
      ev(EventKind::compute, Lane::compute, 2200, 2600, -1, "check"),
      ev(EventKind::copy_h2d, Lane::h2d, 2300, 2400, -1, "check", 999),
      step2,
      ev(EventKind::compute, Lane::compute, 3000, 3500, 2, "layer_bwd"),
      ev(EventKind::compute, Lane::compute, 3600, 3900, 2, "layer_bwd"),
      ev(EventKind::copy_d2h, Lane::d2h, 3400, 3700, 2, "dkv", 300),
  };
  Summary s = summarize(t);
  EXPECT_EQ(s.step_ns, 1000);
  EXPECT_EQ(s.compute_busy_ns, 800);
  EXPECT_EQ(s.exposed_copy_ns, 150);
  EXPECT_EQ(s.h2d_bytes, 50);   // 100 B over 2 steps
  EXPECT_EQ(s.d2h_bytes, 150);  // 300 B over 2 steps

  // A copy running past its step's end counts only inside the step: [3950,4000).
  t.events.push_back(ev(EventKind::copy_h2d, Lane::h2d, 3950, 4500, 2, "kv", 0));
  s = summarize(t);
  EXPECT_EQ(s.exposed_copy_ns, 175);  // (200 + 150) / 2
  EXPECT_EQ(s.step_ns, 1000);
}

// The Chrome export is streamed to its file record by record (issue 24: the whole Json tree of a
// 4M-token timeline took 1 GB); the file is the document the old writer dumped, byte for byte.
TEST(TraceChrome, StreamedFileIsTheWholeDocumentsDump) {
  Trace odd = full_trace();
  odd.events[0].lane = Lane::step;  // a lane beyond the three fixed tracks
  odd.metadata.extra = Json{{"config", {{"context_tokens", 4096}}}};
  for (const Trace& t : {summary_trace(), full_trace(), odd, Trace{}}) {
    const std::string path = temp_path("chrome.json");
    write_chrome_trace(t, path);
    const std::string text = read_text_file(path);
    EXPECT_EQ(text, to_chrome_trace(t).dump());
    EXPECT_EQ(parse_json(text, path), to_chrome_trace(t));
    std::remove(path.c_str());
  }
}

TEST(TraceChrome, CompleteEventsThreadNamesAndCounters) {
  const Trace t = summary_trace();
  const Json c = to_chrome_trace(t);
  EXPECT_EQ(c["displayTimeUnit"], "ns");
  EXPECT_EQ(c["otherData"]["source"], "simulator");
  std::map<int, std::string> threads;
  int complete = 0, counters = 0;
  bool saw_first = false, saw_h2d = false;
  for (const Json& e : c["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") threads[e["tid"].get<int>()] = e["args"]["name"];
    if (ph == "C") ++counters;
    if (ph != "X") continue;
    ++complete;
    EXPECT_EQ(e["pid"], 1);
    if (e["cat"] == "compute" && e["ts"].get<double>() == 1.0) {
      saw_first = true;
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.1);
      EXPECT_EQ(e["tid"], 1);
      EXPECT_EQ(e["name"], "layer_fwd");
      EXPECT_EQ(e["args"]["stage"], 1);
      EXPECT_EQ(e["args"]["op"], "layer_fwd");
    }
    if (e["cat"] == "copy_h2d" && e["args"]["bytes"] == 500) {
      saw_h2d = true;
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.15);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.11);
      EXPECT_EQ(e["tid"], 2);
    }
  }
  EXPECT_TRUE(saw_first);
  EXPECT_TRUE(saw_h2d);
  EXPECT_EQ(complete, 9);
  EXPECT_EQ(counters, 6);  // device_bytes + host_bytes per sample
  // Fixed tids for the three standard lanes, then the rest by name: comm, the allocation (no lane:
  // "other") and the phase (its kind's lane, step).
  const std::map<int, std::string> want = {{1, "compute"}, {2, "h2d"}, {3, "d2h"}, {4, "comm"}, {5, "other"}, {6, "step"}};
  EXPECT_EQ(threads, want);
}

// Predicted: stage1 layer_fwd 3 x 100, stage2 layer_bwd 2 x 300, h2d stage1 1000 B, d2h stage2 800 B.
// Measured:  stage1 layer_fwd 3 x 110, stage2 layer_bwd 2 x 270, stage2 lm_head 50 (unpredicted),
//            h2d stage1 1000 B, no d2h.
TEST(TraceCompare, AlignsByStageAndOp) {
  Trace p;
  p.events = {ev(EventKind::compute, Lane::compute, 0, 100, 1, "layer_fwd"),
              ev(EventKind::compute, Lane::compute, 100, 200, 1, "layer_fwd"),
              ev(EventKind::compute, Lane::compute, 200, 300, 1, "layer_fwd"),
              ev(EventKind::compute, Lane::compute, 300, 600, 2, "layer_bwd"),
              ev(EventKind::compute, Lane::compute, 600, 900, 2, "layer_bwd"),
              ev(EventKind::copy_h2d, Lane::h2d, 0, 50, 1, "kv", 1000),
              ev(EventKind::copy_d2h, Lane::d2h, 600, 700, 2, "dkv", 800)};
  p.memory = {{0, 1000, 0, 0}};
  p.summary = summarize(p);
  Trace m;
  m.events = {ev(EventKind::compute, Lane::compute, 0, 110, 1, "layer_fwd"),
              ev(EventKind::compute, Lane::compute, 110, 220, 1, "layer_fwd"),
              ev(EventKind::compute, Lane::compute, 220, 330, 1, "layer_fwd"),
              ev(EventKind::compute, Lane::compute, 330, 600, 2, "layer_bwd"),
              ev(EventKind::compute, Lane::compute, 600, 870, 2, "layer_bwd"),
              ev(EventKind::compute, Lane::compute, 900, 950, 2, "lm_head"),
              ev(EventKind::copy_h2d, Lane::h2d, 0, 60, 1, "kv", 1000),
              // Compute waits [870,900) for this copy (no bytes: d2h_bytes stays 0): exposed 30.
              ev(EventKind::copy_d2h, Lane::d2h, 860, 900, 2, "dkv", 0)};
  m.memory = {{0, 1100, 0, 0}};
  m.summary = summarize(m);

  const Comparison c = compare(p, m);
  const char* summary_rows[] = {"peak_device_bytes", "peak_host_bytes", "h2d_bytes",       "d2h_bytes",
                                "step_ns",           "compute_busy_ns", "exposed_copy_ns", "pool_pages_peak"};
  ASSERT_EQ(c.rows.size(), 8u + 3u + 2u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(c.rows[i].name, summary_rows[i]);

  auto expect_row = [&](const std::string& name, double pred, double meas, double err) {
    SCOPED_TRACE(name);
    const CompareRow* r = c.find(name);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->predicted, pred);
    EXPECT_EQ(r->measured, meas);
    EXPECT_NEAR(r->error, err, kTol);
  };
  expect_row("peak_device_bytes", 1000, 1100, 0.1);
  expect_row("peak_host_bytes", 0, 0, 0.0);           // both 0
  expect_row("h2d_bytes", 1000, 1000, 0.0);
  expect_row("d2h_bytes", 800, 0, -1.0);
  expect_row("step_ns", 900, 950, 50.0 / 900.0);
  expect_row("compute_busy_ns", 900, 920, 20.0 / 900.0);
  expect_row("exposed_copy_ns", 0, 30, 1.0);          // predicted 0, measured not: error 1.0
  expect_row("time:stage1/layer_fwd", 300, 330, 0.1);
  expect_row("time:stage2/layer_bwd", 600, 540, -0.1);
  expect_row("time:stage2/lm_head", 0, 50, 1.0);
  expect_row("bytes:stage1/copy_h2d", 1000, 1000, 0.0);
  expect_row("bytes:stage2/copy_d2h", 800, 0, -1.0);
  EXPECT_EQ(c.find("time:stage1/lm_head"), nullptr);
}

}  // namespace
}  // namespace oomb::traces
