// AVX512-BF16 inner loops: bfloat16 products accumulated in float32 by vdpbf16ps, two products
// per lane and instruction (twice the float32 FMA's). Compiled with -mavx512bf16 (CMakeLists.txt:
// files named *_avx512bf16.cpp) and run only after the dispatcher checked the CPU; like the other
// ISA files it uses no std templates and keeps its helpers in an anonymous namespace.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "avx512_decode.hpp"
#include "bfp_rows_avx512bf16.hpp"
#include "pack_pairs_avx512bf16.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

// (avx512_intrinsics.hpp, through bfp_rows_avx512bf16.hpp, turns off GCC 12's false
// "uninitialized" warnings from the AVX-512 intrinsics for this file too.)

namespace meshnn::kernels {

namespace {

// C[MR][32] (+)= A_pairs[kc/2][MR] . B_pairs[kc/2][32]: 2*MR accumulators + 2 B vectors; MR = 14
// uses 30 of the 32 zmm registers and each broadcast pair feeds two vdpbf16ps.
// Every loop over MR is fully unrolled: otherwise GCC keeps a memory copy of the accumulator
// arrays and stores to it on every k.
template <int MR>
inline void zero_rows(__m512 (&acc0)[MR], __m512 (&acc1)[MR]) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
}

// One pair row of B (two vectors: columns 0-15, 16-31) into every row's accumulators.
template <int MR>
inline void add_pair_row(__m512 (&acc0)[MR], __m512 (&acc1)[MR], const uint32_t* a_pairs, __m512bh b0, __m512bh b1) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const __m512bh ai = (__m512bh)_mm512_set1_epi32(static_cast<int>(a_pairs[i]));
    acc0[i] = _mm512_dpbf16_ps(acc0[i], ai, b0);
    acc1[i] = _mm512_dpbf16_ps(acc1[i], ai, b1);
  }
}

template <int MR>
inline void store_rows(const __m512 (&acc0)[MR], const __m512 (&acc1)[MR], float* c, int64_t ldc, bool accumulate) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    __m512 c0 = acc0[i], c1 = acc1[i];
    if (accumulate) {
      c0 = _mm512_add_ps(c0, _mm512_loadu_ps(c + i * ldc));
      c1 = _mm512_add_ps(c1, _mm512_loadu_ps(c + i * ldc + 16));
    }
    _mm512_storeu_ps(c + i * ldc, c0);
    _mm512_storeu_ps(c + i * ldc + 16, c1);
  }
}

template <int MR>
void kernel_mr_x32(int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
  zero_rows<MR>(acc0, acc1);
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < kc / 2; ++kk)
    add_pair_row<MR>(acc0, acc1, a + kk * MR, (__m512bh)_mm512_loadu_si512(b + kk * 32),
                     (__m512bh)_mm512_loadu_si512(b + kk * 32 + 16));
  store_rows<MR>(acc0, acc1, c, ldc, accumulate);
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

// Pair row r (0-15: K rows 2r, 2r + 1 of the tile) of a stored tile, columns h * 16 .. + 15, straight
// from its stored format: face rows 2q and 2q + 1 (q = r % 8) of face 2 * (r / 8) + h.
template <DataType D>
inline __m512i tile_pairs(const std::byte* tile, int r, int h, const float* scales) {
  const int block = (2 * (r / 8) + h) * 16 + 2 * (r % 8);
  if constexpr (D == DataType::BFLOAT16) {
    // The two face rows are 64 consecutive bytes: one load, and one word permute interleaves them.
    const uint16_t* rows = reinterpret_cast<const uint16_t*>(tile) + block * 16;
    return _mm512_permutexvar_epi16(pair_interleave(), _mm512_loadu_si512(rows));
  } else {
    const uint8_t* t8 = reinterpret_cast<const uint8_t*>(tile);
    return pair_rows(block_float_row<D>(t8, block, scales), block_float_row<D>(t8, block + 1, scales));
  }
}

// A tile into 16 rows of 32 pairs (KernelSet::decode_tile_bf16_pairs).
template <DataType D>
void decode_pairs_t(const std::byte* tile, uint32_t* dst) {
  const float* scales = block_float_scale_table(D);
  for (int r = 0; r < 16; ++r)
    for (int h = 0; h < 2; ++h) _mm512_storeu_si512(dst + r * 32 + h * 16, tile_pairs<D>(tile, r, h, scales));
}

