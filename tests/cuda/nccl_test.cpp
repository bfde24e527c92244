// NCCL (issue 25): the one-rank checks of the CUDA backend's communicator (bootstrapped over the
// self communicator): an all-reduce leaves the device buffer as it was, in fp32 and bf16, and counts
// its bytes; a split (tensor x data parallelism) gives a working NCCL communicator. Skips without a
// device or an NCCL build.
#include <gtest/gtest.h>

#include <memory>
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

// Tensor parallelism's NCCL pieces on one GPU (two ranks need two GPUs: NCCL refuses two ranks on
// one device): split() bootstraps a new NCCL communicator over the split host communicator (one rank
// here), and all_reduce_sum_f64 reduces device doubles (the selection's page scores) on the stream.
TEST(Nccl, OneRankSplitAndDeviceDoublesAreTheIdentity) {
#ifndef OOMB_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  CudaBackend b;
  const auto self = self_communicator();
  const auto comm = nccl_communicator(*self, b.stream(CudaStream::compute));
  std::vector<std::unique_ptr<Communicator>> parts;
  parts.push_back(comm->split(0, 0));
  parts.push_back(parts.back()->split(1, 0));  // a split of a split (it owns its own bootstrap)
  for (const auto& part : parts) {
    EXPECT_EQ(part->size(), 1);
    EXPECT_EQ(part->rank(), 0);
    EXPECT_EQ(part->name(), "nccl");
    std::vector<double> h(777);
    for (size_t i = 0; i < h.size(); ++i) h[i] = 1.0 / static_cast<double>(i + 3);
    void* d = b.allocate(Tier::device, 777 * 8);
    b.upload(d, h.data(), 777 * 8);
    part->all_reduce_sum_f64(static_cast<double*>(d), 777);
    std::vector<double> back(777);
    b.download(back.data(), d, 777 * 8);  // stream-ordered after the all-reduce
    EXPECT_EQ(back, h);
    std::vector<float> f(100, 2.5f);
    b.upload(d, f.data(), 400);
    part->all_reduce_sum(Tensor(d, DType::f32, 100), 100);
    std::vector<float> fb(100);
    b.download(fb.data(), d, 400);
    EXPECT_EQ(fb, f);
    double x = 4.0;
    part->all_reduce_sum_host(&x, 1);
    EXPECT_EQ(x, 4.0);
    part->barrier();
    b.deallocate(Tier::device, d, 777 * 8);
  }
#endif
}

}  // namespace
}  // namespace oomb::executor::cuda
