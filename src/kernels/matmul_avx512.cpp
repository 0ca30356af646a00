// AVX-512 inner loops. Built with the project's baseline flags; the instructions are enabled for
// this file only by the target pragma below, and it only runs after the dispatcher checked the
// CPU. Like the AVX2 file it uses no std templates and keeps helpers in an anonymous namespace.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "meshnn/kernels/matmul_kernels.hpp"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_* used as a "don't care" source).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace meshnn::kernels {

namespace avx2 {
void decode_tile(const std::byte* tile, DataType dtype, float* dst, int64_t ld);
}

namespace {

inline const std::byte* tile_at(const TileMatrix& m, int64_t tr, int64_t tc, size_t bytes) {
  return m.data + static_cast<size_t>(tr * m.tile_cols + tc) * bytes;
}

// C[MR][32] (+)= A_panel[kc][MR] * B_panel[kc][32]: 2*MR accumulators + 2 B vectors; MR = 14
// uses 30 of the 32 zmm registers, and each broadcast feeds two FMAs.
template <int MR>
void kernel_mr_x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm512_loadu_ps(c + i * ldc) : _mm512_setzero_ps();
    acc1[i] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16) : _mm512_setzero_ps();
  }
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[k * MR + i]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

// Per-block coefficients of one tile for M rows of A: coef[i][b] = a[i][k(b)] * scale(E_b), where
// block b = face * 16 + r holds k = r (faces 0, 1) or 16 + r (faces 2, 3). The scale 2^(E-127-(W-1))
// is built from the exponent bits directly; blocks whose scale would be denormal (E < W, values
// below 2^-120) take the exact value from the table.
template <int M, DataType D>
inline void tile_coefficients(const uint8_t* exps, const float* ak, int64_t lda, const float* scales,
                              float (*coef)[64]) {
  constexpr int kW = D == DataType::BFLOAT4_B ? 3 : 7;
  for (int half = 0; half < 2; ++half) {
    for (int f = half * 2; f < half * 2 + 2; ++f) {
      const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(exps + f * 16)));
      const __m512i biased = _mm512_sub_epi32(e, _mm512_set1_epi32(kW - 1));
      __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_max_epi32(biased, _mm512_setzero_si512()), 23));
      const __mmask16 tiny = _mm512_cmplt_epi32_mask(biased, _mm512_set1_epi32(1));
      if (tiny) scale = _mm512_mask_i32gather_ps(scale, tiny, e, scales, 4);
      for (int i = 0; i < M; ++i)
        _mm512_storeu_ps(coef[i] + f * 16, _mm512_mul_ps(scale, _mm512_loadu_ps(ak + i * lda + half * 16)));
    }
  }
}

// bfloat4_b face row (8 bytes, 16 codes) -> 16 floats in the order [even columns, odd columns]:
// the 8 bytes go to both halves of the vector, the upper half shifted right by 4 so that every
// lane's low nibble is its code; vpermps then maps code -> signed magnitude (it reads only the low
// 4 index bits). Accumulators keep this column order until the tile is done.
inline __m512 bfp4_row_even_odd(const uint8_t* p) {
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_set1_epi64x(*reinterpret_cast<const long long*>(p)));
  const __m512i shifts = _mm512_set_epi32(4, 4, 4, 4, 4, 4, 4, 4, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7);
  return _mm512_permutexvar_ps(_mm512_srlv_epi32(bytes, shifts), lut);
}

// bfloat8_b face row (16 codes) -> 16 floats in column order (magnitudes, scale not applied).
inline __m512 bfp8_row(const uint8_t* p) {
  const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i v = _mm_sign_epi8(_mm_and_si128(codes, _mm_set1_epi8(0x7F)), codes);
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

// C[M][32] += A[M][32 values of this tile's k range] * one decoded tile. Faces in memory order (a
// forward walk through the tile that the prefetchers follow); four accumulators per row of A
// rotate over the face rows to cover the FMA latency; each face's sum goes to its column half.
// Block floats: the per-block scale is folded into A once per tile (tile_coefficients), so the
// inner loop is decode + one FMA with a broadcast from memory per row of A.
template <int M, DataType D>
inline void accumulate_tile(const std::byte* tile, const float* ak, int64_t lda, const float* scales, float* c,
                            int64_t ldc) {
  constexpr bool kBlockFloat = D == DataType::BFLOAT8_B || D == DataType::BFLOAT4_B;
  const uint8_t* t8 = reinterpret_cast<const uint8_t*>(tile);
  alignas(64) float coef[M][64];
  if constexpr (kBlockFloat) tile_coefficients<M, D>(t8, ak, lda, scales, coef);
  __m512 half_sum[M][2];
  for (int i = 0; i < M; ++i) half_sum[i][0] = half_sum[i][1] = _mm512_setzero_ps();
  for (int f = 0; f < 4; ++f) {
    __m512 acc[M][4];
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      const int blk = f * 16 + r;
      __m512 v;
      if constexpr (D == DataType::FLOAT32) {
        v = _mm512_loadu_ps(reinterpret_cast<const float*>(tile) + blk * 16);
      } else if constexpr (D == DataType::BFLOAT16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile) + blk);
        v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      } else if constexpr (D == DataType::BFLOAT8_B) {
        v = bfp8_row(t8 + 64 + blk * 16);
      } else {
        v = bfp4_row_even_odd(t8 + 64 + blk * 8);
      }
      for (int i = 0; i < M; ++i) {
        const float w = kBlockFloat ? coef[i][blk] : ak[i * lda + (f / 2) * 16 + r];
        acc[i][r % 4] = _mm512_fmadd_ps(_mm512_set1_ps(w), v, acc[i][r % 4]);
      }
    }
    for (int i = 0; i < M; ++i)
      half_sum[i][f % 2] = _mm512_add_ps(
          half_sum[i][f % 2], _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3])));
  }
  // Undoes bfp4_row_even_odd's column order: output column j comes from lane j/2 (even j) or 8 + j/2.
  const __m512i unpermute = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  for (int i = 0; i < M; ++i) {
    float* ci = c + i * ldc;
    __m512 left = half_sum[i][0], right = half_sum[i][1];
    if constexpr (D == DataType::BFLOAT4_B) {
      left = _mm512_permutexvar_ps(unpermute, left);
      right = _mm512_permutexvar_ps(unpermute, right);
    }
    _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), left));
    _mm512_storeu_ps(ci + 16, _mm512_add_ps(_mm512_loadu_ps(ci + 16), right));
  }
}

