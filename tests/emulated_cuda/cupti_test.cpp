// The emulated CUPTI activity API (executor/emulated_cuda/cupti.cpp) against what cupti_activity.h
// documents: records come back in the client's buffers, each work record correlated with its API
// call and, through the external correlation record in front of that call's API record, with the
// id the calling thread pushed; buffers too small or missing drop records and the count is
// reported once; the buffer-size and drop switches act. CUPTI's state is per process, so each test
// enables what it uses and disables everything at its end.
// This file is compiled with the emulated device header forced in (its kernel), whose built-in
// variables are macros; CUPTI's headers use two of those names as struct members.
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#undef blockDim
#undef gridDim
#include <cupti.h>
#pragma pop_macro("gridDim")
#pragma pop_macro("blockDim")
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "executor/emulated_cuda/launch.h"

namespace oomb::emulated_cuda {
namespace {

__global__ void add_one_kernel(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

// What the client's callbacks saw: each record copied out with its kind, and the buffers.
struct Seen {
  std::mutex mu;
  std::vector<std::vector<uint8_t>> records;
  int buffers_completed = 0;
  size_t dropped = 0;
  size_t buffer_bytes = 1 << 16;
  bool give_no_buffer = false;
};
Seen g_seen;

void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  std::lock_guard lock(g_seen.mu);
  *max_records = 0;
  if (g_seen.give_no_buffer) {
    *buffer = nullptr;
    *size = 0;
    return;
  }
  *size = g_seen.buffer_bytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<std::vector<uint8_t>> out;
  CUpti_Activity* r = nullptr;
  size_t previous_end = 0;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    const auto at = static_cast<size_t>(reinterpret_cast<uint8_t*>(r) - buffer);
    EXPECT_EQ(at % 8, 0u) << "records are 8-byte aligned";
    EXPECT_GE(at, previous_end);
    size_t bytes = sizeof(CUpti_Activity);
    switch (r->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: bytes = sizeof(CUpti_ActivityKernel10); break;
      case CUPTI_ACTIVITY_KIND_MEMCPY: bytes = sizeof(CUpti_ActivityMemcpy6); break;
      case CUPTI_ACTIVITY_KIND_MEMSET: bytes = sizeof(CUpti_ActivityMemset4); break;
      case CUPTI_ACTIVITY_KIND_MEMORY2: bytes = sizeof(CUpti_ActivityMemory4); break;
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: bytes = sizeof(CUpti_ActivityAPI); break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: bytes = sizeof(CUpti_ActivityExternalCorrelation); break;
      default: ADD_FAILURE() << "a kind nobody enabled: " << r->kind;
    }
    previous_end = at + bytes;
    EXPECT_LE(previous_end, valid) << "a record runs past the valid bytes";
    const auto* p = reinterpret_cast<const uint8_t*>(r);
    out.emplace_back(p, p + bytes);
  }
  size_t dropped = 0;
  EXPECT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
  std::free(buffer);
  std::lock_guard lock(g_seen.mu);
  ++g_seen.buffers_completed;
  g_seen.dropped += dropped;
  for (auto& o : out) g_seen.records.push_back(std::move(o));
}

template <class T>
std::vector<T> records_of(CUpti_ActivityKind kind) {
  std::lock_guard lock(g_seen.mu);
  std::vector<T> out;
  for (const auto& r : g_seen.records) {
    if (reinterpret_cast<const CUpti_Activity*>(r.data())->kind != kind) continue;
    T t;
    std::memcpy(&t, r.data(), sizeof t);
    out.push_back(t);
  }
  return out;
}

const CUpti_ActivityKind kAll[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                   CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_MEMORY2,
                                   CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,
                                   CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

class EmulatedCupti : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::lock_guard lock(g_seen.mu);
      g_seen.records.clear();
      g_seen.buffers_completed = 0;
      g_seen.dropped = 0;
      g_seen.buffer_bytes = 1 << 16;
      g_seen.give_no_buffer = false;
    }
    ASSERT_EQ(cuptiActivityRegisterCallbacks(requested, completed), CUPTI_SUCCESS);
  }
  void TearDown() override {
    for (CUpti_ActivityKind k : kAll) cuptiActivityDisable(k);
    cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 0);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    unsetenv("OOMB_EMULATED_CUPTI_DROP_EVERY");
    unsetenv("OOMB_EMULATED_CUPTI_BUFFER_BYTES");
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  }
  static void enable(std::initializer_list<CUpti_ActivityKind> kinds) {
    for (CUpti_ActivityKind k : kinds) ASSERT_EQ(cuptiActivityEnable(k), CUPTI_SUCCESS) << k;
  }
};

