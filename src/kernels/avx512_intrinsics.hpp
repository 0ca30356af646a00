// Internal to src/kernels: <immintrin.h> for the files compiled with AVX-512 flags, with GCC 12's
// false "uninitialized" warnings from inside avx512fintrin.h / avx512vbmiintrin.h turned off
// (their _mm512_undefined_* values are "don't care" sources). The pragmas hold for the rest of
// the including file, which is what they are for.
#pragma once

#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
