#include "validation/ranks.h"

#include <algorithm>

#include <filesystem>

#include "core/error.h"

namespace oomb::validation {

std::string rank_trace_path(const std::string& rank0_trace, int rank) {
  if (rank == 0 || rank0_trace.empty()) return rank0_trace;
  const std::filesystem::path p(rank0_trace);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string())).string();
}

bool trace_is_stream(const std::string& rank0_trace) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(rank0_trace, ec);
  return !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) &&
         !std::filesystem::is_directory(st);
}

step::RunRank rank_of(const traces::Trace& t) { return step::run_rank(t.metadata.extra); }

std::vector<RankTrace> read_other_rank_traces(const std::string& rank0_path, const traces::Trace& rank0) {
  const step::RunRank r = rank_of(rank0);
  std::vector<RankTrace> out;
  if (r.world <= 1 || r.rank != 0) return out;
  for (int k = 1; k < r.world; ++k) {
    RankTrace t;
    t.rank = k;
    t.path = rank_trace_path(rank0_path, k);
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(t.path, ec);
    if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
      throw Error(t.path, "",
                  "is not a regular file: rank " + std::to_string(k) + "'s trace is a file `oomb run` wrote",
                  "the trace files of one run, side by side (t.json, t.rank1.json, ...)");
    if (std::filesystem::exists(st)) {
      t.trace = traces::read_trace(t.path);
      // The file must be what its name claims: rank k of this job (a copy of rank 0's trace, a rank
      // of another world size, or a rank of another run of the same plan is refused, naming it).
      const step::RunRank rk = rank_of(*t.trace);
      const std::string of_run = " (rank 0's trace " + rank0_path + " is of a job of " + std::to_string(r.world) +
                                 " ranks" + (r.job.empty() ? std::string() : ", job " + r.job) + ")";
      if (rk.world != r.world || rk.rank != k)
        throw Error(t.path, "metadata.extra.measured",
                    "says rank " + std::to_string(rk.rank) + " of " + std::to_string(rk.world) +
                        ", and its name says rank " + std::to_string(k) + " of " + std::to_string(r.world) + of_run,
                    "the trace files one `mpirun -np " + std::to_string(r.world) + " oomb run --trace " + rank0_path +
                        "` wrote");
      if (!r.job.empty() && rk.job != r.job)
        throw Error(t.path, "metadata.extra.measured.job",
                    (rk.job.empty() ? std::string("names no job") : "is of job " + rk.job) + ", not rank 0's" + of_run +
                        ": a rank of another run",
                    "the trace files one run wrote (run the job again to have all of them)");
    }
    out.push_back(std::move(t));
  }
  return out;
}

RankVerdict judge_rank(const ValidationRequest& request, int rank, const std::string& path, const traces::Trace* trace,
                       const Validation* given) {
  RankVerdict v;
  v.rank = rank;
  v.trace = path;
  if (!trace) {
    v.error = "missing: " + path + " (each process of `mpirun -np N oomb run --trace` writes one)";
    return v;
  }
  v.found = true;
  if (given) {
    v.validation = *given;
  } else {
    ValidationRequest r = request;
    r.trace = trace;
    r.trace_where = path;
    v.validation = validate_run(r);
  }
  v.validation->prediction = {};
  const step::RunRecord run = step::run_record_from_json(trace->metadata.extra, path);
  v.step_s = run.step_s;
  v.peak_device_bytes = run.peak_device_bytes;
  v.collectives = step::run_collectives(trace->metadata.extra);
  return v;
}

std::vector<RankVerdict> judge_ranks(const ValidationRequest& rank0_request, const Validation* rank0_validation,
                                     const std::vector<RankTrace>& others) {
  std::vector<RankVerdict> out;
  out.push_back(judge_rank(rank0_request, 0, rank0_request.trace_where, rank0_request.trace, rank0_validation));
  for (const RankTrace& t : others)
    out.push_back(judge_rank(rank0_request, t.rank, t.path, t.trace ? &*t.trace : nullptr));
  mark_binding_rank(out);
  return out;
}

int mark_binding_rank(std::vector<RankVerdict>& ranks) {
  RankVerdict* slowest = nullptr;
  for (RankVerdict& r : ranks) {
    r.binds = false;
    if (r.step_s && (!slowest || *r.step_s > *slowest->step_s)) slowest = &r;
  }
  if (!slowest) return -1;
  slowest->binds = true;
  return slowest->rank;
}

std::string JobVerdict::missing_text() const {
  std::string t;
  for (const auto& m : missing) t += (t.empty() ? "" : ", ") + m;
  return t;
}

JobVerdict job_verdict(const Validation& rank0, const std::vector<RankVerdict>& ranks) {
  JobVerdict v;
  v.ok = rank0.ok;
  for (const auto& r : ranks) {
    v.ok = v.ok && r.ok();
    if (!r.found) v.missing.push_back(r.trace);
  }
  v.terms_failed =
      !rank0.ok || std::any_of(ranks.begin(), ranks.end(), [](const RankVerdict& r) { return r.found && !r.ok(); });
  if (v.terms_failed) v.failure = "terms beyond tolerance (see above)";
  if (!v.missing.empty())
    v.failure += (v.failure.empty() ? "" : "; ") + std::to_string(v.missing.size()) + " of " +
                 std::to_string(ranks.size()) + " ranks' traces missing (" + v.missing_text() + ")";
  return v;
}

}  // namespace oomb::validation
