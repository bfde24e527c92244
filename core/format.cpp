#include "core/format.h"

#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <string_view>

namespace oomb {

namespace {
constexpr size_t kBufBytes = 64;  // the longest text these functions return is kBufBytes - 1 characters

std::string printf_str(const char* fmt, double v, const char* unit) {
  char buf[kBufBytes];
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}

// printf_str("%.<precision>f<suffix>", v) without printf: std::to_chars's fixed form is specified
// as printf's in the "C" locale, digit for digit, and skips the format parsing and stdio set-up
// (the simulator's summary formats its notes on every evaluation). Truncated as snprintf would.
std::string fixed_str(double v, int precision, std::string_view suffix) {
  char buf[512];  // the longest fixed double (309 digits) with any precision used here
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, precision);
  std::string out(buf, r.ec == std::errc() ? r.ptr : buf);
  out += suffix;
  if (out.size() > kBufBytes - 1) out.resize(kBufBytes - 1);
  return out;
}
}  // namespace

std::string format_bytes(int64_t bytes) {
  const char* units[] = {" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " B";
  return fixed_str(v, 2, units[u]);
}

std::string format_duration_s(double s) {
  if (!std::isfinite(s)) return "inf";
  double a = std::fabs(s);
  const char* sign = s < 0 ? "-" : "";
  // Beyond a million hours the h/m split says nothing (and would overflow an integer).
  if (a >= 3600.0 * 1e6) return printf_str("%.3g %s", s / 3600.0, "h");
  if (a >= 3600.0) {
    char buf[64];
    const auto minutes = static_cast<long long>(a / 60);
    std::snprintf(buf, sizeof buf, "%s%lldh %02lldm", sign, minutes / 60, minutes % 60);
    return buf;
  }
  if (a >= 60.0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%dm %04.1fs", sign, static_cast<int>(a / 60), std::fmod(a, 60));
    return buf;
  }
  if (a >= 1.0) return fixed_str(s, 2, " s");
  if (a >= 1e-3) return fixed_str(s * 1e3, 2, " ms");
  if (a >= 1e-6) return fixed_str(s * 1e6, 1, " us");
  return fixed_str(s * 1e9, 0, " ns");
}

std::string format_rate_bytes_per_s(double bps) {
  if (bps >= 1e12) return fixed_str(bps / 1e12, 2, " TB/s");
  if (bps >= 1e9) return fixed_str(bps / 1e9, 1, " GB/s");
  if (bps >= 1e6) return fixed_str(bps / 1e6, 1, " MB/s");
  return fixed_str(bps, 0, " B/s");
}

std::string format_flops_per_s(double f) {
  if (f >= 1e12) return fixed_str(f / 1e12, 1, " TFLOP/s");
  if (f >= 1e9) return fixed_str(f / 1e9, 1, " GFLOP/s");
  return fixed_str(f, 0, " FLOP/s");
}

std::string format_tokens(int64_t t) {
  if (t > 0 && t % (1024 * 1024) == 0) return std::to_string(t / (1024 * 1024)) + "M";
  if (t > 0 && t % 1024 == 0) return std::to_string(t / 1024) + "K";
  return std::to_string(t);
}

std::string format_count(double v) {
  if (std::fabs(v) >= 1e6) return printf_str("%.3g%s", v, "");
  return fixed_str(v, 0, "");
}

std::string format_params(int64_t n) {
  const double v = static_cast<double>(n);
  if (n >= 1000000000) return fixed_str(v / 1e9, 2, "B");
  if (n >= 1000000) return fixed_str(v / 1e6, 1, "M");
  if (n >= 1000) return fixed_str(v / 1e3, 1, "K");
  return std::to_string(n);
}

// A value that rounds to zero prints as 0.0%, not -0.0% (an error of -1e-7 is no error).
std::string format_percent(double f) {
  const double pct = f * 100.0;
  return fixed_str(std::fabs(pct) < 0.05 ? 0.0 : pct, 1, "%");
}

// printf's own sign (GCC 12 warned -Wrestrict on "+" + std::string&&, a false positive, in the
// first build a new user runs).
std::string format_signed_percent(double f) { return printf_str("%+.1f%s", f * 100.0, "%"); }

void appendf(std::string& out, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (static_cast<size_t>(n) < sizeof buf) {
    out += buf;
    return;
  }
  std::string big(static_cast<size_t>(n) + 1, '\0');
  va_start(ap, fmt);
  std::vsnprintf(big.data(), big.size(), fmt, ap);
  va_end(ap);
  big.pop_back();
  out += big;
}

std::string format_number(double v) {
  char buf[kBufBytes];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string format_fixed(double v, int decimals) { return fixed_str(v, decimals, ""); }

}  // namespace oomb
