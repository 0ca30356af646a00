// MESHNN_VECTOR_CLONES before a function: the compiler builds it three times, for AVX-512
// (x86-64-v4), AVX2 and the baseline, and the loader picks the one this CPU runs (GCC's and
// Clang's target_clones, an ifunc). For plain loops the compiler vectorises by itself, where a
// kernel of its own per instruction set (src/kernels/) would be more code than the loop. Elsewhere
// than x86-64 the function is built once.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#define MESHNN_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define MESHNN_VECTOR_CLONES
#endif
