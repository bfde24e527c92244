#pragma once
// The full-sequence reference: the decoder run over all N tokens at once, every activation kept,
// plain backprop (no chunks, no pages, no checkpointing). Dense causal attention, or sparse
// attention given as an explicit per-layer mask built from the chunk-recurrent run's recorded
// selection. This is what the chunk-recurrent gradients are tested against.
#include <cstdint>
#include <vector>

#include "executor/cpu/ops.h"
#include "executor/runtime/selection.h"
#include "executor/runtime/weights.h"
#include "models/specs.h"

namespace oomb::executor::cpu {

struct ReferenceResult {
  double loss = 0;  // mean cross-entropy over the N-1 next-token predictions
  Gradients grads;
};

// m.layers must equal the weights' layer count. masks: one per layer, or null for each layer's
// layer_mask (dense causal, windowed on sliding and chunked layers).
// routes (a mixture of experts): per layer the N x k experts each token is sent to (a run's
// Engine::routes()), held as a sparse run's selection is: the weights are still this reference's
// softmax of its own logits at those experts. Null: each token's top k of its own logits.
// router_aux_loss_coef > 0 (a mixture of experts): the load-balancing loss (Config::
// router_aux_loss_coef) joins the loss and its gradient the routers', computed from its definition
// over every MoE layer's logits at once.
ReferenceResult full_sequence_reference(const models::ModelSpec& m, const Weights& w,
                                        const std::vector<int32_t>& tokens,
                                        const std::vector<MaskedAttention>* masks = nullptr,
                                        const std::vector<std::vector<int32_t>>* routes = nullptr,
                                        double router_aux_loss_coef = 0);

// LoRA (Hugging Face PEFT): the reference of a step that trains `adapters` (ParamLayout::lora) on a
// frozen base. The forward runs on the merged weights W + scale B A of every adapted projection (the
// same function of x as W x + scale B A x); each adapter's gradients follow from its merged weight's
// gradient G by the chain rule, dA = scale B^T G and dB = scale G A^T (in double). Independent of
// the executor's adapter GEMMs. grads: in the adapters' layout.
ReferenceResult lora_reference(const models::ModelSpec& m, const Weights& base, const ParamTensors& adapters,
                               double scale, const std::vector<int32_t>& tokens,
                               const std::vector<MaskedAttention>* masks = nullptr,
                               const std::vector<std::vector<int32_t>>* routes = nullptr,
                               double router_aux_loss_coef = 0);

MaskedAttention causal_mask(const models::ModelSpec& m, int64_t n);
// Layer `layer`'s mask with no selection: causal, and for a sliding or chunked layer its window
// (models::first_key). What the references use when no masks are given.
MaskedAttention layer_mask(const models::ModelSpec& m, int64_t n, int64_t layer);
// Layer `layer`'s mask from a recorded selection: query token i of chunk c, query page j, may see
// key t <= i when t is in chunk c or t's page is selected for (c, j[, kv head]).
MaskedAttention selection_mask(const models::ModelSpec& m, int64_t n, int64_t chunk_tokens, int64_t page_tokens,
                               const SelectionLog& log, int64_t layer);

}  // namespace oomb::executor::cpu
