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

// Checked arithmetic: throws oomb::Error("... overflows int64") naming `what`.
int64_t checked_mul(int64_t a, int64_t b, const char* what = "size");
int64_t checked_add(int64_t a, int64_t b, const char* what = "size");
// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1 (which overflowed for b near int64 max:
// `--page 9223372036854775807`, found by the simulate_flags fuzz target under UBSan).
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace oomb
