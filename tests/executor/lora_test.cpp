// LoRA (issue #26): the adapter ops against plain loops, the chunk-recurrent step's adapter
// gradients against the full-sequence reference (merged weights + chain rule), the frozen base, and
// PEFT's adapter folder in and out.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/json.h"
#include "core/files.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/cpu/reference.h"
#include "executor/runtime/adapters.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "step/config.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

constexpr double kGradRelTol = 1e-5;  // fp32 storage: the bound
constexpr double kLossRelTol = 1e-6;
constexpr double kBf16GradRelTol = 3e-2;  // bf16 weights, activations and pages (chunked_test's bf16 bound)
constexpr double kBf16LossRelTol = 1e-2;
constexpr float kInitStd = 0.1f;

// y += scale (x A^T) B^T and its backward, in double, by loops.
struct LoopLora {
  std::vector<double> u, y, du, dx, da, db;
};
LoopLora loop_lora(const std::vector<float>& x, const std::vector<float>& a, const std::vector<float>& b,
                   const std::vector<float>& dy, int64_t rows, int64_t in, int64_t r, int64_t out, double scale) {
  LoopLora o;
  o.u.assign(static_cast<size_t>(rows * r), 0);
  o.y.assign(static_cast<size_t>(rows * out), 0);
  o.du.assign(static_cast<size_t>(rows * r), 0);
  o.dx.assign(static_cast<size_t>(rows * in), 0);
  o.da.assign(static_cast<size_t>(r * in), 0);
  o.db.assign(static_cast<size_t>(out * r), 0);
  auto at = [](auto& v, int64_t i) -> auto& { return v[static_cast<size_t>(i)]; };
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < r; ++j) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(at(x, t * in + i)) * at(a, j * in + i);
      at(o.u, t * r + j) = scale * s;
    }
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < out; ++i)
      for (int64_t j = 0; j < r; ++j) at(o.y, t * out + i) += at(o.u, t * r + j) * at(b, i * r + j);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t j = 0; j < r; ++j) {
      double s = 0;
      for (int64_t i = 0; i < out; ++i) s += static_cast<double>(at(dy, t * out + i)) * at(b, i * r + j);
      at(o.du, t * r + j) = scale * s;
    }
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = 0; j < r; ++j)
      for (int64_t t = 0; t < rows; ++t) at(o.db, i * r + j) += at(dy, t * out + i) * at(o.u, t * r + j);
  for (int64_t j = 0; j < r; ++j)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t t = 0; t < rows; ++t) at(o.da, j * in + i) += at(o.du, t * r + j) * at(x, t * in + i);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < in; ++i)
      for (int64_t j = 0; j < r; ++j) at(o.dx, t * in + i) += at(o.du, t * r + j) * at(a, j * in + i);
  return o;
}

