// Internal: the schedule builders shared by the collectives (all_reduce reuses the
// reduce_scatter and all_gather ones). Each adds one schedule's ops to a Plan.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/ccl/plan.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/core/function_ref.hpp"
#include "meshnn/core/trace.hpp"

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
// Called with a member's position once its block of an all_gather's output is complete.
using BlockFn = std::function<void(int member)>;
Deps ops_overlapping(std::span<const RangeOp> ops, size_t offset, size_t bytes);

inline int mod(int a, int n) { return ((a % n) + n) % n; }
// The lane of a chunk: kLanesPerPhase per phase (reduce_scatter = 0, all_gather = 1), one per
// (link channel, direction); see collectives.hpp.
inline int lane_of(int chunk, int dir, int num_links, int phase) {
  return phase * kLanesPerPhase + (chunk % num_links) * 2 + dir;
}
template <class T>
inline T chunk_count(T total, T chunk) { return total == 0 ? 0 : (total + chunk - 1) / chunk; }

// all_gather by relaying blocks hop by hop (RING, BIDIRECTIONAL_RING, LINE). Block j of `out` is
// member j's; this member's comes from `mine`. `ready` gives what must finish before `mine` may be
// read (empty for a plain all_gather). `on_block` (if any) runs once per block as it completes
// (see all_gather_bytes_each).
void build_gather_relay(Prims& prims, std::span<const ByteRange> blocks, const std::byte* mine, std::byte* out,
                        Algorithm algorithm, HopSplit split, size_t chunk_bytes, int num_links, int phase,
                        const ReadyFn& ready, const BlockFn& on_block = {});
// The Direct schedule of every collective, in one step: this member sends outgoing(to) (`bytes`)
// to every peer and receives every peer's message into incoming(from), cut into chunks of
// chunk_bytes on lanes chunk mod num_links; arrived(offset, bytes) runs once that byte range has
// arrived from every peer, while_in_flight() while the transfers travel. Peers are taken at
// increasing distance, so no two members start on the same receiver.
//
// Messages of one chunk run as a DirectExchange, without a Plan (the small-message fast path);
// larger ones through a Plan, each chunk's `arrived` as soon as that chunk is in. The bytes, tags
// and order are the same either way, and so are the results.
void exchange_direct(const CallContext& ctx, std::string_view name, double watchdog, size_t bytes,
                     size_t chunk_bytes, FunctionRef<const std::byte*(int to)> outgoing,
                     FunctionRef<std::byte*(int from)> incoming, FunctionRef<void()> while_in_flight,
                     FunctionRef<void(size_t offset, size_t bytes)> arrived);

// out = x[owner+1] (+) x[owner+2] (+) ... (+) x[owner+n-1] (+) x[owner] over `count` elements, with
// x[m] = contribution(m) (compute type), then MEAN's scaling: the chain the ring schedules follow,
// so a direct combine gives their bits. out may alias no contribution, except on two members
// (all_reduce receives the peer's buffer straight into its output and combines it there).
void combine_in_ring_order(const Reduction& r, int n, int owner, FunctionRef<const std::byte*(int member)> contribution,
                           std::byte* out, int64_t count);

// reduce_scatter around the ring in direction d (+1 / -1) over part `part` of `parts` of every
// slice (elements of in, compute type). Slice position()'s result goes to out_slice; returned
// ranges are byte offsets of out_slice relative to out_base. produced (empty, or one op per
// slice): what writes slice j of in, waited for before it is read.
std::vector<RangeOp> build_reduce_ring(Prims& prims, const std::byte* in, std::span<const ElemRange> slices,
                                       std::byte* out_slice, size_t out_base, int d, int part, int parts,
                                       int64_t chunk_elems, int num_links, std::span<const OpId> produced = {});
// reduce_scatter on a line: partials flow from both ends toward each slice's owner.
std::vector<RangeOp> build_reduce_line(Prims& prims, const std::byte* in, std::span<const ElemRange> slices,
                                       std::byte* out_slice, size_t out_base, int64_t chunk_elems, int num_links,
                                       std::span<const OpId> produced = {});

Reduction direct_reduction(const Reduction& red);
int64_t chunk_elems_for(size_t chunk_bytes);

// The watchdog timeout of a call: options.watchdog_seconds, else MESHNN_WATCHDOG_SECONDS (read
// once per process: getenv scans the whole environment, which MPI launchers make long).
double watchdog_seconds_for(const CclOptions& options);
// Hands a watchdog report to the stuck handler (default meshnn::fatal). Never returns.
[[noreturn]] void raise_stuck(const std::string& message);

// The one-step Direct schedules when every peer's data is a single message: no Plan, no
// dependency tracking. Messages are added in plan order (the order Plan-based Direct would add
// them, which is what the watchdog report follows); post() posts every receive first, then every
// send (lane l = tag tag_base + l, as Plan), and wait() completes them together with one
// test_all per poll, the watchdog looking at the clock only every 256 polls.
//
// A message of more than kPieceBytes and at most kMaxPieces * kPieceBytes goes out as pieces of
// kPieceBytes (both sides cut it the same way; MPI keeps messages of one tag in order). Open MPI's
// shared-memory transport sends up to 4 KiB, header included, at once; a larger message waits for
// a rendezvous round trip, which costs more than a whole small collective. Above 8 KiB one
// rendezvous costs less than many pieces, so larger messages stay whole (figures:
// docs/design-measurements.md §6).
class DirectExchange {
 public:
  static constexpr int kMaxMembers = 17;
  static constexpr size_t kPieceBytes = 2048;
  static constexpr int kMaxPieces = 4;
  static bool fits(int group_size) { return group_size <= kMaxMembers; }

  DirectExchange(Transport& transport, int tag_base) : transport_(transport), tag_base_(tag_base) {}
  void send(int peer, int lane, const void* src, size_t bytes) { add(peer, lane, const_cast<void*>(src), bytes, true); }
  void recv(int peer, int lane, void* dst, size_t bytes) { add(peer, lane, dst, bytes, false); }
  void post();
  void wait(std::string_view op_name, double watchdog_seconds);

 private:
  static constexpr int kMaxTransfers = 2 * (kMaxMembers - 1) * kMaxPieces;
  struct Transfer {  // one message, or one piece of one
    int peer, lane;
    void* buffer;
    size_t bytes;
    bool is_send;
  };
  void add(int peer, int lane, void* buffer, size_t bytes, bool is_send);
  void wait_for_all(std::string_view op_name, double watchdog_seconds);
  [[noreturn]] void report_stuck(std::string_view op_name, double watchdog_seconds) const;

  Transport& transport_;
  int tag_base_;
  int count_ = 0;
  Transfer transfers_[kMaxTransfers];
  int requests_[kMaxTransfers];
  int64_t posted_ns_ = 0;  // when tracing
};

// Time this thread's progress loops spent with nothing to do but wait for peers, while tracing.
int64_t& traced_wait_ns();

// The trace event of one collective call (core/trace.hpp): its size and schedule, its bus bytes
// for the profile's bus bandwidth (nccl-tests' convention), and the waiting its loops did.
class TracedCollective {
 public:
  TracedCollective(std::string_view name, int members, size_t bytes, Algorithm algorithm, double bus_bytes);
  ~TracedCollective();
  TracedCollective(const TracedCollective&) = delete;
  TracedCollective& operator=(const TracedCollective&) = delete;

 private:
  trace::Scope scope_;
  int64_t wait_before_;
};

}  // namespace meshnn::ccl::detail
