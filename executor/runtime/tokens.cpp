#include "executor/runtime/tokens.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "executor/runtime/rng.h"

namespace oomb::executor {

TokenSource TokenSource::synthetic(int64_t vocab, uint64_t seed) {
  OOMB_ASSERT(vocab > 0);
  TokenSource s;
  s.vocab_ = vocab;
  s.seed_ = seed;
  return s;
}

TokenSource TokenSource::from_file(const std::string& path, int64_t vocab) {
  const char* expected = "a binary file of little-endian uint32 token ids";
  std::error_code ec;
  // A directory or a FIFO has no size to check: refused by name rather than read as 2^63 bytes.
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(path, "", std::filesystem::is_directory(path, ec) ? "is a directory" : "is not a regular file",
                expected);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "", "cannot open the token file", expected);
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  if (size < 0) throw Error(path, "", "cannot tell the file's size", expected);
  if (size == 0) throw Error(path, "", "is empty", expected);
  if (size % 4 != 0)
    throw Error(path, "", "size " + std::to_string(size) + " bytes is not a multiple of 4",
                "a binary file of little-endian uint32 token ids");
  std::vector<uint32_t> raw(static_cast<size_t>(size / 4));
  in.read(reinterpret_cast<char*>(raw.data()), size);
  if (!in) throw Error(path, "", "read error");
  TokenSource s;
  s.vocab_ = vocab;
  s.path_ = path;
  s.ids_.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] >= static_cast<uint64_t>(vocab))
      throw Error(path, "", "token id " + std::to_string(raw[i]) + " at byte offset " + std::to_string(i * 4) +
                                " (token " + std::to_string(i) + ") is out of range",
                  "ids must be < the model's vocab " + std::to_string(vocab));
    s.ids_[i] = static_cast<int32_t>(raw[i]);
  }
  return s;
}

std::vector<int32_t> TokenSource::sequence(int64_t step, int64_t n) const {
  std::vector<int32_t> out(static_cast<size_t>(n));
  if (path_.empty()) {
    Rng rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) + 1);
    const int64_t a = 5 % vocab_ ? 5 : 1, b = 3;
    int64_t t = static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab_)));
    for (int64_t i = 0; i < n; ++i) {
      out[static_cast<size_t>(i)] = static_cast<int32_t>(t);
      t = rng.uniform() < 0.75 ? (a * t + b) % vocab_ : static_cast<int64_t>(rng.below(static_cast<uint64_t>(vocab_)));
    }
    return out;
  }
  const auto total = static_cast<int64_t>(ids_.size());
  if (total < n)
    throw Error(path_, "", "holds " + std::to_string(total) + " tokens, fewer than the context of " +
                               std::to_string(n), "a longer token file or a smaller --context");
  const int64_t windows = total / n;
  const int64_t first = (step % windows) * n;
  std::copy(ids_.begin() + first, ids_.begin() + first + n, out.begin());
  return out;
}

std::string TokenSource::describe() const {
  if (path_.empty()) return "synthetic (seed " + std::to_string(seed_) + ")";
  return path_ + " (" + std::to_string(ids_.size()) + " tokens)";
}

}  // namespace oomb::executor
