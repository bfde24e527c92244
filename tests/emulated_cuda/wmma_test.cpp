// nvcuda::wmma on the emulated device (wmma.h, wmma.cpp): every operation against a plain loop,
// under the PTX placement and seeded random ones; the PTX placement is the ISA's; the Guide's
// alignment and ldm rules are reported as launch failures.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "executor/emulated_cuda/launch.h"
#include "executor/emulated_cuda/runtime.h"
#include "executor/emulated_cuda/wmma.h"

namespace oomb::emulated_cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

void restore_placement() {
  const char* env = std::getenv("OOMB_EMULATED_WMMA");
  set_wmma_placement(env && *env ? env : "ptx");
}

// The parameter: the placement ("ptx", "random:<seed>").
class EmulatedWmma : public ::testing::TestWithParam<const char*> {
 public:
  void SetUp() override { set_wmma_placement(GetParam()); }
  void TearDown() override {
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    restore_placement();
  }
  template <class T>
  T* device(const std::vector<T>& host) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    return static_cast<T*>(p);
  }
  template <class T>
  std::vector<T> host(const T* p, size_t n) {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

INSTANTIATE_TEST_SUITE_P(Placements, EmulatedWmma, ::testing::Values("ptx", "random:7", "random:12345"),
                         [](const auto& p) {
                           std::string name = p.param;
                           for (char& c : name)
                             if (c == ':') c = '_';
                           return name;
                         });

// (row, column) of a cell as wmma_position gives it.
std::pair<int, int> cell(FragmentKind kind, unsigned lane, int i) {
  const int p = wmma_position(kind, lane, i);
  return {p / 16, p % 16};
}

TEST(EmulatedWmmaPtx, PlacementIsThePtxIsasForMmaM16n8k16) {
  set_wmma_placement("ptx");
  using P = std::pair<int, int>;
  // A: lane 0 and lane 6 (groupID 1, threadID_in_group 2).
  const P a0[8] = {{0, 0}, {0, 1}, {8, 0}, {8, 1}, {0, 8}, {0, 9}, {8, 8}, {8, 9}};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(cell(FragmentKind::a_row, 0, i), a0[i]) << i;
  EXPECT_EQ(cell(FragmentKind::a_col, 6, 0), P(1, 4));
  EXPECT_EQ(cell(FragmentKind::a_col, 6, 3), P(9, 5));
  EXPECT_EQ(cell(FragmentKind::a_row, 6, 4), P(1, 12));
  // B as (k, n): b0..b3 of the first n8 half at n = groupID, b4..b7 of the second.
  const P b6[8] = {{4, 1}, {5, 1}, {12, 1}, {13, 1}, {4, 9}, {5, 9}, {12, 9}, {13, 9}};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(cell(FragmentKind::b_col, 6, i), b6[i]) << i;
  // Accumulator: lane 31 (groupID 7, threadID_in_group 3).
  const P c31[8] = {{7, 6}, {7, 7}, {15, 6}, {15, 7}, {7, 14}, {7, 15}, {15, 14}, {15, 15}};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(cell(FragmentKind::accumulator, 31, i), c31[i]) << i;
  restore_placement();
}

TEST(EmulatedWmmaPtx, RejectsUnknownPlacements) {
  for (const char* bad : {"", "PTX", "random", "random:", "random:x7"})
    EXPECT_THROW(set_wmma_placement(bad), std::invalid_argument) << bad;
}

TEST_P(EmulatedWmma, EveryCellInExactlyOneLane) {
  for (int k = 0; k < kFragmentKinds; ++k) {
    std::vector<int> held(256, 0);
    for (unsigned lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 8; ++i) ++held[wmma_position(static_cast<FragmentKind>(k), lane, i)];
    EXPECT_EQ(held, std::vector<int>(256, 1)) << "kind " << k;
  }
}

// Each lane's elements after a load of a matrix that holds its own coordinates (16 r + c).
template <class Use, class Layout>
__global__ void operand_load_kernel(const bf16* m, unsigned ldm, float* out) {
  wmma::fragment<Use, 16, 16, 16, bf16, Layout> f;
  wmma::load_matrix_sync(f, m, ldm);
  for (int i = 0; i < f.num_elements; ++i) out[threadIdx.x * 8 + i] = __bfloat162float(f.x[i]);
}

__global__ void accumulator_load_kernel(const float* m, unsigned ldm, bool col_major, float* out) {
  FragAcc f;
  wmma::load_matrix_sync(f, m, ldm, col_major ? wmma::mem_col_major : wmma::mem_row_major);
  for (int i = 0; i < FragAcc::num_elements; ++i) out[threadIdx.x * 8 + i] = f.x[i];
}

// A 16 x 16 matrix of coordinates 16 r + c stored with leading dimension ldm, rows or columns.
template <class T>
std::vector<T> coordinates(unsigned ldm, bool col_major, T pad) {
  std::vector<T> m(16 * ldm, pad);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) m[col_major ? c * ldm + r : r * ldm + c] = static_cast<T>(static_cast<float>(16 * r + c));
  return m;
}

