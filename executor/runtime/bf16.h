#pragma once
// bf16 <-> fp32 conversions for pages stored as bf16 (backend.h, PageDtype::bf16): plain C++, the
// one place the executor rounds to bf16 (the CPU backend's page ops and the tests use it).
//
// bf16 is the upper half of an IEEE binary32: sign, the same 8 exponent bits, 7 stored mantissa
// bits. fp32 -> bf16 rounds to nearest, ties to even, on the bit pattern: adding 0x7fff plus the
// lowest kept bit to the 32-bit pattern and truncating carries into the exponent exactly when the
// value rounds up to the next binade, so subnormals, the step from the largest subnormal to the
// smallest normal, and the step from beyond the largest finite bf16 (0x7f7f, 3.3895e38) to inf
// are all handled by the same addition. NaN is kept a NaN (quiet bit set, sign and upper payload
// kept): the addition could otherwise carry a NaN with only low payload bits into inf. bf16 ->
// fp32 is exact (a shift).
//
// The scalar conversions are also the CUDA backend's (kv_pages.cu, attention.cu, attention_tc.cu
// include this header): compiled by nvcc they are __host__ __device__ and take the bit pattern with
// __float_as_uint / __uint_as_float in device code, so a page rounded on the GPU holds the same bits
// as one rounded by the CPU backend, NaNs included. cuda_bf16.h's __float2bfloat16_rn rounds
// finite values and infinities the same way, but its software path returns the canonical 0x7fff for
// every NaN (sign and payload lost) and its sm_80 path is a cvt.rn.bf16.f32 whose NaN result PTX
// does not tie to the input's payload: it is used only for attention_tc.cu's operand rounding,
// never for what pages store.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define OOMB_BF16_HD __host__ __device__
#else
#define OOMB_BF16_HD
#endif

namespace oomb::executor {

OOMB_BF16_HD inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__) && defined(__CUDACC__)  // nvcc's device pass (the emulated device: memcpy, one definition)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

OOMB_BF16_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__) && defined(__CUDACC__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

OOMB_BF16_HD inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

OOMB_BF16_HD inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// The fp32 value nearest to f that bf16 can hold (f rounded to bf16 and back).
OOMB_BF16_HD inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// Arrays (written as plain loops for auto-vectorisation).
inline void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

inline void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

// dst[i] = bf16(float(dst[i]) + src[i]): one fp32 addition and one rounding per element.
inline void bf16_add_f32(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(bf16_to_f32(dst[i]) + src[i]);
}

// dst[i] += float(src[i]).
inline void f32_add_bf16(float* dst, const uint16_t* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += bf16_to_f32(src[i]);
}

}  // namespace oomb::executor
