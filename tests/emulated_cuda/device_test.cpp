// The emulated device (device.h, grid.cpp): kernels defined here, compiled with device.h
// force-included and launched with OOMB_LAUNCH, run as fibers under every schedule. Block barriers
// and warp rendezvous release as CUDA defines them, shuffles read the lanes CUDA names (in
// divergent code too), a missing barrier gives a wrong answer under some schedule, a deadlock is
// an error naming kernel, block and thread, atomics are atomic across streams, the _rn intrinsics
// round as IEEE does.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "executor/emulated_cuda/grid.h"
#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"

namespace oomb::emulated_cuda {
namespace {

const Schedule kSchedules[] = {{Schedule::Kind::round_robin, 0},
                               {Schedule::Kind::reverse, 0},
                               {Schedule::Kind::random, 1},
                               {Schedule::Kind::random, 2}};

std::string name_of(const Schedule& s) {
  switch (s.kind) {
    case Schedule::Kind::round_robin:
      return "round-robin";
    case Schedule::Kind::reverse:
      return "reverse";
    case Schedule::Kind::random:
      break;
  }
  return "random:" + std::to_string(s.seed);
}

// Tests that do not loop over the schedules run under the one OOMB_EMULATED_SCHEDULE sets.
class EmulatedDevice : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = schedule(); }
  void TearDown() override {
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    set_schedule(saved_);
  }
  template <class T>
  T* device(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    return static_cast<T*>(p);
  }
  template <class T>
  T* device(const std::vector<T>& host) {
    T* p = device<T>(host.size());
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }
  template <class T>
  std::vector<T> host(const T* p, size_t n) {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  // The grid's failure: its status and the reported message; the device is reset for what follows.
  std::pair<cudaError_t, std::string> failure() {
    const cudaError_t e = cudaDeviceSynchronize();
    std::string message = last_launch_failure();
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    return {e, message};
  }

 private:
  Schedule saved_;
};

// ---------------------------------------------------------------- indices and barriers

__global__ void index_kernel(uint32_t* out) {
  const unsigned tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
  const unsigned in_block = tx + blockDim.x * (ty + blockDim.y * tz);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads + in_block] = (blockIdx.z << 24) | (blockIdx.y << 20) | (blockIdx.x << 16) | (tz << 12) |
                                    (ty << 8) | tx;
}

TEST_F(EmulatedDevice, BuiltInIndicesFollowCudaOrder) {
  const dim3 grid(3, 2, 2), block(8, 4, 2);
  const size_t n = 12 * 64;
  uint32_t* out = device<uint32_t>(n);
  OOMB_LAUNCH(grid, block, 0, 0, index_kernel)(out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint32_t> got = host(out, n);
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned z = 0; z < 2; ++z)
          for (unsigned y = 0; y < 4; ++y)
            for (unsigned x = 0; x < 8; ++x) {
              const size_t i = (bx + 3 * (by + 2 * bz)) * 64 + x + 8 * (y + 4 * z);
              EXPECT_EQ(got[i], (bz << 24) | (by << 20) | (bx << 16) | (z << 12) | (y << 8) | x) << i;
            }
}

// Tree reduction through shared memory: every step needs the barrier before it.
__global__ void block_sum_kernel(const float* in, float* out) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

TEST_F(EmulatedDevice, BlockBarriersUnderEverySchedule) {
  const int blocks = 5, threads = 256;
  std::vector<float> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 97);
  const float* d_in = device(in);
  float* d_out = device<float>(blocks);
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    OOMB_LAUNCH(blocks, threads, 0, 0, block_sum_kernel)(d_in, d_out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(s);
    const std::vector<float> got = host(d_out, blocks);
    for (int b = 0; b < blocks; ++b) {
      float want = 0;  // small integers: exact in any order
      for (int t = 0; t < threads; ++t) want += in[b * threads + t];
      EXPECT_EQ(got[b], want) << name_of(s) << " block " << b;
    }
  }
}

// Each iteration's OR is over that iteration's predicates only, although fast threads arrive at the
// next barrier before slow ones have read this one's result.
__global__ void syncthreads_or_kernel(int iterations, int* out) {
  int mismatches = 0;
  for (int i = 0; i < iterations; ++i) {
    const int pred = i % 3 == 0 && static_cast<int>(threadIdx.x) == (i * 7) % static_cast<int>(blockDim.x);
    if (__syncthreads_or(pred) != (i % 3 == 0)) ++mismatches;
  }
  out[threadIdx.x] = mismatches;
}

