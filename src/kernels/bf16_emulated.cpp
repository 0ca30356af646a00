// The bf16 path in portable C++: vdpbf16ps emulated lane by lane (dpbf16_lane), so the path's
// packing, blocking and accumulation order are tested on CPUs without the instruction, and its
// bits can be checked against the hardware's where it exists.
#include <cmath>
#include <cstring>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace {

float from_bits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

uint32_t to_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

// Denormals (inputs and results alike) become a zero of the same sign.
float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

float bf16_low(uint32_t pair) { return flush_denormal(from_bits(pair << 16)); }
float bf16_high(uint32_t pair) { return flush_denormal(from_bits(pair & 0xFFFF0000u)); }

// Same contract as the hardware micro-kernel: the sums of this K block start from zero and C is
// added at the end, in that order (the hardware kernel's accumulators do the same).
void micro_kernel(int mr, int64_t kc, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc, bool accumulate) {
  constexpr int kMaxMr = 14;
  float acc[kMaxMr][32] = {};
  for (int64_t kk = 0; kk < kc / 2; ++kk)
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < 32; ++j) acc[i][j] = dpbf16_lane(acc[i][j], a[kk * mr + i], b[kk * 32 + j]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < 32; ++j) c[i * ldc + j] = accumulate ? acc[i][j] + c[i * ldc + j] : acc[i][j];
}

void decode_tile_bf16_pairs(const std::byte* tile, DataType dtype, uint32_t* dst) {
  float rows[32 * 32];
  portable_kernel_set().decode_tile(tile, dtype, rows, 32);
  // Every value of these formats is a bfloat16 value: its top 16 bits are exact.
  for (int kk = 0; kk < 16; ++kk)
    for (int j = 0; j < 32; ++j)
      dst[kk * 32 + j] = bf16_pair(static_cast<uint16_t>(to_bits(rows[2 * kk * 32 + j]) >> 16),
                                   static_cast<uint16_t>(to_bits(rows[(2 * kk + 1) * 32 + j]) >> 16));
}

// The hardware's first call of a panel (KernelSet::bf16_micro_kernel_from_tiles) as the separate
// decode and the micro-kernel, which is what it must equal: so the blocked loop's way through it
// is tested on CPUs without the instruction too. It fetches nothing.
void micro_kernel_from_tiles(int mr, int64_t kc, const uint32_t* a, const StoredPanel& panel, uint32_t* b, float* c,
                             int64_t ldc, bool accumulate) {
  for (int64_t t = 0; t < kc / 32; ++t) decode_tile_bf16_pairs(panel.first + t * panel.step, panel.dtype, b + t * 16 * 32);
  micro_kernel(mr, kc, a, b, c, ldc, accumulate);
}

// The small-M kernels' shape: C's rows zeroed, then for each tile (column after column, K in
// order) and each row of A, fn(tile bytes, the row's 32 values of this tile, C's 32 outputs) adds
// the tile's products.
template <class F>
void each_tile_and_row(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                       float* c, int64_t ldc, F&& fn) {
  const size_t bytes = tile_bytes(b.dtype);
  for (int i = 0; i < m; ++i)
    for (int64_t j = nt_begin * 32; j < nt_end * 32; ++j) c[i * ldc + j] = 0.0f;
  for (int64_t nt = nt_begin; nt < nt_end; ++nt)
    for (int64_t kt = 0; kt < b.tile_rows; ++kt) {
      const uint8_t* t8 = reinterpret_cast<const uint8_t*>(b.data + static_cast<size_t>(kt * b.tile_cols + nt) * bytes);
      for (int i = 0; i < m; ++i) fn(t8, a + i * lda + kt * 32, c + i * ldc + nt * 32);
    }
}

// avx512-bf16's small-M kernel on block-float weights from 3 rows on (bfp_rows_avx512bf16.hpp,
// bfp_tile_scaled), lane by lane: A's values times 2^(E-133) (bfloat8_b) or 2^(E-129) (bfloat4_b)
// of each face row (denormal results flush to zero, as vcvtne2ps2bf16 reads them), the codes as
// the integers +-m, one chain per row and column half, faces and row pairs in order.
void small_m_bf16_scaled(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                         float* c, int64_t ldc) {
  const bool bfp8 = b.dtype == DataType::BFLOAT8_B;
  const int bias = bfp8 ? 133 : 129;
  // Code j of face f's row r as +-m in bfloat16 (exact). bfloat4_b rows hold column j in the low
  // nibble of byte j / 2 when j is even, the high one when odd; the sign is the code's top bit.
  auto integer_bf16 = [bfp8](const uint8_t* t8, int f, int r, int j) {
    const uint32_t code = bfp8 ? t8[64 + (f * 16 + r) * 16 + j] : (t8[64 + (f * 16 + r) * 8 + j / 2] >> (j % 2 * 4)) & 0xFu;
    const uint32_t sign = bfp8 ? code & 0x80u : (code & 0x8u) << 4;
    const float v = static_cast<float>(code & (bfp8 ? 0x7Fu : 0x7u));
    return static_cast<uint16_t>((to_bits(v) >> 16) | sign << 8);
  };
  each_tile_and_row(m, a, lda, b, nt_begin, nt_end, c, ldc, [&](const uint8_t* t8, const float* ak, float* out) {
    // Value k (of face row r = k % 16) of face f, scaled: exact unless it leaves the normal range.
    auto scaled = [&](int f, int r) {
      const float x = flush_denormal(std::ldexp(ak[(f / 2) * 16 + r], static_cast<int>(t8[f * 16 + r]) - bias));
      return static_cast<uint16_t>(to_bits(x) >> 16);
    };
    float acc[2][16] = {};  // [half][column]
    for (int f = 0; f < 4; ++f)
      for (int q = 0; q < 8; ++q) {
        const uint32_t a_pair = bf16_pair(scaled(f, 2 * q), scaled(f, 2 * q + 1));
        for (int j = 0; j < 16; ++j) {
          const uint32_t b_pair = bf16_pair(integer_bf16(t8, f, 2 * q, j), integer_bf16(t8, f, 2 * q + 1, j));
          acc[f % 2][j] = dpbf16_lane(acc[f % 2][j], a_pair, b_pair);
        }
      }
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 16; ++j) out[h * 16 + j] = out[h * 16 + j] + acc[h][j];
  });
}

