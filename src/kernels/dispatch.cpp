// The kernel sets, by instruction set (which one runs is core/cpu_features' choice).
#include <cmath>
#include <cstdio>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

const KernelSet& kernel_set_if_exact(const KernelSet& candidate, const KernelSet& fallback) {
  if (bf16_micro_kernel_exact(candidate)) return candidate;
  std::fprintf(stderr,
               "meshnn: warning: the %s micro-kernel gave wrong results in its self-check on this CPU; bfloat16 "
               "matmuls take %s instead (setting MESHNN_KERNELS to it silences this)\n",
               candidate.bf16_path, fallback.bf16_path);
  return fallback;
}

namespace {

const KernelSet& checked_amx_bf16_kernel_set() {
  static const KernelSet& set = kernel_set_if_exact(amx_bf16_kernel_set(), avx512_bf16_kernel_set());
  return set;
}

}  // namespace

const KernelSet& kernel_set(Isa isa) {
  switch (isa) {
    case Isa::AMX_BF16:
      return checked_amx_bf16_kernel_set();
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
