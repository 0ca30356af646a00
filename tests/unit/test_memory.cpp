// allocate_buffer: the alignment promises the kernels and the transfers rely on; copy_bytes.
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

TEST(Memory, CopyBytesCopiesExactlyTheRangeAtAnyAlignment) {
  // Sizes either side of the string-move threshold, from and to odd addresses; the bytes around
  // the destination range must stay untouched.
  const size_t sizes[] = {0, 1, 63, 4097, kLargeCopyBytes - 1, kLargeCopyBytes, kLargeCopyBytes + 37,
                          3 * kLargeCopyBytes + 5};
  for (size_t bytes : sizes)
    for (size_t shift : {size_t{0}, size_t{1}, size_t{13}}) {
      std::byte* src = allocate_buffer(bytes + 64);
      std::byte* dst = allocate_buffer(bytes + 64);
      for (size_t i = 0; i < bytes + 64; ++i) src[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
      std::memset(dst, 0x5A, bytes + 64);
      copy_bytes(dst + shift, src + 64 - shift, bytes);
      for (size_t i = 0; i < shift; ++i) ASSERT_EQ(dst[i], std::byte{0x5A}) << bytes << " shift " << shift;
      ASSERT_EQ(std::memcmp(dst + shift, src + 64 - shift, bytes), 0) << bytes << " shift " << shift;
      for (size_t i = shift + bytes; i < bytes + 64; ++i) ASSERT_EQ(dst[i], std::byte{0x5A}) << bytes << " shift " << shift;
      release_buffer(src);
      release_buffer(dst);
    }
}

}  // namespace
}  // namespace meshnn
