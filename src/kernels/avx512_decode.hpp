// Internal to src/kernels: face-row decoders shared by the AVX-512 files (*_avx512.cpp,
// *_avx512bf16.cpp), in an anonymous namespace for the reason isa_local.hpp gives: each including
// file is compiled with its own instruction flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace meshnn::kernels {
namespace {

// bfloat8_b face row (16 codes, sign + 7-bit magnitude) -> 16 floats in column order (magnitudes,
// the block's scale not applied).
inline __m512 bfp8_row(const uint8_t* p) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i v = _mm_sign_epi8(_mm_and_si128(codes, _mm_set1_epi8(0x7F)), codes);
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

// bfloat4_b face row (8 bytes, element 2i in the low nibble of byte i; sign + 3-bit magnitude)
// -> 16 floats in column order (scale not applied).
inline __m512 bfp4_row(const uint8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i codes =
      _mm_unpacklo_epi8(_mm_and_si128(bytes, nibble), _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble));
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7);
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(lut, codes)));
}

}  // namespace
}  // namespace meshnn::kernels
