// AVX-512 bodies of combine_vectorized (vector_combine.hpp). Compiled with -mavx512f and friends;
// runs only after the dispatcher checked the CPU.
#include <immintrin.h>

#include "vector_combine.hpp"
// GCC 12's unmasked _mm512_{max,min}_ep{i,u}32 pass an _mm512_undefined value as the mask-merge
// source and then warn about it (GCC bug 105593, fixed in 12.3).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "vector_combine_loops.hpp"

namespace meshnn::ccl::detail {
namespace {

struct F32 {
  using Elem = float;
  using V = __m512;
  static constexpr int kWidth = 16;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm512_stream_ps(p, v); }
  static V sum(V a, V b) { return _mm512_add_ps(a, b); }
  // max_ps(x, y) = x > y ? x : y, so max_ps(b, a) = b > a ? b : a.
  static V max(V a, V b) { return _mm512_max_ps(b, a); }
  static V min(V a, V b) { return _mm512_min_ps(b, a); }
};

template <class T, bool is_signed>
struct Int32Lanes {
  using Elem = T;
  using V = __m512i;
  static constexpr int kWidth = 16;
  static V load(const T* p) { return _mm512_loadu_si512(p); }
  static void store(T* p, V v) { _mm512_storeu_si512(p, v); }
  static void stream(T* p, V v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
  static V sum(V a, V b) { return _mm512_add_epi32(a, b); }
  static V max(V a, V b) { return is_signed ? _mm512_max_epi32(a, b) : _mm512_max_epu32(a, b); }
  static V min(V a, V b) { return is_signed ? _mm512_min_epi32(a, b) : _mm512_min_epu32(a, b); }
};
using I32 = Int32Lanes<int32_t, true>;
using U32 = Int32Lanes<uint32_t, false>;

}  // namespace

void combine_avx512(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count,
                    ResultStores stores) {
  combine_any<F32, I32, U32>(type, op, stores, a, b, out, count);
}

}  // namespace meshnn::ccl::detail
