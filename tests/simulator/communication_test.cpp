// The price of collectives (docs/model.md "Communication"): latency per call and per ring step,
// bytes over the link or the network across nodes, the CPU backend's fp32 staging of bf16 data,
// and a calibrated profile's measured curve. Every expectation is worked out by hand from the
// profile's figures.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "simulator/detail.h"
#include "simulator/simulator.h"
#include "step/buffers.h"
#include "simulator_test_util.h"

namespace oomb::simulator {
namespace {

// The catalog scenario in chunks of 256 tokens, pages of 64.
Scenario scenario(const std::string& model, const std::string& gpu, int64_t context) {
  Scenario s = testing::scenario(model, gpu, context);
  s.config.chunk_tokens = 256;
  s.config.page_tokens = 64;
  return s;
}

// A cpu profile with a two-point all-reduce curve at 2 ranks (1 ms for 64 KiB, 100 ms for 64 MiB)
// and the line for other rank counts: 20 us + bytes at 1 GB/s.
models::GpuSpec cpu_profile_with_curve() {
  Json j = models::load_gpu("h200").to_json();
  j["id"] = "cpu-curve";
  j["kind"] = "cpu";
  j["hbm_bytes_per_s"] = 10e9;
  j["efficiency"]["memory_bound"] = 0.5;
  j["interconnect_bytes_per_s"] = 1e9;
  j["collective_latency_s"] = 2e-5;
  j["collective_step_latency_s"] = 0.0;
  j["allreduce_curve"] = {{"ranks", 2},
                          {"points", Json::array({Json{{"bytes", 65536}, {"seconds", 1e-3}},
                                                  Json{{"bytes", 67108864}, {"seconds", 0.1}}})}};
  return models::gpu_from_json(j, "test profile");
}

TEST(Communication, TensorParallelAllReducesPayNcclLatencyPerCall) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.config.gpus = 2;
  const Summary sum = evaluate(s);
  ASSERT_GT(sum.tp_allreduces, 0);
  // h200: NCCL's ring latency 8.4 us + 2 (N - 1) x 3.4 us; bf16 bytes over 450 GB/s, ring factor
  // 2 (N - 1) / N = 1 for two ranks; no staging on a GPU profile.
  const double latency = 8.4e-6 + 2 * 3.4e-6;
  const double expected = static_cast<double>(sum.tp_allreduces) * latency +
                          static_cast<double>(sum.tp_allreduce_bytes) / 450e9;
  EXPECT_NEAR(sum.tp_allreduce_s, expected, 1e-9 * expected);
  // The latency is most of it for tiny's small messages.
  EXPECT_GT(static_cast<double>(sum.tp_allreduces) * latency, 0.5 * sum.tp_allreduce_s);
}

TEST(Communication, DataParallelAcrossNodesCrossesTheNetwork) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.config.optimizer = step::Optimizer::gpu;
  s.config.data_parallel = 4;
  const Summary one_node = evaluate(s);
  ASSERT_GT(one_node.allreduce_bytes, 0);
  const double bytes = static_cast<double>(one_node.allreduce_bytes);
  // One all-reduce per gradient bucket (the head, each layer, the embedding), each paying the latency.
  const auto buckets = step::gradient_buckets(s.model, s.config, step::geometry(s.model, s.config));
  ASSERT_EQ(buckets.size(), static_cast<size_t>(s.model.layers) + 2);
  int64_t sum = 0;
  for (const auto& b : buckets) sum += b.bytes;
  EXPECT_EQ(sum, one_node.allreduce_bytes);
  const double calls = static_cast<double>(buckets.size());
  EXPECT_NEAR(one_node.allreduce_s, calls * (8.4e-6 + 6 * 3.4e-6) + 1.5 * bytes / 450e9, 1e-12);
  s.config.nodes = 2;
  const Summary two_nodes = evaluate(s);
  // dgx-h200: 50 GB/s per GPU over the network, 9.6 us per network step; 2 of the 6 steps cross.
  EXPECT_EQ(s.host.network_bytes_per_s, 50e9);
  EXPECT_NEAR(two_nodes.allreduce_s, calls * (8.4e-6 + 4 * 3.4e-6 + 2 * 9.6e-6) + 1.5 * bytes / 50e9, 1e-12);
  EXPECT_GE(two_nodes.step_s, one_node.step_s);
}

