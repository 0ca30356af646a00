// Internal: the schedule builders shared by the collectives (all_reduce reuses the
// reduce_scatter and all_gather ones). Each adds one schedule's ops to a Plan.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/ccl/plan.hpp"

namespace meshnn::ccl::detail {

struct ByteRange {
  size_t offset = 0, bytes = 0;
};
struct ElemRange {
  int64_t begin = 0, count = 0;
};
// An op that completes a byte range of a buffer (reduce_scatter's results feeding all_gather).
struct RangeOp {
  size_t begin, end;
  OpId op;
};
using ReadyFn = std::function<Deps(size_t offset, size_t bytes)>;
Deps ops_overlapping(std::span<const RangeOp> ops, size_t offset, size_t bytes);

inline int mod(int a, int n) { return ((a % n) + n) % n; }
// Lanes: 16 per phase (reduce_scatter = 0, all_gather = 1), one per (link channel, direction).
inline int lane_of(int chunk, int dir, int num_links, int phase) { return phase * 16 + (chunk % num_links) * 2 + dir; }
template <class T>
inline T chunk_count(T total, T chunk) { return total == 0 ? 0 : (total + chunk - 1) / chunk; }

// all_gather by relaying blocks hop by hop (Ring, BidirectionalRing, Line). Block j of `out` is
// member j's; this member's comes from `mine`. `ready` gives what must finish before `mine` may be
// read (empty for a plain all_gather).
void build_gather_relay(Prims& prims, std::span<const ByteRange> blocks, const std::byte* mine, std::byte* out,
                        Algorithm algorithm, HopSplit split, size_t chunk_bytes, int num_links, int phase,
                        const ReadyFn& ready);
// all_gather in one step: every member sends its block straight to every other.
void build_gather_direct(Prims& prims, std::span<const ByteRange> blocks, const std::byte* mine, std::byte* out,
                         size_t chunk_bytes, int num_links, int phase, const ReadyFn& ready);

// reduce_scatter around the ring in direction d (+1 / -1) over part `part` of `parts` of every
// slice (elements of in, compute type). Slice position()'s result goes to out_slice; returned
// ranges are byte offsets of out_slice relative to out_base.
std::vector<RangeOp> build_reduce_ring(Prims& prims, const std::byte* in, std::span<const ElemRange> slices,
                                       std::byte* out_slice, size_t out_base, int d, int part, int parts,
                                       int64_t chunk_elems, int num_links);
// reduce_scatter on a line: partials flow from both ends toward each slice's owner.
std::vector<RangeOp> build_reduce_line(Prims& prims, const std::byte* in, std::span<const ElemRange> slices,
                                       std::byte* out_slice, size_t out_base, int64_t chunk_elems, int num_links);

Reduction direct_reduction(const Reduction& red);
int64_t chunk_elems_for(size_t chunk_bytes);

}  // namespace meshnn::ccl::detail
