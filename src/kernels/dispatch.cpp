// The kernel sets, by instruction set (which one runs is core/cpu_features' choice).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {


const KernelSet& kernel_set(Isa isa) {
  switch (isa) {
    case Isa::AMX_BF16:
      return amx_bf16_kernel_set();
    case Isa::AVX512_BF16:
      return avx512_bf16_kernel_set();
    case Isa::AVX512:
      return avx512_kernel_set();
    case Isa::AVX2:
      return avx2_kernel_set();
    default:
      return portable_kernel_set();
  }
}

float block_float_scale(int exponent, int mantissa_bits) {
  return std::ldexp(1.0f, exponent - 127 - (mantissa_bits - 1));
}

const float* block_float_scale_table(DataType dtype) {
  struct Tables {
    float w7[256], w3[256];
    Tables() {
      for (int e = 0; e < 256; ++e) {
        w7[e] = block_float_scale(e, 7);
        w3[e] = block_float_scale(e, 3);
      }
    }
  };
  static const Tables tables;
  return dtype == DataType::BFLOAT4_B ? tables.w3 : tables.w7;
}

}  // namespace meshnn::kernels
