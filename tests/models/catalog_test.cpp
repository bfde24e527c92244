#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/specs.h"

namespace oomb::models {
namespace {

bool contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Published parameter counts (model cards / release notes), checked against our exact count.
const std::map<std::string, double>& published_params() {
  static const std::map<std::string, double> m = {
      {"qwen2.5-0.5b", 0.49e9},  {"qwen2.5-1.5b", 1.54e9},  {"qwen2.5-3b", 3.09e9},
      {"qwen2.5-7b", 7.62e9},    {"qwen2.5-14b", 14.7e9},   {"qwen2.5-32b", 32.5e9},
      {"qwen2.5-72b", 72.7e9},   {"llama-3.2-1b", 1.24e9},  {"llama-3.2-3b", 3.21e9},
      {"llama-3.1-8b", 8.03e9},  {"llama-3.1-70b", 70.6e9}, {"mistral-7b-v0.3", 7.25e9},
      {"qwen3-8b", 8.2e9},       {"qwen3-0.6b", 0.6e9},     {"qwen3-1.7b", 1.7e9},
      {"qwen3-4b", 4.0e9},       {"qwen3-14b", 14.8e9},     {"qwen3-32b", 32.8e9},
  };
  return m;
}

const std::vector<std::string> kGpus = {"h200",      "h100-sxm", "h100-pcie", "a100-80gb-sxm", "a100-40gb",
                                        "gh200",     "b200",     "l40s",      "rtx-4090"};
const std::vector<std::string> kHosts = {"dgx-h200",   "dgx-h200-shared",  "dgx-h100", "dgx-a100",
                                         "gh200-node", "workstation-512g", "workstation-128g", "hgx-b200"};
// GPUs whose host link is PCIe (everything above except GH200's NVLink-C2C).
const std::vector<std::string> kPcieGpus = {"h200", "h100-sxm", "h100-pcie", "a100-80gb-sxm",
                                            "a100-40gb", "b200", "l40s", "rtx-4090"};

TEST(CatalogContents, EveryEntryLoadsUnderItsOwnId) {
  for (const auto& id : model_ids()) {
    SCOPED_TRACE("llm/" + id);
    ModelSpec m;
    ASSERT_NO_THROW(m = load_model(id));
    EXPECT_EQ(m.id, id);
    EXPECT_FALSE(m.source.empty());
    EXPECT_EQ(m.head_dim * m.q_heads, m.q_dim());
  }
  for (const auto& id : gpu_ids()) {
    SCOPED_TRACE("gpu/" + id);
    GpuSpec g;
    ASSERT_NO_THROW(g = load_gpu(id));
    EXPECT_EQ(g.id, id);
    EXPECT_LT(g.reserved_bytes, g.hbm_capacity_bytes);
  }
  for (const auto& id : host_ids()) {
    SCOPED_TRACE("host/" + id);
    HostSpec h;
    ASSERT_NO_THROW(h = load_host(id));
    EXPECT_EQ(h.id, id);
    EXPECT_LE(h.pinnable_bytes, h.ram_bytes);
  }
}

TEST(CatalogContents, ContainsTheDocumentedIds) {
  auto models = model_ids();
  for (const auto& [id, count] : published_params()) EXPECT_TRUE(contains(models, id)) << "llm/" << id;
  EXPECT_TRUE(contains(models, "tiny"));
  auto gpus = gpu_ids();
  for (const auto& id : kGpus) EXPECT_TRUE(contains(gpus, id)) << "gpu/" << id;
  auto hosts = host_ids();
  for (const auto& id : kHosts) EXPECT_TRUE(contains(hosts, id)) << "host/" << id;
}

TEST(CatalogContents, EveryGpuDefaultHostLoads) {
  for (const auto& id : gpu_ids()) {
    auto g = load_gpu(id);
    if (g.default_host.empty()) continue;
    EXPECT_NO_THROW(load_host(g.default_host)) << "gpu/" << id << " default_host " << g.default_host;
  }
  // Every catalog GPU we ship names one.
  for (const auto& id : kGpus) EXPECT_FALSE(load_gpu(id).default_host.empty()) << id;
}

TEST(CatalogContents, ShippedGpusCiteEveryFigure) {
  const std::vector<std::string> keys = {"hbm_capacity_bytes", "hbm_bytes_per_s", "bf16_flops_per_s",
                                         "fp32_flops_per_s",   "h2d_bytes_per_s", "d2h_bytes_per_s",
                                         "duplex_factor",      "sm_count",        "reserved_bytes",
                                         "interconnect_bytes_per_s", "collective_latency_s",
                                         "collective_step_latency_s", "efficiency", "cuda_device_names"};
  for (const auto& id : kGpus) {
    auto g = load_gpu(id);
    for (const auto& k : keys) {
      auto it = g.sources.find(k);
      EXPECT_TRUE(it != g.sources.end() && !it->second.empty()) << "gpu/" << id << " sources." << k;
    }
  }
}

// A host with a network to other nodes (several-node plans) cites both of its figures, and the
// whole-host DGX-class entries have one (their datasheets list the NICs).
TEST(CatalogContents, NetworkedHostsCiteTheirNetwork) {
  for (const auto& id : kHosts) {
    const auto h = load_host(id);
    if (h.network_bytes_per_s <= 0) continue;
    for (const char* k : {"network_bytes_per_s", "network_step_latency_s"}) {
      auto it = h.sources.find(k);
      EXPECT_TRUE(it != h.sources.end() && !it->second.empty()) << "host/" << id << " sources." << k;
    }
    EXPECT_GT(h.network_step_latency_s, 0) << id;
  }
  for (const char* id : {"dgx-h200", "dgx-h100", "dgx-a100", "hgx-b200"}) EXPECT_GT(load_host(id).network_bytes_per_s, 0) << id;
  EXPECT_EQ(load_host("workstation-128g").network_bytes_per_s, 0);
}

TEST(CatalogContents, ParamCountsMatchPublishedFigures) {
  // The two anchors, tightly.
  EXPECT_NEAR(static_cast<double>(load_model("qwen2.5-7b").param_count()), 7.62e9, 7.62e9 * 0.005);
  EXPECT_NEAR(static_cast<double>(load_model("llama-3.1-8b").param_count()), 8.03e9, 8.03e9 * 0.005);
  // Every published model within 2% (published figures are rounded to 2-3 significant digits).
  for (const auto& [id, published] : published_params()) {
    double ours = static_cast<double>(load_model(id).param_count());
    EXPECT_NEAR(ours / published, 1.0, 0.02) << id << ": ours " << ours << " vs published " << published;
  }
}

// The Qwen3 dense sizes' cards also give the parameters without the embedding table (0.44B, 1.4B,
// 3.6B, 14.8B's 13.2B, 32.8B's 31.2B; 8B's 6.95B): ours without the table and the LM head, within
// 3% (the cards round to two digits: 0.44B).
TEST(CatalogContents, Qwen3NonEmbeddingCountsAsTheCardsGiveThem) {
  for (const auto& [id, published] : std::map<std::string, double>{{"qwen3-0.6b", 0.44e9}, {"qwen3-1.7b", 1.4e9},
                                                                    {"qwen3-4b", 3.6e9},   {"qwen3-8b", 6.95e9},
                                                                    {"qwen3-14b", 13.2e9}, {"qwen3-32b", 31.2e9}}) {
    const ModelSpec m = load_model(id);
    const double ours = static_cast<double>(m.param_count() - m.embedding_params() - m.lm_head_params());
    EXPECT_NEAR(ours / published, 1.0, 0.03) << id << ": ours " << ours;
    EXPECT_TRUE(m.qk_norm) << id;
    EXPECT_EQ(m.tied_embeddings, m.hidden < 4096) << id;  // 0.6B, 1.7B and 4B tie the LM head
  }
}

TEST(CatalogContents, TiedEmbeddingsAndBiasPerFamily) {
  for (const auto& id : {"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "llama-3.2-1b", "llama-3.2-3b"})
    EXPECT_TRUE(load_model(id).tied_embeddings) << id;
  for (const auto& id : {"qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "llama-3.1-8b",
                         "llama-3.1-70b", "mistral-7b-v0.3"})
    EXPECT_FALSE(load_model(id).tied_embeddings) << id;
  for (const auto& [id, count] : published_params()) {
    auto m = load_model(id);
    EXPECT_EQ(m.qkv_bias, m.family == "qwen2") << id;
    if (id.rfind("llama-3.", 0) == 0) {
      ASSERT_TRUE(m.rope_scaling.is_object()) << id;
      EXPECT_EQ(m.rope_scaling.value("rope_type", ""), "llama3") << id;
    }
  }
}

TEST(CatalogContents, KvBytesPerTokenLlama31_8b) {
  // 2 (K and V) * 32 layers * 8 kv heads * 128 head_dim * 2 bytes (bf16).
  EXPECT_EQ(load_model("llama-3.1-8b").kv_bytes_per_token(2), 131072);
}

TEST(CatalogContents, PcieGpusUseRealisticHostLinkRates) {
  // Pinned cudaMemcpy over PCIe Gen5 x16 reaches ~50-55 GB/s, Gen4 ~25 GB/s; 64 GB/s is theoretical.
  for (const auto& id : kPcieGpus) {
    auto g = load_gpu(id);
    EXPECT_LT(g.h2d_bytes_per_s, 70e9) << id;
    EXPECT_LT(g.d2h_bytes_per_s, 70e9) << id;
    EXPECT_NE(g.sources.at("h2d_bytes_per_s").find("PCIe"), std::string::npos) << id;
  }
}

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("oomb_catalog_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name, const std::string& text) const {
    auto p = path_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

TEST(CatalogContents, UserFilesLoadByPath) {
  TempDir dir;
  Json m = load_model("llama-3.1-8b").to_json();
  m["id"] = "my-llama";
  m["layers"] = 16;
  auto model = load_model(dir.file("my-llama.json", m.dump(2)));
  EXPECT_EQ(model.id, "my-llama");
  EXPECT_EQ(model.layers, 16);
  EXPECT_EQ(model.kv_bytes_per_token(2), 131072 / 2);

  Json g = load_gpu("h100-sxm").to_json();
  g["id"] = "my-gpu";
  auto gpu = load_gpu(dir.file("my-gpu.json", g.dump(2)));
  EXPECT_EQ(gpu.id, "my-gpu");
  EXPECT_EQ(gpu.hbm_capacity_bytes, load_gpu("h100-sxm").hbm_capacity_bytes);

  Json h = load_host("workstation-128g").to_json();
  h["id"] = "my-host";
  auto host = load_host(dir.file("my-host.json", h.dump(2)));
  EXPECT_EQ(host.id, "my-host");
  EXPECT_EQ(host.ram_bytes, load_host("workstation-128g").ram_bytes);
}

// Every shipped GPU names the device the CUDA runtime reports (validate checks a CUPTI trace's device
// against it), no two the same name, and the names round-trip; a malformed entry is refused by key.
TEST(CatalogContents, ShippedGpusNameTheirCudaDevice) {
  std::map<std::string, std::string> owner;
  for (const auto& id : kGpus) {
    const GpuSpec g = load_gpu(id);
    ASSERT_FALSE(g.cuda_device_names.empty()) << id;
    for (const auto& n : g.cuda_device_names) {
      EXPECT_EQ(n.rfind("NVIDIA ", 0), 0u) << id << ": " << n;
      EXPECT_TRUE(owner.emplace(n, id).second) << n << " is named by " << owner[n] << " and " << id;
    }
    EXPECT_EQ(gpu_from_json(g.to_json(), id).cuda_device_names, g.cuda_device_names);
  }
  TempDir dir;
  Json g = load_gpu("h200").to_json();
  g["cuda_device_names"] = Json::array({"NVIDIA H200", 7});
  try {
    load_gpu(dir.file("bad-names.json", g.dump(2)));
    FAIL() << "a non-string device name was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "cuda_device_names[1]");
  }
}

TEST(CatalogContents, GpuFileWithReserveAboveCapacityIsRejected) {
  TempDir dir;
  Json g = load_gpu("rtx-4090").to_json();
  g["reserved_bytes"] = g["hbm_capacity_bytes"];
  std::string path = dir.file("bad-gpu.json", g.dump(2));
  try {
    load_gpu(path);
    FAIL() << "reserved_bytes == hbm_capacity_bytes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "reserved_bytes");
    EXPECT_EQ(e.where(), path);
    EXPECT_NE(std::string(e.what()).find("reserved_bytes"), std::string::npos) << e.what();
  }
  g["reserved_bytes"] = g["hbm_capacity_bytes"].get<int64_t>() + 1;
  try {
    load_gpu(dir.file("worse-gpu.json", g.dump(2)));
    FAIL() << "reserved_bytes > hbm_capacity_bytes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.key(), "reserved_bytes");
  }
}

}  // namespace
}  // namespace oomb::models
