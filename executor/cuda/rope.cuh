#pragma once
// Rotate-half RoPE in place (HF convention, as executor/cpu/ops.h): angles in double, rounded
// once to fp32 cos/sin; backward is the inverse rotation. Frequencies: models/rope.h (plain or
// llama3-scaled).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"
#include "models/rope.h"

namespace oomb::executor::cuda {

// sign +1: forward, -1: backward. x fp32 or bf16 (loaded, rotated in fp32, rounded once).
void launch_rope(Tensor x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope, float sign,
                 cudaStream_t s);

}  // namespace oomb::executor::cuda
