// planner_bench: speed of the planner against its targets.
//   evaluate() (closed-form fast path)       >= 100,000 evaluations/s
//   full search, qwen2.5-7b / h200 / 4M      < 50 ms on one core (the enlarged space: checkpointing
//                                            off / on with 0..L-1 layers kept, optimizer placement
//                                            with --optimizer auto)
//   `oomb plan` for the same (the README's first command)  well under a second (target 1 s)
//   the mixtures of experts and layer kinds of the catalog at 4M: the same two targets
// Usage: planner_bench [path/to/oomb]  (with the path, the real command is timed as well)
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/format.h"
#include "models/specs.h"
#include "planner/diagnosis.h"
#include "planner/plan.h"
#include "planner/search.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Runs f repeatedly for about `budget_s`; returns seconds per call (the best of 3 rounds).
template <class F>
double per_call(F&& f, double budget_s) {
  double best = 1e300;
  for (int round = 0; round < 3; ++round) {
    int64_t n = 0;
    const auto t0 = Clock::now();
    do {
      f();
      ++n;
    } while (since(t0) < budget_s / 3);
    best = std::min(best, since(t0) / static_cast<double>(n));
  }
  return best;
}

void line(const char* what, const std::string& value, double ratio, const char* target) {
  std::printf("  %-46s %16s   %6.2fx target (%s)%s\n", what, value.c_str(), ratio, target, ratio >= 1 ? "" : "  MISSED");
}

oomb::planner::Request readme_request() {
  oomb::planner::Request r;
  r.scenario.model = oomb::models::load_model("qwen2.5-7b");
  r.scenario.gpu = oomb::models::load_gpu("h200");
  r.scenario.host = oomb::models::load_host(r.scenario.gpu.default_host);
  r.optimizer_auto = true;  // `oomb plan`'s default
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace oomb;
  constexpr int64_t k4M = int64_t{4} << 20;
  const planner::Request r = readme_request();
  volatile double sink = 0;
  std::printf("planner_bench (one core; qwen2.5-7b, h200, host %s)\n", r.scenario.host.id.c_str());

  // 1. evaluate(): the published configuration at 4M, and the planner's small-chunk corner.
  for (int64_t chunk : {int64_t{4096}, int64_t{512}}) {
    simulator::Scenario s = r.scenario;
    s.config.context_tokens = k4M;
    s.config.chunk_tokens = chunk;
    const double t = per_call([&] { sink = sink + simulator::evaluate(s).step_s; }, 1.0);
    const std::string what = "evaluate() 4M, chunk " + format_tokens(chunk) + " [evals/s]";
    line(what.c_str(), format_count(1.0 / t), (1.0 / t) / 100000.0, ">= 100,000/s");
  }

  // 2. A full search (time objective, nothing fixed).
  planner::SearchResult last;
  const double t_search = per_call([&] { last = planner::search(r, k4M); }, 1.0);
  line("full search 4M [plans/s]", format_count(1.0 / t_search), 0.05 / t_search, "< 50 ms each");
  std::printf("  %-46s %16s   (%lld evaluations, %s each)\n", "  one search", format_duration_s(t_search).c_str(),
              static_cast<long long>(last.evaluations),
              format_duration_s(t_search / static_cast<double>(last.evaluations)).c_str());
  planner::SearchOptions exhaustive;
  exhaustive.exhaustive = true;
  const double t_pareto = per_call([&] { last = planner::search(r, k4M, exhaustive); }, 1.0);
  std::printf("  %-46s %16s   (%lld evaluations)\n", "exhaustive search 4M (--pareto)", format_duration_s(t_pareto).c_str(),
              static_cast<long long>(last.evaluations));

  // 3. What `oomb plan --model qwen2.5-7b --gpu h200 --context 4M` does, in process.
  const double t_plan = per_call(
      [&] {
        planner::Request q = readme_request();  // catalog loads included
        const planner::SearchResult res = planner::search(q, k4M);
        if (!res.best || res.sparse_fallback) sink = sink + static_cast<double>(planner::diagnose(q, k4M, res).suggestions.size());
        if (res.best) {
          simulator::Scenario s = q.scenario;
          s.config = res.best->config;
          const planner::Plan p = planner::make_plan(s, res.best->summary, "time", q.headroom);
          sink = sink + static_cast<double>(p.to_json().dump().size());
        }
      },
      1.0);
  line("`oomb plan ... --context 4M` in process", format_duration_s(t_plan), 1.0 / t_plan, "< 1 s");

  const double t_max = per_call([&] { sink = sink + static_cast<double>(planner::max_context(r, step::Attention::dense).tokens); }, 1.0);
  std::printf("  %-46s %16s\n", "max_context dense (--max-context, one mode)", format_duration_s(t_max).c_str());

  // 4. The mixtures of experts and layer kinds at 4M (issue 43): the same two targets.
  std::printf("layer kinds and experts, 4M, h200:\n");
  for (const char* id : {"gpt-oss-20b", "gpt-oss-120b", "qwen3-30b-a3b", "mixtral-8x7b", "gemma-3-27b", "llama-4-scout"}) {
    planner::Request q = r;
    q.scenario.model = models::load_model(id);
    simulator::Scenario s = q.scenario;
    s.config.context_tokens = k4M;
    const double t_eval = per_call([&] { sink = sink + simulator::evaluate(s).step_s; }, 0.5);
    const std::string what = std::string("  ") + id + " evaluate() [evals/s]";
    line(what.c_str(), format_count(1.0 / t_eval), (1.0 / t_eval) / 100000.0, ">= 100,000/s");
    const double t = per_call([&] { last = planner::search(q, k4M); }, 0.5);
    const std::string searched = std::string("  ") + id + " full search [plans/s]";
    line(searched.c_str(), format_count(1.0 / t), 0.05 / t, "< 50 ms each");
  }

  // 5. The real command, process start-up included.
  if (argc > 1) {
    const std::string cmd = std::string(argv[1]) + " plan --model qwen2.5-7b --gpu h200 --context 4M >/dev/null 2>&1";
    double best = 1e300;
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      const int status = std::system(cmd.c_str());
      if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "planner_bench: `%s` failed\n", cmd.c_str());
        return 1;
      }
      best = std::min(best, since(t0));
    }
    line("`oomb plan ... --context 4M` wall time", format_duration_s(best), 1.0 / best, "< 1 s");
  }
  return sink < 0 ? 1 : 0;
}
