// The run's one record (step/run_record.h): what to_json writes run_record_from_json reads back, the
// collectives' blocks only where the run had that parallelism, and records of older layouts.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "step/run_record.h"

namespace oomb::step {
namespace {

RunRecord sparse_tp_dp_run() {
  RunRecord r;
  r.model = "tiny";
  r.layers = 2;
  r.config.context_tokens = 4096;
  r.config.attention = Attention::sparse;
  r.config.gpus = 2;
  r.config.data_parallel = 3;
  r.config.kv_dtype = r.kv_dtype = Dtype::bf16;
  r.config.param_grad_dtype = Dtype::bf16;
  r.param_grad_dtype = Dtype::fp32;  // stored otherwise than configured (LoRA's adapters' gradients)
  r.backend = "cpu";
  r.notes = {"buffer logits: the plan budgets more"};
  r.kv_page_bytes = 8192;
  r.kv_pool_pages = 17;
  r.kv_pool_high_water_pages = 7;
  r.peak_device_bytes = 123456789;
  r.device_breakdown_bytes = {{"weights", 1000}, {"kv_pages", 2000}};
  r.row_high_water_bytes = {{"kv_pool", 2000}};
  r.phase_high_water_bytes = {{Phase::fill, 3}, {Phase::backward, 5}};
  r.h2d_bytes = 11;
  r.copy_regions = 3;
  r.host_syncs = 1;
  r.rank = 4;
  r.world = 6;
  r.comm = "mpi";
  r.allreduce_bytes = 640;
  r.allreduce_s = 0.5;
  r.allreduce_wait_s = 0.125;
  r.allreduce_transfer_s = 0.375;
  r.tp = 2;
  r.tp_rank = 0;
  r.tp_allreduces = 9;
  r.tp_allreduce_bytes = 4608;
  r.tp_allreduce_s = 0.25;
  r.tp_allreduce_transfer_s = 0.25;
  r.union_pages = {{1, 0, 4}, {1, 1, 6}};
  r.recall = {{0, 0, 1.0}, {1, 0, 0.25}, {1, 1, 0.5}};
  r.step_s = 2.5;
  r.step_times_s = {3.0, 2.0};
  r.tokens_per_s = 1638.4;
  r.loss = 5.5;
  r.steps = 2;
  return r;
}

TEST(RunRecord, WhatIsWrittenIsReadBack) {
  const RunRecord w = sparse_tp_dp_run();
  const Json extra = to_json(w);
  const RunRecord r = run_record_from_json(extra, "t.json");
  EXPECT_EQ(r.model, w.model);
  EXPECT_EQ(r.layers, w.layers);
  EXPECT_EQ(r.config.attention, Attention::sparse);
  EXPECT_EQ(r.config.context_tokens, 4096);
  // The configuration as read is the one stored: the measured dtypes replace the configured ones.
  EXPECT_EQ(r.config.param_grad_dtype, Dtype::fp32);
  EXPECT_EQ(r.param_grad_dtype, Dtype::fp32);
  EXPECT_EQ(r.kv_dtype, Dtype::bf16);
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.notes, w.notes);
  EXPECT_EQ(r.kv_page_bytes, w.kv_page_bytes);
  EXPECT_EQ(r.kv_pool_pages, w.kv_pool_pages);
  EXPECT_EQ(r.kv_pool_high_water_pages, w.kv_pool_high_water_pages);
  EXPECT_EQ(r.peak_device_bytes, w.peak_device_bytes);
  EXPECT_EQ(r.device_breakdown_bytes, w.device_breakdown_bytes);
  EXPECT_EQ(r.row_high_water_bytes, w.row_high_water_bytes);
  EXPECT_EQ(r.phase_high_water_bytes, w.phase_high_water_bytes);
  EXPECT_EQ(r.h2d_bytes, w.h2d_bytes);
  EXPECT_EQ(r.copy_regions, w.copy_regions);
  EXPECT_EQ(r.host_syncs, w.host_syncs);
  EXPECT_EQ(r.rank, w.rank);
  EXPECT_EQ(r.world, w.world);
  EXPECT_EQ(r.comm, w.comm);
  EXPECT_EQ(r.allreduce_bytes, w.allreduce_bytes);
  EXPECT_DOUBLE_EQ(r.allreduce_wait_s, w.allreduce_wait_s);
  EXPECT_DOUBLE_EQ(r.allreduce_transfer_s, w.allreduce_transfer_s);
  EXPECT_EQ(r.tp, 2);
  EXPECT_EQ(r.tp_allreduces, w.tp_allreduces);
  EXPECT_EQ(r.tp_allreduce_bytes, w.tp_allreduce_bytes);
  EXPECT_DOUBLE_EQ(r.tp_allreduce_transfer_s, w.tp_allreduce_transfer_s);
  EXPECT_TRUE(r.collective_times_recorded);
  ASSERT_EQ(r.union_pages.size(), 2u);
  EXPECT_EQ(r.union_pages[1].pages, 6);
  ASSERT_EQ(r.recall.size(), 3u);
  EXPECT_DOUBLE_EQ(r.mean_recall(), w.mean_recall());
  EXPECT_DOUBLE_EQ(r.min_recall(), 0.25);
  EXPECT_DOUBLE_EQ(r.step_s, w.step_s);
  EXPECT_EQ(r.step_times_s, w.step_times_s);
  EXPECT_DOUBLE_EQ(r.loss, w.loss);
  EXPECT_EQ(r.steps, 2);
}

// One process, no recall: no collectives' blocks and no recall keys are written.
TEST(RunRecord, BlocksOnlyForWhatTheRunHad) {
  RunRecord w;
  w.model = "tiny";
  w.config.context_tokens = 256;
  w.backend = "cpu";
  w.steps = 1;
  const Json m = to_json(w)["measured"];
  EXPECT_FALSE(m.contains("tensor_parallel"));
  EXPECT_FALSE(m.contains("data_parallel"));
  EXPECT_FALSE(m.contains("recall"));
  EXPECT_EQ(m["compute_dtype"], Dtype::fp32);
  const RunRecord r = run_record_from_json(to_json(w), "t.json");
  EXPECT_EQ(r.tp, 1);
  EXPECT_EQ(r.world, 1);
  EXPECT_TRUE(r.recall.empty());
  EXPECT_EQ(r.mean_recall(), 0.0);
  // Tensor parallelism alone: its block, not the data-parallel one.
  RunRecord tp = sparse_tp_dp_run();
  tp.world = 2;
  const Json tm = to_json(tp)["measured"];
  EXPECT_TRUE(tm.contains("tensor_parallel"));
  EXPECT_FALSE(tm.contains("data_parallel"));
}

// Records of older layouts: the collectives' totals without the wait told apart, the recall's mean
// and minimum without the samples, no measured dtypes (fp32 then).
TEST(RunRecord, OlderLayoutsAreReadAsTheyWere) {
  Json extra = to_json(sparse_tp_dp_run());
  Json& m = extra["measured"];
  for (const char* block : {"tensor_parallel", "data_parallel"}) {
    m[block].erase("allreduce_wait_s");
    m[block].erase("allreduce_transfer_s");
  }
  m.erase("recall");
  m["mean_recall"] = 0.5;
  m["min_recall"] = 0.25;
  for (const char* d : {"kv_dtype", "kv_grad_dtype", "param_dtype", "param_grad_dtype", "activation_dtype", "loss_dtype"})
    m.erase(d);
  const RunRecord r = run_record_from_json(extra, "old.json");
  EXPECT_FALSE(r.collective_times_recorded);
  EXPECT_EQ(r.tp_allreduce_bytes, 4608);
  EXPECT_GT(r.world, r.tp);  // the data-parallel block was there
  EXPECT_TRUE(r.recall.empty());
  EXPECT_DOUBLE_EQ(r.mean_recall(), 0.5);
  EXPECT_DOUBLE_EQ(r.min_recall(), 0.25);
  EXPECT_EQ(r.config.kv_dtype, Dtype::fp32);
}

TEST(RunRecord, ASectionThatRecordsNoRunIsRefused) {
  EXPECT_THROW(run_record_from_json(Json::object(), "sim.json"), Error);
  Json extra = to_json(sparse_tp_dp_run());
  extra["schema"] = "oomb.run/9";
  EXPECT_THROW(run_record_from_json(extra, "t.json"), Error);
  extra["schema"] = kRunRecordSchema;
  EXPECT_NO_THROW(run_record_from_json(extra, "t.json"));
}

}  // namespace
}  // namespace oomb::step
