// One grid on the emulated device: blocks one after another, every CUDA thread a Boost.Context
// fiber, a scheduler that releases block barriers and warp rendezvous (grid.h says the model).
#include "executor/emulated_cuda/grid.h"

#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>
#include <vector>

#include "executor/emulated_cuda/runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
// ThreadSanitizer's dynamic annotations (exported by libtsan, not declared by its headers).
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace oomb::emulated_cuda {

namespace detail {
OOMB_EMULATED_TLS thread_local constinit ThreadIndex* t_current = nullptr;
}  // namespace detail

namespace {

namespace bc = boost::context;

constexpr unsigned kWarpSize = 32;
// Instrumented frames are several times larger; untouched stack pages cost no memory.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kStackBytes = size_t{512} << 10;
#else
constexpr size_t kStackBytes = size_t{128} << 10;
#endif
constexpr size_t kDynamicSharedAlign = 256;

std::atomic<uint64_t> g_resumes{0};

// ---------------------------------------------------------------- sanitizers
//
// ThreadSanitizer sees each fiber as a thread of its own, and the switches do not synchronise
// (no_sync), so that a missing barrier between two CUDA threads is a reported race. Barriers and
// rendezvous synchronise the threads they release (release on arrival, acquire on release), and the
// emulator's own bookkeeping (states, counters, contributions) is ignored: it is ordered by the
// switches, which TSan is told nothing about. The blocks of a grid are ordered one after another
// (a fiber inherits the scheduler's clock, which has acquired the exits of the blocks before): the
// next block reuses the same static __shared__ variables and the same pooled stacks, so races
// between the blocks of a grid are not TSan's to find (the reverse and random block orders are).

#if defined(__SANITIZE_THREAD__)
struct Bookkeeping {
  Bookkeeping() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~Bookkeeping() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;
};
void tsan_release(void* p) { __tsan_release(p); }
void tsan_acquire(void* p) { __tsan_acquire(p); }
#else
struct Bookkeeping {
  Bookkeeping() = default;
  ~Bookkeeping() {}  // not trivial, as the TSan one: a scope is not an unused variable
  Bookkeeping(const Bookkeeping&) = delete;
  Bookkeeping& operator=(const Bookkeeping&) = delete;
};
void tsan_release(void*) {}
void tsan_acquire(void*) {}
#endif

// ---------------------------------------------------------------- threads, blocks, workers

enum class State : uint8_t { ready, block_barrier, warp, exited };

struct Block;
struct Worker;

// Thrown into a fiber to unwind it when its block is abandoned (a failure or a deadlock).
struct Abandon {};

struct Thread : ThreadIndex {
  Thread() {}  // user-provided: a vector of them is not zeroed first (the slots need no zeros)
  Block* block = nullptr;
  Worker* worker = nullptr;  // the fiber that runs it
  unsigned linear = 0, warp = 0, lane = 0;
  State state = State::ready;
  // At a block barrier.
  bool barrier_or = false;
  int predicate = 0;
  // At a warp rendezvous.
  unsigned mask = 0;
  Collective collective = Collective::syncwarp;
  uint8_t bytes = 0;
  const char* name = "";
  // Rendezvous completed so far; this lane's next contribution goes to slots[exchanges & 1].
  unsigned exchanges = 0;
  // Set on release: bit l is the slot that lane l of the group contributed to it.
  uint32_t peer_parity = 0;
  struct alignas(16) Slot {
    std::byte bytes[kMaxContributionBytes];
  } slots[2];  // written before they are read
};

// A fiber that runs one CUDA thread after another: thread i of every block on this OS thread runs
// on worker i, so a launch creates no fiber and maps no stack once the pool has grown. The stack
// has a guard page below it (an overflow faults instead of running into the next stack).
struct Worker {
  bc::fiber fiber;      // the worker while it is suspended
  bc::fiber scheduler;  // the scheduler while the worker runs
  bc::stack_context stack{};
  Thread* thread = nullptr;  // the CUDA thread it runs next or now
  bool quit = false;
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  const void* scheduler_bottom = nullptr;
  size_t scheduler_size = 0;
#endif
#if defined(__SANITIZE_THREAD__)
  void* tsan_fiber = nullptr;
  void* tsan_scheduler = nullptr;
#endif
};

struct Grid {
  const LaunchConfig& config;
  KernelEntry entry;
  const void* args;
  Schedule schedule;
  char exit_sync = 0;  // TSan: every thread's exit, acquired at the end of each block
};

struct FreeAligned {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kDynamicSharedAlign}); }
};

