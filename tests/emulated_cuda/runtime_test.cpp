// The emulated CUDA runtime: streams run asynchronously to the host and in order, events and the
// legacy stream order them as CUDA documents, copies treat pageable and pinned memory as CUDA
// does, limits and errors are the real runtime's. Determinism: a stream is held by a host function
// that waits on a Gate the test opens, never by a sleep.
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"

namespace oomb::emulated_cuda {
namespace {

// Holds a stream at a point until the test opens it. Opened on destruction too (after the host
// function has passed it), so a failed assertion cannot leave a stream held for TearDown's reset.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int held = 0, passed = 0;

  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() {
    release();
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return passed == held; });
  }
  void hold(cudaStream_t s) {
    const cudaError_t e = cudaLaunchHostFunc(s, &Gate::wait, this);
    if (e == cudaSuccess) {
      std::lock_guard lock(mu);
      ++held;
    }
    ASSERT_EQ(e, cudaSuccess);
  }
  void release() {
    {
      std::lock_guard lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  static void wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    std::unique_lock lock(g->mu);
    g->cv.wait(lock, [&] { return g->open; });
    ++g->passed;
    g->cv.notify_all();
  }
};

struct Write {
  int* where;
  int value;
  static void run(void* self) {
    auto* w = static_cast<Write*>(self);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    *w->where = w->value;
  }
};

void sleep_20ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// Each test leaves a clean device: streams, events and allocations go, errors are cleared.
class EmulatedRuntime : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    set_device_memory_capacity(0);
  }
  template <class T>
  T* device(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, n * sizeof(T)), cudaSuccess);
    return static_cast<T*>(p);
  }
  template <class T>
  T* pinned(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(cudaHostAlloc(&p, n * sizeof(T), cudaHostAllocPortable | cudaHostAllocMapped), cudaSuccess);
    return static_cast<T*>(p);
  }
  cudaStream_t stream(unsigned flags = cudaStreamNonBlocking) {
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
    return s;
  }
};

TEST_F(EmulatedRuntime, WorkOnAStreamRunsInOrder) {
  cudaStream_t s = stream();
  int* d = device<int>(1);
  int* h = pinned<int>(1);
  *h = 0;
  Write w{d, 42};  // host function: sleeps, then writes the device buffer
  ASSERT_EQ(cudaLaunchHostFunc(s, &Write::run, &w), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDefault, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*h, 42);
}

TEST_F(EmulatedRuntime, AHostReadWithoutSynchronisationSeesStaleData) {
  cudaStream_t s = stream();
  auto* d = device<unsigned char>(64);
  auto* h = pinned<unsigned char>(64);
  std::memset(h, 0, 64);
  Gate gate;
  gate.hold(s);
  ASSERT_EQ(cudaMemsetAsync(d, 0x11, 64, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, d, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
  // The calls returned, the copy has not run: a host read now is stale.
  EXPECT_EQ(h[0], 0);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // "not ready" is a status, not an error
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(h[0], 0x11);
  EXPECT_EQ(h[63], 0x11);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
}

TEST_F(EmulatedRuntime, UnwrittenDeviceMemoryReadsAsNaN) {
  float* d = device<float>(4);
  float h[4] = {};
  ASSERT_EQ(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDefault), cudaSuccess);
  for (float v : h) EXPECT_TRUE(v != v);
}

TEST_F(EmulatedRuntime, StreamWaitEventOrdersTwoStreams) {
  cudaStream_t producer = stream(), consumer = stream();
  int* d = device<int>(1);
  int* h = pinned<int>(1);
  *h = 0;
  const int seven = 7;
  cudaEvent_t written;
  ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
  Gate gate;
  gate.hold(producer);
  ASSERT_EQ(cudaMemcpyAsync(d, &seven, sizeof(int), cudaMemcpyDefault, producer), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(written, producer), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(consumer, written, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDefault, consumer), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(written), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(consumer), cudaErrorNotReady);
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(*h, 7);
  EXPECT_EQ(cudaEventQuery(written), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(written), cudaSuccess);
}

TEST_F(EmulatedRuntime, StreamWaitEventWaitsForTheRecordAsOfTheCall) {
  cudaStream_t a = stream(), b = stream(), waiter = stream();
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  // A pending record, then a re-record that completes at once: the wait still needs the first.
  Gate gate_a;
  gate_a.hold(a);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(waiter, e, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);  // the event is its latest record
  EXPECT_EQ(cudaStreamQuery(waiter), cudaErrorNotReady);
  gate_a.release();
  ASSERT_EQ(cudaStreamSynchronize(waiter), cudaSuccess);

  // A completed record, then a pending re-record: the earlier wait does not wait for the later one.
  cudaStream_t waiter2 = stream();
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(waiter2, e, 0), cudaSuccess);
  Gate gate_again;
  gate_again.hold(a);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(waiter2), cudaSuccess);  // returns with a still held
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  gate_again.release();
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
}

