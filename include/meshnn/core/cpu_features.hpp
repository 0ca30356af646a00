// Which instruction set the hot loops use (the matmul kernels, the collectives' combines): the
// best this CPU and OS support, capped by MESHNN_KERNELS=portable|avx2|avx512|avx512-bf16|amx-bf16 (read
// once per process; a request the CPU cannot run falls back to the best supported set below it)
// or by set_isa_cap() in tests and benchmarks.
//
// The levels are ordered: each includes the ones below it. AVX512_BF16 is AVX512 plus vdpbf16ps
// (bfloat16 products accumulated in float32, two per lane and instruction); it changes only the
// matmuls whose activations are bfloat16 and whose weights decode exactly to bfloat16 (see
// ops/matmul.hpp). AMX_BF16 is AVX512_BF16 plus Intel's AMX tiles (tdpbf16ps, a 16x32 by 32x16
// bfloat16 product per instruction) for those same matmuls' blocked path; Linux hands a process
// the tiles' register state only on request (arch_prctl ARCH_REQ_XCOMP_PERM), made once by
// best_supported_isa(): refused, the level is not supported. Capping at avx512 keeps float32 math
// everywhere.
#pragma once

namespace meshnn {

enum class Isa { PORTABLE = 0, AVX2 = 1, AVX512 = 2, AVX512_BF16 = 3, AMX_BF16 = 4 };

const char* to_string(Isa isa);
Isa best_supported_isa();  // what this CPU (and OS) can run
// best_supported_isa() capped by MESHNN_KERNELS and by set_isa_cap().
Isa active_isa();
// Process-wide cap for tests and benchmarks (overrides MESHNN_KERNELS); reset_isa_cap() undoes it.
void set_isa_cap(Isa isa);
void reset_isa_cap();

}  // namespace meshnn
