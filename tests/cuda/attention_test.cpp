// Paged flash attention of the CUDA backend against the CPU reference: forward (o, lse) and
// backward (dq, own dk / dv overwritten, prefix gradient pages accumulated onto what they held),
// dense and selected (one set per query page, and per KV head), GQA ratios 1, 2, 7, head sizes from
// 4 to 128 (the generic path included), ragged chunks and pages, empty prefix, empty selections;
// local layers' windows (sliding and chunked).
#include <gtest/gtest.h>

#include <algorithm>

#include "cuda_test_util.h"

namespace oomb::executor::cudatest {
namespace {

// fp32 on both sides; different blocking and summation order, expf vs the CPU's polynomial exp.
constexpr double kForwardTol = 2e-5;
constexpr double kBackwardTol = 5e-5;

struct Case {
  const char* name;
  int64_t T, qh, kvh, hd, p, U;
  int select_groups;  // 0 dense, 1 shared, -1 per KV head
  // A local layer (sliding window or chunked block; the prefix the U pages right before the chunk).
  models::LayerAttention local = models::LayerAttention::global;
  int64_t window = 0;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

class CudaAttention : public CudaParamTest<Case> {};

TEST_P(CudaAttention, ForwardAndBackwardMatchTheCpu) {
  const Case c = GetParam();
  const int64_t qd = c.qh * c.hd, kvd = c.kvh * c.hd, page = 2 * c.p * kvd;
  const int64_t qpages = (c.T + c.p - 1) / c.p;
  const auto q = random_vec(c.T * qd, 1, 0.5f), k = random_vec(c.T * kvd, 2, 0.5f), v = random_vec(c.T * kvd, 3);
  const auto pages = random_vec(std::max<int64_t>(c.U * page, 1), 4, 0.5f);
  const auto dout = random_vec(c.T * qd, 5);
  const auto grads0 = random_vec(std::max<int64_t>(c.U * page, 1), 6);  // gradient pages already hold sums

  PagedAttention a;
  a.rows = c.T;
  a.q_heads = c.qh;
  a.kv_heads = c.kvh;
  a.head_dim = c.hd;
  a.page_tokens = c.p;
  if (c.local != models::LayerAttention::global) {
    a.local = c.local;
    a.window = c.window;
    a.q_pos0 = c.U * c.p;
    for (int64_t u = 0; u < c.U; ++u) a.prefix_ids.push_back(u);
  }
  if (c.select_groups != 0) {
    a.select_groups = c.select_groups == 1 ? 1 : c.kvh;
    a.select = selections(qpages * a.select_groups, c.U, 7);
  }
  // CPU side.
  PagedAttention ac = a;
  ac.q = q.data();
  ac.k_own = k.data();
  ac.v_own = v.data();
  auto gc = grads0;
  std::vector<float*> gpc;
  for (int64_t u = 0; u < c.U; ++u) {
    ac.prefix_pages.push_back(pages.data() + u * page);
    gpc.push_back(gc.data() + u * page);
  }
  std::vector<float> o(c.T * qd), lse(c.T * c.qh), dq(o.size()), dk(k.size()), dv(v.size());
  cpu.attention_fwd(ac, o.data(), lse.data());
  cpu.attention_bwd(ac, o.data(), lse.data(), dout.data(), dq.data(), dk.data(), dv.data(), gpc);

  // GPU side: the same pages, as separate device pointers in the same slot order.
  DeviceVec<float> d_q(*gpu, q), d_k(*gpu, k), d_v(*gpu, v), d_pages(*gpu, pages), d_dout(*gpu, dout),
      d_grads(*gpu, grads0);
  DeviceVec<float> d_o(*gpu, std::vector<float>(o.size())), d_lse(*gpu, std::vector<float>(lse.size())),
      d_dq(*gpu, std::vector<float>(dq.size(), 9.0f)), d_dk(*gpu, std::vector<float>(dk.size(), 9.0f)),
      d_dv(*gpu, std::vector<float>(dv.size(), 9.0f));  // 9: the backward must overwrite
  PagedAttention ag = a;
  ag.q = d_q.get();
  ag.k_own = d_k.get();
  ag.v_own = d_v.get();
  std::vector<float*> gpg;
  for (int64_t u = 0; u < c.U; ++u) {
    ag.prefix_pages.push_back(d_pages.get() + u * page);
    gpg.push_back(d_grads.get() + u * page);
  }
  gpu->attention_fwd(ag, d_o.get(), d_lse.get());
  EXPECT_LE(rel_l2(d_o.read(), o), kForwardTol) << "o";
  EXPECT_LE(rel_l2(d_lse.read(), lse), kForwardTol) << "lse";
  // The backward consumes the CPU's o and lse so that only the backward is compared.
  DeviceVec<float> d_oc(*gpu, o), d_lsec(*gpu, lse);
  gpu->attention_bwd(ag, d_oc.get(), d_lsec.get(), d_dout.get(), d_dq.get(), d_dk.get(), d_dv.get(), gpg);
  EXPECT_LE(rel_l2(d_dq.read(), dq), kBackwardTol) << "dq";
  EXPECT_LE(rel_l2(d_dk.read(), dk), kBackwardTol) << "dk own";
  EXPECT_LE(rel_l2(d_dv.read(), dv), kBackwardTol) << "dv own";
  if (c.U > 0) {
    // Compare the accumulated part (what the backward added), not the sums it started from.
    auto got = d_grads.read();
    std::vector<float> added_g(got.size()), added_c(gc.size());
    for (size_t i = 0; i < got.size(); ++i) {
      added_g[i] = got[i] - grads0[i];
      added_c[i] = gc[i] - grads0[i];
    }
    EXPECT_LE(rel_l2(added_g, added_c), kBackwardTol) << "prefix dK/dV";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CudaAttention,
    ::testing::Values(
        // name, T, qh, kvh, hd, p, U, select
        Case{"one_token", 1, 2, 1, 8, 4, 0, 0}, Case{"one_token_prefix", 1, 2, 1, 8, 4, 3, 0},
        Case{"three_rows_gqa1", 3, 2, 2, 16, 4, 2, 0}, Case{"seven_rows_gqa7", 7, 7, 1, 8, 4, 3, 0},
        Case{"seventeen_rows_ragged", 17, 4, 2, 4, 8, 5, 0}, Case{"hd12_generic", 37, 4, 2, 12, 8, 5, 1},
        Case{"hd96_generic", 37, 4, 1, 96, 8, 3, -1}, Case{"hd64", 37, 8, 2, 64, 16, 4, 0},
        Case{"hd128", 40, 4, 2, 128, 8, 3, 1}, Case{"shared_selection", 33, 4, 2, 32, 4, 7, 1},
        Case{"per_head_selection", 33, 4, 2, 32, 4, 7, -1}, Case{"page_longer_than_tile", 70, 2, 1, 16, 64, 2, 1},
        Case{"qwen_shapes", 512, 28, 4, 128, 128, 4, 1},
        // Local layers: the window inside a page, across pages and tiles, longer than the chunk;
        // chunked blocks inside the chunk and reaching back over the boundary.
        Case{"sliding_inside_a_page", 37, 4, 2, 16, 8, 2, 0, models::LayerAttention::sliding, 5},
        Case{"sliding_across_tiles", 90, 4, 2, 32, 16, 3, 0, models::LayerAttention::sliding, 41},
        Case{"sliding_over_the_chunk", 24, 4, 1, 64, 8, 6, 0, models::LayerAttention::sliding, 50},
        Case{"chunked_inside_the_chunk", 70, 4, 2, 16, 8, 2, 0, models::LayerAttention::chunked, 24},
        Case{"chunked_over_the_boundary", 40, 2, 1, 128, 8, 5, 0, models::LayerAttention::chunked, 64}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace oomb::executor::cudatest
