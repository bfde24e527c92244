// Hugging Face checkpoints as --weights: one file or an index plus shards, F32 / BF16 / F16
// tensors, errors that name the tensor and the shard, and the same layout written back.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <algorithm>

#include "core/error.h"
#include "core/json.h"
#include "core/files.h"
#include "executor/cpu/cpu_backend.h"
#include "executor/runtime/bf16.h"
#include "executor/runtime/driver.h"
#include "executor/runtime/tokens.h"
#include "executor/runtime/weights.h"
#include "file_test_util.h"
#include "test_util.h"

namespace oomb::executor {
namespace {

namespace fs = std::filesystem;

class Checkpoint : public test::FileTest {
 protected:
  Checkpoint() : FileTest("executor_checkpoint_test") {}
};

using test::error_of;
using test::SafetensorsWriter;

bool same_bits(const Weights& a, const Weights& b) {
  return a.data.size() == b.data.size() && std::memcmp(a.data.data(), b.data.data(), a.data.size() * 4) == 0;
}

double loss_of(const models::ModelSpec& m, const Weights& w) {
  const step::Config c = test::small_config(96, 32, 16, 1);
  CpuBackend backend;
  Engine e(backend, m, c, w);
  return e.step(TokenSource::synthetic(m.vocab, 7).sequence(0, c.context_tokens)).loss;
}

// A Qwen3-shaped tiny model: q/k norm, no QKV bias, head_dim 16 != hidden / heads (64 / 8).
models::ModelSpec qwen3_tiny() {
  models::ModelSpec m = test::small_model(3, 8, 2, 16, 64, false, false, 97, 96);
  m.family = "qwen3";
  m.qk_norm = true;
  return m;
}

TEST_F(Checkpoint, ShardedGivesTheSameLossAsOneFile) {
  const models::ModelSpec m = models::load_model("tiny");
  const Weights w = random_weights(m, 11, 0.1f);
  const auto one = write_checkpoint(w, path("single"));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], path("single/model.safetensors"));
  // Shards of at most 40,000 bytes: tiny's 428 KB of F32 tensors in about a dozen files.
  const auto sharded = write_checkpoint(w, path("sharded"), {40'000, Dtype::fp32});
  ASSERT_GT(sharded.size(), 3u);
  EXPECT_EQ(sharded[0], path("sharded/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(path("sharded/model-00001-of-" + std::string(5 - std::to_string(sharded.size() - 1).size(), '0') +
                              std::to_string(sharded.size() - 1) + ".safetensors")));
  const Json index = read_json_file(sharded[0]);
  EXPECT_EQ(index["weight_map"].size(), w.layout.params().size());
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), w.layout.total() * 4);
  for (size_t i = 1; i < sharded.size(); ++i) {
    // Every shard within the limit, except a single tensor larger than it.
    const Json h = [&] {
      std::ifstream in(sharded[i], std::ios::binary);
      uint64_t n = 0;
      in.read(reinterpret_cast<char*>(&n), 8);
      std::string t(n, '\0');
      in.read(t.data(), static_cast<std::streamsize>(n));
      return Json::parse(t);
    }();
    int64_t bytes = 0;
    for (auto it = h.begin(); it != h.end(); ++it)
      if (it.key() != "__metadata__") bytes += it.value()["data_offsets"][1].get<int64_t>() - it.value()["data_offsets"][0].get<int64_t>();
    EXPECT_TRUE(bytes <= 40'000 || h.size() == 2) << sharded[i] << " holds " << bytes << " bytes";
  }
  const Weights a = read_checkpoint(path("single"), m), b = read_checkpoint(path("sharded"), m),
                c = read_checkpoint(sharded[0], m), d = read_checkpoint(one[0], m);
  EXPECT_TRUE(same_bits(a, w));
  EXPECT_TRUE(same_bits(b, w));
  EXPECT_TRUE(same_bits(c, w));
  EXPECT_TRUE(same_bits(d, w));
  const double loss = loss_of(m, a);
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_EQ(loss_of(m, b), loss);

  // BF16 shards: the loss of the weights rounded to bf16, exactly.
  write_checkpoint(w, path("bf16"), {40'000, Dtype::bf16});
  Weights rounded = w;
  for (float& x : rounded.data) x = round_to_bf16(x);
  const Weights r = read_checkpoint(path("bf16"), m);
  EXPECT_TRUE(same_bits(r, rounded));
  EXPECT_EQ(loss_of(m, r), loss_of(m, rounded));
  EXPECT_NE(loss_of(m, r), loss) << "bf16 rounding should move the loss of random weights";
}

TEST_F(Checkpoint, Qwen3ShapedLayoutHasHfNormNamesAndShardsRoundTrip) {
  const models::ModelSpec m = qwen3_tiny();
  const ParamLayout layout(m);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".self_attn.";
    const ParamInfo* q = layout.find(pre + "q_norm.weight");
    const ParamInfo* k = layout.find(pre + "k_norm.weight");
    ASSERT_TRUE(q && k) << l;
    EXPECT_EQ(q->shape, std::vector<int64_t>{16});
    EXPECT_EQ(k->shape, std::vector<int64_t>{16});
    EXPECT_EQ(layout.layer(l).q_norm, q->offset);
    EXPECT_EQ(layout.layer(l).k_norm, k->offset);
    EXPECT_FALSE(q->decay);
    EXPECT_EQ(layout.find(pre + "q_proj.bias"), nullptr);
    EXPECT_EQ(layout.find(pre + "q_proj.weight")->shape, (std::vector<int64_t>{8 * 16, 64}));
  }
  // Without qk_norm the layout is unchanged (no norm entries, the same offsets).
  models::ModelSpec plain = m;
  plain.qk_norm = false;
  EXPECT_EQ(ParamLayout(plain).layer(0).q_norm, -1);
  EXPECT_EQ(ParamLayout(plain).total() + m.layers * 2 * 16, layout.total());
  EXPECT_EQ(static_cast<int64_t>(layout.total()), m.param_count());

  const Weights w = random_weights(m, 5, 0.1f);
  write_checkpoint(w, path("one"));
  const auto shards = write_checkpoint(w, path("many"), {20'000, Dtype::fp32});
  ASSERT_GT(shards.size(), 2u);
  EXPECT_EQ(read_json_file(shards[0])["weight_map"].count("model.layers.2.self_attn.k_norm.weight"), 1u);
  EXPECT_TRUE(same_bits(read_checkpoint(path("one"), m), w));
  EXPECT_TRUE(same_bits(read_checkpoint(path("many"), m), w));
  // A Qwen2-style checkpoint (no q/k norms) for this model: the missing norm is named.
  const std::string msg = error_of([&] {
    write_checkpoint(random_weights(plain, 5, 0.1f), path("plain"));
    read_checkpoint(path("plain"), m);
  });
  EXPECT_NE(msg.find("q_norm.weight"), std::string::npos) << msg;
  // And a Qwen3 checkpoint for the model without norms: the extra tensor is named.
  const std::string extra = error_of([&] { read_checkpoint(path("one"), plain); });
  EXPECT_TRUE(extra.find("self_attn.k_norm.weight") != std::string::npos ||
              extra.find("self_attn.q_norm.weight") != std::string::npos)
      << extra;
  EXPECT_NE(extra.find("extra tensor"), std::string::npos) << extra;
}

// Writes a safetensors file whose every tensor of `layout` is `dtype` (BF16 or F16) with the raw
// 2-byte elements of `pattern`, repeated.
void write_typed(const std::string& p, const ParamLayout& layout, const std::string& dtype,
                 const std::vector<uint16_t>& pattern) {
  SafetensorsWriter file;
  for (const auto& t : layout.params()) {
    std::string bytes;
    for (int64_t i = 0; i < t.numel; ++i) {
      const uint16_t v = pattern[static_cast<size_t>(i) % pattern.size()];
      bytes.push_back(static_cast<char>(v & 0xFF));
      bytes.push_back(static_cast<char>(v >> 8));
    }
    file.add(t.name, dtype, t.shape, bytes.data(), bytes.size());
  }
  file.write(p);
}

TEST_F(Checkpoint, ReadsF16AndBf16Exactly) {
  const models::ModelSpec m = test::small_model(1, 2, 1, 8, 16, true, false, 29, 16);
  const ParamLayout layout(m);
  // IEEE half: 1.5, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal), 0, -0.5.
  write_typed(path("f16.safetensors"), layout, "F16", {0x3E00, 0xC000, 0x7BFF, 0x0001, 0x0400, 0x0000, 0xB800});
  const Weights h = read_checkpoint(path("f16.safetensors"), m);
  const float want[] = {1.5f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -14), 0.0f, -0.5f};
  for (const auto& p : layout.params())
    for (int64_t i = 0; i < p.numel; ++i) ASSERT_EQ(h.at(p)[i], want[i % 7]) << p.name << "[" << i << "]";
  // bfloat16: 1.5, -2, 3.0e38-ish (0x7F7F), 1e-38-ish subnormal (0x0001).
  write_typed(path("bf16.safetensors"), layout, "BF16", {0x3FC0, 0xC000, 0x7F7F, 0x0001});
  const Weights b = read_checkpoint(path("bf16.safetensors"), m);
  for (const auto& p : layout.params())
    for (int64_t i = 0; i < p.numel; ++i) {
      const uint16_t bits[] = {0x3FC0, 0xC000, 0x7F7F, 0x0001};
      ASSERT_EQ(b.at(p)[i], bf16_to_f32(bits[i % 4])) << p.name;
    }
  // A non-finite value (F16 -inf) is decoded as such and refused, naming the tensor.
  write_typed(path("inf.safetensors"), layout, "F16", {0x3E00, 0xFC00});
  try {
    read_checkpoint(path("inf.safetensors"), m);
    FAIL() << "-inf weights were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
  }
}

TEST_F(Checkpoint, ErrorsNameTheTensorAndTheShard) {
  const models::ModelSpec m = models::load_model("tiny");
  const Weights w = random_weights(m, 3, 0.05f);
  const auto files = write_checkpoint(w, path("ok"), {60'000, Dtype::fp32});
  ASSERT_GT(files.size(), 3u);
  Json index = read_json_file(files[0]);
  const std::string shard1 = index["weight_map"]["model.layers.0.self_attn.q_proj.weight"].get<std::string>();
  auto write_index = [&](const Json& j) {
    fs::copy(path("ok"), path("bad"), fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    write_text_file(path("bad/model.safetensors.index.json"), j.dump());
  };

  // The index lacks a tensor.
  Json j = index;
  j["weight_map"].erase("model.layers.1.mlp.down_proj.weight");
  write_index(j);
  std::string msg = error_of([&] { read_checkpoint(path("bad"), m); });
  EXPECT_NE(msg.find("model.layers.1.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing tensor"), std::string::npos) << msg;
  fs::remove_all(path("bad"));

  // The index maps a tensor to a shard that does not hold it.
  j = index;
  const std::string other = index["weight_map"]["lm_head.weight"].get<std::string>();
  ASSERT_NE(other, shard1);
  j["weight_map"]["model.layers.0.self_attn.q_proj.weight"] = other;
  write_index(j);
  msg = error_of([&] { read_checkpoint(path("bad"), m); });
  EXPECT_NE(msg.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << msg;
  // Either side of the mismatch is named with its shard.
  EXPECT_TRUE(msg.find(other) != std::string::npos || msg.find(shard1) != std::string::npos) << msg;
  fs::remove_all(path("bad"));

  // A shard file is missing.
  write_index(index);
  fs::remove(path("bad/" + shard1));
  msg = error_of([&] { read_checkpoint(path("bad"), m); });
  EXPECT_NE(msg.find(shard1), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
  fs::remove_all(path("bad"));

  // An extra tensor in the index (another model's).
  j = index;
  j["weight_map"]["model.layers.0.mlp.experts.0.up_proj.weight"] = shard1;
  write_index(j);
  msg = error_of([&] { read_checkpoint(path("bad"), m); });
  EXPECT_NE(msg.find("model.layers.0.mlp.experts.0.up_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("extra tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find(shard1), std::string::npos) << msg;
  fs::remove_all(path("bad"));

  // A misshapen tensor: the shard is named (it holds another model's q_proj).
  models::ModelSpec wide = m;
  wide.hidden = 96;
  wide.q_heads = 6;
  write_checkpoint(random_weights(wide, 3, 0.05f), path("wide"), {60'000, Dtype::fp32});
  Json wi = read_json_file(path("wide/model.safetensors.index.json"));
  msg = error_of([&] { read_checkpoint(path("wide"), m); });
  EXPECT_NE(msg.find("model.embed_tokens.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find(wi["weight_map"]["model.embed_tokens.weight"].get<std::string>()), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not match"), std::string::npos) << msg;

  // A folder with neither file.
  fs::create_directories(path("empty"));
  msg = error_of([&] { read_checkpoint(path("empty"), m); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;

  // Layers the run leaves out (--layers 1) are skipped; a checkpoint with more layers than the
  // model has is not.
  models::ModelSpec one = m;
  one.layers = 1;
  const Weights w1 = read_checkpoint(path("ok"), one, m.layers);
  EXPECT_EQ(w1.at("model.layers.0.mlp.up_proj.weight")[3], w.at("model.layers.0.mlp.up_proj.weight")[3]);
  msg = error_of([&] { read_checkpoint(path("ok"), one, 1); });
  EXPECT_NE(msg.find("model.layers.1."), std::string::npos) << msg;
  EXPECT_NE(msg.find("extra tensor"), std::string::npos) << msg;

  // A layer number beyond int64 is an extra tensor: it once overflowed (UBSan, found by the
  // safetensors fuzz target) and 10^20 wrapped to a layer the run "leaves out", so it was skipped.
  j = index;
  j["weight_map"]["model.layers.100000000000000000000.mlp.up_proj.weight"] = shard1;
  write_index(j);
  msg = error_of([&] { read_checkpoint(path("bad"), m); });
  EXPECT_NE(msg.find("model.layers.100000000000000000000.mlp.up_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("extra tensor"), std::string::npos) << msg;
  fs::remove_all(path("bad"));
}

TEST_F(Checkpoint, SkipsRotaryInverseFrequencyBuffers) {
  // Older Hugging Face checkpoints carry self_attn.rotary_emb.inv_freq per layer (a buffer, not a
  // parameter): it is skipped, in one file and in an index, and the weights read are unchanged.
  const models::ModelSpec m = models::load_model("tiny");
  const Weights w = random_weights(m, 4, 0.05f);
  SafetensorsWriter file;
  file.add_f32(w);
  const int64_t half = m.head_dim / 2;
  const std::vector<float> inv_freq(static_cast<size_t>(half), 0.5f);
  for (int64_t l = 0; l < m.layers; ++l)
    file.add_f32("model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq", {half}, inv_freq.data(), half);
  file.write(path("rotary.safetensors"));
  EXPECT_TRUE(same_bits(read_checkpoint(path("rotary.safetensors"), m), w));

  const auto files = write_checkpoint(w, path("sharded"), {60'000, Dtype::fp32});
  Json index = read_json_file(files[0]);
  const std::string shard = index["weight_map"]["model.layers.0.mlp.up_proj.weight"].get<std::string>();
  index["weight_map"]["model.layers.0.self_attn.rotary_emb.inv_freq"] = shard;
  write_text_file(path("sharded/model.safetensors.index.json"), index.dump());
  EXPECT_TRUE(same_bits(read_checkpoint(path("sharded"), m), w));
}

TEST_F(Checkpoint, ShapesAndOffsetsMustBeInt64Integers) {
  // A float in shape or data_offsets is a malformed entry: it was truncated (shape [64.5] read as
  // [64] and accepted) or, beyond int64, converted with undefined behaviour.
  const models::ModelSpec m = models::load_model("tiny");
  const Weights w = random_weights(m, 6, 0.05f);
  const std::string norm = "model.norm.weight";
  const std::vector<std::function<void(Json&)>> edits = {
      [&](Json& e) { e["shape"] = {static_cast<double>(m.hidden) + 0.5}; },
      [&](Json& e) { e["data_offsets"][1] = 1e300; },
      [&](Json& e) { e["data_offsets"][0] = 18446744073709551615u; },
      [&](Json& e) { e["shape"] = {"64"}; },
  };
  for (size_t k = 0; k < edits.size(); ++k) {
    SafetensorsWriter file;
    file.add_f32(w);
    edits[k](file.header[norm]);
    file.write(path("bad.safetensors"));
    const std::string msg = error_of([&] { read_checkpoint(path("bad.safetensors"), m); });
    EXPECT_NE(msg.find(norm), std::string::npos) << k << ": " << msg;
    EXPECT_NE(msg.find("malformed header entry"), std::string::npos) << k << ": " << msg;
  }
}

TEST_F(Checkpoint, WritesAFilePathAndReplacesTheOtherForm) {
  const models::ModelSpec m = models::load_model("tiny");
  const Weights w = random_weights(m, 9, 0.05f);
  // A .safetensors path: the file itself when it fits, <stem>-0000i-of-N shards + index when not.
  EXPECT_EQ(write_checkpoint(w, path("w.safetensors")), std::vector<std::string>{path("w.safetensors")});
  const auto s = write_checkpoint(w, path("g.safetensors"), {100'000, Dtype::fp32});
  EXPECT_EQ(s[0], path("g.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(path("g-00001-of-0000" + std::to_string(s.size() - 1) + ".safetensors")));
  EXPECT_TRUE(same_bits(read_checkpoint(s[0], m), w));
  // The same file path written sharded after a single file: the stale file goes.
  write_checkpoint(w, path("w.safetensors"), {100'000, Dtype::fp32});
  EXPECT_FALSE(fs::exists(path("w.safetensors")));
  EXPECT_TRUE(same_bits(read_checkpoint(path("w.safetensors.index.json"), m), w));
  // A folder first written sharded, then as one file: the stale index goes, the new file is read.
  write_checkpoint(w, path("ck"), {100'000, Dtype::fp32});
  const Weights w2 = random_weights(m, 10, 0.05f);
  write_checkpoint(w2, path("ck"));
  EXPECT_FALSE(fs::exists(path("ck/model.safetensors.index.json")));
  EXPECT_TRUE(same_bits(read_checkpoint(path("ck"), m), w2));
  EXPECT_FALSE(error_of([&] { write_checkpoint(w, path("x"), {0, Dtype::fp32}); }).empty());
  EXPECT_FALSE(error_of([&] { write_checkpoint(w, path("x"), {100'000, Dtype::fp8}); }).empty());
}

TEST_F(Checkpoint, AFailedWriteLeavesTheOldCheckpointWhole) {
  // Issue 24: a checkpoint is replaced as a whole or not at all. A write that fails part-way (here:
  // the folder made read-only after the first shards, via a file in the way of the index) leaves the
  // old shards, their index and no temporary file; a save into an existing (even empty) folder works.
  const models::ModelSpec m = models::load_model("tiny");
  const Weights old_w = random_weights(m, 21, 0.05f), new_w = random_weights(m, 22, 0.05f);
  fs::create_directories(path("empty"));
  EXPECT_EQ(write_checkpoint(old_w, path("empty")), std::vector<std::string>{path("empty/model.safetensors")});
  EXPECT_TRUE(same_bits(read_checkpoint(path("empty"), m), old_w));

  const auto old_files = write_checkpoint(old_w, path("ck"), {100'000, Dtype::fp32});
  ASSERT_GT(old_files.size(), 3u);
  auto listing = [&](const std::string& d) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path(d))) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing("ck");
  // The last file (the index) fails after every new shard was written aside: those are removed and
  // the old shards are untouched (byte-identical).
  if (fs::exists("/dev/full")) {
    write_checkpoint(old_w, path("ck2"), {100'000, Dtype::fp32});
    const std::string old_shard = read_text_file(path("ck2/model-00001-of-0000" + std::to_string(old_files.size() - 1) + ".safetensors"));
    fs::remove(path("ck2/model.safetensors.index.json"));
    fs::create_symlink("/dev/full", path("ck2/model.safetensors.index.json"));
    const auto before2 = listing("ck2");
    EXPECT_NE(error_of([&] { write_checkpoint(new_w, path("ck2"), {100'000, Dtype::fp32}); }).find("write failed"),
              std::string::npos);
    EXPECT_EQ(listing("ck2"), before2);
    EXPECT_EQ(read_text_file(path("ck2/model-00001-of-0000" + std::to_string(old_files.size() - 1) + ".safetensors")), old_shard);
  }
  // A full disk: /dev/full as one shard (a device is written in place, and fails): nothing of the new
  // checkpoint stays, the old one loads unchanged.
  const std::string shard2 = old_files[2];
  if (fs::exists("/dev/full")) {
    fs::remove(shard2);
    fs::create_symlink("/dev/full", shard2);
    EXPECT_NE(error_of([&] { write_checkpoint(new_w, path("ck"), {100'000, Dtype::fp32}); }).find("write failed"),
              std::string::npos);
    EXPECT_EQ(listing("ck"), before);
    EXPECT_TRUE(fs::is_symlink(shard2));
    fs::remove(shard2);
    write_checkpoint(old_w, path("ck"), {100'000, Dtype::fp32});
  }
  EXPECT_TRUE(same_bits(read_checkpoint(path("ck"), m), old_w));
  // Sharded over a single file: the single file stays until the shards and the index are in place.
  write_checkpoint(new_w, path("empty"), {100'000, Dtype::fp32});
  EXPECT_FALSE(fs::exists(path("empty/model.safetensors")));
  EXPECT_TRUE(same_bits(read_checkpoint(path("empty"), m), new_w));
  // Fewer shards than before: the stale shards of ours go; other files in the folder stay.
  std::ofstream(path("ck/config.json")) << "{}";
  write_checkpoint(new_w, path("ck"), {200'000, Dtype::fp32});
  const Json index = read_json_file(path("ck/model.safetensors.index.json"));
  std::set<std::string> named;
  for (const auto& [k, v] : index["weight_map"].items()) named.insert(v.get<std::string>());
  for (const auto& name : listing("ck"))
    EXPECT_TRUE(named.count(name) || name == "model.safetensors.index.json" || name == "config.json") << name;
  EXPECT_TRUE(same_bits(read_checkpoint(path("ck"), m), new_w));
}

TEST_F(Checkpoint, AFolderWithBothFormsReadsTheSingleFile) {
  // The single file first, as Hugging Face's loader: an index beside model.safetensors is ignored.
  const models::ModelSpec m = models::load_model("tiny");
  const Weights a = random_weights(m, 31, 0.05f), b = random_weights(m, 32, 0.05f);
  write_checkpoint(a, path("both"), {100'000, Dtype::fp32});
  write_safetensors(b, path("both/model.safetensors"));
  EXPECT_TRUE(same_bits(read_checkpoint(path("both"), m), b));
  EXPECT_TRUE(same_bits(read_checkpoint(path("both/model.safetensors.index.json"), m), a));
}

}  // namespace
}  // namespace oomb::executor
