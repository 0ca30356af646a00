// Hot loops of the LLM ops that are not matmuls (internal to meshnn; the ops are the public entry):
// the SiLU-gated product of swiglu and attention's pass over one tile row of cached keys and
// values. Once the matmuls take the wide and bf16 paths, these decide what is left of a decode
// step and of a prefill, and as scalar baseline-x86-64 loops they had become a large part of both
// (docs/performance.md).
//
// Written once (src/kernels/row_loops.hpp: loops for the compiler to vectorise, and vectors of the
// register width where it would not) and compiled per instruction set like the matmul kernels:
// portable, AVX2 + FMA, AVX-512, chosen by active_isa() (MESHNN_KERNELS and set_isa_cap() apply).
// A set always sums in the same order, so results repeat bit for bit; the sets differ from each
// other in the last bits (FMA contraction, and attention's heads grouped by the vector width).
#pragma once

#include <cstdint>

#include "meshnn/core/cpu_features.hpp"

namespace meshnn::kernels {

struct RowKernelSet {
  Isa isa;
  // out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x) with e^x to within 2 ulp
  // (silu(-inf) = -0, as apply_activation gives). out may alias gate or up.
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  // `heads` queries (q: heads x d, one after the other) against one tile row of 32 cached
  // positions, of which [first, last] (0 <= first <= last < 32) are attended: for each head, scores
  // s_j = scale * (q . k_j), folded into its online-softmax state: with m' = max(running_max,
  // max_j s_j), acc = acc * e^(running_max - m') + sum_j e^(s_j - m') v_j and running_sum likewise.
  // keys_t holds the keys transposed, [d][32] (row i: dim i of the 32 positions); values
  // [32][values_stride]; acc heads x d; running_max, running_sum one per head. The heads share the
  // key and value loads (the query heads of one KV head, as grouped-query attention reads them).
  void (*attend_tile)(const float* q, int64_t heads, const float* keys_t, const float* values, int64_t d,
                      int64_t values_stride, int first, int last, float scale, float* acc, float* running_max,
                      float* running_sum);
  // One 32x32 tile in TILE order (four 16x16 faces, row-major inside; faces 0-3 cover rows 0-15
  // then 16-31, columns 0-15 then 16-31 of each) transposed into out[32][32]: out[c * 32 + r] =
  // element (r, c). attend_tile's keys_t is built from the KV cache's key tiles with it. The
  // _bf16 form reads stored bfloat16 values (exactly: a float's top 16 bits).
  void (*transpose_tile)(const float* tile, float* out);
  void (*transpose_tile_bf16)(const uint16_t* tile, float* out);
  // attend_tile with the values read straight from a bfloat16 cache: value_tiles is the tile row's
  // ceil(d / 32) tiles in TILE order, one after the other (tile c: dims 32c .. 32c + 31), each value
  // widened in registers as it is used. The same bits as attend_tile on those tiles widened to
  // float rows; a pass over the tiles and a buffer less (docs/performance.md, session 30).
  void (*attend_tile_bf16)(const float* q, int64_t heads, const float* keys_t, const uint16_t* value_tiles, int64_t d,
                           int first, int last, float scale, float* acc, float* running_max, float* running_sum);
};

const RowKernelSet& row_kernel_set();  // for active_isa()

// Per instruction set (src/kernels/row_kernels*.cpp); call the vector ones only on a CPU that has
// them.
const RowKernelSet& portable_row_kernels();
const RowKernelSet& avx2_row_kernels();
const RowKernelSet& avx512_row_kernels();

}  // namespace meshnn::kernels
