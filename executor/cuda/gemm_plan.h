#pragma once
// The CUDA backend's GEMM planning (cuda_backend.cpp's linear and LoRA ops; issue 40, part 6: one
// family per file): each GEMM's operands in the forms it reads, its precision chosen against
// cuBLASLt's heuristic, and the op scratch the conversions and fp32 outputs take, carved in stream
// order. Also what the Engine asks before the first step (CudaBackend::planned_op_scratch plans a
// call without running it). Internal to executor/cuda.
//
// A row-major [rows, cols] matrix with row stride ld is a column-major [cols, rows] one with leading
// dimension ld. Each GEMM runs in one precision:
//  - bf16 when both its operands are stored as bf16 (whatever gemm_precision: bf16 products are exact
//    in fp32 and accumulate in fp32, so this is the fp32 GEMM of the stored values up to summation
//    order), read in place, no conversion; or when gemm_precision is bf16, with the fp32 operands
//    converted (launch_to_bf16) into the op scratch, rows padded to a multiple of 8 elements (16 bytes)
//    and every copy 256-byte aligned, so they meet cuBLASLt's alignment for its fast kernels;
//  - otherwise fp32 or tf32 (gemm_precision), with bf16 operands converted to fp32 (exact) into the
//    op scratch; also when cuBLASLt offers no bf16 algorithm for the shape and alignment.
// The output is written by cuBLASLt in its own dtype where it can (fp32 always; bf16 with bf16
// operands, beta = 1 where the op accumulates: D = A B + C formed in fp32 and rounded once, see
// gemm.h), else cuBLASLt writes an fp32 scratch and launch_store_f32 adds the stored value and the
// bias in fp32 and rounds once. A bias of an fp32 output is added by a kernel after the GEMM, as before.
// The scratch is reused by the next op in stream order, like every op's scratch.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/gemm.h"
#include "step/cuda_layout.h"

namespace oomb::executor::cuda::gemm_plan {

using step::cuda_scratch::up;

inline bool is_bf16(ConstTensor t) { return t.dtype == DType::bf16; }
inline int64_t ld8(int64_t cols) { return (cols + 7) / 8 * 8; }

// Stands for a pointer into the op scratch while a GEMM's algorithm is looked up before the scratch
// is carved (every scratch sub-array is 256-byte aligned).
inline const void* const kScratchAligned = reinterpret_cast<const void*>(uintptr_t{256});

// A GEMM operand: the caller's row-major [rows, cols] matrix in its storage dtype and, once
// prepare()d, its bf16 and / or fp32 forms (the storage itself or a converted copy in the scratch).
struct Operand {
  ConstTensor t;
  int64_t rows = 0, cols = 0;
  bool want16 = false, want32 = false;  // a GEMM reads it as bf16 / fp32
  const void* p16 = nullptr;
  int64_t ld16 = 0;
  const void* p32 = nullptr;