// avx512-bf16's small-M kernel on bfloat8_b and bfloat4_b (bfp_rows_avx512bf16.hpp, bfp_tile_dp)
// lane by lane: the same bfloat16 words, the same chains and the same order of sums.
void small_m_bf16(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c,
                  int64_t ldc) {
  if (m >= 3) return small_m_bf16_scaled(m, a, lda, b, nt_begin, nt_end, c, ldc);
  const int chains = m <= 2 ? 2 : 1;
  const bool bfp8 = b.dtype == DataType::BFLOAT8_B;
  // One code of face f's row r as the words the kernel builds: the sign in bit 15, the block's
  // exponent in bits 14..7, the magnitude in bits 6..0 (bfloat8_b) or 6..4 (bfloat4_b, whose row
  // holds column j in the low nibble of byte j / 2 when j is even, the high one when odd).
  auto word = [bfp8](const uint8_t* t8, int f, int r, int j) {
    const uint32_t exponent = uint32_t{t8[f * 16 + r]} << 7;
    if (bfp8) {
      const uint8_t code = t8[64 + (f * 16 + r) * 16 + j];
      return static_cast<uint16_t>((code & 0x80u) << 8 | exponent | (code & 0x7Fu));
    }
    const uint32_t code = (t8[64 + (f * 16 + r) * 8 + j / 2] >> (j % 2 * 4)) & 0xFu;
    return static_cast<uint16_t>((code & 0x8u) << 12 | exponent | (code & 0x7u) << 4);
  };
  each_tile_and_row(m, a, lda, b, nt_begin, nt_end, c, ldc, [&](const uint8_t* t8, const float* ak, float* out) {
    float with_m[2][2][16] = {}, without_m[2][2][16] = {};  // [half][chain][column]
    for (int f = 0; f < 4; ++f)
      for (int q = 0; q < 8; ++q) {
        const int k = (f / 2) * 16 + 2 * q;
        const uint32_t a_pair = bf16_pair(static_cast<uint16_t>(to_bits(ak[k]) >> 16),
                                          static_cast<uint16_t>(to_bits(ak[k + 1]) >> 16));
        for (int j = 0; j < 16; ++j) {
          const uint16_t even = word(t8, f, 2 * q, j), odd = word(t8, f, 2 * q + 1, j);
          float& hi = with_m[f % 2][q % chains][j];
          float& lo = without_m[f % 2][q % chains][j];
          hi = dpbf16_lane(hi, a_pair, bf16_pair(even, odd));
          lo = dpbf16_lane(lo, a_pair, bf16_pair(even & 0xFF80u, odd & 0xFF80u));
        }
      }
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 16; ++j) {
        float sum = with_m[h][0][j] - without_m[h][0][j];
        for (int ch = 1; ch < chains; ++ch) sum = sum + (with_m[h][ch][j] - without_m[h][ch][j]);
        out[h * 16 + j] = out[h * 16 + j] + (sum + sum);
      }
  });
}

}  // namespace

float dpbf16_lane(float acc, uint32_t a_pair, uint32_t b_pair) {
  acc = flush_denormal(acc);
  acc = flush_denormal(std::fma(bf16_high(a_pair), bf16_high(b_pair), acc));
  return flush_denormal(std::fma(bf16_low(a_pair), bf16_low(b_pair), acc));
}

void tdpbf16ps_row(float* c, int n_cols, const uint32_t* a_row, int k_pairs, const uint32_t* b, int64_t b_stride) {
  constexpr int kMaxCols = 16;  // a tile row: 64 bytes
  float even[kMaxCols] = {}, odd[kMaxCols] = {};
  for (int k = 0; k < k_pairs; ++k)
    for (int n = 0; n < n_cols; ++n) {
      const uint32_t bp = b[k * b_stride + n];
      even[n] = flush_denormal(std::fma(bf16_low(a_row[k]), bf16_low(bp), even[n]));
      odd[n] = flush_denormal(std::fma(bf16_high(a_row[k]), bf16_high(bp), odd[n]));
    }
  for (int n = 0; n < n_cols; ++n) c[n] = flush_denormal(flush_denormal(c[n]) + flush_denormal(even[n] + odd[n]));
}

const KernelSet& emulated_bf16_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = portable_kernel_set();
    s.bf16_micro_kernel = micro_kernel;
    s.bf16_micro_kernel_from_tiles = micro_kernel_from_tiles;
    s.bf16_max_mr = 14;
    s.bf16_path = "bf16-emulated";
    s.decode_tile_bf16_pairs = decode_tile_bf16_pairs;
    s.small_m_bf16 = small_m_bf16;
    s.small_m_bf16_bfloat4 = true;
    s.small_m_bf16_max = 6;  // as avx512-bf16's (bfp_rows_avx512bf16.hpp, kScaledMaxRows)
    s.small_m_bf16_path = "bf16-emulated";
    return s;
  }();
  return set;
}

}  // namespace meshnn::kernels
