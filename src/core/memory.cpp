#include "meshnn/core/memory.hpp"

#include "block_pool.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace meshnn {

namespace {

// Large buffers are mapped from the kernel directly instead of taken from malloc. glibc raises its
// mmap threshold (up to 32 MiB) each time a mapped chunk is freed; after that, large requests come
// from the heap, whose pages were faulted in as 4 KiB pages and stay so whatever madvise says;
// meshnn's collectives were slower for it (docs/design-measurements.md §8). (Fixing the threshold
// with mallopt instead would also reach MPI's own per-call temporaries.)
//
// Released own mappings are kept for the next allocation of about their size (a few, bounded
// below), pages faulted in and huge pages intact. Why: a decode step allocates the same outputs
// every token, and a fresh mapping costs its page faults (the kernel zeroing each huge page) on
// first touch and a TLB shootdown of every core running the process on unmap; a decode-sized
// matmul lost about a third of its speed to it (docs/design-measurements.md §8).
constexpr size_t kMaxSpareMappings = 8;
constexpr size_t kSmallPageBytes = size_t{4} << 10;
thread_local bool t_compact = false;  // a CompactBuffersScope is alive on this thread
constexpr size_t kMaxSpareBytes = size_t{256} << 20;      // all kept mappings together
constexpr size_t kMaxSpareMappingBytes = size_t{64} << 20;  // larger ones go back at once

struct MappedBuffers {
  struct Spare {
    std::byte* start;
    size_t length;
  };
  std::mutex mutex;
  std::unordered_map<const std::byte*, size_t> bytes_of;  // mappings in use: length by start
  std::vector<Spare> spares;                              // released, kept; most recent last
  size_t spare_bytes = 0;
};
MappedBuffers& mapped_buffers() {
  // Never destroyed: tensors in static storage may be released after it would be.
  static auto* m = new MappedBuffers;
  return *m;
}

// The most recently released spare of at least `length` bytes and at most `slack` more, now in
// use; nullptr if none. Caller holds m.mutex.
std::byte* take_spare(MappedBuffers& m, size_t length, size_t slack) {
  for (size_t i = m.spares.size(); i-- > 0;) {
    const MappedBuffers::Spare s = m.spares[i];
    if (s.length < length || s.length > length + slack) continue;
    m.spares.erase(m.spares.begin() + static_cast<std::ptrdiff_t>(i));
    m.spare_bytes -= s.length;
    m.bytes_of.emplace(s.start, s.length);
    return s.start;
  }
  return nullptr;
}

// Own mappings cover whole huge pages: a tail in 4 KiB pages would make every transfer from it
// take the slow path (block_pool.cpp), for at most one huge page of memory per buffer. Compact
// ones (CompactBuffersScope) end at the next 4 KiB page instead, and reuse only spares of their
// exact length.
std::byte* map_huge_page_aligned(size_t bytes, bool compact) {
  if (bytes > SIZE_MAX - 2 * kHugePageBytes) return nullptr;
  const size_t unit = compact ? kSmallPageBytes : kHugePageBytes;
  const size_t length = (bytes + unit - 1) / unit * unit;
  MappedBuffers& m = mapped_buffers();
  {
    std::lock_guard lock(m.mutex);
    if (std::byte* spare = take_spare(m, length, compact ? 0 : length / 4)) return spare;
  }
  std::byte* p = detail::map_huge_pages(length);
  if (p == nullptr) return nullptr;
  std::lock_guard lock(m.mutex);
  m.bytes_of.emplace(p, length);
  return p;
}

// If p is an own mapping: kept as a spare, the oldest spares beyond the bounds (and mappings too
// large to keep) unmapped; returns true. Otherwise false, nothing done.
bool release_mapping(MappedBuffers& m, std::byte* p) {
  std::vector<MappedBuffers::Spare> unmap;
  {
    std::lock_guard lock(m.mutex);
    const auto it = m.bytes_of.find(p);
    if (it == m.bytes_of.end()) return false;
    const size_t length = it->second;
    m.bytes_of.erase(it);
    // Inside a CompactBuffersScope (a model loading) what is released is a temporary of the load:
    // kept, it would only add to the job's peak.
    if (length <= kMaxSpareMappingBytes && !t_compact) {
      m.spares.push_back({p, length});
      m.spare_bytes += length;
    } else {
      unmap.push_back({p, length});
    }
    size_t evicted = 0;
    while (m.spares.size() - evicted > kMaxSpareMappings || m.spare_bytes > kMaxSpareBytes) {
      unmap.push_back(m.spares[evicted]);
      m.spare_bytes -= m.spares[evicted].length;
      ++evicted;
    }
    m.spares.erase(m.spares.begin(), m.spares.begin() + static_cast<std::ptrdiff_t>(evicted));
  }
  for (const auto& s : unmap) munmap(s.start, s.length);
  return true;
}

}  // namespace

namespace detail {

std::byte* map_huge_pages(size_t length) {
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
  return p;
}

}  // namespace detail

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

namespace {
std::atomic<uint64_t> g_buffer_allocations{0};
}  // namespace

uint64_t buffer_allocations() { return g_buffer_allocations.load(std::memory_order_relaxed); }

CompactBuffersScope::CompactBuffersScope() : saved_(t_compact) { t_compact = true; }
CompactBuffersScope::~CompactBuffersScope() { t_compact = saved_; }

std::byte* allocate_buffer(size_t bytes) {
  g_buffer_allocations.fetch_add(1, std::memory_order_relaxed);
  // Without huge pages a fresh mapping costs a fault per 4 KiB page on every allocation, which
  // malloc's reuse of its heap avoids: there, every buffer stays with malloc.
  if (t_compact && huge_pages_available()) {
    // Huge pages where whole ones fit, nothing rounded beyond the next 4 KiB page.
    if (bytes >= kHugePageBytes) return map_huge_page_aligned(bytes, /*compact=*/true);
  } else if (bytes >= detail::kMinPooledBytes && huge_pages_available()) {
    return bytes <= detail::kMaxPooledBytes ? detail::pool_allocate(bytes) : map_huge_page_aligned(bytes, false);
  }
  constexpr size_t kLine = 64;
  const size_t rounded = bytes == 0 ? kLine : (bytes + kLine - 1) / kLine * kLine;
  const size_t alignment = rounded >= kHugePageBytes ? kHugePageBytes : kLine;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0) return nullptr;
  return static_cast<std::byte*>(p);
}

void release_buffer(std::byte* p) {
  if (p == nullptr) return;
  // Pool blocks are aligned to at least kMinPooledBytes and own mappings to a huge page: most
  // malloc'd buffers (every small tensor) skip the locks and the lookups.
  const auto address = reinterpret_cast<uintptr_t>(p);
  if (address % detail::kMinPooledBytes == 0) {
    if (address % kHugePageBytes == 0 && release_mapping(mapped_buffers(), p)) return;
    if (detail::pool_release(p)) return;
  }
  std::free(p);
}

void release_spare_buffers() {
  MappedBuffers& m = mapped_buffers();
  std::vector<MappedBuffers::Spare> unmap;
  {
    std::lock_guard lock(m.mutex);
    unmap.swap(m.spares);
    m.spare_bytes = 0;
  }
  for (const auto& s : unmap) munmap(s.start, s.length);
  detail::pool_release_empty_slabs();
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
  if (bytes == 0) return;  // empty blocks may have no storage (null): memcpy must not see them
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
