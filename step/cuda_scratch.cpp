#include "step/cuda_scratch.h"

#include <algorithm>

#include "core/units.h"

namespace oomb::step::cuda_scratch {

namespace {

// One GEMM's operand forms: a bf16 GEMM reads both operands as bf16, an fp32 (or tf32) GEMM as fp32.
// Two bf16 operands always run as a bf16 GEMM; fp32 operands do when bf16_gemm.
bool runs_bf16(bool a16, bool b16, bool bf16_gemm) { return (a16 && b16) || bf16_gemm; }

struct Form {
  bool want16 = false, want32 = false;
};

int64_t copy_bytes(int64_t rows, int64_t cols, bool bf16_storage, const Form& f) {
  return (f.want16 && !bf16_storage ? up(checked_mul(rows, ld8(cols) * 2, "op scratch")) : 0) +
         (f.want32 && bf16_storage ? up(checked_mul(rows, cols * 4, "op scratch")) : 0);
}

// A bf16 output goes through an fp32 scratch on the fp32 path, and on the bf16 path when it has a
// bias (never a second rounding) or accumulates (cuBLASLt's bf16 C = D with beta 1 is the case it
// may not offer; a plain bf16 output is written directly on sm_80+).
int64_t out_bytes(int64_t m, int64_t n, bool out16, bool gemm16, bool accumulate, bool bias) {
  return out16 && (!gemm16 || accumulate || bias) ? up(checked_mul(m, n * 4, "op scratch")) : 0;
}

}  // namespace

namespace {

// linear_fwd's GEMM, y overwritten or accumulated into (the LoRA forward's y += u B^T).
int64_t forward_bytes(int64_t rows, int64_t in, int64_t out, bool x16, bool w16, bool y16, bool has_bias,
                      bool accumulate, bool bf16_gemm) {
  if (rows <= 0 || out <= 0) return 0;
  const bool g16 = runs_bf16(w16, x16, bf16_gemm);
  Form f;
  (g16 ? f.want16 : f.want32) = true;
  return copy_bytes(out, in, w16, f) + copy_bytes(rows, in, x16, f) +
         out_bytes(out, rows, y16, g16, accumulate, has_bias);
}

}  // namespace

int64_t linear_fwd_bytes(int64_t rows, int64_t in, int64_t out, bool x16, bool w16, bool y16, bool has_bias,
                         bool bf16_gemm) {
  return forward_bytes(rows, in, out, x16, w16, y16, has_bias, false, bf16_gemm);
}

int64_t linear_bwd_bytes(int64_t rows, int64_t in, int64_t out, bool x16, bool w16, bool dy16, bool has_dx, bool dx16,
                         bool dx_acc, bool has_dw, bool dw16, bool has_db, bool db16, bool bf16_gemm) {
  if (rows <= 0 || out <= 0) return 0;
  Form fw, fx, fdy;
  int64_t bytes = 0;
  if (has_dx && in > 0) {  // dx^T [in, rows] (+)= W^T dy^T
    const bool g16 = runs_bf16(w16, dy16, bf16_gemm);
    (g16 ? fw.want16 : fw.want32) = true;
    (g16 ? fdy.want16 : fdy.want32) = true;
    bytes += out_bytes(in, rows, dx16, g16, dx_acc, false);
  }
  if (has_dw && in > 0) {  // dW^T [in, out] += x^T dy
    const bool g16 = runs_bf16(x16, dy16, bf16_gemm);
    (g16 ? fx.want16 : fx.want32) = true;
    (g16 ? fdy.want16 : fdy.want32) = true;
    bytes += out_bytes(in, out, dw16, g16, true, false);
  }
  bytes += copy_bytes(rows, out, dy16, fdy) + copy_bytes(out, in, w16, fw) + copy_bytes(rows, in, x16, fx);
  if (has_db && db16) bytes += up(out * 4);
  return bytes;
}

int64_t rmsnorm_bwd_bytes(int64_t dim, bool dw16) { return dw16 && dim > 0 ? up(dim * 4) : 0; }

int64_t lora_fwd_bytes(const LoraShape& s, bool bf16_gemm) {
  if (s.rows <= 0 || s.rank <= 0 || s.in <= 0) return 0;
  const int64_t through_a = forward_bytes(s.rows, s.in, s.rank, s.act16, s.adapter16, s.act16, false, false, bf16_gemm);
  const int64_t through_b = forward_bytes(s.rows, s.rank, s.out, s.act16, s.adapter16, s.act16, false, true, bf16_gemm);
  return std::max(through_a, through_b);
}

int64_t lora_bwd_bytes(const LoraShape& s, bool has_dx, bool bf16_gemm) {
  if (s.rows <= 0 || s.rank <= 0 || s.out <= 0) return 0;
  // B [out, rank] on x = u: dx = du (overwritten), dW = dB.
  const int64_t through_b = linear_bwd_bytes(s.rows, s.rank, s.out, s.act16, s.adapter16, s.act16, true, s.act16, false,
                                             true, s.grad16, false, false, bf16_gemm);
  // A [rank, in] on dy = du: dx accumulated, dW = dA.
  const int64_t through_a = linear_bwd_bytes(s.rows, s.in, s.rank, s.act16, s.adapter16, s.act16, has_dx, s.act16,
                                             true, true, s.grad16, false, false, bf16_gemm);
  return std::max(through_a, through_b);
}

int64_t attention_metadata_bytes(const AttentionShape& a, bool backward) {
  int64_t b = up(a.slots * 8) * (backward ? 2 : 1);
  if (a.select_groups > 0) {
    const int64_t qpages = ceil_div(a.rows, a.page_tokens);
    b += up((qpages * a.select_groups + 1) * 4) + up(a.listed * 4);
  }
  return b;
}

int64_t attention_fwd_bytes(const AttentionShape& a) {
  const int64_t nq = a.rows * a.q_heads * a.head_dim, nk = a.rows * a.kv_heads * a.head_dim;
  int64_t b = attention_metadata_bytes(a, false);
  if (a.act16) b += 2 * up(nq * 4) + 2 * up(nk * 4);  // q, k, v in; o out
  return b;
}

int64_t attention_bwd_bytes(const AttentionShape& a) {
  const int64_t nq = a.rows * a.q_heads * a.head_dim, nk = a.rows * a.kv_heads * a.head_dim;
  int64_t b = attention_metadata_bytes(a, true) + up(a.rows * a.q_heads * 4);  // D = rowsum(dO * O)
  if (a.act16) b += 4 * up(nq * 4) + 4 * up(nk * 4);  // q, o, dout, dq; k, v, dk, dv
  return b;
}

int64_t select_pages_bytes(int64_t rows, int64_t q_heads, int64_t kv_heads, int64_t head_dim, int64_t page_tokens,
                           int64_t groups, int64_t prefix_pages, int64_t budget, bool q16, bool summaries16) {
  const int64_t qpages = ceil_div(rows, page_tokens);
  int64_t b = up(select_layout(rows, kv_heads, head_dim, qpages, groups, prefix_pages, budget).bytes);
  if (q16) b += up(rows * q_heads * head_dim * 4);
  if (summaries16) b += up(checked_mul(prefix_pages, kv_heads * head_dim * 4, "staged summaries"));
  return b;
}

int64_t page_list_bytes(int64_t pages) { return up(pages * 8); }

int64_t cross_entropy_bytes(int64_t rows) { return up(std::max<int64_t>(rows, 1) * 8) + kAlign; }

int64_t LinearCall::bytes(bool bf16_gemm) const {
  switch (kind) {
    case Kind::forward: return linear_fwd_bytes(rows, in, out, x16, w16, y16, has_bias, bf16_gemm);
    case Kind::backward:
      return linear_bwd_bytes(rows, in, out, x16, w16, dy16, has_dx, dx16, dx_acc, has_dw, dw16, has_db, db16,
                              bf16_gemm);
    case Kind::lora_forward: return lora_fwd_bytes(lora, bf16_gemm);
    case Kind::lora_backward: return lora_bwd_bytes(lora, has_dx, bf16_gemm);
  }
  return 0;
}

std::vector<LinearCall> step_linear_calls(const models::ModelSpec& m, const Config& c, const Geometry& g) {
  std::vector<LinearCall> calls;
  const bool a16 = c.activation_dtype == Dtype::bf16, w16 = c.param_dtype == Dtype::bf16, d16 = c.param_grad_dtype == Dtype::bf16;
  const bool l16 = c.loss_dtype == Dtype::bf16, bias = m.qkv_bias;
  const int64_t H = g.h, qd = g.qd, kvd = g.kvd, F = g.f, V = g.V / g.G;  // the vocabulary-parallel LM head's share
  // LoRA freezes the base: its projections' backward computes dx only (no dW, no bias gradient), and
  // the LM head has no weight gradient unless the embeddings are trained (lora_train_embeddings).
  const bool layer_dw = !g.lora, layer_db = bias && !g.lora;
  const bool head_dw = !(g.lora && !c.lora_train_embeddings);
  for (int64_t ch = std::max<int64_t>(0, g.n - 2); ch < g.n; ++ch) {
    const int64_t T = g.chunk_len(ch);
    // A call of this chunk with what every GEMM-running call has: the op, its shape, x and W's dtypes.
    auto call = [&](LinearCall::Kind kind, const char* op, int64_t rows, int64_t in, int64_t out, bool head) {
      LinearCall l;
      l.kind = kind;
      l.op = op;
      l.chunk = ch;
      l.head = head;
      l.rows = rows;
      l.in = in;
      l.out = out;
      l.x16 = a16;
      l.w16 = w16;
      return l;
    };
    auto fwd = [&](const char* op, int64_t rows, int64_t in, int64_t out, bool y16, bool has_bias, bool head) {
      LinearCall l = call(LinearCall::Kind::forward, op, rows, in, out, head);
      l.y16 = y16;
      l.has_bias = has_bias;
      calls.push_back(l);
    };
    auto bwd = [&](const char* op, int64_t rows, int64_t in, int64_t out, bool dy16, bool dx_acc, bool has_dw,
                   bool has_db, bool head) {
      LinearCall l = call(LinearCall::Kind::backward, op, rows, in, out, head);
      l.dy16 = dy16;
      l.has_dx = true;
      l.dx16 = a16;
      l.dx_acc = dx_acc;
      l.has_dw = has_dw;
      l.dw16 = d16;
      l.has_db = has_db;
      l.db16 = d16;
      calls.push_back(l);
    };
    // Layer forward (fill, recompute) and backward.
    fwd("q projection", T, H, qd, a16, bias, false);
    fwd("k/v projection", T, H, kvd, a16, bias, false);
    fwd("o projection", T, qd, H, a16, m.o_bias, false);
    if (g.Lmoe < g.L) {  // a dense MLP
      fwd("gate/up projection", T, H, F, a16, false, false);
      fwd("down projection", T, F, H, a16, false, false);
      bwd("down projection backward", T, F, H, a16, false, layer_dw, false, false);
      bwd("gate/up projection backward", T, H, F, a16, true, layer_dw, false, false);
    }
    if (g.Lmoe > 0) {
      // A MoE layer (Engine::moe_forward / moe_backward): the router (fp32 logits) and each expert's
      // projections over its packed rows, at most the chunk's tokens (a token picks an expert once).
      const bool eb = m.moe.expert_bias, rb = m.moe.router_bias;
      fwd("router", T, H, g.experts, false, rb, false);
      fwd("expert gate/up projection", T, H, g.fe, a16, eb, false);
      fwd("expert down projection", T, g.fe, H, a16, eb, false);
      bwd("expert down projection backward", T, g.fe, H, a16, false, layer_dw, eb && !g.lora, false);
      bwd("expert gate/up projection backward", T, H, g.fe, a16, true, layer_dw, eb && !g.lora, false);
      bwd("router backward", T, H, g.experts, false, true, layer_dw, rb && !g.lora, false);
      if (g.fs > 0) {  // the shared experts: a dense MLP of fs columns over the chunk
        fwd("shared expert gate/up projection", T, H, g.fs, a16, false, false);
        fwd("shared expert down projection", T, g.fs, H, a16, false, false);
        bwd("shared expert down projection backward", T, g.fs, H, a16, false, layer_dw, false, false);
        bwd("shared expert gate/up projection backward", T, H, g.fs, a16, true, layer_dw, false, false);
      }
    }
    bwd("o projection backward", T, qd, H, a16, false, layer_dw, m.o_bias && !g.lora, false);
    bwd("q projection backward", T, H, qd, a16, true, layer_dw, layer_db, false);
    bwd("k/v projection backward", T, H, kvd, a16, true, layer_dw, layer_db, false);
    // The adapters of the targeted projections (per-GPU shapes; fp32 A, B and gradients), forward
    // (fill, recompute) and backward with an input gradient.
    if (g.lora) {
      for (const std::string& t : c.lora_targets) {
        LinearCall l;
        l.chunk = ch;
        l.lora.rows = T;
        l.lora.rank = c.lora_rank;
        l.lora.in = t == "o_proj" ? qd : t == "down_proj" ? F : H;
        l.lora.out =
            t == "q_proj" ? qd : t == "k_proj" || t == "v_proj" ? kvd : t == "gate_proj" || t == "up_proj" ? F : H;
        l.lora.act16 = a16;
        l.rows = T;
        l.in = l.lora.in;
        l.out = l.lora.out;
        l.target = &t;
        l.kind = LinearCall::Kind::lora_forward;
        l.op = " LoRA forward";
        calls.push_back(l);
        l.kind = LinearCall::Kind::lora_backward;
        l.op = " LoRA backward";
        l.has_dx = true;
        calls.push_back(l);
      }
    }
    // The LM head over row tiles of g.T (unfused: the whole chunk).
    const int64_t rows = std::min(g.T, T);
    fwd("lm_head", rows, H, V, g.fused_loss ? l16 : a16, false, true);
    bwd("lm_head backward", rows, H, V, l16, false, head_dw, false, true);
  }
  return calls;
}

StepScratch step_op_scratch(const models::ModelSpec& m, const Config& c, const Geometry& g, bool bf16_gemm) {
  StepScratch best;
  // The winner's name is built once, at the end (the planner's inner loop calls this).
  const LinearCall* best_call = nullptr;
  const char* best_op = nullptr;
  auto need = [&](int64_t bytes, const char* op) {
    if (bytes > best.bytes) {
      best.bytes = bytes;
      best_op = op;
      best_call = nullptr;
    }
  };
  auto need_call = [&](const LinearCall& l) {
    const int64_t bytes = l.bytes(bf16_gemm);
    if (bytes > best.bytes) {
      best.bytes = bytes;
      best_call = &l;
      best_op = nullptr;
    }
  };
  const bool a16 = c.activation_dtype == Dtype::bf16, d16 = c.param_grad_dtype == Dtype::bf16, kv16 = c.kv_dtype == Dtype::bf16;
  const std::vector<LinearCall> calls = step_linear_calls(m, c, g);
  for (int64_t ch = std::max<int64_t>(0, g.n - 2); ch < g.n; ++ch) {
    const int64_t T = g.chunk_len(ch);
    for (const LinearCall& l : calls)
      if (l.chunk == ch && !l.head) need_call(l);
    need(rmsnorm_bwd_bytes(g.h, d16), "rmsnorm backward");
    // Attention over the pass's prefix slots (at most the union bound).
    AttentionShape a;
    a.rows = T;
    a.q_heads = g.q_heads;
    a.kv_heads = g.kv_heads;
    a.head_dim = g.head_dim;
    a.page_tokens = g.p;
    a.slots = g.union_bound(ch);
    a.act16 = a16;
    const int64_t prefix = g.prefix_pages(ch);
    if (g.sparse && prefix > g.B) {
      a.select_groups = g.select_groups;
      a.listed = checked_mul(checked_mul(g.own_pages(ch), g.select_groups), g.B, "selection lists");
      need(select_pages_bytes(T, g.q_heads, g.kv_heads, g.head_dim, g.p, g.select_groups, prefix, g.B, a16, kv16),
           "select_pages");
    }
    need(attention_fwd_bytes(a), "attention forward");
    need(attention_bwd_bytes(a), "attention backward");
    need(page_list_bytes(g.own_pages(ch)), "page lists");
    for (const LinearCall& l : calls)
      if (l.chunk == ch && l.head) need_call(l);
    need(cross_entropy_bytes(std::min(g.T, T)), "cross_entropy");
  }
  if (best_call) best.op = best_call->name();
  else if (best_op) best.op = best_op;
  return best;
}

}  // namespace oomb::step::cuda_scratch
