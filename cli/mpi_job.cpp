#include "cli/mpi_job.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "cli/command.h"
#include "core/utc_time.h"

#ifdef OOMB_HAVE_MPI
#include "executor/mpi/mpi_comm.h"
#endif

namespace oomb::cli {

namespace {

// Flags whose value may differ between the ranks of one job: per-host settings, not the job's.
const std::set<std::string> kPerHostFlags = {"--threads"};

struct Arg {
  std::string flag;  // "--steps"; "" for a word that is no flag's value (the subcommand)
  std::string value;
};

bool is_flag(const std::string& t) { return t.size() > 2 && t.compare(0, 2, "--") == 0; }

std::vector<Arg> parse_args(const std::vector<std::string>& args) {
  std::vector<Arg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (!is_flag(t)) {
      out.push_back({"", t});
      continue;
    }
    const size_t eq = t.find('=');
    if (eq != std::string::npos) {
      out.push_back({t.substr(0, eq), t.substr(eq + 1)});
    } else if (i + 1 < args.size() && !is_flag(args[i + 1])) {
      out.push_back({t, args[i + 1]});
      ++i;
    } else {
      out.push_back({t, ""});
    }
  }
  return out;
}

// FNV-1a, 64 bits.
uint64_t fnv(const char* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

// A regular file's size and digest (past 64 MiB: of its first and last MiB, and its size).
std::string file_digest(const std::filesystem::path& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return "unreadable";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "unreadable";
  constexpr uint64_t kWhole = uint64_t{64} << 20, kEnd = uint64_t{1} << 20;
  std::vector<char> buf;
  uint64_t h = fnv(nullptr, 0);
  auto take = [&](uint64_t at, uint64_t n) {
    buf.resize(n);
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    h = fnv(buf.data(), static_cast<size_t>(in.gcount()), h);
  };
  if (size <= kWhole) {
    take(0, size);
  } else {
    take(0, kEnd);
    take(size - kEnd, kEnd);
  }
  char text[64];
  std::snprintf(text, sizeof text, "%llu bytes, digest %016llx", static_cast<unsigned long long>(size),
                static_cast<unsigned long long>(h));
  return text;
}

// What a flag's path holds: a regular file's digest, a folder's files' (name and digest, sorted);
// nothing for a path that is neither (a stream is never read, a missing file is each command's error).
std::string path_digest(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return "";
  if (fs::is_regular_file(st)) return file_digest(path);
  if (!fs::is_directory(st)) return "";
  std::vector<std::string> files;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file(ec)) files.push_back(it->path().filename().string());
  std::sort(files.begin(), files.end());
  uint64_t h = fnv(nullptr, 0);
  for (const std::string& f : files) {
    const std::string d = f + ": " + file_digest(fs::path(path) / f) + "\n";
    h = fnv(d.data(), d.size(), h);
  }
  char text[64];
  std::snprintf(text, sizeof text, "a folder of %zu files, digest %016llx", files.size(),
                static_cast<unsigned long long>(h));
  return text;
}

std::string shown(const std::string& flag, const std::string& value) {
  if (flag.empty()) return "`" + value + "`";
  return value.empty() ? flag : flag + " " + value;
}

std::string new_job_id() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char random[20];
  std::snprintf(random, sizeof random, "%016llx", static_cast<unsigned long long>(r));
  return utc_timestamp() + "-" + random;
}

}  // namespace

Json describe_command(const std::vector<std::string>& args, const std::vector<std::string>& input_flags) {
  Json j = {{"args", Json::array()}, {"files", Json::object()}};
  for (const Arg& a : parse_args(args)) {
    if (kPerHostFlags.count(a.flag)) continue;
    j["args"].push_back({a.flag, a.value});
    if (std::find(input_flags.begin(), input_flags.end(), a.flag) != input_flags.end() && !a.value.empty())
      j["files"][a.flag + " " + a.value] = path_digest(a.value);
  }
  return j;
}

