// AVX2/FMA inner loops. This file is compiled with -mavx2 -mfma and must only run after
// the dispatcher checked the CPU: it uses no std templates (their out-of-line copies could be
// shared with portable code) and keeps every helper in an anonymous namespace.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemv_block_float_avx2.hpp"
#include "isa_local.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace {

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// Sign-magnitude int8 (bit 7 = sign) -> two's complement, in 16 lanes at once.
inline __m128i bfp8_to_int8(__m128i codes) {
  const __m128i magnitude = _mm_and_si128(codes, _mm_set1_epi8(0x7F));
  return _mm_sign_epi8(magnitude, codes);  // negates where the code byte is "negative" (bit 7)
}

// 8 bytes = 16 bfloat4_b codes (first element in the low nibble) -> 16 two's complement int8.
inline __m128i bfp4_to_int8(const uint8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(bytes, nibble);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
  // Code c (sign bit 3) -> its signed magnitude, one pshufb over the 16 possible codes.
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7);
  return _mm_shuffle_epi8(lut, _mm_unpacklo_epi8(lo, hi));
}

inline void int8_to_float(__m128i v, __m256& lo, __m256& hi) {
  lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
  hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
}

inline void bf16_to_float(const uint16_t* p, __m256& lo, __m256& hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
  hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
}

// One 16-element block (face row) of a tile, block index b = face * 16 + row, as two vectors of 8
// and the factor to apply: values = (lo, hi) * scale (scale is 1 except for block floats, where it
// is left unapplied so small-M kernels can fold it into the activation).
template <DataType D>
inline void load_block(const std::byte* tile, int b, const float* scales, __m256& lo, __m256& hi, float& scale) {
  if constexpr (D == DataType::FLOAT32) {
    const float* p = reinterpret_cast<const float*>(tile) + b * 16;
    lo = _mm256_loadu_ps(p);
    hi = _mm256_loadu_ps(p + 8);
    scale = 1.0f;
  } else if constexpr (D == DataType::BFLOAT16) {
    bf16_to_float(reinterpret_cast<const uint16_t*>(tile) + b * 16, lo, hi);
    scale = 1.0f;
  } else if constexpr (D == DataType::BFLOAT8_B) {
    const uint8_t* t = reinterpret_cast<const uint8_t*>(tile);
    int8_to_float(bfp8_to_int8(load16(t + 64 + b * 16)), lo, hi);
    scale = scales[t[b]];
  } else {
    const uint8_t* t = reinterpret_cast<const uint8_t*>(tile);
    int8_to_float(bfp4_to_int8(t + 64 + b * 8), lo, hi);
    scale = scales[t[b]];
  }
}

template <DataType D>
void decode_tile_t(const std::byte* tile, float* dst, int64_t ld) {
  const float* scales = block_float_scale_table(D);
  for (int b = 0; b < 64; ++b) {
    const int face = b / 16, row = (face / 2) * 16 + b % 16, col = (face % 2) * 16;
    __m256 lo, hi;
    float scale;
    load_block<D>(tile, b, scales, lo, hi, scale);
    if constexpr (D == DataType::BFLOAT8_B || D == DataType::BFLOAT4_B) {
      const __m256 s = _mm256_set1_ps(scale);
      lo = _mm256_mul_ps(lo, s);
      hi = _mm256_mul_ps(hi, s);
    }
    _mm256_storeu_ps(dst + row * ld + col, lo);
    _mm256_storeu_ps(dst + row * ld + col + 8, hi);
  }
}

// C[MR][16] (+)= A_panel[kc][MR] * B[kc][16 of a 32-wide panel]: 2*MR accumulators + 2 B vectors
// + 1 broadcast <= 15 of the 16 ymm registers for MR = 6.
template <int MR>
void kernel_mr_x16(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  __m256 acc0[MR], acc1[MR];
  // Every loop over MR is fully unrolled: otherwise GCC keeps a memory copy of the accumulator
  // arrays and stores to it on every k.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * 32), b1 = _mm256_loadu_ps(b + k * 32 + 8);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + k * MR + i);
      acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (accumulate) {
      acc0[i] = _mm256_add_ps(acc0[i], _mm256_loadu_ps(c + i * ldc));
      acc1[i] = _mm256_add_ps(acc1[i], _mm256_loadu_ps(c + i * ldc + 8));
    }
    _mm256_storeu_ps(c + i * ldc, acc0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
  }
}

template <int MR>
void kernel_mr_x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  kernel_mr_x16<MR>(kc, a, b, c, ldc, accumulate);
  kernel_mr_x16<MR>(kc, a, b + 16, c + 16, ldc, accumulate);
}

// C[i][16 columns of face f] += A[i][the face's 16 k] * B's face f, for i < M. The accumulators
// are named registers, never an indexed array: GCC keeps an array indexed by a loop variable that
// is not fully unrolled on the stack, and the FMA chains then run through store forwarding
// (docs/design-measurements.md §13). kSets interleaved sets per row cover the FMA latency.
template <int M, DataType D>
inline void accumulate_face(const std::byte* tile, int f, const float* ak, int64_t lda, const float* scales, float* c,
                            int64_t ldc) {
  constexpr int kSets = M == 1 ? 4 : 2;  // 2*kSets*M accumulators + 2 B vectors <= 16 registers
  __m256 lo_acc[kSets][M], hi_acc[kSets][M];
#pragma GCC unroll 16
  for (int s = 0; s < kSets; ++s)
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) lo_acc[s][i] = hi_acc[s][i] = _mm256_setzero_ps();
  const float* a_face = ak + (f / 2) * 16;
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    __m256 lo, hi;
    float scale;
    load_block<D>(tile, f * 16 + r, scales, lo, hi, scale);
