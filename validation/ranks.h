#pragma once
// A multi-rank run (tensor or data parallelism under mpirun) judged as one run: every process
// writes its own trace, rank 0's names the set (t.json; rank k's lies beside it as t.rank<k>.json),
// and every rank's trace is validated against the one plan (each rank's rows are the plan's,
// sharded). `oomb run` names the files by this header's rule; `oomb validate` (text, JSON and HTML
// report) and the GUI's overlay find and judge the ranks through it.
#include <optional>
#include <string>
#include <vector>

#include "validation/validation.h"
#include "step/run_record.h"
#include "traces/trace.h"

namespace oomb::validation {

// Rank k's trace beside rank 0's: t.json -> t.rank1.json (rank 0: the path itself).
std::string rank_trace_path(const std::string& rank0_trace, int rank);
// Whether rank 0's trace path names a stream (a device such as /dev/null, a FIFO, a socket): no
// file is put beside it (a /dev/null.rank1 created as root), so the other ranks record their traces
// as usual and discard them.
bool trace_is_stream(const std::string& rank0_trace);

// The process a trace was written by (step::run_rank of its run record).
step::RunRank rank_of(const traces::Trace& t);

// Another rank's trace of a multi-rank run, read from beside rank 0's.
struct RankTrace {
  int rank = 0;
  std::string path;
  std::optional<traces::Trace> trace;  // empty: the file is missing
};
// Ranks 1 .. world - 1 of the run whose rank-0 trace is `rank0` (read from `rank0_path`); empty when
// `rank0` is of a one-process run or is not rank 0's. A missing file is a rank without a trace; one
// that exists and cannot be read throws oomb::Error naming it (as read_trace does), and so does one
// that is not a regular file (a FIFO would block the reader; a device is no rank's trace).
std::vector<RankTrace> read_other_rank_traces(const std::string& rank0_path, const traces::Trace& rank0);

// One rank's verdict, as validate and the GUI show it.
struct RankVerdict {
  int rank = 0;
  std::string trace;  // its file
  bool found = false;
  std::string error;  // why it was not judged ("" when it was)
  // Its terms against the plan (the event simulation left out: it is the plan's, the same for every rank).
  std::optional<Validation> validation;
  // From the rank's run record, whatever validate compares: the fastest timed step and the device peak.
  std::optional<double> step_s;
  std::optional<int64_t> peak_device_bytes;
  std::vector<step::CollectiveFigure> collectives;  // as the rank recorded them
  bool binds = false;  // the slowest step of the set: the job's step is this rank's
  bool ok() const { return validation.has_value() && validation->ok; }
  std::optional<double> collective_s() const { return step::collective_seconds(collectives); }
};

// Every rank of the run whose rank-0 trace `rank0_request` holds: rank 0 (its validation
// `rank0_validation` when the caller has it, else computed) and each of `others` validated with
// the same scenario and tolerances; a missing rank is not found (and not ok); the binding rank
// (slowest measured step) marked. Throws what validate_run throws for a trace that is not a run of
// the plan.
std::vector<RankVerdict> judge_ranks(const ValidationRequest& rank0_request, const Validation* rank0_validation,
                                     const std::vector<RankTrace>& others);
// One rank: `trace` nullptr when its file is missing.
RankVerdict judge_rank(const ValidationRequest& request, int rank, const std::string& path, const traces::Trace* trace,
                       const Validation* given = nullptr);
// Marks the rank with the slowest measured step (the first of equals) as binding; returns its
// rank, or -1 when no rank has a step.
int mark_binding_rank(std::vector<RankVerdict>& ranks);

// The job's verdict, as `oomb validate` states it (text, JSON, HTML report): rank 0's validation
// and every rank's (judge_ranks; none for a one-process run).
struct JobVerdict {
  bool ok = false;                   // every comparable term of every rank found within tolerance, none missing
  bool terms_failed = false;         // a term beyond tolerance, of rank 0 or of a rank found
  std::vector<std::string> missing;  // the ranks' traces that are not there
  std::string missing_text() const;  // "t.rank1.json, t.rank3.json"
  // Why it is not ok, in one line ("" when ok): "terms beyond tolerance (see above)" and/or
  // "1 of 2 ranks' traces missing (t.rank1.json)".
  std::string failure;
};
JobVerdict job_verdict(const Validation& rank0, const std::vector<RankVerdict>& ranks);

}  // namespace oomb::validation
