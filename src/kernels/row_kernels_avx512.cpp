// The row kernels compiled with the AVX512 flags (CMakeLists.txt: files named *_avx512.cpp); run
// only after the dispatcher checked the CPU.
#include "avx512_intrinsics.hpp"
#include "row_loops.hpp"

namespace meshnn::kernels {
namespace {

// 16 rows of 16 floats transposed in registers, written as 16 runs of 16 floats `stride` apart:
// 32-bit then 64-bit unpacks leave, in 128-bit lane L of u[j], column 4L + j of four consecutive
// rows; two rounds of 128-bit lane shuffles gather each column's four lanes. 64 shuffles where
// the scalar loop moved 256 values one by one (half of the attention op's time in a decode step;
// docs/performance.md, session 27).
inline void transpose16x16(const __m512 (&rows)[16], float* out, int64_t stride) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(rows[i], rows[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d t0 = _mm512_castps_pd(t[i]), t1 = _mm512_castps_pd(t[i + 1]);
    const __m512d t2 = _mm512_castps_pd(t[i + 2]), t3 = _mm512_castps_pd(t[i + 3]);
    u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
  // u[4g + j] holds rows 4g..4g+3; lanes (0, 2) and (1, 3) first, then rows 0-7 with 8-15.
  for (int j = 0; j < 4; ++j) {
    const __m512 even_lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    const __m512 odd_lo = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 even_hi = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 odd_hi = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    _mm512_storeu_ps(out + (j + 0) * stride, _mm512_shuffle_f32x4(even_lo, even_hi, 0x88));
    _mm512_storeu_ps(out + (j + 4) * stride, _mm512_shuffle_f32x4(odd_lo, odd_hi, 0x88));
    _mm512_storeu_ps(out + (j + 8) * stride, _mm512_shuffle_f32x4(even_lo, even_hi, 0xDD));
    _mm512_storeu_ps(out + (j + 12) * stride, _mm512_shuffle_f32x4(odd_lo, odd_hi, 0xDD));
  }
}

inline __m512 load_row(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_row(const uint16_t* p) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

template <class T>
void transpose_tile_avx512(const T* tile, float* out) {
  for (int f = 0; f < 4; ++f) {
    __m512 rows[16];
    for (int r = 0; r < 16; ++r) rows[r] = load_row(tile + f * 256 + r * 16);
    transpose16x16(rows, out + (f % 2) * 16 * 32 + (f / 2) * 16, 32);
  }
}

}  // namespace

const RowKernelSet& avx512_row_kernels() {
  static const RowKernelSet set{Isa::AVX512, silu_mul_loop, attend_tile_loop<16>, transpose_tile_avx512<float>,
                                transpose_tile_avx512<uint16_t>, attend_tile_bf16_loop<16>};
  return set;
}

}  // namespace meshnn::kernels
