// AVX2 bodies of combine_vectorized (vector_combine.hpp). Compiled with -mavx2 -mfma;
// runs only after the dispatcher checked the CPU.
#include <immintrin.h>

#include "vector_combine.hpp"
#include "vector_combine_loops.hpp"

namespace meshnn::ccl::detail {
namespace {

struct F32 {
  using Elem = float;
  using V = __m256;
  static constexpr int kWidth = 8;
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void stream(float* p, V v) { _mm256_stream_ps(p, v); }
  static V sum(V a, V b) { return _mm256_add_ps(a, b); }
  // max_ps(x, y) = x > y ? x : y, so max_ps(b, a) = b > a ? b : a.
  static V max(V a, V b) { return _mm256_max_ps(b, a); }
  static V min(V a, V b) { return _mm256_min_ps(b, a); }
};

template <class T, bool is_signed>
struct Int32Lanes {
  using Elem = T;
  using V = __m256i;
  static constexpr int kWidth = 8;
  static V load(const T* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store(T* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
  static void stream(T* p, V v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
  static V sum(V a, V b) { return _mm256_add_epi32(a, b); }
  static V max(V a, V b) { return is_signed ? _mm256_max_epi32(a, b) : _mm256_max_epu32(a, b); }
  static V min(V a, V b) { return is_signed ? _mm256_min_epi32(a, b) : _mm256_min_epu32(a, b); }
};
using I32 = Int32Lanes<int32_t, true>;
using U32 = Int32Lanes<uint32_t, false>;

}  // namespace

void combine_avx2(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count,
                  ResultStores stores) {
  combine_any<F32, I32, U32>(type, op, stores, a, b, out, count);
}

}  // namespace meshnn::ccl::detail
