#pragma once
// Runs the built `oomb` binary from the CLI tests (OOMB_BINARY_DIR): exit code and output.
#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace oomb::test {

struct CliRun {
  int rc = -1;
  std::string out;
};

// The executable under test: `oomb`, or the one OOMB_TEST_OOMB_NAME names (the tests of tests/cuda
// built on the emulated device beside an nvcc build run `oomb-emulated`).
#ifndef OOMB_TEST_OOMB_NAME
#define OOMB_TEST_OOMB_NAME "oomb"
#endif
inline std::string oomb_binary() { return std::string(OOMB_BINARY_DIR) + "/" OOMB_TEST_OOMB_NAME; }

// `oomb ARGS`; stderr joins stdout unless `stdout_only` (JSON output, with warnings on stderr).
inline CliRun run_oomb(const std::string& args, bool stdout_only = false) {
  CliRun r;
  const std::string cmd = oomb_binary() + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace oomb::test
