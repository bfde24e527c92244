// The emulated NCCL (executor/emulated_cuda/nccl.cpp) with ranks as threads: the sums fold in the
// ring's order and round bf16 at every hop (three ranks tell it from MPI's fp32 sum rounded once),
// every rank gets the same bits, reduce-scatter and all-gather in NCCL's in-place forms across slot
// boundaries, a communicator's calls run in the order the host issued them whatever their streams,
// and the failures end instead of hanging: a rank that never arrives (at init or at a collective)
// is named after the timeout, ranks that disagree fail at once, an abort ends the peers' waits.
// Compiled with the emulated device header forced in, whose built-in variables are macros.
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#undef blockDim
#undef gridDim
#include <nccl.h>
#pragma pop_macro("gridDim")
#pragma pop_macro("blockDim")
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "executor/emulated_cuda/launch.h"

namespace oomb::emulated_cuda {
namespace {

// Sets an environment variable for one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// Runs body(rank) on n threads over one fresh unique id.
void ranks(int n, const std::function<void(int rank, const ncclUniqueId& id)>& body) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { body(r, id); });
  for (auto& t : threads) t.join();
}

uint16_t bf16(float f) {  // exact for the values used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// Device memory holding `h`, and back, through the rank's own stream. The ranks share one emulated
// device, so nothing here may use the legacy default stream (cudaMemcpy): it would wait for the
// other ranks' streams, which wait in a collective for this rank (on a GPU too; NCCL refuses two
// ranks on one device for that reason).
template <typename T>
T* upload(const std::vector<T>& h, cudaStream_t s) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return static_cast<T*>(d);
}
template <typename T>
std::vector<T> download(const T* d, size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  return h;
}
cudaStream_t stream() {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  return s;
}

// Three ranks hold 1, 2^-8 and 2^-8 (half of bf16's step at 1). MPI's sum in fp32, rounded once,
// is 1 + 2^-7 everywhere. The ring's chunk c starts at rank c+1 and rounds at each hop: chunk 0 is
// (2^-8 + 2^-8) + 1 = 1 + 2^-7; chunks 1 and 2 add 1 and one 2^-8 first, which rounds (to even)
// back to 1, and then the other 2^-8 again: 1. 24 elements: three chunks of eight (16 bytes).
TEST(EmulatedNccl, Bf16AllReduceRoundsAtEveryHopOfTheRing) {
  std::vector<std::vector<uint16_t>> got(3);
  ranks(3, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 3, id, rank), ncclSuccess);
    cudaStream_t s = stream();
    uint16_t* d = upload(std::vector<uint16_t>(24, bf16(rank == 0 ? 1.0f : std::ldexp(1.0f, -8))), s);
    ASSERT_EQ(ncclAllReduce(d, d, 24, ncclBfloat16, ncclSum, comm, s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    got[static_cast<size_t>(rank)] = download(d, 24, s);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    cudaFree(d);
    cudaStreamDestroy(s);
  });
  std::vector<uint16_t> want(24, bf16(1.0f));
  for (int i = 0; i < 8; ++i) want[static_cast<size_t>(i)] = bf16(1.0f + std::ldexp(1.0f, -7));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << "rank " << r;
}

