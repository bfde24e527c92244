#pragma once
// Layout constants of the CUDA backend's scratch, plain C++17 with no other includes so that the
// kernels' translation units (executor/cuda/*.cu) read the same formulas as the buffer table
// (step/cuda_scratch.h).
#include <cstdint>

namespace oomb::step::cuda_scratch {

inline constexpr int64_t kAlign = 256;  // every scratch sub-array starts at a multiple
inline constexpr int64_t up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
inline constexpr int64_t ld8(int64_t cols) { return (cols + 7) / 8 * 8; }  // bf16 GEMM operand rows

// cuBLASLt's workspace: one allocation for the run.
inline constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;

// The selection workspace (SelectWorkspace in executor/cuda/selection.cuh carves it): offsets of
// the summed queries [rows, kv_heads, head_dim] fp32, the softmax max and sum [rows, kv_heads] fp32,
// the page scores [qpages x groups, prefix_pages] double, the selected ids [qpages x groups, budget]
// int32 and the summaries staged on the device [prefix_pages, kv_heads x head_dim] fp32.
struct SelectLayout {
  int64_t qsum = 0, norm_m = 0, norm_l = 0, scores = 0, selected = 0, staged = 0;  // offsets
  int64_t bytes = 0;
};
inline SelectLayout select_layout(int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t qpages, int64_t groups,
                                  int64_t prefix_pages, int64_t budget) {
  SelectLayout l;
  int64_t at = 0;
  auto take = [&](int64_t& off, int64_t bytes) {
    off = at;
    at += up(bytes);
  };
  take(l.qsum, rows * kv_heads * head_dim * 4);
  take(l.norm_m, rows * kv_heads * 4);
  take(l.norm_l, rows * kv_heads * 4);
  take(l.scores, qpages * groups * prefix_pages * 8);
  take(l.selected, qpages * groups * budget * 4);
  take(l.staged, prefix_pages * kv_heads * head_dim * 4);
  l.bytes = at;
  return l;
}

}  // namespace oomb::step::cuda_scratch