struct Block {
  Block(Grid& g, uint3 idx, unsigned count) : grid(g), block_idx(idx), n(count), threads(count) {}

  Grid& grid;
  uint3 block_idx;
  unsigned n;
  std::vector<Thread> threads;
  std::unique_ptr<std::byte[], FreeAligned> dynamic_shared;
  std::vector<unsigned> ready;  // released, to run in the next pass
  unsigned exited = 0;
  unsigned at_barrier = 0;
  unsigned barrier_generation = 0;
  int barrier_result[2] = {0, 0};  // __syncthreads_or's result by generation parity
  char barrier_sync[2] = {0, 0};   // TSan: a barrier's arrivals, by generation parity
  char start_sync = 0;             // TSan: what the scheduler did before the block started
  uint32_t warp_waiting[kWarpSize] = {};  // lanes of each warp at a rendezvous
  uint32_t dirty_warps = 0;               // warps with an arrival since the last release
  bool failed = false;
  bool abandoning = false;
  cudaError_t error = cudaSuccess;
  std::string failure;

  Thread& lane(unsigned warp, unsigned l) { return threads[warp * kWarpSize + l]; }
  unsigned lanes_in(unsigned warp) const { return std::min(kWarpSize, n - warp * kWarpSize); }
};

Thread& self() { return *static_cast<Thread*>(detail::t_current); }

std::string format_index(uint3 i) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "(%u,%u,%u)", i.x, i.y, i.z);
  return buf;
}

std::string hex_mask(unsigned mask) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", mask);
  return buf;
}

std::string block_prefix(const Block& b) {
  return "kernel " + std::string(b.grid.config.kernel_name) + " block " + format_index(b.block_idx);
}

void record_failure(Block& b, cudaError_t error, std::string message) {
  if (b.failed) return;
  b.failed = true;
  b.error = error;
  b.failure = std::move(message);
}

// ---------------------------------------------------------------- switching

// The scheduler's side of a switch into a worker: until the worker switches back.
void enter(Worker& w, void** scheduler_fake_stack) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(scheduler_fake_stack, static_cast<char*>(w.stack.sp) - w.stack.size, w.stack.size);
#else
  (void)scheduler_fake_stack;
#endif
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(w.tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
  w.fiber = std::move(w.fiber).resume();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(*scheduler_fake_stack, nullptr, nullptr);
#endif
}

// The worker's side: back to the scheduler, until it enters this worker again.
void leave(Worker& w) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(&w.fake_stack, w.scheduler_bottom, w.scheduler_size);
#endif
#if defined(__SANITIZE_THREAD__)
  __tsan_switch_to_fiber(w.tsan_scheduler, __tsan_switch_to_fiber_no_sync);
#endif
  w.scheduler = std::move(w.scheduler).resume();
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(w.fake_stack, &w.scheduler_bottom, &w.scheduler_size);
#endif
}

// A CUDA thread waits for the scheduler to release it; an abandoned one unwinds.
void suspend(Thread& t) {
  leave(*t.worker);
  if (t.block->abandoning) throw Abandon{};
}

void run_kernel(Thread& t) {
  Block& b = *t.block;
  try {
    b.grid.entry(b.grid.args);
  } catch (const Abandon&) {
  } catch (const std::exception& e) {
    Bookkeeping scope;
    record_failure(b, cudaErrorLaunchFailure,
                   block_prefix(b) + " thread " + format_index(t.thread_idx) + ": threw " + e.what());
  } catch (...) {
    Bookkeeping scope;
    record_failure(b, cudaErrorLaunchFailure,
                   block_prefix(b) + " thread " + format_index(t.thread_idx) + ": threw an exception");
  }
}