// NCCL's buckets run on their own stream from when each gradient is final: only what outlasts the
// last backward is in the step. MPI's (a cpu profile) run on the compute thread: all of it is.
TEST(Communication, GpuBucketsOverlapTheLastBackward) {
  Scenario s = scenario("qwen2.5-0.5b", "h200", 8192);
  s.config.chunk_tokens = 4096;
  s.config.page_tokens = 128;
  s.config.optimizer = step::Optimizer::gpu;
  Scenario one = s;
  const Summary alone = evaluate(one);
  s.config.data_parallel = 8;
  s.config.nodes = 8;  // the network's 50 GB/s: long enough to see
  const Summary dp = evaluate(s);
  ASSERT_GT(dp.allreduce_s, 0);
  const double exposed = detail::gradient_allreduce_exposed_s(s, detail::geometry(s));
  EXPECT_LT(exposed, dp.allreduce_s);
  EXPECT_NEAR(dp.step_s - alone.step_s, exposed, 1e-9 * dp.step_s);
  // The event path times the same chain on its comm stream.
  const EventResult ev = simulate_events(s, traces::Detail::layer);
  EXPECT_NEAR(ev.summary.step_s / dp.step_s, 1.0, 0.05);
  double comm_s = 0;
  for (const auto& e : ev.trace.events)
    if (e.kind == traces::EventKind::collective && e.name == "gradient_allreduce") comm_s += e.duration_ns() * 1e-9;
  EXPECT_NEAR(comm_s, dp.allreduce_s, 1e-6);
}

TEST(Communication, NodesShareTheHostBetweenTheirReplicas) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.config.optimizer = step::Optimizer::host;
  s.config.resident_layers = 1;
  const int64_t rank = evaluate(s).peak_host_bytes;
  ASSERT_GT(rank, 0);
  s.config.data_parallel = 4;
  EXPECT_EQ(step::ranks_per_node(s.config), 4);
  EXPECT_EQ(step::node_host_bytes(rank, s.config), 4 * rank);
  s.config.nodes = 2;
  EXPECT_EQ(step::ranks_per_node(s.config), 2);
  s.config.gpus = 2;  // tensor-parallel groups of 2 inside each node
  EXPECT_EQ(step::ranks_per_node(s.config), 4);
  // Replicas that do not spread evenly are refused by name.
  s.config.gpus = 1;
  s.config.nodes = 3;
  try {
    (void)evaluate(s);
    FAIL() << "4 replicas on 3 nodes accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.where(), "--nodes");
  }
}

TEST(Communication, CpuBackendStagesBf16ThroughFp32OnTheMeasuredCurve) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.gpu = cpu_profile_with_curve();
  s.config.optimizer = step::Optimizer::gpu;
  s.config.param_grad_dtype = Dtype::bf16;
  s.config.data_parallel = 2;
  const Summary sum = evaluate(s);
  const double bytes = static_cast<double>(sum.allreduce_bytes);
  // Each bucket in fp32 on the wire (twice its bf16 bytes), priced log-log between the two points
  // (below the first point: the first point's time); the conversions move 6 bytes per bf16 byte at
  // 10 GB/s x 0.5. The bucket all-reduces run on the compute thread: all of it is in the step.
  const auto buckets = step::gradient_buckets(s.model, s.config, step::geometry(s.model, s.config));
  double wire = 0;
  for (const auto& b : buckets) {
    ASSERT_TRUE(b.bf16);
    const double w = 2.0 * static_cast<double>(b.bytes);
    ASSERT_LT(w, 67108864.0);
    wire += w <= 65536.0 ? 1e-3 : 1e-3 * std::pow(100.0, std::log(w / 65536.0) / std::log(1024.0));
  }
  EXPECT_NEAR(sum.allreduce_s, wire + 6 * bytes / 5e9, 1e-12);
  EXPECT_NEAR(detail::gradient_allreduce_exposed_s(s, detail::geometry(s)), sum.allreduce_s, 1e-15);
  // At another rank count the curve does not apply: the line, 20 us + 2 (N - 1) / N x bytes at 1 GB/s.
  s.config.data_parallel = 4;
  const Summary four = evaluate(s);
  EXPECT_NEAR(four.allreduce_s, static_cast<double>(buckets.size()) * 2e-5 + 1.5 * 2 * bytes / 1e9 + 6 * bytes / 5e9,
              1e-12);
}

