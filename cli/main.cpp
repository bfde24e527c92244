// oomb: one executable, one file per subcommand (see cli/command.h). run_main is the whole CLI
// (entry.cpp's main calls it) so that the fuzz suite parses and runs argv vectors in-process.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/build_info.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json.h"
#include "models/lookup.h"

namespace oomb::cli {
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

int64_t bounded(int64_t v, int64_t lo, int64_t hi, const std::string& flag, const std::string& hint) {
  if (v < lo || v > hi)
    throw Error(flag, std::to_string(v), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", hint);
  return v;
}

void bounded_list(size_t n, const std::string& flag, const std::string& what, size_t most) {
  if (n > most)
    throw Error(flag, std::to_string(n) + " " + what,
                "at most " + std::to_string(most) + " " + what + " in one command",
                "split the work over several commands");
}

FlagPath input_file(const std::string& flag, const std::string& path) {
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_directory(path, ec))
    return {flag, (std::filesystem::path(path) / "config.json").string()};
  return {flag, path};
}

std::vector<FlagPath> scenario_inputs(const std::string& model, const std::string& gpu, const std::string& host) {
  return {input_file("--model", model), input_file("--gpu", gpu), input_file("--host", host)};
}

namespace {
// A command's answer on standard output is part of its result: when it could not be written (a full
// disk behind `> file`, a closed descriptor), the command fails with exit 2 like a bad --out, rather
// than exit 0 with the output lost. Returns rc, or 2 after the message on stderr.
int stdout_written(int rc, const std::string& who) {
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout.good();
  if (!failed) return rc;
  std::fprintf(stderr, "%s: error: standard output: write failed (%s)%s\n", who.c_str(),
               errno ? std::strerror(errno) : "disk full or closed?",
               rc == 0 ? "" : (" (the command itself ended with exit " + std::to_string(rc) + ")").c_str());
  std::clearerr(stdout);  // run_main may be called again in this process (the fuzz suite)
  std::cout.clear();
  return 2;
}
// The subcommand running, for the terminate handler's message.
char g_running[64] = "oomb";
std::terminate_handler g_previous_terminate = std::abort;

// Memory that runs out on a worker thread (an OpenMP loop, a copy stream) cannot be caught where it
// is thrown: the exception ends the process through std::terminate. A std::bad_alloc there is still
// "out of host memory" (exit 3, the message every other one gets), not an abort.
[[noreturn]] void on_terminate() {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "%s: error: out of host memory\n", g_running);
      std::fflush(stderr);
      std::_Exit(3);
    } catch (...) {
    }
  }
  g_previous_terminate();  // anything else: the runtime's own report and abort (a bug)
  std::abort();
}
}  // namespace
}  // namespace oomb::cli

namespace oomb::cli {
namespace {
std::vector<std::string> g_command_line;
}  // namespace
const std::vector<std::string>& command_line() { return g_command_line; }
}  // namespace oomb::cli

int oomb::cli::run_main(int argc, char** argv) {
  g_command_line.assign(argv + std::min(argc, 1), argv + argc);
  if (std::get_terminate() != on_terminate) g_previous_terminate = std::set_terminate(on_terminate);
  CLI::App app{"oomb: plan, simulate, run and validate chunk-recurrent long-context training.\n"
               "Can model M train at context N on GPU G, with which settings, how fast, and does the\n"
               "real run behave as predicted?  Try: oomb plan --model qwen2.5-7b --gpu h200 --context 4M",
               "oomb"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print version, git commit and compiled features (cuda, cupti, gui)");

  std::function<int()> to_run;
  std::vector<std::pair<CLI::App*, std::function<int()>>> subs;
  for (auto& cmd : registry()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.summary);
    subs.emplace_back(sub, cmd.setup(*sub));
  }
  // An unknown first word is a mistyped subcommand, not "arguments not expected".
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::vector<std::string> names;
    for (const auto& cmd : registry()) names.push_back(cmd.name);
    if (std::find(names.begin(), names.end(), word) == names.end()) {
      const std::vector<std::string> near = oomb::models::closest_ids(word, names, 2);
      std::string all, hint;
      for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
      for (const auto& n : near) hint += (hint.empty() ? "" : " or ") + n;
      std::fprintf(stderr, "oomb: error: unknown subcommand '%s'%s; subcommands: %s (oomb --help)\n", word.c_str(),
                   hint.empty() ? "" : (" (did you mean " + hint + "?)").c_str(), all.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    // A mistyped flag: name the subcommand's closest ones instead of only "not expected".
    for (auto& [sub, fn] : subs) {
      if (!sub->parsed()) continue;
      std::vector<std::string> flags;
      for (const CLI::Option* o : sub->get_options())
        for (const auto& l : o->get_lnames()) flags.push_back("--" + l);
      std::string hints;
      for (const auto& extra : sub->remaining()) {
        if (extra.rfind("--", 0) != 0) continue;
        const std::string typed = extra.substr(0, extra.find('='));
        const std::vector<std::string> near = oomb::models::closest_ids(typed, flags, 2);
        hints += "\n  " + typed + ": unknown flag of `oomb " + sub->get_name() + "`";
        for (size_t i = 0; i < near.size(); ++i) hints += (i ? " or " : " (did you mean ") + near[i];
        if (!near.empty()) hints += "?)";
      }
      if (!hints.empty()) {
        std::fprintf(stderr, "oomb %s: error: %s%s\n  (oomb %s --help lists the flags)\n", sub->get_name().c_str(),
                     e.what(), hints.c_str(), sub->get_name().c_str());
        return 2;
      }
    }
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // --help: the help on stdout, rc 0
    return rc == 0 ? stdout_written(0, "oomb") : 2;
  } catch (const oomb::Error& e) {
    std::fprintf(stderr, "oomb: error: %s\n", e.what());
    return 2;
  }
  if (version) {
    std::printf("%s\n", version_string().c_str());
    return stdout_written(0, "oomb");
  }
  for (auto& [sub, fn] : subs) {
    if (sub->parsed()) {
      std::snprintf(g_running, sizeof g_running, "oomb %s", sub->get_name().c_str());
      try {
        return stdout_written(fn(), "oomb " + sub->get_name());
      } catch (const oomb::Error& e) {
        std::fprintf(stderr, "oomb %s: error: %s\n", sub->get_name().c_str(), e.what());
        return 2;
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "oomb %s: error: out of host memory\n", sub->get_name().c_str());
        return 3;
      } catch (const nlohmann::json::exception& e) {
        // A JSON document of an unexpected shape that a loader read without JsonReader.
        std::fprintf(stderr, "oomb %s: error: malformed input document: %s\n", sub->get_name().c_str(), e.what());
        return 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "oomb %s: internal error (a bug in oomb, please report it): %s\n", sub->get_name().c_str(),
                     e.what());
        return 4;
      }
    }
  }
  std::cout << app.help();
  return stdout_written(0, "oomb");
}