TEST_F(EmulatedRuntime, EventTimingAndItsErrors) {
  cudaStream_t s = stream();
  cudaEvent_t start, end, untimed, never;
  ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&end, cudaEventBlockingSync), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&never), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventQuery(never), cudaSuccess);  // never recorded: complete
  EXPECT_EQ(cudaEventSynchronize(never), cudaSuccess);

  Gate gate;
  ASSERT_EQ(cudaEventRecord(start, s), cudaSuccess);
  gate.hold(s);
  ASSERT_EQ(cudaLaunchHostFunc(s, &sleep_20ms, nullptr), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, s), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  gate.release();
  ASSERT_EQ(cudaEventSynchronize(end), cudaSuccess);
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 5000.0f);

  ASSERT_EQ(cudaEventSynchronize(untimed), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, untimed, end), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, never), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventElapsedTime(nullptr, start, end), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // the last one, then cleared
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  for (cudaEvent_t e : {start, end, untimed, never}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(start), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(start, s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventCreateWithFlags(&start, 0x80), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(EmulatedRuntime, TheLegacyStreamWaitsForBlockingStreamsNotForNonBlockingOnes) {
  cudaStream_t blocking = stream(cudaStreamDefault), non_blocking = stream(cudaStreamNonBlocking);
  int* d = device<int>(2);
  Gate gate;
  gate.hold(blocking);
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), nullptr), cudaSuccess);  // legacy: waits for `blocking`
  ASSERT_EQ(cudaMemsetAsync(d + 1, 0, sizeof(int), non_blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(non_blocking), cudaSuccess);  // not held by either
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(blocking), cudaSuccess);
}

TEST_F(EmulatedRuntime, BlockingStreamsWaitForTheLegacyStream) {
  cudaStream_t blocking = stream(cudaStreamDefault), non_blocking = stream(cudaStreamNonBlocking);
  int* d = device<int>(2);
  Gate gate;
  gate.hold(nullptr);  // the legacy default stream
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), blocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d + 1, 0, sizeof(int), non_blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(non_blocking), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(blocking), cudaErrorNotReady);
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
}

TEST_F(EmulatedRuntime, APageableSourceIsConsumedBeforeTheCallReturns) {
  cudaStream_t s = stream();
  int* d = device<int>(2);
  int* from_pinned = pinned<int>(1);
  int pageable = 1;
  *from_pinned = 1;
  Gate gate;
  gate.hold(s);
  ASSERT_EQ(cudaMemcpyAsync(d, &pageable, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(d + 1, from_pinned, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  pageable = 2;      // too late: staged at the call
  *from_pinned = 2;  // in time: pinned memory is read in stream order
  gate.release();
  int h[2] = {};
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDefault, s), cudaSuccess);
  EXPECT_EQ(h[0], 1);  // a copy into pageable memory has completed when it returns
  EXPECT_EQ(h[1], 2);
}

TEST_F(EmulatedRuntime, ACopyIntoPinnedMemoryCompletesInStreamOrderOnly) {
  cudaStream_t s = stream();
  int* d = device<int>(1);
  int* h = pinned<int>(1);
  *h = 0;
  Write w{d, 5};
  ASSERT_EQ(cudaLaunchHostFunc(s, &Write::run, &w), cudaSuccess);
  Gate gate;
  gate.hold(s);
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDefault, s), cudaSuccess);
  EXPECT_EQ(*h, 0);
  gate.release();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*h, 5);
}

