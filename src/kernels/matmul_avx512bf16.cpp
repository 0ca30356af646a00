// AVX512-BF16 inner loops: bfloat16 products accumulated in float32 by vdpbf16ps, two products
// per lane and instruction (twice the float32 FMA's). Compiled with -mavx512bf16 (CMakeLists.txt:
// files named *_avx512bf16.cpp) and run only after the dispatcher checked the CPU; like the other
// ISA files it uses no std templates and keeps its helpers in an anonymous namespace.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "avx512_decode.hpp"
#include "bfp_rows_avx512bf16.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

// (avx512_intrinsics.hpp, through bfp_rows_avx512bf16.hpp, turns off GCC 12's false
// "uninitialized" warnings from the AVX-512 intrinsics for this file too.)

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
    const bool vbmi = __builtin_cpu_supports("avx512vbmi");
    s.small_m_bf16 = vbmi ? small_m_bf16_vbmi : small_m_bf16<false>;
    s.small_m_bf16_bfloat4 = vbmi;
    s.small_m_bf16_path = "avx512-bf16";
    return s;
  }();
  return set;
}

const KernelSet& avx512_bf16_kernel_set_without_vbmi() {
  static const KernelSet set = [] {
    KernelSet s = avx512_bf16_kernel_set();
    s.small_m_bf16 = small_m_bf16<false>;
    s.small_m_bf16_bfloat4 = false;
    return s;
  }();
  return set;
}

}  // namespace meshnn::kernels
