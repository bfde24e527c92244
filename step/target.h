#pragma once
// The backend a buffer table describes (light: CUDA translation units include it).
#include <cstdint>

#include "step/cuda_layout.h"

namespace oomb::step {

// What a backend allocates besides the runtime's own buffers (step/buffers.h).
enum class BackendKind { cpu, cuda };
const char* to_string(BackendKind b);
struct Target {
  BackendKind backend = BackendKind::cpu;
  // CUDA: linear ops on fp32 operands convert them to bf16 in the op scratch (the CUDA backend's
  // --gemm-precision bf16, its default) rather than running fp32 / tf32 GEMMs (which convert bf16
  // operands to fp32 instead).
  bool bf16_gemm = true;
  // CUDA with peak_measure reserved: the CUDA context and library workspaces (the GPU profile's).
  int64_t runtime_reserve_bytes = 0;
  // CUDA under tensor or data parallelism: the NCCL channels each communicator connects (the GPU
  // profile's nccl_channels), which size the communicator_buffers row.
  int64_t nccl_channels = cuda_scratch::kDefaultNcclChannels;
  // CUDA, timed by the CUPTI collector (oomb run --trace on a build with CUPTI): its activity
  // buffers are a host row (cupti_activity_buffers). A plan is made for an untimed run; the run
  // that traces adds the row and says so.
  bool cupti = false;
  // The published implementation with offload (docs/model.md, pages in flight): pages whose
  // write-back has been issued and has not finished, beyond the resident layers, at the pool's peak
  // (the simulator's closed form from the copy rate and the layer pass time; 0 = none).
  int64_t pages_in_flight = 0;
};

}  // namespace oomb::step
