#pragma once
// Shared helpers of the CUDA backend tests: skip without a device, device buffers filled from and
// read back into host vectors, and error norms. Every op is compared with the CPU reference
// backend on the same inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "executor/cpu/cpu_backend.h"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/device_info.h"
#include "executor/runtime/rng.h"

namespace oomb::executor::cudatest {

// In SetUp: the test reports SKIPPED (not passed) on machines without a usable CUDA device.
#define OOMB_REQUIRE_CUDA()                                                    \
  do {                                                                         \
    std::string oomb_why_;                                                     \
    if (!::oomb::executor::cuda_device_available(&oomb_why_))                  \
      GTEST_SKIP() << "no CUDA device (" << oomb_why_ << ")";                  \
  } while (0)

// The emulated device (executor/emulated_cuda, OOMB_CUDA_EMULATED_BACKEND) runs every CUDA thread as
// a fiber on the CPU. Shapes sized to keep a GPU busy for a few milliseconds (tens of MiB moved and
// scaled while the host acts) take minutes there; the tests that only need "still running when the
// host acts" use the emulated size, which the emulator's slower streams keep busy just as well.
#ifdef OOMB_CUDA_EMULATED_BACKEND
inline constexpr bool kEmulatedDevice = true;
#else
inline constexpr bool kEmulatedDevice = false;
#endif
inline constexpr int64_t busy_elements(int64_t on_gpu, int64_t on_emulated_device) {
  return kEmulatedDevice ? on_emulated_device : on_gpu;
}

// A grid's y and z limit on this device: 65,535 on a GPU. A test of a kernel's grid past it sizes its
// shape from this, so on the emulated device with a lowered limit (OOMB_EMULATED_MAX_GRID_YZ,
// tests/CMakeLists.txt runs these tests with it) the same strides run with a few hundred blocks.
inline int64_t grid_yz_limit() { return cuda_device_info().max_grid_yz; }

// Past the hardware's own limit the emulated device needs some 10^10 thread switches (hours on the
// CPU): a test of such a grid skips there unless the limit was lowered.
#define OOMB_SKIP_AT_THE_HARDWARE_GRID_LIMIT_ON_EMULATED_DEVICE()                                              \
  do {                                                                                                           \
    if (::oomb::executor::cudatest::kEmulatedDevice && ::oomb::executor::cudatest::grid_yz_limit() == 65535)     \
      GTEST_SKIP() << "emulated device at the hardware's grid limit: run with OOMB_EMULATED_MAX_GRID_YZ=256 "    \
                      "(as ctest does) to test the strides past it with few blocks";                           \
  } while (0)

inline std::vector<float> random_vec(size_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * static_cast<float>(r.normal());
  return v;
}

// ||a - b|| / max(||b||, kRmsFloor sqrt(n)): relative to the reference's norm, or to an RMS of
// kRmsFloor when the reference is smaller (a result that cancels to ~0, such as the attention
// gradient of a token that sees only itself, has no relative precision; the inputs are O(1)).
constexpr double kRmsFloor = 1e-2;
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, kRmsFloor * kRmsFloor * static_cast<double>(a.size())));
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// A device-tier buffer of the CUDA backend holding a copy of a host vector.
template <class T>
class DeviceVec {
 public:
  DeviceVec(CudaBackend& b, const std::vector<T>& host, Tier tier = Tier::device)
      : b_(&b), n_(host.size()), buf_(b, tier, static_cast<int64_t>(std::max<size_t>(host.size(), 1) * sizeof(T))) {
    if (!host.empty()) b.upload(buf_.data(), host.data(), static_cast<int64_t>(host.size() * sizeof(T)));
  }
  T* get() const { return static_cast<T*>(buf_.data()); }
  std::vector<T> read() const {
    std::vector<T> out(n_);
    if (n_) b_->download(out.data(), buf_.data(), static_cast<int64_t>(n_ * sizeof(T)));
    return out;
  }

 private:
  CudaBackend* b_;
  size_t n_;
  Buffer buf_;
};

// Smaller blocks than a real run's defaults (1 GiB each), so that every test process does not pin
// a gigabyte of host memory.
inline CudaBackendOptions test_options(CudaGemmPrecision gemm = CudaGemmPrecision::fp32) {
  CudaBackendOptions o;
  o.device_grow_bytes = int64_t{256} << 20;
  o.host_slab_bytes = int64_t{64} << 20;
  o.gemm_precision = gemm;
  return o;
}

// Fixture: a CUDA backend (fp32 GEMMs unless a test makes its own) and the CPU reference. Base is
// ::testing::Test (CudaTest) or ::testing::TestWithParam<P> (CudaParamTest<P>).
template <class Base>
class CudaFixture : public Base {
 protected:
  void SetUp() override {
    OOMB_REQUIRE_CUDA();
    gpu = std::make_unique<CudaBackend>(test_options());
  }
  std::unique_ptr<CudaBackend> gpu;
  CpuBackend cpu;
};
using CudaTest = CudaFixture<::testing::Test>;
template <class P>
using CudaParamTest = CudaFixture<::testing::TestWithParam<P>>;

// Selection lists for attention tests: deterministic pseudo-random ascending subsets of [0, U),
// every fifth one empty and every fifth one full.
inline std::vector<std::vector<int32_t>> selections(int64_t lists, int64_t U, uint64_t seed) {
  Rng r(seed);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(lists));
  for (int64_t i = 0; i < lists; ++i) {
    auto& s = out[static_cast<size_t>(i)];
    const uint64_t mode = i % 5;
    for (int32_t u = 0; u < U; ++u) {
      const bool take = mode == 0 ? false : mode == 1 ? true : r.uniform() < 0.5;
      if (take) s.push_back(u);
    }
  }
  return out;
}

}  // namespace oomb::executor::cudatest
