// Typed storage (issue #11): weights, parameter gradients, activations and loss tiles stored in the
// config's dtypes (fp32 or bf16, the CPU backend emulating bf16 exactly), the working set allocated
// per phase under the rows of the executor's buffer table, and the plan check at start.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <limits>
#include <set>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "fake_cupti.h"
#include "simulator/simulator.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

constexpr float kInitStd = 0.1f;

step::Config all_bf16(step::Config c) {
  c.param_dtype = c.param_grad_dtype = c.activation_dtype = c.loss_dtype = Dtype::bf16;
  c.kv_dtype = Dtype::bf16;
  c.kv_grad_dtype = Dtype::fp32;
  return c;
}

Weights rounded_to_bf16(Weights w) {
  for (float& x : w.data) x = round_to_bf16(x);
  return w;
}

int64_t row_bytes(const Measured& m, const std::string& name) {
  for (const auto& b : m.buffers)
    if (b.name == name) return b.bytes;
  return -1;
}

// ---- ops: bf16 storage on the CPU backend
TEST(Bf16StorageOps, StoresRoundOnceAndAccumulateInFp32) {
  CpuBackend b;
  // copy fp32 -> bf16 rounds to nearest even; bf16 -> fp32 is exact (round trip of the stored bits).
  const std::vector<float> x = {1.0f, 1.00390625f /* 1 + 2^-8: a tie, to even */, 1.01171875f, -3.1415926f, 65504.5f};
  std::vector<uint16_t> h(x.size());
  std::vector<float> back(x.size());
  b.copy(Tensor(h.data(), DType::bf16), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(h[i], f32_to_bf16(x[i])) << i;
  b.copy(back.data(), ConstTensor(h.data(), DType::bf16), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], round_to_bf16(x[i])) << i;
  EXPECT_EQ(back[1], 1.0f);  // the tie went to the even neighbour

  // An accumulating output in bf16: stored + (fp32 sum of this call's products), rounded once.
  // dW += dy^T x with dy = [1], x = [2^-9] added 4 times in one call would be lost one rounding at
  // a time (1 + 2^-9 rounds back to 1); summed in fp32 first it is 1 + 2^-7, exactly representable.
  const int64_t rows = 4, in = 1, out = 1;
  std::vector<float> xs(rows, 1.0f / 512), dy(rows, 1.0f), w = {0.5f}, dx(rows);
  uint16_t dw = f32_to_bf16(1.0f);
  b.linear_bwd(xs.data(), rows, in, w.data(), out, dy.data(), dx.data(), false, Tensor(&dw, DType::bf16), nullptr);
  EXPECT_EQ(bf16_to_f32(dw), 1.0f + 1.0f / 128);

  // A bf16 GEMM output is the fp32 result rounded once.
  std::vector<float> a = {1.0f, 1.0f / 256, 1.0f / 256}, wv = {1.0f, 1.0f, 1.0f};
  uint16_t y = 0;
  b.linear_fwd(a.data(), 1, 3, wv.data(), nullptr, 1, Tensor(&y, DType::bf16));
  EXPECT_EQ(bf16_to_f32(y), round_to_bf16(1.0f + 2.0f / 256));
}

// ---- the chunk-recurrent step with bf16 storage everywhere (weights, gradients, activations,
// loss tile, KV pages) against the full-sequence fp32 reference on the same (bf16-rounded)
// weights. Every stored activation and gradient is rounded once per op (relative error <= 2^-8,
// about 2.3e-3 RMS), through 2 layers forward and backward (~20 rounded tensors on the path) and
// the parameter gradients accumulated in bf16 once per chunk (4 chunks): if the roundings were
// independent, ~sqrt(20) x 2.3e-3 = 1e-2 relative L2 on the worst tensor; 5e-2 bounds it with
// margin (measured: printed below) and is still 5000x the fp32 tolerance (1e-5).
constexpr double kBf16StorageGradRelTol = 5e-2;
constexpr double kBf16StorageLossRelTol = 5e-3;
constexpr double kBf16StorageDiffersMin = 1e-4;