TEST_P(EmulatedWmma, LoadsPlaceElementsAsThePlacementSays) {
  const auto check = [&](FragmentKind kind, const std::vector<float>& got) {
    for (unsigned lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 8; ++i)
        EXPECT_EQ(got[lane * 8 + i], static_cast<float>(wmma_position(kind, lane, i)))
            << static_cast<int>(kind) << " lane " << lane << " x[" << i << "]";
  };
  void* out_raw = nullptr;
  ASSERT_EQ(cudaMalloc(&out_raw, 256 * sizeof(float)), cudaSuccess);
  float* out = static_cast<float*>(out_raw);
  const bf16 pad = __float2bfloat16_rn(-1.0f);
  // matrix_a (rows, k) and matrix_b (k, n), each stored by rows (row_major) or by columns.
  const bf16* rows = device(coordinates<bf16>(24, false, pad));
  const bf16* cols = device(coordinates<bf16>(24, true, pad));
  OOMB_LAUNCH(1, 32, 0, 0, operand_load_kernel<wmma::matrix_a, wmma::row_major>)(rows, 24, out);
  check(FragmentKind::a_row, host(out, 256));
  OOMB_LAUNCH(1, 32, 0, 0, operand_load_kernel<wmma::matrix_a, wmma::col_major>)(cols, 24, out);
  check(FragmentKind::a_col, host(out, 256));
  OOMB_LAUNCH(1, 32, 0, 0, operand_load_kernel<wmma::matrix_b, wmma::row_major>)(rows, 24, out);
  check(FragmentKind::b_row, host(out, 256));
  OOMB_LAUNCH(1, 32, 0, 0, operand_load_kernel<wmma::matrix_b, wmma::col_major>)(cols, 24, out);
  check(FragmentKind::b_col, host(out, 256));
  for (const bool col_major : {false, true}) {
    const float* m = device(coordinates<float>(20, col_major, -1.0f));
    OOMB_LAUNCH(1, 32, 0, 0, accumulator_load_kernel)(m, 20, col_major, out);
    check(FragmentKind::accumulator, host(out, 256));
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Loaded with one layout and leading dimension, stored with another: a transposing copy.
__global__ void round_trip_kernel(const float* in, unsigned ldi, float* out, unsigned ldo) {
  FragAcc f;
  wmma::load_matrix_sync(f, in, ldi, wmma::mem_row_major);
  wmma::store_matrix_sync(out, f, ldo, wmma::mem_col_major);
}

TEST_P(EmulatedWmma, StoreWritesWhatLoadRead) {
  std::vector<float> in(16 * 20);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.25f * static_cast<float>(i);
  const float* d_in = device(in);
  float* d_out = device(std::vector<float>(16 * 24, -7.0f));
  OOMB_LAUNCH(1, 32, 0, 0, round_trip_kernel)(d_in, 20, d_out, 24);
  const std::vector<float> out = host(d_out, 16 * 24);
  for (int c = 0; c < 16; ++c)
    for (int r = 0; r < 24; ++r)  // column c of out: 16 rows, then the padding of ldo 24
      EXPECT_EQ(out[c * 24 + r], r < 16 ? in[r * 20 + c] : -7.0f) << r << "," << c;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// D = A B + C per warp (warp w: the w-th problem), stored by rows.
template <class LA, class LB>
__global__ void mma_kernel(const bf16* a, unsigned lda, const bf16* b, unsigned ldb, const float* c, float* d) {
  const unsigned w = threadIdx.x / 32;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
  FragAcc acc;
  wmma::load_matrix_sync(fa, a + w * 16 * lda, lda);
  wmma::load_matrix_sync(fb, b + w * 16 * ldb, ldb);
  wmma::load_matrix_sync(acc, c + w * 256, 16, wmma::mem_row_major);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d + w * 256, acc, 16, wmma::mem_row_major);
}

template <class LA, class LB>
void check_mma(EmulatedWmma& t, std::mt19937& rng) {
  constexpr bool a_col = std::is_same_v<LA, wmma::col_major>, b_col = std::is_same_v<LB, wmma::col_major>;
  constexpr int warps = 2;
  constexpr unsigned ld = 24;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<bf16> a(warps * 16 * ld), b(warps * 16 * ld);
  std::vector<float> c(warps * 256);
  for (bf16& x : a) x = __float2bfloat16_rn(normal(rng));
  for (bf16& x : b) x = __float2bfloat16_rn(normal(rng));
  for (float& x : c) x = normal(rng);
  float* d = t.device(std::vector<float>(warps * 256, 0.0f));
  OOMB_LAUNCH(1, 32 * warps, 0, 0, mma_kernel<LA, LB>)(t.device(a), ld, t.device(b), ld, t.device(c), d);
  const std::vector<float> got = t.host(d, warps * 256);
  for (int w = 0; w < warps; ++w)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 16; ++n) {
        float want = c[w * 256 + r * 16 + n];  // wmma.h: c + sum over k ascending, fp32
        for (int k = 0; k < 16; ++k) {
          const bf16 av = a[w * 16 * ld + (a_col ? k * ld + r : r * ld + k)];
          const bf16 bv = b[w * 16 * ld + (b_col ? n * ld + k : k * ld + n)];
          want += __bfloat162float(av) * __bfloat162float(bv);
        }
        EXPECT_EQ(got[w * 256 + r * 16 + n], want) << "A col " << a_col << " B col " << b_col << " warp " << w
                                                   << " (" << r << "," << n << ")";
      }
}

TEST_P(EmulatedWmma, MmaMatchesAPlainLoop) {
  std::mt19937 rng(2026);
  check_mma<wmma::row_major, wmma::row_major>(*this, rng);
  check_mma<wmma::row_major, wmma::col_major>(*this, rng);
  check_mma<wmma::col_major, wmma::row_major>(*this, rng);
  check_mma<wmma::col_major, wmma::col_major>(*this, rng);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

__global__ void fill_kernel(float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
  FragAcc acc;
  wmma::fill_fragment(a, __float2bfloat16_rn(1.0f));
  wmma::fill_fragment(b, __float2bfloat16_rn(0.5f));
  wmma::fill_fragment(acc, 3.0f);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
  wmma::mma_sync(acc, a, b, acc);
  wmma::store_matrix_sync(d + 256, acc, 16, wmma::mem_row_major);
}

TEST_P(EmulatedWmma, FillFragment) {
  float* d = device(std::vector<float>(512, 0.0f));
  OOMB_LAUNCH(1, 32, 0, 0, fill_kernel)(d);
  const std::vector<float> got = host(d, 512);
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 256), std::vector<float>(256, 3.0f));
  EXPECT_EQ(std::vector<float>(got.begin() + 256, got.end()), std::vector<float>(256, 11.0f));  // 3 + 16 / 2
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---------------------------------------------------------------- the Guide's rules

// which: 0 operand 16 bytes off 32-byte alignment, 1 operand ldm 12, 2 accumulator ldm 6,
// 3 lanes disagreeing on the pointer, 4 a store 16 bytes off alignment, 5 a valid load.
__global__ void violation_kernel(int which, const bf16* m, float* f) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
  FragAcc acc;
  wmma::fill_fragment(acc, 0.0f);
  if (which == 0) wmma::load_matrix_sync(a, m + 8, 16);
  if (which == 1) wmma::load_matrix_sync(a, m, 12);
  if (which == 2) wmma::load_matrix_sync(acc, f, 6, wmma::mem_row_major);
  if (which == 3) wmma::load_matrix_sync(a, m + (threadIdx.x == 9 ? 32 : 0), 16);
  if (which == 4) wmma::store_matrix_sync(f + 4, acc, 16, wmma::mem_row_major);
  if (which == 5) wmma::load_matrix_sync(a, m, 16);
}

