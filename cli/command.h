#pragma once
// Subcommand registration: each cli/<name>.cpp registers itself with a static Registrar, so adding a
// subcommand never touches main.cpp. Each subcommand's run() returns the process exit code; user
// errors are thrown as oomb::Error and reported by main with exit code 2.
#include <CLI/CLI.hpp>
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

struct Registrar {
  Registrar(std::string name, std::string summary, std::function<std::function<int()>(CLI::App&)> setup) {
    registry().push_back({std::move(name), std::move(summary), std::move(setup)});
  }
};

}  // namespace oomb::cli