  Operand(ConstTensor t_, int64_t r, int64_t c) : t(t_), rows(r), cols(c) {}
  bool needs_copy16() const { return want16 && !is_bf16(t); }
  bool needs_copy32() const { return want32 && is_bf16(t); }
  // The bf16 form's pointer and leading dimension as the GEMM will see them.
  const void* probe16() const { return is_bf16(t) ? t.data : kScratchAligned; }
  int64_t probe_ld16() const { return is_bf16(t) ? cols : ld8(cols); }
  const void* probe32() const { return is_bf16(t) ? kScratchAligned : t.data; }
  int64_t scratch_bytes() const {
    return (needs_copy16() ? up(rows * ld8(cols) * 2) : 0) + (needs_copy32() ? up(rows * cols * 4) : 0);
  }
  // Converts what is needed into the scratch at *next (advanced).
  void prepare(char*& next, cudaStream_t s);
};

// One GEMM of an op: column-major C[m, n] (+)= op(A) op(B), C the caller's output (row-major
// [n, m], contiguous) of either dtype; bias (forward only) added to every row.
struct GemmStep {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  Operand* a = nullptr;
  Operand* b = nullptr;
  Tensor c;
  bool accumulate = false;
  ConstTensor bias;
  // Scales the product in cuBLASLt, before C is added and the output rounded (the LoRA ops' scale:
  // one rounding of a bf16 output, where a scale after the store would round it twice).
  float alpha = 1.0f;
  // Chosen by plan_step:
  CudaGemmPrecision precision = CudaGemmPrecision::fp32;
  bool via_scratch = false;  // cuBLASLt writes an fp32 scratch, launch_store_f32 the output
  float* scratch = nullptr;
  int64_t scratch_bytes() const { return via_scratch ? up(m * n * 4) : 0; }
};

// Chooses the step's precision and output path (asking cuBLASLt's heuristic, cached, with the
// pointers and leading dimensions the GEMM will use) and marks the operand forms it needs.
void plan_step(Gemm& gemm, const CudaBackendOptions& opt, GemmStep& g);

// Runs the planned steps: the operand conversions and output scratches carved from one op scratch,
// then each GEMM, its output store and (fp32 output) its bias.
void run_steps(Gemm& gemm, int64_t* calls, std::vector<GemmStep>& steps, std::vector<Operand*> operands,
               char* scratch, cudaStream_t s);

int64_t steps_scratch_bytes(const std::vector<GemmStep>& steps, const std::vector<Operand*>& operands);

// One phase of an op: GEMM steps whose operands are all ready when the phase starts (their copies
// are made first, run_steps), planned against cuBLASLt's heuristic.
struct GemmPhase {
  std::vector<GemmStep> steps;
  std::vector<Operand*> operands;
  void plan(Gemm& gemm, const CudaBackendOptions& opt) {
    for (GemmStep& g : steps) plan_step(gemm, opt, g);
  }
  int64_t scratch_bytes() const { return steps_scratch_bytes(steps, operands); }
};

// The three GEMM shapes of a projection y = x W^T, x [rows, in], W [out, in] (linear_* and the
// LoRA ops, whose A and B are such projections).
// y[rows, out] (+)= alpha x W^T, column-major y^T [out, rows] = W x^T.
GemmStep output_step(Operand& w, Operand& x, int64_t rows, int64_t in, int64_t out, Tensor y, bool accumulate,
                     float alpha);

// dx[rows, in] (+)= alpha dy W, column-major dx^T [in, rows] = W^T [in, out] dy^T [out, rows].
GemmStep input_grad_step(Operand& w, Operand& dy, int64_t rows, int64_t in, int64_t out, Tensor dx, bool accumulate,
                         float alpha);

// dW[out, in] += dy^T x, column-major dW^T [in, out] += x^T [in, rows] dy [rows, out].
GemmStep weight_grad_step(Operand& x, Operand& dy, int64_t rows, int64_t in, int64_t out, Tensor dw);

// linear_fwd's GEMM, planned: y[rows, out] = x W^T (+ b). Its op scratch is phase.scratch_bytes().
void plan_linear_fwd(Gemm& gemm, const CudaBackendOptions& opt, Operand& wo, Operand& xo, int64_t rows, int64_t in,
                     int64_t out, Tensor y, ConstTensor b, GemmPhase& phase);

// linear_bwd's GEMMs, planned: dx (+)= dy W, dW += dy^T x (those asked for), dy read once for both.
// Its op scratch: phase.scratch_bytes() + linear_bwd_db_bytes (a bf16 bias gradient's sums).
void plan_linear_bwd(Gemm& gemm, const CudaBackendOptions& opt, Operand& wo, Operand& xo, Operand& dyo, int64_t rows,
                     int64_t in, int64_t out, Tensor dx, bool accumulate_dx, Tensor dw_acc, GemmPhase& phase);

// The bias gradient sums dy as stored (never a bf16 copy of an fp32 dy); a bf16 db gets the column
// sums in an fp32 scratch and one rounding.
int64_t linear_bwd_db_bytes(bool db16, int64_t out);

// Plans both phases, carves one scratch (scratch(bytes): the op's) for the larger and runs them in order.
template <class Scratch>
void run_phases(Gemm& gemm, const CudaBackendOptions& opt, int64_t* calls, GemmPhase& first, GemmPhase& second,
                Scratch&& scratch, cudaStream_t s) {
  first.plan(gemm, opt);
  second.plan(gemm, opt);
  const int64_t bytes = std::max(first.scratch_bytes(), second.scratch_bytes());
  char* ws = bytes > 0 ? scratch(bytes) : nullptr;
  run_steps(gemm, calls, first.steps, first.operands, ws, s);
  run_steps(gemm, calls, second.steps, second.operands, ws, s);  // after the first in stream order
}

// lora_fwd's phases: u [rows, rank] = scale x A^T, then y [rows, out] += u B^T.
void lora_fwd_phases(Operand& ao, Operand& xo, Operand& bo, Operand& uo, int64_t rows, int64_t in, int64_t rank,
                     int64_t out, float scale, Tensor u, Tensor y, GemmPhase& through_a, GemmPhase& through_b);

// lora_bwd's phases: the B projection's backward (dB += dy^T u, du = scale dy B: dy read once for
// both), then the A projection's on du as stored (dA += du^T x, dx += du A).
void lora_bwd_phases(Operand& dyo, Operand& bo, Operand& uo, Operand& duo, Operand& ao, Operand& xo, int64_t rows,
                     int64_t in, int64_t rank, int64_t out, float scale, Tensor du, Tensor dx_acc, Tensor da_acc,
                     Tensor db_acc, GemmPhase& through_b, GemmPhase& through_a);

}  // namespace oomb::executor::cuda::gemm_plan