TEST_F(EmulatedDevice, SyncthreadsOrPerGeneration) {
  int* out = device<int>(96);
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    OOMB_LAUNCH(1, 96, 0, 0, syncthreads_or_kernel)(50, out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(s);
    EXPECT_EQ(host(out, 96), std::vector<int>(96, 0)) << name_of(s);
  }
}

// The neighbour's value without the barrier between the write and the read: right when the threads
// happen to run in index order, wrong in another order.
__global__ void neighbour_kernel(int base, bool barrier, int* out) {
  __shared__ int s[128];
  const int t = static_cast<int>(threadIdx.x);
  s[t] = base + t;
  if (barrier) __syncthreads();
  out[t] = t == 0 ? base : s[t - 1] + 1;
}

// Under ThreadSanitizer the race itself is the finding (the next test).
#if defined(__SANITIZE_THREAD__)
constexpr bool kRunRaces = false;
#else
constexpr bool kRunRaces = true;
#endif

TEST_F(EmulatedDevice, AMissingBarrierGivesAWrongAnswerUnderSomeSchedule) {
  if (!kRunRaces) GTEST_SKIP() << "a deliberate data race";
  const int n = 128;
  int* out = device<int>(n);
  std::vector<int> want(n);
  int base = 1000, wrong_schedules = 0;
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    for (const bool barrier : {true, false}) {
      base += 1000;  // a stale value from the previous launch is wrong too
      for (int t = 0; t < n; ++t) want[t] = base + t;
      OOMB_LAUNCH(1, n, 0, 0, neighbour_kernel)(base, barrier, out);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const bool right = host(out, n) == want;
      if (barrier) {
        EXPECT_TRUE(right) << name_of(s);
      } else {
        if (s.kind == Schedule::Kind::round_robin) {
          EXPECT_TRUE(right);  // index order hides it
        }
        if (s.kind == Schedule::Kind::reverse) {
          EXPECT_FALSE(right);
        }
        wrong_schedules += !right;
      }
    }
  }
  EXPECT_GE(wrong_schedules, 2);  // reverse and at least one random order
}

#if defined(__SANITIZE_THREAD__)
TEST_F(EmulatedDevice, ThreadSanitizerReportsAMissingBarrier) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the runtime has worker threads
  setenv("TSAN_OPTIONS", "halt_on_error=1", 1);    // read by that process at its start
  int* out = device<int>(128);
  EXPECT_DEATH(
      {
        OOMB_LAUNCH(1, 128, 0, 0, neighbour_kernel)(7, false, out);
        (void)cudaDeviceSynchronize();
      },
      "ThreadSanitizer: data race");
  unsetenv("TSAN_OPTIONS");
  OOMB_LAUNCH(1, 128, 0, 0, neighbour_kernel)(7, true, out);  // with the barrier: no report
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}
#endif

// ---------------------------------------------------------------- shuffles

template <class T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

struct ShuffleResults {
  float xor_sum;
  double xor_sum_double;
  int up_scan;
  unsigned down_shift;
  long long broadcast;
  int segment_sum;  // width 8
};

__global__ void shuffle_kernel(ShuffleResults* out) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  ShuffleResults r{};
  r.xor_sum = warp_sum(static_cast<float>(lane));
  r.xor_sum_double = warp_sum(0.5 * lane);
  int inc = lane + 1;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inc, static_cast<unsigned>(o));
    if (lane >= o) inc += n;
  }
  r.up_scan = inc;
  r.down_shift = __shfl_down_sync(0xffffffffu, static_cast<unsigned>(100 + lane), 3u);
  r.broadcast = __shfl_sync(0xffffffffu, static_cast<long long>(lane) << 40, 3 + static_cast<int>(threadIdx.x >> 5));
  int seg = lane;
  for (int o = 4; o > 0; o >>= 1) seg += __shfl_xor_sync(0xffffffffu, seg, o, 8);
  r.segment_sum = seg;
  out[threadIdx.x] = r;
}

