#include "core/json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "core_test_util.h"

namespace oomb {
namespace {

TEST(JsonReader, NamesDocumentAndKey) {
  Json j = Json::parse(R"({"schema":"oomb.x/1","n":-3,"s":"","f":"x"})");
  JsonReader r(j, "file.json");
  r.expect_schema("oomb.x/1");
  try {
    r.i64("n");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "file.json");
    EXPECT_EQ(e.key(), "n");
    EXPECT_NE(std::string(e.what()).find("negative"), std::string::npos);
  }
  EXPECT_THROW(r.i64("missing"), Error);
  EXPECT_THROW(r.str("s"), Error);
  EXPECT_THROW(r.f64("f"), Error);
  EXPECT_EQ(r.i64_or("missing", 7), 7);
}

TEST(JsonReader, RejectsWrongSchemaAndTruncatedText) {
  Json j = Json::parse(R"({"schema":"oomb.x/0"})");
  EXPECT_THROW(JsonReader(j, "a").expect_schema("oomb.x/1"), Error);
  EXPECT_THROW(parse_json(R"({"schema": "oomb.x/1", "a": [1, 2)", "t.json"), Error);
}

}  // namespace
}  // namespace oomb

// Issue #13: every JSON input refuses, by document and key, what nlohmann would abort or crash on.
namespace oomb {
namespace {

using testing::error_of;

TEST(ParseJson, NumberOutOfRangeNamesTheKey) {
  const std::string e = error_of([] { parse_json(R"({"schema": "x", "rope_theta": 1e999})", "m.json"); });
  EXPECT_NE(e.find("m.json: 'rope_theta': a number is out of range"), std::string::npos) << e;
  EXPECT_NE(error_of([] { parse_json("[-1e999]", "a.json"); }).find("out of range"), std::string::npos);
}

TEST(ParseJson, NestingIsBounded) {
  const auto nest = [](int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); };
  EXPECT_NO_THROW(parse_json(nest(kMaxJsonDepth), "ok.json"));
  EXPECT_NE(error_of([&] { parse_json(nest(kMaxJsonDepth + 1), "d.json"); }).find("nests deeper than 64"),
            std::string::npos);
  // 100,000 deep used to overflow the stack when a message printed it.
  const std::string e = error_of([&] { parse_json("{\"id\": " + nest(100000) + "}", "deep.json"); });
  EXPECT_NE(e.find("deep.json: 'id"), std::string::npos) << e.substr(0, 300);
  EXPECT_LT(e.size(), 400u);
}

TEST(ParseJson, DuplicateKeysAreRefusedByPath) {
  EXPECT_NE(error_of([] { parse_json(R"({"a": 1, "a": 2})", "f.json"); }).find("f.json: 'a': is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_json(R"({"o": {"k": 1, "x": [], "k": 3}})", "f.json"); }).find("'o.k': is given twice"),
            std::string::npos);
  // The same key in different objects (array elements, siblings) is fine.
  EXPECT_NO_THROW(parse_json(R"({"p": [{"k": 1}, {"k": 2}], "q": {"k": 3}})", "f.json"));
}

TEST(JsonExcerpt, CutsLongValues) {
  const Json v = std::string(10000, 'x');
  const std::string s = json_excerpt(v);
  EXPECT_EQ(s.size(), kMaxJsonExcerptChars + 3);
  EXPECT_EQ(s.substr(s.size() - 3), "...");
  EXPECT_EQ(json_excerpt(Json(12)), "12");
}

TEST(JsonReader, Uint64MaxIsTooLargeNotNegative) {
  const Json j = parse_json(R"({"n": 18446744073709551615})", "u.json");
  const std::string e = error_of([&] { JsonReader(j, "u.json").i64("n"); });
  EXPECT_NE(e.find("too large"), std::string::npos) << e;
  EXPECT_EQ(e.find("is negative"), std::string::npos) << e;
}

TEST(JsonReader, BoundsNameTheKeyAndRefuseNaN) {
  const Json j = parse_json(R"({"big": 1099511627776, "tiny": 1e-300, "ok": 7})", "b.json");
  const JsonReader r(j, "b.json");
  EXPECT_NE(error_of([&] { r.i64_in("big", 1, 1 << 18); }).find("'big': is out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { r.f64_in("tiny", 1e3, 1e15); }).find("'tiny': is out of range"), std::string::npos);
  EXPECT_EQ(r.i64_in("ok", 1, 7), 7);
  EXPECT_EQ(r.i64_in_or("absent", 1, 7, 3), 3);
}

// A range check says the same of every value out of the range: a negative integer (or -4.0) is out
// of [1, 4096] as 0 is; a fraction or a string is not an integer; the range is the hint each time.
TEST(JsonReader, IntegersOutOfARangeGetOneMessage) {
  const Json j = parse_json(R"({"neg": -4, "negf": -4.0, "zero": 0, "half": 2.5, "text": "4",
                                 "huge": 18446744073709551615, "float_ok": 4.0})",
                            "r.json");
  const JsonReader r(j, "r.json");
  for (const char* key : {"neg", "negf", "zero", "huge"}) {
    const std::string e = error_of([&] { r.i64_in(key, 1, 4096); });
    EXPECT_NE(e.find("is out of range"), std::string::npos) << e;
    EXPECT_NE(e.find("[1, 4096]"), std::string::npos) << e;
  }
  for (const char* key : {"half", "text"}) {
    const std::string e = error_of([&] { r.i64_in(key, 1, 4096); });
    EXPECT_NE(e.find("is not an integer"), std::string::npos) << e;
    EXPECT_NE(e.find("[1, 4096]"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { r.i64_in("absent", 1, 4096); }).find("missing (expected an integer in [1, 4096])"),
            std::string::npos);
  EXPECT_EQ(r.i64_in("float_ok", 1, 4096), 4);
  EXPECT_EQ(r.i64_in("neg", -5, 5), -4);
  // Numbers alike: -4 and 0 are out of (1e-06, 1e6] in the same words.
  for (const char* key : {"neg", "zero"}) {
    const std::string e = error_of([&] { r.f64_in(key, 1e-6, 1e6); });
    EXPECT_NE(e.find("is out of range"), std::string::npos) << e;
    EXPECT_NE(e.find("[1e-06, 1e+06]"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { r.f64_in("text", 1e-6, 1e6); }).find("is not a number"), std::string::npos);
}

}  // namespace
}  // namespace oomb
