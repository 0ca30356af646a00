// Internal: out[i] = a[i] (+) b[i] written with non-temporal ("streaming") stores, for results that
// another rank reads next (all_reduce's reduced slice, which every peer pulls in the all_gather
// phase).
//
// Why: Open MPI's shared-memory transport copies a large message on the receiver's core
// (process_vm_readv), so after one all_reduce the peers hold our reduced slice in their caches. The
// next all_reduce overwrites that slice, and with ordinary stores every line first has to be
// fetched and the peers' copies invalidated before the store retires. On the Zen 5 test machine a
// 1 MiB combine ran at 32 us with the lines in our cache and 140-280 us in this state. Streaming
// stores invalidate without fetching, and the peer's read then comes from memory instead of our
// cache. They are a loss when we read the result ourselves next, hence not the default.
//
// The element arithmetic is bit for bit that of Reduction's cached loops (same operand order,
// NaN kept as there), which the unit tests check for every type, op and instruction set.
#pragma once

#include <cstdint>

#include "meshnn/ccl/reduce.hpp"

namespace meshnn::ccl::detail {

// Streams out = a (+) b using the widest instruction set the kernels may use (kernels::active_isa(),
// so MESHNN_KERNELS and set_isa_cap() apply). Returns false, writing nothing, when there is none
// (the portable build): the caller then runs its cached loop. `out` may alias `a` exactly (an
// in-place accumulate) but must not overlap `b`. Ends with a store fence, so the result is visible
// to other cores before a message announcing it is sent.
bool combine_streaming(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count);

// The per-instruction-set bodies (streaming_combine_avx2.cpp, streaming_combine_avx512.cpp); call
// them only after checking the CPU.
void combine_streaming_avx2(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count);
void combine_streaming_avx512(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count);

}  // namespace meshnn::ccl::detail
