// Collectives on plain buffers over a Transport: the schedules themselves, and how one is chosen.
// The mesh-tensor API (ccl/ccl.hpp) is built on these; they are also what the unit tests run over
// the in-process transport for 1..16 virtual ranks.
//
// Every member of the group must call the same collective with the same sizes, options and
// tag_base (a hang or a job abort otherwise: the watchdog reports it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "meshnn/ccl/reduce.hpp"
#include "meshnn/ccl/transport.hpp"
#include "meshnn/mesh/mesh_device.hpp"

namespace meshnn::ccl {

// Which schedule runs (docs/spec/semantics.md §3.3):
//  RING              unidirectional ring; all_gather relays each block N-1 hops; reduce_scatter
//                    forwards partials N-1 hops, member j's slice is complete after the last.
//  BIDIRECTIONAL_RING both ring directions at once. all_gather: each block goes some hops forward
//                    and the rest backward (HopSplit); reduce_scatter: first half of every slice
//                    around the forward ring, second half around the backward ring.
//  LINE              no wrap-around link. all_gather: N-1-i hops forward and i backward from
//                    position i; reduce_scatter: partials flow from both ends toward the owner.
//  DIRECT            one step: every member sends straight to every other (small messages).
//  AUTO              chosen from the topology, group size, message size and transport kind
//                    (choose_schedule).
// all_reduce runs reduce_scatter then all_gather of the same family, pipelined chunk by chunk
// (DIRECT: everyone sends its whole buffer to everyone and reduces locally). all_to_all has one
// schedule, DIRECT (each block goes straight to its owner), whatever `algorithm` asks for.
// broadcast relays the root's buffer down chains (RING: one chain forward around the ring;
// BIDIRECTIONAL_RING: two chains, ceil((N-1)/2) members ahead and the rest behind; LINE: a chain
// toward each end of the line; DIRECT: the root sends to every member itself).
enum class Algorithm { AUTO, RING, BIDIRECTIONAL_RING, LINE, DIRECT };
std::string_view to_string(Algorithm a);  // "auto", "ring", "bidirectional_ring", "line", "direct"
Algorithm parse_algorithm(std::string_view name);  // throws meshnn::Error listing the choices

// How a bidirectional ring all_gather splits a block's N-1 hops (docs/spec/semantics.md §3.3):
//  SPLIT_FARTHEST ceil/floor halves; on an even ring the farthest member gets the first half of the
//                 block forward and the second half backward, so both directions carry (N-1)/2.
//  PARITY_SWAP    ceil((N-1)/2) forward and the rest backward, swapped on even positions (TT-NN's
//                 original split).
enum class HopSplit { SPLIT_FARTHEST, PARITY_SWAP };

enum class Collective { ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE, ALL_TO_ALL, BROADCAST };
// "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"
std::string_view to_string(Collective c);

struct CclOptions {
  Algorithm algorithm = Algorithm::AUTO;
  HopSplit hop_split = HopSplit::SPLIT_FARTHEST;
  // Bytes per pipelined message (0: chosen by message size). Chunks are striped over num_links.
  size_t chunk_bytes = 0;
  // Ship partial results of float reductions as bfloat16 instead of float32: half the traffic but
  // each hop rounds the running partial (less accurate; off by default, as TT-NN's failing is to
  // do this silently). Integer reductions ignore it.
  bool partials_in_input_dtype = false;
  // Exchange a description of each collective's arguments among the group before running and throw
  // the same meshnn::Error on every member when they differ. Also enabled by MESHNN_CCL_CHECKED=1.
  bool checked = false;
  // Watchdog timeout (<= 0: MESHNN_WATCHDOG_SECONDS, default 600).
  double watchdog_seconds = 0;
  // Staging slots per lane for pipelined reductions.
  int slots_per_lane = 4;
};

// The resolved choice, identical on every member (a pure function of its arguments).
struct Schedule {
  Algorithm algorithm = Algorithm::RING;
  size_t chunk_bytes = 0;
};
// bytes: all_gather: one member's block; reduce_scatter: one member's whole input; all_reduce: the
// buffer; all_to_all: one block (what one member sends one peer); broadcast: the buffer.
// transport: how the group's messages travel (Transport::kind()); where shared memory and a network
// favour different schedules (measured: docs/performance.md), AUTO follows it.
Schedule choose_schedule(Collective c, int group_size, size_t bytes, Topology topology, TransportKind transport,
                         const CclOptions& options);

// Tags: each collective gets kLanesPerOp consecutive tags, taken round-robin from the transport's
// tag space by operation id (MeshDevice::next_operation_id()). Lane = tag offset: kLanesPerPhase
// for each of the two phases (reduce_scatter 0, all_gather 1), one per (link channel, direction),
// so no two (phase, link, direction) share a tag at any link count. (The checked mode's argument
// exchange is an operation of its own, with its own tags.)
inline constexpr int kMaxLinks = 16;
inline constexpr int kLanesPerPhase = 2 * kMaxLinks;
inline constexpr int kLanesPerOp = 2 * kLanesPerPhase;
int tag_base_for(uint64_t operation_id, const Transport& transport);

// Everything a collective call needs besides its buffers.
struct CallContext {
  Transport& transport;
  int tag_base = 0;
  Topology topology = Topology::RING;
  int num_links = 1;  // 1..kMaxLinks
  CclOptions options;
  std::string op_name;  // for watchdog reports; default: the collective's name
};

// out holds size() blocks of `bytes`; block j receives member j's `mine`. `mine` may alias block
// position() of out (then nothing is copied locally).
void all_gather_bytes(const CallContext& ctx, const void* mine, size_t bytes, void* out);
// The same, handing each block to on_block(j) as soon as it is whole in out (the fused
// all_gather_matmul multiplies the blocks that have arrived while the rest travel). Calls run on
// the calling thread one after another: our own block first, then the others in the order the
// schedule completes them, an order fixed by the schedule (not by timing) and the same on every
// run. Between two calls the transfers that the last arrival released are posted.
void all_gather_bytes_each(const CallContext& ctx, const void* mine, size_t bytes, void* out,
                           const std::function<void(int member)>& on_block);

// in: size() blocks of `block_bytes`, block j for member j; out: size() blocks, block j = what member
// j sent this one (its block position()). in and out must not overlap. One step, every member
// straight to every other, peers taken at increasing distance (to position()+s while receiving from
// position()-s, the pairwise exchange's order) so no two members start on the same receiver.
void all_to_all_bytes(const CallContext& ctx, const void* in, size_t block_bytes, void* out);

// Member `root`'s `bytes` at buffer into every member's buffer (the root's is only read). A
// pipelined chain (NCCL's broadcast): the buffer is cut into chunks, and each member receives a
// chunk straight into place and sends it on from there (directRecvCopySend) while the next chunk
// arrives, so a chain of h hops takes about (h + chunks - 1) chunk times. Schedules: see Algorithm.
void broadcast_bytes(const CallContext& ctx, int root, void* buffer, size_t bytes);
// The same, handing each chunk to on_chunk(offset, bytes) once it is in place here (at the root:
// its own chunks), so a consumer can start on the front of the buffer while the rest travels.
// Calls run on the calling thread one after another in offset order, transfers released by the
// last arrival posted in between.
void broadcast_bytes_each(const CallContext& ctx, int root, void* buffer, size_t bytes,
                          const std::function<void(size_t offset, size_t bytes)>& on_chunk);

// in: size() slices of `count` elements (slice j = elements [j*count, (j+1)*count)) in the
// reduction's compute type; out: `count` elements = slice position() reduced over the group.
void reduce_scatter_values(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red);
// The same with `in` produced slice by slice while the reduction runs (the fused
// matmul_reduce_scatter): produce(j) must write slice j of in; it runs before slice j is first
// read, on the calling thread, the calls one at a time in an order fixed by the schedule (the
// ring's order of use: position-1, position-2, ..., position), transfers posted in between. The
// result has the bits reduce_scatter_values gives for the same input.
void reduce_scatter_values_each(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red,
                                const std::function<void(int member)>& produce);

// in, out: `count` elements (must not alias); out = the reduction over the group, identical on every
// member.
void all_reduce_values(const CallContext& ctx, const void* in, void* out, int64_t count, const Reduction& red);
// all_reduce of `count` bfloat16 values (in, out must not alias) on a pair of members whose
// schedule for the float32 values would be the direct exchange: the bfloat16 inputs themselves
// go on the wire, half the float32 bytes and exact (one hop: no partial is ever rounded). Each
// member combines in float32 in the ring's order and rounds once into out, so the bits are those
// of widening, all_reduce_values and rounding. Returns false, touching nothing, when the group is
// not a pair or the schedule is not direct; the caller then takes the float32 path.
bool all_reduce_bfloat16_pair(const CallContext& ctx, const uint16_t* in, uint16_t* out, int64_t count,
                              const Reduction& red);

// Element range of slice j when `count` elements are cut into n nearly equal slices (all_reduce's
// internal reduce_scatter).
inline int64_t slice_begin(int64_t count, int n, int j) { return count * j / n; }

}  // namespace meshnn::ccl
