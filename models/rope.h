#pragma once
// Rotary position embedding frequencies, shared by the CPU ops, the CUDA kernel and the tests.
//
// Plain RoPE: inv_freq_i = theta^(-2i/d) for i < d/2. Llama 3.1/3.2 (rope_scaling rope_type
// "llama3", Hugging Face's _compute_llama3_parameters): with L = original_max_position_embeddings
// and wavelength w_i = 2 pi / inv_freq_i, a frequency whose wavelength is longer than
// L / low_freq_factor is divided by factor, one shorter than L / high_freq_factor is kept, and in
// between it is interpolated: s = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor),
// inv_freq_i' = (1 - s) inv_freq_i / factor + s inv_freq_i. (llama3 leaves cos/sin unscaled.)
// Header-only and plain data so that a kernel takes a Rope by value.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define OOMB_ROPE_HD __host__ __device__
#else
#define OOMB_ROPE_HD
#endif

namespace oomb::models {

struct Rope {
  double theta = 10000.0;
  // llama3 scaling, active when original_max_position > 0 (validated by rope_of / model_from_json).
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 0.0;

  Rope() = default;
  OOMB_ROPE_HD Rope(double t) : theta(t) {}  // NOLINT(google-explicit-constructor): plain RoPE
  OOMB_ROPE_HD bool llama3() const { return original_max_position > 0.0; }
};

OOMB_ROPE_HD inline double rope_inv_freq(const Rope& r, int64_t i, int64_t head_dim) {
  const double f = pow(r.theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  if (!r.llama3()) return f;
  const double wavelen = 2.0 * 3.14159265358979323846 / f;
  if (wavelen < r.original_max_position / r.high_freq_factor) return f;       // high frequency: kept
  if (wavelen > r.original_max_position / r.low_freq_factor) return f / r.factor;  // low: divided
  if (r.high_freq_factor == r.low_freq_factor) return f;  // no band between: the boundary is kept
  const double s = (r.original_max_position / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1.0 - s) * f / r.factor + s * f;
}

}  // namespace oomb::models
