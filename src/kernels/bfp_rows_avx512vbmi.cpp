// avx512-bf16's small-M kernel on bfloat8_b and bfloat4_b weights with AVX512-VBMI's byte permute
// (bfp_rows_avx512bf16.hpp). Compiled with -mavx512vbmi besides the AVX512-BF16 flags
// (CMakeLists.txt: files named *_avx512vbmi.cpp); avx512_bf16_kernel_set() takes it only where the
// CPU has VBMI (AMD Zen 4 and later, Intel Ice Lake and later; not Cooper Lake).
#include "bfp_rows_avx512bf16.hpp"

namespace meshnn::kernels {

void small_m_bf16_vbmi(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                       float* c, int64_t ldc) {
  small_m_bf16<true>(m, a, lda, b, nt_begin, nt_end, c, ldc);
}

}  // namespace meshnn::kernels
