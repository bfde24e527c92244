#pragma once
// Executor tests that write files: a fresh folder per test under the build tree, and the message
// of the oomb::Error a call throws.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "core/error.h"

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

}  // namespace oomb::executor::test
