#include "core/json_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/error.h"

namespace oomb {

namespace {

// Parser state for the checks nlohmann does not make: nesting depth and keys given twice.
struct ParseGuard {
  struct Frame {
    bool object = false;
    std::string name;               // the key (or "[]") under which this value sits in its parent
    std::vector<std::string> keys;  // objects: keys seen so far (few: a linear scan)
    std::set<std::string> many;     // ... and all of them once there are more than kScan
  };
  static constexpr size_t kScan = 16;
  std::vector<Frame> frames;  // frames[0, depth): reused, so that a big trace allocates little
  size_t depth = 0;
  std::string pending_key;  // the last key read in the innermost object
  std::string where;

  std::string path() const {
    std::string p;
    for (size_t i = 1; i < depth && p.size() < 120; ++i)
      p += (p.empty() || frames[i].name == "[]" ? "" : ".") + frames[i].name;
    return p.size() < 120 ? p : p.substr(0, 120) + "...";
  }
  // The path of the value being read (a number that overflows sits under the last key).
  std::string value_path() const {
    const std::string p = path();
    if (depth == 0 || !frames[depth - 1].object || pending_key.empty()) return p;
    return p.empty() ? pending_key : p + "." + pending_key;
  }
  void open(bool object) {
    if (static_cast<int>(depth) >= kMaxJsonDepth)
      throw Error(where, path(), "nests deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                  "oomb documents nest a few levels; is this the right file?");
    if (frames.size() <= depth) frames.emplace_back();
    Frame& f = frames[depth];
    f.object = object;
    f.name = depth == 0 ? "" : frames[depth - 1].object ? pending_key : "[]";
    f.keys.clear();
    f.many.clear();
    ++depth;
  }
  void close() {
    if (depth > 0) --depth;
  }
  void key(const std::string& k) {
    pending_key = k;
    if (depth == 0) return;
    Frame& f = frames[depth - 1];
    bool seen = false;
    if (f.keys.size() < kScan) {
      seen = std::find(f.keys.begin(), f.keys.end(), k) != f.keys.end();
      if (!seen) f.keys.push_back(k);
    } else {
      if (f.many.empty()) f.many.insert(f.keys.begin(), f.keys.end());
      seen = !f.many.insert(k).second;
    }
    if (seen) {
      const std::string parent = path();
      throw Error(where, parent.empty() ? k : parent + "." + k, "is given twice", "each key once per object");
    }
  }
};

// nlohmann's own DOM builder, with the guard's checks on every object, array and key (its callback
// parser would do the same but is an order of magnitude slower on a large trace: 98 s against
// 8 s for `oomb validate --trace` of a 58.7 MB timeline, measured under load). json_sax_dom_parser
// is in nlohmann's detail:: namespace (3.11): if a later version moves it, this is the one place.
class GuardedDomParser : public nlohmann::detail::json_sax_dom_parser<Json> {
  using Base = nlohmann::detail::json_sax_dom_parser<Json>;

 public:
  GuardedDomParser(Json& result, ParseGuard& guard) : Base(result, true), guard_(guard) {}
  bool start_object(std::size_t n) {
    guard_.open(true);
    return Base::start_object(n);
  }
  bool end_object() {
    guard_.close();
    return Base::end_object();
  }
  bool start_array(std::size_t n) {
    guard_.open(false);
    return Base::start_array(n);
  }
  bool end_array() {
    guard_.close();
    return Base::end_array();
  }
  bool key(Json::string_t& k) {
    guard_.key(k);
    return Base::key(k);
  }

