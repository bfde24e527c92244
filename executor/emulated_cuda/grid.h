#pragma once
// The emulated device's execution of one grid (grid.cpp), and the services kernel code calls while
// it runs (device.h's built-ins and wmma.h are written on top of these).
//
// Model: the grid's blocks run one after another on the calling OS thread (the stream's worker);
// every CUDA thread of a block is a fiber. A scheduler runs the block's ready fibers, one pass at a
// time in the order OOMB_EMULATED_SCHEDULE sets, each until it reaches a synchronisation point (a
// block barrier, a warp rendezvous) or returns; then it releases what is complete: a block barrier
// once every thread that has not exited waits at one, a warp rendezvous once every lane its mask
// names waits at the same collective with the same mask. A pass that releases nothing while threads
// still wait is a deadlock, reported with kernel, block and thread instead of hanging.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "executor/emulated_cuda/launch.h"

namespace oomb::emulated_cuda {

// What the built-in variables (threadIdx, blockIdx, blockDim, gridDim) read.
struct ThreadIndex {
  uint3 thread_idx{};
  uint3 block_idx{};
  dim3 block_dim{};
  dim3 grid_dim{};
};

namespace detail {
// The CUDA thread whose fiber runs on this OS thread (null outside a grid). Set by the scheduler
// before every switch into a fiber; a fiber never leaves the OS thread that started it. Read on
// every built-in: the initial-exec model (no __tls_get_addr call from the shared library), as the
// library is loaded with the program (a dlopen'ed fake cuBLASLt finds it loaded already).
#define OOMB_EMULATED_TLS [[gnu::tls_model("initial-exec")]]
OOMB_EMULATED_TLS extern thread_local constinit ThreadIndex* t_current;
}  // namespace detail

inline const ThreadIndex& current_thread() { return *detail::t_current; }

// Runs every block of the grid on the calling thread; entry(args) is one CUDA thread's kernel call.
// Returns cudaSuccess, or the grid's failure after passing its message to report_launch_failure:
// cudaErrorLaunchFailure for a deadlock or a collective misused, cudaErrorMisalignedAddress for a
// misaligned wmma pointer.
using KernelEntry = void (*)(const void* args);
cudaError_t run_grid(const LaunchConfig& config, KernelEntry entry, const void* args);

// Before a grid runs: a kernel's pointer argument (index: its parameter, from 0) must be null or
// device-accessible memory (runtime.h's device_accessible). Otherwise, a pageable host pointer that
// a GPU without HMM would fault on, the failure is reported and cudaErrorIllegalAddress returned.
cudaError_t check_pointer_argument(const LaunchConfig& config, size_t index, const void* p);

// Device-side services: called by kernel code running in a fiber.
void sync_block();                 // __syncthreads
int sync_block_or(int predicate);  // __syncthreads_or
void sync_warp(unsigned mask);     // __syncwarp

// The warp collectives. Lanes meet only at the same collective with the same mask and contribution
// size (CUDA requires the lanes of a mask to execute the same intrinsic).
enum class Collective : uint8_t { syncwarp, shfl, shfl_up, shfl_down, shfl_xor, wmma_load, wmma_store, wmma_mma };
inline constexpr size_t kMaxContributionBytes = 64;

// The contributions of a released rendezvous. Read them before the next rendezvous of this lane:
// a lane that runs ahead writes its next contribution to a second slot, never over this one.
class WarpExchange {
 public:
  // slots: lane 0's first slot; a lane's slots are `stride` bytes after the previous lane's, its
  // second slot `slot_bytes` after its first; parity bit l: the slot lane l contributed to.
  WarpExchange(const std::byte* slots, size_t stride, size_t slot_bytes, uint32_t parity, unsigned lane)
      : slots_(slots), stride_(stride), slot_bytes_(slot_bytes), parity_(parity), lane_(lane) {}
  unsigned lane() const { return lane_; }
  // lane: a lane the mask names.
  const std::byte* contribution(unsigned lane) const {
    return slots_ + lane * stride_ + ((parity_ >> lane) & 1) * slot_bytes_;
  }

 private:
  const std::byte* slots_;
  size_t stride_, slot_bytes_;
  uint32_t parity_;
  unsigned lane_;
};

// Publishes `bytes` (<= kMaxContributionBytes) of `data` as this lane's contribution and waits until
// every lane named in `mask` has arrived at the same collective. `name` says what waits, in reports.
WarpExchange warp_exchange(unsigned mask, Collective what, const char* name, const void* data, size_t bytes);

// __shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync (what: their Collective) on a value
// of `bytes` bytes, in place: arg is srcLane, delta or laneMask; width a power of two <= 32. Reading
// a lane outside the mask (an undefined value on a GPU) fails the grid.
void shuffle(unsigned mask, Collective what, const char* name, void* value, size_t bytes, int arg, int width);

// Fails the running grid from kernel code: the message (prefixed with kernel, block and thread) is
// reported and the grid returns `error`. Does not return to the caller.
[[noreturn]] void fail(cudaError_t error, const std::string& message);

// The current block's dynamic shared memory: exactly LaunchConfig::dynamic_shared_bytes, 256-byte
// aligned, every byte 0xff at the block's start (an unwritten float reads as NaN).
void* dynamic_shared_memory();

// The order in which a pass runs the ready fibers of a block, and the order of the blocks:
// round-robin (thread and block index order), reverse, or random:<seed> (a permutation drawn
// afresh for every pass, seeded per block, and a seeded block order). OOMB_EMULATED_SCHEDULE sets
// it at the first launch; set_schedule changes it between launches.
struct Schedule {
  enum class Kind : uint8_t { round_robin, reverse, random } kind = Kind::round_robin;
  uint64_t seed = 0;
};
// Throws std::invalid_argument naming what is accepted.
Schedule parse_schedule(std::string_view spec);
void set_schedule(Schedule schedule);
Schedule schedule();

// Fiber resumes (a switch into a fiber and back) since the process started, over all threads:
// the emulator's unit of work, for throughput measurements.
uint64_t fiber_resumes();

}  // namespace oomb::emulated_cuda