// kernel_mr_x32 for the first micro-panel of a B panel (KernelSet::bf16_micro_kernel_from_tiles):
// B's pairs come from the stored tiles and are written to b for the panel's later calls; the same
// products in the same order, so the same bits. Decoding the panel before its calls instead left
// the products idle while the decode's loads and stores waited (docs/performance.md, session 31).
// Fetches, spread over the pair rows: the lines of this panel's next tile into L1, and those of
// the next panel's tile t into L2 (prefetcht2, as the blocked loop's own fetches: session 29). The
// next panel fetched a slice between each pair of calls instead stalled on full miss buffers.
template <DataType D, int MR>
void kernel_mr_x32_from_tiles(int64_t kc, const uint32_t* a, const StoredPanel& panel, uint32_t* b, float* c,
                              int64_t ldc, bool accumulate) {
  constexpr int kLines = static_cast<int>(tile_bytes(D) / 64);
  __m512 acc0[MR], acc1[MR];
  zero_rows<MR>(acc0, acc1);
  const float* scales = block_float_scale_table(D);
  const int64_t tiles = kc / 32;
  for (int64_t t = 0; t < tiles; ++t) {
    const std::byte* tile = panel.first + t * panel.step;
    const std::byte* own_next = t + 1 < tiles ? tile + panel.step : nullptr;
    const std::byte* next_panel = t < panel.next_tiles ? panel.next_first + t * panel.step : nullptr;
#pragma GCC unroll 2
    for (int r = 0; r < 16; ++r) {
      for (int l = r * kLines / 16; l < (r + 1) * kLines / 16; ++l) {
        if (own_next != nullptr) _mm_prefetch(reinterpret_cast<const char*>(own_next + l * 64), _MM_HINT_T0);
        if (next_panel != nullptr) _mm_prefetch(reinterpret_cast<const char*>(next_panel + l * 64), _MM_HINT_T2);
      }
      const int64_t kk = t * 16 + r;
      const __m512i b0 = tile_pairs<D>(tile, r, 0, scales), b1 = tile_pairs<D>(tile, r, 1, scales);
      _mm512_storeu_si512(b + kk * 32, b0);
      _mm512_storeu_si512(b + kk * 32 + 16, b1);
      add_pair_row<MR>(acc0, acc1, a + kk * MR, (__m512bh)b0, (__m512bh)b1);
    }
  }
  // A next panel longer than this one (this one the last, shorter K block): the rest of its tiles.
  for (int64_t t = tiles; t < panel.next_tiles; ++t)
    for (int l = 0; l < kLines; ++l)
      _mm_prefetch(reinterpret_cast<const char*>(panel.next_first + t * panel.step + l * 64), _MM_HINT_T2);
  store_rows<MR>(acc0, acc1, c, ldc, accumulate);
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

// body.template operator()<MR>() with MR = mr (1-13; 14 for anything larger): the row count must be
// a constant for the kernels' accumulators to stay in registers.
template <class Body>
void with_rows(int mr, Body&& body) {
  switch (mr) {
    case 1: return body.template operator()<1>();
    case 2: return body.template operator()<2>();
    case 3: return body.template operator()<3>();
    case 4: return body.template operator()<4>();
    case 5: return body.template operator()<5>();
    case 6: return body.template operator()<6>();
    case 7: return body.template operator()<7>();
    case 8: return body.template operator()<8>();
    case 9: return body.template operator()<9>();
    case 10: return body.template operator()<10>();
    case 11: return body.template operator()<11>();
    case 12: return body.template operator()<12>();
    case 13: return body.template operator()<13>();
    default: return body.template operator()<14>();
  }
}

void micro_kernel(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
  with_rows(mr, [&]<int MR>() { kernel_mr_x32<MR>(kc, a, b, c, ldc, accumulate); });
}

template <DataType D>
void from_tiles_rows(int mr, int64_t kc, const uint32_t* a, const StoredPanel& panel, uint32_t* b, float* c,
                     int64_t ldc, bool accumulate) {
  with_rows(mr, [&]<int MR>() { kernel_mr_x32_from_tiles<D, MR>(kc, a, panel, b, c, ldc, accumulate); });
}

void micro_kernel_from_tiles(int mr, int64_t kc, const uint32_t* a, const StoredPanel& panel, uint32_t* b, float* c,
                             int64_t ldc, bool accumulate) {
  switch (panel.dtype) {
    case DataType::BFLOAT16:
      return from_tiles_rows<DataType::BFLOAT16>(mr, kc, a, panel, b, c, ldc, accumulate);
    case DataType::BFLOAT8_B:
      return from_tiles_rows<DataType::BFLOAT8_B>(mr, kc, a, panel, b, c, ldc, accumulate);
    default:
      return from_tiles_rows<DataType::BFLOAT4_B>(mr, kc, a, panel, b, c, ldc, accumulate);
  }
}

}  // namespace

const KernelSet& avx512_bf16_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = avx512_kernel_set();
    s.isa = Isa::AVX512_BF16;
    s.bf16_micro_kernel = micro_kernel;
    s.bf16_micro_kernel_from_tiles = micro_kernel_from_tiles;
    s.bf16_max_mr = 14;
    s.bf16_path = "avx512-bf16";
    s.decode_tile_bf16_pairs = decode_tile_bf16_pairs;
    s.pack_bf16_a_panel = pack_bf16_a_panel_avx512;
    const bool vbmi = __builtin_cpu_supports("avx512vbmi");
    s.small_m_bf16 = vbmi ? small_m_bf16_vbmi : small_m_bf16<false>;
    s.small_m_bf16_bfloat4 = vbmi;
    s.small_m_bf16_max = kScaledMaxRows;
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