TEST_F(EmulatedRuntime, SynchronousCopiesAndMemset) {
  auto* d = device<unsigned char>(16);
  auto* d2 = device<unsigned char>(16);
  unsigned char h[16] = {};
  ASSERT_EQ(cudaMemset(d, 0x5A, 16), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d2, d, 16, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h, d2, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  for (unsigned char c : h) EXPECT_EQ(c, 0x5A);
  ASSERT_EQ(cudaMemsetAsync(d + 4, 0x01, 4, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h, d, 16, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(h[3], 0x5A);
  EXPECT_EQ(h[4], 0x01);
  EXPECT_EQ(h[7], 0x01);
  EXPECT_EQ(h[8], 0x5A);
  // A memset of pageable memory, or past the end of an allocation, is an invalid argument.
  EXPECT_EQ(cudaMemsetAsync(h, 0, 16, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemsetAsync(d + 8, 0, 9, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h, d + 8, 9, cudaMemcpyDefault), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(h, d, 1, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(EmulatedRuntime, BatchCopyAndItsNotSupportedSwitch) {
  cudaStream_t s = stream();
  float* d = device<float>(8);
  float* h = pinned<float>(8);
  for (int i = 0; i < 8; ++i) h[i] = static_cast<float>(i);
  ASSERT_EQ(cudaMemcpyAsync(d, h, 8 * sizeof(float), cudaMemcpyDefault, s), cudaSuccess);
  float* out = pinned<float>(8);
  for (int i = 0; i < 8; ++i) out[i] = -1;
  std::vector<void*> dsts{out, out + 5};
  std::vector<const void*> srcs{d + 1, d + 6};
  std::vector<size_t> sizes{2 * sizeof(float), sizeof(float)};
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t attr_index = 0;
  ASSERT_EQ(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 2.0f);
  EXPECT_EQ(out[2], -1.0f);
  EXPECT_EQ(out[5], 6.0f);

  size_t bad_index = 1;  // the first attribute must apply from copy 0
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &bad_index, 1, s),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, nullptr),
            cudaErrorInvalidValue);  // not on the legacy default stream
  cudaMemcpyAttributes invalid{};  // srcAccessOrder Invalid
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &invalid, &attr_index, 1, s),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();

  ASSERT_EQ(setenv("OOMB_EMULATED_BATCH_COPY", "0", 1), 0);
  EXPECT_EQ(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, s),
            cudaErrorNotSupported);
  ASSERT_EQ(unsetenv("OOMB_EMULATED_BATCH_COPY"), 0);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);  // not sticky: cleared by reading it
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(EmulatedRuntime, PointerAttributesAndDeviceAccess) {
  char* d = device<char>(1000);
  void* host = nullptr;
  ASSERT_EQ(cudaMallocHost(&host, 100), cudaSuccess);
  char* mapped = pinned<char>(100);
  std::vector<char> pageable(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 256, 0u);

  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, d + 10), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.devicePointer, d + 10);
  EXPECT_EQ(a.hostPointer, nullptr);
  ASSERT_EQ(cudaPointerGetAttributes(&a, mapped), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  EXPECT_EQ(a.devicePointer, mapped);
  EXPECT_EQ(a.hostPointer, mapped);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pageable.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(a.devicePointer, nullptr);

  EXPECT_TRUE(device_accessible(d));
  EXPECT_TRUE(device_accessible(d + 999));
  EXPECT_TRUE(device_accessible(host));
  EXPECT_TRUE(device_accessible(mapped + 50));
  EXPECT_FALSE(device_accessible(pageable.data()));
  EXPECT_FALSE(device_accessible(nullptr));

  void* dev = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&dev, mapped + 8, 0), cudaSuccess);
  EXPECT_EQ(dev, mapped + 8);  // one address space
  EXPECT_EQ(cudaHostGetDevicePointer(&dev, pageable.data(), 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostGetDevicePointer(&dev, d, 0), cudaErrorInvalidValue);

  EXPECT_EQ(cudaFree(host), cudaErrorInvalidValue);  // pinned memory goes with cudaFreeHost
  EXPECT_EQ(cudaFreeHost(d), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_FALSE(device_accessible(d));
  EXPECT_FALSE(device_accessible(host));
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cudaHostAlloc(&host, 8, 0x100), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(EmulatedRuntime, CapacityIsEnforcedWithANonStickyError) {
  set_device_memory_capacity(1 << 20);
  size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, size_t{1} << 20);
  EXPECT_EQ(free, size_t{1} << 20);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 600 << 10), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&b, 600 << 10), cudaErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(free, (size_t{1} << 20) - (600 << 10));
  ASSERT_EQ(cudaFree(a), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 600 << 10), cudaSuccess);
  EXPECT_EQ(device_memory_in_use(), size_t{600} << 10);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);  // frees every allocation
  EXPECT_EQ(device_memory_in_use(), 0u);
  set_device_memory_capacity(0);
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_EQ(p.totalGlobalMem, device_memory_capacity());
  if (!std::getenv("OOMB_EMULATED_GPU_MEMORY_BYTES")) {
    EXPECT_EQ(p.totalGlobalMem, size_t{150754820096});
  }
}

