// The emulated NCCL: the part of NCCL's API that oomb calls (executor/cuda/nccl_comm.cpp), between
// ranks that are threads of one process (the unit tests) or processes of one machine (`mpirun -np
// N oomb-emulated ...`), written from NCCL's header and documentation (the research note behind
// issue 42 cites the behaviour copied here with file and line).
//
// Rendezvous. ncclGetUniqueId draws a random key; every rank of ncclCommInitRank maps the POSIX
// shared-memory segment named by that key (/dev/shm/oomb-nccl-<key>), claims its rank and waits for
// the others (init is collective and blocking, as in NCCL); once all have mapped it, rank 0 unlinks
// the name, so a finished job leaves nothing behind. The segment holds a header (each rank's phase
// counter, the failure flag and its reason) and two sets of one slot per rank (double buffering).
//
// A collective is queued on the caller's stream (stream order, asynchronous to the host, as NCCL's
// kernels are) and recorded by the emulated CUPTI as a kernel named as NCCL names its kernels
// ("ncclDevKernel_AllReduce_Sum_f32_RING_LL"). The operations of one communicator run in the order
// the host issued them, whatever stream each was queued on (NCCL serialises a communicator's
// kernels; every rank must issue the same collectives in the same order). Each runs in chunks of a
// slot: every rank writes its chunk with a description of the call into its slot, arrives at the
// chunk's phase, waits for every rank to arrive, and computes its output from all the slots.
//
// Numerics. Sums fold in the order NCCL's ring (one channel, the identity ring) adds: chunk c of an
// all-reduce (count split into nranks chunks of whole 16-byte groups) starts at rank c+1 and ends at
// rank c, x[c+1] + x[c+2] + ... + x[c]; block d of a reduce-scatter likewise starts at d+1 and ends
// at d. Each addition is rounded to the element type, so bf16 is rounded at every hop (more than two
// ranks differ from MPI's sum in fp32 rounded once); every rank gets the same bits. All-gather copies.
//
// Failure. NCCL has no timeout: a rank that never arrives hangs its peers. The emulator instead
// gives up after OOMB_EMULATED_NCCL_TIMEOUT_S (default 120 s), naming the ranks that never arrived and
// the call; calls whose ranks disagree (another collective, type or count: NCCL does not check) fail
// at once with both descriptions. The first rank to fail writes the reason into the segment and
// every peer's wait ends with it. A failed collective faults the emulated context like a failing
// grid (a sticky cudaErrorLaunchFailure whose message is the reason), sets the communicator's async
// error (ncclRemoteError) and its ncclGetLastError text; ncclCommAbort fails the peers' waits the same
// way. OOMB_EMULATED_NCCL_SLOT_BYTES sets the slot size (default 256 KiB; small values make tests
// cross chunk boundaries).
//
// Device memory. A communicator of more than one rank takes, at init, the device memory NCCL's
// connections take with every connection made at init (NCCL_RUNTIME_CONNECT=0): per channel, a
// connection to each ring neighbour with a buffer per protocol (Simple NCCL_BUFFSIZE 4 MiB, LL 512
// KiB, LL128 4,915,200 bytes; NCCL v2.30.7 src/init.cc:810-816, src/transport/p2p.cc:409) and the
// work FIFO (1 MiB, init.cc:394), through cudaMalloc, so cudaMemGetInfo and the emulated CUPTI's
// memory records see it; freed at destroy or abort. Channels: 2, or NCCL_MIN_NCHANNELS /
// NCCL_MAX_NCHANNELS where set (NCCL's own switches; the real count is the topology's).
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kIdMagic = 0x6c63636e2d626d6fULL;  // "omb-nccl"
constexpr int kMaxRanks = 256;
constexpr size_t kSlotHeaderBytes = 64;
constexpr size_t kDefaultSlotBytes = 256 * 1024;
constexpr size_t kMinSlotBytes = 1024;
constexpr double kDefaultTimeoutS = 120.0;

// What ncclGetUniqueId writes into the id's 128 bytes.
struct IdContents {
  uint64_t magic;
  uint64_t key;  // names the segment
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES);

