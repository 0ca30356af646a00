// Internal: out[i] = a[i] (+) b[i] with the widest vector instructions the CPU offers, its results
// written either with ordinary stores or with non-temporal ("streaming") ones.
//
// Why vectors: Reduction's portable loops are built for baseline x86-64 (SSE2) and took twice the
// share of an all_reduce profile that Open MPI's AVX reduction of the same bytes did.
//
// Why streaming stores are an option: Open MPI's shared-memory transport copies a large message
// on the receiver's core (process_vm_readv), so after one all_reduce the peers hold our reduced
// slice in their caches, and the next all_reduce overwrites it. With ordinary stores every line
// is first fetched and the peers' copies invalidated; streaming stores invalidate without
// fetching. all_reduce streams its reduced slice, which loses a little when that cost is low and
// gains much when it is high; everything else keeps its results in cache for whoever reads them
// next. Figures: docs/design-measurements.md §3.
//
// The element arithmetic is bit for bit that of Reduction's portable loops (same operand order,
// NaN kept as there), which the unit tests check for every type, op, store kind and instruction set.
#pragma once

#include <cstdint>

#include "meshnn/ccl/reduce.hpp"

namespace meshnn::ccl::detail {

// out = a (+) b using the widest instruction set the kernels may use (meshnn::active_isa(), so
// MESHNN_KERNELS and set_isa_cap() apply). Returns false, writing nothing, when there is none (the
// portable build): the caller then runs its portable loop. `out` may alias `a` or `b` exactly (an
// in-place combine: every element is read before it is written) but must not partly overlap either. With streaming stores it ends with a store fence,
// so the result is visible to other cores before a message announcing it is sent.
bool combine_vectorized(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count,
                        ResultStores stores);

// Whether combine_vectorized has an instruction set to use (it returns false when not).
bool vector_combine_available();

// The per-instruction-set bodies (vector_combine_avx2.cpp, vector_combine_avx512.cpp); call them
// only after checking the CPU.
void combine_avx2(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count,
                  ResultStores stores);
void combine_avx512(ElementType type, ReduceOp op, const void* a, const void* b, void* out, int64_t count,
                    ResultStores stores);

}  // namespace meshnn::ccl::detail