void work(Worker& w) {
  for (;;) {
    Thread* t;
    {
      Bookkeeping scope;
      if (w.quit) return;
      t = w.thread;
    }
    tsan_acquire(&t->block->start_sync);
    bool abandoned;
    {
      Bookkeeping scope;
      abandoned = t->block->abandoning;
    }
    if (!abandoned) run_kernel(*t);
    Bookkeeping scope;
    t->state = State::exited;
    ++t->block->exited;
    tsan_release(&t->block->grid.exit_sync);
    leave(w);
  }
}

// The workers of this OS thread (a stream's worker, or a test's thread), grown to the largest block.
class WorkerPool {
 public:
  WorkerPool() = default;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() {
    Bookkeeping scope;
    for (auto& w : workers_) {
      w->quit = true;
      enter(*w, &fake_stack_);  // returns from its fiber function: the stack is unmapped
#if defined(__SANITIZE_THREAD__)
      __tsan_destroy_fiber(w->tsan_fiber);
#endif
    }
  }

  Worker& at(size_t i) {
    while (workers_.size() <= i) workers_.push_back(make_worker());
    return *workers_[i];
  }
  void** scheduler_fake_stack() { return &fake_stack_; }

 private:
  static std::unique_ptr<Worker> make_worker() {
    auto w = std::make_unique<Worker>();
    Worker* wp = w.get();
#if defined(__SANITIZE_THREAD__)
    w->tsan_fiber = __tsan_create_fiber(0);
    w->tsan_scheduler = __tsan_get_current_fiber();
#endif
    // Boost's protected stack: mmap with a guard page, unmapped when the fiber function returns.
    struct Stack : bc::protected_fixedsize_stack {
      Worker* worker;
      Stack(Worker* w) : bc::protected_fixedsize_stack(kStackBytes), worker(w) {}
      bc::stack_context allocate() {
        worker->stack = bc::protected_fixedsize_stack::allocate();
        return worker->stack;
      }
    };
    w->fiber = bc::fiber(std::allocator_arg, Stack(wp), [wp](bc::fiber&& scheduler) {
      {
        Bookkeeping scope;
        wp->scheduler = std::move(scheduler);
#if defined(__SANITIZE_ADDRESS__)
        __sanitizer_finish_switch_fiber(nullptr, &wp->scheduler_bottom, &wp->scheduler_size);
#endif
      }
      work(*wp);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
      Worker last;  // the fields the switch reads, read as bookkeeping
      {
        Bookkeeping scope;
#if defined(__SANITIZE_ADDRESS__)
        last.scheduler_bottom = wp->scheduler_bottom;
        last.scheduler_size = wp->scheduler_size;
#endif
#if defined(__SANITIZE_THREAD__)
        last.tsan_scheduler = wp->tsan_scheduler;
#endif
      }
#endif
#if defined(__SANITIZE_ADDRESS__)
      __sanitizer_start_switch_fiber(nullptr, last.scheduler_bottom, last.scheduler_size);
#endif
#if defined(__SANITIZE_THREAD__)
      __tsan_switch_to_fiber(last.tsan_scheduler, __tsan_switch_to_fiber_no_sync);
#endif
      // From here on this runs as the scheduler (whose bookkeeping TSan ignores) on its way back.
      return std::move(wp->scheduler);
    });
    return w;
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  void* fake_stack_ = nullptr;  // ASan: the scheduler's fake stack while a worker runs
};

thread_local WorkerPool t_workers;

// Scheduler -> the fiber running t, until t suspends or exits.
void resume(Thread& t) {
  detail::t_current = &t;
  enter(*t.worker, t_workers.scheduler_fake_stack());
}

// ---------------------------------------------------------------- releasing

void release_warp(Block& b, unsigned warp) {
  uint32_t waiting = b.warp_waiting[warp];
  uint32_t todo = waiting;
  while (todo != 0) {
    const Thread& first = b.lane(warp, static_cast<unsigned>(std::countr_zero(todo)));
    todo &= todo - 1;  // the lanes of its mask may yet form groups of their own
    const uint32_t mask = first.mask;
    if ((waiting & mask) != mask) continue;  // a lane of the group has not arrived
    bool same = true;
    uint32_t parity = 0;
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      const unsigned l = static_cast<unsigned>(std::countr_zero(m));
      const Thread& t = b.lane(warp, l);
      same = same && t.mask == mask && t.collective == first.collective && t.bytes == first.bytes;
      parity |= (t.exchanges & 1u) << l;
    }
    if (!same) continue;  // lanes at different collectives: not a group (yet)
    for (uint32_t m = mask; m != 0; m &= m - 1) {
      Thread& t = b.lane(warp, static_cast<unsigned>(std::countr_zero(m)));
      t.peer_parity = parity;
      ++t.exchanges;
      t.state = State::ready;
      b.ready.push_back(t.linear);
    }
    waiting &= ~mask;
    todo &= ~mask;
  }
  b.warp_waiting[warp] = waiting;
}

