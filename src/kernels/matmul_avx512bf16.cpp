// AVX512-BF16 inner loops: bfloat16 products accumulated in float32 by vdpbf16ps, two products
// per lane and instruction (twice the float32 FMA's). Compiled with -mavx512bf16 (CMakeLists.txt:
// files named *_avx512bf16.cpp) and run only after the dispatcher checked the CPU; like the other
// ISA files it uses no std templates and keeps its helpers in an anonymous namespace.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "avx512_decode.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

// GCC 12 false positive inside avx512fintrin.h (_mm512_undefined_* used as a "don't care" source).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace meshnn::kernels {

namespace {

// C[MR][32] (+)= A_pairs[kc/2][MR] . B_pairs[kc/2][32]: 2*MR accumulators + 2 B vectors; MR = 14
// uses 30 of the 32 zmm registers and each broadcast pair feeds two vdpbf16ps.
template <int MR>
void kernel_mr_x32(int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
  // Every loop over MR is fully unrolled: otherwise GCC keeps a memory copy of the accumulator
  // arrays and stores to it on every k.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kc / 2; ++kk) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + kk * 32);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + kk * 32 + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[kk * MR + i]));
      acc0[i] = _mm512_dpbf16_ps(acc0[i], ai, b0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], ai, b1);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (accumulate) {
      acc0[i] = _mm512_add_ps(acc0[i], _mm512_loadu_ps(c + i * ldc));
      acc1[i] = _mm512_add_ps(acc1[i], _mm512_loadu_ps(c + i * ldc + 16));
    }
    _mm512_storeu_ps(c + i * ldc, acc0[i]);
    _mm512_storeu_ps(c + i * ldc + 16, acc1[i]);
  }
}

// Two rows of 16 floats (k even, k + 1) that hold bfloat16 values -> 16 pairs: the top halves of
// the floats are the bfloat16 bits, exactly.
inline __m512i pair_rows(__m512 even, __m512 odd) {
  const __m512i lo = _mm512_srli_epi32(_mm512_castps_si512(even), 16);
  const __m512i hi = _mm512_and_si512(_mm512_castps_si512(odd), _mm512_set1_epi32(-65536));
  return _mm512_or_si512(lo, hi);
}

// Face row `block` (= face * 16 + row) of a block-float tile as 16 floats, scale applied.
template <DataType D>
inline __m512 block_float_row(const uint8_t* tile, int block, const float* scales) {
  const __m512 magnitudes = D == DataType::BFLOAT8_B ? bfp8_row(tile + 64 + block * 16) : bfp4_row(tile + 64 + block * 8);
  return _mm512_mul_ps(magnitudes, _mm512_set1_ps(scales[tile[block]]));
}

// The word permute that turns two face rows held one after the other (32 words: row r's 16, then
// row r + 1's) into 16 pairs (row r, row r + 1) of the same column, as vdpbf16ps takes them along K.
inline __m512i pair_interleave() {
  return _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3,
                          18, 2, 17, 1, 16, 0);
}

// Straight from the stored tile to pairs, no float tile in between: face f's rows 2q and 2q + 1
// are K rows (f / 2) * 16 + 2q, + 1 of columns (f % 2) * 16 .. + 15, i.e. pair row (f / 2) * 8 + q.
template <DataType D>
void decode_pairs_t(const std::byte* tile, uint32_t* dst) {
  const uint8_t* t8 = reinterpret_cast<const uint8_t*>(tile);
  const float* scales = block_float_scale_table(D);
  for (int f = 0; f < 4; ++f)
    for (int q = 0; q < 8; ++q) {
      const int block = f * 16 + 2 * q;
      __m512i pairs;
      if constexpr (D == DataType::BFLOAT16) {
        // Rows 2q and 2q + 1 are 64 consecutive bytes: one load, and one word permute interleaves
        // them into (row 2q, row 2q + 1) pairs.
        const uint16_t* rows = reinterpret_cast<const uint16_t*>(tile) + block * 16;
        pairs = _mm512_permutexvar_epi16(pair_interleave(), _mm512_loadu_si512(rows));
      } else {
        pairs = pair_rows(block_float_row<D>(t8, block, scales), block_float_row<D>(t8, block + 1, scales));
      }
      _mm512_storeu_si512(dst + ((f / 2) * 8 + q) * 32 + (f % 2) * 16, pairs);
    }
}