// The segment's header; a fresh segment is all zero bytes, which is a valid initial state.
struct Header {
  std::atomic<int32_t> nranks;       // set by the first rank to arrive; the others must agree
  std::atomic<uint64_t> slot_bytes;  // likewise
  std::atomic<int32_t> claimed[kMaxRanks];
  std::atomic<uint64_t> phase[kMaxRanks];  // the last phase rank r reached
  std::atomic<int32_t> failed;             // 0, or 1 + the rank that failed first
  std::atomic<int32_t> why_ready;          // the reason below is written
  char why[1024];
};
// The header's bytes in the segment; the slots follow, 64-byte aligned.
constexpr size_t kHeaderBytes = (sizeof(Header) + 63) / 64 * 64;
static_assert(std::atomic<int32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "process-shared atomics need lock-free ones");

// What a rank writes in front of each chunk it posts: the call, so that ranks that disagree fail.
struct SlotHeader {
  int32_t kind;  // Kind
  int32_t type;  // ncclDataType_t
  uint64_t count;
  uint64_t call;  // the communicator's collective number
};
static_assert(sizeof(SlotHeader) <= kSlotHeaderBytes);

enum class Kind : int32_t { all_reduce = 1, reduce_scatter = 2, all_gather = 3 };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "AllReduce";
    case Kind::reduce_scatter: return "ReduceScatter";
    case Kind::all_gather: return "AllGather";
  }
  return "?";
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 1;  // the fp8 types
  }
}

const char* type_name(int t) {
  switch (t) {
    case ncclInt8: return "i8";
    case ncclUint8: return "u8";
    case ncclInt32: return "i32";
    case ncclUint32: return "u32";
    case ncclInt64: return "i64";
    case ncclUint64: return "u64";
    case ncclFloat16: return "f16";
    case ncclFloat32: return "f32";
    case ncclFloat64: return "f64";
    case ncclBfloat16: return "bf16";
    default: return "f8";
  }
}

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  return (end && *end == '\0' && d > 0) ? d : fallback;
}

double timeout_s() { return env_double("OOMB_EMULATED_NCCL_TIMEOUT_S", kDefaultTimeoutS); }

// NCCL's device memory for a communicator of more than one rank (the file comment).
constexpr size_t kProtocolBuffersBytes = (size_t{4} << 20) + (size_t{512} << 10) + 4915200;  // Simple, LL, LL128
constexpr size_t kWorkFifoBytes = size_t{1} << 20;
size_t device_buffer_bytes() {
  double channels = 2;
  if (std::getenv("NCCL_MIN_NCHANNELS")) channels = std::max(channels, env_double("NCCL_MIN_NCHANNELS", channels));
  if (std::getenv("NCCL_MAX_NCHANNELS")) channels = std::min(channels, env_double("NCCL_MAX_NCHANNELS", channels));
  return static_cast<size_t>(std::max(1.0, channels)) * 2 * kProtocolBuffersBytes + kWorkFifoBytes;
}

size_t slot_bytes_from_env() {
  const double v = env_double("OOMB_EMULATED_NCCL_SLOT_BYTES", static_cast<double>(kDefaultSlotBytes));
  return std::max(kMinSlotBytes, static_cast<size_t>(v) / 64 * 64);
}

std::string segment_name(uint64_t key) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "/oomb-nccl-%016llx", static_cast<unsigned long long>(key));
  return buf;
}

// bf16 as NCCL's sum does it: both operands widened, added in fp32, rounded to nearest even.
float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

template <typename T>
T add(T a, T b) {
  return a + b;
}
template <>
uint16_t add<uint16_t>(uint16_t a, uint16_t b) {  // bf16 (the only 2-byte type summed)
  return float_to_bf16(bf16_to_float(a) + bf16_to_float(b));
}

// The collective that one rank queued.
struct Call {
  Kind kind;
  ncclDataType_t type;
  const char* send;
  char* recv;
  size_t count;  // per rank (NCCL's count / recvcount / sendcount)
  uint64_t number;
};

std::mutex g_last_mu;
std::string g_last_error;  // for ncclGetLastError(nullptr)

void set_global_last(const std::string& s) {
  std::lock_guard lock(g_last_mu);
  g_last_error = s;
}

}  // namespace

// One rank's communicator: its mapping of the segment and its position in the call sequence. Shared
// by the host handle and the queued calls (a call keeps it alive after ncclCommDestroy).
struct EmulatedComm {
  int rank = 0, nranks = 1;
  uint64_t key = 0;
  void* map = nullptr;
  size_t map_bytes = 0;
  size_t slot_bytes = 0;
  Header* header = nullptr;
  void* device_buffers = nullptr;  // the connections' buffers and the work FIFO (cudaMalloc)

