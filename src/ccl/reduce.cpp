#include "meshnn/ccl/reduce.hpp"

#include <algorithm>
#include <cstring>

#include "meshnn/core/cpu_features.hpp"
#include "meshnn/tensor/bfloat16.hpp"
#include "vector_combine.hpp"

namespace meshnn::ccl {
namespace {

// Integer sums wrap (computed in uint32 so overflow is defined); max/min compare in the real type.
template <class T>
struct Ops {
  static T sum(T a, T b) {
    if constexpr (std::is_same_v<T, float>) {
      return a + b;
    } else {
      return static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
    }
  }
  // NaN handling is fixed by operand order: a NaN already in `a` stays.
  static T max(T a, T b) { return b > a ? b : a; }
  static T min(T a, T b) { return b < a ? b : a; }
};

// The three loops every combine reduces to; Load/Store convert the wire format.
template <class T, class F, class LoadA, class LoadB, class Store>
void combine_loop(int64_t n, F f, LoadA a, LoadB b, Store out) {
  for (int64_t i = 0; i < n; ++i) out(i, f(a(i), b(i)));
}

template <class T, class Fn>
void dispatch_op(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::MAX: fn([](T a, T b) { return Ops<T>::max(a, b); }); break;
    case ReduceOp::MIN: fn([](T a, T b) { return Ops<T>::min(a, b); }); break;
    default: fn([](T a, T b) { return Ops<T>::sum(a, b); }); break;
  }
}

template <class Fn>
void dispatch_type(ElementType type, Fn&& fn) {
  switch (type) {
    case ElementType::I32: fn(int32_t{}); break;
    case ElementType::U32: fn(uint32_t{}); break;
    default: fn(float{}); break;
  }
}

}  // namespace

void Reduction::to_wire(const void* own, void* wire, int64_t count) const {
  if (!bf16_wire) {
    std::memcpy(wire, own, compute_bytes(count));
    return;
  }
  float_to_bfloat16(std::span(static_cast<const float*>(own), count), std::span(static_cast<uint16_t*>(wire), count));
}

void Reduction::combine_into_wire(void* wire, const void* own, int64_t count) const {
  if (!bf16_wire && detail::combine_vectorized(type, op, wire, own, wire, count, ResultStores::CACHED)) return;
  if (bf16_wire) {
    auto* w = static_cast<uint16_t*>(wire);
    const auto* b = static_cast<const float*>(own);
    dispatch_op<float>(op, [&](auto f) {
      for (int64_t i = 0; i < count; ++i) w[i] = float_to_bfloat16(f(bfloat16_to_float(w[i]), b[i]));
    });
    return;
  }
  dispatch_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* w = static_cast<T*>(wire);
    const auto* b = static_cast<const T*>(own);
    dispatch_op<T>(op, [&](auto f) {
      for (int64_t i = 0; i < count; ++i) w[i] = f(w[i], b[i]);
    });
  });
}

void Reduction::combine_wire_to(const void* wire, const void* own, void* out, int64_t count, ResultStores stores) const {
  if (!bf16_wire && detail::combine_vectorized(type, op, wire, own, out, count, stores)) return;
  if (bf16_wire) {
    const auto* w = static_cast<const uint16_t*>(wire);
    const auto* b = static_cast<const float*>(own);
    auto* o = static_cast<float*>(out);
    dispatch_op<float>(op, [&](auto f) {
      for (int64_t i = 0; i < count; ++i) o[i] = f(bfloat16_to_float(w[i]), b[i]);
    });
    return;
  }
  dispatch_type(type, [&](auto tag) {
    using T = decltype(tag);
    const auto* w = static_cast<const T*>(wire);
    const auto* b = static_cast<const T*>(own);
    auto* o = static_cast<T*>(out);
    dispatch_op<T>(op, [&](auto f) {
      for (int64_t i = 0; i < count; ++i) o[i] = f(w[i], b[i]);
    });
  });
}