TEST_F(EmulatedDevice, ShufflesReadTheLanesCudaNames) {
  const int n = 64;
  ShuffleResults* out = device<ShuffleResults>(n);
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    OOMB_LAUNCH(1, n, 0, 0, shuffle_kernel)(out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(s);
    const std::vector<ShuffleResults> got = host(out, n);
    for (int t = 0; t < n; ++t) {
      const int lane = t % 32, warp = t / 32;
      const ShuffleResults& r = got[t];
      EXPECT_EQ(r.xor_sum, 496.0f) << t;
      EXPECT_EQ(r.xor_sum_double, 248.0) << t;
      EXPECT_EQ(r.up_scan, (lane + 1) * (lane + 2) / 2) << t;
      // Past the end of the warp a lane keeps its own value.
      EXPECT_EQ(r.down_shift, static_cast<unsigned>(100 + (lane + 3 < 32 ? lane + 3 : lane))) << t;
      EXPECT_EQ(r.broadcast, static_cast<long long>(3 + warp) << 40) << t;
      const int first = lane / 8 * 8;
      EXPECT_EQ(r.segment_sum, 8 * first + 28) << t;
    }
  }
}

// selection.cu's block scan: the second scan runs in warp 0 only (`if (warp == 0)`), the other warps
// wait at the barrier after it.
__device__ int block_exclusive_scan(int v, int* total, int* warp_sums) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5),
            warps = static_cast<int>(blockDim.x >> 5);
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inc, static_cast<unsigned>(o));
    if (lane >= o) inc += n;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, static_cast<unsigned>(o));
      if (lane >= o) w += n;
    }
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  const int result = (warp == 0 ? 0 : warp_sums[warp - 1]) + inc - v;
  *total = warp_sums[warps - 1];
  __syncthreads();
  return result;
}

__global__ void scan_kernel(const int* in, int* out, int* totals) {
  __shared__ int warp_sums[32];
  int total = 0;
  out[threadIdx.x] = block_exclusive_scan(in[threadIdx.x], &total, warp_sums);
  totals[threadIdx.x] = total;
}

TEST_F(EmulatedDevice, ShufflesInDivergentCode) {
  const int n = 256;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 37) % 11;
  const int* d_in = device(in);
  int* out = device<int>(n);
  int* totals = device<int>(n);
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    OOMB_LAUNCH(1, n, 0, 0, scan_kernel)(d_in, out, totals);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(s);
    const std::vector<int> got = host(out, n), tot = host(totals, n);
    int sum = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], sum) << name_of(s) << " " << i;
      sum += in[i];
    }
    EXPECT_EQ(tot, std::vector<int>(n, sum)) << name_of(s);
  }
}

// Half-warps meet in groups of their own, then the whole warp: the lanes of the full-warp shuffle
// have done different numbers of rendezvous before it.
__global__ void subgroup_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int v = lane;
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(half, v, o, 16);
  if (lane < 16) __syncwarp(0x0000ffffu);  // one rendezvous more for the low half
  out[threadIdx.x] = v + 1000 * __shfl_sync(0xffffffffu, lane, 31 - lane);
}

TEST_F(EmulatedDevice, HalfWarpGroupsThenTheWholeWarp) {
  int* out = device<int>(32);
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    OOMB_LAUNCH(1, 32, 0, 0, subgroup_kernel)(out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(s);
    const std::vector<int> got = host(out, 32);
    for (int lane = 0; lane < 32; ++lane)
      EXPECT_EQ(got[lane], (lane < 16 ? 120 : 376) + 1000 * (31 - lane)) << name_of(s) << " " << lane;
  }
}

// Lane 0 waits for lanes {0, 1} while lane 1 first meets itself alone: the pair is not a group yet,
// lane 1's own rendezvous is.
__global__ void nested_masks_kernel(int* out) {
  if (threadIdx.x == 1) __syncwarp(0x2u);
  if (threadIdx.x < 2) __syncwarp(0x3u);
  out[threadIdx.x] = 1;
}

TEST_F(EmulatedDevice, AGroupInsideAnUnfinishedOneIsReleased) {
  int* out = device<int>(32);
  for (const Schedule& s : kSchedules) {
    set_schedule(s);
    OOMB_LAUNCH(1, 32, 0, 0, nested_masks_kernel)(out);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << name_of(s);
    EXPECT_EQ(host(out, 32), std::vector<int>(32, 1)) << name_of(s);
  }
}