// A curve with bf16 points (as oomb calibrate writes it) prices bf16 data on them: the staging's
// conversions are in the measurement, not added.
TEST(Communication, Bf16CallsArePricedOnTheBf16Curve) {
  Scenario s = scenario("tiny", "h200", 1024);
  Json j = cpu_profile_with_curve().to_json();
  j["allreduce_curve"]["points"][0]["bf16_seconds"] = 2e-3;
  j["allreduce_curve"]["points"][1]["bf16_seconds"] = 0.3;
  s.gpu = models::gpu_from_json(j, "test profile");
  s.config.optimizer = step::Optimizer::gpu;
  s.config.param_grad_dtype = Dtype::bf16;
  s.config.data_parallel = 2;
  const Summary sum = evaluate(s);
  double expect = 0;
  for (const auto& b : step::gradient_buckets(s.model, s.config, step::geometry(s.model, s.config))) {
    const double x = static_cast<double>(b.bytes);
    expect += x <= 65536.0 ? 2e-3 : 2e-3 * std::pow(150.0, std::log(x / 65536.0) / std::log(1024.0));
  }
  EXPECT_NEAR(sum.allreduce_s, expect, 1e-12);
  // One point with bf16 and one without is refused.
  j["allreduce_curve"]["points"][1].erase("bf16_seconds");
  EXPECT_THROW((void)models::gpu_from_json(j, "p.json"), Error);
}

TEST(Communication, CurveIsCheckedOnLoad) {
  Json j = models::load_gpu("h200").to_json();
  j["allreduce_curve"] = {{"ranks", 2},
                          {"points", Json::array({Json{{"bytes", 4096}, {"seconds", 1e-5}},
                                                  Json{{"bytes", 4096}, {"seconds", 2e-5}}})}};
  try {
    (void)models::gpu_from_json(j, "p.json");
    FAIL() << "points out of order accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ascending"), std::string::npos) << e.what();
  }
  j["allreduce_curve"]["ranks"] = 1;
  EXPECT_THROW((void)models::gpu_from_json(j, "p.json"), Error);
}

TEST(Communication, TimelineShowsEachPassAllReduces) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.config.gpus = 2;
  s.config.optimizer = step::Optimizer::gpu;
  s.config.data_parallel = 2;
  const EventResult r = simulate_events(s, traces::Detail::layer);
  double tp_s = 0, dp_s = 0;
  int64_t tp_bytes = 0;
  for (const auto& e : r.trace.events) {
    if (e.kind != traces::EventKind::collective) continue;
    EXPECT_EQ(e.lane, traces::Lane::comm);
    if (e.name == "tp_allreduce") {
      tp_s += static_cast<double>(e.duration_ns()) * 1e-9;
      tp_bytes += e.bytes;
    } else {
      EXPECT_EQ(e.name, "gradient_allreduce");
      dp_s += static_cast<double>(e.duration_ns()) * 1e-9;
    }
  }
  // The events add up to the summary's figures (to the nanosecond rounding of each event).
  EXPECT_NEAR(tp_s, r.summary.tp_allreduce_s, 1e-6);
  EXPECT_NEAR(static_cast<double>(tp_bytes), static_cast<double>(r.summary.tp_allreduce_bytes),
              1e-6 * static_cast<double>(r.summary.tp_allreduce_bytes));
  EXPECT_NEAR(dp_s, r.summary.allreduce_s, 1e-8);
}