 private:
  ParseGuard& guard_;
};

// Files larger than this are refused before they are read (a FIFO or /dev/zero never ends).
constexpr int64_t kMaxTextFileBytes = int64_t{2} << 30;

}  // namespace

std::string json_excerpt(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > kMaxJsonExcerptChars) s = s.substr(0, kMaxJsonExcerptChars) + "...";
  return s;
}

Json parse_json(const std::string& text, const std::string& where) {
  ParseGuard guard;
  guard.where = where;
  try {
    Json root;
    GuardedDomParser dom(root, guard);
    Json::sax_parse(text, &dom);
    return root;
  } catch (const Json::parse_error& e) {
    throw Error(where, "", std::string("not valid JSON (truncated or malformed): ") + e.what());
  } catch (const Json::out_of_range& e) {
    // 406: a number beyond double's range (1e999).
    throw Error(where, guard.value_path(), std::string("a number is out of range: ") + e.what(),
                "numbers must fit a double (|x| < 1.8e308)");
  } catch (const Json::exception& e) {
    throw Error(where, guard.path(), std::string("not valid JSON: ") + e.what());
  }
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(st))
    throw Error(path, "", "is a directory", "give the path of a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "", "cannot open file", "check the path");
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(out.size()) > kMaxTextFileBytes)
      throw Error(path, "", "is larger than " + std::to_string(kMaxTextFileBytes >> 30) + " GiB",
                  "oomb's JSON documents are far smaller; is this the right file?");
  }
  if (in.bad()) throw Error(path, "", "read error");
  return out;
}

Json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

namespace {

// The temp file of the write in flight, removed if the process is interrupted (SIGINT, SIGTERM,
// SIGHUP) before the rename. A SIGKILL leaves it: its name says what it is and never collides.
char g_inflight_tmp[4096];
volatile std::sig_atomic_t g_inflight = 0;

// The temporaries of the FileSetWriter in flight (one at a time), and whether it is switching.
const char* const* volatile g_set_tmps = nullptr;
volatile std::sig_atomic_t g_set_count = 0;
volatile std::sig_atomic_t g_set_committing = 0;
volatile std::sig_atomic_t g_set_pending = 0;

// A DeferInterrupts in scope, and the first signal it held back.
volatile std::sig_atomic_t g_defer = 0;
volatile std::sig_atomic_t g_deferred = 0;

extern "C" void remove_inflight_tmp(int sig) {
  if (g_set_committing) {  // a checkpoint switching: finished first, then this signal
    g_set_pending = sig;
    return;
  }
  if (g_defer && !g_deferred) {  // the work in progress ends cleanly and writes what it has
    g_deferred = sig;
    static const char msg[] = "\noomb: interrupted: finishing the step in progress (signal again to stop at once)\n";
    (void)!::write(STDERR_FILENO, msg, sizeof msg - 1);
    return;
  }
  if (g_inflight) ::unlink(g_inflight_tmp);
  for (std::sig_atomic_t i = 0; i < g_set_count; ++i)
    if (g_set_tmps[i] && g_set_tmps[i][0]) ::unlink(g_set_tmps[i]);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_cleanup_handlers() {
  static const bool installed = [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(sig, remove_inflight_tmp);
    }
    return true;
  }();
  (void)installed;
}

// Where a write to `path` lands: a symlink's final target (a dangling one included).
std::filesystem::path resolve_links(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) return p;
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  throw Error(path, "", "too many levels of symbolic links");
}

void write_stream(std::ostream& out, const std::string& path, const std::function<void(std::ostream&)>& fill) {
  fill(out);
  out.flush();
  if (!out.good()) throw Error(path, "", "write failed (disk full?)");
}

}  // namespace

void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill) {
  namespace fs = std::filesystem;
  const fs::path target = resolve_links(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw Error(path, "", "is a directory", "give the path of a file to write");
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A FIFO, a terminal, /dev/stdout: written in place (a rename would replace the device node).
    std::ofstream out(target, std::ios::binary);
    if (!out) throw Error(path, "", "cannot write file");
    write_stream(out, path, fill);
    return;
  }
  static std::atomic<unsigned> counter{0};
  fs::path tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    std::string name = target.filename().string();
    name.insert(0, 1, '.');
    name += ".oomb-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    tmp = target.parent_path() / name;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    throw Error(path, "", std::string("cannot write file: ") + std::strerror(errno),
                "check the directory exists and is writable");
  ::close(fd);
  install_cleanup_handlers();
  const std::string tmp_s = tmp.string();
  if (tmp_s.size() < sizeof g_inflight_tmp) {
    std::memcpy(g_inflight_tmp, tmp_s.c_str(), tmp_s.size() + 1);
    g_inflight = 1;
  }
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw Error(path, "", "cannot write file", "check the directory exists and is writable");
      write_stream(out, path, fill);
    }
    fs::rename(tmp, target, ec);
    if (ec) throw Error(path, "", "cannot write file (rename failed: " + ec.message() + ")");
  } catch (...) {
    g_inflight = 0;
    fs::remove(tmp, ec);
    throw;
  }
  g_inflight = 0;
}

