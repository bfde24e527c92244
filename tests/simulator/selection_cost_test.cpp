// The price of a sparse fill pass's page selection (simulator/cost.cpp, selection_cost) is the work
// the CUDA executor's kernels do (executor/cuda/selection.cu): two fp32 CUDA-core products at the
// fp32 rate, the staged summaries read once per 32-token tile and once per query page, the fp64
// scores through the top-k, five launches; and a sparse fill pass's compute includes it.
#include <gtest/gtest.h>

#include <cmath>

#include "simulator/detail.h"

namespace oomb::simulator {
namespace {

Scenario sparse_7b(const char* selection) {
  Scenario s;
  s.model = models::load_model("qwen2.5-7b");
  s.gpu = models::load_gpu("h200");
  s.host = models::load_host(s.gpu.default_host);
  s.config.context_tokens = 64 * 1024;
  s.config.chunk_tokens = 4096;
  s.config.page_tokens = 128;
  s.config.attention = step::Attention::sparse;
  s.config.page_budget = 64;
  s.config.selection = selection;
  s.config.layers_override = 4;
  return s;
}

TEST(SelectionCost, TwoFp32ProductsAndTheStagedSummariesTraffic) {
  for (const char* rule : {"published", "per-kv-head"}) {
    const Scenario s = sparse_7b(rule);
    const step::Geometry g = detail::geometry(s);
    const int64_t T = 4096, prefix = 480;  // the last chunk: 15 x 4096 / 128 earlier pages
    const double kvd = static_cast<double>(s.model.kv_heads * s.model.head_dim);
    const double groups = std::string(rule) == "per-kv-head" ? static_cast<double>(s.model.kv_heads) : 1.0;
    const double flops = 4.0 * T * kvd * prefix;
    const double summaries = prefix * kvd * 4.0, qpages = 4096.0 / 128.0;
    const double bytes = (2.0 + 4096.0 / 32.0 + qpages) * summaries + 2.0 * qpages * groups * prefix * 8.0;
    const auto& e = s.gpu.efficiency;
    const double want = flops / (s.gpu.fp32_flops_per_s * e.gemm) + bytes / (s.gpu.hbm_bytes_per_s * e.memory_bound) +
                        5 * s.gpu.launch_overhead_s;
    const detail::PassCost p = detail::selection_cost(s, g, T, prefix);
    EXPECT_NEAR(p.compute_s, want, 1e-12 * want) << rule;
    EXPECT_DOUBLE_EQ(p.flops, flops) << rule;
    EXPECT_EQ(p.in_bytes, 0);
    EXPECT_EQ(detail::selection_cost(s, g, T, 0).compute_s, 0.0) << "no earlier pages: nothing to select";
    // The fill pass of the last chunk carries it, on top of the same pass without selection.
    Scenario dense = s;
    dense.config.attention = step::Attention::dense;
    const int64_t last = g.n - 1;
    const detail::ChunkCosts sparse_cc = detail::chunk_costs(s, g, last);
    const detail::ChunkCosts dense_cc = detail::chunk_costs(dense, detail::geometry(dense), last);
    EXPECT_GT(sparse_cc.fill.compute_s - p.compute_s, 0.0);
    EXPECT_LT(sparse_cc.fill.compute_s - p.compute_s, dense_cc.fill.compute_s) << "sparse attends fewer pages";
    EXPECT_NEAR(sparse_cc.fill.flops - p.flops, sparse_cc.recompute.flops, 1e-9 * sparse_cc.recompute.flops)
        << "the fill pass is the recompute's work plus the selection";
  }
}

}  // namespace
}  // namespace oomb::simulator
