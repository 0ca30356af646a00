// AVX-512 inner loops. This file alone is compiled with the AVX-512 flags (CMakeLists.txt: files
// named *_avx512.cpp) and only runs after the dispatcher checked the CPU. Like the AVX2 file it
// uses no std templates and keeps helpers in an anonymous namespace.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "avx512_decode.hpp"
#include "avx512_intrinsics.hpp"
#include "isa_local.hpp"
#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace avx2 {
void decode_tile(const std::byte* tile, DataType dtype, float* dst, int64_t ld);
}

namespace {

// C[MR][32] (+)= A_panel[kc][MR] * B_panel[kc][32]: 2*MR accumulators + 2 B vectors; MR = 14
// uses 30 of the 32 zmm registers, and each broadcast feeds two FMAs.
template <int MR>
void kernel_mr_x32(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  __m512 acc0[MR], acc1[MR];
  // Every loop over MR is fully unrolled: otherwise GCC keeps a memory copy of the accumulator
  // arrays and stores to it on every k.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[k * MR + i]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
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

// Per-block coefficients of one tile for M rows of A: coef[i][b] = a[i][k(b)] * scale(E_b), where
// block b = face * 16 + r holds k = r (faces 0, 1) or 16 + r (faces 2, 3); scales from face_scales.
template <int M, DataType D>
inline void tile_coefficients(const uint8_t* exps, const float* ak, int64_t lda, const float* scales,
                              float (*coef)[64]) {
  for (int f = 0; f < 4; ++f) {
    const __m512 scale = face_scales<D>(exps + f * 16, scales);
    for (int i = 0; i < M; ++i)
      _mm512_storeu_ps(coef[i] + f * 16, _mm512_mul_ps(scale, _mm512_loadu_ps(ak + i * lda + (f / 2) * 16)));
  }
}

// Two consecutive bfloat4_b face rows (blocks blk, blk + 1: 16 bytes, 32 codes) as two vectors,
// lanes alternating between the two rows: lane 2i holds row blk, lane 2i + 1 row blk + 1, for
// column 2i (`even`) and column 2i + 1 (`odd`). The byte interleave puts each byte in a 32-bit
// lane whose low nibble (even) or, shifted, high nibble (odd) is the code, and vpermps maps
// code -> signed magnitude reading only the low 4 index bits. Per 32 codes: one widening, one
// shift, two permutes; a matching coefficient vector is one 64-bit broadcast of (c_blk, c_blk+1).
inline void bfp4_row_pair(const uint8_t* p, __m512& even, __m512& odd) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(raw, _mm_srli_si128(raw, 8)));
  const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7);
  even = _mm512_permutexvar_ps(bytes, lut);
  odd = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), lut);
}

// Sums the two rows held in alternating lanes of (even, odd) into 16 columns in order.
inline __m512 fold_row_pair(__m512 even, __m512 odd) {
  const __m512 e = _mm512_add_ps(even, _mm512_permute_ps(even, 0xB1));  // lanes 2i, 2i+1: column 2i
  const __m512 o = _mm512_add_ps(odd, _mm512_permute_ps(odd, 0xB1));    // lanes 2i, 2i+1: column 2i+1
  return _mm512_mask_blend_ps(0xAAAA, e, o);
}

