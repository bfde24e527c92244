// oomb_fuzz: a seeded mutation fuzzer over every input oomb reads (issue #13).
//
//   oomb_fuzz TARGET [--iterations N] [--seconds S] [--cpu-seconds S] [--hang-seconds S] [--seed K]
//                    [--corpus DIR] [--crashes DIR]
//   oomb_fuzz --list
//
// Budgets: --iterations (0: none), --seconds (wall clock), --cpu-seconds (this process's CPU time,
// so a niced run on a loaded machine still gets that much fuzzing); the first one reached ends the
// run. --hang-seconds (CPU time, default 60) fails an input that takes longer than that: a hang.
//
// Each iteration takes an input from the target's seed corpus (tests/fuzz/corpus/TARGET/*), mutates
// it (bytes, JSON values, or argv words), and feeds it to the target. The contract under test: bad
// input ends in oomb::Error (exit 2 in the CLI) and nothing else: any other exception, a crash, an
// abort or (for the CLI targets) exit code 3 or 4 is a failure, and the input is written to
// --crashes (default: the working directory) as crash-TARGET-ITERATION, for the corpus. So is an
// input that runs past --hang-seconds of CPU time.
// Deterministic: the same seed and iteration count replay the same inputs.
#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "core/json.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "models/hf_config.h"
#include "models/specs.h"
#include "planner/plan.h"
#include "planner/points.h"
#include "planner/recall_curve.h"
#include "simulator/calibration.h"
#include "traces/trace.h"

namespace fs = std::filesystem;
using namespace oomb;

namespace {

// splitmix64: small, seedable, the same on every platform.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
  bool coin(int one_in) { return below(static_cast<size_t>(one_in)) == 0; }
};

// Values that broke oomb before (issue #13) or sit on a boundary.
const std::vector<std::string> kNumbers = {
    "0", "-1", "1", "2", "3", "7", "17", "1e999", "-1e999", "1e308", "1e-300", "-0", "0.5", "1.0000001",
    "9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
    "-9223372036854775808", "1099511627776", "4294967296", "2147483648", "65536", "4096", "1e18", "NaN", "nan",
    "inf", "-inf", "1e-7", "123456789012345678901234567890"};
const std::vector<std::string> kTokens = {"{", "}", "[", "]", ",", ":", "\"", "null", "true", "false", "\"\"",
                                          "\\u0000", "\\ud800", "\xff", "\xc3", "{}", "[]", "\"x\":", "//", "\n"};

std::string deep(size_t n) { return std::string(n, '[') + std::string(n, ']'); }

void mutate_bytes(std::string& s, Rng& r, const std::vector<std::string>& corpus) {
  const int rounds = 1 + static_cast<int>(r.below(4));
  for (int k = 0; k < rounds; ++k) {
    const size_t n = s.size();
    switch (r.below(9)) {
      case 0:
        if (n) s[r.below(n)] ^= static_cast<char>(1u << r.below(8));
        break;
      case 1:
        if (n) s[r.below(n)] = static_cast<char>(r.below(256));
        break;
      case 2: s.insert(r.below(n + 1), 1, static_cast<char>(r.below(256))); break;
      case 3:
        if (n) {
          const size_t at = r.below(n), len = 1 + r.below(std::min<size_t>(n - at, 64));
          s.erase(at, len);
        }
        break;
      case 4:
        if (n) {
          const size_t at = r.below(n), len = 1 + r.below(std::min<size_t>(n - at, 64));
          s.insert(r.below(n + 1), s.substr(at, len));
        }
        break;
      case 5: s.insert(r.below(n + 1), kTokens[r.below(kTokens.size())]); break;
      case 6: {  // replace a number literal
        std::vector<size_t> starts;
        for (size_t i = 0; i < n; ++i)
          if ((std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '-') &&
              (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1]))))
            starts.push_back(i);
        if (starts.empty()) break;
        const size_t at = starts[r.below(starts.size())];
        size_t end = at + 1;
        while (end < n && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '.' || s[end] == '+' ||
                           s[end] == '-'))
          ++end;
        s.replace(at, end - at, kNumbers[r.below(kNumbers.size())]);
        break;
      }
      case 7: {  // splice with another seed
        const std::string& o = corpus[r.below(corpus.size())];
        if (o.empty()) break;
        const size_t from = r.below(o.size());
        s.replace(r.below(n + 1), r.below(64), o.substr(from, r.below(256)));
        break;
      }
      case 8:
        if (r.coin(4)) s.insert(r.below(n + 1), deep(r.coin(2) ? 70 : 100000));
        else if (n) s.resize(r.below(n));  // truncation
        break;
    }
  }
}

