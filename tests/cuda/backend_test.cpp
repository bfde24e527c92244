// Memory tiers, copies and events of the CUDA backend: zeroed allocations carved from a few blocks,
// pinned host slabs, copy_async ordering (after-events, the compute stream, wait()), completion
// callbacks, host-side fill_zero against in-flight copies, and staged uploads.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cuda_test_util.h"
#include "executor/runtime/arena.h"
#include "executor/cuda/batch_copy.h"
#include "executor/runtime/memory_account.h"
#include "executor/runtime/page_pool.h"
#include "step/buffers.h"
#include "step/cuda_layout.h"

namespace oomb::executor::cudatest {
namespace {

using executor::Arena;

// The arena is plain C++: these run without a device.
TEST(CudaArena, FirstFitReusesAndMergesFreedRanges) {
  int grows = 0;
  std::vector<std::unique_ptr<char[]>> blocks;
  Arena a(
      [&](int64_t bytes) {
        ++grows;
        // Over-allocate for alignment.
        blocks.push_back(std::make_unique<char[]>(static_cast<size_t>(bytes) + 256));
        const auto v = reinterpret_cast<uintptr_t>(blocks.back().get());
        return reinterpret_cast<void*>((v + 255) / 256 * 256);
      },
      [](void*, int64_t) {}, 4096);
  a.reserve(4096);
  void* x = a.allocate(1000);
  void* y = a.allocate(1000);
  void* z = a.allocate(1000);
  EXPECT_EQ(a.blocks(), 1);
  EXPECT_EQ(a.in_use_bytes(), 3 * 1024);
  EXPECT_EQ(a.size_of(y), 1024);
  a.deallocate(x);
  a.deallocate(y);  // merges with x's range
  void* w = a.allocate(2000);
  EXPECT_EQ(w, x) << "first fit in the merged range";
  EXPECT_EQ(a.blocks(), 1);
  void* big = a.allocate(10000);  // does not fit: one more block of at least the request
  EXPECT_EQ(a.blocks(), 2);
  EXPECT_EQ(a.grows(), 1);
  EXPECT_TRUE(a.contains(big));
  EXPECT_TRUE(a.contains(static_cast<char*>(z) + 5));
  int local = 0;
  EXPECT_FALSE(a.contains(&local));
  a.deallocate(z);
  a.deallocate(w);
  a.deallocate(big);
  EXPECT_EQ(a.in_use_bytes(), 0);
  EXPECT_EQ(a.peak_in_use_bytes(), 2048 + 1024 + 10240);
  EXPECT_EQ(grows, 2);
}

// The batch-copy policy, with injected statuses (no device needed): only "cannot do it here" turns
// batching off; a bad argument or a device fault is a fault (thrown by the backend with the call).
// Other cudaError_t values as in driver_types.h: 1 invalid value, 17 invalid device pointer, 700
// illegal address.
TEST(CudaBatchCopyPolicy, OnlyNotSupportedTurnsBatchingOff) {
  using cuda::BatchCopyStatus;
  using cuda::classify_batch_copy;
  EXPECT_EQ(classify_batch_copy(cuda::kCudaSuccess), BatchCopyStatus::issued);
  for (int e : {cuda::kCudaErrorNotSupported, cuda::kCudaErrorCallRequiresNewerDriver, cuda::kCudaErrorNotYetImplemented})
    EXPECT_EQ(classify_batch_copy(e), BatchCopyStatus::unsupported) << e;
  for (int e : {1, 17, 700}) EXPECT_EQ(classify_batch_copy(e), BatchCopyStatus::fault) << e;
}

TEST(CudaArenaDeathTest, FreeingAForeignPointerIsAnInvariantFailure) {
  Arena a([](int64_t b) { return std::malloc(static_cast<size_t>(b)); }, [](void* p, int64_t) { std::free(p); },
          1 << 12, 16);
  int x = 0;
  EXPECT_DEATH(a.deallocate(&x), "did not allocate");
}

class CudaBackendMemory : public CudaTest {};

TEST_F(CudaBackendMemory, AllocationsAreZeroedAndCarvedFromFewBlocks) {
  std::vector<Buffer> bufs;
  for (int i = 0; i < 50; ++i) bufs.emplace_back(*gpu, Tier::device, 1 + 4097 * i);
  const CudaMemoryStats s = gpu->memory_stats();
  EXPECT_LE(s.device_blocks, 1) << "50 small buffers come from one block";
  std::vector<uint8_t> host(4097 * 49 + 1, 7);
  gpu->download(host.data(), bufs.back().data(), static_cast<int64_t>(host.size()));
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](uint8_t b) { return b == 0; }));
  // Freed and re-allocated: no new block.
  bufs.erase(bufs.begin() + 10, bufs.begin() + 20);
  for (int i = 0; i < 10; ++i) bufs.emplace_back(*gpu, Tier::device, 4097);
  EXPECT_EQ(gpu->memory_stats().device_blocks, s.device_blocks);
}

