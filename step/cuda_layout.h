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

// The CUDA backend's pinned host buffers (host rows of the table, backend_scratch): the staging
// ring that uploads go through (slots x slot bytes), the read-back buffer downloads go through in
// pieces of its size, and the loss slots the cross-entropy kernels add to (one double per chunk, at
// least kLossSlots; sized before the first step, never grown inside one).
inline constexpr int64_t kStagingSlots = 8;
inline constexpr int64_t kStagingSlotBytes = int64_t{4} << 20;
inline constexpr int64_t kReadbackBytes = int64_t{4} << 20;
inline constexpr int64_t kLossSlots = 4096;
inline constexpr int64_t loss_slots(int64_t chunks) { return chunks > kLossSlots ? chunks : kLossSlots; }

// The CUPTI collector's activity buffers (executor/cupti/collector.h), a host row of a CUPTI-timed
// run: a pool allocated with the collector and handed to CUPTI over and over, each buffer decoded
// and given back as CUPTI completes it. Four: CUPTI fills a per-context queue (kernels, copies) and
// the global one (API records, external correlations) at once, and may ask for the next buffer of
// a queue before it has handed back the full one. An assumption: a run counts the requests past the
// pool (metadata.extra.cupti.buffers_beyond_pool) and the most held at once.
inline constexpr int64_t kCuptiPoolBuffers = 4;
inline constexpr int64_t kCuptiBufferBytes = int64_t{8} << 20;

// NCCL's device memory per communicator of more than one rank, every connection made at init
// (executor/cuda/nccl_comm.cpp sets NCCL_RUNTIME_CONNECT=0): per channel, a connection to each ring
// neighbour with a buffer per protocol, Simple (NCCL_BUFFSIZE, 4 MiB), LL (512 KiB) and LL128
// (4,915,200 bytes) (NCCL v2.30.7 src/init.cc:810-816, src/transport/p2p.cc:409), plus the work FIFO
// (NCCL_WORK_FIFO_BYTES, 1 MiB, init.cc:394). A model from NCCL's defaults, not a measurement: the
// channel count is the GPU profile's assumption (nccl_channels), NVLS and tree buffers are left out,
// and a CUDA run measures what NCCL really took (cudaMemGetInfo around its init) against it.
inline constexpr int64_t kNcclProtocolBufferBytes = (int64_t{4} << 20) + (int64_t{512} << 10) + 4915200;
inline constexpr int64_t kNcclWorkFifoBytes = int64_t{1} << 20;
inline constexpr int64_t kDefaultNcclChannels = 2;
inline constexpr int64_t nccl_communicator_bytes(int64_t channels) {
  return channels * 2 * kNcclProtocolBufferBytes + kNcclWorkFifoBytes;
}

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
