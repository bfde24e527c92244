#pragma once
// Page summaries and page selection (ALGORITHM.md section 5; the rule of executor/cpu/ops.cpp):
// per query token and KV head, the query summed over the head's GQA group is scored against every
// earlier page summary (scaled by 1/sqrt(head_dim)), softmaxed over pages, the probabilities are
// summed (double) over the query page's tokens (and over KV heads for the published rule), and the
// top `budget` pages per query page are taken on the GPU (radix select over the scores, ties to the
// lower page index), listed in ascending order. The scores are two tiled products of the summed
// queries [rows x kv_heads, head_dim] with the summaries^T (shared-memory tiles of 32 tokens x 64
// pages, coalesced rows): the first the softmax normaliser per (token, KV head), the second the
// probabilities summed per query page. Summaries in the host tier are staged into device scratch
// once per call, so the passes never read across the host link.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "executor/runtime/backend.h"

namespace oomb::executor::cuda {

// out [ceil(rows / p), kv_dim]: mean of each page's key rows (k and out fp32 or bf16: fp32 sums, one
// rounding on store).
void launch_page_summaries(ConstTensor k, int64_t rows, int64_t kv_dim, int64_t page_tokens, Tensor out,
                           cudaStream_t s);

struct SelectWorkspace {
  float* qsum = nullptr;   // [rows, kv_heads, head_dim]
  float* norm_m = nullptr;  // [rows, kv_heads] softmax max over pages
  float* norm_l = nullptr;  // [rows, kv_heads] softmax sum over pages
  double* scores = nullptr;  // [qpages * groups, prefix_pages]
  int32_t* selected = nullptr;  // [qpages * groups, budget]
  float* staged = nullptr;      // [prefix_pages, kv_heads * head_dim]: device copy of the summaries
  static int64_t bytes(int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t qpages, int64_t groups,
                       int64_t prefix_pages, int64_t budget);
  static SelectWorkspace carve(void* base, int64_t rows, int64_t kv_heads, int64_t head_dim, int64_t qpages,
                               int64_t groups, int64_t prefix_pages, int64_t budget);
};

// The selection in two launches, so that tensor parallelism can sum the ranks' scores between them
// (SelectionArgs::reduce_scores, on the same stream). groups = kv_heads when per_kv_head, else 1.
// Fills ws.scores [qpages * groups, prefix_pages]; stage: copy the summaries into ws.staged first
// (they are not device memory).
void launch_page_scores(const float* q, int64_t rows, int64_t q_heads, int64_t kv_heads, int64_t head_dim,
                        int64_t page_tokens, const float* summaries, int64_t prefix_pages, bool per_kv_head,
                        bool stage, const SelectWorkspace& ws, cudaStream_t s);
// Fills ws.selected [qpages * groups, budget] from ws.scores: the top `budget` pages of each row.
void launch_top_pages(int64_t rows, int64_t page_tokens, int64_t groups, int64_t prefix_pages, int64_t budget,
                      const SelectWorkspace& ws, cudaStream_t s);

}  // namespace oomb::executor::cuda
