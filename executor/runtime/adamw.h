#pragma once
// AdamW's per-step scalars, computed once in double and rounded to fp32, so that the CPU reference
// (executor/cpu/ops.h) and the CUDA kernel (executor/cuda/adamw.cu) update with the same values.
// The update itself is PyTorch's torch.optim.AdamW in fp32: for each element, param *= decay where
// decayed; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g; param -= step_size (m / (sqrt(v) /
// bc2_sqrt + eps)).
#include <cmath>
#include <cstdint>

namespace oomb::executor {

struct AdamWConstants {
  float decay = 1;      // 1 - lr x weight_decay
  float step_size = 0;  // lr / (1 - beta1^step)
  float bc2_sqrt = 1;   // sqrt(1 - beta2^step)
};

inline AdamWConstants adamw_constants(float lr, float beta1, float beta2, float weight_decay, int64_t step) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  AdamWConstants k;
  k.decay = static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(weight_decay));
  k.step_size = static_cast<float>(static_cast<double>(lr) / bc1);
  k.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  return k;
}

}  // namespace oomb::executor
