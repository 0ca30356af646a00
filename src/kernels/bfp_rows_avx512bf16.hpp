// Internal to src/kernels: avx512-bf16's small-M kernel on block-float weights (decode rows:
// bfloat8_b, and bfloat4_b where the CPU has VBMI), written once for the two files that compile it:
// matmul_avx512bf16.cpp (AVX512-BF16) and bfp_rows_avx512vbmi.cpp (the same with AVX512-VBMI's byte
// permute, taken where the CPU has it). Both give the same bits on bfloat8_b. In an anonymous
// namespace for the reason isa_local.hpp gives.
#pragma once

#include <bit>
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

// Byte indices for vpermb on bfloat4_b: two face rows of 8 bytes (row r's, then row r + 1's; byte
// i holds column 2i in its low nibble, 2i + 1 in its high one), pair n = (row r's byte n / 2, row
// r + 1's byte n / 2), each byte in both bytes of its word.
alignas(64) constexpr uint8_t kNibblePairBytes[64] = {
    0, 0, 8, 8, 0, 0, 8, 8, 1, 1, 9,  9,  1, 1, 9,  9,  2, 2, 10, 10, 2, 2, 10, 10, 3, 3, 11, 11, 3, 3, 11, 11,
    4, 4, 12, 12, 4, 4, 12, 12, 5, 5, 13, 13, 5, 5, 13, 13, 6, 6, 14, 14, 6, 6, 14, 14, 7, 7, 15, 15, 7, 7, 15, 15};

// Two face rows of bfloat4_b codes (16 bytes) -> 16 pairs of words along K whose bit 15 is the
// code's sign and bits 6..4 its magnitude (bits 3..0 and 14..7 are overwritten by the caller).
// With a code's byte in both bytes of its word, an odd column's nibble already sits there (bits
// 7..4 and 15..12); an even column's word shifted left by 4 puts its nibble there too. VBMI only.
inline __m512i nibble_pairs(__m128i codes) {
  const __m512i even_columns_by_4 = _mm512_set1_epi64(0x0000000000040004LL);
  return _mm512_sllv_epi16(_mm512_permutexvar_epi8(_mm512_load_si512(kNibblePairBytes), _mm512_castsi128_si512(codes)),
                           even_columns_by_4);
}

// Small M (decode) on block-float weights, one tile: C[M][32] += A[M][this tile's 32 values of K] *
// tile, with vdpbf16ps. A bfloat8_b code (sign, 7-bit magnitude m) of a block with shared exponent
// E is m * 2^(E-133); one bit select makes it the bfloat16 number +-(1 + m/128) * 2^(E-127) (the
// code's sign, E as the exponent, m as the mantissa) and a mask makes +-2^(E-127); their
// difference is the value / 2. A bfloat4_b code (sign, 3-bit m) is m * 2^(E-129): with m as the
// mantissa's top three bits the same two numbers differ by m/8 * 2^(E-127), again the value / 2.
// So the block scale rides in the weights, A's pairs need no per-tile scaling, and per 32 weights
// the work is: a load, the codes made into pairs of words along K (what vdpbf16ps takes;
// code_pairs, nibble_pairs), a broadcast of the two rows' exponents, the select, the mask, two
// vdpbf16ps.
// The float32 kernel decodes 16 weights in about as many steps. Blocks with E = 0 (or below
// 2^-126) flush to zero as in every vdpbf16ps path, and an infinite activation gives NaN
// (inf - inf) where the float32 kernel gives an infinity.
// Sums: per row of A and column half, kChains pairs of accumulators (q's parity); the tile's sum is
// the chains' (with m) - (without m), added in chain order, doubled, then added to C.
// bf16_emulated.cpp repeats this order exactly.
template <DataType D, int M, bool kVbmi>
inline void bfp_tile_dp(const uint8_t* t8, const float* ak, int64_t lda, float* c, int64_t ldc) {
  static_assert(D == DataType::BFLOAT8_B || (D == DataType::BFLOAT4_B && kVbmi));
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
  // Bits taken from the exponent broadcast: 14..7 (E), and for bfloat4_b 3..0 too (zeros there:
  // the other nibble of the code's byte).
  const __m512i exponent_field = _mm512_set1_epi16(D == DataType::BFLOAT8_B ? 0x7F80 : 0x7F8F);
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
      // Face rows 2q and 2q + 1 (32 codes) -> pairs of words: the sign in bit 15, m in bits 6..0
      // (bfloat8_b) or 6..4 (bfloat4_b).
      __m512i words;
      if constexpr (D == DataType::BFLOAT8_B)
        words =
            code_pairs<kVbmi>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t8 + 64 + (f * 16 + 2 * q) * 16)));
      else
        words = nibble_pairs(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t8 + 64 + (f * 16 + 2 * q) * 8)));
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

