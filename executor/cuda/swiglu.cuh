#pragma once
// out = silu(gate) * up, and its backward (fp32 math, expf; operands fp32 or bf16, executor/cuda/typed.cuh);
// limit > 0: gpt-oss's clamped variant (Backend::swiglu_fwd).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

void launch_swiglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out, float limit, cudaStream_t s);
void launch_swiglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup,
                       float limit, cudaStream_t s);
// out = gelu_tanh(gate) * up and its backward (Backend::geglu_fwd).
void launch_geglu_fwd(ConstTensor gate, ConstTensor up, int64_t n, Tensor out, cudaStream_t s);
void launch_geglu_bwd(ConstTensor gate, ConstTensor up, ConstTensor dout, int64_t n, Tensor dgate, Tensor dup,
                      cudaStream_t s);

}  // namespace oomb::executor::cuda
