// One-row matmul (decode for one user) over bfloat8_b / bfloat4_b weights, AVX2/FMA. Compiled
// with -mavx2 -mfma; runs only after the dispatcher checked the CPU (see matmul_avx2.cpp).
//
// Why a separate kernel: at M = 1 every weight element is used once, so the cost is the decode,
// and the generic small-M loop (matmul_avx2.cpp) reached a third of what memory delivers. What
// this one does differently, each measured on 1x4544x18176:
//  * Codes are widened without shuffles: a 32-byte load is eight dwords; byte m of every dword,
//    shifted to the top and the bytes below masked off, is a sign-correct int32 equal to the
//    byte times 2^24 (the 2^24 goes into the factors). The price is a column permutation
//    (vector m, lane l holds byte 4l + m), undone when the accumulators are reduced, once per
//    group of tiles.
//  * Per-row factors (activation * shared-exponent scale) are built 16 at a time from the
//    exponent bits and spread over lanes with register permutes; building them in a stack array
//    (narrow stores, then wide loads) defeated store forwarding and cost more than the decode.
//  * No software prefetch: the hardware prefetcher keeps up at this rate, and the prefetch
//    instructions cost about a third of the throughput.
// Together about twice the generic loop's speed (figures: docs/design-measurements.md §13).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemv_block_float_avx2.hpp"
#include "isa_local.hpp"

namespace meshnn::kernels::avx2 {
namespace {

constexpr size_t kExponentBytes = 64;  // a block-float tile starts with one exponent per face row

// Factors for the 16 face rows: a[r] * 2^(E_r - 127 - (W - 1)), E_r = exponents[r], the value of
// code magnitude 1 in row r times the activation it meets. Normally also times the 2^-24 that
// undoes byte_of_dwords<m, true>, built as float bits (exponent field E - (W - 1) - 24), exact
// for E >= W + 24. A face with a smaller exponent (a block of magnitude below 1e-29) would lose
// precision to underflow that way: it gets the exact table and unscaled factors, and the
// function returns false so that its codes are widened by sign extension.
template <int W>
inline bool face_factors(const uint8_t* exponents, const float* a, const float* scale_table, __m256& rows0_7,
                         __m256& rows8_15) {
  constexpr int kShift = 24;
  const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(exponents));
  if (_mm_movemask_epi8(_mm_cmplt_epi8(_mm_xor_si128(e, _mm_set1_epi8(-128)), _mm_set1_epi8(-128 + W + kShift))) != 0) {
    alignas(32) float f[16];
    for (int r = 0; r < 16; ++r) f[r] = a[r] * scale_table[exponents[r]];
    rows0_7 = _mm256_load_ps(f);
    rows8_15 = _mm256_load_ps(f + 8);
    return false;
  }
  const __m256i bias = _mm256_set1_epi32(W - 1 + kShift);
  const __m256i bits0 = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_cvtepu8_epi32(e), bias), 23);
  const __m256i bits1 = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(e, e)), bias), 23);
  rows0_7 = _mm256_mul_ps(_mm256_loadu_ps(a), _mm256_castsi256_ps(bits0));
  rows8_15 = _mm256_mul_ps(_mm256_loadu_ps(a + 8), _mm256_castsi256_ps(bits1));
  return true;
}

// Byte m (0..3) of each dword of v as a float. kTimes2p24: the byte times 2^24 (shifted to the top
// of the dword it is a sign-correct int32 and the bytes below are masked off: one shift on the
// shift port instead of two; the factors undo the 2^24). Otherwise sign-extended, exact.
template <int m, bool kTimes2p24>
inline __m256 byte_of_dwords(__m256i v) {
  if constexpr (kTimes2p24) {
    const __m256i top = _mm256_set1_epi32(static_cast<int>(0xFF000000u));
    if constexpr (m == 3) return _mm256_cvtepi32_ps(_mm256_and_si256(v, top));
    else if constexpr (m == 0) return _mm256_cvtepi32_ps(_mm256_slli_epi32(v, 24));
    else return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_slli_epi32(v, 24 - 8 * m), top));
  } else {
    if constexpr (m == 3) return _mm256_cvtepi32_ps(_mm256_srai_epi32(v, 24));
    else return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * m), 24));
  }
}

// Sign-magnitude bytes (bit 7 = sign) -> two's complement.
inline __m256i sign_magnitude_to_int8(__m256i codes) {
  return _mm256_sign_epi8(_mm256_and_si256(codes, _mm256_set1_epi8(0x7F)), codes);
}

inline __m128 halves_sum(__m256 v) { return _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); }

inline void add_to(float* c, __m128 v) { _mm_storeu_ps(c, _mm_add_ps(_mm_loadu_ps(c), v)); }

