// Page selection on the GPU (published rule and per KV head) against the CPU reference. Exact ties
// must be broken the same way (lowest page); near ties (within rounding of the fp32 scores) may go
// either way, so a differing page is accepted only when its score, recomputed in double here, is
// within kTieTol of the selection boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_test_util.h"

namespace oomb::executor::cudatest {
namespace {

constexpr double kTieTol = 1e-5;  // relative: fp32 scores, different summation order

// The rule in double: acc[(j * groups + gsel) * P + k].
std::vector<double> reference_scores(const SelectionArgs& a, const std::vector<float>& q,
                                     const std::vector<float>& summaries) {
  const int64_t group = a.q_heads / a.kv_heads, hd = a.head_dim, kvd = a.kv_heads * hd, qd = a.q_heads * hd;
  const int64_t P = a.prefix_pages, groups = a.per_kv_head ? a.kv_heads : 1;
  const int64_t qpages = (a.rows + a.page_tokens - 1) / a.page_tokens;
  std::vector<double> acc(static_cast<size_t>(qpages * groups * P), 0.0), s(static_cast<size_t>(P));
  const double sc = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t g = 0; g < a.kv_heads; ++g)
    for (int64_t i = 0; i < a.rows; ++i) {
      double mx = -1e300;
      for (int64_t k = 0; k < P; ++k) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) {
          double qs = 0;
          for (int64_t h = g * group; h < (g + 1) * group; ++h) qs += q[static_cast<size_t>(i * qd + h * hd + d)];
          dot += qs * summaries[static_cast<size_t>(k * kvd + g * hd + d)];
        }
        s[static_cast<size_t>(k)] = sc * dot;
        mx = std::max(mx, s[static_cast<size_t>(k)]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      double* dst = acc.data() + ((i / a.page_tokens) * groups + (a.per_kv_head ? g : 0)) * P;
      for (int64_t k = 0; k < P; ++k) dst[k] += s[static_cast<size_t>(k)] / sum;
    }
  return acc;
}

// got agrees with want (the CPU's selection) up to near ties of the double reference scores.
void expect_agree_up_to_near_ties(const SelectionArgs& a, const std::vector<std::vector<int32_t>>& got,
                                  const std::vector<std::vector<int32_t>>& want, const std::vector<double>& ref) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t row = 0; row < want.size(); ++row) {
    ASSERT_EQ(got[row].size(), static_cast<size_t>(a.budget));
    EXPECT_TRUE(std::is_sorted(got[row].begin(), got[row].end()));
    if (got[row] == want[row]) continue;
    const double* r = ref.data() + row * static_cast<size_t>(a.prefix_pages);
    std::vector<double> sorted(r, r + a.prefix_pages);
    std::nth_element(sorted.begin(), sorted.begin() + (a.budget - 1), sorted.end(), std::greater<>());
    const double boundary = sorted[static_cast<size_t>(a.budget - 1)];
    std::vector<int32_t> diff;
    std::set_symmetric_difference(got[row].begin(), got[row].end(), want[row].begin(), want[row].end(),
                                  std::back_inserter(diff));
    for (int32_t page : diff)
      EXPECT_LE(std::abs(r[page] - boundary), kTieTol * boundary)
          << "rows " << a.rows << " P " << a.prefix_pages << " per_head " << a.per_kv_head << " query page " << row
          << ": page " << page << " is not a near tie";
  }
}

struct SelCase {
  int64_t rows, qh, kvh, hd, p, P, B;
};

SelectionArgs args_of(const SelCase& c, bool per_head) {
  SelectionArgs a;
  a.rows = c.rows;
  a.q_heads = c.qh;
  a.kv_heads = c.kvh;
  a.head_dim = c.hd;
  a.page_tokens = c.p;
  a.prefix_pages = c.P;
  a.budget = c.B;
  a.per_kv_head = per_head;
  return a;
}

