#include "meshnn/core/memory.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace meshnn {

std::byte* allocate_buffer(size_t bytes) {
  constexpr size_t kLine = 64;
  const size_t rounded = bytes == 0 ? kLine : (bytes + kLine - 1) / kLine * kLine;
  const size_t alignment = rounded >= kHugePageBytes ? kHugePageBytes : kLine;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0) return nullptr;
  // Advice only: without THP support the call fails and the buffer is still good.
  if (alignment == kHugePageBytes) (void)madvise(p, rounded, MADV_HUGEPAGE);
  return static_cast<std::byte*>(p);
}

void release_buffer(std::byte* p) { std::free(p); }

namespace {

bool use_string_moves() {
#if defined(__x86_64__)
  static const bool use = [] {
    if (const char* v = std::getenv("MESHNN_PLAIN_MEMCPY"); v && *v && std::strcmp(v, "0") != 0) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    return (ebx & (1u << 9)) != 0;  // CPUID.(EAX=7,ECX=0):EBX bit 9 = ERMS
  }();
  return use;
#else
  return false;
#endif
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= kLargeCopyBytes && use_string_moves()) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace meshnn
