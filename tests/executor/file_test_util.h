#pragma once
// Executor tests that write files: a fresh folder per test under the build tree, the message of
// the oomb::Error a call throws, and safetensors files written by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json.h"
#include "executor/runtime/weights.h"

namespace oomb::executor::test {

// Each test gets OOMB_BINARY_DIR/<suite_dir>/<test name>, emptied at set-up.
class FileTest : public ::testing::Test {
 protected:
  explicit FileTest(const char* suite_dir) : suite_dir_(suite_dir) {}
  void SetUp() override {
    dir_ = std::filesystem::path(OOMB_BINARY_DIR) / suite_dir_ /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;

 private:
  const char* suite_dir_;
};

// Message of the oomb::Error f throws (fails the test when it throws nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no oomb::Error thrown";
  return {};
}

// A one-file safetensors file built tensor by tensor (raw element bytes); the header may be edited
// before the file is written.
struct SafetensorsWriter {
  Json header = Json::object();
  std::string data;
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape, const void* bytes,
           size_t size) {
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + size}}};
    data.append(static_cast<const char*>(bytes), size);
  }
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* v, int64_t n) {
    add(name, "F32", shape, v, static_cast<size_t>(n) * 4);
  }
  void add_f32(const ParamTensors& w) {
    for (const auto& p : w.layout.params()) add_f32(p.name, p.shape, w.at(p), p.numel);
  }
  void write(const std::string& p) const {
    const std::string text = header.dump();
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = text.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << text << data;
  }
};

}  // namespace oomb::executor::test
