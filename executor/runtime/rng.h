#pragma once
// A small deterministic RNG (splitmix64): the same numbers on every platform and standard
// library, so seeded weights, tokens and tests are reproducible.
#include <cmath>
#include <cstdint>

namespace oomb::executor {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  uint64_t below(uint64_t n) { return next() % n; }
  // The state after n more next() calls (splitmix64's state advances by a constant), so a sequence
  // can be generated in parallel pieces with exactly the values of one pass.
  void skip(uint64_t n) { s_ += n * 0x9E3779B97F4A7C15ull; }
  double normal() {  // Box-Muller: two next() calls per sample
    const double u1 = uniform() + 1e-300, u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t s_;
};

}  // namespace oomb::executor