// JSON-aware: parse, change one value / key, print. Reaches the loaders past the syntax check.
Json interesting_value(Rng& r) {
  switch (r.below(8)) {
    case 0: return Json::parse(kNumbers[r.below(kNumbers.size() - 4)], nullptr, false);  // finite literals
    case 1: return nullptr;
    case 2: return r.coin(2);
    case 3: return std::string(r.coin(2) ? "" : "x");
    case 4: return Json::array();
    case 5: return Json::object();
    case 6: return static_cast<int64_t>(r.next() >> r.below(64));
    default: return -static_cast<double>(r.below(1000)) / 7.0;
  }
}

bool mutate_json(std::string& s, Rng& r) {
  Json j = Json::parse(s, nullptr, false);
  if (j.is_discarded()) return false;
  std::vector<Json*> nodes;
  std::function<void(Json&)> walk = [&](Json& v) {
    nodes.push_back(&v);
    if (nodes.size() > 4000) return;
    if (v.is_object() || v.is_array())
      for (auto& c : v) walk(c);
  };
  walk(j);
  const int rounds = 1 + static_cast<int>(r.below(3));
  for (int k = 0; k < rounds; ++k) {
    Json& v = *nodes[r.below(nodes.size())];
    switch (r.below(5)) {
      case 0:
      case 1: v = interesting_value(r); break;
      case 2:
        if (v.is_object() && !v.empty()) {
          auto it = v.begin();
          std::advance(it, static_cast<long>(r.below(v.size())));
          v.erase(it);
        }
        break;
      case 3:
        if (v.is_array() && !v.empty()) v.push_back(v[r.below(v.size())]);
        else if (v.is_number()) v = v.get<double>() * (r.coin(2) ? 1e6 : -1);
        break;
      case 4:
        if (v.is_object()) v["unexpected"] = interesting_value(r);
        break;
    }
    nodes.clear();
    walk(j);
  }
  s = j.dump();
  // Text-level extras the DOM cannot hold: an overflowing literal, a repeated key.
  if (r.coin(4)) {
    const size_t colon = s.find(':', r.below(s.size()));
    if (colon != std::string::npos) s.insert(colon + 1, r.coin(2) ? "1e999," : "\"dup\":1,");
  }
  return true;
}

// argv as one word per line; mutations pick flags and values from a dictionary.
const std::vector<std::string> kFlags = {
    "--model", "--gpu", "--host", "--context", "--preset", "--schedule", "--attention", "--chunk", "--page",
    "--budget", "--selection", "--selection-overlap", "--selection-memory", "--resident-layers", "--kv-dtype",
    "--kv-grad-dtype", "--param-dtype", "--param-grad-dtype", "--optimizer", "--checkpointing", "--kept-layers",
    "--logits-chunk", "--peak-measure", "--gpus", "--layers", "--json", "--detail", "--max-context", "--objective",
    "--allow-sparse", "--min-budget", "--min-recall", "--headroom", "--pareto", "--page-copy-latency"};
const std::vector<std::string> kWords = {
    "tiny", "qwen2.5-0.5b", "qwen2.5-7b", "h200", "a100-40gb", "workstation-128g", "4K", "2K", "1M", "1G", "0",
    "-1", "64", "128", "512", "1K", "7", "3", "sparse", "dense", "standard", "oomb", "oomb-published", "all", "fp8",
    "bf16", "fp32", "gpu", "host", "auto", "true", "false", "2", "nan", "inf", "1e999", "0.5", "1", "memory", "time",
    "context", "bounded", "device", "allocated", "quest", "local", "9223372036854775807", "1099511627776", "16M",
    "18446744073709551615", "", "=", "--", "/nonexistent/m.json"};

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

void mutate_argv(std::string& s, Rng& r) {
  std::vector<std::string> w = split_lines(s);
  const int rounds = 1 + static_cast<int>(r.below(3));
  for (int k = 0; k < rounds; ++k) {
    const size_t n = w.size();
    switch (r.below(6)) {
      case 0:
        if (n) w[r.below(n)] = kWords[r.below(kWords.size())];
        break;
      case 1:
        if (n) w[r.below(n)] = kNumbers[r.below(kNumbers.size())];
        break;
      case 2: {
        const size_t at = r.below(n + 1);
        w.insert(w.begin() + static_cast<long>(at), kWords[r.below(kWords.size())]);
        w.insert(w.begin() + static_cast<long>(at), kFlags[r.below(kFlags.size())]);
        break;
      }
      case 3:
        if (n) w.erase(w.begin() + static_cast<long>(r.below(n)));
        break;
      case 4:
        if (n) w.push_back(w[r.below(n)]);
        break;
      case 5:
        if (n) mutate_bytes(w[r.below(n)], r, {""});
        break;
    }
  }
  s.clear();
  for (const auto& x : w) s += x + "\n";
}