// f32 and f64 sums of integers (exact in any order), reduce-scatter and all-gather in place, with
// 1 KiB slots: the calls cross many chunk boundaries. The ranks' data differ per element.
TEST(EmulatedNccl, InPlaceCollectivesAcrossSlotBoundaries) {
  ScopedEnv slots("OOMB_EMULATED_NCCL_SLOT_BYTES", "1024");
  constexpr int kRanks = 3;
  constexpr size_t kN = 1000;  // per rank
  auto value = [](int rank, size_t i) { return static_cast<float>((i * 7 + static_cast<size_t>(rank) * 13) % 101); };
  ranks(kRanks, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, kRanks, id, rank), ncclSuccess);
    int count = 0, me = -1;
    EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(comm, &me), ncclSuccess);
    EXPECT_EQ(count, kRanks);
    EXPECT_EQ(me, rank);
    cudaStream_t s = stream();
    // All-reduce, f32 and f64.
    std::vector<float> h(kRanks * kN);
    for (size_t i = 0; i < h.size(); ++i) h[i] = value(rank, i);
    float* d = upload(h, s);
    ASSERT_EQ(ncclAllReduce(d, d, h.size(), ncclFloat32, ncclSum, comm, s), ncclSuccess);
    std::vector<double> hd(777);
    for (size_t i = 0; i < hd.size(); ++i) hd[i] = static_cast<double>(value(rank, i)) + 0.5;
    double* dd = upload(hd, s);
    ASSERT_EQ(ncclAllReduce(dd, dd, hd.size(), ncclFloat64, ncclSum, comm, s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<float> sum = download(d, h.size(), s);
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_EQ(sum[i], value(0, i) + value(1, i) + value(2, i)) << "rank " << rank << " element " << i;
    const std::vector<double> sumd = download(dd, hd.size(), s);
    for (size_t i = 0; i < hd.size(); ++i)
      ASSERT_EQ(sumd[i], value(0, i) + value(1, i) + value(2, i) + 1.5) << "rank " << rank << " element " << i;
    // Reduce-scatter in place: rank r's block of the sum lands at r x kN.
    EXPECT_EQ(cudaMemcpyAsync(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice, s), cudaSuccess);
    ASSERT_EQ(ncclReduceScatter(d, d + static_cast<size_t>(rank) * kN, kN, ncclFloat32, ncclSum, comm, s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<float> block = download(d + static_cast<size_t>(rank) * kN, kN, s);
    for (size_t i = 0; i < kN; ++i) {
      const size_t at = static_cast<size_t>(rank) * kN + i;
      ASSERT_EQ(block[i], value(0, at) + value(1, at) + value(2, at)) << "rank " << rank << " element " << i;
    }
    // All-gather in place: every rank's block (its reduce-scatter result) everywhere.
    ASSERT_EQ(ncclAllGather(d + static_cast<size_t>(rank) * kN, d, kN, ncclFloat32, comm, s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<float> all = download(d, h.size(), s);
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(all[i], value(0, i) + value(1, i) + value(2, i)) << "rank " << rank << " element " << i;
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidArgument);  // twice
    cudaFree(d);
    cudaFree(dd);
    cudaStreamDestroy(s);
  });
}

// Rank 0 queues call A on a stream held back by a slow host function and call B on another stream
// at once; rank 1 issues both on one stream. B must not run before A: the communicator's calls run
// in issue order (NCCL serialises them), else B would meet rank 1's A (another count: a failure).
TEST(EmulatedNccl, ACommunicatorsCallsRunInIssueOrderAcrossStreams) {
  ranks(2, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, rank), ncclSuccess);
    cudaStream_t s1 = stream(), s2 = stream();
    float* a = upload(std::vector<float>(10, 1.0f), s1);
    float* b = upload(std::vector<float>(20, 2.0f), s1);
    if (rank == 0) {
      ASSERT_EQ(cudaLaunchHostFunc(
                    s1, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr),
                cudaSuccess);
      ASSERT_EQ(ncclAllReduce(a, a, 10, ncclFloat32, ncclSum, comm, s1), ncclSuccess);
      ASSERT_EQ(ncclAllReduce(b, b, 20, ncclFloat32, ncclSum, comm, s2), ncclSuccess);
    } else {
      ASSERT_EQ(ncclAllReduce(a, a, 10, ncclFloat32, ncclSum, comm, s1), ncclSuccess);
      ASSERT_EQ(ncclAllReduce(b, b, 20, ncclFloat32, ncclSum, comm, s1), ncclSuccess);
    }
    ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
    EXPECT_EQ(download(a, 10, s1), std::vector<float>(10, 2.0f));
    EXPECT_EQ(download(b, 20, s1), std::vector<float>(20, 4.0f));
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(s1);
    cudaStreamDestroy(s2);
  });
}

// The failures below fault the emulated context (a sticky error, as a failing kernel does): each
// test resets the device at its end, after every rank's thread ended.
void expect_fault(cudaStream_t s, ncclComm_t comm, const std::string& reason) {
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_NE(last_launch_failure().find(reason), std::string::npos) << last_launch_failure();
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find(reason), std::string::npos) << ncclGetLastError(comm);
}