// ---------------------------------------------------------------- errors, never a hang

__global__ void half_barrier_kernel(int* out) {
  if (threadIdx.x < 48) __syncthreads();  // warp 0 and half of warp 1
  else __syncwarp();                      // the other half of warp 1 waits for the first
  out[threadIdx.x] = 1;
}

TEST_F(EmulatedDevice, ABarrierHalfTheBlockReachesIsADeadlock) {
  set_schedule({});  // block (0,0,0) first
  int* out = device<int>(64);
  OOMB_LAUNCH(dim3(2, 1, 1), 64, 0, 0, half_barrier_kernel)(out);
  const auto [e, message] = failure();
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_NE(message.find("kernel half_barrier_kernel block (0,0,0): deadlock:"), std::string::npos) << message;
  EXPECT_NE(message.find("threads (0,0,0)..(47,0,0) wait at __syncthreads"), std::string::npos) << message;
  EXPECT_NE(message.find("threads (48,0,0)..(63,0,0) wait at __syncwarp(0xffffffff) but lane 0 of warp 1 waits at "
                         "__syncthreads"),
            std::string::npos)
      << message;
}

__global__ void missing_lane_kernel(int* out) {
  if (threadIdx.x % 32 == 5) return;
  __syncwarp();
  out[threadIdx.x] = 1;
}

TEST_F(EmulatedDevice, ASyncwarpALaneNeverReachesIsReported) {
  set_schedule({});
  int* out = device<int>(64);
  OOMB_LAUNCH(dim3(1, 3, 1), 64, 0, 0, missing_lane_kernel)(out);
  const auto [e, message] = failure();
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_NE(message.find("kernel missing_lane_kernel block (0,0,0): deadlock: threads (0,0,0)..(4,0,0) wait at "
                         "__syncwarp(0xffffffff) but lane 5 of warp 0 has exited"),
            std::string::npos)
      << message;

  // The device works again after the reset.
  out = device<int>(64);
  OOMB_LAUNCH(1, 64, 0, 0, index_kernel)(reinterpret_cast<uint32_t*>(out));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

__global__ void bad_mask_kernel(int which, int* out) {
  if (which == 0) __syncwarp(0x1u);  // lanes other than 0 are not in their own mask
  if (which == 1 && threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1, 20);  // 20: not in the mask
  if (which == 2) __syncwarp();  // the block's one warp has 16 lanes
  if (which == 3) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1, 3);  // width not a power of two
}

TEST_F(EmulatedDevice, MasksCudaForbidsAreReported) {
  set_schedule({});  // lane 1 is the first to break the rule
  int* out = device<int>(32);
  OOMB_LAUNCH(1, 32, 0, 0, bad_mask_kernel)(0, out);
  auto [e, message] = failure();
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_NE(message.find("kernel bad_mask_kernel block (0,0,0) thread (1,0,0): __syncwarp(0x00000001) from lane 1, "
                         "which its mask does not name"),
            std::string::npos)
      << message;

  out = device<int>(32);
  OOMB_LAUNCH(1, 32, 0, 0, bad_mask_kernel)(1, out);
  std::tie(e, message) = failure();
  EXPECT_NE(message.find("__shfl_sync(0x0000ffff) reads lane 20, which the mask does not name"), std::string::npos)
      << message;

  out = device<int>(32);
  OOMB_LAUNCH(1, 16, 0, 0, bad_mask_kernel)(2, out);
  std::tie(e, message) = failure();
  EXPECT_NE(message.find("__syncwarp(0xffffffff) names lane 16 of warp 0, which does not exist (16 threads per block)"),
            std::string::npos)
      << message;

  out = device<int>(32);
  OOMB_LAUNCH(1, 32, 0, 0, bad_mask_kernel)(3, out);
  std::tie(e, message) = failure();
  EXPECT_NE(message.find("__shfl_xor_sync: width 3 is not a power of two"), std::string::npos) << message;
}

__global__ void read_kernel(const float* in, float* out) {
  if (in) out[threadIdx.x] = in[threadIdx.x];
}

