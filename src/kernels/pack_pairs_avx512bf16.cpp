// avx512-bf16's packer of A's micro-panels (KernelSet::pack_bf16_a_panel): bfloat16 activations
// from their stored tiles into [kc/2][mr] pairs, the layout the micro-kernel broadcasts from.
//
// Each step takes one face row of 16 columns (8 pairs) from each of the panel's rows and writes the
// 8 x mr block it becomes: an 8x8 transpose of 32-bit pairs, done for rows 0-7 and 8-15 at once in
// the two halves of a zmm register, then one masked store of mr lanes per pair column. The
// portable packer (gemm.cpp) moved the same pairs one 32-bit store at a time, and on 128-row
// prefill products with a long K (TinyLlama's down_proj split over two threads) that took 8% of the
// product's time (docs/performance.md, session 43).
#include "pack_pairs_avx512bf16.hpp"

#include "avx512_intrinsics.hpp"

namespace meshnn::kernels {

namespace {

// Where column k (a multiple of 16) of a row starts, from the row's start in its tile row: whole
// tiles of 1024 values, then the left or right face (256 values each) of the tile's face row
// (tensor/tile_layout.hpp's tile_element_index(0, k % 32)).
inline int64_t face_row_offset(int64_t k) { return k / 32 * 1024 + k % 32 / 16 * 256; }

// Pair columns 0-7 of rows j (low half) and j + 8 (high half) of one face row; rows from mr on and
// columns from `valid` on read as zeros.
inline __m512i two_rows(const uint16_t* const* rows, int mr, int j, int64_t offset, __mmask16 valid) {
  const __m256i low = j < mr ? _mm256_maskz_loadu_epi16(valid, rows[j] + offset) : _mm256_setzero_si256();
  const __m256i high = j + 8 < mr ? _mm256_maskz_loadu_epi16(valid, rows[j + 8] + offset) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

}  // namespace

void pack_bf16_a_panel_avx512(const uint16_t* const* rows, int mr, int64_t k_valid, int64_t k0, int64_t kc,
                              uint32_t* dst) {
  const __mmask16 lanes = static_cast<__mmask16>((1u << mr) - 1);
  // After the two unpack stages, lo[q] holds, in each 256-bit half, pair columns q (128-bit lane 0
  // or 2) and q + 4 (lane 1 or 3) of rows 0-3 (or 8-11), hi[q] the same of rows 4-7 (or 12-15).
  // These 64-bit indices put one column's 16 rows in order: column q, then column q + 4.
  const __m512i column_q = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
  const __m512i column_q4 = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
  for (int64_t k = k0; k < k0 + kc; k += 16, dst += 8 * mr) {
    const int64_t offset = face_row_offset(k);
    const int64_t valid_columns = k_valid - k >= 16 ? 16 : k_valid > k ? k_valid - k : 0;
    const __mmask16 valid = static_cast<__mmask16>((1u << valid_columns) - 1);
    __m512i r[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) r[j] = two_rows(rows, mr, j, offset, valid);
    __m512i lo[4], hi[4];
#pragma GCC unroll 2
    for (int g = 0; g < 2; ++g) {  // rows 0-3, then rows 4-7 (and 8-11, 12-15)
      const __m512i* x = r + 4 * g;
      const __m512i t0 = _mm512_unpacklo_epi32(x[0], x[1]), t1 = _mm512_unpackhi_epi32(x[0], x[1]);
      const __m512i t2 = _mm512_unpacklo_epi32(x[2], x[3]), t3 = _mm512_unpackhi_epi32(x[2], x[3]);
      __m512i* out = g == 0 ? lo : hi;
      out[0] = _mm512_unpacklo_epi64(t0, t2);
      out[1] = _mm512_unpackhi_epi64(t0, t2);
      out[2] = _mm512_unpacklo_epi64(t1, t3);
      out[3] = _mm512_unpackhi_epi64(t1, t3);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      _mm512_mask_storeu_epi32(dst + q * mr, lanes, _mm512_permutex2var_epi64(lo[q], column_q, hi[q]));
      _mm512_mask_storeu_epi32(dst + (q + 4) * mr, lanes, _mm512_permutex2var_epi64(lo[q], column_q4, hi[q]));
    }
  }
}

}  // namespace meshnn::kernels
