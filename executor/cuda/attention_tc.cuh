#pragma once
// Paged flash attention of one chunk on tensor cores: the same semantics, arguments and results as
// attention.cuh (online softmax with saved log-sum-exp, GQA of any ratio, causal inside the chunk,
// prefix keys from page pointers, dense or selected per query page and KV head, key sequence =
// attended prefix slots in slot order then the chunk's own rows), but the four matrix products of
// each tile (Q K^T and P V forward; dO V^T, P^T dO, dS^T Q and dS K backward) run as bf16 WMMA
// m16n16k16 with fp32 accumulators (sm_80+). Operands are rounded fp32 -> bf16 (to nearest even)
// when staged into shared memory; softmax, log-sum-exp, D = rowsum(dO * O), masks and every
// accumulation stay fp32, and all inputs and outputs but the pages are fp32 as in attention.cuh.
//
// Blocking (see attention_tc.cu and executor/cuda/README.md for tiles and shared memory):
//  - forward and dQ: block per (128 query rows of query page j, j, KV head g), 8 warps of 16 rows,
//    key tiles of 64;
//  - dK / dV: block per (64 keys of a prefix page or of the own rows, g) looping over every query
//    row that attends them in tiles of 64, so it is the only writer of its keys' gradients: prefix
//    gradient pages are accumulated with plain read-add-writes (deterministic, no atomics) and own
//    dK / dV are overwritten, exactly as the fp32 kernels.
// Page dtypes as in attention.cuh (AttentionArgs::kv_bf16, AttentionGrads::grad_bf16): bf16 K / V
// page rows are staged as they are (already bf16: no rounding), bf16 gradient pages get one
// rounding per element and call from their owning block.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/cuda/attention.cuh"

namespace oomb::executor::cuda {

// Whether the tensor-core kernels can run these arguments on the current device: head_dim 64 or
// 128, q_heads a multiple of kv_heads, q / k_own / v_own 16-byte aligned (rows are read as float4),
// a device of compute capability >= 8.0 and a kernel image built for it (bf16 WMMA needs sm_80).
// The caller must also pass 16-byte-aligned prefix pages, o, dout, dq, dk_own, dv_own and gradient
// pages (the backend checks its host-side copies of those pointers). Page size, rows (ragged or
// not), GQA ratio and selection are unrestricted.
bool attention_tc_supported(const AttentionArgs& a);
// The device part of that test: the current device is sm_80 or later and this build holds a kernel
// image for it (cached per device).
bool attention_tc_device_supported();

// Same contract as launch_attention_fwd / launch_attention_bwd (attention.cuh); the caller checks
// attention_tc_supported first (the launchers throw on a head_dim other than 64 or 128).
void launch_attention_tc_fwd(const AttentionArgs& a, float* o, float* lse, cudaStream_t s);
void launch_attention_tc_bwd(const AttentionArgs& a, const AttentionGrads& g, cudaStream_t s);

}  // namespace oomb::executor::cuda