// bfloat16 bits of the integer v (|v| < 128: exact, 7 bits fit bfloat16's 8).
constexpr uint16_t integer_bf16(int v) {
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(v)) >> 16);
}

// The integers 0..127 in bfloat16, as tables for IntegerCodes' lookups: low bytes and high bytes
// (byte permutes, VBMI), and whole words (word permutes).
struct SmallIntegerBf16 {
  alignas(64) uint8_t low[128];
  alignas(64) uint8_t high[128];
  alignas(64) uint16_t words[128];
};
constexpr SmallIntegerBf16 make_small_integer_bf16() {
  SmallIntegerBf16 t{};
  for (int m = 0; m < 128; ++m) {
    t.words[m] = integer_bf16(m);
    t.low[m] = static_cast<uint8_t>(t.words[m] & 0xFF);
    t.high[m] = static_cast<uint8_t>(t.words[m] >> 8);
  }
  return t;
}
alignas(64) inline constexpr SmallIntegerBf16 kSmallIntegerBf16 = make_small_integer_bf16();

// The bfloat4_b codes as integers: code c (sign in bit 3, magnitude m in bits 2..0) -> +-m, twice
// over (a word permute's index keeps 5 bits; bit 4 is not the code's). Code 8 is -0.
struct NibbleIntegerBf16 {
  alignas(64) uint16_t words[32];
};
constexpr NibbleIntegerBf16 make_nibble_integer_bf16() {
  NibbleIntegerBf16 t{};
  for (int i = 0; i < 32; ++i) {
    const int code = i % 16;
    t.words[i] = static_cast<uint16_t>(integer_bf16(code & 7) | (code & 8 ? 0x8000 : 0));
  }
  return t;
}
alignas(64) inline constexpr NibbleIntegerBf16 kNibbleIntegerBf16 = make_nibble_integer_bf16();

// Small M (3 to kScaledMaxRows rows) on block-float weights, one tile, with one vdpbf16ps per row
// and 32 weights instead of bfp_tile_dp's two. A code (sign, magnitude m) of a block with exponent
// E is m * 2^(E-133) on bfloat8_b (7-bit m), m * 2^(E-129) on bfloat4_b (3-bit m): the weights
// enter as the integers +-m, exact in bfloat16 (table lookups, IntegerCodes), and the block's scale
// moves to A: each row's 32 values are multiplied by the scale of each face row (vscalefps,
// exact) and made bfloat16 again (exact), once per tile and row. The products are then those of
// bfp_tile_dp (the value times the activation, exact in float32) except where an activation times
// its block's scale leaves float32's normal range: below 2^-126 it flushes to zero (as a denormal
// weight does in bfp_tile_dp), above it gives an infinity (NaN on a zero code). At two rows and
// below, bfp_tile_dp is as fast or faster (its decode is lighter), so it keeps them.
// Sums: per row of A and column half, one chain over faces and row pairs in order, then added to C.
// bf16_emulated.cpp repeats this order exactly.
inline constexpr int kScaledMinRows = 3, kScaledMaxRows = 6;
inline constexpr size_t kPrefetchBytesScaled = 2048;  // its walk's distance ahead (stream_tiles)

