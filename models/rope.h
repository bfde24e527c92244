#pragma once
// Rotary position embedding frequencies, shared by the CPU ops, the CUDA kernel and the tests.
//
// Plain RoPE: inv_freq_i = theta^(-2i/d) for i < d/2. Llama 3.1/3.2 (rope_scaling rope_type
// "llama3", Hugging Face's _compute_llama3_parameters): with L = original_max_position_embeddings
// and wavelength w_i = 2 pi / inv_freq_i, a frequency whose wavelength is longer than
// L / low_freq_factor is divided by factor, one shorter than L / high_freq_factor is kept, and in
// between it is interpolated: s = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor),
// inv_freq_i' = (1 - s) inv_freq_i / factor + s inv_freq_i. (llama3 leaves cos/sin unscaled.)
// YaRN (rope_type "yarn", Hugging Face's _compute_yarn_parameters): with L the original length,
// the correction dims c(b) = d ln(L / (2 pi b)) / (2 ln theta) for beta_fast and beta_slow (floored
// and ceiled unless truncate is false, held in [0, d - 1]), ramp_i = clamp((i - c_fast) / (c_slow -
// c_fast), 0, 1): inv_freq_i' = inv_freq_i / factor x ramp_i + inv_freq_i x (1 - ramp_i); cos and sin
// are multiplied by attention_factor (default 0.1 ln(factor) + 1), so q and k are scaled by it.
// Linear (rope_type "linear", Hugging Face's _compute_linear_scaling_rope_parameters; position
// interpolation): every inv_freq_i divided by factor (positions compressed by it).
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
  // YaRN, active when yarn_original_max_position > 0 (factor above is its factor too).
  double yarn_original_max_position = 0.0;
  double beta_fast = 32.0, beta_slow = 1.0, attention_factor = 1.0;
  bool truncate = true;
  bool linear = false;  // linear scaling by factor

  Rope() = default;
  OOMB_ROPE_HD Rope(double t) : theta(t) {}  // NOLINT(google-explicit-constructor): plain RoPE
  OOMB_ROPE_HD bool llama3() const { return original_max_position > 0.0; }
  OOMB_ROPE_HD bool yarn() const { return yarn_original_max_position > 0.0; }
};

// What cos and sin are multiplied by (YaRN's attention factor; 1 otherwise).
OOMB_ROPE_HD inline double rope_scale(const Rope& r) { return r.yarn() ? r.attention_factor : 1.0; }

OOMB_ROPE_HD inline double rope_inv_freq(const Rope& r, int64_t i, int64_t head_dim) {
  const double f = pow(r.theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  if (r.linear) return f / r.factor;
  if (r.yarn()) {
    const double d = static_cast<double>(head_dim), two_pi = 2.0 * 3.14159265358979323846;
    auto correction = [&](double rotations) {
      return d * log(r.yarn_original_max_position / (rotations * two_pi)) / (2.0 * log(r.theta));
    };
    double lo = correction(r.beta_fast), hi = correction(r.beta_slow);
    if (r.truncate) lo = floor(lo), hi = ceil(hi);
    lo = lo > 0.0 ? lo : 0.0;
    hi = hi < d - 1.0 ? hi : d - 1.0;
    if (lo == hi) hi += 0.001;
    double ramp = (static_cast<double>(i) - lo) / (hi - lo);
    ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
    return f / r.factor * ramp + f * (1.0 - ramp);
  }
  if (!r.llama3()) return f;
  const double wavelen = 2.0 * 3.14159265358979323846 / f;
  if (wavelen < r.original_max_position / r.high_freq_factor) return f;       // high frequency: kept
  if (wavelen > r.original_max_position / r.low_freq_factor) return f / r.factor;  // low: divided
  if (r.high_freq_factor == r.low_freq_factor) return f;  // no band between: the boundary is kept
  const double s = (r.original_max_position / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1.0 - s) * f / r.factor + s * f;
}

}  // namespace oomb::models
