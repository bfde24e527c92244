#pragma once
// Blocked ("flash") attention kernels of the CPU backend for one query page and one KV-head group:
// the scores of a key block at a time with an online softmax (forward) or the saved log-sum-exp
// (backward), so the score block stays in cache. Plain loops written for auto-vectorisation and
// compiled twice (x86-64-v3 with AVX2/FMA, and the baseline) with runtime dispatch, so the
// library runs on any x86-64 and fast where it can; no Eigen inside (no mixed-ISA templates).
#include <cstdint>

namespace oomb::executor::cpu {

// Key layout prepared by the caller for one KV head: the chunk's attended keys ("gathered rows":
// union pages, then the chunk's own rows), both key-major [row][hd] and dim-major [hd][ld].
struct FlashKeys {
  int64_t hd = 0;
  int64_t ld = 0;                // row stride of the dim-major arrays (>= rows + kFlashPad)
  const float* k = nullptr;      // [rows][hd]
  const float* kt = nullptr;     // [hd][ld]
  const float* v = nullptr;      // [rows][hd]
  const float* vt = nullptr;     // [hd][ld] (backward only)
  const int64_t* seg_start = nullptr;  // attended segments of gathered rows, in order
  const int64_t* seg_len = nullptr;
  int64_t segs = 0;
  int64_t own_start = 0;  // gathered row of own token 0 (causal mask applies from here on)
};

// Query rows of all heads of the group for one query page: row h * nq + i is head h, chunk row
// q_first + i. Contiguous [rows][hd]; q is pre-scaled by 1/sqrt(hd).
struct FlashRows {
  int64_t nq = 0, heads = 0;
  int64_t q_first = 0;
  const float* q = nullptr;
  // A local layer's mask (null: none): query row i (< nq, every head alike) attends gathered rows
  // from first[i] on.
  const int64_t* first = nullptr;
};

constexpr int64_t kFlashPad = 16;       // dim-major arrays are readable this far past their rows
constexpr int64_t kFlashBlock = 128;    // keys per block
int64_t flash_scratch_floats(const FlashRows& r, int64_t head_dim);

// o [rows][hd] and lse [rows] (log-sum-exp of the scaled scores) are overwritten.
void flash_fwd(const FlashKeys& k, const FlashRows& r, float* o, float* lse, float* scratch);
// dout, o [rows][hd]; dq [rows][hd] overwritten (gradient of the unscaled q); dk, dv [rows of the
// gathered keys][hd] accumulated.
void flash_bwd(const FlashKeys& k, const FlashRows& r, const float* o, const float* lse, const float* dout,
               float* dq, float* dk, float* dv, float* scratch);

// Row kernels of the full-sequence reference (n columns per row, same dispatch): softmax over the
// allowed entries of each row of p (others 0; a row with none allowed is all 0), and the softmax
// backward dp = p * (dp - rowsum(p * dp)).
void masked_softmax_rows(float* p, const uint8_t* allowed, int64_t rows, int64_t n);
void softmax_bwd_rows(const float* p, float* dp, int64_t rows, int64_t n);

// Tests: run the baseline kernels even where the AVX2/FMA ones could run.
void flash_force_baseline(bool on);

}  // namespace oomb::executor::cpu
