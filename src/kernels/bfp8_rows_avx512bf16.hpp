// Internal to src/kernels: avx512-bf16's small-M kernel on bfloat8_b weights (decode rows), written
// once for the two files that compile it: matmul_avx512bf16.cpp (AVX512-BF16) and
// bfp8_rows_avx512vbmi.cpp (the same with AVX512-VBMI's byte permute, taken where the CPU has
// it). Both give the same bits. In an anonymous namespace for the reason isa_local.hpp gives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "avx512_decode.hpp"
#include "avx512_intrinsics.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {
namespace {

// The word permute that turns two face rows held one after the other (32 words: row r's 16, then
// row r + 1's) into 16 pairs (row r, row r + 1) of the same column, as vdpbf16ps takes them along K.
inline __m512i pair_interleave() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                          18, 2, 17, 1, 16, 0);
}

// Byte indices for vpermb: pair n = (row r's code n, row r + 1's code n), each code in both bytes
// of its word.
alignas(64) constexpr uint8_t kCodePairBytes[64] = {
    0, 0, 16, 16, 1, 1, 17, 17, 2,  2,  18, 18, 3,  3,  19, 19, 4,  4,  20, 20, 5,  5,  21, 21,
    6, 6, 22, 22, 7, 7, 23, 23, 8,  8,  24, 24, 9,  9,  25, 25, 10, 10, 26, 26, 11, 11, 27, 27,
    12, 12, 28, 28, 13, 13, 29, 29, 14, 14, 30, 30, 15, 15, 31, 31};

// Two face rows of bfloat8_b codes (32 bytes: row r's 16, then row r + 1's) -> 16 pairs of words
// along K whose bit 15 is the code's sign and bits 6..0 its magnitude (the bits in between are
// overwritten by the caller). Without VBMI: sign-extend every byte to a word, then one word
// permute. With VBMI: one byte permute puts each code in both bytes of its word (the high byte's
// top bit is the sign): one shuffle instead of two, 14-18% more weights per second from cache on
// Zen 5 (docs/performance.md).
template <bool kVbmi>
inline __m512i code_pairs(__m256i codes) {
  if constexpr (kVbmi) {
    return _mm512_permutexvar_epi8(_mm512_load_si512(kCodePairBytes), _mm512_castsi256_si512(codes));
  } else {
    return _mm512_permutexvar_epi16(pair_interleave(), _mm512_cvtepi8_epi16(codes));
  }
}

// Small M (decode) on bfloat8_b weights, one tile: C[M][32] += A[M][this tile's 32 values of K] *
// tile, with vdpbf16ps. A code (sign, 7-bit magnitude m) of a block with shared exponent E is
// m * 2^(E-133); one bit select makes it the bfloat16 number +-(1 + m/128) * 2^(E-127) (the code's
// sign, E as the exponent, m as the mantissa) and a mask makes +-2^(E-127); their difference is
// the value / 2. So the block scale rides in the weights, A's pairs need no per-tile scaling,
// and per 32 weights the work is: a load, the codes made into pairs of words along K (what
// vdpbf16ps takes; code_pairs), a broadcast of the two rows' exponents, the select, the mask, two
// vdpbf16ps.
// The float32 kernel decodes 16 weights in about as many steps. Blocks with E = 0 (or below
// 2^-126) flush to zero as in every vdpbf16ps path, and an infinite activation gives NaN
// (inf - inf) where the float32 kernel gives an infinity.
// Sums: per row of A and column half, kChains pairs of accumulators (q's parity); the tile's sum is
// the chains' (with m) - (without m), added in chain order, doubled, then added to C.
// bf16_emulated.cpp repeats this order exactly.
template <int M, bool kVbmi>
inline void bfp8_tile_dp(const uint8_t* t8, const float* ak, int64_t lda, float* c, int64_t ldc) {
  constexpr int kChains = M <= 2 ? 2 : 1;
  // A's 32 values of this tile as 16 bfloat16 pairs per row (exact: they are bfloat16 values).
  // Made again for every tile; making them once per group of tile rows was tried and not kept
  // (docs/performance.md, session 23).
  alignas(64) uint32_t a_pairs[M][16];
  for (int i = 0; i < M; ++i)
    _mm512_store_si512(a_pairs[i], (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(ak + i * lda + 16),
                                                                 _mm512_loadu_ps(ak + i * lda)));
  // Face f's rows (2q, 2q + 1): their exponents in bits 14..7 of the low and high word.
  alignas(64) uint32_t exponents[32];
  for (int f = 0; f < 4; ++f) {
    const __m256i e = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t8 + f * 16)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(exponents + f * 8), _mm256_slli_epi16(e, 7));
  }
  // Read them back from memory: a broadcast from memory is a load, while one from a register (what
  // GCC makes of values it still holds) takes the shuffle unit that the decode already keeps busy.
  asm volatile("" ::: "memory");
  const __m512i exponent_field = _mm512_set1_epi16(0x7F80);
  const __m512i sign_and_exponent = _mm512_set1_epi16(static_cast<short>(0xFF80));
  __m512 with_m[M][2][kChains], without_m[M][2][kChains];
  for (int i = 0; i < M; ++i)
    for (int h = 0; h < 2; ++h)
      for (int ch = 0; ch < kChains; ++ch) with_m[i][h][ch] = without_m[i][h][ch] = _mm512_setzero_ps();
  // Both loops unrolled: the accumulators are indexed by f and q, and only constant indices keep
  // them in registers.