void release_barrier(Block& b) {
  if (b.at_barrier == 0 || b.at_barrier + b.exited != b.n) return;
  bool any_or = false, any_plain = false;
  int result = 0;
  for (const Thread& t : b.threads) {
    if (t.state != State::block_barrier) continue;
    (t.barrier_or ? any_or : any_plain) = true;
    result |= t.predicate;
  }
  if (any_or && any_plain) return;  // __syncthreads and __syncthreads_or do not meet
  b.barrier_result[b.barrier_generation & 1] = result;
  ++b.barrier_generation;
  b.at_barrier = 0;
  for (Thread& t : b.threads) {
    if (t.state != State::block_barrier) continue;
    t.state = State::ready;
    b.ready.push_back(t.linear);
  }
}

void release(Block& b) {
  for (uint32_t d = std::exchange(b.dirty_warps, 0); d != 0; d &= d - 1)
    release_warp(b, static_cast<unsigned>(std::countr_zero(d)));
  release_barrier(b);
}

// ---------------------------------------------------------------- deadlock report

std::string waits_at(const Thread& t) {
  if (t.state == State::block_barrier) return t.barrier_or ? "__syncthreads_or" : "__syncthreads";
  return std::string(t.name) + "(" + hex_mask(t.mask) + ")";
}

// What t waits for, and the first lane of its group that keeps it waiting.
std::string blocked_on(Block& b, const Thread& t) {
  std::string s = waits_at(t);
  if (t.state != State::warp) return s;
  for (uint32_t m = t.mask; m != 0; m &= m - 1) {
    const unsigned l = static_cast<unsigned>(std::countr_zero(m));
    const Thread& peer = b.lane(t.warp, l);
    if (&peer == &t) continue;
    const std::string who = " but lane " + std::to_string(l) + " of warp " + std::to_string(t.warp);
    if (peer.state == State::exited) return s + who + " has exited";
    if (peer.state != State::warp || peer.mask != t.mask || peer.collective != t.collective ||
        peer.bytes != t.bytes)
      return s + who + " waits at " + waits_at(peer);
  }
  return s;
}

std::string deadlock_report(Block& b) {
  constexpr int kMaxGroups = 12;
  std::string out = block_prefix(b) + ": deadlock:";
  int groups = 0, left_out = 0;
  for (unsigned i = 0; i < b.n;) {
    if (b.threads[i].state == State::exited) {
      ++i;
      continue;
    }
    const std::string what = blocked_on(b, b.threads[i]);
    unsigned j = i + 1;
    while (j < b.n && b.threads[j].state != State::exited && blocked_on(b, b.threads[j]) == what) ++j;
    if (groups++ >= kMaxGroups) {
      ++left_out;
    } else {
      out += groups == 1 ? " " : "; ";
      out += j - i == 1 ? "thread " + format_index(b.threads[i].thread_idx) + " waits at "
                        : "threads " + format_index(b.threads[i].thread_idx) + ".." +
                              format_index(b.threads[j - 1].thread_idx) + " wait at ";
      out += what;
    }
    i = j;
  }
  if (left_out > 0) out += "; and " + std::to_string(left_out) + " more groups";
  return out;
}

