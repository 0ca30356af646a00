// Portable inner loops: plain C++ the compiler may auto-vectorise for the baseline target.
#include <cstring>

#include "meshnn/kernels/matmul_kernels.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "meshnn/tensor/tile_layout.hpp"

namespace meshnn::kernels {

namespace {

void decode_tile(const std::byte* tile, DataType dtype, float* dst, int64_t ld) {
  switch (dtype) {
    case DataType::FLOAT32: {
      const float* src = reinterpret_cast<const float*>(tile);
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) dst[i * ld + j] = src[tile_element_index(i, j)];
      return;
    }
    case DataType::BFLOAT16: {
      const uint16_t* src = reinterpret_cast<const uint16_t*>(tile);
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) dst[i * ld + j] = bfloat16_to_float(src[tile_element_index(i, j)]);
      return;
    }
    default: {
      // Block floats: block b (= face * 16 + face row) shares exps[b]; value = +-m * scale(E).
      const bool four_bit = dtype == DataType::BFLOAT4_B;
      const float* scales = block_float_scale_table(dtype);
      const uint8_t* exps = reinterpret_cast<const uint8_t*>(tile);
      const uint8_t* codes = exps + 64;
      for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) {
          const int64_t idx = tile_element_index(i, j);
          const float scale = scales[exps[idx / 16]];
          // Codes are sign + W magnitude bits: bit 3 / bit 7 is the sign.
          const int code = four_bit ? (codes[idx / 2] >> ((idx & 1) * 4)) & 0xF : codes[idx];
          const int sign_bit = four_bit ? 0x8 : 0x80;
          const float v = static_cast<float>(code & (sign_bit - 1)) * scale;
          dst[i * ld + j] = (code & sign_bit) ? -v : v;
        }
      return;
    }
  }
}

void micro_kernel(int mr, int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool accumulate) {
  constexpr int kMaxMr = 6;
  float acc[kMaxMr][32];
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < 32; ++j) acc[i][j] = accumulate ? c[i * ldc + j] : 0.0f;
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * 32;
    for (int i = 0; i < mr; ++i) {
      const float ai = a[k * mr + i];
      for (int j = 0; j < 32; ++j) acc[i][j] += ai * bk[j];
    }
  }
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < 32; ++j) c[i * ldc + j] = acc[i][j];
}

void small_m(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
             int64_t ldc) {
  alignas(64) float tile[32 * 32];
  for (int i = 0; i < m; ++i) std::memset(c + i * ldc + nt_begin * 32, 0, (nt_end - nt_begin) * 32 * sizeof(float));
  for (int64_t kt = 0; kt < b.tile_rows; ++kt)
    for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
      decode_tile(b.tile(kt, nt), b.dtype, tile, 32);
      for (int i = 0; i < m; ++i) {
        float* ci = c + i * ldc + nt * 32;
        const float* ai = a + i * lda + kt * 32;
        for (int k = 0; k < 32; ++k)
          for (int j = 0; j < 32; ++j) ci[j] += ai[k] * tile[k * 32 + j];
      }
    }
}

}  // namespace

const KernelSet& portable_kernel_set() {
  static const KernelSet set{Isa::PORTABLE, decode_tile, micro_kernel, 6, small_m, 4};
  return set;
}

}  // namespace meshnn::kernels
