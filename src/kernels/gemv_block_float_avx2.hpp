// Internal to src/kernels: the AVX2 one-row (and few-row) kernels for block-float weights.
#pragma once

#include <cstdint>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels::avx2 {

// c[nt_begin*32 .. nt_end*32) = a[0 .. Kp) * B over those tile columns, for B in bfloat8_b or
// bfloat4_b (a has zeros beyond K). Overwrites c. Call only when the CPU runs AVX2 and FMA.
void gemv_block_float(const float* a, const TileMatrix& b, int64_t nt_begin, int64_t nt_end, float* c);

// The same for m = 2 or 3 rows of A (row i at a + i * lda, its output at c + i * ldc), B in
// bfloat8_b: the weights decoded once for all the rows.
void gemv_block_float_rows(int m, const float* a, int64_t lda, const TileMatrix& b, int64_t nt_begin, int64_t nt_end,
                           float* c, int64_t ldc);

}  // namespace meshnn::kernels::avx2