// ---------------------------------------------------------------- running

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: distinct seeds per block from one seed
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The order of the grid's blocks: index order, reversed, or a seeded permutation (an affine
// bijection of [0, 2^k) restricted to [0, count) by cycle walking: no table for large grids).
class BlockOrder {
 public:
  BlockOrder(uint64_t count, const Schedule& s) : count_(count), kind_(s.kind) {
    mask_ = std::bit_ceil(count) - 1;
    mul_ = (mix(s.seed) | 1) & mask_;
    if (mul_ == 0) mul_ = 1;
    add_ = mix(s.seed + 1) & mask_;
  }
  uint64_t at(uint64_t i) const {
    switch (kind_) {
      case Schedule::Kind::round_robin:
        return i;
      case Schedule::Kind::reverse:
        return count_ - 1 - i;
      case Schedule::Kind::random:
        break;
    }
    uint64_t x = i;
    do {
      x = (x * mul_ + add_) & mask_;
    } while (x >= count_);
    return x;
  }

 private:
  uint64_t count_, mask_ = 0, mul_ = 1, add_ = 0;
  Schedule::Kind kind_;
};

// Releases mostly come in index order already (a barrier releases the whole block).
void order_pass(std::vector<unsigned>& run, Schedule::Kind kind, std::mt19937_64& rng) {
  switch (kind) {
    case Schedule::Kind::round_robin:
      if (!std::is_sorted(run.begin(), run.end())) std::sort(run.begin(), run.end());
      break;
    case Schedule::Kind::reverse:
      if (!std::is_sorted(run.begin(), run.end())) std::sort(run.begin(), run.end());
      std::reverse(run.begin(), run.end());
      break;
    case Schedule::Kind::random:
      std::shuffle(run.begin(), run.end(), rng);
      break;
  }
}

// Resumes every thread of an abandoned block until it has unwound and exited.
void abandon(Block& b) {
  b.abandoning = true;
  for (Thread& t : b.threads)
    while (t.state != State::exited) resume(t);
}

cudaError_t run_block(Grid& g, uint3 block_idx, uint64_t linear) {
  const dim3 bd = g.config.block;
  Block b(g, block_idx, bd.x * bd.y * bd.z);
  const size_t smem = g.config.dynamic_shared_bytes;
  b.dynamic_shared.reset(static_cast<std::byte*>(::operator new[](smem, std::align_val_t{kDynamicSharedAlign})));
  std::memset(b.dynamic_shared.get(), 0xff, smem);

  for (unsigned i = 0; i < b.n; ++i) {
    Thread& t = b.threads[i];
    t.thread_idx = uint3{i % bd.x, i / bd.x % bd.y, i / (bd.x * bd.y)};
    t.block_idx = block_idx;
    t.block_dim = bd;
    t.grid_dim = g.config.grid;
    t.block = &b;
    t.linear = i;
    t.warp = i / kWarpSize;
    t.lane = i % kWarpSize;
    t.worker = &t_workers.at(i);
    t.worker->thread = &t;
    b.ready.push_back(i);
  }
  tsan_release(&b.start_sync);

  std::mt19937_64 rng(mix(g.schedule.seed ^ mix(linear)));
  std::vector<unsigned> run;
  while (!b.ready.empty()) {
    run.swap(b.ready);
    order_pass(run, g.schedule.kind, rng);
    g_resumes.fetch_add(run.size(), std::memory_order_relaxed);
    for (unsigned i : run) {
      resume(b.threads[i]);
      if (b.failed) break;
    }
    run.clear();
    if (b.failed) break;
    release(b);
    if (b.ready.empty() && b.exited < b.n) record_failure(b, cudaErrorLaunchFailure, deadlock_report(b));
  }
  if (b.failed) abandon(b);
  tsan_acquire(&g.exit_sync);  // the block's threads are done before its memory goes
  if (!b.failed) return cudaSuccess;
  report_launch_failure(b.failure);
  return b.error;
}

