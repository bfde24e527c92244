#include "gui/view_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <thread>

#include "core/error.h"
#include "core/format.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "step/describe.h"
#include "step/run_record.h"

namespace oomb::gui {

using step::Attention;
using step::Schedule;
using Clock = std::chrono::steady_clock;

namespace {

// Above this many estimated events a layer-detail timeline is simulated at chunk detail instead
// (memory and simulation time stay bounded at 16M tokens).
constexpr double kMaxLayerEvents = 3e6;

simulator::Scenario resolve(const Inputs& in) {
  simulator::Scenario s;
  s.model = models::load_model(in.model);
  s.gpu = models::load_gpu(in.gpu);
  const std::string host = in.host.empty() ? s.gpu.default_host : in.host;
  if (host.empty()) throw Error("host", "", "the GPU profile names no default host", "pick a host");
  s.host = models::load_host(host);
  s.config = in.config;
  return s;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<Figure> make_figures(const simulator::Scenario& s, const step::BufferTable& t,
                                 const simulator::Summary& sum) {
  const auto& c = s.config;
  std::vector<Figure> f;
  int device_rows = 0, host_rows = 0;
  const step::PhaseMask peak_bit = step::phase_bit(t.device_peak().phase);
  for (const auto& r : t.rows)
    if (r.bytes > 0) (r.tier == step::Tier::device ? device_rows += (r.phases & peak_bit) != 0 : ++host_rows);
  f.push_back({"Peak device", format_bytes(sum.peak_device_bytes) + " of " + format_bytes(s.gpu.hbm_capacity_bytes),
               "in phase " + sum.peak_phase + ": sum of the " + std::to_string(device_rows) +
                   " device rows of the memory table alive in it (the largest phase)" +
                   (c.peak_measure == step::PeakMeasure::reserved
                        ? " (runtime reserve " + format_bytes(s.gpu.reserved_bytes) + " included)"
                        : " (allocated bytes: runtime reserve " + format_bytes(s.gpu.reserved_bytes) + " not counted)") +
                   "\nfits when rows + reserve <= hbm_capacity_bytes of " + s.gpu.id});
  f.push_back({"Peak host", format_bytes(sum.peak_host_bytes) + " of " + format_bytes(s.host.pinnable_bytes),
               "of the pinnable bytes: sum of the " + std::to_string(host_rows) + " host rows (offloaded KV / KV-gradient pages, host optimizer)" +
                   "\npinned rows must fit pinnable_bytes, all rows ram_bytes (" + format_bytes(s.host.ram_bytes) +
                   ", host " + s.host.id + ")"});
  f.push_back({"Step time", format_duration_s(sum.step_s),
               "sum over chunks and layer passes of max(compute, h2d copy, d2h copy), plus the first copy-in\n"
               "compute per op = max(FLOPs / (bf16 peak x efficiency), bytes / (HBM bandwidth x efficiency)) + launch"});
  f.push_back({"Throughput", format_count(sum.tokens_per_s) + " tokens/s",
               "context (" + format_tokens(c.context_tokens) + ") / step time"});
  f.push_back({"Compute", format_duration_s(sum.compute_s) + " (" + format_count(sum.flops) + " FLOP)",
               "FLOPs of stage 1 (fill), stage 2 (recompute + backward) and the LM head at the modelled efficiencies\n"
               "achieved: " + format_flops_per_s(sum.flops / std::max(sum.step_s, 1e-12))});
  f.push_back({"Exposed copy", format_duration_s(sum.exposed_copy_s) + " (" +
                                   format_percent(sum.exposed_copy_s / std::max(sum.step_s, 1e-12)) + ")",
               "step time - compute time: copy time not hidden behind compute"});
  f.push_back({"h2d / d2h", format_bytes(sum.h2d_bytes) + " / " + format_bytes(sum.d2h_bytes),
               "pages brought in / written out per layer pass x page bytes (KV page " +
                   format_bytes(t.pages.kv_page_bytes) + ", gradient page " + format_bytes(t.pages.grad_page_bytes) + ")"});
  std::string link = "-";
  if (sum.h2d_bytes > 0 || sum.d2h_bytes > 0)
    link = std::isfinite(sum.required_h2d_bytes_per_s)
               ? format_rate_bytes_per_s(sum.required_h2d_bytes_per_s) + " / " +
                     format_rate_bytes_per_s(sum.required_d2h_bytes_per_s)
               : "cannot hide (1 resident layer)";
  f.push_back({"Link needed", link,
               "h2d / d2h link rate at which no copy time is exposed = have x max over layer passes of (copy time / compute "
               "time)\nhave: h2d " + format_rate_bytes_per_s(s.gpu.h2d_bytes_per_s) + ", d2h " +
                   format_rate_bytes_per_s(s.gpu.d2h_bytes_per_s)});
  f.push_back({"Device pool", std::to_string(sum.kv_pool_pages) + " KV + " + std::to_string(sum.grad_pool_pages) + " grad",
               "pages: high-water page counts of the device pools: (layers being computed or prefetched) x (prefix or "
               "selection union + own chunk pages)\npage = " + std::to_string(c.page_tokens) + " tokens"});
  // Multi-GPU plans: the collectives inside the step (per rank, as the CLI's report states them).
  if (c.gpus > 1 || c.data_parallel > 1) {
    std::string v, formula;
    if (c.gpus > 1) {
      v = "TP x" + std::to_string(c.gpus) + ": " + format_count(static_cast<double>(sum.tp_allreduces)) +
          " all-reduces, " + format_bytes(sum.tp_allreduce_bytes) + ", " + format_duration_s(sum.tp_allreduce_s);
      formula = "tensor parallelism: the activations' all-reduces of one step (two per layer pass, and the LM "
                "head's), each rank's bytes through a ring on the profile's link, inside the passes";
    }
    if (c.data_parallel > 1) {
      const std::string what = c.shard_optimizer ? "gradient reduce-scatter + weight all-gather (ZeRO-1)"
                                                 : "gradient all-reduce";
      v += (v.empty() ? "" : "; ") + std::string("DP x") + std::to_string(c.data_parallel) + ": " +
           (sum.allreduce_bytes > 0 ? format_bytes(sum.allreduce_bytes) + ", " + format_duration_s(sum.allreduce_s)
                                    : std::string("none (no optimizer step)"));
      formula += (formula.empty() ? "" : "\n") + std::string("data parallelism: the ") + what +
                 " of the trained parameters before the update, each rank's bytes through a ring" +
                 (c.nodes > 1 ? " across " + std::to_string(c.nodes) + " nodes (the host profile's network)"
                              : std::string(" inside the node")) +
                 "; job throughput = replicas x tokens/s = " +
                 format_count(sum.tokens_per_s * static_cast<double>(c.data_parallel)) + " tokens/s";
    }
    f.push_back({"Collectives", v, formula + "\nmemory and time figures are per rank"});
  }
  // The configuration in the words plan, simulate and run use (step/describe.h).
  std::string settings;
  for (const step::ConfigFact& k : step::describe(c, s.model)) settings += (settings.empty() ? "" : "\n") + k.knob + ": " + k.text;
  f.push_back({"Settings",
               step::attention_text(c) +
                   (c.schedule == step::Schedule::oomb ? ", " + step::residency_text(c, s.model) : std::string()),
               settings});
  std::string why;
  for (const auto& n : sum.notes) why += (why.empty() ? "" : "\n") + n;
  f.push_back({"Binding", std::string(sum.feasible ? "fits, " : "DOES NOT FIT: ") + to_string(sum.binding),
               why.empty() ? "largest of the device / pinned / RAM ratios when over; else the slowest resource" : why});
  return f;
}

std::string message_of(const std::exception& e) { return e.what(); }

}  // namespace

step::Config Inputs::default_config() {
  step::Config c;
  c.context_tokens = 4 * 1024 * 1024;
  return c;
}

bool Inputs::operator==(const Inputs& o) const {
  return model == o.model && gpu == o.gpu && host == o.host && config.to_json() == o.config.to_json();
}

EventKey event_key(const traces::Event& e) { return {static_cast<int>(e.kind), e.stage, e.chunk, e.layer, e.op}; }

ViewModel::ViewModel() : ViewModel(Inputs{}) {}

ViewModel::ViewModel(Inputs in) : inputs_(std::move(in)) { recompute(); }

ViewModel::~ViewModel() {
  if (job_.valid()) job_.wait();
}

bool ViewModel::set_inputs(const Inputs& in) {
  if (in == inputs_) return false;
  inputs_ = in;
  recompute();
  return true;
}

const std::vector<std::string>& ViewModel::presets() {
  static const std::vector<std::string> p = {"oomb", "oomb-published"};
  return p;
}

bool ViewModel::apply_preset(const std::string& name) {
  Inputs in = inputs_;
  if (!step::apply_preset(name, in.config)) return false;
  set_inputs(in);
  return true;
}

std::vector<int64_t> ViewModel::curve_contexts() {
  std::vector<int64_t> v;
  for (int64_t n = 8 * 1024; n <= 16 * 1024 * 1024; n *= 2) v.push_back(n);
  return v;
}

void ViewModel::recompute() {
  const auto t0 = Clock::now();
  ++generation_;
  Results r;
  try {
    r.scenario = resolve(inputs_);
    r.table = simulator::memory_table(r.scenario);
    r.summary = simulator::evaluate(r.scenario);
    r.figures = make_figures(r.scenario, r.table, r.summary);
    r.ok = true;
  } catch (const std::exception& e) {
    r.ok = false;
    r.error = message_of(e);
  }
  if (r.ok) {
    try {
      simulator::check_event_simulation_size(r.scenario, "timeline", "",
                                             "a larger chunk, fewer layers or a shorter context; the summary, "
                                             "curves and feasibility map have no such limit");
    } catch (const Error& e) {
      r.timeline_refused = e.problem() + " (" + e.hint() + ")";
    }
  }
  if (r.ok) {
    // Curves: the current knobs with the schedule / attention of each curve, over 8K..16M.
    const struct {
      const char* label;
      step::Schedule schedule;
      step::Attention attention;
    } variants[] = {{"oomb dense", step::Schedule::oomb, step::Attention::dense},
                    {"oomb sparse", step::Schedule::oomb, step::Attention::sparse},
                    {"standard", step::Schedule::standard, step::Attention::dense}};
    simulator::Scenario s = r.scenario;
    for (const auto& v : variants) {
      Curve curve{v.label, v.schedule, v.attention, {}};
      for (int64_t n : curve_contexts()) {
        s.config = r.scenario.config;
        s.config.schedule = v.schedule;
        s.config.attention = v.attention;
        s.config.context_tokens = n;
        CurvePoint p;
        p.context_tokens = n;
        try {
          const auto sum = simulator::evaluate(s);
          p.valid = true;
          p.feasible = sum.feasible;
          p.peak_device_bytes = sum.peak_device_bytes;
          p.peak_host_bytes = sum.peak_host_bytes;
          p.step_s = sum.step_s;
          p.binding = sum.binding;
        } catch (const std::exception& e) {
          p.invalid = message_of(e);
        }
        curve.points.push_back(std::move(p));
      }
      r.curves.push_back(std::move(curve));
    }
    // Feasibility map: oomb schedule, chunk x (dense | sparse budget).
    auto& fm = r.feasibility;
    fm.chunks = {512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    fm.budgets = {0, 16, 32, 64, 128, 256, 512, 1024};
    fm.min_step_s = INFINITY;
    fm.max_step_s = 0;
    for (int64_t chunk : fm.chunks)
      for (int64_t budget : fm.budgets) {
        s.config = r.scenario.config;
        s.config.schedule = step::Schedule::oomb;
        s.config.chunk_tokens = chunk;
        s.config.attention = budget == 0 ? step::Attention::dense : step::Attention::sparse;
        if (budget > 0) s.config.page_budget = budget;
        FeasibilityCell cell;
        try {
          const auto sum = simulator::evaluate(s);
          cell.valid = true;
          cell.feasible = sum.feasible;
          cell.step_s = sum.step_s;
          cell.peak_device_bytes = sum.peak_device_bytes;
          cell.binding = sum.binding;
          if (sum.feasible) {
            fm.min_step_s = std::min(fm.min_step_s, sum.step_s);
            fm.max_step_s = std::max(fm.max_step_s, sum.step_s);
          }
        } catch (const std::exception& e) {
          cell.invalid = message_of(e);
        }
        fm.cells.push_back(std::move(cell));
      }
    if (!std::isfinite(fm.min_step_s)) fm.min_step_s = 0;
  }
  r.compute_ms = seconds_since(t0) * 1e3;
  results_ = std::move(r);
}

void ViewModel::set_timeline_request(const TimelineRequest& r) {
  if (r == request_) return;
  request_ = r;
  refilter();
}

void ViewModel::start_job() {
  const simulator::Scenario s = results_.scenario;
  traces::Detail detail = request_.detail;
  job_generation_ = generation_;
  job_detail_ = detail;
  if (!results_.timeline_refused.empty()) {  // too large to simulate: the refusal is the timeline
    timeline_ = std::make_unique<Timeline>();
    timeline_->refused = true;
    timeline_->error = results_.timeline_refused;
    timeline_generation_ = generation_;
    return;
  }
  const auto pages = results_.table.pages;
  std::string note;
  if (detail == traces::Detail::layer || detail == traces::Detail::op) {
    const double est = static_cast<double>(std::max<int64_t>(pages.chunks, 1)) * static_cast<double>(pages.layers) * 9;
    if (est > kMaxLayerEvents) {
      detail = traces::Detail::chunk;
      note = "chunk detail: layer detail would be ~" + format_count(est) + " events";
    }
  }
  job_ = std::async(std::launch::async, [s, detail, note, pages]() {
    auto t = std::make_unique<Timeline>();
    t->detail = detail;
    t->note = note;
    t->chunks = s.config.schedule == step::Schedule::oomb ? std::max<int64_t>(pages.chunks, 1) : 1;
    const auto t0 = Clock::now();
    try {
      auto r = simulator::simulate_events(s, detail);
      t->trace = std::move(r.trace);
      t->summary = std::move(r.summary);
      t->ok = true;
    } catch (const std::exception& e) {
      t->error = e.what();
    }
    t->simulate_s = seconds_since(t0);
    if (t->ok) {
      // Pool occupancy, bucketed by time (maximum per bucket so that peaks survive).
      auto& p = t->pool;
      p.step_s = static_cast<double>(t->trace.summary.step_ns) * 1e-9;
      p.pool_capacity_pages = t->summary.device_pool_pages;
      p.pool_allocated_pages = pages.kv_pool_capacity_pages + pages.grad_pool_capacity_pages;
      const auto& mem = t->trace.memory;
      if (!mem.empty()) {
        const int64_t span = std::max<int64_t>(1, t->trace.summary.step_ns);
        const size_t buckets = std::min(PoolSeries::kBuckets, mem.size());
        p.t_s.resize(buckets);
        p.pool_pages.assign(buckets, -1);
        p.device_bytes.assign(buckets, -1);
        for (size_t b = 0; b < buckets; ++b) p.t_s[b] = p.step_s * static_cast<double>(b) / static_cast<double>(buckets);
        for (const auto& m : mem) {
          const size_t b = std::min(buckets - 1, static_cast<size_t>(static_cast<double>(m.t_ns) / static_cast<double>(span) *
                                                                     static_cast<double>(buckets)));
          p.pool_pages[b] = std::max(p.pool_pages[b], m.pool_pages_used);
          p.device_bytes[b] = std::max(p.device_bytes[b], m.device_bytes);
        }
        // Empty buckets carry the previous level (occupancy is a step function).
        for (size_t b = 0; b < buckets; ++b)
          if (p.pool_pages[b] < 0) {
            p.pool_pages[b] = b ? p.pool_pages[b - 1] : 0;
            p.device_bytes[b] = b ? p.device_bytes[b - 1] : mem.front().device_bytes;
          }
      }
    }
    return t;
  });
}

void ViewModel::refilter() {
  if (!timeline_ || !timeline_->ok) return;
  Timeline& t = *timeline_;
  const int64_t n = t.chunks;
  int64_t first = request_.chunk_first, last = request_.chunk_last;
  if (first < 0 || last < 0) {
    last = n - 1;
    first = std::max<int64_t>(0, n - 2);
  }
  first = std::clamp<int64_t>(first, 0, n - 1);
  last = std::clamp<int64_t>(last, first, n - 1);
  t.chunk_first = first;
  t.chunk_last = last;
  for (int st = 0; st < 2; ++st) {
    t.stage_events[st].clear();
    t.stage_t0_ns[st] = INT64_MAX;
    t.stage_t1_ns[st] = 0;
  }
  t.has_comm = false;
  for (size_t i = 0; i < t.trace.events.size(); ++i) {
    const auto& e = t.trace.events[i];
    if (e.kind != traces::EventKind::compute && e.kind != traces::EventKind::copy_h2d &&
        e.kind != traces::EventKind::copy_d2h && e.kind != traces::EventKind::collective)
      continue;
    if (e.stage < 1 || e.stage > 2 || e.chunk < first || e.chunk > last) continue;
    if (e.kind == traces::EventKind::collective) t.has_comm = true;
    const int st = e.stage - 1;
    t.stage_events[st].push_back(i);
    t.stage_t0_ns[st] = std::min(t.stage_t0_ns[st], e.start_ns);
    t.stage_t1_ns[st] = std::max(t.stage_t1_ns[st], e.end_ns);
  }
  for (int st = 0; st < 2; ++st)
    if (t.stage_events[st].empty()) t.stage_t0_ns[st] = t.stage_t1_ns[st] = 0;
}

void ViewModel::compare_overlay() {
  if (!overlay_) return;
  Overlay& o = *overlay_;
  o.validation.reset();
  o.validation_error.clear();
  if (!results_.ok) {
    for (auto& r : o.ranks) {
      r.validation.reset();
      r.binds = false;
      if (r.found) r.error = results_.error;
    }
    o.binding_rank = -1;
    o.validation_error = results_.error;
    show_overlay_rank();
    return;
  }
  validation::ValidationRequest req;
  req.scenario = results_.scenario;
  if (o.ranks.empty()) {
    try {
      req.trace = &o.trace;
      req.trace_where = o.path;
      o.validation = validation::validate_run(req);
    } catch (const std::exception& e) {
      o.validation_error = e.what();
    }
  } else {
    // Every rank against the current inputs, as `oomb validate` judges rank 0's trace of the run.
    for (auto& r : o.ranks) {
      const traces::Trace* t = r.rank == o.rank ? &o.trace
                               : rank_traces_[static_cast<size_t>(r.rank)] ? &*rank_traces_[static_cast<size_t>(r.rank)]
                                                                            : nullptr;
      try {
        r = validation::judge_rank(req, r.rank, r.trace, t);
      } catch (const std::exception& e) {
        r.validation.reset();
        r.error = e.what();
      }
    }
    o.binding_rank = validation::mark_binding_rank(o.ranks);
  }
  show_overlay_rank();
}

// The shown rank: its events by key, its comparison with the predicted timeline and (of a
// multi-rank run) its verdict, from the rank's.
void ViewModel::show_overlay_rank() {
  Overlay& o = *overlay_;
  o.by_key.clear();
  for (size_t i = 0; i < o.trace.events.size(); ++i) o.by_key.emplace(event_key(o.trace.events[i]), i);
  o.comparison = {};
  if (const Timeline* t = timeline(); t && t->ok) o.comparison = traces::compare(t->trace, o.trace);
  if (o.ranks.empty()) return;
  const validation::RankVerdict& v = o.ranks[static_cast<size_t>(o.rank)];
  o.validation = v.validation;
  o.validation_error = v.validation ? "" : v.error;
}

void ViewModel::poll_timeline() {
  if (job_.valid()) {
    if (job_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    timeline_ = job_.get();
    timeline_generation_ = job_generation_;
    refilter();
    compare_overlay();
  }
  if (!results_.ok) return;
  const bool stale = !timeline_ || timeline_generation_ != generation_ || job_detail_ != request_.detail;
  if (stale) start_job();
}

bool ViewModel::wait_timeline(double timeout_s) {
  const auto t0 = Clock::now();
  for (;;) {
    poll_timeline();
    if (timeline() || !results_.ok) return timeline() != nullptr;
    if (seconds_since(t0) > timeout_s) return false;
    if (job_.valid()) job_.wait_for(std::chrono::milliseconds(20));
  }
}

std::string ViewModel::load_trace(const std::string& path, bool adopt_run_config) {
  try {
    auto o = std::make_unique<Overlay>();
    o->path = path;
    o->trace = traces::read_trace(path);
    std::vector<validation::RankTrace> others = validation::read_other_rank_traces(path, o->trace);
    if (adopt_run_config && o->trace.metadata.source != "simulator") {
      const step::RunRecord run = step::run_record_from_json(o->trace.metadata.extra, path);
      Inputs next = inputs_;
      next.model = run.model;
      next.config = run.config;
      set_inputs(next);
    }
    const step::RunRank place = validation::rank_of(o->trace);
    o->world = place.world;
    o->rank = place.rank;
    rank_traces_.clear();
    if (!others.empty()) {
      rank_traces_.resize(static_cast<size_t>(o->world));
      validation::RankVerdict zero;
      zero.trace = path;
      zero.found = true;
      o->ranks.push_back(zero);
      for (auto& t : others) {
        validation::RankVerdict v;
        v.rank = t.rank;
        v.trace = t.path;
        v.found = t.trace.has_value();
        o->ranks.push_back(v);
        rank_traces_[static_cast<size_t>(t.rank)] = std::move(t.trace);
      }
    }
    overlay_ = std::move(o);
    compare_overlay();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

void ViewModel::clear_overlay() {
  overlay_.reset();
  rank_traces_.clear();
}

std::string ViewModel::select_rank(int rank) {
  if (!overlay_) return "no measured trace is loaded (load rank 0's trace of the run, t.json)";
  Overlay& o = *overlay_;
  if (o.ranks.empty()) {
    if (o.world > 1)
      return o.path + " is rank " + std::to_string(o.rank) + "'s trace of a " + std::to_string(o.world) +
             "-rank run: load rank 0's (its name without \".rank" + std::to_string(o.rank) +
             "\"; the others are found beside it) to pick one";
    if (rank == 0) return "";
    return "rank " + std::to_string(rank) + " is beyond the run's world size: " + o.path +
           " is a one-process run (rank 0 only)";
  }
  if (rank < 0 || rank >= o.world)
    return "rank " + std::to_string(rank) + " is beyond the run's world size: " + o.ranks[0].trace +
           " is rank 0 of " + std::to_string(o.world) + " processes (ranks 0.." + std::to_string(o.world - 1) + ")";
  const validation::RankVerdict& want = o.ranks[static_cast<size_t>(rank)];
  if (!want.found) return "rank " + std::to_string(rank) + "'s trace is " + want.error;
  if (rank == o.rank) return "";
  rank_traces_[static_cast<size_t>(o.rank)] = std::move(o.trace);
  o.trace = std::move(*rank_traces_[static_cast<size_t>(rank)]);
  rank_traces_[static_cast<size_t>(rank)].reset();
  o.rank = rank;
  o.path = want.trace;
  show_overlay_rank();
  return "";
}

std::string ViewModel::use_measured_overlap() {
  if (!overlay_) return "no measured trace loaded";
  if (!overlay_->validation || !overlay_->validation->implied_selection_overlap)
    return "the run measured no sparse selection unions to imply an overlap";
  Inputs next = inputs_;
  const double was = next.config.selection_overlap;
  next.config.selection_overlap = *overlay_->validation->implied_selection_overlap;
  set_inputs(next);
  char line[128];
  std::snprintf(line, sizeof line, "selection overlap %.2f -> %.2f (what the run's unions imply)", was,
                next.config.selection_overlap);
  return line;
}

std::string ViewModel::plan_for_me() {
  if (!results_.ok) return "cannot plan: " + results_.error;
  planner::Request r;
  r.scenario = results_.scenario;
  r.allow_sparse = inputs_.config.attention == step::Attention::sparse;
  try {
    const planner::SearchResult res = planner::search(r, inputs_.config.context_tokens);
    if (!res.best) {
      const auto& closest = res.closest;
      return "no plan fits at " + format_tokens(inputs_.config.context_tokens) + " tokens" +
             (closest ? " (closest fails on " + std::string(to_string(closest->summary.binding)) + ")" : std::string()) +
             "; see `oomb plan` for the diagnosis";
    }
    Inputs next = inputs_;
    next.config = res.best->config;
    set_inputs(next);
    return "planned: " + std::string(step::to_string(next.config.attention)) + ", chunk " +
           format_tokens(next.config.chunk_tokens) + ", step " + format_duration_s(res.best->summary.step_s) +
           ", peak " + format_bytes(res.best->summary.peak_device_bytes) + (res.sparse_fallback ? " (sparse fallback)" : "");
  } catch (const Error& e) {
    return e.what();
  }
}

int64_t ViewModel::layout_gpus_per_node() const {
  const auto& c = inputs_.config;
  const int64_t nodes = std::max<int64_t>(1, c.nodes);
  return std::max<int64_t>(1, c.gpus) * std::max<int64_t>(1, c.data_parallel) / nodes;
}

const std::vector<planner::ParallelPlan>& ViewModel::layouts() {
  if (layouts_generation_ == generation_) return layouts_;
  layouts_generation_ = generation_;
  layouts_.clear();
  const int64_t gpus = layout_gpus_per_node();
  if (!results_.ok || gpus * std::max<int64_t>(1, inputs_.config.nodes) < 2) return layouts_;
  const int64_t nodes = std::max<int64_t>(1, inputs_.config.nodes);
  const double headroom = planner::kDefaultHeadroom;
  try {
    layouts_ = planner::long_context_layouts(results_.scenario, gpus, nodes, headroom);
  } catch (const Error&) {
    layouts_.clear();  // a context shorter than the GPUs, ...: nothing to show
  }
  return layouts_;
}

std::string ViewModel::export_plan(const std::string& path) const {
  if (!results_.ok) return "cannot export: " + results_.error;
  if (path.empty()) return "give a file name";
  try {
    const planner::Plan plan = planner::make_plan(results_.scenario, results_.summary, "what-if", 0.0);
    planner::save_plan(path, plan);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace oomb::gui
