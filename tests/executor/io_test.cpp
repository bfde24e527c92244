// Weights (safetensors) and token input: round trips, and clear oomb::Errors with no partial
// output for bad input.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "file_test_util.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

namespace fs = std::filesystem;

class Io : public test::FileTest {
 protected:
  Io() : FileTest("executor_io_test") {}
};

using test::error_of;
using test::SafetensorsWriter;

const models::ModelSpec kModel = test::small_model(2, 2, 1, 8, 16, false, true, 29, 16);

TEST_F(Io, SafetensorsRoundTripIsExact) {
  const Weights w = random_weights(kModel, 3, 0.02f);
  write_safetensors(w, path("w.safetensors"));
  const Weights r = read_safetensors(path("w.safetensors"), kModel);
  ASSERT_EQ(r.data.size(), w.data.size());
  EXPECT_EQ(std::memcmp(r.data.data(), w.data.data(), w.data.size() * 4), 0);
  EXPECT_FALSE(fs::exists(path("w.safetensors") + ".tmp-oomb"));
  // Fewer layers (--layers 1) read a prefix of the file's tensors.
  auto one = kModel;
  one.layers = 1;
  const Weights r1 = read_safetensors(path("w.safetensors"), one);
  EXPECT_EQ(r1.at("model.layers.0.mlp.up_proj.weight")[5], w.at("model.layers.0.mlp.up_proj.weight")[5]);
}

TEST_F(Io, ReadsBf16) {
  auto m = test::small_model(1, 2, 1, 8, 16, true, false, 29, 16);
  const ParamLayout layout(m);
  SafetensorsWriter file;
  for (const auto& p : layout.params()) {
    const std::vector<uint16_t> v(static_cast<size_t>(p.numel), 0x3FC0);  // 1.5 in bfloat16 (little-endian)
    file.add(p.name, "BF16", p.shape, v.data(), v.size() * 2);
  }
  file.write(path("bf16.safetensors"));
  const Weights w = read_safetensors(path("bf16.safetensors"), m);
  for (float v : w.data) ASSERT_EQ(v, 1.5f);
}