  // The order in which the host issued this communicator's calls, and the next one to run.
  std::mutex mu;
  std::condition_variable cv;
  uint64_t issued = 0;        // calls queued so far
  uint64_t next = 0;          // the call whose turn it is
  std::set<uint64_t> ended;   // calls that ended (ran or were skipped) ahead of `next`
  uint64_t phase = 0;         // the last phase this rank reached (touched only by the running call)
  std::atomic<int> async_error{ncclSuccess};
  std::string last_error;
  bool aborting = false;

  ~EmulatedComm() {
    if (map) munmap(map, map_bytes);
  }

  char* slot(uint64_t phase_no, int r) const {
    return static_cast<char*>(map) + kHeaderBytes +
           (static_cast<size_t>(phase_no % 2) * static_cast<size_t>(nranks) + static_cast<size_t>(r)) * slot_bytes;
  }

  void set_error(ncclResult_t rc, const std::string& message) {
    {
      std::lock_guard lock(mu);
      if (last_error.empty()) last_error = message;
    }
    int none = ncclSuccess;
    async_error.compare_exchange_strong(none, rc);
    set_global_last(message);
  }

  // Marks the job failed for every rank (the first reason stays) and returns the reason in force.
  std::string fail_all(const std::string& reason) {
    int32_t none = 0;
    if (header->failed.compare_exchange_strong(none, rank + 1)) {
      std::snprintf(header->why, sizeof header->why, "%s", reason.c_str());
      header->why_ready.store(1, std::memory_order_release);
      return reason;
    }
    return failure_reason();
  }
  std::string failure_reason() const {
    for (int i = 0; i < 1000 && !header->why_ready.load(std::memory_order_acquire); ++i)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    return std::string(header->why, strnlen(header->why, sizeof header->why));
  }

  // This rank reaches phase p; waits until every rank has, the job failed or the timeout passed.
  // "" on success, else the reason.
  std::string arrive_and_wait(uint64_t p, const std::string& what) {
    header->phase[rank].store(p, std::memory_order_release);
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s());
    for (int spin = 0;; ++spin) {
      if (header->failed.load(std::memory_order_acquire) != 0) return failure_reason();
      bool all = true;
      for (int q = 0; q < nranks && all; ++q) all = header->phase[q].load(std::memory_order_acquire) >= p;
      if (all) return "";
      if (spin < 200) {
        std::this_thread::yield();
        continue;
      }
      if (Clock::now() > deadline) {
        std::string missing;
        for (int q = 0; q < nranks; ++q)
          if (header->phase[q].load(std::memory_order_acquire) < p)
            missing += (missing.empty() ? "" : ", ") + std::to_string(q);
        char buf[160];
        std::snprintf(buf, sizeof buf, ": rank %d of %d waited %g s (OOMB_EMULATED_NCCL_TIMEOUT_S) for rank(s) ",
                      rank, nranks, timeout_s());
        return fail_all("emulated NCCL: " + what + buf + missing + ", which never arrived");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(spin < 2000 ? 20 : 200));
    }
  }
};

struct ncclComm {
  std::shared_ptr<EmulatedComm> state;
};