TEST_F(CudaBackendMemory, HostPagesComeFromAFewPinnedSlabs) {
  CudaBackendOptions o = test_options();
  o.host_slab_bytes = int64_t{16} << 20;
  CudaBackend b(o);
  MemoryAccount account;
  // 2000 pages of 64 KiB in pool slabs of at most 4 MiB: 32 pool slabs, carved from 8 pinned slabs.
  PagePool pool(b, Tier::host, "host_pages", 64 << 10, 2000, account, 4 << 20);
  EXPECT_EQ(b.memory_stats().host_slabs, 8);
  const int64_t page = pool.allocate(true);
  std::vector<float> v(16 << 10, 1.0f);
  std::memcpy(v.data(), pool.ptr(page), 64 << 10);  // host tier: directly readable
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; }));
}

class CudaBackendCopies : public CudaTest {};

TEST_F(CudaBackendCopies, RoundTripThroughTheDeviceWithAfterEventsAndCallbacks) {
  const int64_t n = 1 << 20, bytes = n * 4;
  Buffer src(*gpu, Tier::host, bytes), dst(*gpu, Tier::host, bytes), dev(*gpu, Tier::device, bytes);
  auto* s = src.f32();
  for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(i);
  std::atomic<int> calls{0};
  std::atomic<int64_t> t_in{0}, t_out{0};
  CopyRequest in;
  in.dir = CopyDir::h2d;
  // Two adjacent halves: merged into one copy.
  in.regions = {{dev.data(), src.data(), bytes / 2},
                {static_cast<char*>(dev.data()) + bytes / 2, static_cast<char*>(src.data()) + bytes / 2, bytes / 2}};
  in.on_done = [&](int64_t t0, int64_t t1) {
    EXPECT_LE(t0, t1);
    t_in = t1;
    ++calls;
  };
  const EventPtr e_in = gpu->copy_async(std::move(in));
  CopyRequest out;
  out.dir = CopyDir::d2h;
  out.regions = {{dst.data(), dev.data(), bytes}};
  out.after = {e_in};
  out.on_done = [&](int64_t t0, int64_t) {
    t_out = t0;
    ++calls;
  };
  const EventPtr e_out = gpu->copy_async(std::move(out));
  e_out->wait();
  // e_in's device event completed before the d2h copy started, but its oomb Event is signalled by
  // the h2d direction's completion thread, which may run later than the d2h one: wait for it.
  e_in->wait();
  EXPECT_EQ(calls.load(), 2) << "on_done runs before the event is signalled";
  EXPECT_GE(t_out.load() + 1000000, t_in.load()) << "the d2h copy started after the h2d copy ended (1 ms slack)";
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), static_cast<size_t>(bytes)), 0);
}