// Small M: B streamed tile row by tile row (contiguous in memory), kRowsInFlight tile rows at a
// time so that several sequential streams keep the memory system busy.
template <int M, DataType D>
void small_m_t(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
               int64_t ldc) {
  const float* scales = block_float_scale_table(D);
  const size_t bytes = tile_bytes(D);
  for (int i = 0; i < M; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 16) _mm512_storeu_ps(c + i * ldc + j, _mm512_setzero_ps());
  for (int64_t kt0 = 0; kt0 < b.tile_rows; kt0 += kRowsInFlight) {
    const int64_t kt1 = kt0 + kRowsInFlight < b.tile_rows ? kt0 + kRowsInFlight : b.tile_rows;
    for (int64_t nt = nt_begin; nt < nt_end; ++nt)
      for (int64_t kt = kt0; kt < kt1; ++kt) {
        const std::byte* tile = tile_at(b, kt, nt, bytes);
        // Weights stream from DRAM; with this much decode work per byte the hardware
        // prefetcher alone falls behind.
        for (size_t line = 0; line < bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchBytes + line, _MM_HINT_T0);
        accumulate_tile<M, D>(tile, a + kt * 32, lda, scales, c + nt * 32, ldc);
      }
  }
}

template <int M>
void small_m_dtype(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                   int64_t ldc) {
  switch (b.dtype) {
    case DataType::FLOAT32: return small_m_t<M, DataType::FLOAT32>(a, lda, b, nt_begin, nt_end, c, ldc);
    case DataType::BFLOAT16: return small_m_t<M, DataType::BFLOAT16>(a, lda, b, nt_begin, nt_end, c, ldc);
    case DataType::BFLOAT8_B: return small_m_t<M, DataType::BFLOAT8_B>(a, lda, b, nt_begin, nt_end, c, ldc);
    default: return small_m_t<M, DataType::BFLOAT4_B>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

}  // namespace

namespace avx512 {

constexpr int kMaxMr = 14;

void micro_kernel(int mr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  switch (mr) {
    case 1: return kernel_mr_x32<1>(kc, a, b, c, ldc, accumulate);
    case 2: return kernel_mr_x32<2>(kc, a, b, c, ldc, accumulate);
    case 3: return kernel_mr_x32<3>(kc, a, b, c, ldc, accumulate);
    case 4: return kernel_mr_x32<4>(kc, a, b, c, ldc, accumulate);
    case 5: return kernel_mr_x32<5>(kc, a, b, c, ldc, accumulate);
    case 6: return kernel_mr_x32<6>(kc, a, b, c, ldc, accumulate);
    case 7: return kernel_mr_x32<7>(kc, a, b, c, ldc, accumulate);
    case 8: return kernel_mr_x32<8>(kc, a, b, c, ldc, accumulate);
    case 9: return kernel_mr_x32<9>(kc, a, b, c, ldc, accumulate);
    case 10: return kernel_mr_x32<10>(kc, a, b, c, ldc, accumulate);
    case 11: return kernel_mr_x32<11>(kc, a, b, c, ldc, accumulate);
    case 12: return kernel_mr_x32<12>(kc, a, b, c, ldc, accumulate);
    case 13: return kernel_mr_x32<13>(kc, a, b, c, ldc, accumulate);
    default: return kernel_mr_x32<14>(kc, a, b, c, ldc, accumulate);
  }
}

void small_m(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
             int64_t ldc) {
  switch (m) {
    case 1: return small_m_dtype<1>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 2: return small_m_dtype<2>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 3: return small_m_dtype<3>(a, lda, b, nt_begin, nt_end, c, ldc);
    default: return small_m_dtype<4>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

}  // namespace avx512

const KernelSet& avx512_kernel_set() {
  static const KernelSet set{Isa::AVX512, avx2::decode_tile, avx512::micro_kernel, avx512::kMaxMr, avx512::small_m, 4};
  return set;
}

}  // namespace meshnn::kernels
