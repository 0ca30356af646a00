// Internal to src/kernels: the AVX2 one-row kernel for block-float weights.
#pragma once

#include <cstdint>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels::avx2 {

// c[nt_begin*32 .. nt_end*32) = a[0 .. Kp) * B over those tile columns, for B in bfloat8_b or
// bfloat4_b (a has zeros beyond K). Overwrites c. Call only when the CPU runs AVX2 and FMA.
void gemv_block_float(const float* a, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c);

}  // namespace meshnn::kernels::avx2