// Scattered regions (every other page, as a sparse selection leaves them) go as one batch where
// the runtime and driver have cudaMemcpyBatchAsync; either way every region arrives.
TEST_F(CudaBackendCopies, ScatteredRegionsGoAsOneBatch) {
  const int64_t page = 64 << 10, pages = 33;
  Buffer host(*gpu, Tier::host, 2 * pages * page), dev(*gpu, Tier::device, pages * page),
      back(*gpu, Tier::host, pages * page);
  auto* h = static_cast<uint8_t*>(host.data());
  for (int64_t i = 0; i < 2 * pages * page; ++i) h[i] = static_cast<uint8_t>(i * 7 + i / page);
  CopyRequest in;
  in.dir = CopyDir::h2d;
  // Host pages 0, 2, 4, ... into device pages 0, 1, 2, ...: nothing merges.
  for (int64_t j = 0; j < pages; ++j)
    in.regions.push_back({static_cast<char*>(dev.data()) + j * page, h + 2 * j * page, page});
  const int64_t regions0 = gpu->copy_regions(), calls0 = gpu->copy_api_calls();
  gpu->copy_async(std::move(in))->wait();
  EXPECT_EQ(gpu->copy_regions() - regions0, pages);
  const int64_t calls = gpu->copy_api_calls() - calls0;
  // 1 with cudaMemcpyBatchAsync; `pages` where the runtime or driver lacks it (before CUDA 12.8).
  EXPECT_TRUE(calls == 1 || calls == pages) << calls;
  std::printf("%lld scattered regions issued with %lld API call(s)\n", static_cast<long long>(pages),
              static_cast<long long>(calls));
  gpu->download(back.data(), dev.data(), pages * page);
  for (int64_t j = 0; j < pages; ++j)
    ASSERT_EQ(std::memcmp(static_cast<char*>(back.data()) + j * page, h + 2 * j * page, static_cast<size_t>(page)), 0)
        << "page " << j;
}

TEST_F(CudaBackendCopies, WaitOrdersComputeAfterACopyAndCopiesAfterCompute) {
  const int64_t n = busy_elements(1 << 22, 1 << 16), bytes = n * 4;
  Buffer host(*gpu, Tier::host, bytes), dev(*gpu, Tier::device, bytes), back(*gpu, Tier::host, bytes);
  std::fill_n(host.f32(), n, 3.0f);
  CopyRequest in;
  in.dir = CopyDir::h2d;
  in.regions = {{dev.data(), host.data(), bytes}};
  const EventPtr e = gpu->copy_async(std::move(in));
  gpu->wait(e);                   // compute stream waits for the copy ...
  gpu->scale(dev.f32(), n, 2.0f);  // ... so this kernel sees 3s
  CopyRequest out;                 // and this copy is ordered after the kernel (compute-stream event)
  out.dir = CopyDir::d2h;
  out.regions = {{back.data(), dev.data(), bytes}};
  gpu->copy_async(std::move(out))->wait();
  const float* b = back.f32();
  EXPECT_EQ(b[0], 6.0f);
  EXPECT_EQ(b[n - 1], 6.0f);
}

TEST_F(CudaBackendCopies, AForeignAfterEventIsWaitedForOnTheHost) {
  const int64_t bytes = 4096;
  Buffer host(*gpu, Tier::host, bytes), dev(*gpu, Tier::device, bytes);
  auto foreign = std::make_shared<Event>();
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::fill_n(host.f32(), bytes / 4, 5.0f);
    foreign->signal();
  });
  CopyRequest in;
  in.dir = CopyDir::h2d;
  in.regions = {{dev.data(), host.data(), bytes}};
  in.after = {foreign};
  const EventPtr e = gpu->copy_async(std::move(in));
  t.join();
  e->wait();
  std::vector<float> v(bytes / 4);
  gpu->download(v.data(), dev.data(), bytes);
  EXPECT_EQ(v[0], 5.0f);
}

TEST_F(CudaBackendCopies, HostFillZeroWaitsForAnInFlightCopyIntoThatRange) {
  // 64 MiB on a GPU (256 KiB emulated): the copy is still running when fill_zero starts
  const int64_t n = busy_elements(1 << 24, 1 << 16), bytes = n * 4;
  Buffer dev(*gpu, Tier::device, bytes), host(*gpu, Tier::host, bytes);
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  gpu->upload(dev.data(), ones.data(), bytes);
  CopyRequest out;
  out.dir = CopyDir::d2h;
  out.regions = {{host.data(), dev.data(), bytes}};
  const EventPtr e = gpu->copy_async(std::move(out));
  gpu->fill_zero(host.data(), bytes);
  EXPECT_TRUE(e->done()) << "fill_zero returned while the copy into the range was in flight";
  EXPECT_EQ(host.f32()[0], 0.0f);
  EXPECT_EQ(host.f32()[n - 1], 0.0f);
}

