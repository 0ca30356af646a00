#include "meshnn/core/memory.hpp"

#include <sys/mman.h>

#include <cstdlib>

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

}  // namespace meshnn
