// Memory for tensor storage and collective staging buffers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meshnn {

// At least `bytes` (0 allowed), 64-byte aligned (a cache line, enough for any SIMD load); nullptr
// when the system has no memory left. Release with release_buffer (only: large buffers may be
// mappings of their own, not taken from malloc).
//
// Where transparent huge pages are on (huge_pages_available), every buffer of 16 KiB or more sits
// in memory marked for them (madvise): up to 1 MiB a block of a shared 2 MiB slab, rounded up to a
// power of two and aligned to it; above that a mapping of its own, whole huge pages, starting on a
// 2 MiB boundary. Either way a buffer takes at most twice its size; on top of that, the pool's
// slabs that are only partly in use, and one empty slab kept per size class.
// Why: Open MPI moves messages between ranks of one node with process_vm_readv, where the kernel
// pins the sender's pages one by one; from 4 KiB pages a 1 MiB message took about three times as
// long (docs/design-measurements.md §7). (The matmul kernels measured the same either way.) The
// common alignment also puts every large buffer at the same offset within a page, and copies need
// that: a single-copy transfer between buffers at different page offsets ran 4x slower
// (docs/design-measurements.md §9).
// Without huge pages, buffers of kHugePageBytes or more still start on a 2 MiB boundary.
// Contents are unspecified (a released buffer may come back).
std::byte* allocate_buffer(size_t bytes);
// How many times allocate_buffer has been called in this process (every thread): what a test
// reads to show that a step reuses its buffers.
uint64_t buffer_allocations();

// While one is alive, allocate_buffer on this thread packs buffers tight instead of rounding them
// for transfers: from 2 MiB up an own mapping (huge pages inside) that ends at the next 4 KiB page,
// below that malloc's exact size. For tensors that live as long as the job and are never sent, a
// model's weights, which rounded to whole huge pages lose up to 2 MiB each (docs/performance.md).
// Mappings released inside the scope go back to the system at once, not kept as spares. Nests.
class CompactBuffersScope {
 public:
  CompactBuffersScope();
  ~CompactBuffersScope();
  CompactBuffersScope(const CompactBuffersScope&) = delete;
  CompactBuffersScope& operator=(const CompactBuffersScope&) = delete;

 private:
  bool saved_;
};

// Own mappings up to 64 MiB are kept after release, for the next allocation of about their size
// (at most 8, 256 MiB together; the oldest go back to the system first).
void release_buffer(std::byte* p);
// Returns the kept mappings, and the pool's slabs that hold no buffer in use, to the system now.
void release_spare_buffers();

// Whether the kernel offers transparent huge pages (always or madvise), read once.
bool huge_pages_available();

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// memcpy for buffers that do not overlap, faster for large ones:
// - Up to kLargeCopyBytes it copies in kCopyPieceBytes pieces, each a memcpy small enough (below
//   the L2 size) for glibc to serve with `rep movsb`, which beats glibc's vector loop for large
//   copies; Open MPI copies the same way.
// - From kLargeCopyBytes up, on CPUs that advertise fast string moves (ERMS), one `rep movsb`,
//   which streams and is faster still at those sizes.
// MESHNN_PLAIN_MEMCPY=1 turns both off (one memcpy, for comparisons). Figures:
// docs/design-measurements.md §1.
void copy_bytes(void* dst, const void* src, size_t bytes);

inline constexpr size_t kCopyPieceBytes = size_t{256} << 10;
inline constexpr size_t kLargeCopyBytes = size_t{16} << 20;

}  // namespace meshnn
