#pragma once
// User-facing errors and always-on invariants.
//
// oomb::Error is for bad input (a file, a key, a flag): it carries where the problem is and what
// would be valid, and the CLI turns it into a message and exit code 2. OOMB_ASSERT is for our own
// invariants: it is never compiled out, and failing it is a bug in oomb, not in the input.
#include <stdexcept>
#include <string>

namespace oomb {

class Error : public std::runtime_error {
 public:
  // where: a file path, a flag ("--chunk") or a document ("plan"); key: the JSON key or value
  // at fault (may be empty); hint: what would be valid (may be empty).
  Error(std::string where, std::string key, std::string problem, std::string hint = {});
  explicit Error(std::string problem);

  const std::string& where() const { return where_; }
  const std::string& key() const { return key_; }
  const std::string& problem() const { return problem_; }
  const std::string& hint() const { return hint_; }

 private:
  std::string where_, key_, problem_, hint_;
};

[[noreturn]] void assert_fail(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace oomb

#define OOMB_ASSERT(cond, ...)                                                        \
  do {                                                                                \
    if (!(cond)) ::oomb::assert_fail(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)
