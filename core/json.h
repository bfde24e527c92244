#pragma once
// Strict JSON field access for versioned documents: every read names the document (file path or
// id) and the key, so a user sees exactly what is wrong and what would be valid.
#include <cstdint>
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