FileSetWriter::FileSetWriter(const std::vector<std::string>& targets) {
  namespace fs = std::filesystem;
  static std::atomic<unsigned> counter{0};
  OOMB_ASSERT(g_set_count == 0, "one FileSetWriter at a time");
  install_cleanup_handlers();
  for (const std::string& t : targets) {
    const fs::path target = resolve_links(t);
    std::error_code ec;
    const fs::file_status st = fs::status(target, ec);
    if (fs::is_directory(st)) throw Error(t, "", "is a directory", "give the path of a file to write");
    shown_.push_back(t);
    targets_.push_back(target.string());
    if (fs::exists(st) && !fs::is_regular_file(st)) {
      tmps_.emplace_back();
      continue;
    }
    std::string name = target.filename().string();  // (not "." + ...: GCC 12 warns -Wrestrict on that)
    name.insert(0, 1, '.');
    name += ".oomb-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    tmps_.push_back((target.parent_path() / name).string());
  }
  for (const auto& t : tmps_) tmp_ptrs_.push_back(t.c_str());
  g_set_tmps = tmp_ptrs_.data();
  g_set_count = static_cast<std::sig_atomic_t>(tmp_ptrs_.size());
}

FileSetWriter::~FileSetWriter() {
  if (!done_) discard();
}

void FileSetWriter::discard() {
  g_set_count = 0;
  std::error_code ec;
  for (const auto& t : tmps_)
    if (!t.empty()) std::filesystem::remove(t, ec);
  done_ = true;
}

void FileSetWriter::write(size_t i, const std::function<void(std::ostream&)>& fill) {
  OOMB_ASSERT(i < targets_.size() && !done_, "FileSetWriter::write out of range");
  try {
    const std::string& dest = tmps_[i].empty() ? targets_[i] : tmps_[i];
    if (!tmps_[i].empty()) {
      const int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd < 0)
        throw Error(shown_[i], "", std::string("cannot write file: ") + std::strerror(errno),
                    "check the directory exists and is writable");
      ::close(fd);
    }
    std::ofstream out(dest, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(shown_[i], "", "cannot write file", "check the directory exists and is writable");
    write_stream(out, shown_[i], fill);
  } catch (...) {
    discard();
    throw;
  }
}

