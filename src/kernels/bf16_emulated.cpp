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

}  // namespace

float dpbf16_lane(float acc, uint32_t a_pair, uint32_t b_pair) {
  acc = flush_denormal(acc);
  acc = flush_denormal(std::fma(bf16_high(a_pair), bf16_high(b_pair), acc));
  return flush_denormal(std::fma(bf16_low(a_pair), bf16_low(b_pair), acc));
}

const KernelSet& emulated_bf16_kernel_set() {
  static const KernelSet set = [] {
    KernelSet s = portable_kernel_set();
    s.bf16_micro_kernel = micro_kernel;
    s.bf16_max_mr = 14;
    s.bf16_path = "bf16-emulated";
    s.decode_tile_bf16_pairs = decode_tile_bf16_pairs;
    return s;
  }();
  return set;
}

}  // namespace meshnn::kernels