// Accumulators for one 16-column face position, kept across every face that shares it (the
// reduction back to column order costs as much as a face, so it runs once per tile group).
struct FaceAccumulators {
  __m256 acc[2][4];
};

inline void zero(FaceAccumulators& a) {
#pragma GCC unroll 8
  for (int s = 0; s < 2; ++s)
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) a.acc[s][m] = _mm256_setzero_ps();
}

// bfloat8_b face: 16 rows of 16 codes, two rows per 32-byte load (dwords 0-3 row 2j, 4-7 row
// 2j+1). acc[s][m] lane l gathers column 4(l % 4) + m; sets s alternate over row pairs to cover
// the FMA latency.
template <bool kTimes2p24>
inline void bfp8_face(const uint8_t* codes, __m256 rows0_7, __m256 rows8_15, FaceAccumulators& a) {
  // Even rows in the low half, odd rows in the high half: then a pair's vector is one in-lane
  // broadcast, [row 2j's factor x4 | row 2j+1's x4].
  const __m256i even_odd = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256 split[2] = {_mm256_permutevar8x32_ps(rows0_7, even_odd), _mm256_permutevar8x32_ps(rows8_15, even_odd)};
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    const __m256i v = sign_magnitude_to_int8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * j)));
    __m256 f;
    switch (j % 4) {  // the immediate must be a constant
      case 0: f = _mm256_permute_ps(split[j / 4], 0x00); break;
      case 1: f = _mm256_permute_ps(split[j / 4], 0x55); break;
      case 2: f = _mm256_permute_ps(split[j / 4], 0xAA); break;
      default: f = _mm256_permute_ps(split[j / 4], 0xFF); break;
    }
    __m256* acc = a.acc[j % 2];
    acc[0] = _mm256_fmadd_ps(f, byte_of_dwords<0, kTimes2p24>(v), acc[0]);
    acc[1] = _mm256_fmadd_ps(f, byte_of_dwords<1, kTimes2p24>(v), acc[1]);
    acc[2] = _mm256_fmadd_ps(f, byte_of_dwords<2, kTimes2p24>(v), acc[2]);
    acc[3] = _mm256_fmadd_ps(f, byte_of_dwords<3, kTimes2p24>(v), acc[3]);
  }
}

inline void bfp8_reduce_into(const FaceAccumulators& a, float* c) {
  // s_m[l] = column 4l + m; the 4x4 transpose puts columns 4l..4l+3 in row l.
  __m128 s0 = halves_sum(_mm256_add_ps(a.acc[0][0], a.acc[1][0]));
  __m128 s1 = halves_sum(_mm256_add_ps(a.acc[0][1], a.acc[1][1]));
  __m128 s2 = halves_sum(_mm256_add_ps(a.acc[0][2], a.acc[1][2]));
  __m128 s3 = halves_sum(_mm256_add_ps(a.acc[0][3], a.acc[1][3]));
  _MM_TRANSPOSE4_PS(s0, s1, s2, s3);
  add_to(c, s0);
  add_to(c + 4, s1);
  add_to(c + 8, s2);
  add_to(c + 12, s3);
}

// bfloat4_b face: 16 rows of 8 bytes (first code in the low nibble), four rows per 32-byte load.
// Codes become two's complement bytes through a 16-entry table (acc[0]: low nibbles, the even
// columns; acc[1]: high nibbles, odd columns), then as bfloat8_b. acc[h][m] lane l is row
// 4g + l / 2, column 8(l % 2) + 2m + h.
template <bool kTimes2p24>
inline void bfp4_face(const uint8_t* codes, __m256 rows0_7, __m256 rows8_15, FaceAccumulators& a) {
  // Group g's vector: each of rows 4g..4g+3's factors twice.
  const __m256i low_quad = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), high_quad = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
  const __m256 quads[4] = {_mm256_permutevar8x32_ps(rows0_7, low_quad), _mm256_permutevar8x32_ps(rows0_7, high_quad),
                           _mm256_permutevar8x32_ps(rows8_15, low_quad), _mm256_permutevar8x32_ps(rows8_15, high_quad)};
  const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7, 0, 1, 2, 3, 4, 5, 6, 7,
                                       0, -1, -2, -3, -4, -5, -6, -7);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * g));
    const __m256i even = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, nibble));
    const __m256i odd = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), nibble));
    const __m256 f = quads[g];
    a.acc[0][0] = _mm256_fmadd_ps(f, byte_of_dwords<0, kTimes2p24>(even), a.acc[0][0]);
    a.acc[0][1] = _mm256_fmadd_ps(f, byte_of_dwords<1, kTimes2p24>(even), a.acc[0][1]);
    a.acc[0][2] = _mm256_fmadd_ps(f, byte_of_dwords<2, kTimes2p24>(even), a.acc[0][2]);
    a.acc[0][3] = _mm256_fmadd_ps(f, byte_of_dwords<3, kTimes2p24>(even), a.acc[0][3]);
    a.acc[1][0] = _mm256_fmadd_ps(f, byte_of_dwords<0, kTimes2p24>(odd), a.acc[1][0]);
    a.acc[1][1] = _mm256_fmadd_ps(f, byte_of_dwords<1, kTimes2p24>(odd), a.acc[1][1]);
    a.acc[1][2] = _mm256_fmadd_ps(f, byte_of_dwords<2, kTimes2p24>(odd), a.acc[1][2]);
    a.acc[1][3] = _mm256_fmadd_ps(f, byte_of_dwords<3, kTimes2p24>(odd), a.acc[1][3]);
  }
}

