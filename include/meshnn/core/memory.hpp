// Memory for tensor storage and collective staging buffers.
#pragma once

#include <cstddef>

namespace meshnn {

// At least `bytes` (0 allowed), 64-byte aligned (a cache line, enough for any SIMD load); nullptr
// when the system has no memory left. Release with release_buffer (only: large buffers may be
// mappings of their own, not taken from malloc).
//
// Buffers of kHugePageBytes or more start on a 2 MiB boundary; where transparent huge pages are
// on (huge_pages_available), each is a mapping of its own marked for them (madvise). For large
// transfers between ranks of one node: Open MPI moves them with process_vm_readv, where the kernel
// pins the sender's pages one by one; with 4 KiB pages that page walk cost about a sixth of a
// 4 MiB all_reduce. (The matmul kernels measured the same either way.) The common alignment also
// puts every large buffer at the same offset within a page, and copies need that: a 4 MiB
// MPI_Allgather ran 4x slower between a buffer on a page boundary and one 16 bytes into a page.
std::byte* allocate_buffer(size_t bytes);
void release_buffer(std::byte* p);

// Whether the kernel offers transparent huge pages (always or madvise), read once.
bool huge_pages_available();

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// memcpy for buffers that do not overlap, faster for large ones. From kLargeCopyBytes up, on CPUs
// that advertise fast string moves (ERMS), it copies with `rep movsb`. Why: glibc 2.36 stops using
// rep movsb above the L2 size on AMD and takes a vector loop instead, which measured slower on
// this machine (AMD Zen 5, one copy per core on both cores): 128 MiB at 21-22 GB/s against 26-28
// with rep movsb, 32 MiB at 27 against 31-33. At 2-4 MiB the two were level on average but rep
// movsb varied more inside a two-rank all_gather, hence the 8 MiB threshold. Collectives use it
// for their local copies (half the memory traffic of a two-member all_gather).
// MESHNN_PLAIN_MEMCPY=1 turns it off (for comparisons).
void copy_bytes(void* dst, const void* src, size_t bytes);

inline constexpr size_t kLargeCopyBytes = size_t{8} << 20;

}  // namespace meshnn