#pragma GCC unroll 16
    for (int i = 0; i < M; ++i) {
      const __m256 w = _mm256_set1_ps(a_face[i * lda + r] * scale);
      lo_acc[r % kSets][i] = _mm256_fmadd_ps(w, lo, lo_acc[r % kSets][i]);
      hi_acc[r % kSets][i] = _mm256_fmadd_ps(w, hi, hi_acc[r % kSets][i]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < M; ++i) {
    __m256 lo = lo_acc[0][i], hi = hi_acc[0][i];
#pragma GCC unroll 16
    for (int s = 1; s < kSets; ++s) {
      lo = _mm256_add_ps(lo, lo_acc[s][i]);
      hi = _mm256_add_ps(hi, hi_acc[s][i]);
    }
    float* ci = c + i * ldc;
    _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), lo));
    _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), hi));
  }
}

// Small M: B streamed tile row by tile row (contiguous in memory) and decoded into registers,
// faces in memory order (a forward walk the prefetchers follow), accumulator sets per row of A
// alternating over face rows to cover the FMA latency; each face's sum is added into C. The
// block-float scale is folded into A's broadcast.
template <int M, DataType D>
void small_m_t(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
               int64_t ldc) {
  constexpr size_t kPrefetchBytes = 2048;  // see the AVX-512 kernel
  const float* scales = block_float_scale_table(D);
  const size_t bytes = tile_bytes(D);
  for (int i = 0; i < M; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 8) _mm256_storeu_ps(c + i * ldc + j, _mm256_setzero_ps());
  // kRowsInFlight tile rows at a time: several forward streams (see the AVX-512 kernel).
  constexpr int64_t kRowsInFlight = 4;
  for (int64_t kt0 = 0; kt0 < b.tile_rows; kt0 += kRowsInFlight)
    for (int64_t nt = nt_begin; nt < nt_end; ++nt)
      for (int64_t kt = kt0; kt < kt0 + kRowsInFlight && kt < b.tile_rows; ++kt) {
        const float* ak = a + kt * 32;
        const std::byte* tile = tile_at(b, kt, nt, bytes);
        for (size_t line = 0; line < bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(tile) + kPrefetchBytes + line, _MM_HINT_T0);
        for (int f = 0; f < 4; ++f) accumulate_face<M, D>(tile, f, ak, lda, scales, c + nt * 32 + (f % 2) * 16, ldc);
      }
}

template <int M>
void small_m_dtype(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                   int64_t ldc) {
  switch (b.dtype) {
    case DataType::FLOAT32:
      return small_m_t<M, DataType::FLOAT32>(a, lda, b, nt_begin, nt_end, c, ldc);
    case DataType::BFLOAT16:
      return small_m_t<M, DataType::BFLOAT16>(a, lda, b, nt_begin, nt_end, c, ldc);
    case DataType::BFLOAT8_B:
      return small_m_t<M, DataType::BFLOAT8_B>(a, lda, b, nt_begin, nt_end, c, ldc);
    default:
      return small_m_t<M, DataType::BFLOAT4_B>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

}  // namespace

namespace avx2 {

void decode_tile(const std::byte* tile, DataType dtype, float* dst, int64_t ld) {
  switch (dtype) {
    case DataType::FLOAT32:
      return decode_tile_t<DataType::FLOAT32>(tile, dst, ld);
    case DataType::BFLOAT16:
      return decode_tile_t<DataType::BFLOAT16>(tile, dst, ld);
    case DataType::BFLOAT8_B:
      return decode_tile_t<DataType::BFLOAT8_B>(tile, dst, ld);
    default:
      return decode_tile_t<DataType::BFLOAT4_B>(tile, dst, ld);
  }
}

void micro_kernel(int mr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  switch (mr) {
    case 1:
      return kernel_mr_x32<1>(kc, a, b, c, ldc, accumulate);
    case 2:
      return kernel_mr_x32<2>(kc, a, b, c, ldc, accumulate);
    case 3:
      return kernel_mr_x32<3>(kc, a, b, c, ldc, accumulate);
    case 4:
      return kernel_mr_x32<4>(kc, a, b, c, ldc, accumulate);
    case 5:
      return kernel_mr_x32<5>(kc, a, b, c, ldc, accumulate);
    default:
      return kernel_mr_x32<6>(kc, a, b, c, ldc, accumulate);
  }
}

void small_m(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
             int64_t ldc) {
  switch (m) {
    case 1:
      if (b.dtype == DataType::BFLOAT8_B || b.dtype == DataType::BFLOAT4_B)
        return gemv_block_float(a, b, nt_begin, nt_end, c);
      return small_m_dtype<1>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 2:
      return small_m_dtype<2>(a, lda, b, nt_begin, nt_end, c, ldc);
    default:
      return small_m_dtype<3>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

}  // namespace avx2

const KernelSet& avx2_kernel_set() {
  static const KernelSet set{Isa::AVX2, avx2::decode_tile, avx2::micro_kernel, 6, avx2::small_m, 3};
  return set;
}

}  // namespace meshnn::kernels