// ---------------------------------------------------------------- settings

std::mutex g_settings_mu;
std::optional<Schedule> g_schedule;

}  // namespace

// ---------------------------------------------------------------- the grid

cudaError_t run_grid(const LaunchConfig& config, KernelEntry entry, const void* args) {
  Bookkeeping scope;
  Grid g{config, entry, args, {}};
  try {
    g.schedule = schedule();
  } catch (const std::exception& e) {
    report_launch_failure("kernel " + std::string(config.kernel_name) + ": " + e.what());
    return cudaErrorLaunchFailure;
  }
  const dim3 gd = config.grid;
  const uint64_t blocks = uint64_t{gd.x} * gd.y * gd.z;
  const BlockOrder order(blocks, g.schedule);
  cudaError_t result = cudaSuccess;
  for (uint64_t i = 0; i < blocks && result == cudaSuccess; ++i) {
    const uint64_t linear = order.at(i);
    const uint3 idx{static_cast<unsigned>(linear % gd.x), static_cast<unsigned>(linear / gd.x % gd.y),
                    static_cast<unsigned>(linear / (uint64_t{gd.x} * gd.y))};
    result = run_block(g, idx, linear);
  }
  return result;
}

cudaError_t check_pointer_argument(const LaunchConfig& config, size_t index, const void* p) {
  if (p == nullptr || device_accessible(p)) return cudaSuccess;
  char where[32];
  std::snprintf(where, sizeof where, "%p", p);
  report_launch_failure("kernel " + std::string(config.kernel_name) + ": argument " + std::to_string(index) + " is " +
                        where + ", not device memory (host memory neither pinned nor mapped, which a GPU cannot read)");
  return cudaErrorIllegalAddress;
}

// ---------------------------------------------------------------- device-side services

namespace {

int arrive_at_barrier(bool is_or, int predicate) {
  Thread& t = self();
  Block& b = *t.block;
  unsigned generation;
  {
    Bookkeeping scope;
    t.state = State::block_barrier;
    t.barrier_or = is_or;
    t.predicate = predicate != 0;
    generation = b.barrier_generation & 1;
    ++b.at_barrier;
    tsan_release(&b.barrier_sync[generation]);
    suspend(t);
  }
  tsan_acquire(&b.barrier_sync[generation]);
  Bookkeeping scope;
  return b.barrier_result[generation];
}

}  // namespace

void sync_block() { arrive_at_barrier(false, 0); }

int sync_block_or(int predicate) { return arrive_at_barrier(true, predicate); }

void sync_warp(unsigned mask) { warp_exchange(mask, Collective::syncwarp, "__syncwarp", nullptr, 0); }

WarpExchange warp_exchange(unsigned mask, Collective what, const char* name, const void* data, size_t bytes) {
  Thread& t = self();
  Block& b = *t.block;
  const unsigned lanes = b.lanes_in(t.warp);
  if ((mask >> t.lane & 1) == 0)
    fail(cudaErrorLaunchFailure, std::string(name) + "(" + hex_mask(mask) + ") from lane " + std::to_string(t.lane) +
                                     ", which its mask does not name (CUDA requires the calling lane in the mask)");
  if (lanes < kWarpSize && (mask >> lanes) != 0)
    fail(cudaErrorLaunchFailure, std::string(name) + "(" + hex_mask(mask) + ") names lane " +
                                     std::to_string(std::countr_zero(mask >> lanes) + lanes) + " of warp " +
                                     std::to_string(t.warp) + ", which does not exist (" + std::to_string(b.n) +
                                     " threads per block)");
  Thread::Slot* slot;
  {
    Bookkeeping scope;
    slot = &t.slots[t.exchanges & 1];
    if (bytes > 0) std::memcpy(slot->bytes, data, bytes);
    t.state = State::warp;
    t.mask = mask;
    t.collective = what;
    t.bytes = static_cast<uint8_t>(bytes);
    t.name = name;
    b.warp_waiting[t.warp] |= 1u << t.lane;
    b.dirty_warps |= 1u << t.warp;
    tsan_release(slot);
    suspend(t);
  }
  Thread* warp = &b.lane(t.warp, 0);
  uint32_t parity;
  {
    Bookkeeping scope;
    parity = t.peer_parity;
  }
  for (uint32_t m = mask; m != 0; m &= m - 1) {
    const unsigned l = static_cast<unsigned>(std::countr_zero(m));
    tsan_acquire(&warp[l].slots[(parity >> l) & 1]);
  }
  return WarpExchange(warp[0].slots[0].bytes, sizeof(Thread), sizeof(Thread::Slot), parity, t.lane);
}