void FileSetWriter::commit(const std::vector<std::string>& stale) {
  OOMB_ASSERT(!done_, "FileSetWriter::commit twice");
  namespace fs = std::filesystem;
  std::error_code ec;
  g_set_committing = 1;
  size_t moved = 0;
  for (; moved < targets_.size(); ++moved) {
    if (tmps_[moved].empty()) continue;
    fs::rename(tmps_[moved], targets_[moved], ec);
    if (ec) break;
    tmps_[moved].clear();  // in place now: never removed as a temporary
  }
  if (moved == targets_.size())
    for (const auto& f : stale)
      if (std::find(targets_.begin(), targets_.end(), resolve_links(f).string()) == targets_.end()) fs::remove(f, ec);
  g_set_count = 0;
  g_set_committing = 0;
  const std::string failed = moved < targets_.size() ? shown_[moved] : "";
  const std::string why = ec.message();
  if (!failed.empty()) discard();
  done_ = true;
  if (const int sig = g_set_pending) {
    g_set_pending = 0;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  if (!failed.empty()) throw Error(failed, "", "cannot write file (rename failed: " + why + ")");
}

void write_text_file(const std::string& path, const std::string& text) {
  write_file_atomically(path, [&text](std::ostream& out) { out << text; });
}

DeferInterrupts::DeferInterrupts() {
  install_cleanup_handlers();
  g_defer = 1;
}

DeferInterrupts::~DeferInterrupts() { g_defer = 0; }

int interrupt_pending() { return g_deferred; }

void raise_pending_interrupt() {
  if (const int sig = g_deferred) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

void check_writable(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  fs::path target;
  try {
    target = resolve_links(path);
  } catch (const Error& e) {
    throw Error(flag, path, e.problem());
  }
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw Error(flag, path, "is a directory", "give the path of a file to write");
  if (fs::exists(st) && !fs::is_regular_file(st)) return;  // a FIFO or device: written in place
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(fs::status(dir, ec)))
    throw Error(flag, path, "cannot be written: directory " + dir.string() + " does not exist",
                "create it first, or write elsewhere");
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(flag, path, "cannot be written: directory " + dir.string() + " is not writable",
                "write elsewhere");
  if (fs::exists(st) && ::access(target.c_str(), W_OK) != 0)
    throw Error(flag, path, "cannot be written: the file is read-only", "write elsewhere");
}

namespace {

// A path as the file it names: links followed (a dangling one to its target), made absolute, "." and
// ".." resolved through the existing part.
struct ResolvedPath {
  const FlagPath* from = nullptr;
  std::filesystem::path canonical;
  bool exists = false, special = false;
};

ResolvedPath resolve_path(const FlagPath& p) {
  namespace fs = std::filesystem;
  ResolvedPath r;
  r.from = &p;
  std::error_code ec;
  fs::path target;
  try {
    target = resolve_links(p.path);
  } catch (const Error&) {
    target = p.path;  // a loop of links: the readers and writers name it
  }
  const fs::file_status st = fs::status(target, ec);
  r.exists = fs::exists(st);
  r.special = r.exists && !fs::is_regular_file(st) && !fs::is_directory(st);
  r.canonical = fs::weakly_canonical(fs::absolute(target, ec), ec);
  if (ec) r.canonical = fs::absolute(target).lexically_normal();
  return r;
}

bool same_file(const ResolvedPath& a, const ResolvedPath& b) {
  std::error_code ec;
  if (a.exists && b.exists) return std::filesystem::equivalent(a.canonical, b.canonical, ec);
  return a.canonical == b.canonical;
}

// Whether `inner` lies inside the folder `outer` (not equal to it).
bool inside(const ResolvedPath& outer, const ResolvedPath& inner) {
  const auto& o = outer.canonical;
  const auto& i = inner.canonical;
  auto oi = o.begin(), ii = i.begin();
  for (; oi != o.end(); ++oi, ++ii) {
    if (oi->empty()) continue;  // a trailing separator
    if (ii == i.end() || *oi != *ii) return false;
  }
  return ii != i.end();
}

}  // namespace

void check_distinct_paths(const std::vector<FlagPath>& inputs, const std::vector<FlagPath>& outputs) {
  std::vector<ResolvedPath> in, out;
  for (const auto& p : inputs)
    if (!p.path.empty())
      if (ResolvedPath r = resolve_path(p); r.exists && !r.special) in.push_back(std::move(r));
  for (const auto& p : outputs)
    if (!p.path.empty())
      if (ResolvedPath r = resolve_path(p); !r.special) out.push_back(std::move(r));
  auto quoted = [](const ResolvedPath& r) { return r.from->flag + " " + r.from->path; };
  for (const auto& o : out) {
    for (const auto& i : in) {
      if (same_file(o, i))
        throw Error(o.from->flag, o.from->path,
                    "is the input " + quoted(i) + ": writing it would replace what this command reads",
                    "write the output elsewhere");
      if (i.from->tree && inside(i, o))
        throw Error(o.from->flag, o.from->path, "lies inside the input folder " + quoted(i),
                    "write the output outside the folder this command reads");
      if (o.from->tree && inside(o, i))
        throw Error(o.from->flag, o.from->path,
                    "is a folder that holds the input " + quoted(i) + ": writing it could replace the input",
                    "write the output elsewhere");
    }
  }
  for (size_t a = 0; a < out.size(); ++a)
    for (size_t b = a + 1; b < out.size(); ++b)
      if (same_file(out[a], out[b]))
        throw Error(out[b].from->flag, out[b].from->path, "is also the output " + quoted(out[a]) + ": one would replace the other",
                    "give each output its own file");
}

void JsonReader::fail(const std::string& key, const std::string& problem, const std::string& hint) const {
  throw Error(where_, key, problem, hint);
}

void JsonReader::expect_schema(const std::string& expected) const {
  if (!j_.is_object()) fail("", "expected a JSON object", "a document with \"schema\": \"" + expected + "\"");
  if (!j_.contains("schema")) fail("schema", "missing", "expected \"" + expected + "\"");
  if (!j_["schema"].is_string() || j_["schema"].get<std::string>() != expected)
    fail("schema", "unknown schema " + json_excerpt(j_["schema"]), "expected \"" + expected + "\"");
}

const Json& JsonReader::need(const std::string& key, const char* type_hint) const {
  if (!j_.is_object()) fail(key, "parent is not a JSON object");
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) fail(key, "missing", std::string("expected ") + type_hint);
  return *it;
}