// A device free inside a step does not drain the streams (no host synchronisation): the range's
// next owner is ordered after the work queued on it before the free, so it sees its own zeros.
TEST_F(CudaBackendCopies, ADeviceFreeIsStreamOrderedWithoutASynchronisation) {
  // 64 MiB on a GPU (256 KiB emulated): 50 passes over it are still queued at the free
  const int64_t n = busy_elements(1 << 24, 1 << 16), bytes = n * 4;
  const std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  Buffer a(*gpu, Tier::device, bytes);
  gpu->upload(a.data(), ones.data(), bytes);
  for (int i = 0; i < 50; ++i) gpu->scale(a.t(), n, 2.0f);
  void* const freed = a.data();
  const int64_t syncs = gpu->host_syncs();
  a = Buffer();
  EXPECT_EQ(gpu->host_syncs(), syncs) << "the device free synchronised";
  Buffer b(*gpu, Tier::device, bytes);
  ASSERT_EQ(b.data(), freed) << "first fit: the freed range";
  std::vector<float> v(static_cast<size_t>(n));
  gpu->download(v.data(), b.data(), bytes);
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[static_cast<size_t>(n - 1)], 0.0f);
}

TEST_F(CudaBackendCopies, UploadCopiesTheSourceBeforeItReturns) {
  const int64_t n = 1000;
  std::vector<float> v(n, 1.0f);
  Buffer a(*gpu, Tier::device, n * 4), b(*gpu, Tier::device, n * 4);
  gpu->upload(a.data(), v.data(), n * 4);
  std::fill(v.begin(), v.end(), 2.0f);  // reusing the source at once must not change a
  gpu->upload(b.data(), v.data(), n * 4);
  std::vector<float> ra(n), rb(n);
  gpu->download(ra.data(), a.data(), n * 4);
  gpu->download(rb.data(), b.data(), n * 4);
  EXPECT_EQ(ra[n - 1], 1.0f);
  EXPECT_EQ(rb[n - 1], 2.0f);
}

// Review 3, finding 12: the backend's pinned host buffers are the table's host rows, fixed in size.
// A download larger than the read-back buffer goes through it in pieces (a host optimizer's first
// read of the weights used to pin a buffer the size of the model), and the loss slots are sized
// before the first step to one per chunk (at least 4096).
TEST_F(CudaBackendCopies, PinnedHostBuffersAreFixedRowsAndDownloadsGoThroughThemInPieces) {
  using namespace step::cuda_scratch;
  auto bytes_of = [&](const char* row) {
    for (const BackendBuffer& b : gpu->host_buffers())
      if (b.name == row) return b.bytes;
    ADD_FAILURE() << "no host buffer " << row;
    return int64_t{-1};
  };
  EXPECT_EQ(bytes_of(step::row::kStagingRing), kStagingSlots * kStagingSlotBytes);
  EXPECT_EQ(bytes_of(step::row::kReadback), kReadbackBytes);
  EXPECT_EQ(bytes_of(step::row::kLossSlots), kLossSlots * 8);
  // 2.5 read-back buffers' worth, every piece in its place.
  const int64_t n = kReadbackBytes * 5 / 2 / 4;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 100003);
  Buffer d(*gpu, Tier::device, n * 4);
  gpu->upload(d.data(), v.data(), n * 4);
  std::vector<float> back(static_cast<size_t>(n), -1.0f);
  gpu->download(back.data(), d.data(), n * 4);
  EXPECT_EQ(back, v);
  EXPECT_EQ(bytes_of(step::row::kReadback), kReadbackBytes) << "the read-back buffer never grows";
  gpu->size_loss_slots(10000);
  EXPECT_EQ(bytes_of(step::row::kLossSlots), 10000 * 8);
  gpu->size_loss_slots(100);  // never shrinks
  EXPECT_EQ(bytes_of(step::row::kLossSlots), 10000 * 8);
  EXPECT_EQ(loss_slots(100), kLossSlots);
  EXPECT_EQ(loss_slots(10000), 10000);
}

TEST_F(CudaBackendCopies, DeviceNameAndStreamsAreReported) {
  EXPECT_FALSE(gpu->device_name().empty());
  EXPECT_NE(gpu->stream(CudaStream::compute), gpu->stream(CudaStream::h2d));
  EXPECT_NE(gpu->stream(CudaStream::h2d), gpu->stream(CudaStream::d2h));
  EXPECT_EQ(gpu->name(), "cuda");
}

}  // namespace
}  // namespace oomb::executor::cudatest
