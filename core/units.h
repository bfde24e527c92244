#pragma once
// Token-count parsing ("4M", "16K", "3000", "8K..4M") and checked int64 arithmetic.
#include <cstdint>
#include <string>
#include <vector>

namespace oomb {

// Parses a token count: digits with an optional K (1024) or M (1048576) suffix, case-insensitive.
// `where` names the flag or key for the error message. Rejects 0, negatives, junk and overflow.
int64_t parse_tokens(const std::string& text, const std::string& where);

// "8K..4M" (doubling from the first to the last, inclusive) or "8K,16K,100000".
std::vector<int64_t> parse_token_list(const std::string& text, const std::string& where);

// Checked arithmetic: throws oomb::Error("... overflows int64") naming `what`. Inline: the buffer
// table and the op scratch size every row with them, on every evaluation of the fast path.
[[noreturn]] void throw_int64_overflow(const char* what);
inline int64_t checked_mul(int64_t a, int64_t b, const char* what = "size") {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw_int64_overflow(what);
  return r;
}
inline int64_t checked_add(int64_t a, int64_t b, const char* what = "size") {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw_int64_overflow(what);
  return r;
}
// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (which overflowed for b near int64 max:
// `--page 9223372036854775807`, found by the simulate_flags fuzz target under UBSan).
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace oomb
