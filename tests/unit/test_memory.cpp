// allocate_buffer: the alignment promises the kernels and the transfers rely on; copy_bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

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

struct Mapping {
  uintptr_t start = 0, end = 0;
  long anon_huge_kib = -1;  // kilobytes of it backed by huge pages
};

// The mapping of this process that holds p, from /proc/self/smaps (start 0 if none does).
Mapping mapping_holding(const std::byte* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  Mapping found, current;
  while (std::getline(smaps, line)) {
    char dash = 0;
    std::istringstream header(line);
    Mapping m;
    if (header >> std::hex >> m.start >> dash >> m.end && dash == '-' && line.find(':') > 12) {
      current = m;
      if (m.start <= address(p) && address(p) < m.end) found = m;
    } else if (found.start == current.start && found.start && line.rfind("AnonHugePages:", 0) == 0) {
      found.anon_huge_kib = std::stol(line.substr(14));
    }
  }
  return found;
}

TEST(Memory, LargeBuffersAreMappingsOfTheirOwnWithHugePages) {
  if (!huge_pages_available()) GTEST_SKIP() << "no transparent huge pages: large buffers stay with malloc";
  // glibc would serve these from its heap once a larger chunk was freed (its mmap threshold
  // rises), reusing pages faulted in as 4 KiB ones; allocate_buffer maps each one itself.
  std::byte* big = allocate_buffer(8 * kHugePageBytes);
  ASSERT_NE(big, nullptr);
  std::memset(big, 1, 8 * kHugePageBytes);
  release_buffer(big);
  release_spare_buffers();
  const size_t bytes = 2 * kHugePageBytes + 100;
  std::byte* p = allocate_buffer(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 2, bytes);
  const Mapping m = mapping_holding(p);  // (the kernel may merge it with a neighbouring one)
  EXPECT_LE(m.start, address(p));
  EXPECT_GE(m.end, address(p) + bytes);
  EXPECT_GT(m.anon_huge_kib, 0);
  release_buffer(p);
  release_spare_buffers();
  EXPECT_EQ(mapping_holding(p).start, 0u);
}

TEST(Memory, ReleasedMappingsComeBackForTheSameSizeUpToABound) {
  if (!huge_pages_available()) GTEST_SKIP() << "no transparent huge pages: large buffers stay with malloc";
  release_spare_buffers();
  const size_t bytes = 4 * kHugePageBytes + 100;  // five huge pages
  std::byte* p = allocate_buffer(bytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 3, bytes);
  release_buffer(p);
  EXPECT_NE(mapping_holding(p).start, 0u);  // kept, pages and all
  std::byte* again = allocate_buffer(4 * kHugePageBytes);  // four: a quarter less, the same mapping
  EXPECT_EQ(again, p);
  std::byte* other = allocate_buffer(2 * bytes);  // far larger: a mapping of its own
  EXPECT_NE(other, p);
  release_buffer(other);
  release_buffer(again);

  // Too large to keep: unmapped at once.
  std::byte* huge = allocate_buffer(size_t{80} << 20);
  ASSERT_NE(huge, nullptr);
  release_buffer(huge);
  EXPECT_EQ(mapping_holding(huge).start, 0u);

  // Twelve released together: the oldest go back to the system, at most eight stay.
  std::byte* held[12];
  for (auto& h : held) {
    h = allocate_buffer(kHugePageBytes);
    ASSERT_NE(h, nullptr);
    h[0] = std::byte{1};
  }
  for (auto* h : held) release_buffer(h);
  int kept = 0;
  for (auto* h : held) kept += mapping_holding(h).start != 0;
  EXPECT_LE(kept, 8);
  EXPECT_EQ(mapping_holding(held[0]).start, 0u);  // the first released went first
  release_spare_buffers();
  for (auto* h : held) EXPECT_EQ(mapping_holding(h).start, 0u);
}

