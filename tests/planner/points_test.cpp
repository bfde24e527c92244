// read_points (planner/points.h): run logs (calibrate --points) are read as written or refused
// naming the line and the column, never read wrongly.
#include "planner/points.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "planner_test_util.h"
#include "models/specs.h"

namespace oomb::planner {
namespace {

class Points : public testing::TempFiles {
 protected:
  std::vector<simulator::MeasuredPoint> read(const std::string& path) {
    return read_points(path, "h200", models::load_gpu("h200"));
  }
  // The message of the refusal ("" when accepted).
  std::string refusal(const std::string& path) {
    try {
      read(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(Points, ADuplicatedHeaderColumnIsRefusedNamingIt) {
  const std::string e = refusal(file("dup.csv", "model,context,step_s,step_s\ntiny,4096,0.5,0.7\n"));
  EXPECT_NE(e.find("dup.csv line 1: 'step_s'"), std::string::npos) << e;
  EXPECT_NE(e.find("columns 3 and 4"), std::string::npos) << e;
  // Spelled differently, the same key.
  const std::string e2 = refusal(file("dup2.csv", "model,context,step_s,Step-S\ntiny,4096,0.5,0.7\n"));
  EXPECT_NE(e2.find("'Step-S'"), std::string::npos) << e2;
  const std::string e3 = refusal(file("dup.json", R"({"schema": "oomb.points/1", "points": [
      {"model": "tiny", "context": 4096, "step_s": 0.5, "step-s": 0.7}]})"));
  EXPECT_NE(e3.find("given twice"), std::string::npos) << e3;
}

TEST_F(Points, TextAfterAQuotedFieldIsRefusedNotDropped) {
  const std::string e = refusal(file("q.csv", "model,context,step_s\ntiny,\"64\"K,0.5\n"));
  EXPECT_NE(e.find("q.csv line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("after the closing quote of field 2"), std::string::npos) << e;
  // Quoted whole, it is 64K tokens.
  const auto p = read(file("ok.csv", "model,context,chunk,page,step_s\ntiny,\"64K\",1024,64,9.5\n"));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].scenario.config.context_tokens, 64 * 1024);
}

TEST_F(Points, NonPhysicalMeasurementsAreRefusedWithColumnAndLine) {
  for (const char* v : {"1e300", "1e-30", "0"}) {
    const std::string e = refusal(file("big.csv", std::string("model,context,step_s\n# a comment\ntiny,4096,") + v + "\n"));
    EXPECT_NE(e.find("big.csv line 3: 'step_s'"), std::string::npos) << v << ": " << e;
  }
  const std::string t = refusal(file("tps.csv", "model,context,tokens_per_s\ntiny,4096,1e30\n"));
  EXPECT_NE(t.find("tps.csv line 2: 'tokens_per_s'"), std::string::npos) << t;
  const std::string b = refusal(file("peak.csv", "model,context,step_s,peak_device_bytes\ntiny,4096,0.5,1e30\n"));
  EXPECT_NE(b.find("peak.csv line 2: 'peak_device_bytes'"), std::string::npos) << b;
}

TEST_F(Points, AUtf8ByteOrderMarkIsAccepted) {
  const auto p = read(file("bom.csv", "\xEF\xBB\xBFmodel,context,chunk,page,step_s\ntiny,4096,1024,64,0.5\n"));
  ASSERT_EQ(p.size(), 1u);
  EXPECT_DOUBLE_EQ(p[0].step_s, 0.5);
}

TEST_F(Points, ErrorsOfAPlanInARowNameTheLine) {
  file("bad_plan.json", R"({"schema": "oomb.plan/1"})");
  const std::string e = refusal(file("pl.csv", "plan,step_s\nbad_plan.json,0.5\n"));
  EXPECT_NE(e.find("pl.csv line 2: 'plan'"), std::string::npos) << e;
  EXPECT_NE(e.find("bad_plan.json"), std::string::npos) << e;
}

}  // namespace
}  // namespace oomb::planner
