#pragma once
// Runs the built `oomb` binary from the CLI tests (OOMB_BINARY_DIR): exit code and output; the same
// under `mpirun`, and the JSON document of an output.
#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include "core/json.h"

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

// A shell command line as it is (its own redirections decide what joins the output).
inline CliRun run_command(const std::string& cmd) {
  CliRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A shell command line, stderr joining stdout.
inline CliRun sh(const std::string& cmd) { return run_command(cmd + " 2>&1"); }

// `oomb ARGS`; stderr joins stdout unless `stdout_only` (JSON output, with warnings on stderr).
inline CliRun run_oomb(const std::string& args, bool stdout_only = false) {
  return run_command(oomb_binary() + " " + args + (stdout_only ? " 2>/dev/null" : " 2>&1"));
}

// `mpirun -np N oomb ` (ARGS follow) as CI runs it: as root in a container, N ranks on however many
// cores.
inline std::string mpirun_oomb(int np) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 mpirun "
         "--oversubscribe -np " + std::to_string(np) + " " + oomb_binary() + " ";
}

// The JSON document in an output that may carry launcher lines around it.
inline Json json_in(const std::string& out) {
  const size_t a = out.find('{'), b = out.rfind('}');
  return parse_json(a == std::string::npos ? out : out.substr(a, b - a + 1), "output");
}

}  // namespace oomb::test