TEST(Bf16Storage, ChunkedNearFullSequenceAndHalfTheBytes) {
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true);
  const Weights w = rounded_to_bf16(random_weights(m, 321, kInitStd));
  const int64_t N = 61, C = 16, p = 8;
  const auto tokens = TokenSource::synthetic(m.vocab, 5).sequence(0, N);
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);

  CpuBackend b16, b32;
  auto c16 = all_bf16(test::small_config(N, C, p, 1));
  c16.logits_chunk_tokens = 5;
  Engine e16(b16, m, c16, w);
  const double loss16 = e16.step(tokens).loss;
  const Gradients g16 = e16.gradients();
  Engine e32(b32, m, test::small_config(N, C, p, 1), w);
  const double loss32 = e32.step(tokens).loss;
  const Gradients g32 = e32.gradients();

  EXPECT_NEAR(loss16, ref.loss, kBf16StorageLossRelTol * ref.loss);
  const WorstTensor worst = worst_relative_l2(g16, ref.grads);
  std::printf("bf16 storage: loss rel %.2e, worst gradient rel L2 %.2e (%s)\n", std::abs(loss16 - ref.loss) / ref.loss,
              worst.rel_l2, worst.name.c_str());
  EXPECT_LE(worst.rel_l2, kBf16StorageGradRelTol) << worst.name;
  EXPECT_GE(worst_relative_l2(g16, g32).rel_l2, kBf16StorageDiffersMin) << "bf16 was not stored";
  EXPECT_NE(loss16, loss32);

  // Stored bytes: every bf16 row is half its fp32 twin.
  const Measured& m16 = e16.measured();
  const Measured& m32 = e32.measured();
  EXPECT_EQ(m16.param_dtype, Dtype::bf16);
  EXPECT_EQ(m16.activation_dtype, Dtype::bf16);
  for (const char* row : {"weights", "parameter_gradients", "hidden_states", "layer_input_checkpoints",
                          "layer_activations", "layer_backward_temporaries", "final_norm"})
    EXPECT_EQ(2 * row_bytes(m16, row), row_bytes(m32, row)) << row;
  for (const char* row : {"layer_norm_rstd", "attention_lse", "token_ids"})  // fp32 / int32 whatever the dtypes
    EXPECT_EQ(row_bytes(m16, row), row_bytes(m32, row)) << row;
  EXPECT_EQ(row_bytes(m16, "logits"), 5 * m.vocab * 2);
  // The weights read back are the stored bf16 values (the inputs were bf16-exact).
  EXPECT_EQ(e16.weights().data, w.data);
}

// AdamW with bf16 working weights: the fp32 master weights are updated and the working weights
// refreshed from them (rounded once), so repeated small updates are not lost in bf16.
TEST(Bf16Storage, AdamWUpdatesTheFp32MasterWeights) {
  const auto m = test::small_model(1, 2, 1, 8, 16, true, false);
  const Weights w = random_weights(m, 7, kInitStd);
  const int64_t N = 24;
  const auto tokens = TokenSource::synthetic(m.vocab, 9).sequence(0, N);
  auto c = all_bf16(test::small_config(N, 8, 8, 8));
  c.optimizer = step::Optimizer::gpu;
  CpuBackend b;
  EngineOptions o;
  o.adamw.lr = 1e-4f;  // an update far below bf16's spacing at |w| ~ 0.1 (2^-11 = 4.9e-4)
  Engine e(b, m, c, w, o);
  for (int s = 0; s < 3; ++s) e.step(tokens);
  const Weights master = e.weights();  // the fp32 master weights
  int64_t moved = 0, lost_in_bf16 = 0;
  for (size_t i = 0; i < w.data.size(); ++i) {
    if (master.data[i] != w.data[i]) ++moved;
    if (round_to_bf16(master.data[i]) == round_to_bf16(w.data[i]) && master.data[i] != w.data[i]) ++lost_in_bf16;
  }
  EXPECT_GT(moved, static_cast<int64_t>(w.data.size()) / 2);
  EXPECT_GT(lost_in_bf16, 0) << "the test needs updates below bf16's resolution";
  EXPECT_EQ(row_bytes(e.measured(), "master_weights"), static_cast<int64_t>(w.data.size()) * 4);
  EXPECT_EQ(row_bytes(e.measured(), "adamw_moments"), static_cast<int64_t>(w.data.size()) * 8);
}

