#include "executor/cpu/ops.h"

#include "executor/runtime/adamw.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "executor/cpu/eigen_util.h"
#include "executor/cpu/gemm.h"
#include "executor/cpu/parallel.h"

namespace oomb::executor::cpu {

namespace {
// Rows per piece of the row-parallel loops, and per partial sum of the weight-gradient reductions.
constexpr int64_t kRowGrain = 32;
// Table rows per piece of the embedding-gradient scatter.
constexpr int64_t kVocabGrain = 4096;

// sum_i a[i] * b[i] (c == nullptr) or sum_i a[i] * b[i] * c[i], in double, with 8 independent
// lanes in a fixed order (vectorisable without reassociation).
inline double dot_d(const float* a, const float* b, const float* c, int64_t n) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      part[l] += static_cast<double>(a[i + l]) * b[i + l] * (c ? static_cast<double>(c[i + l]) : 1.0);
  double s = 0;
  for (double v : part) s += v;
  for (; i < n; ++i) s += static_cast<double>(a[i]) * b[i] * (c ? static_cast<double>(c[i]) : 1.0);
  return s;
}
}  // namespace

void embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out) {
  parallel_pieces(rows, kRowGrain, rows * hidden, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      // A negative id: another rank's token under the vocabulary-parallel embedding (a zero row).
      if (ids[t] < 0) std::fill_n(out + t * hidden, hidden, 0.0f);
      else std::copy_n(table + ids[t] * hidden, hidden, out + t * hidden);
    }
  });
}

// Pieces own ranges of table rows: each scans every id in order and adds the rows it owns, so a
// table row sums its tokens in token order whatever the thread count.
void embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dtable_acc) {
  int64_t vocab = 0;
  for (int64_t t = 0; t < rows; ++t) vocab = std::max<int64_t>(vocab, ids[t] + 1);
  parallel_pieces(vocab, kVocabGrain, rows * hidden, [&](int64_t v0, int64_t v1) {
    for (int64_t t = 0; t < rows; ++t) {
      if (ids[t] < v0 || ids[t] >= v1) continue;
      float* d = dtable_acc + ids[t] * hidden;
      const float* s = dout + t * hidden;
      for (int64_t i = 0; i < hidden; ++i) d[i] += s[i];
    }
  });
}

void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd) {
  parallel_pieces(rows, kRowGrain, rows * dim, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float* xr = x + t * dim;
      const double ss = dot_d(xr, xr, nullptr, dim);
      const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
      rstd[t] = r;
      float* yr = y + t * dim;
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * r * w[i];
    }
  });
}

// dx_i = r (w_i dy_i) - r^3 x_i / D * sum_j w_j dy_j x_j ; dw_i += dy_i x_i r. dw: one partial
// per piece of kRowGrain rows, added to dw_acc in piece order.
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                 float* dx_acc, float* dw_acc) {
  const int64_t pieces = pieces_of(rows, kRowGrain);
  std::vector<float> dw_part(static_cast<size_t>(pieces * dim), 0.0f);
  parallel_pieces(rows, kRowGrain, rows * dim, [&](int64_t r0, int64_t r1) {
    float* dwp = dw_part.data() + (r0 / kRowGrain) * dim;
    for (int64_t t = r0; t < r1; ++t) {
      const float* xr = x + t * dim;
      const float* dyr = dy + t * dim;
      float* dxr = dx_acc + t * dim;
      const float r = rstd[t];
      const double dot = dot_d(w, dyr, xr, dim);
      const float c = static_cast<float>(dot / static_cast<double>(dim)) * r * r * r;
      for (int64_t i = 0; i < dim; ++i) {
        dxr[i] += r * w[i] * dyr[i] - c * xr[i];
      }
      if (dw_acc)  // null: a frozen weight (LoRA), no gradient
        for (int64_t i = 0; i < dim; ++i) dwp[i] += dyr[i] * xr[i] * r;
    }
  });
  if (!dw_acc) return;
  for (int64_t p = 0; p < pieces; ++p) {
    const float* dwp = dw_part.data() + p * dim;
    for (int64_t i = 0; i < dim; ++i) dw_acc[i] += dwp[i];
  }
}

void linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out, float* y) {
  gemm(false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (b)
    parallel_pieces(rows, kRowGrain, rows * out, [&](int64_t r0, int64_t r1) {
      for (int64_t t = r0; t < r1; ++t)
        for (int64_t i = 0; i < out; ++i) y[t * out + i] += b[i];
    });
}

void linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy, float* dx,
                bool accumulate_dx, float* dw_acc, float* db_acc) {
  if (dx) gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
  if (dw_acc) gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw_acc, in);
  if (db_acc) Eigen::Map<Eigen::RowVectorXf>(db_acc, out) += mat(dy, rows, out).colwise().sum();
}

