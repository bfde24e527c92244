// The CUDA kernels' launch arithmetic (executor/cuda/launch_shape.h, plain C++) on the host, with
// shapes past the grid's 65,535-block limit in y: every grid stays inside the limits and the
// kernels' grid-stride loops, emulated here block by block, visit every row (or query page x group)
// exactly once.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "executor/cuda/launch_shape.h"

namespace oomb::executor::cuda {
namespace {

constexpr int64_t kThreads = 256, kRowsPerBlock = 64;  // rmsnorm_dw and column_sum

TEST(LaunchShape, ColumnReductionGridStaysInsideTheLimitsAndCoversEveryRowOnce) {
  struct Shape {
    int64_t rows, cols;
  };
  // Edge sizes, the last row count with 65,535 tiles, q/k-norm at 64K tokens x 64 heads, and more.
  const Shape shapes[] = {{1, 1}, {3, 7}, {17, 3584}, {4194240, 128}, {4194304, 128}, {3 * 4194304 + 17, 5}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::to_string(s.rows) + " x " + std::to_string(s.cols));
    const GridShape g = column_reduce_grid(s.rows, s.cols, kThreads, kRowsPerBlock);
    EXPECT_GE(g.x, 1);
    EXPECT_LE(g.x, kMaxGridX);
    EXPECT_GE(g.x * kThreads, s.cols);
    EXPECT_GE(g.y, 1);
    EXPECT_LE(g.y, kMaxGridYZ);
    std::vector<uint8_t> seen(static_cast<size_t>(s.rows), 0);
    const int64_t tiles = row_tiles(s.rows, kRowsPerBlock);
    for (int64_t by = 0; by < g.y; ++by)
      for (int64_t tile = by; tile < tiles; tile += g.y) {
        const RowRange r = row_tile(tile, kRowsPerBlock, s.rows);
        for (int64_t row = r.begin; row < r.end; ++row) ++seen[static_cast<size_t>(row)];
      }
    int64_t wrong = 0;
    for (uint8_t v : seen) wrong += v != 1;
    EXPECT_EQ(wrong, 0);
  }
  EXPECT_EQ(column_reduce_grid(4194240, 1, kThreads, kRowsPerBlock).y, 65535);  // no cap needed yet
  EXPECT_EQ(column_reduce_grid(4194304, 1, kThreads, kRowsPerBlock).y, 65535);  // capped
}

TEST(LaunchShape, PageScoresGridStaysInsideTheLimitsAndCoversEveryQueryPageAndGroupOnce) {
  struct Shape {
    int64_t prefix_pages, query_pages, groups;
  };
  // 8,192 query pages x 8 KV heads (64K-token chunk, 8-token pages, per-head selection) = 65,536.
  const Shape shapes[] = {{1, 1, 1}, {65, 3, 7}, {4096, 8192, 8}, {100, 70001, 1}, {7, 65535, 1}};
  for (const Shape& s : shapes) {
    SCOPED_TRACE(std::to_string(s.query_pages) + " x " + std::to_string(s.groups));
    const GridShape g = page_scores_grid(s.prefix_pages, 64, s.query_pages, s.groups);
    EXPECT_EQ(g.x, (s.prefix_pages + 63) / 64);
    EXPECT_LE(g.y, kMaxGridYZ);
    const int64_t n = s.query_pages * s.groups;
    std::vector<uint8_t> seen(static_cast<size_t>(n), 0);
    for (int64_t by = 0; by < g.y; ++by)
      for (int64_t jg = by; jg < n; jg += g.y) ++seen[static_cast<size_t>(jg)];
    int64_t wrong = 0;
    for (uint8_t v : seen) wrong += v != 1;
    EXPECT_EQ(wrong, 0);
  }
}

TEST(LaunchShape, CappedBlocksRoundsUpAndClamps) {
  EXPECT_EQ(capped_blocks(0, 64, 10), 1);
  EXPECT_EQ(capped_blocks(1, 64, 10), 1);
  EXPECT_EQ(capped_blocks(64, 64, 10), 1);
  EXPECT_EQ(capped_blocks(65, 64, 10), 2);
  EXPECT_EQ(capped_blocks(641, 64, 10), 10);
}

}  // namespace
}  // namespace oomb::executor::cuda
