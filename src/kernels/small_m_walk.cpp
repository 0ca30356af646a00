// The small-M kernels' walk over B (kernels/matmul_kernels.hpp): chosen per CPU vendor, overridable.
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "meshnn/kernels/matmul_kernels.hpp"

namespace meshnn::kernels {

namespace {

std::atomic<int> g_walk_override{-1};  // -1: none set by set_small_m_walk

SmallMWalk default_walk() {
  // Read once: the kernels ask on every call, and getenv scans the whole environment.
  static const SmallMWalk walk = [] {
    if (const char* env = std::getenv("MESHNN_SMALL_M_WALK")) {
      const std::string_view v(env);
      if (v == "linear") return SmallMWalk::LINEAR;
      if (v == "rows") return SmallMWalk::ROWS_IN_FLIGHT;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_is("amd")) return SmallMWalk::LINEAR;
#endif
    return SmallMWalk::ROWS_IN_FLIGHT;
  }();
  return walk;
}

}  // namespace

SmallMWalk small_m_walk() {
  const int forced = g_walk_override.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<SmallMWalk>(forced) : default_walk();
}

const char* to_string(SmallMWalk walk) { return walk == SmallMWalk::LINEAR ? "linear" : "rows"; }

void set_small_m_walk(SmallMWalk walk) { g_walk_override.store(static_cast<int>(walk), std::memory_order_relaxed); }
void reset_small_m_walk() { g_walk_override.store(-1, std::memory_order_relaxed); }

}  // namespace meshnn::kernels
