// Which instruction set the hot loops use (the matmul kernels, the collectives' combines): the
// best this CPU and OS support, capped by MESHNN_KERNELS=portable|avx2|avx512 (read once per
// process; a request the CPU cannot run falls back to the best supported set below it) or by
// set_isa_cap() in tests and benchmarks.
#pragma once

namespace meshnn {

enum class Isa { PORTABLE = 0, AVX2 = 1, AVX512 = 2 };

const char* to_string(Isa isa);
Isa best_supported_isa();  // what this CPU (and OS) can run
// best_supported_isa() capped by MESHNN_KERNELS and by set_isa_cap().
Isa active_isa();
// Process-wide cap for tests and benchmarks (overrides MESHNN_KERNELS); reset_isa_cap() undoes it.
void set_isa_cap(Isa isa);
void reset_isa_cap();

}  // namespace meshnn
