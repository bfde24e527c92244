#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace oomb {

namespace {
std::string compose(const std::string& where, const std::string& key, const std::string& problem,
                    const std::string& hint) {
  std::string s;
  if (!where.empty()) s += where;
  if (!key.empty()) s += (s.empty() ? "" : ": ") + std::string("'") + key + "'";
  if (!s.empty()) s += ": ";
  s += problem;
  if (!hint.empty()) s += " (" + hint + ")";
  return s;
}
}  // namespace

Error::Error(std::string where, std::string key, std::string problem, std::string hint)
    : std::runtime_error(compose(where, key, problem, hint)),
      where_(std::move(where)),
      key_(std::move(key)),
      problem_(std::move(problem)),
      hint_(std::move(hint)) {}

Error::Error(std::string problem) : std::runtime_error(problem), problem_(std::move(problem)) {}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "oomb: internal error: %s:%d: assertion '%s' failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace oomb
