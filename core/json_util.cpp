#include "core/json_util.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace oomb {

Json parse_json(const std::string& text, const std::string& where) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw Error(where, "", std::string("not valid JSON (truncated or malformed): ") + e.what());
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "", "cannot open file", "check the path");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path, "", "cannot write file", "check the directory exists and is writable");
    out << text;
    if (!out.good()) throw Error(path, "", "write failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path, "", "cannot write file (rename failed)");
  }
}

void JsonReader::fail(const std::string& key, const std::string& problem, const std::string& hint) const {
  throw Error(where_, key, problem, hint);
}

void JsonReader::expect_schema(const std::string& expected) const {
  if (!j_.is_object()) fail("", "expected a JSON object", "a document with \"schema\": \"" + expected + "\"");
  if (!j_.contains("schema")) fail("schema", "missing", "expected \"" + expected + "\"");
  if (!j_["schema"].is_string() || j_["schema"].get<std::string>() != expected)
    fail("schema", "unknown schema " + j_["schema"].dump(), "expected \"" + expected + "\"");
}

const Json& JsonReader::need(const std::string& key, const char* type_hint) const {
  if (!j_.is_object()) fail(key, "parent is not a JSON object");
  auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) fail(key, "missing", std::string("expected ") + type_hint);
  return *it;
}

int64_t JsonReader::i64(const std::string& key) const {
  const Json& v = need(key, "a non-negative integer");
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < 0) fail(key, "is negative (" + v.dump() + ")", "expected a non-negative integer");
    return x;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d >= 0 && d == std::floor(d) && d < 9.2e18) return static_cast<int64_t>(d);
  }
  fail(key, "is not a non-negative integer (" + v.dump() + ")", "expected a non-negative integer");
}

int64_t JsonReader::i64_positive(const std::string& key) const {
  int64_t x = i64(key);
  if (x == 0) fail(key, "must be positive", "expected an integer > 0");
  return x;
}

int64_t JsonReader::i64_or(const std::string& key, int64_t fallback) const { return has(key) ? i64(key) : fallback; }

double JsonReader::f64(const std::string& key) const {
  const Json& v = need(key, "a non-negative number");
  if (!v.is_number()) fail(key, "is not a number (" + v.dump() + ")", "expected a non-negative number");
  double d = v.get<double>();
  if (!std::isfinite(d) || d < 0) fail(key, "must be a finite non-negative number (" + v.dump() + ")");
  return d;
}

double JsonReader::f64_positive(const std::string& key) const {
  double d = f64(key);
  if (d <= 0) fail(key, "must be positive", "expected a number > 0");
  return d;
}

double JsonReader::f64_or(const std::string& key, double fallback) const { return has(key) ? f64(key) : fallback; }

bool JsonReader::boolean(const std::string& key) const {
  const Json& v = need(key, "true or false");
  if (!v.is_boolean()) fail(key, "is not a boolean (" + v.dump() + ")", "expected true or false");
  return v.get<bool>();
}

bool JsonReader::boolean_or(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

std::string JsonReader::str(const std::string& key) const {
  const Json& v = need(key, "a string");
  if (!v.is_string() || v.get<std::string>().empty()) fail(key, "must be a non-empty string (" + v.dump() + ")");
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
