#pragma once
// Strict JSON field access for versioned documents: every read names the document (file path or
// id) and the key, so a user sees exactly what is wrong and what would be valid.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace oomb {

using Json = nlohmann::json;

// Deepest nesting parse_json accepts: our documents nest a few levels, and a deeper value would
// overflow the stack when it is printed or destroyed.
constexpr int kMaxJsonDepth = 64;
// Longest excerpt of a value quoted in an error message.
constexpr size_t kMaxJsonExcerptChars = 200;

// Parses text; throws Error naming `where` on a syntax error (truncated file, stray comma), a number
// out of range (1e999), nesting deeper than kMaxJsonDepth, or a key given twice in one object.
Json parse_json(const std::string& text, const std::string& where);
// Reads a whole regular file (Error when missing, unreadable or not a file) and parses it.
Json read_json_file(const std::string& path);
std::string read_text_file(const std::string& path);
// Writes atomically (a unique temp file next to the target + rename) so nothing is left
// half-written; through a symlink the link's target is replaced, and a non-regular target (a FIFO,
// /dev/stdout) is written directly.
void write_text_file(const std::string& path, const std::string& text);
// The same for any content: `fill` writes it to the stream.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill);
// Files replaced as a whole (a sharded checkpoint and its index): each target is written to a unique
// temporary name beside it (through symlinks, like write_file_atomically); commit() renames them all
// into place in the order given and then removes `stale` (files of an earlier write that the new set
// replaces). Until commit nothing of the old set is touched: a failed write (a full disk) or a
// destruction without commit removes the temporaries, and so does an interrupt (SIGINT, SIGTERM,
// SIGHUP) during the writes; one that arrives during commit is held until the switch is complete.
// Targets that exist and are not regular files (FIFOs, devices) are written in place.
class FileSetWriter {
 public:
  explicit FileSetWriter(const std::vector<std::string>& targets);
  ~FileSetWriter();
  FileSetWriter(const FileSetWriter&) = delete;
  FileSetWriter& operator=(const FileSetWriter&) = delete;
  void write(size_t i, const std::function<void(std::ostream&)>& fill);
  void commit(const std::vector<std::string>& stale = {});

 private:
  void discard();
  std::vector<std::string> targets_, shown_;  // where each lands; the path as given (for messages)
  std::vector<std::string> tmps_;             // "" for a target written in place
  std::vector<const char*> tmp_ptrs_;         // tmps_' c_str(), what the signal handler unlinks
  bool done_ = false;
};
// While one lives, an interrupt (SIGINT, SIGTERM, SIGHUP: the signals whose handler removes the
// temporaries above) does not end the process: the first is held (interrupt_pending() returns it)
// so that the work in progress can stop at its next check and write what it has; a second one ends
// the process at once, as without it. One at a time; a held signal outlives it.
class DeferInterrupts {
 public:
  DeferInterrupts();
  ~DeferInterrupts();
  DeferInterrupts(const DeferInterrupts&) = delete;
  DeferInterrupts& operator=(const DeferInterrupts&) = delete;
};
// The signal a DeferInterrupts held (0: none).
int interrupt_pending();
// Ends the process by the held signal, as it would have ended without the deferral (a shell sees
// 128 + N: 143 for SIGTERM); returns when none is held.
void raise_pending_interrupt();
// Error naming `flag` when `path` could not be written (missing or read-only directory, a
// directory given as the file); called before any work so a bad output path costs nothing.
void check_writable(const std::string& path, const std::string& flag);
// One path a command reads or writes, named by its flag, for check_distinct_paths. tree: a folder
// (a checkpoint folder): a file inside it counts as part of it.
struct FlagPath {
  std::string flag, path;
  bool tree = false;
};
// Refuses (Error naming both flags and the path) an output that would replace an input (the same
// file, an output inside an input folder, or an input inside an output folder) and two outputs on
// one file. Files are compared, not strings: "./x", "dir/../x", symlinks and hard links count.
// Empty paths, inputs that do not exist (catalog ids) and devices or FIFOs (/dev/null, /dev/stdout)
// are left out. Called before any work, after the outputs' check_writable.
void check_distinct_paths(const std::vector<FlagPath>& inputs, const std::vector<FlagPath>& outputs);
// `v` as compact JSON for a message: at most kMaxJsonExcerptChars, "..." when cut.
std::string json_excerpt(const Json& v);

class JsonReader {
 public:
  JsonReader(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}
  // Checks j["schema"] == expected.
  void expect_schema(const std::string& expected) const;
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t i64(const std::string& key) const;               // required, >= 0
  int64_t i64_positive(const std::string& key) const;      // required, > 0
  int64_t i64_or(const std::string& key, int64_t fallback) const;
  double f64(const std::string& key) const;                // required, finite, >= 0
  double f64_positive(const std::string& key) const;       // required, > 0
  double f64_or(const std::string& key, double fallback) const;
  // Required (or, with a fallback, optional) and within [lo, hi]: physical bounds that keep absurd
  // values (hidden 2^40, a bandwidth of 1e-300 B/s) out of the arithmetic downstream.
  int64_t i64_in(const std::string& key, int64_t lo, int64_t hi) const;
  int64_t i64_in_or(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const;
  double f64_in(const std::string& key, double lo, double hi) const;
  double f64_in_or(const std::string& key, double lo, double hi, double fallback) const;
  bool boolean(const std::string& key) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::string str(const std::string& key) const;           // required, non-empty
  std::string str_or(const std::string& key, const std::string& fallback) const;
  const Json& object(const std::string& key) const;        // required object
  const Json& array(const std::string& key) const;         // required array

  [[noreturn]] void fail(const std::string& key, const std::string& problem, const std::string& hint = {}) const;
  const std::string& where() const { return where_; }
  const Json& json() const { return j_; }

 private:
  const Json& need(const std::string& key, const char* type_hint) const;
  const Json& j_;
  std::string where_;
};

}  // namespace oomb