// Two face rows (2q, 2q + 1) of face f -> 16 pairs of words along K, each +-m in bfloat16.
// bfloat8_b: the codes (code_pairs) looked up in the 128-entry tables, then the sign set.
// bfloat4_b (VBMI only): each word's nibble moved to its low bits (even columns sit in bits 11..8
// after the byte permute, odd ones in 15..12) and looked up in the 32-entry table, sign included.
template <DataType D, bool kVbmi>
struct IntegerCodes {
  __m512i t0, t1, t2, t3;  // the tables in registers
  IntegerCodes() {
    if constexpr (D == DataType::BFLOAT4_B) {
      t0 = _mm512_load_si512(kNibbleIntegerBf16.words);
    } else if constexpr (kVbmi) {
      const SmallIntegerBf16& table = kSmallIntegerBf16;
      t0 = _mm512_load_si512(table.low);
      t1 = _mm512_load_si512(table.low + 64);
      t2 = _mm512_load_si512(table.high);
      t3 = _mm512_load_si512(table.high + 64);
    } else {
      const SmallIntegerBf16& table = kSmallIntegerBf16;
      t0 = _mm512_load_si512(table.words);
      t1 = _mm512_load_si512(table.words + 32);
      t2 = _mm512_load_si512(table.words + 64);
      t3 = _mm512_load_si512(table.words + 96);
    }
  }
  __m512i pairs(const uint8_t* t8, int f, int q) const {
    if constexpr (D == DataType::BFLOAT4_B) {
      static_assert(kVbmi);
      const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t8 + 64 + (f * 16 + 2 * q) * 8));
      const __m512i bytes = _mm512_permutexvar_epi8(_mm512_load_si512(kNibblePairBytes), _mm512_castsi128_si512(codes));
      const __m512i to_low_bits = _mm512_set1_epi64(0x000C000C00080008LL);  // words of columns 2j, 2j + 1
      return _mm512_permutexvar_epi16(_mm512_srlv_epi16(bytes, to_low_bits), t0);
    } else {
      const __m512i codes =
          code_pairs<kVbmi>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t8 + 64 + (f * 16 + 2 * q) * 16)));
      __m512i magnitude;
      if constexpr (kVbmi) {
        // Each code sits in both bytes of its word: the low byte looks up the low table, keeping
        // the high byte's code, which then looks up the high table (two byte permutes, no blend).
        const __m512i low = _mm512_mask2_permutex2var_epi8(t0, codes, 0x5555555555555555ull, t1);
        magnitude = _mm512_mask2_permutex2var_epi8(t2, low, 0xAAAAAAAAAAAAAAAAull, t3);
      } else {
        // Word lookups take 6 bits: m below 64 from the first half of the table, else the second.
        const __m512i below = _mm512_permutex2var_epi16(t0, codes, t1);
        const __m512i above = _mm512_permutex2var_epi16(t2, codes, t3);
        magnitude = _mm512_mask_blend_epi16(_mm512_test_epi16_mask(codes, _mm512_set1_epi16(0x40)), below, above);
      }
      // bit 15 <- the code's sign (imm 0xD8: sign ? codes : magnitude).
      return _mm512_ternarylogic_epi32(magnitude, codes, _mm512_set1_epi16(static_cast<short>(0x8000)), 0xD8);
    }
  }
};

