#include "meshnn/core/memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace meshnn {

namespace {

// Large buffers are mapped from the kernel directly instead of taken from malloc. glibc raises its
// mmap threshold (up to 32 MiB) each time a mapped chunk is freed; after that, large requests come
// from the heap, whose pages were faulted in as 4 KiB pages and stay so whatever madvise says.
// Four interleaved A/B runs of meshnn-ccl-bench on 2 ranks (Zen 5), all_reduce after the
// 16 MiB all_gather and reduce_scatter rows: 4 MiB 397-485 us through malloc against 322-450 us
// in own mappings, 8 MiB 765-1195 us against 700-999 us; MPI's time the same either way. (Fixing
// the threshold with mallopt instead would also reach MPI's own per-call temporaries.)
struct MappedBuffers {
  std::mutex mutex;
  std::unordered_map<const std::byte*, size_t> bytes_of;  // mapping length by start address
};
MappedBuffers& mapped_buffers() {
  // Never destroyed: tensors in static storage may be released after it would be.
  static auto* m = new MappedBuffers;
  return *m;
}

std::byte* map_huge_page_aligned(size_t bytes) {
  constexpr size_t kPage = 4096;
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) return nullptr;
  // Whole small pages: a tail shorter than a huge page stays in small ones rather than costing up
  // to 2 MiB of memory per buffer.
  const size_t length = (bytes + kPage - 1) / kPage * kPage;
  // Map a huge page more than needed, then return the slack before and after the aligned range.
  const size_t padded = length + kHugePageBytes;
  void* base = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(base);
  const uintptr_t aligned = (start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > start) munmap(base, aligned - start);
  if (const uintptr_t end = start + padded; end > aligned + length)
    munmap(reinterpret_cast<void*>(aligned + length), end - (aligned + length));
  auto* p = reinterpret_cast<std::byte*>(aligned);
  // Advice only: should it fail, the buffer still works in small pages.
  (void)madvise(p, length, MADV_HUGEPAGE);
  MappedBuffers& m = mapped_buffers();
  std::lock_guard lock(m.mutex);
  m.bytes_of.emplace(p, length);
  return p;
}

}  // namespace

bool huge_pages_available() {
  static const bool available = [] {
    std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char modes[128] = {};
    const bool read = std::fgets(modes, sizeof modes, f) != nullptr;
    std::fclose(f);
    return read && std::strstr(modes, "[never]") == nullptr;
  }();
  return available;
}

std::byte* allocate_buffer(size_t bytes) {
  // Without huge pages a fresh mapping costs a fault per 4 KiB page on every allocation, which
  // malloc's reuse of its heap avoids: there, large buffers stay with malloc.
  if (bytes >= kHugePageBytes && huge_pages_available()) return map_huge_page_aligned(bytes);
  constexpr size_t kLine = 64;
  const size_t rounded = bytes == 0 ? kLine : (bytes + kLine - 1) / kLine * kLine;
  const size_t alignment = rounded >= kHugePageBytes ? kHugePageBytes : kLine;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0) return nullptr;
  return static_cast<std::byte*>(p);
}

void release_buffer(std::byte* p) {
  if (p == nullptr) return;
  size_t length = 0;
  // Own mappings all start on a huge-page boundary: other buffers (every small tensor) skip the
  // lock and the lookup.
  if (reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0) {
    MappedBuffers& m = mapped_buffers();
    std::lock_guard lock(m.mutex);
    if (auto it = m.bytes_of.find(p); it != m.bytes_of.end()) {
      length = it->second;
      m.bytes_of.erase(it);
    }
  }
  if (length) {
    munmap(p, length);
  } else {
    std::free(p);
  }
}

namespace {

bool plain_memcpy() {
  static const bool plain = [] {
    const char* v = std::getenv("MESHNN_PLAIN_MEMCPY");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return plain;
}

bool use_string_moves() {
#if defined(__x86_64__)
  static const bool use = [] {
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
  if (bytes <= kCopyPieceBytes || plain_memcpy()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if defined(__x86_64__)
  if (bytes >= kLargeCopyBytes && use_string_moves()) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  for (size_t offset = 0; offset < bytes; offset += kCopyPieceBytes)
    std::memcpy(d + offset, s + offset, std::min(kCopyPieceBytes, bytes - offset));
}

}  // namespace meshnn
