// core/dtype.h: one name per element type, written and read only at the edges (JSON, flags).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace oomb {
namespace {

constexpr Dtype kAll[] = {Dtype::bf16, Dtype::fp16, Dtype::fp32, Dtype::fp64, Dtype::fp8, Dtype::int32, Dtype::uint8};

TEST(Dtype, EveryNameReadsBackAndSizesAreTheElementBytes) {
  for (Dtype d : kAll) {
    EXPECT_EQ(find_dtype(to_string(d)), d) << to_string(d);
    std::ostringstream os;
    os << d;
    EXPECT_EQ(os.str(), to_string(d));
  }
  EXPECT_EQ(dtype_bytes(Dtype::fp32), 4);
  EXPECT_EQ(dtype_bytes(Dtype::bf16), 2);
  EXPECT_EQ(dtype_bytes(Dtype::fp16), 2);
  EXPECT_EQ(dtype_bytes(Dtype::fp8), 1);
  EXPECT_EQ(dtype_bytes(Dtype::int32), 4);
  EXPECT_EQ(dtype_bytes(Dtype::uint8), 1);
  EXPECT_EQ(dtype_bytes(Dtype::fp64), 8);
  EXPECT_FALSE(find_dtype("f32"));
  EXPECT_FALSE(find_dtype("BF16"));
  EXPECT_FALSE(find_dtype(""));
}

TEST(Dtype, DeclaredInTheOrderOfTheirNames) {
  // Containers ordered by dtype (the planner's search keys) iterate as they did over the names.
  for (size_t i = 1; i < std::size(kAll); ++i) {
    EXPECT_LT(kAll[i - 1], kAll[i]);
    EXPECT_LT(std::string(to_string(kAll[i - 1])), std::string(to_string(kAll[i])));
  }
}

TEST(Dtype, StorageDtypesAreRefusedByTheFlagThatNamesThem) {
  for (Dtype d : kAll)
    EXPECT_EQ(is_storage_dtype(d), d != Dtype::int32 && d != Dtype::uint8 && d != Dtype::fp64) << d;
  EXPECT_EQ(storage_dtype_from_string("bf16", "--kv-dtype"), Dtype::bf16);
  EXPECT_EQ(storage_dtype_from_string("fp8", "--kv-dtype"), Dtype::fp8);
  for (const char* bad : {"int32", "uint8", "fp64", "int3", "", "F32"}) {
    try {
      storage_dtype_from_string(bad, "--param-dtype");
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "--param-dtype");
      EXPECT_EQ(e.key(), bad);
      EXPECT_NE(std::string(e.what()).find("one of fp32, bf16, fp16, fp8"), std::string::npos) << e.what();
    }
  }
}

TEST(Dtype, JsonHoldsTheNameNeverANumber) {
  const Json j = {{"kv_dtype", Dtype::bf16}, {"list", std::vector<Dtype>{Dtype::fp32, Dtype::uint8}}};
  EXPECT_EQ(j.dump(), R"({"kv_dtype":"bf16","list":["fp32","uint8"]})");
  EXPECT_EQ(j.at("kv_dtype").get<Dtype>(), Dtype::bf16);
  EXPECT_EQ(j.at("list").get<std::vector<Dtype>>()[1], Dtype::uint8);
  EXPECT_THROW(Json("int4").get<Dtype>(), Error);
  EXPECT_THROW(Json(1).get<Dtype>(), Error);  // an enum's number is not a dtype
}

}  // namespace
}  // namespace oomb