TEST_F(EmulatedCupti, WorkRecordsCarryTheirCallsCorrelationAndTheThreadsExternalId) {
  enable({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
          CUPTI_ACTIVITY_KIND_MEMORY2, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION});
  constexpr int n = 1000;
  float* d = nullptr;
  float* h = nullptr;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 42), CUPTI_SUCCESS);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), n * 4), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&h), n * 4), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, n * 4, s), cudaSuccess);
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 43), CUPTI_SUCCESS);
  OOMB_LAUNCH(dim3((n + 255) / 256), dim3(256), 0, s, add_one_kernel)(d, n);
  uint64_t last = 0;
  ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), CUPTI_SUCCESS);
  EXPECT_EQ(last, 43u);
  ASSERT_EQ(cudaMemcpyAsync(h, d, n * 4, cudaMemcpyDefault, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(h[n - 1], 1.0f);
  ASSERT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last), CUPTI_SUCCESS);
  EXPECT_EQ(last, 42u);
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last),
            CUPTI_ERROR_QUEUE_EMPTY);
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);

  std::map<uint32_t, uint64_t> external;  // correlation id -> pushed id
  for (const auto& x : records_of<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) {
    EXPECT_EQ(x.externalKind, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
    external[x.correlationId] = x.externalId;
  }
  const auto kernels = records_of<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_STREQ(kernels[0].name, "add_one_kernel");
  EXPECT_EQ(kernels[0].gridX, 4);
  EXPECT_EQ(kernels[0].blockX, 256);
  EXPECT_LE(kernels[0].start, kernels[0].end);
  EXPECT_EQ(external.at(kernels[0].correlationId), 43u) << "the innermost id pushed when the kernel was launched";
  uint32_t sid = 0;
  ASSERT_EQ(cuptiGetStreamIdEx(nullptr, reinterpret_cast<CUstream>(s), 0, &sid), CUPTI_SUCCESS);
  EXPECT_EQ(kernels[0].streamId, sid);

  const auto sets = records_of<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET);
  ASSERT_EQ(sets.size(), 1u);
  EXPECT_EQ(sets[0].bytes, uint64_t{n * 4});
  EXPECT_EQ(external.at(sets[0].correlationId), 42u);
  const auto copies = records_of<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].copyKind, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH);
  EXPECT_EQ(copies[0].srcKind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  EXPECT_EQ(copies[0].dstKind, CUPTI_ACTIVITY_MEMORY_KIND_PINNED);
  EXPECT_EQ(copies[0].bytes, uint64_t{n * 4});
  EXPECT_EQ(copies[0].copyCount, 1u);
  EXPECT_EQ(external.at(copies[0].correlationId), 42u);
  EXPECT_GE(copies[0].start, kernels[0].end) << "stream order";

  const auto memory = records_of<CUpti_ActivityMemory4>(CUPTI_ACTIVITY_KIND_MEMORY2);
  int device_allocations = 0, device_frees = 0, pinned_allocations = 0;
  for (const auto& m : memory) {
    if (m.address == reinterpret_cast<uint64_t>(d)) {
      EXPECT_EQ(m.memoryKind, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
      EXPECT_EQ(m.bytes, uint64_t{n * 4});
      device_allocations += m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
      device_frees += m.memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    }
    if (m.address == reinterpret_cast<uint64_t>(h)) pinned_allocations += m.memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  }
  EXPECT_EQ(device_allocations, 1);
  EXPECT_EQ(device_frees, 1);
  EXPECT_EQ(pinned_allocations, 1);
  EXPECT_FALSE(external.count(0));
  EXPECT_GE(records_of<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_RUNTIME).size(), 6u);
  EXPECT_EQ(cudaFreeHost(h), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// "When a CUPTI activity API record is created while within an external API region ... the
// activity API record will be preceded by" the external correlation: no API record, no tag.
void CUDART_CB nothing(void*) {}

TEST_F(EmulatedCupti, TagsReachWorkOnlyThroughEnabledApiRecords) {
  enable({CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION});
  ASSERT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 7), CUPTI_SUCCESS);
  ASSERT_EQ(submit_library_kernel("library_gemm", nullptr, nothing, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_EQ(records_of<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL).size(), 1u);
  EXPECT_TRUE(records_of<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION).empty())
      << "neither DRIVER nor the driver's launch calls are enabled";

  // The driver's kernel launches alone (cuptiActivityEnableDriverApi): the library kernel is tagged.
  ASSERT_EQ(cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1), CUPTI_SUCCESS);
  ASSERT_EQ(submit_library_kernel("library_gemm", nullptr, nothing, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  const auto kernels = records_of<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  const auto external = records_of<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  ASSERT_EQ(kernels.size(), 2u);
  ASSERT_EQ(external.size(), 1u);
  EXPECT_STREQ(kernels[1].name, "library_gemm");
  EXPECT_EQ(external[0].correlationId, kernels[1].correlationId);
  EXPECT_EQ(external[0].externalId, 7u);
  const auto driver = records_of<CUpti_ActivityAPI>(CUPTI_ACTIVITY_KIND_DRIVER);
  ASSERT_EQ(driver.size(), 1u);
  EXPECT_EQ(driver[0].cbid, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
  EXPECT_EQ(cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr), CUPTI_SUCCESS);
  EXPECT_EQ(cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc, 1), CUPTI_ERROR_INVALID_PARAMETER)
      << "only the launch calls are recorded";
  EXPECT_EQ(cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID, 1),
            CUPTI_ERROR_INVALID_PARAMETER);
}