double rel(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

TEST(LoraOps, CpuBackendMatchesLoops) {
  const int64_t rows = 37, in = 48, r = 5, out = 24;
  const double scale = 16.0 / 5;
  const auto x = test::random_vec(static_cast<size_t>(rows * in), 1), a = test::random_vec(static_cast<size_t>(r * in), 2);
  const auto b = test::random_vec(static_cast<size_t>(out * r), 3), dy = test::random_vec(static_cast<size_t>(rows * out), 4);
  const auto y0 = test::random_vec(static_cast<size_t>(rows * out), 5), dx0 = test::random_vec(static_cast<size_t>(rows * in), 6);
  const auto da0 = test::random_vec(static_cast<size_t>(r * in), 7), db0 = test::random_vec(static_cast<size_t>(out * r), 8);
  const LoopLora want = loop_lora(x, a, b, dy, rows, in, r, out, scale);
  CpuBackend be;
  std::vector<float> u(static_cast<size_t>(rows * r)), y = y0, du(u.size()), dx = dx0, da = da0, db = db0;
  be.lora_fwd(x.data(), rows, in, a.data(), b.data(), r, out, static_cast<float>(scale), u.data(), y.data());
  be.lora_bwd(x.data(), u.data(), rows, in, a.data(), b.data(), r, out, static_cast<float>(scale), dy.data(), du.data(),
              dx.data(), da.data(), db.data());
  auto plus = [](const std::vector<float>& base, const std::vector<double>& d) {
    std::vector<double> s(d.size());
    for (size_t i = 0; i < d.size(); ++i) s[i] = base[i] + d[i];
    return s;
  };
  EXPECT_LE(rel(u, want.u), 1e-6);
  EXPECT_LE(rel(y, plus(y0, want.y)), 1e-6);  // accumulates into y
  EXPECT_LE(rel(du, want.du), 1e-6);
  EXPECT_LE(rel(dx, plus(dx0, want.dx)), 1e-6);
  EXPECT_LE(rel(da, plus(da0, want.da)), 1e-6);
  EXPECT_LE(rel(db, plus(db0, want.db)), 1e-6);
  // Without an input gradient the rest is the same.
  std::vector<float> da2 = da0, db2 = db0;
  be.lora_bwd(x.data(), u.data(), rows, in, a.data(), b.data(), r, out, static_cast<float>(scale), dy.data(), du.data(),
              nullptr, da2.data(), db2.data());
  EXPECT_EQ(da2, da);
  EXPECT_EQ(db2, db);
}

TEST(LoraOps, Bf16ActivationsAreRoundedOnceEach) {
  const int64_t rows = 16, in = 32, r = 4, out = 8;
  const auto x = test::random_vec(static_cast<size_t>(rows * in), 11), a = test::random_vec(static_cast<size_t>(r * in), 12);
  const auto b = test::random_vec(static_cast<size_t>(out * r), 13);
  std::vector<uint16_t> x16(x.size()), u16(static_cast<size_t>(rows * r)), y16(static_cast<size_t>(rows * out), 0);
  f32_to_bf16(x.data(), x16.data(), static_cast<int64_t>(x.size()));
  std::vector<float> xr(x.size());
  bf16_to_f32(x16.data(), xr.data(), static_cast<int64_t>(x.size()));
  const LoopLora want = loop_lora(xr, a, b, std::vector<float>(static_cast<size_t>(rows * out), 0), rows, in, r, out, 2);
  CpuBackend be;
  be.lora_fwd(ConstTensor(x16.data(), DType::bf16), rows, in, a.data(), b.data(), r, out, 2.0f,
              Tensor(u16.data(), DType::bf16), Tensor(y16.data(), DType::bf16));
  std::vector<float> u(u16.size()), y(y16.size());
  bf16_to_f32(u16.data(), u.data(), static_cast<int64_t>(u.size()));
  bf16_to_f32(y16.data(), y.data(), static_cast<int64_t>(y.size()));
  EXPECT_LE(rel(u, want.u), 8e-3);  // bf16 has 8 significant bits
  EXPECT_LE(rel(y, want.y), 1.6e-2);
  EXPECT_GT(rel(u, want.u), 0.0);  // stored as bf16 indeed
}

TEST(LoraOps, AViewTooShortIsRefused) {
  CpuBackend be;
  std::vector<float> x(4 * 8), a(2 * 8), b(6 * 2), u(3 * 2), y(4 * 6);  // u one row short
  EXPECT_THROW(be.lora_fwd(ConstTensor(x.data(), DType::f32, 32), 4, 8, ConstTensor(a.data(), DType::f32, 16),
                           ConstTensor(b.data(), DType::f32, 12), 2, 6, 1.0f, Tensor(u.data(), DType::f32, 6),
                           Tensor(y.data(), DType::f32, 24)),
               ExtentError);
}

struct LoraCase {
  const char* name;
  int64_t layers, q_heads, kv_heads, head_dim, hidden;
  bool tied, bias, qk_norm;
  int64_t N, C, p, rank;
  const char* targets;
  bool checkpointing = true;
  bool sparse = false;
};
void PrintTo(const LoraCase& k, std::ostream* os) { *os << k.name; }

models::ModelSpec lora_model(const LoraCase& k) {
  auto m = test::small_model(k.layers, k.q_heads, k.kv_heads, k.head_dim, k.hidden, k.tied, k.bias);
  m.qk_norm = k.qk_norm;
  return m;
}

step::Config lora_config(const LoraCase& k) {
  auto c = test::small_config(k.N, k.C, k.p, 64);
  c.lora_rank = k.rank;
  c.lora_alpha = 2.0 * static_cast<double>(k.rank);
  c.lora_targets = step::lora_targets_from_string(k.targets, "--lora-targets");
  c.checkpointing = k.checkpointing;
  if (k.sparse) {
    c.attention = step::Attention::sparse;
    c.page_budget = 2;
  }
  return c;
}

class LoraEqualsFullSequence : public ::testing::TestWithParam<LoraCase> {};

// The chunk-recurrent step's adapter gradients equal the full-sequence reference's (merged weights
// and the chain rule), fp32 storage, 1e-5 relative L2 (the bound).
TEST_P(LoraEqualsFullSequence, LossAndEveryAdapterGradient) {
  const LoraCase k = GetParam();
  const auto m = lora_model(k);
  const auto c = lora_config(k);
  const Weights w = random_weights(m, 1234, kInitStd);
  // B random: with PEFT's zero B every A gradient would be zero and the check empty.
  EngineOptions o;
  o.adapters = init_adapters(m, c, 99, 0.2f);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  CpuBackend be;
  Engine e(be, m, c, w, o);
  const double loss = e.step(tokens).loss;
  const Gradients g = e.gradients();
  ASSERT_TRUE(g.layout.is_lora());
  std::vector<cpu::MaskedAttention> masks;
  if (k.sparse)
    for (int64_t l = 0; l < m.layers; ++l)
      masks.push_back(cpu::selection_mask(m, k.N, k.C, k.p, e.selections(), l));
  const cpu::ReferenceResult ref =
      cpu::lora_reference(m, w, o.adapters, c.lora_alpha / static_cast<double>(c.lora_rank), tokens,
                          k.sparse ? &masks : nullptr);
  EXPECT_NEAR(loss, ref.loss, kLossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(g, ref.grads);
  EXPECT_LE(err, kGradRelTol) << "worst tensor " << name;
  // Every adapter tensor has a gradient (the check is not empty).
  for (const auto& p : ref.grads.layout.params())
    EXPECT_GT(relative_l2(ref.grads.at(p), std::vector<float>(static_cast<size_t>(p.numel), 0.0f).data(), p.numel), 0.0)
        << p.name;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LoraEqualsFullSequence,
    ::testing::Values(
        LoraCase{"q_v_default_targets", 2, 4, 2, 8, 32, false, true, false, 64, 16, 8, 4, "q_proj,v_proj"},
        LoraCase{"all_linear_ragged", 2, 4, 2, 8, 32, true, false, false, 70, 24, 8, 3, "all-linear"},
        LoraCase{"all_linear_qk_norm", 2, 4, 1, 8, 32, false, false, true, 48, 16, 8, 2, "all-linear"},
        LoraCase{"mlp_only_no_recompute", 3, 2, 2, 8, 16, false, true, false, 48, 16, 8, 4, "gate_proj,up_proj,down_proj",
                 false},
        LoraCase{"o_down_sparse", 2, 4, 2, 8, 32, false, false, false, 96, 16, 8, 2, "o_proj,down_proj", true, true}),
    [](const auto& i) { return std::string(i.param.name); });

// bf16 storage of weights, activations and pages: within the bf16 tolerance of the exact reference.
TEST(Lora, Bf16StorageWithinItsTolerance) {
  const LoraCase k{"bf16", 2, 4, 2, 8, 32, false, true, false, 64, 16, 8, 4, "all-linear"};
  const auto m = lora_model(k);
  auto c = lora_config(k);
  c.param_dtype = c.activation_dtype = c.kv_dtype = c.kv_grad_dtype = c.loss_dtype = Dtype::bf16;
  const Weights w = random_weights(m, 1234, kInitStd);
  EngineOptions o;
  o.adapters = init_adapters(m, c, 99, 0.2f);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  CpuBackend be;
  Engine e(be, m, c, w, o);
  const double loss = e.step(tokens).loss;
  // The reference of the bf16-stored base (what the run computes on).
  Weights wr = w;
  std::vector<uint16_t> h(wr.data.size());
  f32_to_bf16(wr.data.data(), h.data(), static_cast<int64_t>(h.size()));
  bf16_to_f32(h.data(), wr.data.data(), static_cast<int64_t>(h.size()));
  const auto ref = cpu::lora_reference(m, wr, o.adapters, 2.0, tokens);
  EXPECT_NEAR(loss, ref.loss, kBf16LossRelTol * ref.loss);
  const auto [err, name] = worst_relative_l2(e.gradients(), ref.grads);
  EXPECT_LE(err, kBf16GradRelTol) << name;
  EXPECT_EQ(e.measured().param_grad_dtype, Dtype::fp32);  // the adapters' gradients, as the adapters
}

// PEFT's initialisation (B = 0) starts from the base model's loss; AdamW moves the adapters and
// never the base; the step's memory is the table's to the byte.
TEST(Lora, TheBaseIsFrozenAndTheAdaptedModelStartsAsTheBase) {
  const LoraCase k{"frozen", 2, 4, 2, 8, 32, false, true, false, 64, 16, 8, 4, "q_proj,v_proj"};
  const auto m = lora_model(k);
  const Weights w = random_weights(m, 1234, kInitStd);
  const auto tokens = TokenSource::synthetic(m.vocab, 7).sequence(0, k.N);
  double base_loss = 0;
  {
    CpuBackend be;
    Engine plain(be, m, test::small_config(k.N, k.C, k.p, 64), w);
    base_loss = plain.step(tokens).loss;
  }
  for (auto opt : {step::Optimizer::gpu, step::Optimizer::host}) {
    SCOPED_TRACE(step::to_string(opt));
    auto c = lora_config(k);
    c.optimizer = opt;
    EngineOptions o;
    o.adapters = init_adapters(m, c, 5);
    CpuBackend be;
    Engine e(be, m, c, w, o);
    EXPECT_DOUBLE_EQ(e.step(tokens).loss, base_loss);
    const ParamTensors after = e.adapters();
    const double second = e.step(tokens).loss;
    EXPECT_LT(second, base_loss);  // the adapters learned
    EXPECT_EQ(e.weights().data, w.data);  // the base did not move
    EXPECT_NE(after.data, o.adapters.data);
    // Every device row's high-water mark is its table bytes (no allocation beyond the table).
    for (const auto& r : e.buffers()) {
      if (r.tier != Tier::device) continue;
      const auto it = e.measured().row_high_water_bytes.find(r.name);
      ASSERT_NE(it, e.measured().row_high_water_bytes.end()) << r.name;
      EXPECT_EQ(it->second, r.bytes) << r.name;
    }
  }
}

TEST(Lora, TrainingEmbeddingsIsRefusedByTheExecutorByName) {
  const LoraCase k{"emb", 1, 2, 2, 8, 16, false, false, false, 32, 16, 8, 2, "q_proj"};
  const auto m = lora_model(k);
  auto c = lora_config(k);
  c.lora_train_embeddings = true;
  EngineOptions o;
  o.adapters = init_adapters(m, c, 1);
  CpuBackend be;
  try {
    Engine e(be, m, c, random_weights(m, 1), o);
    FAIL() << "accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--lora-train-embeddings"), std::string::npos) << err.what();
  }
}

