// Human formatting (core/format.h): the plain number forms are printf's, digit for digit.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/format.h"

namespace oomb {
namespace {

std::string printf_of(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

TEST(Format, NumberAndFixedAreThoseOfPrintf) {
  for (double v : {0.0, 0.05, 0.5, 1.0 / 3.0, 0.125, 0.995, 1e6, 123456789.0, 1e-7, -2.5}) {
    EXPECT_EQ(format_number(v), printf_of("%g", v)) << v;
    EXPECT_EQ(format_fixed(v, 2), printf_of("%.2f", v)) << v;
    EXPECT_EQ(format_fixed(v, 4), printf_of("%.4f", v)) << v;
  }
  EXPECT_EQ(format_fixed(0.5, 2), "0.50");
  EXPECT_EQ(format_number(0.05), "0.05");
  EXPECT_EQ(format_number(1e6), "1e+06");
}

TEST(Format, ParamsAsModelCardsQuoteThem) {
  EXPECT_EQ(format_params(20'914'757'184), "20.91B");
  EXPECT_EQ(format_params(494'032'768), "494.0M");
  EXPECT_EQ(format_params(107'072), "107.1K");
  EXPECT_EQ(format_params(950), "950");
  EXPECT_EQ(format_params(1'000'000'000), "1.00B");
}

}  // namespace
}  // namespace oomb