LaunchConfig config(dim3 grid, dim3 block, size_t shared = 0, const void* kernel = nullptr) {
  LaunchConfig c;
  c.kernel_name = "test_kernel";
  c.kernel = kernel;
  c.grid = grid;
  c.block = block;
  c.dynamic_shared_bytes = shared;
  return c;
}

cudaError_t nothing() { return cudaSuccess; }

TEST_F(EmulatedRuntime, LaunchConfigurationErrorsAreTheRealRuntimes) {
  static const int kernel = 0;  // any address stands for a kernel
  const void* k = &kernel;
  EXPECT_EQ(submit_launch(config({1}, {1025}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({1}, {512, 3}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({1}, {1, 1, 65}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({1}, {0}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({1, 65536}, {32}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({1, 1, 65536}, {32}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({2147483648u}, {32}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(submit_launch(config({0}, {32}), nothing), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(submit_launch(config({2147483647u, 65535, 65535}, {1024}), nothing), cudaSuccess);  // queued, not run
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);  // drop the huge grid's closure (it does nothing anyway)

  // Dynamic shared memory: 48 KiB without opt-in, the opt-in value with it, never above 227 KiB.
  EXPECT_EQ(submit_launch(config({1}, {32}, 49152, k), nothing), cudaSuccess);
  EXPECT_EQ(submit_launch(config({1}, {32}, 49153, k), nothing), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 122880), cudaSuccess);
  EXPECT_EQ(submit_launch(config({1}, {32}, 122880, k), nothing), cudaSuccess);
  EXPECT_EQ(submit_launch(config({1}, {32}, 122881, k), nothing), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 232449), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100), cudaSuccess);
  cudaFuncAttributes fa{};
  ASSERT_EQ(cudaFuncGetAttributes(&fa, k), cudaSuccess);
  EXPECT_EQ(fa.maxDynamicSharedSizeBytes, 232448);
  EXPECT_EQ(fa.binaryVersion, 90);
  EXPECT_EQ(fa.ptxVersion, 90);
  EXPECT_EQ(fa.maxThreadsPerBlock, 1024);
  EXPECT_EQ(fa.preferredShmemCarveout, 100);
  (void)cudaGetLastError();

  LaunchConfig bad_stream = config({1}, {32});
  static int not_a_stream = 0;
  bad_stream.stream = reinterpret_cast<cudaStream_t>(&not_a_stream);
  EXPECT_EQ(submit_launch(bad_stream, nothing), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_F(EmulatedRuntime, ALaunchRunsAsynchronouslyInStreamOrder) {
  cudaStream_t s = stream();
  Gate gate;
  gate.hold(s);
  std::atomic<int> ran{0};
  LaunchConfig c = config({1}, {32});
  c.stream = s;
  ASSERT_EQ(submit_launch(c, [&] {
              ran = 1;
              return cudaSuccess;
            }),
            cudaSuccess);
  EXPECT_EQ(ran.load(), 0);
  gate.release();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(ran.load(), 1);
}

TEST_F(EmulatedRuntime, AFailedGridIsStickyUntilDeviceReset) {
  cudaStream_t s = stream();
  // The faulting grid waits behind a gate until the second launch is queued: otherwise the stream
  // may run it first (on one CPU under ThreadSanitizer it did), and the second launch would rightly
  // return the sticky error already, as a GPU's would.
  Gate gate;
  gate.hold(s);
  LaunchConfig c = config({1}, {32});
  c.stream = s;
  ASSERT_EQ(submit_launch(c,
                          [] {
                            report_launch_failure("test_kernel: block (0,0,0) thread (3,0,0) never reached __syncwarp");
                            return cudaErrorLaunchFailure;
                          }),
            cudaSuccess);  // the launch itself is fine; the fault comes asynchronously
  std::atomic<bool> later_ran{false};
  ASSERT_EQ(submit_launch(c, [&] {
              later_ran = true;
              return cudaSuccess;
            }),
            cudaSuccess);
  gate.release();
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_FALSE(later_ran);  // a faulted context runs nothing more
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // sticky: never cleared
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemsetAsync(p, 0, 16, s), cudaErrorLaunchFailure);
  EXPECT_EQ(submit_launch(c, nothing), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(last_launch_failure(), "test_kernel: block (0,0,0) thread (3,0,0) never reached __syncwarp");
  report_launch_failure("a second failure");  // the first one explains the error
  EXPECT_EQ(last_launch_failure(), "test_kernel: block (0,0,0) thread (3,0,0) never reached __syncwarp");

  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(last_launch_failure(), "");
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);  // reset destroyed the stream
  (void)cudaGetLastError();

  // An illegal address stays what it is.
  ASSERT_EQ(submit_launch(config({1}, {1}), [] { return cudaErrorIllegalAddress; }), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorIllegalAddress);
}

TEST_F(EmulatedRuntime, ErrorNamesAndDescriptions) {
  EXPECT_STREQ(cudaGetErrorName(cudaSuccess), "cudaSuccess");
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidConfiguration), "cudaErrorInvalidConfiguration");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidConfiguration), "invalid configuration argument");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidResourceHandle), "invalid resource handle");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNotReady), "device not ready");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNotSupported), "operation not supported");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorLaunchFailure), "unspecified launch failure");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorIllegalAddress), "cudaErrorIllegalAddress");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorIllegalAddress), "an illegal memory access was encountered");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNoDevice), "no CUDA-capable device is detected");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidDevicePointer), "cudaErrorInvalidDevicePointer");
  EXPECT_STREQ(cudaGetErrorName(static_cast<cudaError_t>(12345)), "unrecognized error code");
}

