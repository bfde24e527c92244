#pragma once
// What each backend's allocator holds beyond the buffers of a buffer table: the reserved measure's
// allocator rows (docs/model.md, "Reserved"). The formulas live here; the table prices them and
// the executor places its buffers with them.
//   CPU backend (executor/cpu): a caching allocator per tier that rounds every block up to 64 bytes
//     and never keeps more freed blocks than the tier's high-water in use, so what it holds at most
//     is the buffers' peak (their sizes are multiples of 64 bytes wherever a row's dimensions are
//     multiples of 16 elements; tests/executor/memory_fidelity_test.cpp measures it). No row.
//   CUDA backend (executor/cuda): one device block, reserved before the run's first buffer, laid out
//     by the table (cuda_arena_layout): every row of the executor's device buffers owns a range of
//     it, rows that are alive in a common phase never share addresses, rows that are not may; a
//     row's buffers are placed first fit inside its range (executor/runtime/arena.h). First fit over
//     the whole block instead left a phase's freed layer buffers as holes that a later, larger
//     buffer (the logits) could not use. The block is the layout plus a slack for the 256-byte
//     rounding of buffers whose sizes are not multiples of it (they spill out of their range into
//     the slack), in cudaMalloc's 2 MiB units. The backend's own scratch (cuBLASLt workspace, op
//     scratch) is allocated apart; the CUDA context is the runtime reserve.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace oomb::step {
struct BufferRow;
struct RowSize;
}

namespace oomb::step::allocator {

inline constexpr int64_t kCpuAlignmentBytes = 64;
inline constexpr int64_t kCudaArenaAlignmentBytes = 256;
// 8 MiB: 256 bytes of rounding for 32,768 live buffers (a 28-layer plan that keeps every layer's
// activations holds about 700).
inline constexpr int64_t kCudaArenaSlackBytes = int64_t{8} << 20;
inline constexpr int64_t kCudaMallocGranularityBytes = int64_t{2} << 20;

// Is the row one of the buffers the executor allocates from the CUDA arena? (Device rows except
// the reserved measure's own and the backend's scratch.)
bool in_cuda_arena(const BufferRow& r);

struct RowRange {
  std::string row;
  int64_t offset_bytes = 0, bytes = 0;  // offset 256-byte aligned; bytes rounded up to 256
};
struct ArenaLayout {
  int64_t buffer_peak_bytes = 0;  // the arena rows' peak over phases (what they hold at most)
  int64_t layout_bytes = 0;       // the end of the highest range (>= buffer_peak_bytes)
  int64_t block_bytes = 0;        // layout + slack, rounded up to 2 MiB: what the run reserves
  std::vector<RowRange> ranges;   // with ranges = true only
};
// The layout of the table's arena rows: rows with the same phases are a group (alive together,
// laid end to end); groups are placed largest first at the lowest offset where they overlap no
// placed group they share a phase with.
ArenaLayout cuda_arena_layout(const std::vector<BufferRow>& rows, bool ranges);
// The same layout from the rows' figures (step::table_sizes, the simulator's fast path); no ranges.
ArenaLayout cuda_arena_layout(std::span<const RowSize> rows);

}  // namespace oomb::step::allocator
