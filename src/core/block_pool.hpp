// Internal to allocate_buffer: mid-size buffers carved out of huge-page slabs, and the mapping
// primitive both it and the large buffers use.
#pragma once

#include <cstddef>

namespace meshnn::detail {

// Requests from kMinPooledBytes to kMaxPooledBytes come from the pool, rounded up to a power of
// two; smaller ones stay with malloc, larger ones get mappings of their own.
inline constexpr size_t kMinPooledBytes = size_t{16} << 10;
inline constexpr size_t kMaxPooledBytes = size_t{1} << 20;

// A block of at least `bytes` (kMinPooledBytes..kMaxPooledBytes), aligned to its own size;
// nullptr when no memory is left.
std::byte* pool_allocate(size_t bytes);
// Takes p back if it is a pool block and returns true; otherwise does nothing and returns false.
bool pool_release(std::byte* p);
// Unmaps the slabs that hold no block in use.
void pool_release_empty_slabs();

// A private anonymous mapping of `length` bytes (a multiple of the page size) that starts on a
// huge-page boundary and is marked for transparent huge pages; nullptr on failure. Unmap with munmap.
std::byte* map_huge_pages(size_t length);

}  // namespace meshnn::detail
