#pragma once
// Training tokens: a seeded synthetic generator, or a binary file of little-endian uint32 ids.
#include <cstdint>
#include <string>
#include <vector>

namespace oomb::executor {

class TokenSource {
 public:
  // Learnable synthetic text: mostly a fixed affine successor rule, with seeded random noise.
  static TokenSource synthetic(int64_t vocab, uint64_t seed);
  // Reads and validates the whole file: size a multiple of 4, every id < vocab (Error naming the
  // file and the first offending byte offset otherwise).
  static TokenSource from_file(const std::string& path, int64_t vocab);

  // Tokens of training step `step` (0-based): consecutive windows of n tokens, cycling through the
  // file; Error when the file holds fewer than n tokens.
  std::vector<int32_t> sequence(int64_t step, int64_t n) const;
  std::string describe() const;

 private:
  int64_t vocab_ = 0;
  uint64_t seed_ = 0;
  std::string path_;  // empty = synthetic
  std::vector<int32_t> ids_;
};

}  // namespace oomb::executor