// ---- PEFT's folder
class AdapterFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("oomb_lora_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(AdapterFolder, WritesPeftNamesShapesAndConfigAndReadsThemBack) {
  const LoraCase k{"io", 2, 4, 2, 8, 32, false, false, false, 32, 16, 8, 4, "q_proj,v_proj,down_proj"};
  const auto m = lora_model(k);
  const auto c = lora_config(k);
  const ParamTensors a = init_adapters(m, c, 3, 0.1f);
  const auto files = write_adapter(a, dir_.string(), adapter_config(c, "Qwen/Qwen2.5-0.5B"));
  ASSERT_EQ(files.size(), 2u);
  // The config as PEFT writes it.
  const Json j = read_json_file((dir_ / "adapter_config.json").string());
  EXPECT_EQ(j.at("peft_type"), "LORA");
  EXPECT_EQ(j.at("r"), 4);
  EXPECT_EQ(j.at("lora_alpha"), 8.0);
  EXPECT_EQ(j.at("target_modules"), Json({"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(j.at("bias"), "none");
  EXPECT_EQ(j.at("base_model_name_or_path"), "Qwen/Qwen2.5-0.5B");
  // The tensors' names and shapes, read from the file's own header.
  std::ifstream in(dir_ / "adapter_model.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  const Json h = parse_json(text, "header");
  EXPECT_EQ(h.size(), 1u + 2 * 3 * 2);  // __metadata__ + 2 layers x 3 targets x (A, B)
  EXPECT_EQ(h.at("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").at("shape"), Json({4, 32}));
  EXPECT_EQ(h.at("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight").at("shape"), Json({32, 4}));
  EXPECT_EQ(h.at("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight").at("shape"), Json({16, 4}));
  EXPECT_EQ(h.at("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight").at("shape"), Json({4, 48}));
  EXPECT_EQ(h.at("base_model.model.model.layers.1.mlp.down_proj.lora_A.weight").at("dtype"), "F32");
  // Back, value for value.
  const ParamTensors back = read_adapter(dir_.string(), m, c);
  EXPECT_EQ(back.data, a.data);
  // The same folder written again replaces it whole.
  const ParamTensors a2 = init_adapters(m, c, 4, 0.1f);
  write_adapter(a2, dir_.string(), adapter_config(c, "x"));
  EXPECT_EQ(read_adapter(dir_.string(), m, c).data, a2.data);
}

TEST_F(AdapterFolder, AMismatchedConfigNamesTheKeyAndTheFlag) {
  const LoraCase k{"cfg", 1, 4, 2, 8, 32, false, false, false, 32, 16, 8, 4, "q_proj,v_proj"};
  const auto m = lora_model(k);
  const auto c = lora_config(k);
  write_adapter(init_adapters(m, c, 3), dir_.string(), adapter_config(c, "base"));
  auto expect_error = [&](const step::Config& cc, const std::string& key, const std::string& flag) {
    try {
      read_adapter(dir_.string(), m, cc);
      ADD_FAILURE() << "accepted (" << key << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  auto c2 = c;
  c2.lora_rank = 8;
  expect_error(c2, "r", "--lora-rank 4");
  c2 = c;
  c2.lora_alpha = 16;
  expect_error(c2, "lora_alpha", "--lora-alpha 8");
  c2 = c;
  c2.lora_targets = {"q_proj"};
  expect_error(c2, "target_modules", "--lora-targets q_proj,v_proj");
  c2 = c;
  c2.lora_rank = 0;
  expect_error(c2, "--adapter", "--lora-rank 4");
  // PEFT features oomb does not run are refused by key.
  for (const auto& [key, value] : std::vector<std::pair<std::string, Json>>{
           {"use_rslora", true}, {"bias", "all"}, {"modules_to_save", Json({"lm_head"})},
           {"layers_to_transform", Json({0})}, {"use_dora", true}, {"target_modules", "q_proj|v_proj"},
           {"lora_dropout", 0.5}, {"lora_dropout", "0.1"}, {"lora_dropout", 1.5}}) {
    Json j = read_json_file((dir_ / "adapter_config.json").string());
    const Json saved = j;
    j[key] = value;
    write_text_file((dir_ / "adapter_config.json").string(), j.dump());
    try {
      read_adapter(dir_.string(), m, c);
      ADD_FAILURE() << key << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    write_text_file((dir_ / "adapter_config.json").string(), saved.dump());
  }
  EXPECT_NO_THROW(read_adapter(dir_.string(), m, c));
}

// An adapter the run continued and saved keeps what the user gave: the loaded file's keys (its
// base model, task type, revision, keys oomb does not read) with r, alpha and targets set by the run;
// an adapter made for another base model is named in a warning (the base's name compared by its last
// path component, case-insensitive).
TEST_F(AdapterFolder, AContinuedAdapterKeepsTheLoadedKeysAndItsBaseModel) {
  const LoraCase k{"keep", 1, 4, 2, 8, 32, false, false, false, 32, 16, 8, 4, "q_proj,v_proj"};
  const auto m = lora_model(k);
  const auto c = lora_config(k);
  write_adapter(init_adapters(m, c, 3), dir_.string(), adapter_config(c, "Qwen/Qwen2.5-0.5B"));
  Json j = read_json_file((dir_ / "adapter_config.json").string());
  j["init_lora_weights"] = "gaussian";  // how PEFT initialised it: kept (a task other than CAUSAL_LM is refused)
  j["revision"] = "v2";
  j["lora_dropout"] = 0.0;
  j["my_note"] = "kept";
  write_text_file((dir_ / "adapter_config.json").string(), j.dump());
  const AdapterConfig loaded = read_adapter_config(dir_.string());
  EXPECT_EQ(loaded.base_model, "Qwen/Qwen2.5-0.5B");
  // Saved by a run on another base (tiny's random weights): the loaded base model is kept.
  const auto out = dir_ / "out";
  write_adapter(init_adapters(m, c, 4), out.string(), continued_adapter_config(loaded, c, "tiny"));
  const Json saved = read_json_file((out / "adapter_config.json").string());
  EXPECT_EQ(saved.at("base_model_name_or_path"), "Qwen/Qwen2.5-0.5B");
  EXPECT_EQ(saved.at("init_lora_weights"), "gaussian");
  EXPECT_EQ(saved.at("revision"), "v2");
  EXPECT_EQ(saved.at("my_note"), "kept");
  EXPECT_EQ(saved.at("r"), 4);
  EXPECT_EQ(saved.at("lora_dropout"), 0.0);
  // A loaded file without a base model takes the run's.
  AdapterConfig nameless = loaded;
  nameless.base_model.clear();
  EXPECT_EQ(continued_adapter_config(nameless, c, "tiny").base_model, "tiny");
  // The warning names both models; the same model under a catalog id or a folder path is no warning.
  const std::string w = adapter_base_warning(loaded, dir_.string(), "tiny");
  EXPECT_NE(w.find("Qwen/Qwen2.5-0.5B"), std::string::npos) << w;
  EXPECT_NE(w.find("'tiny'"), std::string::npos) << w;
  EXPECT_NE(w.find("adapter_config.json"), std::string::npos) << w;
  EXPECT_EQ(adapter_base_warning(loaded, dir_.string(), "qwen2.5-0.5b"), "");
  EXPECT_EQ(adapter_base_warning(loaded, dir_.string(), "/models/Qwen2.5-0.5B/"), "");
  EXPECT_EQ(adapter_base_warning(nameless, dir_.string(), "tiny"), "");
}

TEST_F(AdapterFolder, AMissingExtraOrMisshapenTensorIsNamed) {
  const LoraCase k{"t", 2, 4, 2, 8, 32, false, false, false, 32, 16, 8, 4, "q_proj,v_proj"};
  const auto m = lora_model(k);
  const auto c = lora_config(k);
  const std::string file = (dir_ / "adapter_model.safetensors").string();
  const std::string q0 = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  // Missing: an adapter of only q_proj read as q_proj + v_proj.
  {
    auto cq = c;
    cq.lora_targets = {"q_proj", "v_proj", "o_proj"};
    write_adapter(init_adapters(m, cq, 1), dir_.string(), adapter_config(cq, "b"));
    // extra: the file has o_proj's, the run (config rewritten to q,v) does not
    Json j = read_json_file((dir_ / "adapter_config.json").string());
    j["target_modules"] = Json({"q_proj", "v_proj"});
    write_text_file((dir_ / "adapter_config.json").string(), j.dump());
    try {
      read_adapter(dir_.string(), m, c);
      ADD_FAILURE() << "an extra tensor was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("o_proj.lora_A.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("extra tensor"), std::string::npos) << e.what();
    }
  }
  {
    auto cq = c;
    cq.lora_targets = {"q_proj"};
    write_adapter(init_adapters(m, cq, 1), dir_.string(), adapter_config(c, "b"));  // config says q, v
    try {
      read_adapter(dir_.string(), m, c);
      ADD_FAILURE() << "a missing tensor was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("v_proj.lora_A.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("missing tensor"), std::string::npos) << e.what();
    }
  }
  {
    auto c8 = c;
    c8.lora_rank = 8;
    write_adapter(init_adapters(m, c8, 1), dir_.string(), adapter_config(c, "b"));  // config says r 4
    try {
      read_adapter(dir_.string(), m, c);
      ADD_FAILURE() << "a misshapen tensor was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(q0), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("[8, 32]"), std::string::npos) << e.what();
    }
  }
  // A run with fewer --layers reads the adapter of the whole model (the left-out layers skipped).
  write_adapter(init_adapters(m, c, 1), dir_.string(), adapter_config(c, "b"));
  auto m1 = m;
  m1.layers = 1;
  const ParamTensors one = read_adapter(dir_.string(), m1, c, 2);
  EXPECT_EQ(one.layout.params().size(), 4u);
  EXPECT_THROW(read_adapter(dir_.string(), m1, c, 1), Error);  // a checkpoint of 1 layer has no layer 1
}

}  // namespace
}  // namespace oomb::executor
