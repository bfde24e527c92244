// cuBLASLt is loaded on first use (executor/cuda/cublaslt_lazy.cpp): a call goes through to the
// real library, with or without a GPU (status names are host code). That no command loads it at
// start-up is checked on the CLI: tests/cli/hostile_test.sh bounds `oomb models`' resident memory.
#include <gtest/gtest.h>

#include <string>

#include "executor/cuda/cublaslt_lazy.h"

namespace oomb::cuda {
namespace {

TEST(CublasLtLazy, FirstCallLoadsTheLibraryAndForwardsToIt) {
  EXPECT_EQ(cublaslt_status_name(0), "CUBLAS_STATUS_SUCCESS");
  EXPECT_EQ(cublaslt_status_name(15), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_TRUE(cublaslt_loaded());
  EXPECT_EQ(cublaslt_load_error(), "");
  // The library's own answer, not a stub's: its version is the toolkit's major version.
  EXPECT_GE(cublaslt_version(), size_t{10000});
}

}  // namespace
}  // namespace oomb::cuda
