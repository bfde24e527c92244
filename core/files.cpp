#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/interrupts.h"

namespace oomb {

namespace {

// Files larger than this are refused before they are read (a FIFO or /dev/zero never ends).
constexpr int64_t kMaxTextFileBytes = int64_t{2} << 30;

// Where a write to `path` lands: a symlink's final target (a dangling one included).
std::filesystem::path resolve_links(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    const fs::path link = fs::read_symlink(p, ec);
    if (ec) return p;
    p = link.is_absolute() ? link : p.parent_path() / link;
  }
  throw Error(path, "", "too many levels of symbolic links");
}

void write_stream(std::ostream& out, const std::string& path, const std::function<void(std::ostream&)>& fill) {
  fill(out);
  out.flush();
  if (!out.good()) throw Error(path, "", "write failed (disk full?)");
}

}  // namespace

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!ec && std::filesystem::is_directory(st))
    throw Error(path, "", "is a directory", "give the path of a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "", "cannot open file", "check the path");
  std::string out;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (static_cast<int64_t>(out.size()) > kMaxTextFileBytes)
      throw Error(path, "", "is larger than " + std::to_string(kMaxTextFileBytes >> 30) + " GiB",
                  "oomb's JSON documents are far smaller; is this the right file?");
  }
  if (in.bad()) throw Error(path, "", "read error");
  return out;
}
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill) {
  namespace fs = std::filesystem;
  const fs::path target = resolve_links(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw Error(path, "", "is a directory", "give the path of a file to write");
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    // A FIFO, a terminal, /dev/stdout: written in place (a rename would replace the device node).
    std::ofstream out(target, std::ios::binary);
    if (!out) throw Error(path, "", "cannot write file");
    write_stream(out, path, fill);
    return;
  }
  static std::atomic<unsigned> counter{0};
  fs::path tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    std::string name = target.filename().string();
    name.insert(0, 1, '.');
    name += ".oomb-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    tmp = target.parent_path() / name;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0)
    throw Error(path, "", std::string("cannot write file: ") + std::strerror(errno),
                "check the directory exists and is writable");
  ::close(fd);
  interrupt_cleanup::install();
  interrupt_cleanup::set_file(tmp.string());
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      if (!out) throw Error(path, "", "cannot write file", "check the directory exists and is writable");
      write_stream(out, path, fill);
    }
    fs::rename(tmp, target, ec);
    if (ec) throw Error(path, "", "cannot write file (rename failed: " + ec.message() + ")");
  } catch (...) {
    interrupt_cleanup::clear_file();
    fs::remove(tmp, ec);
    throw;
  }
  interrupt_cleanup::clear_file();
}

FileSetWriter::FileSetWriter(const std::vector<std::string>& targets) {
  namespace fs = std::filesystem;
  static std::atomic<unsigned> counter{0};
  OOMB_ASSERT(!interrupt_cleanup::file_set_active(), "one FileSetWriter at a time");
  interrupt_cleanup::install();
  for (const std::string& t : targets) {
    const fs::path target = resolve_links(t);
    std::error_code ec;
    const fs::file_status st = fs::status(target, ec);
    if (fs::is_directory(st)) throw Error(t, "", "is a directory", "give the path of a file to write");
    shown_.push_back(t);
    targets_.push_back(target.string());
    if (fs::exists(st) && !fs::is_regular_file(st)) {
      tmps_.emplace_back();
      continue;
    }
    std::string name = target.filename().string();  // (not "." + ...: GCC 12 warns -Wrestrict on that)
    name.insert(0, 1, '.');
    name += ".oomb-tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    tmps_.push_back((target.parent_path() / name).string());
  }
  for (const auto& t : tmps_) tmp_ptrs_.push_back(t.c_str());
  interrupt_cleanup::set_file_set(tmp_ptrs_.data(), tmp_ptrs_.size());
}

FileSetWriter::~FileSetWriter() {
  if (!done_) discard();
}

void FileSetWriter::discard() {
  interrupt_cleanup::clear_file_set();
  std::error_code ec;
  for (const auto& t : tmps_)
    if (!t.empty()) std::filesystem::remove(t, ec);
  done_ = true;
}

void FileSetWriter::write(size_t i, const std::function<void(std::ostream&)>& fill) {
  OOMB_ASSERT(i < targets_.size() && !done_, "FileSetWriter::write out of range");
  try {
    const std::string& dest = tmps_[i].empty() ? targets_[i] : tmps_[i];
    if (!tmps_[i].empty()) {
      const int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd < 0)
        throw Error(shown_[i], "", std::string("cannot write file: ") + std::strerror(errno),
                    "check the directory exists and is writable");
      ::close(fd);
    }
    std::ofstream out(dest, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(shown_[i], "", "cannot write file", "check the directory exists and is writable");
    write_stream(out, shown_[i], fill);
  } catch (...) {
    discard();
    throw;
  }
}

