// Run-time choice of the instruction set the kernels and the collectives' combines use.
#include "meshnn/core/cpu_features.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

namespace meshnn {

namespace {

// -1: no cap set by set_isa_cap().
std::atomic<int> g_isa_cap{-1};

// Read once per process: active_isa() runs on every combine of a collective, and getenv scans the
// whole (launcher-sized) environment; it was 3-9% of an 8-byte two-rank all_reduce.
Isa env_cap() {
  static const Isa cap = [] {
    const char* env = std::getenv("MESHNN_KERNELS");
    if (env == nullptr) return Isa::AVX512_BF16;
    const std::string_view v(env);
    if (v == "portable") return Isa::PORTABLE;
    if (v == "avx2") return Isa::AVX2;
    if (v == "avx512") return Isa::AVX512;
    return Isa::AVX512_BF16;
  }();
  return cap;
}

}  // namespace

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::PORTABLE:
      return "portable";
    case Isa::AVX2:
      return "avx2";
    case Isa::AVX512:
      return "avx512";
    case Isa::AVX512_BF16:
      return "avx512-bf16";
  }
  return "?";
}

Isa best_supported_isa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // __builtin_cpu_supports also checks that the OS saves the wider register state (XCR0).
  static const Isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return __builtin_cpu_supports("avx512bf16") ? Isa::AVX512_BF16 : Isa::AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      return Isa::AVX2;
    return Isa::PORTABLE;
  }();
  return best;
#else
  return Isa::PORTABLE;
#endif
}

Isa active_isa() {
  const int cap = g_isa_cap.load(std::memory_order_relaxed);
  const Isa limit = cap >= 0 ? static_cast<Isa>(cap) : env_cap();
  return static_cast<Isa>(std::min(static_cast<int>(limit), static_cast<int>(best_supported_isa())));
}

void set_isa_cap(Isa isa) { g_isa_cap.store(static_cast<int>(isa), std::memory_order_relaxed); }
void reset_isa_cap() { g_isa_cap.store(-1, std::memory_order_relaxed); }

}  // namespace meshnn
