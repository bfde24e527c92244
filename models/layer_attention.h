#pragma once
// Layer attention kinds and their mask, with no dependencies (the CUDA sources include it).
#include <cstdint>

// The CUDA kernels evaluate the mask too (nvcc: host and device).
#if defined(__CUDACC__)
#define OOMB_LAYER_HD __host__ __device__
#else
#define OOMB_LAYER_HD
#endif

namespace oomb::models {

// The attention of one layer (HF `layer_types`). global: every earlier token (causal), as in the
// dense models; sliding: the last ModelSpec::sliding_window tokens, itself included (transformers'
// masks: key j is seen from query i when i - window < j <= i); chunked: the earlier tokens of its
// own aligned block of ModelSpec::attention_chunk tokens (Llama 4's chunked local attention: key j
// from query i when j <= i and j / chunk == i / chunk).
enum class LayerAttention : uint8_t { global, sliding, chunked };
// The earliest key position the query at position qp attends in a layer of kind a (window: the
// sliding window or the chunked block, ModelSpec::window_tokens(a)); keys up to qp itself. 0 for
// global layers. Every mask of the executor and its references is this one function.
OOMB_LAYER_HD inline int64_t first_key(LayerAttention a, int64_t window, int64_t qp) {
  if (a == LayerAttention::sliding) return qp - window + 1 > 0 ? qp - window + 1 : 0;
  if (a == LayerAttention::chunked) return qp / window * window;
  return 0;
}

}  // namespace oomb::models