// ZeRO-1 (--shard-optimizer): each replica holds 1/D of the AdamW state, its gradient and weight
// buffers padded to a multiple of D; instead of the gradient buckets, the gradients are
// reduce-scattered before the update and the weights all-gathered after it, each half of a ring
// all-reduce over NCCL (a GPU profile).
TEST(Communication, ShardedOptimizerHoldsAShardAndReduceScattersThenGathers) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.config.optimizer = step::Optimizer::gpu;
  s.config.param_dtype = Dtype::bf16;
  s.config.param_grad_dtype = Dtype::fp32;
  s.config.data_parallel = 2;
  Scenario z = s;
  z.config.shard_optimizer = true;
  const step::Geometry g = step::geometry(z.model, z.config);
  const step::OptimizerShard o = step::optimizer_shard(z.model, z.config, g);
  ASSERT_TRUE(o.sharded);
  EXPECT_EQ(o.shard, (o.trained + 1) / 2);
  EXPECT_EQ(o.padded, 2 * o.shard);
  auto category = [](const Scenario& x, const std::string& cat) {
    int64_t b = 0;
    for (const auto& r : memory_table(x).rows)
      if (r.category == cat) b += r.bytes;
    return b;
  };
  // master (4) + m and v (8) + the decay mask (1) per element: all of them, or the shard.
  EXPECT_EQ(category(s, "optimizer_state"), 13 * o.trained);
  EXPECT_EQ(category(z, "optimizer_state"), 13 * o.shard);
  EXPECT_EQ(category(z, "weights"), 2 * o.padded);
  EXPECT_EQ(category(z, "parameter_gradients"), 4 * o.padded);
  const Summary a = evaluate(s), b = evaluate(z);
  {
    // The peak falls by the state's half (tiny's is inside the allocator's block rounding).
    Scenario s5 = s, z5 = z;
    s5.model = z5.model = models::load_model("qwen2.5-0.5b");
    const step::OptimizerShard o5 = step::optimizer_shard(z5.model, z5.config, step::geometry(z5.model, z5.config));
    EXPECT_LT(evaluate(z5).peak_device_bytes, evaluate(s5).peak_device_bytes - 12 * o5.shard);
  }
  // The bytes: the gradients reduce-scattered (fp32) and the weights gathered (bf16), per rank.
  EXPECT_EQ(b.allreduce_bytes, 6 * o.padded);
  // Each half a ring all-reduce on h200: (8.4 us + 2 x 3.4 us + bytes / 450 GB/s) / 2 (two ranks:
  // 2 (N - 1) / N = 1).
  const double latency = 8.4e-6 + 2 * 3.4e-6;
  const double rs = 0.5 * (latency + 4.0 * static_cast<double>(o.padded) / 450e9);
  const double ag = 0.5 * (latency + 2.0 * static_cast<double>(o.padded) / 450e9);
  EXPECT_NEAR(b.allreduce_s, rs + ag, 1e-12);
  // Around the update, on the compute stream: all of it is in the step (no buckets to overlap).
  EXPECT_NEAR(detail::gradient_allreduce_exposed_s(z, detail::geometry(z)), rs + ag, 1e-12);
  EXPECT_NEAR(detail::optimizer_update_s(z), 0.5 * detail::optimizer_update_s(s),
              1e-3 * detail::optimizer_update_s(s));
  // The event simulation has both collectives, with their bytes, and the fast path's step.
  const EventResult r = simulate_events(z, traces::Detail::layer);
  double rs_s = 0, ag_s = 0;
  for (const auto& e : r.trace.events) {
    if (e.kind != traces::EventKind::collective) continue;
    EXPECT_NE(e.name, "gradient_allreduce");
    if (e.name == "gradient_reduce_scatter") {
      rs_s += static_cast<double>(e.duration_ns()) * 1e-9;
      EXPECT_EQ(e.bytes, 4 * o.padded);
    } else if (e.name == "weight_all_gather") {
      ag_s += static_cast<double>(e.duration_ns()) * 1e-9;
      EXPECT_EQ(e.bytes, 2 * o.padded);
    }
  }
  EXPECT_NEAR(rs_s, rs, 2e-9);
  EXPECT_NEAR(ag_s, ag, 2e-9);
  EXPECT_NEAR(r.summary.step_s, b.step_s, 1e-6 * b.step_s);
  EXPECT_EQ(r.summary.peak_device_bytes, b.peak_device_bytes);
  // With the optimizer on the host, the host's copies are the shard's too.
  s.config.optimizer = z.config.optimizer = step::Optimizer::host;
  EXPECT_EQ(evaluate(z).d2h_bytes - evaluate(s).d2h_bytes, 4 * (o.shard - o.trained));
}

