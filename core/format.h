#pragma once
// All human formatting of bytes, durations, rates and counts lives here.
#include <cstdint>
#include <string>

namespace oomb {

std::string format_bytes(int64_t bytes);          // "1.50 GiB", "512 B"
std::string format_duration_s(double seconds);    // "1.23 s", "4.5 ms", "12.0 us", "2h 03m"
std::string format_rate_bytes_per_s(double bps);  // "52.0 GB/s" (decimal, as links are quoted)
std::string format_flops_per_s(double fps);       // "989 TFLOP/s"
std::string format_tokens(int64_t tokens);        // "4M", "16K", "3000"
std::string format_count(double v);               // "1.23e+06" style for large, fixed for small
std::string format_params(int64_t n);             // parameters as quoted: "20.91B", "494.0M", "107.1K", "950"
std::string format_percent(double fraction);      // 0.123 -> "12.3%"
std::string format_signed_percent(double fraction);  // 0.123 -> "+12.3%", -0.05 -> "-5.0%"
std::string format_number(double v);               // printf's "%g": 0.05 -> "0.05", 1e6 -> "1e+06"
std::string format_fixed(double v, int decimals);   // printf's "%.<decimals>f": (0.5, 2) -> "0.50"

// printf into the end of `out` (reports built as text, printed by the CLI).
void appendf(std::string& out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace oomb