void shuffle(unsigned mask, Collective what, const char* name, void* value, size_t bytes, int arg, int width) {
  if (width <= 0 || width > static_cast<int>(kWarpSize) || (width & (width - 1)) != 0)
    fail(cudaErrorLaunchFailure, std::string(name) + ": width " + std::to_string(width) +
                                     " is not a power of two in [1, 32]");
  const WarpExchange ex = warp_exchange(mask, what, name, value, bytes);
  const unsigned lane = ex.lane(), w = static_cast<unsigned>(width), first = lane & ~(w - 1);
  // Lanes index a segment of `width` lanes; a source past the segment returns the caller's own value
  // (CUDA C++ Programming Guide, Warp Shuffle Functions).
  const uint64_t delta = static_cast<unsigned>(arg);
  unsigned src = lane;
  switch (what) {
    case Collective::shfl:
      src = first + (static_cast<unsigned>(arg) & (w - 1));
      break;
    case Collective::shfl_up:
      if (lane - first < delta) return;
      src = lane - static_cast<unsigned>(delta);
      break;
    case Collective::shfl_down:
      if (lane - first + delta >= w) return;
      src = lane + static_cast<unsigned>(delta);
      break;
    case Collective::shfl_xor:
      src = lane ^ static_cast<unsigned>(arg);
      if (src >= first + w) return;
      break;
    default:
      break;
  }
  if ((mask >> src & 1) == 0)
    fail(cudaErrorLaunchFailure, std::string(name) + "(" + hex_mask(mask) + ") reads lane " + std::to_string(src) +
                                     ", which the mask does not name (its value is undefined)");
  std::memcpy(value, ex.contribution(src), bytes);
}

void fail(cudaError_t error, const std::string& message) {
  Thread& t = self();
  {
    Bookkeeping scope;
    record_failure(*t.block, error, block_prefix(*t.block) + " thread " + format_index(t.thread_idx) + ": " + message);
  }
  throw Abandon{};
}

void* dynamic_shared_memory() { return self().block->dynamic_shared.get(); }

// ---------------------------------------------------------------- settings

Schedule parse_schedule(std::string_view spec) {
  if (spec == "round-robin") return {Schedule::Kind::round_robin, 0};
  if (spec == "reverse") return {Schedule::Kind::reverse, 0};
  constexpr std::string_view kRandom = "random:";
  if (spec.starts_with(kRandom)) {
    const std::string_view digits = spec.substr(kRandom.size());
    uint64_t seed = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty())
      return {Schedule::Kind::random, seed};
  }
  throw std::invalid_argument("OOMB_EMULATED_SCHEDULE=" + std::string(spec) +
                              ": expected round-robin, reverse or random:<seed> (an unsigned integer)");
}

void set_schedule(Schedule s) {
  std::lock_guard lock(g_settings_mu);
  g_schedule = s;
}

Schedule schedule() {
  std::lock_guard lock(g_settings_mu);
  if (!g_schedule) {
    const char* env = std::getenv("OOMB_EMULATED_SCHEDULE");
    g_schedule = env && *env ? parse_schedule(env) : Schedule{};
  }
  return *g_schedule;
}

uint64_t fiber_resumes() { return g_resumes.load(std::memory_order_relaxed); }

}  // namespace oomb::emulated_cuda