// ---- targets ----------------------------------------------------------------------------------

enum class Kind { json, bytes, argv };

struct Target {
  const char* name;
  Kind kind;
  int64_t default_iterations;  // the CI budget: about 3-8 s each on one loaded core
  std::function<void(const std::string&)> run;
};

// tests/fuzz/micro.json: the model of the committed safetensors seed (a few KB).
models::ModelSpec micro_model() {
  models::ModelSpec m;
  m.id = "micro";
  m.family = "qwen2";
  m.source = "oomb fuzz suite";
  m.layers = 1;
  m.hidden = 8;
  m.q_heads = 2;
  m.kv_heads = 1;
  m.head_dim = 4;
  m.ffn_hidden = 16;
  m.vocab = 16;
  m.qkv_bias = true;
  m.max_position = 4096;
  return m;
}

// On tmpfs (/dev/shm) unless TMPDIR names a place: the file targets write every input, and on this
// VM's disk the tokens target waited for those writes 3/4 of the time (24,174 inputs in 10 s there,
// 203,293 on /dev/shm).
fs::path scratch_parent() {
  std::error_code ec;
  const char* tmpdir = std::getenv("TMPDIR");
  if ((tmpdir == nullptr || *tmpdir == '\0') && fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  return fs::temp_directory_path();
}

std::string scratch_dir() {
  static const std::string d = [] {
    std::string tmpl = (scratch_parent() / "oomb-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a scratch directory");
    return tmpl;
  }();
  return d;
}

std::string scratch_file(const std::string& bytes) {
  const std::string p = scratch_dir() + "/input";
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  return p;
}

// The CLI in-process. Output flags are dropped (a mutated argv must never write files), stdout
// and stderr go to /dev/null. Exit codes 3 (out of host memory) and 4 (internal error) are bugs.
void run_cli(const std::string& sub, const std::string& input) {
  std::vector<std::string> words = {"oomb", sub};
  for (const auto& w : split_lines(input)) {
    bool output = false;
    for (const char* f : {"--out", "--timeline", "--chrome", "--report", "--trace", "--save", "--dump"})
      if (w.find(f) != std::string::npos) output = true;
    if (!output && w.find('/') == std::string::npos) words.push_back(w);
  }
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = ::dup(1), saved_err = ::dup(2);
  const int null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 1);
  ::dup2(null, 2);
  int rc = 0;
  try {
    rc = cli::run_main(static_cast<int>(words.size()), argv.data());
  } catch (...) {
    rc = -1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  ::close(null);
  ::close(saved_out);
  ::close(saved_err);
  if (rc < 0 || rc > 2) throw std::runtime_error("oomb " + sub + " exited with " + std::to_string(rc));
  if (rc == 2) throw Error("refused (exit 2)");
}

// A scratch file with a given name (the points reader decides CSV or JSON by the extension; the
// adapter and checkpoint readers read fixed names in a folder).
std::string scratch_named(const std::string& name, const std::string& bytes) {
  const fs::path p = fs::path(scratch_dir()) / name;
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  return p.string();
}

// A two-shard checkpoint of the micro model (shards written once): the fuzzed input is its index,
// tests/fuzz/corpus/checkpoint_index/ the index write_checkpoint writes for these shards.
std::string micro_shards_dir() {
  static const std::string d = [] {
    const std::string dir = (fs::path(scratch_dir()) / "ckpt").string();
    const executor::Weights w = executor::random_weights(micro_model(), 7);
    executor::CheckpointWrite how;
    how.max_shard_bytes = 1024;  // the micro model's 2.7 KB in a few shards
    executor::write_checkpoint(w, dir, how);
    return dir;
  }();
  return d;
}

std::vector<Target> targets() {
  return {
      {"model", Kind::json, 20000, [](const std::string& s) { models::model_from_json(parse_json(s, "fuzz"), "fuzz"); }},
      {"gpu", Kind::json, 10000, [](const std::string& s) { models::gpu_from_json(parse_json(s, "fuzz"), "fuzz"); }},
      {"host", Kind::json, 20000, [](const std::string& s) { models::host_from_json(parse_json(s, "fuzz"), "fuzz"); }},
      {"plan", Kind::json, 8000,
       [](const std::string& s) {
         const planner::Plan p = planner::plan_from_json(parse_json(s, "fuzz"), "fuzz");
         (void)p.scenario();
       }},
      {"trace", Kind::json, 5000,
       [](const std::string& s) {
         const traces::Trace t = traces::trace_from_json(parse_json(s, "fuzz"), "fuzz");
         // What validate and calibrate derive from it, before any simulation.
         (void)simulator::scenario_of_trace(t, "fuzz", models::load_gpu("h200"));
       }},
      {"recall", Kind::json, 20000,
       [](const std::string& s) {
         const planner::RecallCurve c = planner::recall_curve_from_json(parse_json(s, "fuzz"), "fuzz");
         for (double r : {0.1, 0.5, 0.9, 1.0}) {
           try {
             planner::min_budget_for_recall(c, r, "fuzz");
           } catch (const Error&) {
           }
         }
       }},
      {"safetensors", Kind::bytes, 5000,
       [](const std::string& s) { executor::read_safetensors(scratch_file(s), micro_model()); }},
      {"tokens", Kind::bytes, 8000,
       [](const std::string& s) {
         const auto t = executor::TokenSource::from_file(scratch_file(s), 16);
         (void)t.sequence(3, 8);
       }},
      {"hf_config", Kind::json, 10000,
       [](const std::string& s) { models::model_from_hf_config(parse_json(s, "fuzz"), "fuzz", "fuzz"); }},
      {"points_csv", Kind::bytes, 3000,
       [](const std::string& s) {
         (void)planner::read_points(scratch_named("points.csv", s), "h200", models::load_gpu("h200"));
       }},
      {"adapter_config", Kind::json, 10000,
       [](const std::string& s) {
         scratch_named("adapter/adapter_config.json", s);
         (void)executor::read_adapter_config((fs::path(scratch_dir()) / "adapter").string());
       }},
      {"checkpoint_index", Kind::json, 3000,
       [](const std::string& s) {
         const std::string dir = micro_shards_dir();
         std::ofstream((fs::path(dir) / "model.safetensors.index.json").string(), std::ios::binary | std::ios::trunc)
             << s;
         (void)executor::read_checkpoint(dir, micro_model());
       }},
      {"simulate_flags", Kind::argv, 6000, [](const std::string& s) { run_cli("simulate", s); }},
      {"plan_flags", Kind::argv, 3000, [](const std::string& s) { run_cli("plan", s); }},
  };
}

// ---- crash capture ----------------------------------------------------------------------------

std::string g_crash_path;
std::string g_input;
const char* g_target = "";
int g_stderr = 2;  // a copy of the real stderr: the CLI targets point fd 2 at /dev/null

extern "C" void on_fatal_signal(int sig) {
  // Async-signal-safe only: the input was prepared before the iteration.
  const int fd = ::open(g_crash_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t left = static_cast<ssize_t>(g_input.size());
    const char* p = g_input.data();
    while (left > 0) {
      const ssize_t w = ::write(fd, p, static_cast<size_t>(left));
      if (w <= 0) break;
      p += w;
      left -= w;
    }
    ::close(fd);
  }
  const char msg[] = "oomb_fuzz: fatal signal; the input is in ";
  (void)!::write(g_stderr, msg, sizeof msg - 1);
  (void)!::write(g_stderr, g_crash_path.c_str(), g_crash_path.size());
  (void)!::write(g_stderr, "\n", 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

// SIGPROF: the current input has used --hang-seconds of CPU time.
extern "C" void on_hang(int) {
  const char msg[] = "oomb_fuzz: hang (the input ran past --hang-seconds of CPU time)\n";
  (void)!::write(g_stderr, msg, sizeof msg - 1);
  on_fatal_signal(SIGABRT);
}

// The CPU time of this process (all threads), in seconds.
double cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Arms (or, with 0, disarms) the hang watchdog: SIGPROF after S seconds of this process's CPU time.
void arm_watchdog(double s) {
  itimerval t{};
  t.it_value.tv_sec = static_cast<time_t>(s);
  t.it_value.tv_usec = static_cast<suseconds_t>((s - static_cast<double>(t.it_value.tv_sec)) * 1e6);
  ::setitimer(ITIMER_PROF, &t, nullptr);
}

std::vector<std::string> load_corpus(const fs::path& dir) {
  std::vector<std::string> out;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // deterministic order
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    out.push_back(ss.str());
  }
  return out;
}

int usage() {
  std::fprintf(stderr,
               "usage: oomb_fuzz TARGET [--iterations N] [--seconds S] [--cpu-seconds S] [--hang-seconds S]\n"
               "                        [--seed K] [--corpus DIR] [--crashes DIR]\n"
               "       oomb_fuzz --list\n"
               "  --iterations N    stop after N inputs (0: no limit; default: the target's CI budget)\n"
               "  --seconds S       stop after S seconds of wall-clock time\n"
               "  --cpu-seconds S   stop after S seconds of this process's CPU time (for niced runs)\n"
               "  --hang-seconds S  an input that takes more than S CPU seconds is a hang (default 60; 0: off)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string name = argv[1];
  const auto all = targets();
  if (name == "--list") {
    for (const auto& t : all) std::printf("%s %lld\n", t.name, static_cast<long long>(t.default_iterations));
    return 0;
  }
  const Target* target = nullptr;
  for (const auto& t : all)
    if (name == t.name) target = &t;
  if (!target) return usage();
  int64_t iterations = target->default_iterations;
  double seconds = 0;      // wall clock; 0: no limit
  double cpu_limit = 0;    // CPU time; 0: no limit
  double hang_limit = 60;  // CPU time per input; 0: off
  uint64_t seed = 13;
  fs::path corpus_dir = fs::path(OOMB_SOURCE_DIR) / "tests/fuzz/corpus" / name;
  fs::path crash_dir = fs::current_path();
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--iterations") iterations = std::stoll(v);
    else if (f == "--seconds") seconds = std::stod(v);
    else if (f == "--cpu-seconds") cpu_limit = std::stod(v);
    else if (f == "--hang-seconds") hang_limit = std::stod(v);
    else if (f == "--seed") seed = std::stoull(v);
    else if (f == "--corpus") corpus_dir = v;
    else if (f == "--crashes") crash_dir = v;
    else return usage();
  }
  std::vector<std::string> corpus = load_corpus(corpus_dir);
  if (corpus.empty()) {
    std::fprintf(stderr, "oomb_fuzz: no seeds in %s\n", corpus_dir.c_str());
    return 2;
  }
  g_target = target->name;
  g_stderr = ::dup(2);
  // On an alternate stack, so that a stack overflow still writes its input.
  static std::vector<char> alt_stack(1 << 16);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  ::sigaltstack(&ss, nullptr);
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) {
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
  if (hang_limit > 0) std::signal(SIGPROF, on_hang);

  Rng rng{seed * 0x100000001B3ull + std::hash<std::string>{}(name)};
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  int64_t done = 0, accepted = 0, refused = 0;
  for (int64_t it = 0; iterations <= 0 || it < iterations; ++it) {
    if (seconds > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) break;
    if (cpu_limit > 0 && cpu_seconds() - cpu0 > cpu_limit) break;
    std::string input = corpus[static_cast<size_t>(it) % corpus.size()];
    if (it >= static_cast<int64_t>(corpus.size())) {  // the seeds themselves first, unmutated
      if (target->kind == Kind::argv) mutate_argv(input, rng);
      else if (target->kind == Kind::bytes || rng.coin(3) || !mutate_json(input, rng)) mutate_bytes(input, rng, corpus);
    }
    g_input = input;
    g_crash_path = (crash_dir / ("crash-" + name + "-" + std::to_string(it))).string();
    std::string failure;
    if (hang_limit > 0) arm_watchdog(hang_limit);
    try {
      target->run(input);
      ++accepted;
    } catch (const Error&) {
      ++refused;  // the contract: a named error
    } catch (const std::bad_alloc&) {
      failure = "std::bad_alloc (unbounded memory from a small input)";
    } catch (const std::exception& e) {
      failure = std::string("unexpected exception: ") + e.what();
    }
    if (hang_limit > 0) arm_watchdog(0);
    ++done;
    if (!failure.empty()) {
      std::ofstream(g_crash_path, std::ios::binary) << input;
      std::fprintf(stderr, "oomb_fuzz %s: iteration %lld: %s\n  input written to %s (add it to %s)\n", name.c_str(),
                   static_cast<long long>(it), failure.c_str(), g_crash_path.c_str(), corpus_dir.c_str());
      return 1;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("oomb_fuzz %s: %lld inputs in %.1f s (%.1f s CPU; seed %llu; %lld accepted, %lld refused with "
              "oomb::Error), no crash\n",
              name.c_str(), static_cast<long long>(done), s, cpu_seconds() - cpu0, static_cast<unsigned long long>(seed),
              static_cast<long long>(accepted), static_cast<long long>(refused));
  std::error_code ec;
  fs::remove_all(scratch_dir(), ec);
  return 0;
}