// One row of A against a bfloat4_b face (16 rows of 8 bytes); coef[r] = activation x block scale of
// face row r. Each row's 8 bytes are broadcast to all lanes and a per-lane variable shift brings
// nibble m to lane 2m and nibble 8 + m to lane 2m + 1 (the low and high dword of each 64-bit
// lane), where vpermps reads only the low 4 bits as its table index. Per 16 codes that is one
// shuffle (the permute) instead of the two of a widening; one permute per face restores column
// order, which made M = 1 faster (docs/design-measurements.md §14); the two-row layout of bfp4_row_pair with a broadcast coefficient pair stays for M >= 2, where one
// decode feeds M FMAs.
inline void bfp4_face_one_row(const uint8_t* codes, const float* coef, __m512& out) {
  const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 0, -1, -2, -3, -4, -5, -6, -7);
  const __m512i shifts = _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    long long row;
    std::memcpy(&row, codes + 8 * r, sizeof row);
    const __m512 v = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(row), shifts), lut);
    acc[r % 4] = _mm512_fmadd_ps(_mm512_set1_ps(coef[r]), v, acc[r % 4]);
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  // lane 2m: column m, lane 2m + 1: column 8 + m
  out = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), sum);
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
  // Per face: the face's contribution to its 16 columns, for each row of A.
  auto face_sum = [&](int f, __m512* out) __attribute__((always_inline)) {
    if constexpr (D == DataType::BFLOAT4_B && M == 1) {
      bfp4_face_one_row(t8 + 64 + f * 128, coef[0] + f * 16, out[0]);
    } else if constexpr (D == DataType::BFLOAT4_B) {
      __m512 acc[M][2][2];  // [row-pair parity][even, odd]
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < 2; ++j) acc[i][j][0] = acc[i][j][1] = _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int rp = 0; rp < 8; ++rp) {
        const int blk = f * 16 + 2 * rp;
        __m512 even, odd;
        bfp4_row_pair(t8 + 64 + blk * 8, even, odd);
        for (int i = 0; i < M; ++i) {
          double pair;  // (coef[blk], coef[blk + 1]) broadcast as one 64-bit value
          std::memcpy(&pair, coef[i] + blk, sizeof pair);
          const __m512 w = _mm512_castpd_ps(_mm512_set1_pd(pair));
          acc[i][rp % 2][0] = _mm512_fmadd_ps(w, even, acc[i][rp % 2][0]);
          acc[i][rp % 2][1] = _mm512_fmadd_ps(w, odd, acc[i][rp % 2][1]);
        }
      }
      for (int i = 0; i < M; ++i)
        out[i] = fold_row_pair(_mm512_add_ps(acc[i][0][0], acc[i][1][0]), _mm512_add_ps(acc[i][0][1], acc[i][1][1]));
    } else {
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
        } else {
          v = bfp8_row(t8 + 64 + blk * 16);
        }
        for (int i = 0; i < M; ++i) {
          const float w = kBlockFloat ? coef[i][blk] : ak[i * lda + (f / 2) * 16 + r];
          acc[i][r % 4] = _mm512_fmadd_ps(_mm512_set1_ps(w), v, acc[i][r % 4]);
        }
      }
      for (int i = 0; i < M; ++i)
        out[i] = _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3]));
    }
  };
  // Faces 0, 2 feed columns 0-15 and faces 1, 3 columns 16-31; the loop over the two face rows is
  // not unrolled (code size), so the two column halves are explicit variables.
  __m512 left[M], right[M], part[M];
  for (int i = 0; i < M; ++i) left[i] = right[i] = _mm512_setzero_ps();
  for (int face_row = 0; face_row < 2; ++face_row) {
    face_sum(2 * face_row, part);
    for (int i = 0; i < M; ++i) left[i] = _mm512_add_ps(left[i], part[i]);
    face_sum(2 * face_row + 1, part);
    for (int i = 0; i < M; ++i) right[i] = _mm512_add_ps(right[i], part[i]);
  }
  for (int i = 0; i < M; ++i) {
    float* ci = c + i * ldc;
    _mm512_storeu_ps(ci, _mm512_add_ps(_mm512_loadu_ps(ci), left[i]));
    _mm512_storeu_ps(ci + 16, _mm512_add_ps(_mm512_loadu_ps(ci + 16), right[i]));
  }
}

// Small M: B streamed tile row by tile row (contiguous in memory), kRowsInFlight tile rows at a
// time so that several sequential streams keep the memory system busy.
template <int M, DataType D>
void small_m_t(const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
               int64_t ldc) {
  const float* scales = block_float_scale_table(D);
  for (int i = 0; i < M; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; j += 16) _mm512_storeu_ps(c + i * ldc + j, _mm512_setzero_ps());
  stream_tiles<D>(b, nt_begin, nt_end, [&](const std::byte* tile, int64_t kt, int64_t nt) {
    accumulate_tile<M, D>(tile, a + kt * 32, lda, scales, c + nt * 32, ldc);
  });
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

namespace avx512 {

constexpr int kMaxMr = 14;

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
    case 6:
      return kernel_mr_x32<6>(kc, a, b, c, ldc, accumulate);
    case 7:
      return kernel_mr_x32<7>(kc, a, b, c, ldc, accumulate);
    case 8:
      return kernel_mr_x32<8>(kc, a, b, c, ldc, accumulate);
    case 9:
      return kernel_mr_x32<9>(kc, a, b, c, ldc, accumulate);
    case 10:
      return kernel_mr_x32<10>(kc, a, b, c, ldc, accumulate);
    case 11:
      return kernel_mr_x32<11>(kc, a, b, c, ldc, accumulate);
    case 12:
      return kernel_mr_x32<12>(kc, a, b, c, ldc, accumulate);
    case 13:
      return kernel_mr_x32<13>(kc, a, b, c, ldc, accumulate);
    default:
      return kernel_mr_x32<14>(kc, a, b, c, ldc, accumulate);
  }
}

void small_m(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
             int64_t ldc) {
  switch (m) {
    case 1:
      return small_m_dtype<1>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 2:
      return small_m_dtype<2>(a, lda, b, nt_begin, nt_end, c, ldc);
    case 3:
      return small_m_dtype<3>(a, lda, b, nt_begin, nt_end, c, ldc);
    default:
      return small_m_dtype<4>(a, lda, b, nt_begin, nt_end, c, ldc);
  }
}

}  // namespace avx512

const KernelSet& avx512_kernel_set() {
  static const KernelSet set{Isa::AVX512, avx2::decode_tile, avx512::micro_kernel, avx512::kMaxMr, avx512::small_m, 4};
  return set;
}

}  // namespace meshnn::kernels
