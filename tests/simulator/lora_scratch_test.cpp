// The CUDA backend's declared op scratch (step/cuda_scratch.h) under LoRA: the frozen base's
// projections and LM head declare no weight-gradient staging, and the adapters' own ops are covered.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "models/specs.h"
#include "step/config.h"
#include "step/cuda_scratch.h"
#include "step/geometry.h"

namespace oomb::step {
namespace {

namespace cs = cuda_scratch;

// qwen2.5-7b, chunk 4K, page 128, dense, the planner's fused 1K-token loss tiles, bf16 storage.
step::Config qwen_config(int64_t context) {
  step::Config c;
  c.context_tokens = context;
  c.chunk_tokens = 4096;
  c.page_tokens = 128;
  c.logits_chunk_tokens = 1024;
  return c;
}

// The per-GPU (in, out) of a targeted projection.
std::pair<int64_t, int64_t> projection(const step::Geometry& g, const std::string& t) {
  if (t == "q_proj") return {g.h, g.qd};
  if (t == "k_proj" || t == "v_proj") return {g.h, g.kvd};
  if (t == "o_proj") return {g.qd, g.h};
  if (t == "down_proj") return {g.f, g.h};
  return {g.h, g.f};  // gate_proj, up_proj
}

TEST(LoraScratch, NoLargerThanFullFineTuningAndCoversTheAdapters) {
  const models::ModelSpec m = models::load_model("qwen2.5-7b");
  const int64_t hidden_x_vocab_fp32 = int64_t{3584} * 152064 * 4;  // the LM head's dW fallback, 2.18 GB
  for (int64_t context : {int64_t{64} << 10, int64_t{4} << 20}) {
    for (bool bf16_gemm : {true, false}) {
      for (Dtype act : {Dtype::bf16, Dtype::fp32}) {
        step::Config full = qwen_config(context);
        full.activation_dtype = act;
        const cs::StepScratch f = cs::step_op_scratch(m, full, geometry(m, full), bf16_gemm);
        for (const std::vector<std::string>& targets :
             {std::vector<std::string>{"q_proj", "v_proj"}, lora_target_names()}) {
          for (bool train_embeddings : {false, true}) {
            step::Config c = full;
            c.lora_rank = 16;
            c.lora_targets = targets;
            c.lora_train_embeddings = train_embeddings;
            const step::Geometry g = geometry(m, c);
            const cs::StepScratch l = cs::step_op_scratch(m, c, g, bf16_gemm);
            SCOPED_TRACE(std::to_string(context) + " tokens, " + to_string(act) +
                         (bf16_gemm ? ", bf16 GEMMs, " : ", fp32 GEMMs, ") + std::to_string(targets.size()) +
                         " targets" + (train_embeddings ? ", trained embeddings" : ""));
            EXPECT_LE(l.bytes, f.bytes) << l.op << " vs " << f.op;
            if (train_embeddings) {
              // The LM head's weight gradient is back: the same worst op as full fine-tuning.
              EXPECT_EQ(l.bytes, f.bytes);
              EXPECT_EQ(l.op, "lm_head backward");
            } else {
              // The frozen head drops its dW staging (qwen's worst op under full fine-tuning).
              EXPECT_EQ(f.op, "lm_head backward");
              EXPECT_LE(l.bytes, f.bytes - hidden_x_vocab_fp32);
            }
            // Every adapter op of the step's row counts fits: a full chunk, the per-GPU shapes.
            for (const std::string& t : targets) {
              cs::LoraShape s;
              s.rows = g.chunk_len(0);
              std::tie(s.in, s.out) = projection(g, t);
              s.rank = c.lora_rank;
              s.act16 = c.activation_dtype == Dtype::bf16;
              EXPECT_GE(l.bytes, cs::lora_fwd_bytes(s, bf16_gemm)) << t;
              EXPECT_GE(l.bytes, cs::lora_bwd_bytes(s, true, bf16_gemm)) << t;
              EXPECT_GE(cs::lora_bwd_bytes(s, true, bf16_gemm), cs::lora_bwd_bytes(s, false, bf16_gemm)) << t;
            }
          }
        }
      }
    }
  }
}

// The adapter ops' formulas by hand: x [37, 48] bf16, A [5, 48] and B [24, 5] fp32, fp32 GEMMs (the
// bf16 activations are read through fp32 copies, a bf16 output is staged in fp32; 256-byte blocks).
TEST(LoraScratch, AdapterOpsByHand) {
  cs::LoraShape s;
  s.rows = 37;
  s.in = 48;
  s.rank = 5;
  s.out = 24;
  s.act16 = true;
  const auto up = [](int64_t b) { return (b + 255) / 256 * 256; };
  // Forward: max(x as fp32 + u staged, u as fp32 + y staged).
  EXPECT_EQ(cs::lora_fwd_bytes(s, false),
            std::max(up(37 * 48 * 4) + up(37 * 5 * 4), up(37 * 5 * 4) + up(37 * 24 * 4)));
  // Backward, B's phase: du = scale dy B reads dy as fp32 and stages du; dB += dy^T u multiplies two
  // bf16 operands as stored (a bf16 GEMM whatever the precision), no copies.
  const int64_t through_b = up(37 * 24 * 4) + up(37 * 5 * 4);
  // A's phase: dx += du A reads du as fp32 and stages dx (accumulated); dA += du^T x is bf16 x bf16.
  EXPECT_EQ(cs::lora_bwd_bytes(s, true, false), std::max(through_b, up(37 * 5 * 4) + up(37 * 48 * 4)));
  EXPECT_EQ(cs::lora_bwd_bytes(s, false, false), through_b);
  // fp32 storage and fp32 GEMMs: everything read and written in place.
  s.act16 = false;
  EXPECT_EQ(cs::lora_fwd_bytes(s, false), 0);
  EXPECT_EQ(cs::lora_bwd_bytes(s, true, false), 0);
  // Nothing to do, nothing declared.
  s.rows = 0;
  EXPECT_EQ(cs::lora_fwd_bytes(s, true), 0);
  EXPECT_EQ(cs::lora_bwd_bytes(s, true, true), 0);
}

}  // namespace
}  // namespace oomb::step