TEST(EmulatedWmmaRules, ViolationsFailTheLaunch) {
  void *m = nullptr, *f = nullptr;
  const auto launch = [&](int which, unsigned threads) {
    EXPECT_EQ(cudaMalloc(&m, 1024 * sizeof(bf16)), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&f, 1024 * sizeof(float)), cudaSuccess);
    OOMB_LAUNCH(1, threads, 0, 0, violation_kernel)(which, static_cast<const bf16*>(m), static_cast<float*>(f));
    const cudaError_t e = cudaDeviceSynchronize();
    const std::string message = last_launch_failure();
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    return std::pair(e, message);
  };
  auto [e, message] = launch(0, 32);
  EXPECT_EQ(e, cudaErrorMisalignedAddress);
  EXPECT_NE(message.find("kernel violation_kernel block (0,0,0) thread (0,0,0): wmma::load_matrix_sync: pointer 0x"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("is not 256-bit (32-byte) aligned"), std::string::npos) << message;

  std::tie(e, message) = launch(1, 32);
  EXPECT_EQ(e, cudaErrorMisalignedAddress);
  EXPECT_NE(message.find("wmma::load_matrix_sync: ldm 12 is not a multiple of 8 elements (16 bytes)"),
            std::string::npos)
      << message;

  std::tie(e, message) = launch(2, 32);
  EXPECT_NE(message.find("wmma::load_matrix_sync: ldm 6 is not a multiple of 4 elements (16 bytes)"),
            std::string::npos)
      << message;

  std::tie(e, message) = launch(3, 32);
  EXPECT_EQ(e, cudaErrorLaunchFailure);
  EXPECT_NE(message.find("thread (9,0,0): wmma::load_matrix_sync: lane 9 passes pointer"), std::string::npos)
      << message;
  EXPECT_NE(message.find("every lane must pass the same"), std::string::npos) << message;

  std::tie(e, message) = launch(4, 32);
  EXPECT_EQ(e, cudaErrorMisalignedAddress);
  EXPECT_NE(message.find("wmma::store_matrix_sync: pointer"), std::string::npos) << message;

  // A warp of 16 threads cannot hold the fragments.
  std::tie(e, message) = launch(5, 16);
  EXPECT_NE(message.find("names lane 16 of warp 0, which does not exist"), std::string::npos) << message;
}

}  // namespace
}  // namespace oomb::emulated_cuda