namespace {
// cos/sin of one position for every frequency (angles in double, then rounded once).
// scale: YaRN's attention factor (models::rope_scale), in the cos and sin.
void rope_angles(int64_t pos, int64_t half, const double* inv_freq, double scale, float* c, float* s) {
  for (int64_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(pos) * inv_freq[i];
    c[i] = static_cast<float>(std::cos(a) * scale);
    s[i] = static_cast<float>(std::sin(a) * scale);
  }
}

void rope_apply(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope,
                float sign) {
  OOMB_ASSERT(head_dim % 2 == 0, "RoPE needs an even head_dim");
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[static_cast<size_t>(i)] = models::rope_inv_freq(rope, i, head_dim);
  parallel_pieces(rows, kRowGrain, rows * heads * head_dim * 4, [&](int64_t r0, int64_t r1) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = r0; t < r1; ++t) {
      rope_angles(pos0 + t, half, inv_freq.data(), models::rope_scale(rope), c.data(), s.data());
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half], si = sign * s[static_cast<size_t>(i)], co = c[static_cast<size_t>(i)];
          v[i] = a * co - b * si;
          v[i + half] = b * co + a * si;
        }
      }
    }
  });
}
}  // namespace

void rope_fwd(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope) {
  rope_apply(x, rows, heads, head_dim, pos0, rope, 1.0f);
}

// The rotation is orthogonal: its gradient is the inverse rotation (angle -> -angle).
void rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, const models::Rope& rope) {
  rope_apply(dx, rows, heads, head_dim, pos0, rope, -1.0f);
}

// Elementwise: pieces of kElemGrain elements.
constexpr int64_t kElemGrain = 8192;

void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out, float limit) {
  if (limit > 0) {  // gpt-oss: elementwise, written out (the clamps' branches)
    parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
        out[i] = g / (1.0f + std::exp(-kGptOssAlpha * g)) * (u + 1.0f);
      }
    });
    return;
  }
  parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
    const CMapA g(gate + i0, i1 - i0), u(up + i0, i1 - i0);
    MapA(out + i0, i1 - i0) = g / (1.0f + (-g).exp()) * u;
  });
}

void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup, float limit) {
  if (limit > 0) {
    parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const float g0 = gate[i], u0 = up[i], d = dout[i];  // read before dup / dgate are written
        const float g = std::min(g0, limit), u = std::clamp(u0, -limit, limit);
        const float s = 1.0f / (1.0f + std::exp(-kGptOssAlpha * g));
        dup[i] = u0 >= -limit && u0 <= limit ? d * g * s : 0.0f;
        dgate[i] = g0 <= limit ? d * (u + 1.0f) * s * (1.0f + kGptOssAlpha * g * (1.0f - s)) : 0.0f;
      }
    });
    return;
  }
  parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
    const int64_t m = i1 - i0;
    const CMapA g(gate + i0, m), u(up + i0, m), d(dout + i0, m);
    const Eigen::ArrayXf sig = 1.0f / (1.0f + (-g).exp());
    MapA(dup + i0, m) = d * g * sig;
    MapA(dgate + i0, m) = d * u * sig * (1.0f + g * (1.0f - sig));
  });
}

// GELU's tanh approximation and its derivative, in float as PyTorch computes it.
namespace {
constexpr float kGeluC = 0.7978845608028654f, kGeluA = 0.044715f;  // sqrt(2 / pi), the cubic's weight
}  // namespace

void geglu_fwd(const float* gate, const float* up, int64_t n, float* out) {
  parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float x = gate[i];
      out[i] = 0.5f * x * (1.0f + std::tanh(kGeluC * (x + kGeluA * x * x * x))) * up[i];
    }
  });
}

void geglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup) {
  parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float x = gate[i], u = up[i], d = dout[i];  // read before dup / dgate are written
      const float t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
      dup[i] = d * 0.5f * x * (1.0f + t);
      dgate[i] = d * u * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x));
    }
  });
}

// Rows in parallel; the loss adds the rows' terms in row order.
double cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale) {
  std::vector<double> term(static_cast<size_t>(rows), 0.0);
  parallel_pieces(rows, 4, rows * vocab, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      MapA row(logits + t * vocab, vocab);
      if (targets[t] < 0) {
        row.setZero();
        continue;
      }
      const float mx = row.maxCoeff();
      // loss = log(sum exp(x - mx)) - (x_target - mx): not log(exp(x_target - mx)), which is -inf
      // once the target is ~104 below the max (expf underflows).
      const double target_shifted = static_cast<double>(row[targets[t]]) - static_cast<double>(mx);
      row = (row - mx).exp();
      const double sum = row.cast<double>().sum();
      term[static_cast<size_t>(t)] = std::log(sum) - target_shifted;
      row *= static_cast<float>(scale / sum);
      row[targets[t]] -= scale;
    }
  });
  double total = 0;
  for (double v : term) total += v;
  return total;
}

void cross_entropy_shard_stats(const float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float* stats) {
  parallel_pieces(rows, 4, rows * vocab, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const CMapA row(logits + t * vocab, vocab);
      const float mx = row.maxCoeff();
      stats[t * 3] = mx;
      stats[t * 3 + 1] = static_cast<float>((row - mx).exp().cast<double>().sum());
      stats[t * 3 + 2] = targets[t] >= 0 ? row[targets[t]] : 0.0f;
    }
  });
}

