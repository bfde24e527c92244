#include "core/json.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/files.h"
#include "core/format.h"

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
Json read_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

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
  const std::string range = "a number in [" + format_number(lo) + ", " + format_number(hi) + "]";
  const Json& v = need(key, range.c_str());
  if (!v.is_number()) fail(key, "is not a number (" + json_excerpt(v) + ")", "expected " + range);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) fail(key, "is out of range (" + format_number(x) + ")", "expected " + range);
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
