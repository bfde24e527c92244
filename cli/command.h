#pragma once
// Subcommand registration: each cli/<name>.cpp registers itself with a static Registrar, so adding a
// subcommand never touches main.cpp. Each subcommand's run() returns the process exit code; user
// errors are thrown as oomb::Error and reported by main with exit code 2.
#include <CLI/CLI.hpp>
#include <cstdint>

#include "core/files.h"
#include <functional>
#include <string>
#include <vector>

namespace oomb::cli {

struct Command {
  std::string name;
  std::string summary;
  // Adds options to `sub`; returns the function to run after parsing.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& registry();

// The oomb command line: parses argv, runs the subcommand, returns the exit code (0 ok, 1 an honest
// negative result, 2 bad input, 3 out of host memory, 4 an internal error); see README.
int run_main(int argc, char** argv);
// The arguments run_main was given (argv[1..]): what the ranks of an MPI job compare (mpi_job.h).
const std::vector<std::string>& command_line();

// Bounds of the resource flags (issue 24): steps, warm-up steps and gradient accumulation (oomb run),
// checkpoint shard bytes, and how many items a list flag takes (sweep --contexts, calibrate's
// files). Each is far above any real use and far below what would exhaust a machine.
constexpr int64_t kMaxSteps = 1000000;
constexpr int64_t kMinShardBytes = 1024;
constexpr int64_t kMaxShardBytes = int64_t{1} << 50;
constexpr size_t kMaxListItems = 1000;
// sweep --contexts: each context is a plan search of ~0.1 s (3000 contexts took 268 s).
constexpr size_t kMaxSweepContexts = 256;

// v if lo <= v <= hi, else oomb::Error naming `flag`, the value and the range (exit 2).
int64_t bounded(int64_t v, int64_t lo, int64_t hi, const std::string& flag, const std::string& hint = {});
// A list flag of at most `most` items (Error naming the flag, the count and the bound).
void bounded_list(size_t n, const std::string& flag, const std::string& what, size_t most = kMaxListItems);

// A file a flag reads, for check_distinct_paths: a folder given as a model (a Hugging Face folder)
// is read as its config.json.
FlagPath input_file(const std::string& flag, const std::string& path);
// The inputs every scenario command may read: --model, --gpu and --host when they name files.
std::vector<FlagPath> scenario_inputs(const std::string& model, const std::string& gpu, const std::string& host);

struct Registrar {
  Registrar(std::string name, std::string summary, std::function<std::function<int()>(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

}  // namespace oomb::cli