void decode_tile_bf16_pairs(const std::byte* tile, DataType dtype, uint32_t* dst) {
  switch (dtype) {
    case DataType::BFLOAT16:
      return decode_pairs_t<DataType::BFLOAT16>(tile, dst);
    case DataType::BFLOAT8_B:
      return decode_pairs_t<DataType::BFLOAT8_B>(tile, dst);
    default:
      return decode_pairs_t<DataType::BFLOAT4_B>(tile, dst);
  }
}

// Small M (decode) on bfloat8_b weights, one tile: C[M][32] += A[M][this tile's 32 values of K] *
// tile, with vdpbf16ps. A code (sign, 7-bit magnitude m) of a block with shared exponent E is
// m * 2^(E-133); one bit select makes it the bfloat16 number +-(1 + m/128) * 2^(E-127) (the code's
// sign, E as the exponent, m as the mantissa) and a mask makes +-2^(E-127); their difference is
// the value / 2. So the block scale rides in the weights, A's pairs need no per-tile scaling,
// and per 32 weights the work is: one widening load, one word permute (the pairs along K that
// vdpbf16ps takes), a broadcast of the two rows' exponents, the select, the mask, two vdpbf16ps.
// The float32 kernel decodes 16 weights in about as many steps. Blocks with E = 0 (or below
// 2^-126) flush to zero as in every vdpbf16ps path, and an infinite activation gives NaN
// (inf - inf) where the float32 kernel gives an infinity.
// Sums: per row of A and column half, kChains pairs of accumulators (q's parity); the tile's sum is
// the chains' (with m) - (without m), added in chain order, doubled, then added to C.
// bf16_emulated.cpp repeats this order exactly.
template <int M>
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
  const __m512i interleave = pair_interleave();
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
      // Face rows 2q and 2q + 1 (32 codes, sign-extended: bits 15..7 copy the sign) -> pairs.
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t8 + 64 + (f * 16 + 2 * q) * 16));
      const __m512i words = _mm512_permutexvar_epi16(interleave, _mm512_cvtepi8_epi16(codes));
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

template <int M>
void small_m_bfp8(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc) {
  for (int i = 0; i < M; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 16) _mm512_storeu_ps(c + i * ldc + j, _mm512_setzero_ps());
  stream_tiles<DataType::BFLOAT8_B, kPrefetchBytesBf16>(
      b, nt_begin, nt_end, [&](const std::byte* tile, int64_t kt, int64_t nt) {
        bfp8_tile_dp<M>(reinterpret_cast<const uint8_t*>(tile), a + kt * 32, lda, c + nt * 32, ldc);
      });
}

// bfloat8_b weights only (kernels::small_m_bf16_applies).
void small_m_bf16(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc) {
  switch (m) {
    case 1: return small_m_bfp8<1>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 2: return small_m_bfp8<2>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 3: return small_m_bfp8<3>(a, lda, b, nt_begin, nt_end, c, ldc);
    default: return small_m_bfp8<4>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

void micro_kernel(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
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

}  // namespace

const KernelSet& avx512_bf16_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = avx512_kernel_set();
    s.isa = Isa::AVX512_BF16;
    s.bf16_micro_kernel = micro_kernel;
    s.bf16_max_mr = 14;
    s.bf16_path = "avx512-bf16";
    s.decode_tile_bf16_pairs = decode_tile_bf16_pairs;
    s.small_m_bf16 = small_m_bf16;
    s.small_m_bf16_path = "avx512-bf16";
    return s;
  }();
  return set;
}

}  // namespace meshnn::kernels
