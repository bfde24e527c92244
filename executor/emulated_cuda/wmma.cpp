// nvcuda::wmma's collectives on the emulated device (wmma.h), and the element placements.
#include "executor/emulated_cuda/wmma.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

#include "executor/emulated_cuda/grid.h"

namespace oomb::emulated_cuda {

namespace {

constexpr int kLanes = 32;
constexpr int kElements = 8;
constexpr int kCells = 256;  // a 16 x 16 matrix
constexpr unsigned kFullMask = 0xffffffffu;

// Where every element of every fragment kind lives: position[kind][lane][i] = row * 16 + column,
// and its inverse.
struct Placement {
  uint8_t position[kFragmentKinds][kLanes][kElements];
  uint8_t owner_lane[kFragmentKinds][kCells];
  uint8_t owner_element[kFragmentKinds][kCells];
};

// The PTX ISA's layout for mma.m16n8k16 with .bf16 multiplicands and .f32 accumulators (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type", 9.7.14.5.8 in ISA 8.x / 9.0), with
// groupID g = laneid >> 2 and threadID_in_group t = laneid % 4. A 16 x 16 B or accumulator is two
// m16n8 fragments side by side, elements 4..7 being the second (columns n + 8).
int ptx_position(FragmentKind kind, unsigned lane, int i) {
  const int g = static_cast<int>(lane >> 2), t = static_cast<int>(lane & 3);
  switch (kind) {
    case FragmentKind::b_row:
    case FragmentKind::b_col: {
      // b0, b1: k = 2t + {0, 1}; b2, b3: k = 2t + 8 + {0, 1}; n = g.
      const int k = 2 * t + (i & 1) + 8 * ((i >> 1) & 1), n = g + 8 * (i >> 2);
      return k * 16 + n;
    }
    case FragmentKind::a_row:
    case FragmentKind::a_col:
    case FragmentKind::accumulator:
      // A: a0, a1 = (g, 2t + {0, 1}), a2, a3 = (g + 8, 2t + {0, 1}), a4..a7 the same at columns + 8.
      // C: c0, c1 = (g, 2t + {0, 1}), c2, c3 = (g + 8, 2t + {0, 1}); c4..c7: the second half.
      return (g + 8 * ((i >> 1) & 1)) * 16 + 2 * t + (i & 1) + 8 * (i >> 2);
  }
  return 0;
}

struct Spec {
  bool random = false;
  uint64_t seed = 0;
};

Spec parse(std::string_view spec) {
  if (spec == "ptx") return {};
  constexpr std::string_view kRandom = "random:";
  if (spec.starts_with(kRandom)) {
    const std::string_view digits = spec.substr(kRandom.size());
    uint64_t seed = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), seed);
    if (ec == std::errc() && end == digits.data() + digits.size() && !digits.empty()) return {true, seed};
  }
  throw std::invalid_argument("OOMB_EMULATED_WMMA=" + std::string(spec) +
                              ": expected ptx or random:<seed> (an unsigned integer)");
}

std::unique_ptr<Placement> build(const Spec& spec) {
  auto p = std::make_unique<Placement>();
  for (int k = 0; k < kFragmentKinds; ++k) {
    const auto kind = static_cast<FragmentKind>(k);
    std::array<uint8_t, kCells> cells;
    if (spec.random) {
      std::iota(cells.begin(), cells.end(), 0);
      std::mt19937_64 rng(spec.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(k));
      std::shuffle(cells.begin(), cells.end(), rng);
    } else {
      for (int slot = 0; slot < kCells; ++slot)
        cells[slot] = static_cast<uint8_t>(ptx_position(kind, static_cast<unsigned>(slot / kElements), slot % kElements));
    }
    std::array<bool, kCells> seen{};
    for (int slot = 0; slot < kCells; ++slot) {
      const uint8_t cell = cells[slot];
      if (seen[cell]) throw std::logic_error("wmma placement: a cell held twice");
      seen[cell] = true;
      p->position[k][slot / kElements][slot % kElements] = cell;
      p->owner_lane[k][cell] = static_cast<uint8_t>(slot / kElements);
      p->owner_element[k][cell] = static_cast<uint8_t>(slot % kElements);
    }
  }
  return p;
}

std::mutex g_mu;
std::map<std::pair<bool, uint64_t>, std::unique_ptr<Placement>> g_built;  // kept: kernels may hold one
std::atomic<const Placement*> g_current{nullptr};

void install(std::string_view spec) {
  const Spec s = parse(spec);
  std::unique_ptr<Placement>& slot = g_built[{s.random, s.seed}];
  if (!slot) slot = build(s);
  g_current.store(slot.get(), std::memory_order_release);
}

const Placement& placement() {
  if (const Placement* p = g_current.load(std::memory_order_acquire)) return *p;
  std::lock_guard lock(g_mu);
  if (!g_current.load(std::memory_order_relaxed)) {
    const char* env = std::getenv("OOMB_EMULATED_WMMA");
    install(env && *env ? env : "ptx");
  }
  return *g_current.load(std::memory_order_relaxed);
}

size_t element_bytes(FragmentKind kind) { return kind == FragmentKind::accumulator ? sizeof(float) : 2; }

std::string pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// What every lane passes to a load or a store; the Guide requires the same in all lanes.
struct MemoryArgs {
  const void* p;
  unsigned ldm;
  uint8_t col_major;
  uint8_t kind;
};

