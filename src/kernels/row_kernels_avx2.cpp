// The row kernels compiled with the AVX2 flags (CMakeLists.txt: files named *_avx2.cpp); run
// only after the dispatcher checked the CPU.
#include <immintrin.h>

#include "row_loops.hpp"

namespace meshnn::kernels {
namespace {

// 8 rows of 8 floats transposed in registers, written as 8 runs of 8 floats `stride` apart:
// 32-bit unpacks, then 64-bit shuffles leave column 4L + j of rows 0-3 (s[j]) and 4-7 (s[4 + j]) in
// 128-bit lane L; the lane permutes pair them. 24 shuffles for 64 values (the AVX-512 set does
// 16x16 at once).
inline void transpose8x8(const __m256 (&rows)[8], float* out, int64_t stride) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(rows[i], rows[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(rows[i], rows[i + 1]);
  }
  s[0] = _mm256_shuffle_ps(t[0], t[2], 0x44);
  s[1] = _mm256_shuffle_ps(t[0], t[2], 0xEE);
  s[2] = _mm256_shuffle_ps(t[1], t[3], 0x44);
  s[3] = _mm256_shuffle_ps(t[1], t[3], 0xEE);
  s[4] = _mm256_shuffle_ps(t[4], t[6], 0x44);
  s[5] = _mm256_shuffle_ps(t[4], t[6], 0xEE);
  s[6] = _mm256_shuffle_ps(t[5], t[7], 0x44);
  s[7] = _mm256_shuffle_ps(t[5], t[7], 0xEE);
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(out + j * stride, _mm256_permute2f128_ps(s[j], s[4 + j], 0x20));
    _mm256_storeu_ps(out + (4 + j) * stride, _mm256_permute2f128_ps(s[j], s[4 + j], 0x31));
  }
}

inline __m256 load_row(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_row(const uint16_t* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// Each face as four 8x8 blocks.
template <class T>
void transpose_tile_avx2(const T* tile, float* out) {
  for (int f = 0; f < 4; ++f)
    for (int block = 0; block < 4; ++block) {
      const int row0 = block / 2 * 8, col0 = block % 2 * 8;
      __m256 rows[8];
      for (int r = 0; r < 8; ++r) rows[r] = load_row(tile + f * 256 + (row0 + r) * 16 + col0);
      transpose8x8(rows, out + ((f % 2) * 16 + col0) * 32 + (f / 2) * 16 + row0, 32);
    }
}

}  // namespace

const RowKernelSet& avx2_row_kernels() {
  static const RowKernelSet set{Isa::AVX2, silu_mul_loop, attend_tile_loop<8>, transpose_tile_avx2<float>,
                                transpose_tile_avx2<uint16_t>, attend_tile_bf16_loop<8>};
  return set;
}

}  // namespace meshnn::kernels
