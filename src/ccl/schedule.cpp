#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "builders.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::ccl {

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::AUTO: return "auto";
    case Algorithm::RING: return "ring";
    case Algorithm::BIDIRECTIONAL_RING: return "bidirectional_ring";
    case Algorithm::LINE: return "line";
    case Algorithm::DIRECT: return "direct";
  }
  return "?";
}

Algorithm parse_algorithm(std::string_view name) {
  for (Algorithm a : {Algorithm::AUTO, Algorithm::RING, Algorithm::BIDIRECTIONAL_RING, Algorithm::LINE, Algorithm::DIRECT})
    if (to_string(a) == name) return a;
  throw Error(fmt::format("unknown ccl algorithm '{}' (choices: auto, ring, bidirectional_ring, line, direct)", name));
}

std::string_view to_string(Collective c) {
  switch (c) {
    case Collective::ALL_GATHER: return "all_gather";
    case Collective::REDUCE_SCATTER: return "reduce_scatter";
    case Collective::ALL_REDUCE: return "all_reduce";
    case Collective::ALL_TO_ALL: return "all_to_all";
    case Collective::BROADCAST: return "broadcast";
  }
  return "?";
}

namespace {
// Below these a collective is latency-bound: one direct step beats N-1 relayed hops.
constexpr size_t kDirectGatherBytes = 16 << 10;          // per member block
constexpr size_t kDirectReduceScatterBytes = 512 << 10;  // per member input (TT-NN's threshold)
constexpr size_t kDirectAllReduceBytes = 64 << 10;
// Two members over shared memory: the direct exchange writes our output only, which no peer reads,
// while the ring's all_gather phase has the peer read the slice we just reduced, and our next call
// must take those lines back. Up to 8 MiB that makes direct the faster; above, the ring wins
// (docs/design-measurements.md §4).
constexpr size_t kDirectAllReducePairBytes = 8 << 20;
// Over a network two members exchange directly at every size, in pieces of 8 MiB (each piece
// reduced while the next travels). The ring's two phases wait on each other: its all_gather
// sends what the reduce-scatter just produced, so a peer that runs slow for a while holds up
// both ends. On loopback TCP, against MPI's all_reduce in the same runs, direct in 8 MiB pieces
// stayed at or above MPI at every size from 1 to 64 MiB, the ring fell below it at every size
// whenever the link ran slow (docs/performance.md, session 28).
constexpr size_t kNetworkPairAllReduceChunkBytes = 8 << 20;
// Pipelined messages: big enough to amortise per-message cost, small enough that a received
// partial is still in L2 when it is reduced.
constexpr size_t kDefaultChunkBytes = 1 << 20;
// Over a network smaller pieces keep both ends busy: the sender's kernel copies piece k+1 into the
// socket while the receiver copies piece k out; 512 KiB measured best of 64 KiB..8 MiB
// (docs/performance.md, TCP section of 2026-11-26).
constexpr size_t kNetworkChunkBytes = 512 << 10;
// Largest single message (MPI counts are ints).
constexpr size_t kMaxMessageBytes = size_t{1} << 30;

size_t direct_all_reduce_limit(int n, TransportKind transport) {
  if (n > 2) return kDirectAllReduceBytes;
  return transport == TransportKind::NETWORK ? SIZE_MAX : kDirectAllReducePairBytes;
}

Algorithm auto_algorithm(Collective c, int n, size_t bytes, Topology topology, TransportKind transport) {
  if (topology == Topology::LINEAR) return Algorithm::LINE;
  // A broadcast on two members is one hop; a small one is latency-bound, and the root's n-1
  // messages cost less than a relay's n-1 hops in a row. Otherwise two chains of half the depth.
  if (c == Collective::BROADCAST)
    return n <= 2 || bytes <= kDirectGatherBytes ? Algorithm::DIRECT : Algorithm::BIDIRECTIONAL_RING;
  // all_gather on two members: one hop and nothing to forward.
  if (c == Collective::ALL_GATHER && n == 2) return Algorithm::DIRECT;
  const size_t direct_limit = c == Collective::ALL_GATHER       ? kDirectGatherBytes
                              : c == Collective::REDUCE_SCATTER ? kDirectReduceScatterBytes
                                                                : direct_all_reduce_limit(n, transport);
  if (bytes <= direct_limit) return Algorithm::DIRECT;
  // On two members both ring directions reach the same peer: nothing to gain from splitting.
  return n <= 2 ? Algorithm::RING : Algorithm::BIDIRECTIONAL_RING;
}

}  // namespace

Schedule choose_schedule(Collective c, int n, size_t bytes, Topology topology, TransportKind transport,
                         const CclOptions& options) {
  Schedule s;
  s.algorithm =
      options.algorithm != Algorithm::AUTO ? options.algorithm : auto_algorithm(c, n, bytes, topology, transport);
  // Every block of an all_to_all has its own destination: relaying it around a ring only adds hops.
  if (c == Collective::ALL_TO_ALL) s.algorithm = Algorithm::DIRECT;
  const bool network = transport == TransportKind::NETWORK;
  const bool network_pair_all_reduce =
      network && n == 2 && c == Collective::ALL_REDUCE && s.algorithm == Algorithm::DIRECT;
  s.chunk_bytes = options.chunk_bytes           ? options.chunk_bytes
                  : network_pair_all_reduce ? kNetworkPairAllReduceChunkBytes
                  : network                 ? kNetworkChunkBytes
                                            : kDefaultChunkBytes;
  s.chunk_bytes = std::max<size_t>(64, s.chunk_bytes / 64 * 64);
  // Over shared memory, direct all_gather, all_reduce and all_to_all on two members send the whole
  // buffer as one message unless told otherwise: with one hop, chunks pipeline nothing and each
  // costs a rendezvous (docs/design-measurements.md §5), and all_reduce then combines in place
  // (src/ccl/all_reduce.cpp). Over a network the pieces do pipeline (the two ends' copies overlap).
  if (!network && n == 2 && s.algorithm == Algorithm::DIRECT && c != Collective::REDUCE_SCATTER && !options.chunk_bytes)
    s.chunk_bytes = std::clamp((bytes + 63) / 64 * 64, s.chunk_bytes, kMaxMessageBytes);
  return s;
}

int tag_base_for(uint64_t operation_id, const Transport& transport) {
  const uint64_t slots = std::max<uint64_t>(1, (static_cast<uint64_t>(transport.max_tag()) + 1) / kLanesPerOp);
  return static_cast<int>((operation_id % slots) * kLanesPerOp);
}

namespace detail {

Deps ops_overlapping(std::span<const RangeOp> ops, size_t offset, size_t bytes) {
  Deps deps;
  for (const RangeOp& r : ops)
    if (r.begin < offset + bytes && offset < r.end) deps.push_back(r.op);
  return deps;
}

Reduction direct_reduction(const Reduction& red) {
  // One hop only, so nothing accumulates on the wire: keep the exact compute type.
  Reduction r = red;
  r.bf16_wire = false;
  return r;
}

int64_t chunk_elems_for(size_t chunk_bytes) { return std::max<int64_t>(16, static_cast<int64_t>(chunk_bytes / 4)); }

}  // namespace detail
}  // namespace meshnn::ccl