// The host optimizer: the gradients go out to the host, AdamW runs there, the working weights come
// back; the same update as on the device (bit for bit), and the copies counted with the step's.
TEST(HostOptimizer, RoundTripCopiesAndTheSameUpdateAsOnTheDevice) {
  const auto m = test::small_model(1, 2, 1, 8, 16, true, false);
  const Weights w = random_weights(m, 13, kInitStd);
  const int64_t N = 24;
  const auto tokens = TokenSource::synthetic(m.vocab, 9).sequence(0, N);
  for (Dtype storage : {Dtype::fp32, Dtype::bf16}) {
    auto c = test::small_config(N, 8, 8, 8);
    c.param_dtype = c.param_grad_dtype = storage;
    c.optimizer = step::Optimizer::gpu;
    CpuBackend b1, b2;
    Engine gpu(b1, m, c, w);
    c.optimizer = step::Optimizer::host;
    Engine host(b2, m, c, w);
    for (int s = 0; s < 2; ++s) {
      gpu.step(tokens);
      host.step(tokens);
    }
    EXPECT_EQ(gpu.weights().data, host.weights().data) << storage;
    const int64_t n = static_cast<int64_t>(w.data.size()), b = storage == Dtype::bf16 ? 2 : 4;
    EXPECT_EQ(host.measured().d2h_bytes - gpu.measured().d2h_bytes, n * b) << storage;
    EXPECT_EQ(host.measured().h2d_bytes - gpu.measured().h2d_bytes, n * b) << storage;
    EXPECT_EQ(row_bytes(host.measured(), "host_parameter_gradients"), n * b);
    EXPECT_EQ(row_bytes(host.measured(), "host_weights"), n * b);
  }
}

// ---- lifetimes: the measured device peak is the largest phase's live set of the executor's own
// rows, its breakdown that phase's categories, and the backend saw no device allocation outside
// the rows (FakeCupti records every allocate / deallocate the engine makes).
struct PhaseCase {
  const char* name;
  int64_t N, C, p, R, logits_chunk;
  bool sparse;
  bool checkpointing = true;
  int64_t kept_layers = 0;
};

void PrintTo(const PhaseCase& k, std::ostream* os) { *os << k.name; }

class PhaseLiveSet : public ::testing::TestWithParam<PhaseCase> {};

TEST_P(PhaseLiveSet, PeakIsTheLargestPhaseAndEveryAllocationHasARow) {
  const PhaseCase k = GetParam();
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true, 97, 64);
  const Weights w = random_weights(m, 11, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 3).sequence(0, k.N);
  auto c = test::small_config(k.N, k.C, k.p, k.R);
  c.logits_chunk_tokens = k.logits_chunk;
  c.checkpointing = k.checkpointing;
  c.kept_layers = k.kept_layers;
  if (k.sparse) {
    c.attention = step::Attention::sparse;
    c.page_budget = 2;
  }
  CpuBackend cpu;
  test::FakeCupti fake(cpu);
  int64_t before = 0;
  for (const auto& r : fake.records())
    if (r.kind == cupti::RecordKind::memory && r.memory_kind == cupti::MemoryKind::device)
      before += r.memory_op == cupti::MemoryOp::allocation ? r.bytes : -r.bytes;
  EXPECT_EQ(before, 0);
  Engine e(fake, m, c, w);
  e.step(tokens);
  const Measured& me = e.measured();

  // The executor's table: the live set of each phase, the largest (first in phase order on ties).
  int64_t best = -1;
  std::map<std::string, int64_t> best_cat;
  for (StepPhase ph : {StepPhase::fill, StepPhase::recompute, StepPhase::loss, StepPhase::backward,
                       StepPhase::optimizer}) {
    int64_t live = 0;
    std::map<std::string, int64_t> cat;
    for (const auto& b : me.buffers)
      if (b.tier == Tier::device && (b.phases & step::phase_bit(ph))) {
        live += b.bytes;
        cat[b.category] += b.bytes;
      }
    if (live > best) best = live, best_cat = cat;
  }
  EXPECT_EQ(me.peak_device_bytes, best);
  EXPECT_EQ(me.device_breakdown_bytes, best_cat);

  // The backend's own view: the high-water mark of live device allocations.
  int64_t live = 0, high = 0;
  for (const auto& r : fake.records())
    if (r.kind == cupti::RecordKind::memory && r.memory_kind == cupti::MemoryKind::device) {
      live += r.memory_op == cupti::MemoryOp::allocation ? r.bytes : -r.bytes;
      high = std::max(high, live);
    }
  EXPECT_EQ(high, me.peak_device_bytes) << "a device allocation outside the buffer table";
}