TEST_F(EmulatedRuntime, DeviceQueries) {
  int n = 0, dev = -1, v = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_NE(std::string(p.name).find("emulated"), std::string::npos);
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.minor, 0);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.sharedMemPerBlock, 49152u);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 232448u);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.maxThreadsDim[2], 64);
  EXPECT_EQ(p.maxGridSize[0], 2147483647);
  EXPECT_EQ(p.maxGridSize[1], 65535);
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.unifiedAddressing, 1);
  EXPECT_EQ(p.canMapHostMemory, 1);
  EXPECT_EQ(cudaGetDeviceProperties(&p, 1), cudaErrorInvalidDevice);
  ASSERT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  EXPECT_EQ(v, 9);
  ASSERT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  EXPECT_EQ(v, 232448);
  ASSERT_EQ(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(v, 132);
  ASSERT_EQ(cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  ASSERT_EQ(cudaRuntimeGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  (void)cudaGetLastError();
}

// The backend's pattern: completion threads wait for and time events while the main thread records
// and queues more.
TEST_F(EmulatedRuntime, ManyHostThreadsAtOnce) {
  constexpr int kThreads = 4, kRounds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&failures] {
      cudaStream_t s = nullptr;
      cudaEvent_t a = nullptr, b = nullptr;
      void* d = nullptr;
      void* d2 = nullptr;
      void* h = nullptr;
      bool ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                cudaEventCreate(&a) == cudaSuccess &&
                cudaEventCreateWithFlags(&b, cudaEventBlockingSync) == cudaSuccess &&
                cudaMalloc(&d, 4096) == cudaSuccess && cudaMalloc(&d2, 4096) == cudaSuccess &&
                cudaHostAlloc(&h, 4096, cudaHostAllocPortable) == cudaSuccess;
      for (int r = 0; ok && r < kRounds; ++r) {
        std::memset(h, r, 4096);
        ok = cudaEventRecord(a, s) == cudaSuccess && cudaMemcpyAsync(d, h, 4096, cudaMemcpyDefault, s) == cudaSuccess &&
             cudaMemsetAsync(d2, 0, 4096, s) == cudaSuccess &&
             cudaMemcpyAsync(d2, d, 4096, cudaMemcpyDefault, s) == cudaSuccess &&
             cudaMemcpyAsync(h, d2, 4096, cudaMemcpyDefault, s) == cudaSuccess && cudaEventRecord(b, s) == cudaSuccess;
        std::thread waiter([&] {
          float ms = 0;
          if (cudaEventSynchronize(b) != cudaSuccess || cudaEventElapsedTime(&ms, a, b) != cudaSuccess || ms < 0)
            ++failures;
        });
        waiter.join();
        ok = ok && static_cast<unsigned char*>(h)[4095] == static_cast<unsigned char>(r);
      }
      if (!ok) ++failures;
      cudaFreeHost(h);
      cudaFree(d);
      cudaFree(d2);
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      cudaStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(EmulatedRuntime, DestroyingAStreamLetsItsWorkFinish) {
  cudaStream_t s = stream(cudaStreamDefault);
  int* d = device<int>(1);
  int* h = pinned<int>(1);
  *h = 0;
  Write w{d, 9};
  ASSERT_EQ(cudaLaunchHostFunc(s, &Write::run, &w), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);  // returns at once
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  // The legacy stream still orders after the destroyed blocking stream's queued work.
  ASSERT_EQ(cudaMemcpyAsync(h, d, sizeof(int), cudaMemcpyDefault, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(*h, 9);
}

}  // namespace
}  // namespace oomb::emulated_cuda