TEST(EmulatedNccl, ARankThatNeverArrivesIsNamedAfterTheTimeout) {
  ScopedEnv timeout("OOMB_EMULATED_NCCL_TIMEOUT_S", "0.5");
  // At a collective: rank 1 joins but never calls it.
  ranks(2, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, rank), ncclSuccess);
    if (rank == 0) {
      cudaStream_t s = stream();
      float* d = upload(std::vector<float>(16, 1.0f), s);
      const auto t0 = std::chrono::steady_clock::now();
      ASSERT_EQ(ncclAllReduce(d, d, 16, ncclFloat32, ncclSum, comm, s), ncclSuccess);
      expect_fault(s, comm, "AllReduce #0 (16 f32): rank 0 of 2 waited 0.5 s (OOMB_EMULATED_NCCL_TIMEOUT_S) for rank(s) 1, "
                            "which never arrived");
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
      cudaStreamDestroy(s);
    }
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  });
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  // At init: only rank 1 of 2 comes.
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 1), ncclRemoteError);
  EXPECT_EQ(comm, nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("ncclCommInitRank: rank 1 of 2 waited"), std::string::npos)
      << ncclGetLastError(nullptr);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("rank(s) 0, which never arrived"), std::string::npos);
}

TEST(EmulatedNccl, RanksThatDisagreeFailAtOnceNamingBothCalls) {
  ScopedEnv timeout("OOMB_EMULATED_NCCL_TIMEOUT_S", "60");
  ranks(2, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, rank), ncclSuccess);
    cudaStream_t s = stream();
    float* d = upload(std::vector<float>(64, 1.0f), s);
    const auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) ASSERT_EQ(ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, s), ncclSuccess);
    else ASSERT_EQ(ncclAllGather(d + 32, d, 32, ncclFloat32, comm, s), ncclSuccess);
    expect_fault(s, comm, "the ranks disagree");
    const std::string why = ncclGetLastError(comm);
    EXPECT_NE(why.find("called AllReduce #0 of 64 f32"), std::string::npos) << why;
    EXPECT_NE(why.find("called AllGather #0 of 32 f32"), std::string::npos) << why;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));  // not the timeout
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    cudaStreamDestroy(s);
  });
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
}

TEST(EmulatedNccl, AnAbortEndsThePeersWait) {
  ScopedEnv timeout("OOMB_EMULATED_NCCL_TIMEOUT_S", "60");
  ranks(2, [&](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(ncclCommInitRank(&comm, 2, id, rank), ncclSuccess);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
      float x = 0;
      EXPECT_EQ(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);  // gone
      return;
    }
    cudaStream_t s = stream();
    float* d = upload(std::vector<float>(8, 1.0f), s);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(ncclAllReduce(d, d, 8, ncclFloat32, ncclSum, comm, s), ncclSuccess);
    expect_fault(s, comm, "emulated NCCL: rank 1 aborted the communicator");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    cudaStreamDestroy(s);
  });
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
}

TEST(EmulatedNccl, BadArgumentsAreRefusedWithTheirReason) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 0), ncclInvalidArgument);  // not from ncclGetUniqueId
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("not made by ncclGetUniqueId"), std::string::npos);
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);  // one rank: the identity
  cudaStream_t s = stream();
  float* d = upload(std::vector<float>{1.5f, -2.0f}, s);
  EXPECT_EQ(ncclAllReduce(d, d, 2, ncclFloat32, ncclMax, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("ncclSum only"), std::string::npos) << ncclGetLastError(comm);
  EXPECT_EQ(ncclAllReduce(d, d, 2, ncclInt32, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(d, d, 0, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);  // empty: nothing queued
  EXPECT_EQ(ncclAllReduce(d, d, 2, ncclFloat32, ncclSum, comm, s), ncclSuccess);
  EXPECT_EQ(download(d, 2, s), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(d, d, 2, ncclFloat32, ncclSum, comm, nullptr), ncclInvalidArgument);  // destroyed
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  cudaFree(d);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace oomb::emulated_cuda
