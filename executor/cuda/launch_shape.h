#pragma once
// Launch arithmetic of the kernels whose grid dimension grows with the problem, in plain C++ (no
// CUDA header) so that it is unit-tested on the host with shapes past the hardware's limits
// (tests/executor/launch_shape_test.cpp). A grid's y and z are at most 65,535 blocks (x: 2^31 - 1):
// a dimension that can exceed its limit is capped here and its kernel strides over the rest
// (tile = blockIdx.y; tile < tiles; tile += gridDim.y). The kernels pass the device's limit
// (common.cuh: grid_yz_limit, 65,535 on a GPU, lower on the emulated device when a test asks).
#include <algorithm>
#include <cstdint>

#ifdef __CUDACC__
#define OOMB_HOST_DEVICE __host__ __device__
#else
#define OOMB_HOST_DEVICE
#endif

namespace oomb::executor::cuda {

inline constexpr int64_t kMaxGridX = 2147483647;
inline constexpr int64_t kMaxGridYZ = 65535;

// ceil(n / per_block) blocks, at least 1, at most cap.
inline int64_t capped_blocks(int64_t n, int64_t per_block, int64_t cap) {
  const int64_t want = n <= 0 ? 1 : (n + per_block - 1) / per_block;
  return std::clamp<int64_t>(want, 1, cap);
}

struct GridShape {
  int64_t x = 1, y = 1;
};

// Column reductions (rmsnorm_dw, column_sum): x = column tiles of `threads` columns, y = row tiles
// of rows_per_block rows (one atomic per column and row tile). The row tiles pass 65,535 above
// 4,194,240 rows with 64-row tiles (q/k-norm at 64K tokens x 64 heads is 4,194,304 rows), so y is
// capped and the kernel strides over row tiles.
inline GridShape column_reduce_grid(int64_t rows, int64_t cols, int64_t threads, int64_t rows_per_block,
                                    int64_t yz_limit = kMaxGridYZ) {
  return {capped_blocks(cols, threads, kMaxGridX), capped_blocks(rows, rows_per_block, yz_limit)};
}

// Row tiles of rows_per_block rows over `rows` rows, and the rows [begin, end) of one (the last
// may be short).
OOMB_HOST_DEVICE inline int64_t row_tiles(int64_t rows, int64_t rows_per_block) {
  return (rows + rows_per_block - 1) / rows_per_block;
}
struct RowRange {
  int64_t begin = 0, end = 0;
};
OOMB_HOST_DEVICE inline RowRange row_tile(int64_t tile, int64_t rows_per_block, int64_t rows) {
  const int64_t b = tile * rows_per_block, e = b + rows_per_block;
  return {b, e < rows ? e : rows};
}

// Page selection scores: x = tiles of tile_pages prefix pages, y = query pages x groups (KV heads
// for the per-head rule). Small pages at long chunks pass 65,535 (e.g. 8,192 query pages x 8 KV
// heads), so y is capped and the kernel strides over (query page, group).
inline GridShape page_scores_grid(int64_t prefix_pages, int64_t tile_pages, int64_t query_pages, int64_t groups,
                                  int64_t yz_limit = kMaxGridYZ) {
  return {capped_blocks(prefix_pages, tile_pages, kMaxGridX), capped_blocks(query_pages * groups, 1, yz_limit)};
}

}  // namespace oomb::executor::cuda
