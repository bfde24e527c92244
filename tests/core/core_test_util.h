#pragma once
// Shared by the core tests: the message of the oomb::Error a call throws ("" when it throws none).
#include <functional>
#include <string>

#include "core/error.h"

namespace oomb::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace oomb::testing