TEST_F(EmulatedCupti, SmallBuffersKeepEveryRecordAndMissingBuffersDropThemOnce) {
  enable({CUPTI_ACTIVITY_KIND_MEMSET});
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 4096), cudaSuccess);
  // Buffers of two memset records: 50 memsets cross 24 buffer boundaries and none is lost.
  {
    std::lock_guard lock(g_seen.mu);
    g_seen.buffer_bytes = 2 * sizeof(CUpti_ActivityMemset4) + 8;
  }
  for (int i = 0; i < 50; ++i) ASSERT_EQ(cudaMemsetAsync(d, 0, 64 + i, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  auto sets = records_of<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET);
  ASSERT_EQ(sets.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sets[static_cast<size_t>(i)].bytes, static_cast<uint64_t>(64 + i));
  EXPECT_EQ(g_seen.buffers_completed, 25);
  EXPECT_EQ(g_seen.dropped, 0u);

  // No buffer from the client: each record is dropped and counted once.
  {
    std::lock_guard lock(g_seen.mu);
    g_seen.give_no_buffer = true;
  }
  for (int i = 0; i < 5; ++i) ASSERT_EQ(cudaMemsetAsync(d, 0, 64, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  size_t dropped = 0;
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
  EXPECT_EQ(dropped, 5u);
  ASSERT_EQ(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped), CUPTI_SUCCESS);
  EXPECT_EQ(dropped, 0u) << "the count is reset when read";

  // The switches: a cap on the bytes used of each buffer, and every n-th record dropped.
  {
    std::lock_guard lock(g_seen.mu);
    g_seen.give_no_buffer = false;
    g_seen.buffer_bytes = 1 << 16;
    g_seen.records.clear();
    g_seen.buffers_completed = 0;
  }
  setenv("OOMB_EMULATED_CUPTI_BUFFER_BYTES", std::to_string(sizeof(CUpti_ActivityMemset4)).c_str(), 1);
  setenv("OOMB_EMULATED_CUPTI_DROP_EVERY", "4", 1);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(cudaMemsetAsync(d, 0, 64, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cuptiActivityFlushAll(0), CUPTI_SUCCESS);
  EXPECT_EQ(records_of<CUpti_ActivityMemset4>(CUPTI_ACTIVITY_KIND_MEMSET).size(), 9u);
  EXPECT_EQ(g_seen.buffers_completed, 9) << "one record per buffer";
  EXPECT_EQ(g_seen.dropped, 3u);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

}  // namespace
}  // namespace oomb::emulated_cuda
