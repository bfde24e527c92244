#include "core/units.h"

#include <cctype>
#include <limits>

#include "core/error.h"

namespace oomb {

int64_t parse_tokens(const std::string& text, const std::string& where) {
  const std::string hint = "a positive count such as 4096, 16K (x1024) or 4M (x1048576)";
  if (text.empty()) throw Error(where, "", "empty token count", hint);
  size_t i = 0;
  int64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    int d = text[i] - '0';
    if (v > (std::numeric_limits<int64_t>::max() - d) / 10)
      throw Error(where, "", "'" + text + "' overflows a 64-bit count", hint);
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) throw Error(where, "", "'" + text + "' is not a token count", hint);
  int64_t mult = 1;
  if (i < text.size()) {
    char s = static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
    if (s == 'K') mult = 1024;
    else if (s == 'M') mult = 1024 * 1024;
    else if (s == 'G') mult = int64_t{1024} * 1024 * 1024;
    else throw Error(where, "", "'" + text + "' has an unknown suffix", hint);
    ++i;
  }
  if (i != text.size()) throw Error(where, "", "'" + text + "' is not a token count", hint);
  if (v <= 0) throw Error(where, "", "'" + text + "' must be positive", hint);
  if (v > std::numeric_limits<int64_t>::max() / mult)
    throw Error(where, "", "'" + text + "' overflows a 64-bit count", hint);
  return v * mult;
}

std::vector<int64_t> parse_token_list(const std::string& text, const std::string& where) {
  std::vector<int64_t> out;
  auto dots = text.find("..");
  if (dots != std::string::npos) {
    int64_t lo = parse_tokens(text.substr(0, dots), where);
    int64_t hi = parse_tokens(text.substr(dots + 2), where);
    if (hi < lo) throw Error(where, "", "range '" + text + "' ends below its start", "write LOW..HIGH, e.g. 8K..4M");
    for (int64_t v = lo; v <= hi; v *= 2) {
      out.push_back(v);
      if (v > std::numeric_limits<int64_t>::max() / 2) break;
    }
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    out.push_back(parse_tokens(item, where));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

void throw_int64_overflow(const char* what) { throw Error(std::string(what) + " overflows int64 bytes"); }

}  // namespace oomb
