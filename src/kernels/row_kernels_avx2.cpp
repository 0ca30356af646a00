// The row kernels compiled with the AVX2 flags (CMakeLists.txt: files named *_avx2.cpp); run
// only after the dispatcher checked the CPU.
#include "row_loops.hpp"

namespace meshnn::kernels {

const RowKernelSet& avx2_row_kernels() {
  static const RowKernelSet set{Isa::AVX2, silu_mul_loop, attend_tile_loop<8>, transpose_tile_loop<float>,
                                      transpose_tile_loop<uint16_t>};
  return set;
}

}  // namespace meshnn::kernels
