#include "executor/cuda/gemm_plan.h"

#include "executor/cuda/elementwise.cuh"

namespace oomb::executor::cuda::gemm_plan {

void Operand::prepare(char*& next, cudaStream_t s) {
  if (want16) {
    if (is_bf16(t)) {
      p16 = t.data;
      ld16 = cols;
    } else {
      auto* dst = reinterpret_cast<uint16_t*>(next);
      launch_to_bf16(static_cast<const float*>(t.data), rows, cols, dst, ld8(cols), s);
      next += up(rows * ld8(cols) * 2);
      p16 = dst;
      ld16 = ld8(cols);
    }
  }
  if (want32) {
    if (is_bf16(t)) {
      auto* dst = reinterpret_cast<float*>(next);
      launch_convert(Tensor(dst), t, rows * cols, s);
      next += up(rows * cols * 4);
      p32 = dst;
    } else {
      p32 = t.data;
    }
  }
}

// Chooses the step's precision and output path (asking cuBLASLt's heuristic, cached, with the
// pointers and leading dimensions the GEMM will use) and marks the operand forms it needs.
void plan_step(Gemm& gemm, const CudaBackendOptions& opt, GemmStep& g) {
  const bool native16 = is_bf16(g.a->t) && is_bf16(g.b->t);
  const bool out16 = is_bf16(g.c);
  if (native16 || opt.gemm_precision == CudaGemmPrecision::bf16) {
    const auto has = [&](const void* c, bool c_bf16) {
      return gemm.supported(CudaGemmPrecision::bf16, g.ta, g.tb, g.m, g.n, g.k, g.a->probe16(), g.a->probe_ld16(),
                            g.b->probe16(), g.b->probe_ld16(), c, g.m, c_bf16);
    };
    // A bf16 output with a bias is never written by cuBLASLt (the bias would be a second rounding).
    const bool direct = out16 ? !g.bias && has(g.c.data, true) : has(g.c.data, false);
    if (direct || (out16 && has(kScratchAligned, false))) {
      g.precision = CudaGemmPrecision::bf16;
      g.via_scratch = !direct;
      g.a->want16 = g.b->want16 = true;
      return;
    }
  }
  g.precision = opt.gemm_precision == CudaGemmPrecision::tf32 ? CudaGemmPrecision::tf32 : CudaGemmPrecision::fp32;
  g.via_scratch = out16;
  g.a->want32 = g.b->want32 = true;
}

// Runs the planned steps: the operand conversions and output scratches carved from one op scratch,
// then each GEMM, its output store and (fp32 output) its bias.
void run_steps(Gemm& gemm, int64_t* calls, std::vector<GemmStep>& steps, std::vector<Operand*> operands,
               char* scratch, cudaStream_t s) {
  char* next = scratch;
  for (Operand* o : operands) o->prepare(next, s);
  for (GemmStep& g : steps) {
    if (g.via_scratch) {
      g.scratch = reinterpret_cast<float*>(next);
      next += g.scratch_bytes();
    }
  }
  for (GemmStep& g : steps) {
    const bool b16 = g.precision == CudaGemmPrecision::bf16;
    const void* A = b16 ? g.a->p16 : g.a->p32;
    const void* B = b16 ? g.b->p16 : g.b->p32;
    const int64_t lda = b16 ? g.a->ld16 : g.a->cols, ldb = b16 ? g.b->ld16 : g.b->cols;
    if (g.via_scratch) {
      gemm.matmul(g.precision, g.ta, g.tb, g.m, g.n, g.k, A, lda, B, ldb, 0.0f, g.scratch, g.m, s, false, g.alpha);
      launch_store_f32(g.c, g.scratch, g.n, g.m, g.bias, g.accumulate, s);
    } else {
      gemm.matmul(g.precision, g.ta, g.tb, g.m, g.n, g.k, A, lda, B, ldb, g.accumulate ? 1.0f : 0.0f, g.c.data, g.m, s,
                  is_bf16(g.c), g.alpha);
      if (g.bias) launch_add_bias(g.c.f32(), g.n, g.m, g.bias, s);
    }
    ++calls[static_cast<int>(g.precision)];
  }
}

int64_t steps_scratch_bytes(const std::vector<GemmStep>& steps, const std::vector<Operand*>& operands) {
  int64_t bytes = 0;
  for (const Operand* o : operands) bytes += o->scratch_bytes();
  for (const GemmStep& g : steps) bytes += g.scratch_bytes();
  return bytes;
}

// The three GEMM shapes of a projection y = x W^T, x [rows, in], W [out, in] (linear_* and the
// LoRA ops, whose A and B are such projections).
// y[rows, out] (+)= alpha x W^T, column-major y^T [out, rows] = W x^T.
GemmStep output_step(Operand& w, Operand& x, int64_t rows, int64_t in, int64_t out, Tensor y, bool accumulate,
                     float alpha) {
  GemmStep g;
  g.ta = true;
  g.m = out;
  g.n = rows;
  g.k = in;
  g.a = &w;
  g.b = &x;
  g.c = y;
  g.accumulate = accumulate;
  g.alpha = alpha;
  return g;
}

// dx[rows, in] (+)= alpha dy W, column-major dx^T [in, rows] = W^T [in, out] dy^T [out, rows].
GemmStep input_grad_step(Operand& w, Operand& dy, int64_t rows, int64_t in, int64_t out, Tensor dx, bool accumulate,
                         float alpha) {
  GemmStep g;
  g.m = in;
  g.n = rows;
  g.k = out;
  g.a = &w;
  g.b = &dy;
  g.c = dx;
  g.accumulate = accumulate;
  g.alpha = alpha;
  return g;
}

// dW[out, in] += dy^T x, column-major dW^T [in, out] += x^T [in, rows] dy [rows, out].
GemmStep weight_grad_step(Operand& x, Operand& dy, int64_t rows, int64_t in, int64_t out, Tensor dw) {
  GemmStep g;
  g.tb = true;
  g.m = in;
  g.n = out;
  g.k = rows;
  g.a = &x;
  g.b = &dy;
  g.c = dw;
  g.accumulate = true;
  return g;
}

// linear_fwd's GEMM, planned: y[rows, out] = x W^T (+ b). Its op scratch is phase.scratch_bytes().
void plan_linear_fwd(Gemm& gemm, const CudaBackendOptions& opt, Operand& wo, Operand& xo, int64_t rows, int64_t in,
                     int64_t out, Tensor y, ConstTensor b, GemmPhase& phase) {
  phase.steps = {output_step(wo, xo, rows, in, out, y, false, 1.0f)};
  phase.steps[0].bias = b;
  phase.operands = {&wo, &xo};
  phase.plan(gemm, opt);
}

// linear_bwd's GEMMs, planned: dx (+)= dy W, dW += dy^T x (those asked for), dy read once for both.
// Its op scratch: phase.scratch_bytes() + linear_bwd_db_bytes (a bf16 bias gradient's sums).
void plan_linear_bwd(Gemm& gemm, const CudaBackendOptions& opt, Operand& wo, Operand& xo, Operand& dyo, int64_t rows,
                     int64_t in, int64_t out, Tensor dx, bool accumulate_dx, Tensor dw_acc, GemmPhase& phase) {
  phase.steps.clear();
  if (dx && in > 0) phase.steps.push_back(input_grad_step(wo, dyo, rows, in, out, dx, accumulate_dx, 1.0f));
  if (dw_acc && in > 0) phase.steps.push_back(weight_grad_step(xo, dyo, rows, in, out, dw_acc));
  phase.operands = {&dyo, &wo, &xo};
  phase.plan(gemm, opt);
}
// The bias gradient sums dy as stored (never a bf16 copy of an fp32 dy); a bf16 db gets the column
// sums in an fp32 scratch and one rounding.
int64_t linear_bwd_db_bytes(bool db16, int64_t out) { return db16 ? up(out * 4) : 0; }

// lora_fwd's phases: u [rows, rank] = scale x A^T, then y [rows, out] += u B^T.
void lora_fwd_phases(Operand& ao, Operand& xo, Operand& bo, Operand& uo, int64_t rows, int64_t in, int64_t rank,
                     int64_t out, float scale, Tensor u, Tensor y, GemmPhase& through_a, GemmPhase& through_b) {
  through_a.steps.push_back(output_step(ao, xo, rows, in, rank, u, false, scale));
  through_a.operands = {&ao, &xo};
  if (out > 0) through_b.steps.push_back(output_step(bo, uo, rows, rank, out, y, true, 1.0f));
  through_b.operands = {&bo, &uo};
}

// lora_bwd's phases: the B projection's backward (dB += dy^T u, du = scale dy B: dy read once for
// both), then the A projection's on du as stored (dA += du^T x, dx += du A).
void lora_bwd_phases(Operand& dyo, Operand& bo, Operand& uo, Operand& duo, Operand& ao, Operand& xo, int64_t rows,
                     int64_t in, int64_t rank, int64_t out, float scale, Tensor du, Tensor dx_acc, Tensor da_acc,
                     Tensor db_acc, GemmPhase& through_b, GemmPhase& through_a) {
  through_b.steps.push_back(weight_grad_step(uo, dyo, rows, rank, out, db_acc));
  through_b.steps.push_back(input_grad_step(bo, dyo, rows, rank, out, du, false, scale));
  through_b.operands = {&dyo, &bo, &uo};
  if (in > 0) through_a.steps.push_back(weight_grad_step(xo, duo, rows, in, rank, da_acc));
  if (dx_acc && in > 0) through_a.steps.push_back(input_grad_step(ao, duo, rows, in, rank, dx_acc, true, 1.0f));
  through_a.operands = {&duo, &ao, &xo};
}

}  // namespace oomb::executor::cuda::gemm_plan
