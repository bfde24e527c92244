// The emulated CUDA runtime: streams, events, copies, memory, limits and error state.
#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"

#include <gtest/gtest.h>

namespace oomb::emulated_cuda {
namespace {

TEST(EmulatedRuntime, ErrorNames) {
  EXPECT_STREQ(cudaGetErrorName(cudaSuccess), "cudaSuccess");
}

}  // namespace
}  // namespace oomb::emulated_cuda
