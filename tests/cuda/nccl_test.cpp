// NCCL (issue 25): the one-rank check of the CUDA backend's communicator (bootstrapped over the
// self communicator): an all-reduce leaves the device buffer as it was, in fp32 and bf16, and counts
// its bytes. Skips without a device or an NCCL build.
#include <gtest/gtest.h>

#include <vector>

#include "executor/cuda/cuda_backend.h"
#include "executor/runtime/comm.h"
#ifdef OOMB_HAVE_NCCL
#include "executor/cuda/nccl_comm.h"
#endif

namespace oomb::executor::cuda {
namespace {

TEST(Nccl, OneRankAllReduceIsTheIdentity) {
#ifndef OOMB_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  CudaBackend b;
  const auto self = self_communicator();
  const auto comm = nccl_communicator(*self, b.stream(CudaStream::compute));
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "nccl");
  std::vector<float> h(1000);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.25f * static_cast<float>(i) - 7.0f;
  void* d = b.allocate(Tier::device, 4000);
  b.upload(d, h.data(), 4000);
  comm->all_reduce_sum(Tensor(d, DType::f32, 1000), 1000);
  std::vector<float> back(1000);
  b.download(back.data(), d, 4000);  // stream-ordered after the all-reduce
  EXPECT_EQ(back, h);
  std::vector<uint16_t> h16(1000, 0x3f80);  // 1.0 in bf16
  b.upload(d, h16.data(), 2000);
  comm->all_reduce_sum(Tensor(d, DType::bf16, 1000), 1000);
  std::vector<uint16_t> back16(1000);
  b.download(back16.data(), d, 2000);
  EXPECT_EQ(back16, h16);
  EXPECT_EQ(comm->reduced_bytes(), 6000);
  b.deallocate(Tier::device, d, 4000);
#endif
}

}  // namespace
}  // namespace oomb::executor::cuda