TEST_F(Io, TruncatedSafetensorsNamesFileAndTensor) {
  const Weights w = random_weights(kModel, 3, 0.02f);
  write_safetensors(w, path("w.safetensors"));
  const auto size = fs::file_size(path("w.safetensors"));
  fs::resize_file(path("w.safetensors"), size - 10);
  const std::string msg = error_of([&] { read_safetensors(path("w.safetensors"), kModel); });
  EXPECT_NE(msg.find("w.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;  // the last tensor is cut
  fs::resize_file(path("w.safetensors"), 5);
  EXPECT_NE(error_of([&] { read_safetensors(path("w.safetensors"), kModel); }).find("truncated"), std::string::npos);
}

TEST_F(Io, WeightsForAnotherShapeAreRejected) {
  const auto other = test::small_model(2, 2, 1, 8, 24, false, true, 29, 16);  // hidden 24
  write_safetensors(random_weights(other, 3, 0.02f), path("other.safetensors"));
  const std::string msg = error_of([&] { read_safetensors(path("other.safetensors"), kModel); });
  EXPECT_NE(msg.find("model.embed_tokens.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not match"), std::string::npos) << msg;
  auto tied = kModel;
  tied.tied_embeddings = true;
  write_safetensors(random_weights(tied, 3, 0.02f), path("tied.safetensors"));
  const std::string missing = error_of([&] { read_safetensors(path("tied.safetensors"), kModel); });
  EXPECT_NE(missing.find("lm_head.weight"), std::string::npos) << missing;
  EXPECT_NE(missing.find("missing"), std::string::npos) << missing;
}

TEST_F(Io, WrongDtypeIsRejected) {
  // F16 is read since Hugging Face checkpoints use it (checkpoint_test.cpp); F64 is not.
  const ParamLayout layout(kModel);
  SafetensorsWriter file;
  for (const auto& p : layout.params()) {
    const std::vector<double> v(static_cast<size_t>(p.numel), 0.0);
    file.add(p.name, "F64", p.shape, v.data(), v.size() * 8);
  }
  file.write(path("f64.safetensors"));
  const std::string msg = error_of([&] { read_safetensors(path("f64.safetensors"), kModel); });
  EXPECT_NE(msg.find("F64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.embed_tokens.weight"), std::string::npos) << msg;
}

TEST_F(Io, FailedWriteLeavesNoFile) {
  const Weights w = random_weights(kModel, 3, 0.02f);
  const std::string target = path("missing_dir/w.safetensors");
  EXPECT_FALSE(error_of([&] { write_safetensors(w, target); }).empty());
  EXPECT_FALSE(fs::exists(target));
  EXPECT_FALSE(fs::exists(target + ".tmp-oomb"));
}

TEST_F(Io, TokenFileValidation) {
  {
    std::ofstream out(path("t.bin"), std::ios::binary);
    const uint32_t ids[] = {1, 2, 29, 3};
    out.write(reinterpret_cast<const char*>(ids), sizeof ids);
  }
  const std::string msg = error_of([&] { TokenSource::from_file(path("t.bin"), 29); });
  EXPECT_NE(msg.find("t.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset 8"), std::string::npos) << msg;
  const TokenSource ok = TokenSource::from_file(path("t.bin"), 30);
  EXPECT_EQ(ok.sequence(0, 4), (std::vector<int32_t>{1, 2, 29, 3}));
  EXPECT_EQ(ok.sequence(1, 2), (std::vector<int32_t>{29, 3}));
  EXPECT_NE(error_of([&] { ok.sequence(0, 5); }).find("fewer"), std::string::npos);
  fs::resize_file(path("t.bin"), 7);
  EXPECT_NE(error_of([&] { TokenSource::from_file(path("t.bin"), 30); }).find("multiple of 4"), std::string::npos);
}

TEST_F(Io, SyntheticTokensAreSeededAndInRange) {
  const auto a = TokenSource::synthetic(29, 5).sequence(0, 100), b = TokenSource::synthetic(29, 5).sequence(0, 100);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, TokenSource::synthetic(29, 5).sequence(1, 100));
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 29);
}

TEST_F(Io, BadRunInputsAreUserErrors) {
  CpuBackend backend;
  const Weights w = random_weights(kModel, 3, 0.02f);
  EXPECT_NE(error_of([&] { Engine(backend, kModel, test::small_config(0, 16, 8, 2), w); }).find("--context"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Engine(backend, kModel, test::small_config(1, 16, 8, 2), w); }).find("at least 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Engine(backend, kModel, test::small_config(32, 12, 8, 2), w); }).find("--chunk"),
            std::string::npos);
  // Page dtypes the executor does not store (the simulator models them): refused by flag name.
  for (const char* dt : {"fp8", "fp16"}) {  // as named on the command line
    const Dtype d = storage_dtype_from_string(dt, "--kv-dtype");
    auto c = test::small_config(16, 8, 4, 2);
    c.kv_dtype = d;
    const std::string kv = error_of([&] { Engine(backend, kModel, c, w); });
    EXPECT_NE(kv.find("--kv-dtype"), std::string::npos) << kv;
    EXPECT_NE(kv.find(dt), std::string::npos) << kv;
    EXPECT_NE(kv.find("fp32 or bf16"), std::string::npos) << kv;
    c.kv_dtype = Dtype::bf16;
    c.kv_grad_dtype = d;
    const std::string grad = error_of([&] { Engine(backend, kModel, c, w); });
    EXPECT_NE(grad.find("--kv-grad-dtype"), std::string::npos) << grad;
    EXPECT_NE(grad.find("fp32 or bf16"), std::string::npos) << grad;
  }
  Engine e(backend, kModel, test::small_config(16, 8, 4, 2), w);
  EXPECT_NE(error_of([&] { e.step(std::vector<int32_t>(16, 29)); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { e.step(std::vector<int32_t>(15, 1)); }).find("context"), std::string::npos);
}

}  // namespace
}  // namespace oomb::executor
