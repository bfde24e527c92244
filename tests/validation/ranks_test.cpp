// validation/ranks.h: the one naming rule of a multi-rank run's traces, the job's place read from a
// rank's run record, its collectives read defensively (fields a later executor adds show up by
// name), and every rank judged against one plan with the slowest step binding. Records here are
// hand-made in memory (and written to a temporary folder through traces::write_trace), not runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/error.h"
#include "validation/ranks.h"
#include "validation_test_util.h"

namespace oomb::validation {
namespace {

TEST(Ranks, TraceFilesAreNamedBesideRankZerosAsOombRunWritesThem) {
  EXPECT_EQ(rank_trace_path("runs/t.json", 0), "runs/t.json");
  EXPECT_EQ(rank_trace_path("runs/t.json", 1), "runs/t.rank1.json");
  EXPECT_EQ(rank_trace_path("t.json", 17), "t.rank17.json");
  EXPECT_EQ(rank_trace_path("a.b.json", 3), "a.b.rank3.json");  // only the last extension moves
  EXPECT_EQ(rank_trace_path("trace", 2), "trace.rank2");
  EXPECT_EQ(rank_trace_path("", 2), "");  // no trace asked for: none for any rank
}

TEST(Ranks, TheJobsPlaceIsReadFromTheRunRecordAndNeverThrows) {
  traces::Trace t;
  EXPECT_EQ(rank_of(t).world, 1);  // a trace without a record (the simulator's): one process
  EXPECT_EQ(rank_of(t).rank, 0);
  // Tensor parallelism alone: the group is the job.
  t.metadata.extra = {{"measured", {{"tensor_parallel", {{"tp", 2}, {"rank", 1}, {"world", 2}}}}}};
  EXPECT_EQ(rank_of(t).world, 2);
  EXPECT_EQ(rank_of(t).rank, 1);
  // Tensor x data parallelism: data_parallel holds the job's rank (3), tensor_parallel the group's (1).
  t.metadata.extra["measured"]["tensor_parallel"] = {{"tp", 2}, {"rank", 1}, {"world", 4}};
  t.metadata.extra["measured"]["data_parallel"] = {{"rank", 3}, {"world", 4}};
  EXPECT_EQ(rank_of(t).world, 4);
  EXPECT_EQ(rank_of(t).rank, 3);
  // Malformed blocks read as one process rather than throwing (any trace can be opened).
  t.metadata.extra["measured"] = {{"data_parallel", {{"world", "four"}}}, {"tensor_parallel", 7}};
  EXPECT_EQ(rank_of(t).world, 1);
  t.metadata.extra = Json::array();
  EXPECT_EQ(rank_of(t).world, 1);
}

TEST(Ranks, CollectivesAreEveryNumberTheRankRecordedNewFieldsIncluded) {
  const Json extra = {{"measured",
                       {{"tensor_parallel",
                         {{"tp", 2},
                          {"rank", 1},
                          {"world", 4},
                          {"comm", "mpi"},
                          {"allreduces", 64},
                          {"allreduce_bytes", 7962624},
                          {"allreduce_s", 0.75},
                          {"allreduce_wait_s", 0.5},  // a field a later executor may add beside the total
                          {"per_call", {{"min_s", 1e-4}}}}},
                        {"data_parallel", {{"rank", 3}, {"world", 4}, {"allreduce_bytes", 1000}, {"allreduce_s", 2.0}}}}}};
  const auto figures = step::run_collectives(extra);
  std::vector<std::string> names;
  for (const auto& f : figures) names.push_back(f.name);
  // Counts, bytes, then seconds within each block; the job's place, text and objects left out.
  const std::vector<std::string> want = {"tp_allreduces",  "tp_allreduce_bytes", "tp_allreduce_s",
                                         "tp_allreduce_wait_s", "allreduce_bytes", "allreduce_s"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(figures[0].unit(), "");
  EXPECT_EQ(figures[1].unit(), "bytes");
  EXPECT_DOUBLE_EQ(figures[1].value, 7962624);
  EXPECT_EQ(figures[3].unit(), "s");
  // The time in collectives is the two totals; the new field is a part, not added again.
  ASSERT_TRUE(step::collective_seconds(figures).has_value());
  EXPECT_DOUBLE_EQ(*step::collective_seconds(figures), 2.75);
  EXPECT_FALSE(step::collective_seconds({}).has_value());
  EXPECT_TRUE(step::run_collectives(Json()).empty());
}

// A run record of `s` that measured exactly the prediction (memory, pools, copies), as rank `rank`
// of a `world`-process tensor-parallel job, with the given step.
traces::Trace rank_record(const simulator::Scenario& s, int rank, int world, double step_s) {
  traces::Trace t = testing::cuda_record_as_predicted(s, step_s);
  t.metadata.extra["measured"]["tensor_parallel"] = {{"tp", world},
                                                     {"rank", rank},
                                                     {"world", world},
                                                     {"allreduces", 0},
                                                     {"allreduce_bytes", 0},
                                                     {"allreduce_s", 0.01 * (rank + 1)}};
  return t;
}

using testing::term;

TEST(Ranks, EveryRankIsJudgedAgainstThePlanAndTheSlowestBinds) {
  simulator::Scenario s = testing::request("tiny", "h200").scenario;
  s.config.context_tokens = 2048;
  s.config.chunk_tokens = 512;
  s.config.page_tokens = 64;
  s.config.resident_layers = 1;
  const traces::Trace t0 = rank_record(s, 0, 4, 1.0);
  std::vector<RankTrace> others(3);
  others[0] = {1, "t.rank1.json", rank_record(s, 1, 4, 1.5)};
  others[1] = {2, "t.rank2.json", rank_record(s, 2, 4, 1.25)};
  others[2] = {3, "t.rank3.json", std::nullopt};  // its file is missing
  // Rank 2 held one device byte more than its table at the peak: beyond tolerance.
  others[1].trace->metadata.extra["measured"]["peak_device_bytes"] =
      others[1].trace->metadata.extra["measured"]["peak_device_bytes"].get<int64_t>() * 2;
  ValidationRequest r;
  r.trace = &t0;
  r.trace_where = "t.json";
  r.scenario = s;
  r.plan_where = "p.json";
  const std::vector<RankVerdict> v = judge_ranks(r, nullptr, others);
  ASSERT_EQ(v.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(v[k].rank, k);
  EXPECT_EQ(v[0].trace, "t.json");
  // Each found rank's verdict is validate_run's of its own trace, term for term.
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(k);
    ValidationRequest alone = r;
    alone.trace = k == 0 ? &t0 : &*others[static_cast<size_t>(k - 1)].trace;
    const Validation want = validate_run(alone);
    EXPECT_TRUE(v[k].found);
    ASSERT_TRUE(v[k].validation.has_value());
    EXPECT_EQ(v[k].ok(), want.ok);
    ASSERT_EQ(v[k].validation->terms.size(), want.terms.size());
    for (size_t i = 0; i < want.terms.size(); ++i) {
      EXPECT_EQ(v[k].validation->terms[i].name, want.terms[i].name);
      EXPECT_EQ(v[k].validation->terms[i].measured, want.terms[i].measured) << want.terms[i].name;
    }
  }
  // Ranks 0 and 1 held their table's peak, rank 2 twice it.
  EXPECT_EQ(term(*v[0].validation, "peak_device_bytes")->ok(), std::optional<bool>(true));
  EXPECT_EQ(term(*v[1].validation, "peak_device_bytes")->ok(), std::optional<bool>(true));
  EXPECT_EQ(term(*v[2].validation, "peak_device_bytes")->ok(), std::optional<bool>(false));
  EXPECT_FALSE(v[2].ok());
  EXPECT_FALSE(v[3].found);
  EXPECT_FALSE(v[3].ok());
  EXPECT_NE(v[3].error.find("t.rank3.json"), std::string::npos) << v[3].error;
  // Each rank's figures are its own record's.
  EXPECT_DOUBLE_EQ(*v[1].step_s, 1.5);
  EXPECT_DOUBLE_EQ(*v[2].collective_s(), 0.03);
  EXPECT_FALSE(v[3].step_s.has_value());
  // The job's step is the slowest rank's: rank 1, and only rank 1.
  for (int k = 0; k < 4; ++k) EXPECT_EQ(v[k].binds, k == 1) << k;
  // A rank 0 verdict handed in is used as it is (validate has it already) and the verdicts keep no
  // event simulation (the plan's, the same for every rank).
  Validation given = validate_run(r);
  given.notes.push_back("handed in");
  const std::vector<RankVerdict> w = judge_ranks(r, &given, {});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].validation->notes.back(), "handed in");
  EXPECT_TRUE(w[0].validation->prediction.trace.events.empty());
  EXPECT_TRUE(w[0].binds);
}

TEST(Ranks, BindingIsTheSlowestMeasuredStepFirstOfEquals) {
  std::vector<RankVerdict> v(3);
  for (int k = 0; k < 3; ++k) v[k].rank = k;
  EXPECT_EQ(mark_binding_rank(v), -1);  // no steps: none binds
  v[0].step_s = 2.0;
  v[2].step_s = 2.0;
  EXPECT_EQ(mark_binding_rank(v), 0);
  v[2].step_s = 2.5;
  EXPECT_EQ(mark_binding_rank(v), 2);
  EXPECT_FALSE(v[0].binds);
  EXPECT_TRUE(v[2].binds);
}

// The job's verdict (what `oomb validate` prints last and returns): ok only when every rank was
// found and every comparable term of each is within tolerance; a term beyond tolerance and a
// missing rank's trace are both said, in one line.
TEST(Ranks, TheJobsVerdictCombinesEveryRankAndNamesTheMissingOnes) {
  Validation good, bad;
  bad.ok = false;
  auto rank = [](int k, bool found, std::optional<Validation> v) {
    RankVerdict r;
    r.rank = k;
    r.trace = "t" + (k ? ".rank" + std::to_string(k) : std::string()) + ".json";
    r.found = found;
    r.validation = std::move(v);
    return r;
  };
  const JobVerdict one = job_verdict(good, {});  // a one-process run
  EXPECT_TRUE(one.ok);
  EXPECT_EQ(one.failure, "");
  const JobVerdict all = job_verdict(good, {rank(0, true, good), rank(1, true, good)});
  EXPECT_TRUE(all.ok);
  EXPECT_FALSE(all.terms_failed);
  const JobVerdict rank1_bad = job_verdict(good, {rank(0, true, good), rank(1, true, bad)});
  EXPECT_FALSE(rank1_bad.ok);
  EXPECT_TRUE(rank1_bad.terms_failed);
  EXPECT_EQ(rank1_bad.failure, "terms beyond tolerance (see above)");
  const JobVerdict lost = job_verdict(good, {rank(0, true, good), rank(1, false, std::nullopt), rank(2, true, good),
                                            rank(3, false, std::nullopt)});
  EXPECT_FALSE(lost.ok);
  EXPECT_FALSE(lost.terms_failed) << "a missing rank is not a failed term";
  EXPECT_EQ(lost.missing_text(), "t.rank1.json, t.rank3.json");
  EXPECT_EQ(lost.failure, "2 of 4 ranks' traces missing (t.rank1.json, t.rank3.json)");
  const JobVerdict both = job_verdict(bad, {rank(0, true, bad), rank(1, false, std::nullopt)});
  EXPECT_EQ(both.failure, "terms beyond tolerance (see above); 1 of 2 ranks' traces missing (t.rank1.json)");
}

TEST(Ranks, TheOtherRanksTracesAreReadFromBesideRankZeros) {
  const auto dir = std::filesystem::temp_directory_path() / ("oomb_ranks_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string t0 = (dir / "t.json").string();
  traces::Trace zero, one;
  zero.metadata.source = one.metadata.source = "cpu";
  zero.metadata.extra = {{"measured", {{"tensor_parallel", {{"tp", 3}, {"rank", 0}, {"world", 3}}}}}};
  one.metadata.extra = {{"measured", {{"tensor_parallel", {{"tp", 3}, {"rank", 1}, {"world", 3}}}}}};
  one.metadata.device = "rank one";
  traces::write_trace(one, rank_trace_path(t0, 1));
  auto others = read_other_rank_traces(t0, zero);
  ASSERT_EQ(others.size(), 2u);
  EXPECT_EQ(others[0].rank, 1);
  ASSERT_TRUE(others[0].trace.has_value());
  EXPECT_EQ(others[0].trace->metadata.device, "rank one");
  EXPECT_EQ(others[1].rank, 2);
  EXPECT_EQ(others[1].path, (dir / "t.rank2.json").string());
  EXPECT_FALSE(others[1].trace.has_value());  // missing: a rank without a trace, not an error
  // A rank's file that is there but not a trace is bad input, named.
  std::ofstream(rank_trace_path(t0, 2)) << "{ not json";
  try {
    read_other_rank_traces(t0, zero);
    ADD_FAILURE() << "an unreadable rank trace was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("t.rank2.json"), std::string::npos) << e.what();
  }
  // Another rank's trace, or a one-process run's, names no set.
  EXPECT_TRUE(read_other_rank_traces(rank_trace_path(t0, 1), one).empty());
  EXPECT_TRUE(read_other_rank_traces(t0, traces::Trace{}).empty());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace oomb::validation
