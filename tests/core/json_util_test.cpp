#include "core/json_util.h"

#include <gtest/gtest.h>

#include "core/error.h"

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
