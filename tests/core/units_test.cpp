#include "core/units.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/format.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

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

// The fixed forms are printf's, digit for digit (format.cpp writes them with std::to_chars): halfway
// and random values of every magnitude, signs, zeros, infinities, NaNs, and texts longer than
// printf's 63-character buffer (cut where it cut them).
TEST(Format, FixedFormsArePrintfs) {
  auto printf_of = [](const char* fmt, double v) {
    char b[64];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values = {0.0,   -0.0,   0.005,  0.05,  0.125, 0.375,  0.45,   1.005,  2.5,    99.95,
                                999.95, 1e-300, 5e-324, 1e22,  1e300, inf,   -inf,   nan,    -nan,   std::numeric_limits<double>::max()};
  for (int k = 0; k < 2000; ++k) values.push_back(k / 100.0 + 0.005);  // decimal halfway cases
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<double> mantissa(1.0, 10.0);
  std::uniform_int_distribution<int> exponent(-12, 30);
  for (int i = 0; i < 5000; ++i) {
    const double v = mantissa(rng) * std::pow(10.0, exponent(rng));
    values.push_back(v);
    values.push_back(-v);
  }
  for (double v : values) {
    SCOPED_TRACE(printf_of("%.17g", v));
    // printf's %.1f, except that a value that rounds to zero is 0.0%, never -0.0% (a fit's error
    // of -1e-9 is no error: `oomb calibrate` printed "-0.0%" in its error columns).
    EXPECT_EQ(format_percent(v), printf_of("%.1f%%", std::fabs(v * 100.0) < 0.05 ? 0.0 : v * 100.0));
    if (!(std::fabs(v) >= 1e6)) {
      EXPECT_EQ(format_count(v), printf_of("%.0f", v));
    }
    const std::string rate = v >= 1e12 ? printf_of("%.2f TB/s", v / 1e12)
                             : v >= 1e9 ? printf_of("%.1f GB/s", v / 1e9)
                             : v >= 1e6 ? printf_of("%.1f MB/s", v / 1e6)
                                        : printf_of("%.0f B/s", v);
    EXPECT_EQ(format_rate_bytes_per_s(v), rate);
    const std::string flops = v >= 1e12 ? printf_of("%.1f TFLOP/s", v / 1e12)
                              : v >= 1e9 ? printf_of("%.1f GFLOP/s", v / 1e9)
                                         : printf_of("%.0f FLOP/s", v);
    EXPECT_EQ(format_flops_per_s(v), flops);
    const double a = std::fabs(v);
    if (std::isfinite(v) && a < 60.0) {
      const std::string duration = a >= 1.0    ? printf_of("%.2f s", v)
                                   : a >= 1e-3 ? printf_of("%.2f ms", v * 1e3)
                                   : a >= 1e-6 ? printf_of("%.1f us", v * 1e6)
                                               : printf_of("%.0f ns", v * 1e9);
      EXPECT_EQ(format_duration_s(v), duration);
    }
  }
  for (int i = 0; i < 5000; ++i) {
    const int64_t bytes = static_cast<int64_t>(rng() >> (rng() % 63));
    double v = static_cast<double>(bytes);
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    for (; std::fabs(v) >= 1024.0 && u < 6; ++u) v /= 1024.0;
    char b[64];
    std::snprintf(b, sizeof b, "%.2f %s", v, units[u]);
    EXPECT_EQ(format_bytes(bytes), u == 0 ? std::to_string(bytes) + " B" : std::string(b)) << bytes;
  }
}

}  // namespace
}  // namespace oomb
