#include "executor/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "executor/cpu/eigen_util.h"

namespace oomb::executor::cpu {

void embedding_fwd(const int32_t* ids, int64_t rows, const float* table, int64_t hidden, float* out) {
  for (int64_t t = 0; t < rows; ++t) std::copy_n(table + ids[t] * hidden, hidden, out + t * hidden);
}

void embedding_bwd(const int32_t* ids, int64_t rows, const float* dout, int64_t hidden, float* dtable_acc) {
  for (int64_t t = 0; t < rows; ++t) {
    float* d = dtable_acc + ids[t] * hidden;
    const float* s = dout + t * hidden;
    for (int64_t i = 0; i < hidden; ++i) d[i] += s[i];
  }
}

void rmsnorm_fwd(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
    rstd[t] = r;
    float* yr = y + t * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * r * w[i];
  }
}

// dx_i = r (w_i dy_i) - r^3 x_i / D * sum_j w_j dy_j x_j ; dw_i += dy_i x_i r.
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                 float* dx_acc, float* dw_acc) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    const float* dyr = dy + t * dim;
    float* dxr = dx_acc + t * dim;
    const float r = rstd[t];
    double dot = 0;
    for (int64_t i = 0; i < dim; ++i) dot += static_cast<double>(w[i]) * dyr[i] * xr[i];
    const float c = static_cast<float>(dot / static_cast<double>(dim)) * r * r * r;
    for (int64_t i = 0; i < dim; ++i) {
      dxr[i] += r * w[i] * dyr[i] - c * xr[i];
      dw_acc[i] += dyr[i] * xr[i] * r;
    }
  }
}

void linear_fwd(const float* x, int64_t rows, int64_t in, const float* w, const float* b, int64_t out, float* y) {
  auto Y = mat(y, rows, out);
  Y.noalias() = mat(x, rows, in) * mat(w, out, in).transpose();
  if (b) Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, out);
}

void linear_bwd(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* dy, float* dx,
                bool accumulate_dx, float* dw_acc, float* db_acc) {
  const auto DY = mat(dy, rows, out);
  if (dx) {
    auto DX = mat(dx, rows, in);
    if (accumulate_dx) DX.noalias() += DY * mat(w, out, in);
    else DX.noalias() = DY * mat(w, out, in);
  }
  if (dw_acc) mat(dw_acc, out, in).noalias() += DY.transpose() * mat(x, rows, in);
  if (db_acc) Eigen::Map<Eigen::RowVectorXf>(db_acc, out) += DY.colwise().sum();
}

namespace {
// cos/sin of one position for every frequency (angles in double, then rounded once).
void rope_angles(int64_t pos, int64_t half, double theta, int64_t head_dim, float* c, float* s) {
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double a = static_cast<double>(pos) * inv_freq;
    c[i] = static_cast<float>(std::cos(a));
    s[i] = static_cast<float>(std::sin(a));
  }
}

void rope_apply(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta, float sign) {
  OOMB_ASSERT(head_dim % 2 == 0, "RoPE needs an even head_dim");
  const int64_t half = head_dim / 2;
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (int64_t t = 0; t < rows; ++t) {
    rope_angles(pos0 + t, half, theta, head_dim, c.data(), s.data());
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half], si = sign * s[static_cast<size_t>(i)], co = c[static_cast<size_t>(i)];
        v[i] = a * co - b * si;
        v[i + half] = b * co + a * si;
      }
    }
  }
}
}  // namespace

void rope_fwd(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) {
  rope_apply(x, rows, heads, head_dim, pos0, theta, 1.0f);
}

// The rotation is orthogonal: its gradient is the inverse rotation (angle -> -angle).
void rope_bwd(float* dx, int64_t rows, int64_t heads, int64_t head_dim, int64_t pos0, double theta) {
  rope_apply(dx, rows, heads, head_dim, pos0, theta, -1.0f);
}

void swiglu_fwd(const float* gate, const float* up, int64_t n, float* out) {
  const CMapA g(gate, n), u(up, n);
  MapA(out, n) = g / (1.0f + (-g).exp()) * u;
}

void swiglu_bwd(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup) {
  const CMapA g(gate, n), u(up, n), d(dout, n);
  const Eigen::ArrayXf sig = 1.0f / (1.0f + (-g).exp());
  MapA(dup, n) = d * g * sig;
  MapA(dgate, n) = d * u * sig * (1.0f + g * (1.0f - sig));
}

double cross_entropy(float* logits, int64_t rows, int64_t vocab, const int32_t* targets, float scale) {
  double total = 0;
  for (int64_t t = 0; t < rows; ++t) {
    MapA row(logits + t * vocab, vocab);
    if (targets[t] < 0) {
      row.setZero();
      continue;
    }
    const float mx = row.maxCoeff();
    row = (row - mx).exp();
    const double sum = row.cast<double>().sum();
    const float target_p = row[targets[t]];
    total += std::log(sum) - std::log(static_cast<double>(target_p));
    row *= static_cast<float>(scale / sum);
    row[targets[t]] -= scale;
  }
  return total;
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
  RowMat qs(a.rows, hd), s(a.rows, P);
  for (int64_t g = 0; g < a.kv_heads; ++g) {
    qs.setZero();
    for (int64_t h = g * group; h < (g + 1) * group; ++h) qs += block(a.q.f32() + h * hd, a.rows, hd, qd);
    s.noalias() = sc * (qs * block(a.summaries.f32() + g * hd, P, hd, kvd).transpose());
    for (int64_t i = 0; i < a.rows; ++i) {
      auto row = s.row(i).array();
      row = (row - row.maxCoeff()).exp();
      row /= row.sum();
      double* dst = acc.data() + ((i / a.page_tokens) * groups + (a.per_kv_head ? g : 0)) * P;
      for (int64_t k = 0; k < P; ++k) dst[k] += row[k];
    }
  }
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
           float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step));
  for (int64_t i = 0; i < n; ++i) {
    if (decay_mask[i]) param[i] -= lr * weight_decay * param[i];
    m[i] = beta1 * m[i] + (1 - beta1) * grad[i];
    v[i] = beta2 * v[i] + (1 - beta2) * grad[i] * grad[i];
    const double mhat = m[i] / bc1, vhat = v[i] / bc2;
    param[i] -= static_cast<float>(lr * mhat / (std::sqrt(vhat) + eps));
  }
}

}  // namespace oomb::executor::cpu
