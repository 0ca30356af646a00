// Run-time choice of the instruction set the kernels and the collectives' combines use.
#include "meshnn/core/cpu_features.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace meshnn {

namespace {

// -1: no cap set by set_isa_cap().
std::atomic<int> g_isa_cap{-1};

// Read once per process: active_isa() runs on every combine of a collective, and getenv scans the
// whole (launcher-sized) environment; it was 3-9% of an 8-byte two-rank all_reduce.
Isa env_cap() {
  static const Isa cap = [] {
    const char* env = std::getenv("MESHNN_KERNELS");
    if (env == nullptr) return Isa::AMX_BF16;
    const std::string_view v(env);
    if (v == "portable") return Isa::PORTABLE;
    if (v == "avx2") return Isa::AVX2;
    if (v == "avx512") return Isa::AVX512;
    if (v == "avx512-bf16") return Isa::AVX512_BF16;
    return Isa::AMX_BF16;
  }();
  return cap;
}

// AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22), the OS saving the tile state (XCR0
// bits 17 and 18), and Linux's permission for this process to use it (requested here; the kernel
// then enlarges each thread's save area on its first tile instruction).
bool amx_bf16_usable() {
#if defined(__x86_64__) && defined(__linux__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 24)) || !(edx & (1u << 22))) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
  unsigned xcr0_low = 0, xcr0_high = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  if ((xcr0_low & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
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
    case Isa::AMX_BF16:
      return "amx-bf16";
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
    {
      if (!__builtin_cpu_supports("avx512bf16")) return Isa::AVX512;
      return amx_bf16_usable() ? Isa::AMX_BF16 : Isa::AVX512_BF16;
    }
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
