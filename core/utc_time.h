#pragma once
// The current time in UTC as ISO 8601 to the second ("2026-12-05T19:08:31Z"): what a trace's
// metadata, a device profile's date and an MPI job's identity record.
#include <ctime>
#include <string>

namespace oomb {

inline std::string utc_timestamp() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace oomb