INSTANTIATE_TEST_SUITE_P(Cases, PhaseLiveSet,
                         ::testing::Values(PhaseCase{"all_resident_unfused", 48, 16, 8, 8, 0, false},
                                           PhaseCase{"offload_tiled", 61, 16, 8, 1, 5, false},
                                           PhaseCase{"one_chunk", 40, 64, 8, 8, 0, false},
                                           PhaseCase{"sparse_offload", 96, 16, 8, 1, 7, true},
                                           PhaseCase{"no_recompute", 61, 16, 8, 1, 0, false, false},
                                           PhaseCase{"no_recompute_sparse_tiled", 96, 16, 8, 2, 5, true, false},
                                           PhaseCase{"one_layer_kept", 61, 16, 8, 1, 0, false, true, 1},
                                           PhaseCase{"one_layer_kept_sparse_tiled", 96, 16, 8, 2, 5, true, true, 1}),
                         [](const auto& i) { return std::string(i.param.name); });

// The layers whose backward pass re-ran their attention forward (the recompute from a checkpoint).
std::set<int64_t> layers_recomputed_in_backward(const traces::Trace& t) {
  std::set<int64_t> layers;
  for (const auto& e : t.events)
    if (e.kind == traces::EventKind::compute && e.name == "attention_fwd" && e.op == Op::layer_bwd) layers.insert(e.layer);
  return layers;
}

// The recompute tests' plan: N tokens in chunks of 16, pages of 8, R resident layers, dense or
// sparse (budget 2); op-detail traces, so the backward's recompute is visible.
step::Config recompute_config(int64_t N, int64_t R, bool sparse) {
  auto c = test::small_config(N, 16, 8, R);
  if (sparse) {
    c.attention = step::Attention::sparse;
    c.page_budget = 2;
  }
  return c;
}
EngineOptions op_trace_options() {
  EngineOptions o;
  o.record_trace = true;
  o.detail = traces::Detail::op;
  return o;
}

// ---- checkpointing off: the backward reuses the stage-2 forward's activations of every layer
// instead of recomputing them from the checkpoint. The recompute is deterministic, so the loss and
// every gradient are bit-identical to the checkpointed run (and so equal the full-sequence ones).
TEST(NoRecompute, BitIdenticalToCheckpointedAndSkipsTheRecompute) {
  const auto m = test::small_model(3, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 17, kInitStd);
  const int64_t N = 53;
  const auto tokens = TokenSource::synthetic(m.vocab, 2).sequence(0, N);
  for (int64_t R : {1, 2, 8}) {
    for (bool sparse : {false, true}) {
      auto c = recompute_config(N, R, sparse);
      const EngineOptions o = op_trace_options();
      CpuBackend b1, b2;
      Engine on(b1, m, c, w, o);
      const double l_on = on.step(tokens).loss;
      c.checkpointing = false;
      Engine off(b2, m, c, w, o);
      const double l_off = off.step(tokens).loss;
      EXPECT_EQ(l_on, l_off) << "R " << R << " sparse " << sparse;
      EXPECT_EQ(on.gradients().data, off.gradients().data) << "R " << R << " sparse " << sparse;
      // The backward passes of the checkpointed run recompute the attention forward; the others do not.
      EXPECT_FALSE(layers_recomputed_in_backward(on.trace()).empty());
      EXPECT_TRUE(layers_recomputed_in_backward(off.trace()).empty());
      EXPECT_EQ(row_bytes(off.measured(), "all_layer_activations"), 3 * row_bytes(on.measured(), "layer_activations"));
      EXPECT_EQ(row_bytes(off.measured(), "layer_activations"), -1);
    }
  }
}

