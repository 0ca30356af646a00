// allocate_buffer: the alignment promises the kernels and the transfers rely on.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "meshnn/core/memory.hpp"

namespace meshnn {
namespace {

uintptr_t address(const std::byte* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(Memory, SmallBuffersAreCacheLineAligned) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, kHugePageBytes - 64}) {
    std::byte* p = allocate_buffer(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(address(p) % 64, 0u) << bytes;
    std::memset(p, 0x5A, bytes);  // the whole size is usable (ASan checks the bounds)
    release_buffer(p);
  }
}

TEST(Memory, LargeBuffersStartOnAHugePageBoundary) {
  // Same offset within a page for every large buffer: copies between them take the fast path.
  for (size_t bytes : {kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes + 100}) {
    std::byte* p = allocate_buffer(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(address(p) % kHugePageBytes, 0u) << bytes;
    std::memset(p, 0xA5, bytes);
    EXPECT_EQ(p[bytes - 1], std::byte{0xA5});
    release_buffer(p);
  }
}

}  // namespace
}  // namespace meshnn
