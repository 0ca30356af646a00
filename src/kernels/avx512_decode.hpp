// Internal to src/kernels: what the AVX-512 files (*_avx512.cpp, *_avx512bf16.cpp) share: face-row
// and block-scale decoders, and the small-M walk over B's tiles. In an anonymous namespace for the
// reason isa_local.hpp gives: each including file is compiled with its own instruction flags.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "isa_local.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

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

// One face's block scales, one lane per face row: 2^(E-127-(W-1)) built from the exponent bits;
// rows whose scale would be denormal (E < W) take the exact value from the table.
template <DataType D>
inline __m512 face_scales(const uint8_t* face_exps, const float* scales) {
  constexpr int kW = D == DataType::BFLOAT4_B ? 3 : 7;
  const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(face_exps)));
  const __m512i biased = _mm512_sub_epi32(e, _mm512_set1_epi32(kW - 1));
  __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_max_epi32(biased, _mm512_setzero_si512()), 23));
  const __mmask16 tiny = _mm512_cmplt_epi32_mask(biased, _mm512_set1_epi32(1));
  if (tiny) scale = _mm512_mask_i32gather_ps(scale, tiny, e, scales, 4);
  return scale;
}

// How far ahead of the tile being decoded the ROWS_IN_FLIGHT walk prefetches the weights (on Intel
// the hardware prefetcher alone left bandwidth unused). 2-4 KiB ahead was best for the float32 kernels
// (docs/design-measurements.md §14); the vdpbf16ps kernel, faster per byte, streams best
// from 4 KiB ahead (docs/performance.md).
constexpr size_t kPrefetchBytes = 2048;
constexpr size_t kPrefetchBytesBf16 = 4096;
// Tile rows streamed at once by the ROWS_IN_FLIGHT walk: one forward stream per tile row, and on
// Intel several streams keep more of the memory system busy than one (docs/design-measurements.md §14).
constexpr int64_t kRowsInFlight = 4;

// The small-M kernels' walk over B (small_m_walk(): LINEAR or ROWS_IN_FLIGHT), every tile of
// columns [nt_begin, nt_end) once; accumulate(tile, kt, nt) adds one tile's products to C. For
// each output column the tiles come in increasing kt either way, so the sums are the same.
// kLinearPrefetch: the LINEAR walk too fetches kPrefetchAhead bytes ahead of each tile, for the
// kernels that spend long enough on a tile for the hardware prefetchers alone to fall behind
// (bfp_tile_scaled; docs/performance.md, session 34).
template <DataType D, size_t kPrefetchAhead = kPrefetchBytes, bool kLinearPrefetch = false, class Accumulate>
inline void stream_tiles(const TileMatrix& b, int64_t nt_begin, int64_t nt_end, Accumulate&& accumulate) {
  constexpr size_t bytes = tile_bytes(D);  // a constant: no call into the header's inline code
  if (small_m_walk() == SmallMWalk::LINEAR) {
    // Memory order: the hardware prefetchers follow it alone (software prefetches slowed the
    // one-row kernels, which stream at the memory's speed).
    for (int64_t kt = 0; kt < b.tile_rows; ++kt)
      for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
        const std::byte* tile = tile_at(b, kt, nt, bytes);
        if constexpr (kLinearPrefetch)
          for (size_t line = 0; line < bytes; line += 64)
            _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchAhead + line, _MM_HINT_T0);
        accumulate(tile, kt, nt);
      }
    return;
  }
  for (int64_t kt0 = 0; kt0 < b.tile_rows; kt0 += kRowsInFlight) {
    const int64_t kt1 = kt0 + kRowsInFlight < b.tile_rows ? kt0 + kRowsInFlight : b.tile_rows;
    for (int64_t nt = nt_begin; nt < nt_end; ++nt)
      for (int64_t kt = kt0; kt < kt1; ++kt) {
        const std::byte* tile = tile_at(b, kt, nt, bytes);
        // With this much decode work per byte the hardware prefetcher alone fell behind.
        for (size_t line = 0; line < bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchAhead + line, _MM_HINT_T0);
        accumulate(tile, kt, nt);
      }
  }
}

}  // namespace
}  // namespace meshnn::kernels