std::string command_difference(const Json& mine, const Json& root, int rank) {
  const std::string who = "rank " + std::to_string(rank);
  // Flags: the values each side gives a flag, in order (a flag given twice is compared as a list).
  auto values = [](const Json& d) {
    std::map<std::string, std::vector<std::string>> m;
    for (const Json& a : d.at("args")) m[a[0].get<std::string>()].push_back(a[1].get<std::string>());
    return m;
  };
  const auto a = values(mine), b = values(root);
  std::set<std::string> flags;
  for (const auto& [f, v] : a) flags.insert(f);
  for (const auto& [f, v] : b) flags.insert(f);
  auto list = [](const std::string& f, const std::vector<std::string>& vs) {
    std::string s;
    for (const auto& v : vs) s += (s.empty() ? "" : ", ") + shown(f, v);
    return s;
  };
  for (const std::string& f : flags) {
    const auto ia = a.find(f), ib = b.find(f);
    if (ia != a.end() && ib != b.end() && ia->second == ib->second) continue;
    const std::string label = f.empty() ? "the command" : f;
    const std::string mine_text = ia == a.end() ? "without " + f : "with " + list(f, ia->second);
    const std::string root_text = ib == b.end() ? "without " + f : "with " + list(f, ib->second);
    if (f.empty())
      return who + " runs " + list(f, ia == a.end() ? std::vector<std::string>{} : ia->second) + " and rank 0 runs " +
             list(f, ib == b.end() ? std::vector<std::string>{} : ib->second) +
             ": every rank of a job runs the same command";
    return label + ": " + who + " runs " + mine_text + ", rank 0 " + root_text +
           " (every rank of a job runs the same command)";
  }
  // Files: the same names (the flags agree), compared by contents.
  for (auto it = root.at("files").begin(); it != root.at("files").end(); ++it) {
    const std::string theirs = it.value().get<std::string>();
    const std::string own = mine.at("files").value(it.key(), std::string());
    if (own == theirs) continue;
    const std::string flag = it.key().substr(0, it.key().find(' ')), path = it.key().substr(it.key().find(' ') + 1);
    return flag + ": '" + path + "' is not the same on " + who + " and rank 0 (" + who + ": " +
           (own.empty() ? "no such file" : own) + "; rank 0: " + (theirs.empty() ? "no such file" : theirs) +
           "): every rank of a job reads the same files";
  }
  return "";
}

int run_as_job(const std::string& command, const std::vector<std::string>& input_flags,
               const std::function<int(executor::Communicator*, const std::string& job)>& body) {
  if (!executor::launched_by_mpi()) return body(nullptr, "");
#ifdef OOMB_HAVE_MPI
  executor::mpi::init(nullptr, nullptr);
  const auto world = executor::mpi::world();
  const int rank = world->rank(), size = world->size();
  std::string job;
  if (size > 1) {
    // Rank 0's description and the job's identity to every rank; each compares its own with it.
    const Json mine = describe_command(command_line(), input_flags);
    std::string text;
    if (rank == 0) {
      Json root = mine;
      root["job"] = new_job_id();
      text = root.dump();
    }
    int64_t n = static_cast<int64_t>(text.size());
    world->broadcast_host(&n, sizeof n, 0);
    text.resize(static_cast<size_t>(n));
    world->broadcast_host(text.data(), n, 0);
    const Json root = Json::parse(text);
    job = root.at("job").get<std::string>();
    const std::string differs = rank == 0 ? "" : command_difference(mine, root, rank);
    double any = differs.empty() ? 0 : 1;
    world->all_reduce_max_host(&any, 1);
    if (any > 0) {
      if (!differs.empty())
        std::fprintf(stderr, "%s (rank %d of %d): error: %s\n", command.c_str(), rank, size, differs.c_str());
      else if (rank == 0)
        std::fprintf(stderr,
                     "%s (rank 0 of %d): error: a rank of this job was started with another command line or other "
                     "input files (its message says which); nothing was run\n",
                     command.c_str(), size);
      std::fflush(stderr);
      world->barrier();  // every message out before the job ends
      executor::mpi::finalize();
      return 2;
    }
  }
  int rc = 0;
  try {
    rc = body(world.get(), job);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s (rank %d of %d): error: %s\n", command.c_str(), rank, size, e.what());
    std::fflush(stderr);
    if (size > 1) executor::mpi::abort(2);
    throw;
  }
  if (rc != 0 && size > 1) executor::mpi::abort(rc);
  executor::mpi::finalize();
  return rc;
#else
  (void)command;
  (void)input_flags;
  return body(nullptr, "");
#endif
}

}  // namespace oomb::cli