class CudaSelection : public CudaTest {
 protected:
  // Random queries and summaries of case c (a seed for each): the GPU's selection against the CPU's.
  void check_case(const SelCase& c, bool per_head, uint64_t q_seed, uint64_t s_seed) {
    const auto q = random_vec(c.rows * c.qh * c.hd, q_seed), s = random_vec(c.P * c.kvh * c.hd, s_seed);
    const SelectionArgs a = args_of(c, per_head);
    SelectionArgs ac = a;
    ac.q = q.data();
    ac.summaries = s.data();
    expect_agree_up_to_near_ties(a, run_gpu(a, q, s), cpu.select_pages(ac), reference_scores(a, q, s));
  }
  std::vector<std::vector<int32_t>> run_gpu(const SelectionArgs& host, const std::vector<float>& q,
                                            const std::vector<float>& summaries) {
    DeviceVec<float> d_q(*gpu, q), d_s(*gpu, summaries);
    SelectionArgs a = host;
    a.q = d_q.get();
    a.summaries = d_s.get();
    return gpu->select_pages(a);
  }
};

TEST_F(CudaSelection, PicksTheAlignedPagesAndBreaksExactTiesLow) {
  const int64_t qh = 4, kvh = 2, hd = 2, p = 2, rows = 4;
  std::vector<float> q(rows * qh * hd, 0.0f), sum(4 * kvh * hd, 0.0f);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < qh; ++h) q[(t * qh + h) * hd + (t < 2 ? 0 : 1)] = 1.0f;
  for (int64_t g = 0; g < kvh; ++g) {
    sum[(2 * kvh + g) * hd + 0] = 5.0f;
    sum[(1 * kvh + g) * hd + 1] = 5.0f;
    sum[(3 * kvh + g) * hd + 0] = 4.0f;
  }
  SelectionArgs a;
  a.rows = rows;
  a.q_heads = qh;
  a.kv_heads = kvh;
  a.head_dim = hd;
  a.page_tokens = p;
  a.prefix_pages = 4;
  a.budget = 2;
  const auto sel = run_gpu(a, q, sum);
  ASSERT_EQ(sel.size(), 2u);
  EXPECT_EQ(sel[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(sel[1], (std::vector<int32_t>{0, 1}));
  a.per_kv_head = true;
  const auto per_head = run_gpu(a, q, sum);
  ASSERT_EQ(per_head.size(), 4u);
  EXPECT_EQ(per_head[0], (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(per_head[1], (std::vector<int32_t>{2, 3}));
}

TEST_F(CudaSelection, RandomInputsAgreeWithTheCpuUpToNearTies) {
  for (const SelCase& c : {SelCase{1, 2, 1, 8, 4, 3, 1}, SelCase{3, 4, 2, 8, 4, 5, 2}, SelCase{7, 7, 1, 16, 4, 9, 4},
                           SelCase{17, 4, 2, 12, 8, 20, 7}, SelCase{256, 28, 4, 128, 64, 300, 64},
                           SelCase{128, 8, 2, 64, 128, 3000, 5}}) {
    for (bool per_head : {false, true}) check_case(c, per_head, 11 + c.rows, 12 + c.P);
  }
}

// Tensor parallelism (the published rule): SelectionArgs::reduce_scores sums the ranks' scores in
// place before the top-k; on the CUDA backend it gets the device scores, [query pages x groups x
// prefix pages]. A "reduction" that adds 100 to every third page's score (more than a query page's
// probabilities can sum to: p tokens x KV heads = 16) must make those pages the selection, on both
// backends.
TEST_F(CudaSelection, ReducedScoresAreWhatTheTopKSelects) {
  const SelCase c{17, 4, 2, 12, 8, 20, 7};
  std::vector<int32_t> every_third;
  for (int32_t k = 0; k < c.P; k += 3) every_third.push_back(k);
  ASSERT_EQ(static_cast<int64_t>(every_third.size()), c.B);
  for (bool per_head : {false, true}) {
    const auto q = random_vec(c.rows * c.qh * c.hd, 31), s = random_vec(c.P * c.kvh * c.hd, 32);
    const int64_t qpages = (c.rows + c.p - 1) / c.p, groups = per_head ? c.kvh : 1, n = qpages * groups * c.P;
    auto bonus = [&](double* scores) {
      for (int64_t i = 0; i < n; ++i) scores[i] += (i % c.P) % 3 == 0 ? 100.0 : 0.0;
    };
    SelectionArgs ac = args_of(c, per_head);
    ac.q = q.data();
    ac.summaries = s.data();
    int64_t cpu_n = -1, gpu_n = -1;
    ac.reduce_scores = [&](double* scores, int64_t count) {
      cpu_n = count;
      bonus(scores);
    };
    DeviceVec<float> d_q(*gpu, q), d_s(*gpu, s);
    SelectionArgs ag = args_of(c, per_head);
    ag.q = d_q.get();
    ag.summaries = d_s.get();
    ag.reduce_scores = [&](double* scores, int64_t count) {  // device memory: read, add, write back
      gpu_n = count;
      std::vector<double> h(static_cast<size_t>(count));
      gpu->download(h.data(), scores, count * 8);
      bonus(h.data());
      gpu->upload(scores, h.data(), count * 8);
    };
    const auto want = cpu.select_pages(ac), got = gpu->select_pages(ag);
    EXPECT_EQ(cpu_n, n);
    EXPECT_EQ(gpu_n, n);
    ASSERT_EQ(got.size(), static_cast<size_t>(qpages * groups));
    for (size_t row = 0; row < got.size(); ++row) {
      EXPECT_EQ(want[row], every_third) << "cpu, row " << row;
      EXPECT_EQ(got[row], every_third) << "gpu, row " << row;
    }
  }
}

// One-token pages: the grid's y limit + 465 query pages (66,000 on a GPU; x 2 KV heads per head) put
// the score kernel's grid past the limit in y; its blocks stride over the rest (launch_shape.h), so
// every query page is scored.
TEST_F(CudaSelection, QueryPagesPastTheGridLimitAreAllSelected) {
  OOMB_SKIP_AT_THE_HARDWARE_GRID_LIMIT_ON_EMULATED_DEVICE();
  const SelCase c{grid_yz_limit() + 465, 2, 2, 4, 1, 3, 1};
  for (bool per_head : {false, true}) check_case(c, per_head, 21, 22);
}

}  // namespace
}  // namespace oomb::executor::cudatest

namespace oomb::executor::cudatest {
namespace {

// Bounded selection memory keeps the summaries in the host tier (pinned, mapped): the backend stages
// them into device scratch once per call, so the selection is the one the same values in device
// memory give, bit for bit, and agrees with the CPU up to near ties. Shapes off the kernels' tiles
// (rows not a multiple of 32, pages not a multiple of 64, head_dim not a multiple of 32).
TEST_F(CudaSelection, HostTierSummariesAreStagedAndSelectLikeDeviceOnes) {
  for (const SelCase& c : {SelCase{200, 28, 4, 128, 64, 701, 64}, SelCase{45, 6, 3, 40, 16, 130, 9}}) {
    for (bool per_head : {false, true}) {
      const auto q = random_vec(c.rows * c.qh * c.hd, 21 + c.rows), s = random_vec(c.P * c.kvh * c.hd, 22 + c.P);
      const SelectionArgs a = args_of(c, per_head);
      const auto on_device = run_gpu(a, q, s);
      Buffer host(*gpu, Tier::host, static_cast<int64_t>(s.size()) * 4);
      std::copy(s.begin(), s.end(), host.f32());
      DeviceVec<float> d_q(*gpu, q);
      SelectionArgs ah = a;
      ah.q = d_q.get();
      ah.summaries = host.f32();
      const auto staged = gpu->select_pages(ah);
      EXPECT_EQ(staged, on_device) << "rows " << c.rows << " per_head " << per_head;
      SelectionArgs ac = a;
      ac.q = q.data();
      ac.summaries = s.data();
      expect_agree_up_to_near_ties(a, staged, cpu.select_pages(ac), reference_scores(a, q, s));
    }
  }
}

}  // namespace
}  // namespace oomb::executor::cudatest