namespace {

std::mutex g_live_mu;
std::set<const ncclComm*> g_live;  // communicators not yet destroyed or aborted

bool live(const ncclComm* c) {
  std::lock_guard lock(g_live_mu);
  return c && g_live.count(c) != 0;
}

ncclResult_t invalid(ncclComm* c, const std::string& message) {
  if (c && live(c)) {
    std::lock_guard lock(c->state->mu);
    c->state->last_error = message;
  }
  set_global_last(message);
  return ncclInvalidArgument;
}

std::string describe(const SlotHeader& h, int rank) {
  return "rank " + std::to_string(rank) + " called " + kind_name(static_cast<Kind>(h.kind)) + " #" +
         std::to_string(h.call) + " of " + std::to_string(h.count) + " " + type_name(h.type);
}

// Runs one call on the stream's thread, chunk by chunk; "" on success, else the reason.
std::string run_call(EmulatedComm& s, const Call& c) {
  // NCCL's kernels read and write device memory: another pointer faults, as on a GPU.
  if (!oomb::emulated_cuda::device_accessible(c.send) || !oomb::emulated_cuda::device_accessible(c.recv))
    return s.fail_all(std::string("emulated NCCL: ") + kind_name(c.kind) + " #" + std::to_string(c.number) + " on rank " +
                      std::to_string(s.rank) + " was given a buffer that is not device memory");
  const size_t es = type_bytes(c.type);
  const int n = s.nranks;
  const size_t data_bytes = s.slot_bytes - kSlotHeaderBytes;
  // Elements of each rank's share per chunk: a reduce-scatter posts one piece of every block.
  const size_t per_chunk =
      std::max<size_t>(1, c.kind == Kind::reduce_scatter ? data_bytes / (es * static_cast<size_t>(n)) : data_bytes / es);
  // The all-reduce's ring chunks: count split into n chunks of whole 16-byte groups.
  const size_t group = std::max<size_t>(1, 16 / es);
  const size_t share = (c.count + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
  const size_t ring_chunk = (share + group - 1) / group * group;
  const std::string what = std::string(kind_name(c.kind)) + " #" + std::to_string(c.number) + " (" +
                           std::to_string(c.count) + " " + type_name(c.type) + ")";
  const SlotHeader mine{static_cast<int32_t>(c.kind), static_cast<int32_t>(c.type), c.count, c.number};
  for (size_t e0 = 0; e0 < c.count; e0 += per_chunk) {
    const size_t e1 = std::min(c.count, e0 + per_chunk), m = e1 - e0;
    const uint64_t p = ++s.phase;
    char* own = s.slot(p, s.rank);
    std::memcpy(own, &mine, sizeof mine);
    char* data = own + kSlotHeaderBytes;
    if (c.kind == Kind::reduce_scatter) {
      for (int b = 0; b < n; ++b)
        std::memcpy(data + static_cast<size_t>(b) * m * es, c.send + (static_cast<size_t>(b) * c.count + e0) * es, m * es);
    } else {
      std::memcpy(data, c.send + e0 * es, m * es);
    }
    if (std::string why = s.arrive_and_wait(p, what); !why.empty()) return why;
    for (int q = 0; q < n; ++q) {
      SlotHeader theirs;
      std::memcpy(&theirs, s.slot(p, q), sizeof theirs);
      if (std::memcmp(&theirs, &mine, sizeof mine) != 0)
        return s.fail_all("emulated NCCL: the ranks disagree (NCCL does not check; the job would hang or corrupt): " +
                          describe(mine, s.rank) + ", " + describe(theirs, q));
    }
    auto in = [&](int q, size_t piece) { return s.slot(p, q) + kSlotHeaderBytes + piece * m * es; };
    auto fold = [&](auto tag, int start, size_t piece, size_t i, char* out) {
      using T = decltype(tag);
      T acc;
      std::memcpy(&acc, in(start % n, piece) + i * es, es);
      for (int j = 1; j < n; ++j) {
        T x;
        std::memcpy(&x, in((start + j) % n, piece) + i * es, es);
        acc = add<T>(acc, x);
      }
      std::memcpy(out, &acc, es);
    };
    auto reduce = [&](int start, size_t piece, size_t i, char* out) {
      switch (c.type) {
        case ncclFloat32: fold(float{}, start, piece, i, out); break;
        case ncclFloat64: fold(double{}, start, piece, i, out); break;
        default: fold(uint16_t{}, start, piece, i, out); break;  // bf16 (checked at the call)
      }
    };
    switch (c.kind) {
      case Kind::all_reduce:
        for (size_t i = 0; i < m; ++i) {
          const int ring = static_cast<int>(std::min<size_t>((e0 + i) / ring_chunk, static_cast<size_t>(n - 1)));
          reduce(ring + 1, 0, i, c.recv + (e0 + i) * es);
        }
        break;
      case Kind::reduce_scatter:
        for (size_t i = 0; i < m; ++i) reduce(s.rank + 1, static_cast<size_t>(s.rank), i, c.recv + (e0 + i) * es);
        break;
      case Kind::all_gather:
        for (int q = 0; q < n; ++q)
          std::memcpy(c.recv + (static_cast<size_t>(q) * c.count + e0) * es, in(q, 0), m * es);
        break;
    }
  }
  return "";
}

// Queues a call on `stream`; it runs after the communicator's earlier calls.
ncclResult_t enqueue(ncclComm* comm, Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
                     ncclRedOp_t op, cudaStream_t stream) {
  if (!live(comm)) return invalid(nullptr, std::string("emulated NCCL: ") + kind_name(kind) +
                                               " on a communicator that is null, destroyed or aborted");
  const std::shared_ptr<EmulatedComm> s = comm->state;
  if (type < 0 || type >= ncclNumTypes) return invalid(comm, "emulated NCCL: invalid data type " + std::to_string(type));
  if (kind != Kind::all_gather) {
    if (op != ncclSum)
      return invalid(comm, std::string("emulated NCCL: ") + kind_name(kind) + " supports ncclSum only (op " +
                               std::to_string(op) + ")");
    if (type != ncclFloat32 && type != ncclFloat64 && type != ncclBfloat16)
      return invalid(comm, std::string("emulated NCCL: ") + kind_name(kind) + " sums f32, f64 and bf16, not " +
                               type_name(type));
  }
  if (count == 0) return ncclSuccess;  // NCCL discards empty collectives
  if (!send || !recv) return invalid(comm, std::string("emulated NCCL: ") + kind_name(kind) + " with a null buffer");
  uint64_t number = 0;
  {
    std::lock_guard lock(s->mu);
    number = s->issued++;
  }
  Call c{kind, type, static_cast<const char*>(send), static_cast<char*>(recv), count, number};
  // Ends the call's turn when the queued work is destroyed: after it ran, or when the stream skipped
  // it (a faulted context), so that later calls on other streams still get theirs.
  struct Turn {
    std::shared_ptr<EmulatedComm> s;
    uint64_t number;
    ~Turn() {
      std::lock_guard lock(s->mu);
      s->ended.insert(number);
      while (s->ended.count(s->next)) s->ended.erase(s->next++);
      s->cv.notify_all();
    }
  };
  const std::shared_ptr<Turn> turn(new Turn{s, number});  // in place: a copy's destructor would end the turn
  char name[96];
  std::snprintf(name, sizeof name, "ncclDevKernel_%s_%s%s_RING_LL", kind_name(kind), kind == Kind::all_gather ? "" : "Sum_",
                type_name(type));
  const cudaError_t e = oomb::emulated_cuda::submit_library_kernel(name, stream, [turn, c]() -> cudaError_t {
    EmulatedComm& st = *turn->s;
    {
      std::unique_lock lock(st.mu);
      st.cv.wait(lock, [&] { return st.next == c.number; });
    }
    const std::string why = run_call(st, c);
    if (why.empty()) return cudaSuccess;
    st.set_error(ncclRemoteError, why);
    oomb::emulated_cuda::report_launch_failure(why);
    return cudaErrorLaunchFailure;
  });
  if (e != cudaSuccess) {
    s->set_error(ncclUnhandledCudaError, std::string("emulated NCCL: queueing ") + kind_name(kind) +
                                             " failed: " + cudaGetErrorString(e));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// Waits until every queued call of the communicator has run or been skipped.
void drain(EmulatedComm& s) {
  std::unique_lock lock(s.mu);
  s.cv.wait(lock, [&] { return s.next == s.issued; });
}

ncclResult_t release(ncclComm* comm, bool abort) {
  if (!comm) return ncclSuccess;
  {
    std::lock_guard lock(g_live_mu);
    if (!g_live.erase(comm)) return invalid(nullptr, "emulated NCCL: a communicator destroyed twice, or never made");
  }
  if (abort) {
    comm->state->fail_all("emulated NCCL: rank " + std::to_string(comm->state->rank) + " aborted the communicator");
  }
  drain(*comm->state);
  if (comm->state->device_buffers) cudaFree(comm->state->device_buffers);
  comm->state->device_buffers = nullptr;
  delete comm;
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return invalid(nullptr, "emulated NCCL: ncclGetUniqueId with a null id");
  std::memset(id, 0, sizeof *id);
  std::random_device rd;
  const uint64_t key = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                       (static_cast<uint64_t>(getpid()) << 16) ^
                       static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  const IdContents c{kIdMagic, key};
  std::memcpy(id->internal, &c, sizeof c);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out) return invalid(nullptr, "emulated NCCL: ncclCommInitRank with a null communicator pointer");
  *out = nullptr;
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks)
    return invalid(nullptr, "emulated NCCL: ncclCommInitRank of rank " + std::to_string(rank) + " of " +
                                std::to_string(nranks) + " (ranks 0..nranks-1, at most " + std::to_string(kMaxRanks) + ")");
  IdContents c;
  std::memcpy(&c, id.internal, sizeof c);
  if (c.magic != kIdMagic) return invalid(nullptr, "emulated NCCL: the unique id was not made by ncclGetUniqueId");
  auto s = std::make_shared<EmulatedComm>();
  s->rank = rank;
  s->nranks = nranks;
  s->key = c.key;
  s->slot_bytes = slot_bytes_from_env();
  s->map_bytes = kHeaderBytes + 2 * static_cast<size_t>(nranks) * s->slot_bytes;
  const std::string name = segment_name(c.key);
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) {
    set_global_last("emulated NCCL: shm_open " + name + ": " + std::strerror(errno));
    return ncclSystemError;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || (static_cast<size_t>(st.st_size) < s->map_bytes &&
                              ftruncate(fd, static_cast<off_t>(s->map_bytes)) != 0)) {
    set_global_last("emulated NCCL: sizing " + name + ": " + std::strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  s->map = mmap(nullptr, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (s->map == MAP_FAILED) {
    s->map = nullptr;
    set_global_last("emulated NCCL: mapping " + name + ": " + std::strerror(errno));
    return ncclSystemError;
  }
  s->header = static_cast<Header*>(s->map);
  Header& h = *s->header;
  int32_t zero = 0;
  h.nranks.compare_exchange_strong(zero, nranks);
  uint64_t no_slot = 0;
  h.slot_bytes.compare_exchange_strong(no_slot, s->slot_bytes);
  std::string why;
  if (h.nranks.load() != nranks)
    why = "emulated NCCL: ranks disagree on the communicator's size: " + std::to_string(h.nranks.load()) + " and " +
          std::to_string(nranks);
  else if (h.slot_bytes.load() != s->slot_bytes)
    why = "emulated NCCL: ranks disagree on OOMB_EMULATED_NCCL_SLOT_BYTES";
  int32_t unclaimed = 0;
  if (why.empty() && !h.claimed[rank].compare_exchange_strong(unclaimed, 1))
    why = "emulated NCCL: rank " + std::to_string(rank) + " joined the communicator twice";
  if (why.empty()) why = s->arrive_and_wait(++s->phase, "ncclCommInitRank");
  else why = s->fail_all(why);
  if (rank == 0 || !why.empty()) shm_unlink(name.c_str());  // every rank mapped it (or the job failed)
  if (!why.empty()) {
    std::fprintf(stderr, "oomb: %s\n", why.c_str());
    set_global_last(why);
    return ncclRemoteError;
  }
  if (nranks > 1 && cudaMalloc(&s->device_buffers, device_buffer_bytes()) != cudaSuccess) {
    s->device_buffers = nullptr;
    set_global_last("emulated NCCL: the device has no room for the communicator's buffers (" +
                    std::to_string(device_buffer_bytes()) + " bytes)");
    return ncclUnhandledCudaError;
  }
  auto* comm = new ncclComm{std::move(s)};
  {
    std::lock_guard lock(g_live_mu);
    g_live.insert(comm);
  }
  *out = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return release(comm, false); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return release(comm, true); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!live(comm) || !count) return ncclInvalidArgument;
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!live(comm) || !rank) return ncclInvalidArgument;
  *rank = comm->state->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!live(comm) || !error) return ncclInvalidArgument;
  *error = static_cast<ncclResult_t>(comm->state->async_error.load());
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "success";
    case ncclUnhandledCudaError: return "a CUDA call failed";
    case ncclSystemError: return "a system call failed";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "a peer failed, left or never arrived";
    case ncclInProgress: return "in progress";
    default: return "unknown result";
  }
}

// The reason behind the last failure (of this communicator; of any, for null).
const char* ncclGetLastError(ncclComm_t comm) {
  static thread_local std::string text;
  if (comm && live(comm)) {
    std::lock_guard lock(comm->state->mu);
    text = comm->state->last_error;
  } else {
    std::lock_guard lock(g_last_mu);
    text = g_last_error;
  }
  return text.c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, stream);
}

}  // extern "C"