// The CPU backend (MPI): the reduce-scatter is an all-reduce of the whole buffer (Open MPI's
// all-reduce beats its reduce-scatter on one node), priced on the curve; the all-gather on the
// curve's all-gather points where the profile has them, else half the all-reduce.
TEST(Communication, ShardedOptimizerOnTheCpuBackendIsPricedAsMpiRunsIt) {
  Scenario s = scenario("tiny", "h200", 1024);
  Json j = cpu_profile_with_curve().to_json();
  s.gpu = models::gpu_from_json(j, "test profile");
  s.config.optimizer = step::Optimizer::gpu;
  s.config.param_dtype = Dtype::bf16;
  s.config.param_grad_dtype = Dtype::fp32;
  s.config.data_parallel = 2;
  s.config.shard_optimizer = true;
  const step::OptimizerShard o = step::optimizer_shard(s.model, s.config, step::geometry(s.model, s.config));
  auto on_curve = [](double bytes, double t0, double t1) {
    return bytes <= 65536.0 ? t0 : t0 * std::pow(t1 / t0, std::log(bytes / 65536.0) / std::log(1024.0));
  };
  const double gbytes = 4.0 * static_cast<double>(o.padded), wbytes = 2.0 * static_cast<double>(o.padded);
  ASSERT_LT(gbytes, 67108864.0);
  const double rs = on_curve(gbytes, 1e-3, 0.1);
  EXPECT_NEAR(evaluate(s).allreduce_s, rs + 0.5 * on_curve(wbytes, 1e-3, 0.1), 1e-12);
  for (auto& p : j["allreduce_curve"]["points"]) p["all_gather_seconds"] = p["seconds"].get<double>() / 4;
  s.gpu = models::gpu_from_json(j, "test profile");
  EXPECT_NEAR(evaluate(s).allreduce_s, rs + on_curve(wbytes, 0.25e-3, 0.025), 1e-12);
  // Some points with all-gathers and some without: refused.
  j["allreduce_curve"]["points"][1].erase("all_gather_seconds");
  EXPECT_THROW((void)models::gpu_from_json(j, "p.json"), Error);
}

TEST(Communication, ShardedOptimizerNeedsReplicasAndAFullFineTune) {
  Scenario s = scenario("tiny", "h200", 1024);
  s.config.optimizer = step::Optimizer::gpu;
  s.config.shard_optimizer = true;
  auto refused = [&](const Scenario& x, const std::string& why) {
    try {
      (void)evaluate(x);
      ADD_FAILURE() << "accepted: " << why;
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find("--shard-optimizer"), std::string::npos) << w;
      EXPECT_NE(w.find(why), std::string::npos) << w;
    }
  };
  refused(s, "there is one");  // one replica
  s.config.data_parallel = 2;
  s.config.optimizer = step::Optimizer::none;
  refused(s, "there is no optimizer");
  s.config.optimizer = step::Optimizer::gpu;
  s.config.lora_rank = 8;
  refused(s, "LoRA");
  s.config.lora_rank = 0;
  EXPECT_NO_THROW((void)evaluate(s));
}

}  // namespace
}  // namespace oomb::simulator
