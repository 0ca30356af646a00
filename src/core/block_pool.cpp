// The pool behind allocate_buffer's mid-size buffers (block_pool.hpp).
//
// Why a pool: Open MPI moves a message between ranks of one node with process_vm_readv, and there
// the kernel pins the sender's pages one at a time. From 4 KiB pages that costs more than the copy
// itself, about three times the time of the same exchange from huge pages (figures:
// docs/design-measurements.md §7). The receiver's pages made no difference. malloc serves these sizes from 4 KiB pages (its heap,
// or mappings of its own that are not huge-page aligned), so every collective on a tensor of this
// size took the slow path, and so does every message that the collectives send from a staging
// buffer of this size.
//
// Each 2 MiB slab serves one size class (a power of two from kMinPooledBytes to kMaxPooledBytes)
// and is cut into blocks of that size, each aligned to it. Free blocks are kept per class, the most
// recently released handed out first (its lines are the likeliest to be in cache). A slab whose
// blocks are all free is unmapped unless it is the only empty one of its class, so that a loop
// that allocates and releases one buffer does not map and fault in a slab each time.
//
// Under AddressSanitizer, free blocks and the bytes past each request are poisoned, so overflows
// and uses after release are still caught as they are for malloc's buffers. LeakSanitizer does not
// see pool blocks, though: a tensor of this size that is never released goes unreported.
#include "block_pool.hpp"

#include <sanitizer/asan_interface.h>
#include <sys/mman.h>

#include <cstdint>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "meshnn/core/memory.hpp"

namespace meshnn::detail {
namespace {

constexpr int kMinClassShift = 14;  // kMinPooledBytes
constexpr int kMaxClassShift = 20;  // kMaxPooledBytes
constexpr int kClasses = kMaxClassShift - kMinClassShift + 1;
static_assert(size_t{1} << kMinClassShift == kMinPooledBytes && size_t{1} << kMaxClassShift == kMaxPooledBytes);
static_assert(kMaxPooledBytes <= kHugePageBytes);

constexpr int kEmptySlabsKeptPerClass = 1;

int class_of(size_t bytes) {
  int shift = kMinClassShift;
  while ((size_t{1} << shift) < bytes) ++shift;
  return shift - kMinClassShift;
}

size_t block_bytes(int size_class) { return size_t{1} << (size_class + kMinClassShift); }

uintptr_t slab_of(const std::byte* p) { return reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kHugePageBytes} - 1); }

struct Slab {
  int size_class;
  int blocks_in_use;
};

struct BlockPool {
  std::mutex mutex;
  std::unordered_map<uintptr_t, Slab> slabs;  // by start address
  std::vector<std::byte*> free_blocks[kClasses];
  int empty_slabs[kClasses] = {};
};

BlockPool& block_pool() {
  // Never destroyed: tensors in static storage may be released after it would be.
  static auto* pool = new BlockPool;
  return *pool;
}

// Takes the slab out of the pool; the caller unmaps it after dropping the lock. Caller holds the lock.
std::byte* remove_slab(BlockPool& pool, std::unordered_map<uintptr_t, Slab>::iterator it) {
  const uintptr_t start = it->first;
  const int size_class = it->second.size_class;
  std::erase_if(pool.free_blocks[size_class], [start](const std::byte* b) { return slab_of(b) == start; });
  --pool.empty_slabs[size_class];
  pool.slabs.erase(it);
  auto* slab = reinterpret_cast<std::byte*>(start);
  ASAN_UNPOISON_MEMORY_REGION(slab, kHugePageBytes);
  return slab;
}

}  // namespace

std::byte* pool_allocate(size_t bytes) {
  const int size_class = class_of(bytes);
  BlockPool& pool = block_pool();
  std::lock_guard lock(pool.mutex);
  std::vector<std::byte*>& free = pool.free_blocks[size_class];
  if (free.empty()) {
    std::byte* slab = map_huge_pages(kHugePageBytes);
    if (slab == nullptr) return nullptr;
    ASAN_POISON_MEMORY_REGION(slab, kHugePageBytes);
    pool.slabs.emplace(reinterpret_cast<uintptr_t>(slab), Slab{size_class, 0});
    ++pool.empty_slabs[size_class];
    // Pushed from the top down, so the lowest block is handed out first.
    const size_t size = block_bytes(size_class);
    for (size_t end = kHugePageBytes; end > 0; end -= size) free.push_back(slab + end - size);
  }
  std::byte* block = free.back();
  free.pop_back();
  if (pool.slabs.at(slab_of(block)).blocks_in_use++ == 0) --pool.empty_slabs[size_class];
  ASAN_UNPOISON_MEMORY_REGION(block, bytes);
  return block;
}

bool pool_release(std::byte* p) {
  BlockPool& pool = block_pool();
  std::byte* unmap = nullptr;
  {
    std::lock_guard lock(pool.mutex);
    const auto it = pool.slabs.find(slab_of(p));
    if (it == pool.slabs.end()) return false;
    const int size_class = it->second.size_class;
    ASAN_POISON_MEMORY_REGION(p, block_bytes(size_class));
    pool.free_blocks[size_class].push_back(p);
    if (--it->second.blocks_in_use == 0 && ++pool.empty_slabs[size_class] > kEmptySlabsKeptPerClass)
      unmap = remove_slab(pool, it);
  }
  if (unmap != nullptr) munmap(unmap, kHugePageBytes);
  return true;
}

void pool_release_empty_slabs() {
  BlockPool& pool = block_pool();
  std::vector<std::byte*> unmap;
  {
    std::lock_guard lock(pool.mutex);
    for (auto it = pool.slabs.begin(); it != pool.slabs.end();) {
      const auto next = std::next(it);
      if (it->second.blocks_in_use == 0) unmap.push_back(remove_slab(pool, it));
      it = next;
    }
  }
  for (std::byte* slab : unmap) munmap(slab, kHugePageBytes);
}

}  // namespace meshnn::detail