TEST_F(EmulatedDevice, APageableHostPointerFailsTheGrid) {
  std::vector<float> pageable(32, 1.0f);
  float* out = device<float>(32);
  OOMB_LAUNCH(1, 32, 0, 0, read_kernel)(pageable.data(), out);
  const auto [e, message] = failure();
  EXPECT_EQ(e, cudaErrorIllegalAddress);
  EXPECT_NE(message.find("kernel read_kernel: argument 0 is 0x"), std::string::npos) << message;
  EXPECT_NE(message.find("not device memory"), std::string::npos) << message;

  // Pinned host memory is device-accessible; null is never dereferenced here.
  float* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 32 * sizeof(float), cudaHostAllocMapped), cudaSuccess);
  for (int i = 0; i < 32; ++i) pinned[i] = static_cast<float>(i);
  out = device<float>(32);
  OOMB_LAUNCH(1, 32, 0, 0, read_kernel)(pinned, out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host(out, 32)[31], 31.0f);
  OOMB_LAUNCH(1, 32, 0, 0, read_kernel)(nullptr, out);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---------------------------------------------------------------- atomics, intrinsics, memory

__global__ void atomics_kernel(float* f, double* d, int* i, unsigned* u, unsigned long long* ull) {
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicAdd(i, -1);
  atomicAdd(u, 2u);
  atomicAdd(ull, 1ull << 33);
}

TEST_F(EmulatedDevice, AtomicsAreAtomicAcrossConcurrentStreams) {
  float* f = device(std::vector<float>{0.0f});
  double* d = device(std::vector<double>{0.0});
  int* i = device(std::vector<int>{0});
  unsigned* u = device(std::vector<unsigned>{0});
  unsigned long long* ull = device(std::vector<unsigned long long>{0});
  cudaStream_t streams[3];
  for (cudaStream_t& s : streams) ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const int per_stream = 4, blocks = 16, threads = 128;  // every sum exact
  for (int k = 0; k < per_stream; ++k)
    for (cudaStream_t s : streams) OOMB_LAUNCH(blocks, threads, 0, s, atomics_kernel)(f, d, i, u, ull);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const int adds = 3 * per_stream * blocks * threads;
  EXPECT_EQ(host(f, 1)[0], 0.5f * adds);
  EXPECT_EQ(host(d, 1)[0], 0.25 * adds);
  EXPECT_EQ(host(i, 1)[0], -adds);
  EXPECT_EQ(host(u, 1)[0], 2u * adds);
  EXPECT_EQ(host(ull, 1)[0], (1ull << 33) * adds);
}

struct Rounded {
  float fma, mul_add, sqrt2, third, diff, inf;
  long long one_bits;
  double from_bits;
  unsigned float_bits;
};

__global__ void rounding_kernel(Rounded* out) {
  const float a = 1.0f + 0x1p-23f, c = -(1.0f + 0x1p-22f);
  out->fma = __fmaf_rn(a, a, c);                // a * a = 1 + 2^-22 + 2^-46: the fma keeps 2^-46
  out->mul_add = __fadd_rn(__fmul_rn(a, a), c);  // rounded product: 1 + 2^-22, so 0
  out->sqrt2 = __fsqrt_rn(2.0f);
  out->third = __fdiv_rn(1.0f, 3.0f);
  out->diff = __fsub_rn(1.0f, 0x1p-25f);  // a tie below 1 rounds to even: 1
  out->inf = __int_as_float(0x7f800000);
  out->one_bits = __double_as_longlong(1.0);
  out->from_bits = __longlong_as_double(0x4000000000000000ll);
  out->float_bits = __float_as_uint(__uint_as_float(0x3fc00000u)) + static_cast<unsigned>(__float_as_int(0.0f));
}

TEST_F(EmulatedDevice, RoundNearestIntrinsicsRoundAsIeee) {
  Rounded* out = device<Rounded>(1);
  OOMB_LAUNCH(1, 1, 0, 0, rounding_kernel)(out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const Rounded r = host(out, 1)[0];
  EXPECT_EQ(r.fma, 0x1p-46f);
  EXPECT_EQ(r.mul_add, 0.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(r.sqrt2), 0x3fb504f3u);  // 1.41421354, correctly rounded
  EXPECT_EQ(std::bit_cast<uint32_t>(r.third), 0x3eaaaaabu);
  EXPECT_EQ(r.diff, 1.0f);
  EXPECT_TRUE(std::isinf(r.inf));
  EXPECT_EQ(r.one_bits, 0x3ff0000000000000ll);
  EXPECT_EQ(r.from_bits, 2.0);
  EXPECT_EQ(r.float_bits, 0x3fc00000u);
}

// Each block sees its own exact-size dynamic buffer, every byte 0xff when it starts.
__global__ void dynamic_shared_kernel(int bytes, int* out) {
  OOMB_DYNAMIC_SHARED_ALIGNED(unsigned char, smem, 128);
  __syncthreads();
  if (threadIdx.x == 0) {
    int poisoned = 0;
    for (int i = 0; i < bytes; ++i) poisoned += smem[i] == 0xff;
    out[2 * blockIdx.x] = poisoned;
    out[2 * blockIdx.x + 1] = static_cast<int>(reinterpret_cast<uintptr_t>(smem) % 256);
  }
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < bytes; i += static_cast<int>(blockDim.x))
    smem[i] = static_cast<unsigned char>(i);
}

