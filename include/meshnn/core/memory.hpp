// Memory for tensor storage and collective staging buffers.
#pragma once

#include <cstddef>

namespace meshnn {

// At least `bytes` (0 allowed), 64-byte aligned (a cache line, enough for any SIMD load); nullptr
// when the system has no memory left. Release with release_buffer (or std::free).
//
// Buffers of kHugePageBytes or more start on a 2 MiB boundary and are marked for transparent huge
// pages (madvise; a no-op where THP is off). For large transfers between ranks of one node: Open
// MPI moves them with process_vm_readv, where the kernel pins the sender's pages one by one; with
// 4 KiB pages that page walk cost about a sixth of a 4 MiB all_reduce. (The matmul kernels measured
// the same either way.) The common alignment also puts every large buffer at the same offset
// within a page, and copies need that: a 4 MiB MPI_Allgather ran 4x slower between a buffer on a
// page boundary and one 16 bytes into a page.
std::byte* allocate_buffer(size_t bytes);
void release_buffer(std::byte* p);

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace meshnn
