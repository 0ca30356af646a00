// Internal to vector_combine_avx2.cpp and vector_combine_avx512.cpp: the loop and the
// (type, op, stores) dispatch both share. The including file first defines, in an anonymous
// namespace of meshnn::ccl::detail, three vector types F32, I32 and U32, each with
//   using Elem; using V; static constexpr int kWidth;
//   static V load(const Elem*); static void store(Elem*, V);
//   static void stream(Elem*, V);  // needs kWidth*4-byte alignment
//   static V sum(V a, V b); static V max(V a, V b); static V min(V a, V b);
// where max/min keep Reduction's operand rule: max(a, b) = b > a ? b : a (a NaN in `a` stays).
// Everything is in an anonymous namespace: each including file is built with its own instruction
// flags, so nothing here may be shared between them.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "meshnn/ccl/reduce.hpp"

namespace meshnn::ccl::detail {
namespace {

enum class Fold { SUM, MAX, MIN };

template <class Vec, Fold fold>
inline typename Vec::Elem scalar_fold(typename Vec::Elem a, typename Vec::Elem b) {
  using T = typename Vec::Elem;
  if constexpr (fold == Fold::MAX) return b > a ? b : a;
  else if constexpr (fold == Fold::MIN) return b < a ? b : a;
  else if constexpr (std::is_same_v<T, float>) return a + b;
  else return static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));  // integers wrap
}

template <class Vec, Fold fold>
inline typename Vec::V vector_fold(typename Vec::V a, typename Vec::V b) {
  if constexpr (fold == Fold::MAX) return Vec::max(a, b);
  else if constexpr (fold == Fold::MIN) return Vec::min(a, b);
  else return Vec::sum(a, b);
}

template <class Vec, Fold fold, bool streaming>
void fold_loop(const void* a_in, const void* b_in, void* out_, int64_t n) {
  using T = typename Vec::Elem;
  const T* a = static_cast<const T*>(a_in);
  const T* b = static_cast<const T*>(b_in);
  T* out = static_cast<T*>(out_);
  int64_t i = 0;
  // Streaming stores need an aligned destination: scalar until there (all the way if never).
  constexpr uintptr_t kAlign = sizeof(T) * Vec::kWidth;
  if constexpr (streaming)
    for (; i < n && reinterpret_cast<uintptr_t>(out + i) % kAlign != 0; ++i) out[i] = scalar_fold<Vec, fold>(a[i], b[i]);
  for (; i + Vec::kWidth <= n; i += Vec::kWidth) {
    const typename Vec::V v = vector_fold<Vec, fold>(Vec::load(a + i), Vec::load(b + i));
    if constexpr (streaming) Vec::stream(out + i, v);
    else Vec::store(out + i, v);
  }
  for (; i < n; ++i) out[i] = scalar_fold<Vec, fold>(a[i], b[i]);
  if constexpr (streaming) _mm_sfence();  // weakly ordered: publish them before anyone is told
}

template <class Vec, Fold fold>
void fold_with(ResultStores stores, const void* a, const void* b, void* out, int64_t n) {
  if (stores == ResultStores::STREAMING) fold_loop<Vec, fold, true>(a, b, out, n);
  else fold_loop<Vec, fold, false>(a, b, out, n);
}

template <class Vec>
void combine_op(ReduceOp op, ResultStores stores, const void* a, const void* b, void* out, int64_t n) {
  switch (op) {
    case ReduceOp::MAX: fold_with<Vec, Fold::MAX>(stores, a, b, out, n); break;
    case ReduceOp::MIN: fold_with<Vec, Fold::MIN>(stores, a, b, out, n); break;
    default: fold_with<Vec, Fold::SUM>(stores, a, b, out, n); break;  // SUM, and MEAN before its division
  }
}

template <class F32, class I32, class U32>
void combine_any(ElementType type, ReduceOp op, ResultStores stores, const void* a, const void* b, void* out, int64_t n) {
  switch (type) {
    case ElementType::I32: combine_op<I32>(op, stores, a, b, out, n); break;
    case ElementType::U32: combine_op<U32>(op, stores, a, b, out, n); break;
    default: combine_op<F32>(op, stores, a, b, out, n); break;
  }
}

}  // namespace
}  // namespace meshnn::ccl::detail