// The Guide's rules for mptr and ldm, then the warp's rendezvous; returns this lane.
unsigned memory_collective(const char* op, Collective what, FragmentKind kind, const void* p, unsigned ldm,
                           bool col_major) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    fail(cudaErrorMisalignedAddress,
         std::string(op) + ": pointer " + pointer_text(p) + " is not 256-bit (32-byte) aligned");
  if (ldm * element_bytes(kind) % 16 != 0)
    fail(cudaErrorMisalignedAddress, std::string(op) + ": ldm " + std::to_string(ldm) + " is not a multiple of " +
                                         std::to_string(16 / element_bytes(kind)) + " elements (16 bytes)");
  const MemoryArgs mine{p, ldm, static_cast<uint8_t>(col_major), static_cast<uint8_t>(kind)};
  const WarpExchange ex = warp_exchange(kFullMask, what, op, &mine, sizeof mine);
  MemoryArgs first;
  std::memcpy(&first, ex.contribution(0), sizeof first);
  if (first.p != mine.p || first.ldm != mine.ldm || first.col_major != mine.col_major || first.kind != mine.kind)
    fail(cudaErrorLaunchFailure, std::string(op) + ": lane " + std::to_string(ex.lane()) + " passes pointer " +
                                     pointer_text(p) + ", ldm " + std::to_string(ldm) + " but lane 0 passes " +
                                     pointer_text(first.p) + ", ldm " + std::to_string(first.ldm) +
                                     " (or another layout or fragment type): every lane must pass the same");
  return ex.lane();
}

size_t memory_offset(uint8_t cell, unsigned ldm, bool col_major) {
  const unsigned r = cell >> 4, c = cell & 15u;
  return col_major ? size_t{c} * ldm + r : size_t{r} * ldm + c;
}

struct MmaArgs {
  uint16_t a[kElements];
  uint16_t b[kElements];
  uint8_t a_kind, b_kind;
};

float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace

void wmma_load(FragmentKind kind, void* x, const void* p, unsigned ldm, bool col_major) {
  const unsigned lane = memory_collective("wmma::load_matrix_sync", Collective::wmma_load, kind, p, ldm, col_major);
  const Placement& pl = placement();
  const size_t es = element_bytes(kind);
  const int k = static_cast<int>(kind);
  for (int i = 0; i < kElements; ++i)
    std::memcpy(static_cast<std::byte*>(x) + i * es,
                static_cast<const std::byte*>(p) + memory_offset(pl.position[k][lane][i], ldm, col_major) * es, es);
}

void wmma_store(void* p, const float* x, unsigned ldm, bool col_major) {
  const FragmentKind kind = FragmentKind::accumulator;
  const unsigned lane = memory_collective("wmma::store_matrix_sync", Collective::wmma_store, kind, p, ldm, col_major);
  const Placement& pl = placement();
  const int k = static_cast<int>(kind);
  for (int i = 0; i < kElements; ++i)
    std::memcpy(static_cast<float*>(p) + memory_offset(pl.position[k][lane][i], ldm, col_major), x + i, sizeof(float));
}

void wmma_mma(float* d, FragmentKind a_kind, const __nv_bfloat16* a, FragmentKind b_kind, const __nv_bfloat16* b,
              const float* c) {
  MmaArgs mine;
  std::memcpy(mine.a, a, sizeof mine.a);
  std::memcpy(mine.b, b, sizeof mine.b);
  mine.a_kind = static_cast<uint8_t>(a_kind);
  mine.b_kind = static_cast<uint8_t>(b_kind);
  // The operands are copied at the rendezvous: a lane that runs ahead may overwrite its fragments.
  const WarpExchange ex = warp_exchange(kFullMask, Collective::wmma_mma, "wmma::mma_sync", &mine, sizeof mine);
  MmaArgs first;
  std::memcpy(&first, ex.contribution(0), sizeof first);
  if (first.a_kind != mine.a_kind || first.b_kind != mine.b_kind)
    fail(cudaErrorLaunchFailure, "wmma::mma_sync: lane " + std::to_string(ex.lane()) +
                                     " passes fragments of another layout than lane 0");
  const Placement& pl = placement();
  const int ak = mine.a_kind, bk = mine.b_kind, ck = static_cast<int>(FragmentKind::accumulator);
  const std::byte* lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = ex.contribution(static_cast<unsigned>(l));
  const auto element = [&](int kind, unsigned cell, size_t operand) {
    uint16_t bits;
    std::memcpy(&bits, lanes[pl.owner_lane[kind][cell]] + operand + 2 * pl.owner_element[kind][cell], 2);
    return bf16_value(bits);
  };
  // The rows of A and columns of B this lane's elements need, each gathered once.
  float a_rows[16][16], b_cols[16][16];
  uint32_t have_row = 0, have_col = 0;
  float out[kElements];
  for (int i = 0; i < kElements; ++i) {
    const unsigned cell = pl.position[ck][ex.lane()][i], r = cell >> 4, col = cell & 15u;
    if ((have_row >> r & 1) == 0) {
      for (unsigned k = 0; k < 16; ++k) a_rows[r][k] = element(ak, r * 16 + k, offsetof(MmaArgs, a));
      have_row |= 1u << r;
    }
    if ((have_col >> col & 1) == 0) {
      for (unsigned k = 0; k < 16; ++k) b_cols[col][k] = element(bk, k * 16 + col, offsetof(MmaArgs, b));
      have_col |= 1u << col;
    }
    // The product of two bf16 values is exact in fp32, so every step is one fp32 rounding (and an
    // fma contraction would round the same).
    float s = c[i];
    for (unsigned k = 0; k < 16; ++k) s += a_rows[r][k] * b_cols[col][k];
    out[i] = s;
  }
  std::memcpy(d, out, sizeof out);  // d may be c
}

void set_wmma_placement(std::string_view spec) {
  std::lock_guard lock(g_mu);
  install(spec);
}

int wmma_position(FragmentKind kind, unsigned lane, int i) {
  return placement().position[static_cast<int>(kind)][lane][i];
}

}  // namespace oomb::emulated_cuda