template <DataType D, int M, bool kVbmi>
inline void bfp_tile_scaled(const uint8_t* t8, const float* ak, int64_t lda, float* c, int64_t ldc) {
  static_assert(M >= kScaledMinRows && M <= kScaledMaxRows);
  // A code's value is m * 2^(E - bias): 2^(E-127) times m / 64 (bfloat8_b) or m / 4 (bfloat4_b).
  constexpr float kBias = D == DataType::BFLOAT8_B ? 133.0f : 129.0f;
  // Row i's values of K half kh (16 per face row of faces 2kh and 2kh + 1) times each face's
  // scales, as pairs: [h * 8 + q] is face (2kh + h)'s rows (2q, 2q + 1).
  alignas(64) uint32_t scaled[M][2][16];
  for (int kh = 0; kh < 2; ++kh) {
    __m512 scale[2];
    for (int h = 0; h < 2; ++h) {
      const __m128i exponents = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t8 + (2 * kh + h) * 16));
      scale[h] = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(exponents)), _mm512_set1_ps(kBias));
    }
    for (int i = 0; i < M; ++i) {
      const __m512 a = _mm512_loadu_ps(ak + i * lda + kh * 16);
      _mm512_store_si512(scaled[i][kh], (__m512i)_mm512_cvtne2ps_pbh(_mm512_scalef_ps(a, scale[1]),
                                                                     _mm512_scalef_ps(a, scale[0])));
    }
  }
  asm volatile("" ::: "memory");  // broadcasts from memory, as in bfp_tile_dp
  const IntegerCodes<D, kVbmi> codes;
  __m512 acc[M][2];
  for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int f = 0; f < 4; ++f) {
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const __m512i words = codes.pairs(t8, f, q);
      for (int i = 0; i < M; ++i) {
        const __m512bh ap = (__m512bh)_mm512_set1_epi32(static_cast<int>(scaled[i][f / 2][(f % 2) * 8 + q]));
        acc[i][f % 2] = _mm512_dpbf16_ps(acc[i][f % 2], ap, (__m512bh)words);
      }
    }
  }
  for (int i = 0; i < M; ++i)
    for (int h = 0; h < 2; ++h) {
      float* ci = c + i * ldc + h * 16;
      _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), acc[i][h]));
    }
}

template <DataType D, int M, bool kVbmi>
void small_m_bfp(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                 int64_t ldc) {
  for (int i = 0; i < M; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 16) _mm512_storeu_ps(c + i * ldc + j, _mm512_setzero_ps());
  if constexpr (M >= kScaledMinRows) {
    // Fetched ahead in the linear walk too (docs/performance.md, session 34).
    auto tile_product = [&](const std::byte* tile, int64_t kt, int64_t nt) {
      bfp_tile_scaled<D, M, kVbmi>(reinterpret_cast<const uint8_t*>(tile), a + kt * 32, lda, c + nt * 32, ldc);
    };
    stream_tiles<D, kPrefetchBytesScaled, true>(b, nt_begin, nt_end, tile_product);
  } else {
    stream_tiles<D, kPrefetchBytesBf16>(b, nt_begin, nt_end, [&](const std::byte* tile, int64_t kt, int64_t nt) {
      bfp_tile_dp<D, M, kVbmi>(reinterpret_cast<const uint8_t*>(tile), a + kt * 32, lda, c + nt * 32, ldc);
    });
  }
}

// Up to kScaledMaxRows rows (small_m_bf16_applies).
template <DataType D, bool kVbmi>
void small_m_bfp_rows(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                      float* c, int64_t ldc) {
  switch (m) {
    case 1: return small_m_bfp<D, 1, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 2: return small_m_bfp<D, 2, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 3: return small_m_bfp<D, 3, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 4: return small_m_bfp<D, 4, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 5: return small_m_bfp<D, 5, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
    default: return small_m_bfp<D, 6, kVbmi>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

// bfloat8_b weights, and bfloat4_b with VBMI (kernels::small_m_bf16_applies).
template <bool kVbmi>
void small_m_bf16(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc) {
  if constexpr (kVbmi)
    if (b.dtype == DataType::BFLOAT4_B)
      return small_m_bfp_rows<DataType::BFLOAT4_B, true>(m, a, lda, b, nt_begin, nt_end, c, ldc);
  small_m_bfp_rows<DataType::BFLOAT8_B, kVbmi>(m, a, lda, b, nt_begin, nt_end, c, ldc);
}

}  // namespace

// The kVbmi = true instance, compiled in bfp_rows_avx512vbmi.cpp.
void small_m_bf16_vbmi(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                       float* c, int64_t ldc);

}  // namespace meshnn::kernels
