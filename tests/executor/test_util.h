#pragma once
// Shared helpers of the executor tests: small models, configs, finite differences.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "executor/runtime/rng.h"
#include "models/specs.h"
#include "step/config.h"

namespace oomb::executor::test {

inline models::ModelSpec small_model(int64_t layers, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                                     int64_t hidden, bool tied, bool bias, int64_t vocab = 61, int64_t ffn = 48) {
  models::ModelSpec m;
  m.id = "test";
  m.family = "qwen2";
  m.layers = layers;
  m.hidden = hidden;
  m.q_heads = q_heads;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.ffn_hidden = ffn;
  m.vocab = vocab;
  m.tied_embeddings = tied;
  m.qkv_bias = bias;
  m.rope_theta = 10000.0;
  m.norm_eps = 1e-6;
  m.max_position = 1 << 20;
  return m;
}

// c with every storage dtype fp32 (the exact reference configuration).
inline step::Config all_fp32(step::Config c) {
  c.kv_dtype = c.kv_grad_dtype = c.param_dtype = c.param_grad_dtype = c.activation_dtype = c.loss_dtype = Dtype::fp32;
  return c;
}

inline step::Config small_config(int64_t context, int64_t chunk, int64_t page, int64_t resident) {
  step::Config c;
  c.context_tokens = context;
  c.chunk_tokens = chunk;
  c.page_tokens = page;
  c.resident_layers = resident;
  // The exactness tests compare fp32 runs (Config's defaults store bf16 pages, weights, gradients
  // and activations); bf16 tests set these explicitly.
  return all_fp32(c);
}

// c with its KV and KV-gradient pages stored as kv / grads (fp32 or bf16).
inline step::Config with_pages(step::Config c, Dtype kv, Dtype grads) {
  c.kv_dtype = kv;
  c.kv_grad_dtype = grads;
  return c;
}

inline std::vector<float> random_vec(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * static_cast<float>(r.normal());
  return v;
}

// Relative L2 error between central finite differences of f with respect to every element of x and
// the analytic gradient `grad`. The step actually taken (after rounding to fp32) is used.
inline double fd_error(std::vector<float>& x, const std::vector<float>& grad, const std::function<double()>& f,
                       float h = 1e-2f) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + h;
    const double dp = static_cast<double>(x[i]) - saved, fp = f();
    x[i] = saved - h;
    const double dm = static_cast<double>(x[i]) - saved, fm = f();
    x[i] = saved;
    const double fd = (fp - fm) / (dp - dm);
    num += (fd - grad[i]) * (fd - grad[i]);
    den += static_cast<double>(grad[i]) * grad[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

}  // namespace oomb::executor::test