void Reduction::accumulate_wire(void* out, const void* wire, int64_t count, ResultStores stores) const {
  if (!bf16_wire && detail::combine_vectorized(type, op, out, wire, out, count, stores)) return;
  if (bf16_wire) {
    const auto* w = static_cast<const uint16_t*>(wire);
    auto* o = static_cast<float*>(out);
    dispatch_op<float>(op, [&](auto f) {
      for (int64_t i = 0; i < count; ++i) o[i] = f(o[i], bfloat16_to_float(w[i]));
    });
    return;
  }
  dispatch_type(type, [&](auto tag) {
    using T = decltype(tag);
    const auto* w = static_cast<const T*>(wire);
    auto* o = static_cast<T*>(out);
    dispatch_op<T>(op, [&](auto f) {
      for (int64_t i = 0; i < count; ++i) o[i] = f(o[i], w[i]);
    });
  });
}

void Reduction::combine_sources(std::span<const void* const> sources, void* out, int64_t count) const {
  if (sources.empty()) return;
  if (sources.size() == 1) {
    std::memcpy(out, sources[0], compute_bytes(count));
    return;
  }
  // Blocked so the running partial stays in L1 while every source streams through once.
  constexpr int64_t kBlock = 2048;
  const size_t elem = compute_bytes(1);
  auto at = [elem](const void* p, int64_t i) { return static_cast<const std::byte*>(p) + i * elem; };
  if (detail::vector_combine_available()) {
    for (int64_t b0 = 0; b0 < count; b0 += kBlock) {
      const int64_t n = std::min(kBlock, count - b0);
      void* ob = static_cast<std::byte*>(out) + b0 * elem;
      detail::combine_vectorized(type, op, at(sources[0], b0), at(sources[1], b0), ob, n, ResultStores::CACHED);
      for (size_t s = 2; s < sources.size(); ++s)
        detail::combine_vectorized(type, op, ob, at(sources[s], b0), ob, n, ResultStores::CACHED);
    }
    return;
  }
  dispatch_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* o = static_cast<T*>(out);
    dispatch_op<T>(op, [&](auto f) {
      for (int64_t b0 = 0; b0 < count; b0 += kBlock) {
        const int64_t n = std::min(kBlock, count - b0);
        const T* s0 = static_cast<const T*>(sources[0]) + b0;
        const T* s1 = static_cast<const T*>(sources[1]) + b0;
        T* ob = o + b0;
        for (int64_t i = 0; i < n; ++i) ob[i] = f(s0[i], s1[i]);
        for (size_t s = 2; s < sources.size(); ++s) {
          const T* sk = static_cast<const T*>(sources[s]) + b0;
          for (int64_t i = 0; i < n; ++i) ob[i] = f(ob[i], sk[i]);
        }
      }
    });
  });
}

void Reduction::finish(void* out, int64_t count) const {
  if (op != ReduceOp::MEAN || group_size == 1) return;
  dispatch_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* o = static_cast<T*>(out);
    // Division (not multiplication by 1/n): correctly rounded, so ones average to exactly one.
    const T n = static_cast<T>(group_size);
    for (int64_t i = 0; i < count; ++i) o[i] = o[i] / n;
  });
}

namespace detail {

bool vector_combine_available() {
  const Isa isa = active_isa();
  return isa >= Isa::AVX2;
}

bool combine_vectorized(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count,
                        ResultStores stores) {
  // The levels above AVX512 add matmul instructions only: their combines are AVX512's.
  const Isa isa = active_isa();
  if (isa >= Isa::AVX512) {
    combine_avx512(type, op, a, b, out, count, stores);
    return true;
  }
  if (isa == Isa::AVX2) {
    combine_avx2(type, op, a, b, out, count, stores);
    return true;
  }
  return false;
}

}  // namespace detail
}  // namespace meshnn::ccl