int64_t JsonReader::i64(const std::string& key) const {
  const Json& v = need(key, "a non-negative integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(key, "is too large (" + json_excerpt(v) + ")", "expected a non-negative integer below 2^63");
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < 0) fail(key, "is negative (" + json_excerpt(v) + ")", "expected a non-negative integer");
    return x;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d >= 0 && d == std::floor(d) && d < 9.2e18) return static_cast<int64_t>(d);
  }
  fail(key, "is not a non-negative integer (" + json_excerpt(v) + ")", "expected a non-negative integer");
}

int64_t JsonReader::i64_positive(const std::string& key) const {
  int64_t x = i64(key);
  if (x == 0) fail(key, "must be positive", "expected an integer > 0");
  return x;
}

int64_t JsonReader::i64_or(const std::string& key, int64_t fallback) const { return has(key) ? i64(key) : fallback; }

double JsonReader::f64(const std::string& key) const {
  const Json& v = need(key, "a non-negative number");
  if (!v.is_number()) fail(key, "is not a number (" + json_excerpt(v) + ")", "expected a non-negative number");
  double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) fail(key, "must be a finite non-negative number (" + json_excerpt(v) + ")");
  return d;
}

double JsonReader::f64_positive(const std::string& key) const {
  double d = f64(key);
  if (d <= 0) fail(key, "must be positive", "expected a number > 0");
  return d;
}

double JsonReader::f64_or(const std::string& key, double fallback) const { return has(key) ? f64(key) : fallback; }

namespace {
std::string number_text(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
}  // namespace

// Any integer, a negative one too, is judged against the range: one message for every value out of
// it (a negative r is out of [1, 4096] as 0 is, not "not a non-negative integer").
int64_t JsonReader::i64_in(const std::string& key, int64_t lo, int64_t hi) const {
  const std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  const Json& v = need(key, range.c_str());
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(key, "is out of range (" + json_excerpt(v) + ")", "expected " + range);
    x = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else {
    const double d = v.is_number_float() ? v.get<double>() : 0.5;
    if (!(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18))
      fail(key, "is not an integer (" + json_excerpt(v) + ")", "expected " + range);
    x = static_cast<int64_t>(d);
  }
  if (x < lo || x > hi) fail(key, "is out of range (" + std::to_string(x) + ")", "expected " + range);
  return x;
}

int64_t JsonReader::i64_in_or(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const {
  return has(key) ? i64_in(key, lo, hi) : fallback;
}

// As i64_in: any number, a negative one too, is judged against the range (one message for all).
double JsonReader::f64_in(const std::string& key, double lo, double hi) const {
  const std::string range = "a number in [" + number_text(lo) + ", " + number_text(hi) + "]";
  const Json& v = need(key, range.c_str());
  if (!v.is_number()) fail(key, "is not a number (" + json_excerpt(v) + ")", "expected " + range);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) fail(key, "is out of range (" + number_text(x) + ")", "expected " + range);
  return x;
}

double JsonReader::f64_in_or(const std::string& key, double lo, double hi, double fallback) const {
  return has(key) ? f64_in(key, lo, hi) : fallback;
}

bool JsonReader::boolean(const std::string& key) const {
  const Json& v = need(key, "true or false");
  if (!v.is_boolean()) fail(key, "is not a boolean (" + json_excerpt(v) + ")", "expected true or false");
  return v.get<bool>();
}

bool JsonReader::boolean_or(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

std::string JsonReader::str(const std::string& key) const {
  const Json& v = need(key, "a string");
  if (!v.is_string() || v.get<std::string>().empty()) fail(key, "must be a non-empty string (" + json_excerpt(v) + ")");
  return v.get<std::string>();
}

std::string JsonReader::str_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? str(key) : fallback;
}

const Json& JsonReader::object(const std::string& key) const {
  const Json& v = need(key, "an object");
  if (!v.is_object()) fail(key, "is not an object");
  return v;
}

const Json& JsonReader::array(const std::string& key) const {
  const Json& v = need(key, "an array");
  if (!v.is_array()) fail(key, "is not an array");
  return v;
}

}  // namespace oomb