// ---- partial checkpointing: the last k layers keep their stage-2 forward activations to their
// backward, the others are recomputed from their checkpoints. Every k gives the full-sequence
// gradients (fp32, the exactness tolerance of chunked_test) and is bit-identical to full
// checkpointing (the recompute is deterministic); only the first L - k layers' backward passes
// re-run the attention forward, and the k kept sets are allocated next to the one shared set.
TEST(PartialCheckpointing, ExactAndBitIdenticalToFullCheckpointing) {
  const int64_t L = 4;
  const auto m = test::small_model(L, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 29, kInitStd);
  const int64_t N = 53;
  const auto tokens = TokenSource::synthetic(m.vocab, 8).sequence(0, N);
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  for (int64_t R : {1, 2, 8})
    for (bool sparse : {false, true}) {
      auto c = recompute_config(N, R, sparse);
      const EngineOptions o = op_trace_options();
      CpuBackend b0;
      Engine full(b0, m, c, w, o);
      const double l_full = full.step(tokens).loss;
      if (!sparse) {
        EXPECT_NEAR(l_full, ref.loss, 1e-6 * ref.loss);
        EXPECT_LE(worst_relative_l2(full.gradients(), ref.grads).rel_l2, 1e-5);
      }
      for (int64_t k : {int64_t{1}, int64_t{2}, L - 1}) {
        SCOPED_TRACE("R " + std::to_string(R) + (sparse ? " sparse" : " dense") + " kept " + std::to_string(k));
        c.kept_layers = k;
        CpuBackend b;
        Engine e(b, m, c, w, o);
        const double loss = e.step(tokens).loss;
        EXPECT_EQ(loss, l_full);
        EXPECT_EQ(e.gradients().data, full.gradients().data);
        if (!sparse) {
          const WorstTensor worst = worst_relative_l2(e.gradients(), ref.grads);
          EXPECT_LE(worst.rel_l2, 1e-5) << worst.name;
        }
        // Which backward passes re-ran their forward: layers 0 .. L-k-1 only.
        std::set<int64_t> expected;
        for (int64_t l = 0; l < L - k; ++l) expected.insert(l);
        EXPECT_EQ(layers_recomputed_in_backward(e.trace()), expected);
        EXPECT_EQ(row_bytes(e.measured(), "kept_layer_activations"), k * row_bytes(full.measured(), "layer_activations"));
        EXPECT_EQ(row_bytes(e.measured(), "layer_activations"), row_bytes(full.measured(), "layer_activations"));
        EXPECT_EQ(row_bytes(e.measured(), "all_layer_activations"), -1);
        EXPECT_GT(e.measured().peak_device_bytes, full.measured().peak_device_bytes);
      }
      c.kept_layers = 0;
    }
}