void FileSetWriter::commit(const std::vector<std::string>& stale) {
  OOMB_ASSERT(!done_, "FileSetWriter::commit twice");
  namespace fs = std::filesystem;
  std::error_code ec;
  interrupt_cleanup::begin_switch();
  size_t moved = 0;
  for (; moved < targets_.size(); ++moved) {
    if (tmps_[moved].empty()) continue;
    fs::rename(tmps_[moved], targets_[moved], ec);
    if (ec) break;
    tmps_[moved].clear();  // in place now: never removed as a temporary
  }
  if (moved == targets_.size())
    for (const auto& f : stale)
      if (std::find(targets_.begin(), targets_.end(), resolve_links(f).string()) == targets_.end()) fs::remove(f, ec);
  interrupt_cleanup::clear_file_set();
  interrupt_cleanup::end_switch();
  const std::string failed = moved < targets_.size() ? shown_[moved] : "";
  const std::string why = ec.message();
  if (!failed.empty()) discard();
  done_ = true;
  interrupt_cleanup::raise_held_by_switch();
  if (!failed.empty()) throw Error(failed, "", "cannot write file (rename failed: " + why + ")");
}

void write_text_file(const std::string& path, const std::string& text) {
  write_file_atomically(path, [&text](std::ostream& out) { out << text; });
}

void check_writable(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  fs::path target;
  try {
    target = resolve_links(path);
  } catch (const Error& e) {
    throw Error(flag, path, e.problem());
  }
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::is_directory(st)) throw Error(flag, path, "is a directory", "give the path of a file to write");
  if (fs::exists(st) && !fs::is_regular_file(st)) return;  // a FIFO or device: written in place
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  if (!fs::is_directory(fs::status(dir, ec)))
    throw Error(flag, path, "cannot be written: directory " + dir.string() + " does not exist",
                "create it first, or write elsewhere");
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(flag, path, "cannot be written: directory " + dir.string() + " is not writable",
                "write elsewhere");
  if (fs::exists(st) && ::access(target.c_str(), W_OK) != 0)
    throw Error(flag, path, "cannot be written: the file is read-only", "write elsewhere");
}

namespace {

// A path as the file it names: links followed (a dangling one to its target), made absolute, "." and
// ".." resolved through the existing part.
struct ResolvedPath {
  const FlagPath* from = nullptr;
  std::filesystem::path canonical;
  bool exists = false, special = false;
};

ResolvedPath resolve_path(const FlagPath& p) {
  namespace fs = std::filesystem;
  ResolvedPath r;
  r.from = &p;
  std::error_code ec;
  fs::path target;
  try {
    target = resolve_links(p.path);
  } catch (const Error&) {
    target = p.path;  // a loop of links: the readers and writers name it
  }
  const fs::file_status st = fs::status(target, ec);
  r.exists = fs::exists(st);
  r.special = r.exists && !fs::is_regular_file(st) && !fs::is_directory(st);
  r.canonical = fs::weakly_canonical(fs::absolute(target, ec), ec);
  if (ec) r.canonical = fs::absolute(target).lexically_normal();
  return r;
}

bool same_file(const ResolvedPath& a, const ResolvedPath& b) {
  std::error_code ec;
  if (a.exists && b.exists) return std::filesystem::equivalent(a.canonical, b.canonical, ec);
  return a.canonical == b.canonical;
}

// Whether `inner` lies inside the folder `outer` (not equal to it).
bool inside(const ResolvedPath& outer, const ResolvedPath& inner) {
  const auto& o = outer.canonical;
  const auto& i = inner.canonical;
  auto oi = o.begin(), ii = i.begin();
  for (; oi != o.end(); ++oi, ++ii) {
    if (oi->empty()) continue;  // a trailing separator
    if (ii == i.end() || *oi != *ii) return false;
  }
  return ii != i.end();
}

}  // namespace

void check_distinct_paths(const std::vector<FlagPath>& inputs, const std::vector<FlagPath>& outputs) {
  std::vector<ResolvedPath> in, out;
  for (const auto& p : inputs)
    if (!p.path.empty())
      if (ResolvedPath r = resolve_path(p); r.exists && !r.special) in.push_back(std::move(r));
  for (const auto& p : outputs)
    if (!p.path.empty())
      if (ResolvedPath r = resolve_path(p); !r.special) out.push_back(std::move(r));
  auto quoted = [](const ResolvedPath& r) { return r.from->flag + " " + r.from->path; };
  for (const auto& o : out) {
    for (const auto& i : in) {
      if (same_file(o, i))
        throw Error(o.from->flag, o.from->path,
                    "is the input " + quoted(i) + ": writing it would replace what this command reads",
                    "write the output elsewhere");
      if (i.from->tree && inside(i, o))
        throw Error(o.from->flag, o.from->path, "lies inside the input folder " + quoted(i),
                    "write the output outside the folder this command reads");
      if (o.from->tree && inside(o, i))
        throw Error(o.from->flag, o.from->path,
                    "is a folder that holds the input " + quoted(i) + ": writing it could replace the input",
                    "write the output elsewhere");
    }
  }
  for (size_t a = 0; a < out.size(); ++a)
    for (size_t b = a + 1; b < out.size(); ++b)
      if (same_file(out[a], out[b]))
        throw Error(out[b].from->flag, out[b].from->path, "is also the output " + quoted(out[a]) + ": one would replace the other",
                    "give each output its own file");
}

}  // namespace oomb
