// Memory for tensor storage and collective staging buffers.
#pragma once

#include <cstddef>

namespace meshnn {

// At least `bytes` (0 allowed), 64-byte aligned (a cache line, enough for any SIMD load); nullptr
// when the system has no memory left. Release with release_buffer (or std::free).
//
// Buffers of kHugePageBytes or more start on a 2 MiB boundary and are marked for transparent huge
// pages (madvise; a no-op where THP is off). Two things get faster with them: the kernels'
// streaming reads of large weights (fewer TLB misses), and every large transfer between ranks of
// one node, which Open MPI does by process_vm_readv: the kernel pins the sender's pages one by one,
// and with 4 KiB pages that page walk cost about a sixth of a 4 MiB all_reduce.
std::byte* allocate_buffer(size_t bytes);
void release_buffer(std::byte* p);

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace meshnn