#pragma GCC unroll 4
  for (int f = 0; f < 4; ++f) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      // Face rows 2q and 2q + 1 (32 codes) -> pairs of words: the sign in bit 15, m in bits 6..0.
      const __m512i words =
          code_pairs<kVbmi>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t8 + 64 + (f * 16 + 2 * q) * 16)));
      const __m512i e = _mm512_set1_epi32(static_cast<int>(exponents[f * 8 + q]));
      // bits 14..7 <- E (imm 0xB8: exponent_field ? e : words). words is the operand overwritten:
      // it dies here, while the constant would need a copy for every row pair.
      const __m512i with = _mm512_ternarylogic_epi32(words, exponent_field, e, 0xB8);
      const __m512i without = _mm512_and_si512(with, sign_and_exponent);
      for (int i = 0; i < M; ++i) {
        const __m512bh ap = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_pairs[i][(f / 2) * 8 + q]));
        __m512& hi = with_m[i][f % 2][q % kChains];
        __m512& lo = without_m[i][f % 2][q % kChains];
        hi = _mm512_dpbf16_ps(hi, ap, (__m512bh)with);
        lo = _mm512_dpbf16_ps(lo, ap, (__m512bh)without);
      }
    }
  }
  for (int i = 0; i < M; ++i)
    for (int h = 0; h < 2; ++h) {
      __m512 sum = _mm512_sub_ps(with_m[i][h][0], without_m[i][h][0]);
      for (int ch = 1; ch < kChains; ++ch)
        sum = _mm512_add_ps(sum, _mm512_sub_ps(with_m[i][h][ch], without_m[i][h][ch]));
      float* ci = c + i * ldc + h * 16;
      _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), _mm512_add_ps(sum, sum)));
    }
}

template <int M, bool kVbmi>
void small_m_bfp8(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc) {
  for (int i = 0; i < M; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 16) _mm512_storeu_ps(c + i * ldc + j, _mm512_setzero_ps());
  stream_tiles<DataType::BFLOAT8_B, kPrefetchBytesBf16>(
      b, nt_begin, nt_end, [&](const std::byte* tile, int64_t kt, int64_t nt) {
        bfp8_tile_dp<M, kVbmi>(reinterpret_cast<const uint8_t*>(tile), a + kt * 32, lda, c + nt * 32, ldc);
      });
}

// bfloat8_b weights only (kernels::small_m_bf16_applies).
template <bool kVbmi>
void small_m_bf16(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc) {
  switch (m) {
    case 1: return small_m_bfp8<1, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 2: return small_m_bfp8<2, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 3: return small_m_bfp8<3, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    default: return small_m_bfp8<4, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

}  // namespace

// The kVbmi = true instance, compiled in bfp8_rows_avx512vbmi.cpp.
void small_m_bf16_vbmi(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                       float* c, int64_t ldc);

}  // namespace meshnn::kernels