void cross_entropy_shard_grad(float* logits, int64_t rows, int64_t vocab, const int32_t* targets,
                              const float* max_sum, float scale) {
  parallel_pieces(rows, 4, rows * vocab, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      MapA row(logits + t * vocab, vocab);
      if (targets[t] == -1) {
        row.setZero();
        continue;
      }
      row = (row - max_sum[t * 2]).exp();
      row *= static_cast<float>(scale / static_cast<double>(max_sum[t * 2 + 1]));
      if (targets[t] >= 0) row[targets[t]] -= scale;
    }
  });
}

void page_summaries(const float* k, int64_t rows, int64_t kv_dim, int64_t page_tokens, float* out) {
  for (int64_t j = 0, r0 = 0; r0 < rows; ++j, r0 += page_tokens) {
    const int64_t r1 = std::min(rows, r0 + page_tokens);
    auto o = Eigen::Map<Eigen::RowVectorXf>(out + j * kv_dim, kv_dim);
    o = mat(k + r0 * kv_dim, r1 - r0, kv_dim).colwise().sum() / static_cast<float>(r1 - r0);
  }
}

// ALGORITHM.md section 5. Per query token and KV head: the query summed over the head's GQA group,
// dotted with every earlier page summary (scaled by 1/sqrt(head_dim) like attention scores),
// softmax over pages; probabilities summed over the query page's tokens (and over KV heads for the
// published rule); top-B pages, ties to the lower page index.
std::vector<std::vector<int32_t>> select_pages(const SelectionArgs& a) {
  const int64_t group = a.q_heads / a.kv_heads, hd = a.head_dim, kvd = a.kv_heads * hd, qd = a.q_heads * hd;
  const int64_t qpages = (a.rows + a.page_tokens - 1) / a.page_tokens;
  const int64_t groups = a.per_kv_head ? a.kv_heads : 1;
  const int64_t P = a.prefix_pages;
  std::vector<double> acc(static_cast<size_t>(qpages * groups * P), 0.0);
  const float sc = 1.0f / std::sqrt(static_cast<float>(hd));
  // Query pages in parallel: a page's rows add only into its own scores (the same sums in the
  // same order as one pass over every row; the products are per row).
  const double flops = 4.0 * static_cast<double>(a.rows) * static_cast<double>(kvd) * static_cast<double>(P);
  parallel_items(qpages, flops, [&](int64_t j) {
    const int64_t r0 = j * a.page_tokens, rows = std::min(a.rows, r0 + a.page_tokens) - r0;
    RowMat qs(rows, hd), s(rows, P);
    for (int64_t g = 0; g < a.kv_heads; ++g) {
      qs.setZero();
      for (int64_t h = g * group; h < (g + 1) * group; ++h) qs += block(a.q.f32() + r0 * qd + h * hd, rows, hd, qd);
      s.noalias() = sc * (qs * block(a.summaries.f32() + g * hd, P, hd, kvd).transpose());
      double* dst = acc.data() + (j * groups + (a.per_kv_head ? g : 0)) * P;
      for (int64_t i = 0; i < rows; ++i) {
        auto row = s.row(i).array();
        row = (row - row.maxCoeff()).exp();
        row /= row.sum();
        for (int64_t k = 0; k < P; ++k) dst[k] += row[k];
      }
    }
  });
  if (a.reduce_scores) a.reduce_scores(acc.data(), static_cast<int64_t>(acc.size()));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(qpages * groups));
  std::vector<int32_t> idx(static_cast<size_t>(P));
  for (int64_t jg = 0; jg < qpages * groups; ++jg) {
    const double* sc_row = acc.data() + jg * P;
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + a.budget, idx.end(), [&](int32_t x, int32_t y) {
      return sc_row[x] != sc_row[y] ? sc_row[x] > sc_row[y] : x < y;
    });
    auto& sel = out[static_cast<size_t>(jg)];
    sel.assign(idx.begin(), idx.begin() + a.budget);
    std::sort(sel.begin(), sel.end());
  }
  return out;
}

void adamw(float* param, const float* grad, float* m, float* v, const uint8_t* decay_mask, int64_t n, float lr,
           float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
  const AdamWConstants k = adamw_constants(lr, beta1, beta2, weight_decay, step);
  const float one_b1 = 1.0f - beta1, one_b2 = 1.0f - beta2;
  // fp32 throughout and branch-free, so the loop vectorizes (the division and square root too).
  parallel_pieces(n, kElemGrain, n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = grad[i] * grad_scale;
      const float p = decay_mask[i] ? param[i] * k.decay : param[i];
      const float mi = beta1 * m[i] + one_b1 * g;
      const float vi = beta2 * v[i] + one_b2 * g * g;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / k.bc2_sqrt + eps;
      param[i] = p - k.step_size * (mi / denom);
    }
  });
}

}  // namespace oomb::executor::cpu