// ---- q/k RMSNorm (Qwen3: per-head norms of q and k before RoPE): the chunk-recurrent step gives
// the full-sequence reference's loss and every gradient, the norms' weights included (fp32, the
// exactness tolerance of chunked_test), with and without offload, checkpointing on and off.
TEST(QkNorm, ChunkedEqualsFullSequence) {
  auto m = test::small_model(2, 4, 2, 8, 32, false, false);
  m.qk_norm = true;
  const Weights w = random_weights(m, 23, kInitStd);
  ASSERT_GE(w.layout.layer(0).q_norm, 0);
  const int64_t N = 45;
  const auto tokens = TokenSource::synthetic(m.vocab, 6).sequence(0, N);
  const cpu::ReferenceResult ref = cpu::full_sequence_reference(m, w, tokens);
  for (int64_t R : {1, 8})
    for (bool ckpt : {true, false}) {
      auto c = test::small_config(N, 16, 8, R);
      c.checkpointing = ckpt;
      CpuBackend b;
      Engine e(b, m, c, w);
      const double loss = e.step(tokens).loss;
      EXPECT_NEAR(loss, ref.loss, 1e-6 * ref.loss) << "R " << R;
      const WorstTensor worst = worst_relative_l2(e.gradients(), ref.grads);
      EXPECT_LE(worst.rel_l2, 1e-5) << worst.name << " R " << R << " ckpt " << ckpt;
      // The simulator's table has the norms' buffers too: predicted = allocated, by category.
      simulator::Scenario s;
      s.model = m;
      s.gpu = models::load_gpu("h200");
      s.gpu.kind = "cpu";
      s.host = models::load_host("workstation-128g");
      s.config = c;
      s.config.peak_measure = step::PeakMeasure::allocated;
      const simulator::Summary pred = simulator::evaluate(s);
      EXPECT_EQ(e.measured().peak_device_bytes, pred.peak_device_bytes) << "R " << R << " ckpt " << ckpt;
      EXPECT_EQ(e.measured().device_breakdown_bytes, pred.device_breakdown_bytes) << "R " << R << " ckpt " << ckpt;
    }
  // The norms matter: the same weights without them give another loss.
  auto plain = m;
  plain.qk_norm = false;
  EXPECT_GT(std::abs(cpu::full_sequence_reference(plain, random_weights(plain, 23, kInitStd), tokens).loss - ref.loss),
            1e-4);
}

// ---- the plan check at start: a missing or smaller planned row is refused by name; a larger or
// unused one is a note.
TEST(PlanCheck, RefusesASmallerOrMissingRowAndNotesTheRest) {
  const auto m = test::small_model(2, 4, 2, 8, 32, false, true);
  const Weights w = random_weights(m, 5, kInitStd);
  const auto c = test::small_config(48, 16, 8, 1);
  CpuBackend b;
  std::vector<step::BufferRow> planned;
  {
    Engine e(b, m, c, w);
    planned = e.buffers();
  }
  EngineOptions exact;
  exact.planned = planned;
  EXPECT_TRUE(Engine(b, m, c, w, exact).measured().notes.empty());

  EngineOptions larger = exact;
  for (auto& r : larger.planned)
    if (r.name == "logits") r.bytes += 4096;
  step::BufferRow gemm;
  gemm.name = "gemm_workspace";
  gemm.category = "backend_scratch";
  gemm.bytes = 1 << 20;
  larger.planned.push_back(gemm);
  Engine e(b, m, c, w, larger);
  e.step(TokenSource::synthetic(m.vocab, 1).sequence(0, 48));
  ASSERT_EQ(e.measured().notes.size(), 2u);
  EXPECT_NE(e.measured().notes[0].find("logits"), std::string::npos);
  EXPECT_NE(e.measured().notes[1].find("gemm_workspace"), std::string::npos);

  EngineOptions smaller = exact;
  for (auto& r : smaller.planned)
    if (r.name == "layer_activations") r.bytes -= 1;
  try {
    Engine bad(b, m, c, w, smaller);
    FAIL() << "a smaller planned row was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("layer_activations"), std::string::npos) << err.what();
  }
  EngineOptions missing = exact;
  missing.planned.erase(std::remove_if(missing.planned.begin(), missing.planned.end(),
                                       [](const step::BufferRow& r) { return r.name == "attention_lse"; }),
                        missing.planned.end());
  EXPECT_THROW(Engine(b, m, c, w, missing), Error);
}

// ---- a non-finite loss stops the run with a clear error.
TEST(FiniteLoss, NanWeightsStopTheStep) {
  const auto m = test::small_model(1, 2, 1, 8, 16, true, false);
  Weights w = random_weights(m, 5, kInitStd);
  w.data[3] = std::numeric_limits<float>::quiet_NaN();
  CpuBackend b;
  Engine e(b, m, test::small_config(24, 8, 8, 8), w);
  try {
    e.step(TokenSource::synthetic(m.vocab, 1).sequence(0, 24));
    FAIL() << "a NaN loss was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("NaN"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace oomb::executor
