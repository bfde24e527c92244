#include "executor/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace oomb::executor::cpu {

void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize, int32_t* route_experts,
               float* route_weights, int32_t* route_rows, int32_t* offsets) {
  OOMB_ASSERT(k >= 1 && k <= experts, "top-k of the experts");
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::fill_n(offsets, experts + 1, 0);
  for (int64_t t = 0; t < rows; ++t) {
    const float* l = logits + t * experts;
    // The k largest logits, descending; equal logits in ascending expert order.
    for (int64_t e = 0; e < experts; ++e) order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
    // Softmax over the k selected (renormalised) or over every expert (then read at the selected).
    const float mx = l[order[0]];
    double denom = 0;
    if (renormalize)
      for (int64_t j = 0; j < k; ++j) denom += std::exp(static_cast<double>(l[order[static_cast<size_t>(j)]] - mx));
    else
      for (int64_t e = 0; e < experts; ++e) denom += std::exp(static_cast<double>(l[e] - mx));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      route_experts[t * k + j] = e;
      route_weights[t * k + j] = static_cast<float>(std::exp(static_cast<double>(l[e] - mx)) / denom);
      ++offsets[e + 1];
    }
  }
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] += offsets[e];
  // Packed rows: by expert, then by token (a counting sort, stable in the token order).
  std::vector<int32_t> next(offsets, offsets + experts);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < k; ++j) route_rows[t * k + j] = next[static_cast<size_t>(route_experts[t * k + j])]++;
}

void moe_route_bwd(const float* logits, int64_t rows, int64_t experts, int64_t k, bool renormalize,
                   const int32_t* route_experts, const float* route_weights, const float* d_weights, float* d_logits) {
  // The selection is constant. Renormalised, w = softmax of the selected logits: dl_e = w_e (g_e -
  // sum_j w_j g_j) at the selected, 0 elsewhere. Otherwise w_j = p_{e_j} of the softmax over every
  // expert: dl_e = p_e (G_e - sum_j w_j g_j), G_e = g_j where e = e_j, else 0.
  for (int64_t t = 0; t < rows; ++t) {
    const float* w = route_weights + t * k;
    const float* g = d_weights + t * k;
    float* d = d_logits + t * experts;
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(w[j]) * g[j];
    if (renormalize) {
      std::fill_n(d, experts, 0.0f);
      for (int64_t j = 0; j < k; ++j) d[route_experts[t * k + j]] = static_cast<float>(w[j] * (g[j] - dot));
      continue;
    }
    const float* l = logits + t * experts;
    const float mx = *std::max_element(l, l + experts);
    double denom = 0;
    for (int64_t e = 0; e < experts; ++e) denom += std::exp(static_cast<double>(l[e] - mx));
    for (int64_t e = 0; e < experts; ++e)
      d[e] = static_cast<float>(std::exp(static_cast<double>(l[e] - mx)) / denom * -dot);
    for (int64_t j = 0; j < k; ++j) d[route_experts[t * k + j]] += static_cast<float>(w[j] * g[j]);
  }
}

void moe_gather(const float* x, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows, float* packed) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < k; ++j)
      std::copy_n(x + t * dim, dim, packed + static_cast<int64_t>(route_rows[t * k + j]) * dim);
}

void moe_combine(const float* packed, int64_t rows, int64_t dim, int64_t k, const int32_t* route_rows,
                 const float* weights, float* y, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    float* out = y + t * dim;
    if (!accumulate) std::fill_n(out, dim, 0.0f);
    for (int64_t j = 0; j < k; ++j) {  // in the token's routing order: the same sum on every run
      const float* in = packed + static_cast<int64_t>(route_rows[t * k + j]) * dim;
      const float w = weights ? weights[t * k + j] : 1.0f;
      for (int64_t i = 0; i < dim; ++i) out[i] += w * in[i];
    }
  }
}

void moe_combine_bwd(const float* dy, const float* packed, int64_t rows, int64_t dim, int64_t k,
                     const int32_t* route_rows, const float* weights, float* d_packed, float* d_weights) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const float* g = dy + t * dim;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = route_rows[t * k + j];
      const float* in = packed + row * dim;
      float* out = d_packed + row * dim;
      const float w = weights[t * k + j];
      double dot = 0;
      for (int64_t i = 0; i < dim; ++i) {
        out[i] = w * g[i];
        dot += static_cast<double>(g[i]) * in[i];
      }
      d_weights[t * k + j] = static_cast<float>(dot);
    }
  }
}

// The load-balancing loss: every row's softmax in double (the router's probabilities), rows in order.
void moe_aux_statistics(const float* logits, int64_t rows, int64_t experts, int64_t k, const int32_t* route_experts,
                        double* counts, double* prob_sums) {
  std::vector<double> p(static_cast<size_t>(experts));
  for (int64_t t = 0; t < rows; ++t) {
    const float* l = logits + t * experts;
    const double m = *std::max_element(l, l + experts);
    double z = 0;
    for (int64_t e = 0; e < experts; ++e) z += p[static_cast<size_t>(e)] = std::exp(static_cast<double>(l[e]) - m);
    for (int64_t e = 0; e < experts; ++e) prob_sums[e] += p[static_cast<size_t>(e)] / z;
    for (int64_t j = 0; j < k; ++j) counts[route_experts[t * k + j]] += 1;
  }
}

void moe_aux_grad(const float* logits, int64_t rows, int64_t experts, const float* shares, float scale,
                  float* d_logits) {
  std::vector<double> p(static_cast<size_t>(experts));
  for (int64_t t = 0; t < rows; ++t) {
    const float* l = logits + t * experts;
    const double m = *std::max_element(l, l + experts);
    double z = 0, dot = 0;
    for (int64_t e = 0; e < experts; ++e) z += p[static_cast<size_t>(e)] = std::exp(static_cast<double>(l[e]) - m);
    for (int64_t e = 0; e < experts; ++e) dot += p[static_cast<size_t>(e)] / z * shares[e];
    for (int64_t e = 0; e < experts; ++e)
      d_logits[t * experts + e] += static_cast<float>(scale * (p[static_cast<size_t>(e)] / z) * (shares[e] - dot));
  }
}

}  // namespace oomb::executor::cpu