TEST_F(EmulatedDevice, DynamicSharedMemoryIsPerBlockAndPoisoned) {
  const int bytes = 1000;
  int* out = device<int>(8);
  OOMB_LAUNCH(4, 64, bytes, 0, dynamic_shared_kernel)(bytes, out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(host(out, 8), (std::vector<int>{bytes, 0, bytes, 0, bytes, 0, bytes, 0}));
}

#if defined(__SANITIZE_ADDRESS__)
__global__ void overflow_kernel(int bytes) {
  OOMB_DYNAMIC_SHARED(unsigned char, smem);
  if (threadIdx.x == 0) smem[bytes] = 1;  // one past the launch's size
}

TEST_F(EmulatedDevice, DynamicSharedMemoryHasExactlyTheLaunchSize) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the runtime has worker threads
  EXPECT_DEATH(
      {
        OOMB_LAUNCH(1, 32, 1000, 0, overflow_kernel)(1000);
        (void)cudaDeviceSynchronize();
      },
      "heap-buffer-overflow");
}
#endif

__global__ void throwing_kernel() {
  if (threadIdx.x == 7) throw std::runtime_error("an assertion in device code");
  __syncthreads();
}

TEST_F(EmulatedDevice, AnExceptionInAKernelFailsTheGrid) {
  set_schedule({});
  OOMB_LAUNCH(2, 32, 0, 0, throwing_kernel)();
  const auto [e, message] = failure();
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_EQ(message, "kernel throwing_kernel block (0,0,0) thread (7,0,0): threw an assertion in device code");
}

// ---------------------------------------------------------------- settings and cost

TEST(EmulatedSchedule, Parses) {
  EXPECT_EQ(parse_schedule("round-robin").kind, Schedule::Kind::round_robin);
  EXPECT_EQ(parse_schedule("reverse").kind, Schedule::Kind::reverse);
  const Schedule r = parse_schedule("random:42");
  EXPECT_EQ(r.kind, Schedule::Kind::random);
  EXPECT_EQ(r.seed, 42u);
  for (const char* bad : {"", "rr", "random", "random:", "random:x", "random:-1", "random:1x"})
    EXPECT_THROW(parse_schedule(bad), std::invalid_argument) << bad;
}

// One resume per thread per barrier: a pass runs every ready thread to its next barrier.
TEST_F(EmulatedDevice, ABarrierCostsOneResumePerThread) {
  const int blocks = 64, threads = 256;  // 8 barriers per block
  std::vector<float> in(blocks * threads, 1.0f);
  const float* d_in = device(in);
  float* d_out = device<float>(blocks);
  const uint64_t before = fiber_resumes();
  const auto start = std::chrono::steady_clock::now();
  OOMB_LAUNCH(blocks, threads, 0, 0, block_sum_kernel)(d_in, d_out);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const uint64_t resumes = fiber_resumes() - before;
  EXPECT_EQ(resumes, uint64_t{blocks} * threads * (8 + 2));  // 9 barriers, then the exit
  EXPECT_EQ(host(d_out, blocks), std::vector<float>(blocks, static_cast<float>(threads)));
  RecordProperty("fiber_resumes_per_second", std::to_string(static_cast<int64_t>(resumes / seconds)));
  std::printf("block_sum_kernel: %llu fiber resumes in %.3f s: %.3g per second\n",
              static_cast<unsigned long long>(resumes), seconds, resumes / seconds);
}

}  // namespace
}  // namespace oomb::emulated_cuda
