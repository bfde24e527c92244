#pragma once
// Files as oomb reads and writes them: whole-file reads with a size bound, atomic writes (nothing is
// ever left half-written, an interrupt removes the temporary), sets of files replaced as a whole, and
// the checks of output paths made before any work.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace oomb {

// Reads a whole regular file (Error when missing, unreadable, not a file or over 2 GiB).
std::string read_text_file(const std::string& path);
// Writes atomically (a unique temp file next to the target + rename) so nothing is left
// half-written; through a symlink the link's target is replaced, and a non-regular target (a FIFO,
// /dev/stdout) is written directly.
void write_text_file(const std::string& path, const std::string& text);
// The same for any content: `fill` writes it to the stream.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill);
// Files replaced as a whole (a sharded checkpoint and its index): each target is written to a unique
// temporary name beside it (through symlinks, like write_file_atomically); commit() renames them all
// into place in the order given and then removes `stale` (files of an earlier write that the new set
// replaces). Until commit nothing of the old set is touched: a failed write (a full disk) or a
// destruction without commit removes the temporaries, and so does an interrupt (SIGINT, SIGTERM,
// SIGHUP) during the writes; one that arrives during commit is held until the switch is complete.
// Targets that exist and are not regular files (FIFOs, devices) are written in place.
class FileSetWriter {
 public:
  explicit FileSetWriter(const std::vector<std::string>& targets);
  ~FileSetWriter();
  FileSetWriter(const FileSetWriter&) = delete;
  FileSetWriter& operator=(const FileSetWriter&) = delete;
  void write(size_t i, const std::function<void(std::ostream&)>& fill);
  void commit(const std::vector<std::string>& stale = {});

 private:
  void discard();
  std::vector<std::string> targets_, shown_;  // where each lands; the path as given (for messages)
  std::vector<std::string> tmps_;             // "" for a target written in place
  std::vector<const char*> tmp_ptrs_;         // tmps_' c_str(), what the signal handler unlinks
  bool done_ = false;
};
// Error naming `flag` when `path` could not be written (missing or read-only directory, a
// directory given as the file); called before any work so a bad output path costs nothing.
void check_writable(const std::string& path, const std::string& flag);
// One path a command reads or writes, named by its flag, for check_distinct_paths. tree: a folder
// (a checkpoint folder): a file inside it counts as part of it.
struct FlagPath {
  std::string flag, path;
  bool tree = false;
};
// Refuses (Error naming both flags and the path) an output that would replace an input (the same
// file, an output inside an input folder, or an input inside an output folder) and two outputs on
// one file. Files are compared, not strings: "./x", "dir/../x", symlinks and hard links count.
// Empty paths, inputs that do not exist (catalog ids) and devices or FIFOs (/dev/null, /dev/stdout)
// are left out. Called before any work, after the outputs' check_writable.
void check_distinct_paths(const std::vector<FlagPath>& inputs, const std::vector<FlagPath>& outputs);

}  // namespace oomb
