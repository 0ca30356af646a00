// The portable row kernels and the choice between the instruction sets.
#include "meshnn/kernels/row_kernels.hpp"

#include "row_loops.hpp"

namespace meshnn::kernels {

const RowKernelSet& portable_row_kernels() {
  static const RowKernelSet set{Isa::PORTABLE, silu_mul_loop, attend_tile_loop<4>, transpose_tile_loop<float>,
                                transpose_tile_loop<uint16_t>, attend_tile_bf16_loop<4>};
  return set;
}

const RowKernelSet& row_kernel_set() {
  // The levels above AVX512 add matmul instructions only: their row kernels are AVX512's.
  const Isa isa = active_isa();
  if (isa >= Isa::AVX512) return avx512_row_kernels();
  if (isa == Isa::AVX2) return avx2_row_kernels();
  return portable_row_kernels();
}

}  // namespace meshnn::kernels