inline void bfp4_reduce_into(const FaceAccumulators& a, float* c) {
  // Per accumulator, lanes 0 and 1 of t = columns 2m + h and 8 + 2m + h (rows summed).
  __m128 t[2][4];
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m128 s = halves_sum(a.acc[h][m]);
      t[h][m] = _mm_add_ps(s, _mm_movehl_ps(s, s));
    }
  // p_m = columns (2m, 2m+1, 8+2m, 9+2m).
  const __m128 p0 = _mm_unpacklo_ps(t[0][0], t[1][0]), p1 = _mm_unpacklo_ps(t[0][1], t[1][1]);
  const __m128 p2 = _mm_unpacklo_ps(t[0][2], t[1][2]), p3 = _mm_unpacklo_ps(t[0][3], t[1][3]);
  add_to(c, _mm_movelh_ps(p0, p1));
  add_to(c + 4, _mm_movelh_ps(p2, p3));
  add_to(c + 8, _mm_movehl_ps(p1, p0));
  add_to(c + 12, _mm_movehl_ps(p3, p2));
}

template <DataType D>
void gemv_t(const float* a, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c) {
  constexpr int kMantissaBits = D == DataType::BFLOAT8_B ? 7 : 3;
  constexpr size_t kFaceCodeBytes = D == DataType::BFLOAT8_B ? 256 : 128;
  // Four tile rows at a time: four forward streams keep more DRAM pages open than one. No
  // software prefetch: the hardware prefetcher keeps up with this decode rate, and the prefetch
  // instructions themselves cost about a third of the throughput (docs/design-measurements.md §13).
  constexpr int64_t kRowsInFlight = 4;
  const float* scale_table = block_float_scale_table(D);
  const size_t bytes = tile_bytes(D);
  for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 8) _mm256_storeu_ps(c + j, _mm256_setzero_ps());
  for (int64_t kt0 = 0; kt0 < b.tile_rows; kt0 += kRowsInFlight) {
    const int64_t kt1 = kt0 + kRowsInFlight < b.tile_rows ? kt0 + kRowsInFlight : b.tile_rows;
    for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
      // Faces f and f + 2 of every tile in the group share columns 16 * (f % 2) .. +16.
      for (int half = 0; half < 2; ++half) {
        FaceAccumulators acc;
        zero(acc);
        for (int64_t kt = kt0; kt < kt1; ++kt) {
          const auto* tile = reinterpret_cast<const uint8_t*>(tile_at(b, kt, nt, bytes));
          for (int f = half; f < 4; f += 2) {
            // Face f: k rows 16 * (f / 2) .. +16 of tile row kt.
            __m256 rows0_7, rows8_15;
            const bool fast =
                face_factors<kMantissaBits>(tile + 16 * f, a + kt * 32 + (f / 2) * 16, scale_table, rows0_7, rows8_15);
            const uint8_t* codes = tile + kExponentBytes + f * kFaceCodeBytes;
            if constexpr (D == DataType::BFLOAT8_B) {
              if (fast) bfp8_face<true>(codes, rows0_7, rows8_15, acc);
              else bfp8_face<false>(codes, rows0_7, rows8_15, acc);
            } else {
              if (fast) bfp4_face<true>(codes, rows0_7, rows8_15, acc);
              else bfp4_face<false>(codes, rows0_7, rows8_15, acc);
            }
          }
        }
        float* c_half = c + nt * 32 + half * 16;
        if constexpr (D == DataType::BFLOAT8_B) bfp8_reduce_into(acc, c_half);
        else bfp4_reduce_into(acc, c_half);
      }
    }
  }
}

}  // namespace

void gemv_block_float(const float* a, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c) {
  if (b.dtype == DataType::BFLOAT8_B) gemv_t<DataType::BFLOAT8_B>(a, b, nt_begin, nt_end, c);
  else gemv_t<DataType::BFLOAT4_B>(a, b, nt_begin, nt_end, c);
}

}  // namespace meshnn::kernels::avx2
