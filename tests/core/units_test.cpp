#include "core/units.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/format.h"

#include <limits>

namespace oomb {
namespace {

TEST(ParseTokens, SuffixesAreBinary) {
  EXPECT_EQ(parse_tokens("4M", "--context"), 4194304);
  EXPECT_EQ(parse_tokens("16k", "--context"), 16384);
  EXPECT_EQ(parse_tokens("3000", "--context"), 3000);
  EXPECT_EQ(parse_tokens("1", "--context"), 1);
}

TEST(ParseTokens, RejectsJunkZeroAndOverflow) {
  for (const char* bad : {"", "0", "-5", "4X", "M", "1.5M", "4MM", "99999999999999999999", "9000000000000000000M"}) {
    try {
      parse_tokens(bad, "--context");
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "--context") << bad;
    }
  }
}

TEST(ParseTokenList, DoublingRangeAndList) {
  auto r = parse_token_list("8K..64K", "--contexts");
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r.front(), 8192);
  EXPECT_EQ(r.back(), 65536);
  auto l = parse_token_list("1K,3000,2M", "--contexts");
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[1], 3000);
  EXPECT_THROW(parse_token_list("64K..8K", "--contexts"), Error);
  EXPECT_THROW(parse_token_list("8K,,16K", "--contexts"), Error);
}

TEST(CheckedMath, Overflows) {
  EXPECT_EQ(checked_mul(1 << 20, 1 << 20), int64_t{1} << 40);
  EXPECT_THROW(checked_mul(int64_t{1} << 40, int64_t{1} << 40), Error);
  EXPECT_THROW(checked_add(INT64_MAX, 1), Error);
  EXPECT_EQ(ceil_div(7, 3), 3);
  EXPECT_EQ(ceil_div(6, 3), 2);
  EXPECT_EQ(ceil_div(0, 3), 0);
  // A divisor near int64 max: a + b - 1 overflowed (UBSan, simulate_flags fuzz target).
  EXPECT_EQ(ceil_div(16384, INT64_MAX), 1);
  EXPECT_EQ(ceil_div(INT64_MAX, INT64_MAX), 1);
  EXPECT_EQ(ceil_div(INT64_MAX, 2), INT64_MAX / 2 + 1);
}

TEST(Format, BytesAndDurations) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(int64_t{3} << 29), "1.50 GiB");
  EXPECT_EQ(format_duration_s(0.0045), "4.50 ms");
  EXPECT_EQ(format_duration_s(2.5), "2.50 s");
  EXPECT_EQ(format_tokens(4194304), "4M");
  EXPECT_EQ(format_tokens(3000), "3000");
  EXPECT_EQ(format_percent(0.123), "12.3%");
}

// Issue #13: a 2^40-token step used to print "-2147483648h 11m" (an int cast).
TEST(Format, HugeValuesNeverWrap) {
  EXPECT_EQ(format_duration_s(7380.0), "2h 03m");
  EXPECT_EQ(format_duration_s(-7380.0), "-2h 03m");
  EXPECT_EQ(format_duration_s(3600.0 * 999999), "999999h 00m");
  EXPECT_EQ(format_duration_s(3.44e12), "9.56e+08 h");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::max()), "8.00 EiB");
  EXPECT_EQ(format_bytes(int64_t{1} << 50), "1.00 PiB");
}

}  // namespace
}  // namespace oomb