TEST(Memory, CompactBuffersEndAtTheNextSmallPageAndAreNotKept) {
  if (!huge_pages_available()) GTEST_SKIP() << "no transparent huge pages: large buffers stay with malloc";
  release_spare_buffers();
  // (How far the mapping reaches cannot be read back reliably: the kernel may merge it with a
  // neighbour. The LLM job's peak memory shows it.)
  const size_t bytes = 2 * kHugePageBytes + 100;  // rounded to 3 huge pages outside the scope
  std::byte* p = nullptr;
  {
    const CompactBuffersScope compact;
    p = allocate_buffer(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(address(p) % kHugePageBytes, 0u);  // still huge pages where whole ones fit
    std::memset(p, 4, bytes);
    std::byte* mid = allocate_buffer(600 << 10);  // a pool block would round it to 1 MiB: malloc instead
    ASSERT_NE(mid, nullptr);
    std::memset(mid, 5, 600 << 10);
    release_buffer(mid);
    release_buffer(p);
    EXPECT_EQ(mapping_holding(p).start, 0u) << "released inside the scope: unmapped, not kept";
  }
  std::byte* q = allocate_buffer(bytes);  // outside: whole huge pages again
  ASSERT_NE(q, nullptr);
  q[bytes - 1] = std::byte{6};
  EXPECT_GE(mapping_holding(q).end, address(q) + 3 * kHugePageBytes);
  release_buffer(q);
  release_spare_buffers();
}

TEST(Memory, MidSizeBuffersAreAlignedBlocksInHugePages) {
  if (!huge_pages_available()) GTEST_SKIP() << "no transparent huge pages: mid-size buffers stay with malloc";
  // 16 KiB to 1 MiB: rounded up to a power of two, aligned to it, in huge-page slabs.
  const std::pair<size_t, size_t> size_and_block[] = {
      {size_t{16} << 10, size_t{16} << 10}, {(size_t{16} << 10) + 1, size_t{32} << 10},
      {size_t{100} << 10, size_t{128} << 10}, {size_t{1} << 20, size_t{1} << 20}};
  for (const auto& [bytes, block] : size_and_block) {
    std::byte* p = allocate_buffer(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(address(p) % block, 0u) << bytes;
    std::memset(p, 0x3C, bytes);
    EXPECT_GT(mapping_holding(p).anon_huge_kib, 0) << bytes;
    release_buffer(p);
  }
}

TEST(Memory, PoolBlocksComeBackAndEmptySlabsGoBackToTheSystem) {
  if (!huge_pages_available()) GTEST_SKIP() << "no transparent huge pages: mid-size buffers stay with malloc";
  release_spare_buffers();
  std::byte* first = allocate_buffer(size_t{64} << 10);
  ASSERT_NE(first, nullptr);
  release_buffer(first);
  EXPECT_EQ(allocate_buffer(size_t{60} << 10), first);  // the same class: the block just released
  release_buffer(first);

  // Sixteen slabs of two 1 MiB blocks each, all released: at most one empty slab stays mapped.
  constexpr int kBlocks = 32;
  std::byte* held[kBlocks];
  for (auto& h : held) {
    h = allocate_buffer(size_t{1} << 20);
    ASSERT_NE(h, nullptr);
    h[0] = std::byte{1};
  }
  for (auto* h : held) release_buffer(h);
  int mapped = 0;
  for (auto* h : held) mapped += mapping_holding(h).start != 0;
  EXPECT_LE(mapped, 2);  // both blocks of the one kept slab
  release_spare_buffers();
  for (auto* h : held) EXPECT_EQ(mapping_holding(h).start, 0u);
}

#if defined(__SANITIZE_ADDRESS__)
TEST(MemoryDeathTest, AddressSanitizerCatchesWritesPastAPoolBlockRequest) {
  if (!huge_pages_available()) GTEST_SKIP() << "no transparent huge pages: mid-size buffers stay with malloc";
  const size_t bytes = (size_t{40} << 10) + 8;  // in a 64 KiB block
  std::byte* p = allocate_buffer(bytes);
  ASSERT_NE(p, nullptr);
  EXPECT_DEATH(static_cast<volatile std::byte*>(p)[bytes] = std::byte{1}, "use-after-poison");
  release_buffer(p);
  EXPECT_DEATH(static_cast<volatile std::byte*>(p)[0] = std::byte{1}, "use-after-poison");
}
#endif

TEST(Memory, CopyBytesCopiesExactlyTheRangeAtAnyAlignment) {
  // Sizes either side of the piece size and of the string-move threshold, a last piece that is
  // short, from and to odd addresses; the bytes around the destination range must stay untouched.
  const size_t sizes[] = {0, 1, 63, 4097, kCopyPieceBytes, kCopyPieceBytes + 1, 3 * kCopyPieceBytes + 5,
                          kLargeCopyBytes - 1, kLargeCopyBytes, kLargeCopyBytes + 37, 3 * kLargeCopyBytes + 5};
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
