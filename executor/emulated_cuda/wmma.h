#pragma once
// nvcuda::wmma on the emulated device: what executor/cuda/attention_tc.cu uses, written from the
// CUDA C++ Programming Guide's "Warp Matrix Functions". bf16 m16n16k16 operands (matrix_a and
// matrix_b, row- or column-major) and fp32 accumulators, 8 elements per lane each.
//
// load_matrix_sync, store_matrix_sync and mma_sync are warp collectives (every lane of the warp,
// through a rendezvous); fill_fragment is per lane. Which (row, column) each lane's x[i] holds is
// unspecified by CUDA; here it comes from OOMB_EMULATED_WMMA (wmma.cpp): `ptx` (default) places
// elements as the PTX ISA's mma.m16n8k16 does, `random:<seed>` by a seeded bijection per fragment
// kind, so that code which assumed a placement fails. The Guide's rules are checked, a violation
// failing the launch: the memory pointer 256-bit (32-byte) aligned, ldm a multiple of 8 bf16 or
// 4 float elements (16 bytes), and every lane passing the same pointer, ldm and layout.
#include <cuda_bf16.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

namespace oomb::emulated_cuda {

// The fragment kinds, each with its own placement.
enum class FragmentKind : uint8_t { a_row, a_col, b_row, b_col, accumulator };
inline constexpr int kFragmentKinds = 5;

// The warp collectives behind nvcuda::wmma (wmma.cpp). x: the fragment's 8 elements (bf16 for
// operands, float for accumulators); col_major: how the matrix is laid out in memory.
void wmma_load(FragmentKind kind, void* x, const void* p, unsigned ldm, bool col_major);
void wmma_store(void* p, const float* x, unsigned ldm, bool col_major);
// d = a * b + c for the warp (fp32: each element c + sum over k ascending of a * b).
void wmma_mma(float* d, FragmentKind a_kind, const __nv_bfloat16* a, FragmentKind b_kind, const __nv_bfloat16* b,
              const float* c);

// The element placement: "ptx" or "random:<seed>" (std::invalid_argument otherwise). It starts from
// OOMB_EMULATED_WMMA; change it only while no kernel runs.
void set_wmma_placement(std::string_view spec);
// (row, column) of element i of `lane`'s fragment of this kind, as row * 16 + column (for
// matrix_b: k * 16 + n).
int wmma_position(FragmentKind kind, unsigned lane, int i);

}  // namespace oomb::emulated_cuda

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class T, int Size>
struct fragment_storage {
  using element_type = T;
  using storage_element_type = T;
  static constexpr int num_elements = Size;
  T x[Size];
};

// Only the shapes and types below exist on the emulated device.
template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment;

template <class Use, class Layout>
class fragment<Use, 16, 16, 16, __nv_bfloat16, Layout> : public fragment_storage<__nv_bfloat16, 8> {
  static_assert(std::is_same_v<Use, matrix_a> || std::is_same_v<Use, matrix_b>, "bf16 fragments are operands");
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>, "operands have a layout");
};

template <>
class fragment<accumulator, 16, 16, 16, float, void> : public fragment_storage<float, 8> {};

namespace detail {
template <class Use, class Layout>
constexpr oomb::emulated_cuda::FragmentKind kind() {
  using oomb::emulated_cuda::FragmentKind;
  if constexpr (std::is_same_v<Use, matrix_a>)
    return std::is_same_v<Layout, row_major> ? FragmentKind::a_row : FragmentKind::a_col;
  else
    return std::is_same_v<Layout, row_major> ? FragmentKind::b_row : FragmentKind::b_col;
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, const std::type_identity_t<T>& v) {
  for (T& e : f.x) e = v;
}

template <class Use, class Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f, const __nv_bfloat16* p, unsigned ldm) {
  oomb::emulated_cuda::wmma_load(detail::kind<Use, Layout>(), f.x, p, ldm, std::is_same_v<Layout, col_major>);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ldm,
                             layout_t layout) {
  oomb::emulated_cuda::wmma_load(oomb::emulated_cuda::FragmentKind::accumulator, f.x, p, ldm,
                                 layout == mem_col_major);
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  oomb::emulated_cuda::wmma_store(p, f.x, ldm, layout == mem_col_major);
}

template <class LayoutA, class LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  oomb::emulated_cuda::wmma_mma(d.x, detail::kind<matrix_a, LayoutA>(), a.x, detail::kind<matrix_b, LayoutB>(), b.x,
                                c.x);
}

}  // namespace nvcuda::wmma
