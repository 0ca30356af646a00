// The row kernels compiled with the AVX512 flags (CMakeLists.txt: files named *_avx512.cpp); run
// only after the dispatcher checked the CPU.
#include "row_loops.hpp"

namespace meshnn::kernels {

const RowKernelSet& avx512_row_kernels() {
  static const RowKernelSet set{Isa::AVX512, silu_mul_loop, attend_tile_loop<16>};
  return set;
}

}  // namespace meshnn::kernels
