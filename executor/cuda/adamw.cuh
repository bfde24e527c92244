#pragma once
// Fused AdamW (PyTorch's fp32 formula, as executor/cpu/ops.h): decoupled weight decay where
// decay_mask != 0, the gradient times grad_scale, fp32 moments and update, every operation rounded
// exactly as the CPU reference rounds it (no fused multiply-add). param and grad fp32 or bf16
// (executor/cuda/typed.cuh); with `master` (fp32, may be null) the master weights are updated and
// param is refreshed from them, rounded once (the CPU backend's adamw + copy).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_adamw(Tensor param, float* master, ConstTensor grad, float* m, float* v, const uint8_t* decay_mask,
                  int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                  float grad_scale, cudaStream_t s);

}  // namespace oomb::executor::cuda
