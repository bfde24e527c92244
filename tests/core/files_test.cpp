#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "core_test_util.h"
#include "core/files.h"

namespace oomb {
namespace {

using testing::error_of;

class WriteFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("oomb-write-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
  std::filesystem::path dir_;
};

TEST_F(WriteFile, WritesThroughSymlinksAndLeavesNoTempFile) {
  const auto real = dir_ / "real.json", link = dir_ / "link.json";
  write_text_file(real.string(), "old");
  std::filesystem::create_symlink("real.json", link);
  write_text_file(link.string(), "new");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_EQ(read_text_file(real.string()), "new");
  EXPECT_EQ(names(), (std::vector<std::string>{"link.json", "real.json"}));
}

TEST_F(WriteFile, WritesFifosInPlace) {
  const auto fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = read_text_file(fifo.string()); });
  write_text_file(fifo.string(), "through the pipe");
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_EQ(names(), (std::vector<std::string>{"fifo"}));
}

TEST_F(WriteFile, RefusesDirectoriesAndMissingParents) {
  EXPECT_NE(error_of([&] { write_text_file(dir_.string(), "x"); }).find("is a directory"), std::string::npos);
  EXPECT_THROW(write_text_file((dir_ / "no/such/dir/f.json").string(), "x"), Error);
  EXPECT_NE(error_of([&] { check_writable((dir_ / "no/f.json").string(), "--out"); }).find("--out"), std::string::npos);
  EXPECT_NE(error_of([&] { check_writable(dir_.string(), "--report"); }).find("--report"), std::string::npos);
  EXPECT_NO_THROW(check_writable((dir_ / "new.json").string(), "--out"));
  EXPECT_TRUE(names().empty());  // checking writes nothing
}

}  // namespace
}  // namespace oomb
