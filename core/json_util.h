#pragma once
// Strict JSON field access for versioned documents: every read names the document (file path or
// id) and the key, so a user sees exactly what is wrong and what would be valid.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace oomb {

using Json = nlohmann::json;

// Parses text; on a syntax error (truncated file, stray comma) throws Error naming `where`.
Json parse_json(const std::string& text, const std::string& where);
// Reads a whole file (Error when missing/unreadable) and parses it.
Json read_json_file(const std::string& path);
std::string read_text_file(const std::string& path);
// Writes atomically (temp file + rename) so nothing is left half-written.
void write_text_file(const std::string& path, const std::string& text);

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
