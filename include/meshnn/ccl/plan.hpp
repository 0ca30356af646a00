// A collective as a plan of point-to-point transfers, run by one progress loop with a watchdog,
// and the NCCL-style primitives schedules are written in.
//
// A schedule adds ops to a Plan in step order: sends, receives (with an optional action on
// arrival, e.g. a reduction) and local actions, each after a list of ops it depends on. run() posts
// every op as soon as its dependencies are done, keeping the posting order per (peer, lane, kind)
// equal to the plan order, so the k-th send on a lane meets the peer's k-th receive on that lane
// (lane = tag offset; one per link channel and direction). Dependencies only ever point to earlier
// steps, so a plan is deadlock-free whenever every member builds the mirror image of its peers'.
//
// Watchdog: if no op completes for `watchdog_seconds`, the stuck member reports
//   "<op> stuck at step S waiting for peer P (B bytes outstanding)"
// through the stuck handler (default meshnn::fatal, which aborts the job). Never a silent hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshnn/ccl/collectives.hpp"
#include "meshnn/ccl/reduce.hpp"
#include "meshnn/ccl/transport.hpp"
#include "meshnn/core/scratch.hpp"

namespace meshnn::ccl {

using OpId = int;
using Deps = std::vector<OpId>;

// MESHNN_WATCHDOG_SECONDS (default 600).
double watchdog_seconds_from_env();
// Replaces what the watchdog does with its report (default: meshnn::fatal). For tests: a handler
// that throws lets the test observe the report. Process-wide; pass {} to restore the default.
void set_stuck_handler(std::function<void(const std::string&)> handler);

// Plans built in this process so far (every thread). Small collectives run as a DirectExchange
// without one; a test reads this to show that a decode step builds none.
uint64_t plans_built();

class Plan {
 public:
  // tag_base + lane is the MPI tag of every message on that lane.
  Plan(Transport& transport, std::string op_name, int tag_base, double watchdog_seconds);

  Transport& transport() { return transport_; }
  int size() const { return transport_.size(); }
  int position() const { return transport_.position(); }
  // Position `offset` hops away on the ring (wraps).
  int peer(int offset) const { return ((position() + offset) % size() + size()) % size(); }

  OpId send(int peer, int lane, int step, const void* src, size_t bytes, const Deps& after = {});
  // `then` runs once the data has arrived (before dependents are released).
  OpId recv(int peer, int lane, int step, void* dst, size_t bytes, const Deps& after = {},
            std::function<void()> then = {});
  OpId local(int step, std::function<void()> fn, const Deps& after = {});

  // Executes every op; returns when all are complete.
  void run();

 private:
  enum class Kind { SEND, RECV, LOCAL };
  struct Op {
    Kind kind = Kind::LOCAL;
    int peer = -1, lane = -1, step = 0;
    void* buffer = nullptr;
    size_t bytes = 0;
    std::function<void()> then;
    int pending_deps = 0;
    std::vector<OpId> dependents;
    int request = -1;
    bool posted = false, done = false;
    int64_t posted_ns = 0;  // when tracing (core/trace.hpp): a transfer's span starts here
  };
  static Op make_op(Kind kind, int peer, int lane, int step, void* buffer, size_t bytes, std::function<void()> then);
  OpId add(Op op, const Deps& after);
  void complete(OpId id);
  void trace_op(const Op& op, int64_t local_begin_ns) const;  // its event, when tracing
  [[noreturn]] void report_stuck();

  Transport& transport_;
  std::string op_name_;
  int tag_base_;
  double watchdog_seconds_;
  std::vector<Op> ops_;
  // FIFO of ops per (peer, lane, kind): posting order = plan order.
  std::vector<std::vector<OpId>> queues_;
  std::vector<size_t> queue_heads_;
  std::vector<int> queue_of_op_;
  std::vector<OpId> ready_locals_;
  int64_t remaining_ = 0;
};

// Staging buffers come from the per-thread scratch arena (core/scratch.hpp): warm in cache and
// never page-faulted twice.
using meshnn::ScratchScope;

// NCCL's vocabulary over a Plan. Receives of partials land in rotating staging slots (per lane), so
// a long pipelined transfer needs only `slots_per_lane` chunks of staging memory.
class Prims {
 public:
  // max_chunk_count: the largest element count any one reducing transfer carries.
  Prims(Plan& plan, ScratchScope& scratch, const Reduction* reduction = nullptr, int64_t max_chunk_count = 0,
        int slots_per_lane = 4);

  Plan& plan() { return plan_; }
  // How recv_reduce_copy / recv_reduce_into write `out` (default Cached). all_reduce streams: its
  // reduced slice is read next by every peer, not by this rank.
  void set_result_stores(ResultStores stores) { result_stores_ = stores; }

  // Push bytes to a peer.
  OpId send(int peer, int lane, int step, const void* src, size_t bytes, const Deps& after = {}) {
    return plan_.send(peer, lane, step, src, bytes, after);
  }
  // Receive straight into the final place (no staging copy).
  OpId direct_recv(int peer, int lane, int step, void* dst, size_t bytes, const Deps& after = {}) {
    return plan_.recv(peer, lane, step, dst, bytes, after);
  }
  // own_ready (below): what must finish before `own` may be read (a fused matmul's product of that
  // slice); a receive that combines own is posted only then.
  //
  // First hop of a reduction chain: own contribution to the wire (a staging copy only if the wire
  // format differs from the compute type).
  OpId send_own(int peer, int lane, int step, const void* own, int64_t count, const Deps& own_ready = {});
  // Receive a partial, combine own contribution into it, forward it. Returns the send.
  OpId recv_reduce_send(int from, int to, int lane, int step, const void* own, int64_t count,
                        const Deps& own_ready = {});
  // Receive a partial, write partial (+) own to out (and MEAN's scaling if `finish`). Returns the
  // receive (complete once out is written).
  OpId recv_reduce_copy(int from, int lane, int step, const void* own, void* out, int64_t count, bool finish = true,
                        const Deps& own_ready = {});
  // Receive a partial and fold it into out (out = out (+) partial), after `after`.
  OpId recv_reduce_into(int from, int lane, int step, void* out, int64_t count, const Deps& after, bool finish);

 private:
  struct Slot {
    std::byte* data = nullptr;
    OpId release = -1;  // op whose completion frees the slot
  };
  Slot& next_slot(int pool);  // pool 2*lane: receives, 2*lane+1: own contributions

  Plan& plan_;
  ScratchScope& scratch_;
  const Reduction* reduction_;
  size_t slot_bytes_;
  int slots_per_lane_;
  ResultStores result_stores_ = ResultStores::CACHED;
  std::vector<std::vector<Slot>> lanes_;
  std::vector<size_t> lane_cursor_;
};

// A broadcast as ops of a caller's Plan, for what interleaves broadcasts with its own work (SUMMA
// runs both mesh axes' panel broadcasts and its products as one plan). The group is laid over the
// plan's transport: members[k] is the transport position of group member k (broadcast_bytes: every
// position in order; SUMMA: a mesh row or column over the whole mesh's transport); `root` and `me`
// are group indices. The root sends from buffer; every other member receives each chunk into place
// and sends it on down its chain (collectives.hpp's Algorithm names the chains). `ready`: what must
// finish before buffer is first touched (the root's data written, or a reused buffer free). Chunk c
// travels on lane (phase * kLanesPerPhase + (c mod num_links) * 2 + chain direction).
struct BroadcastOps {
  std::vector<OpId> received;  // per chunk: its receive here (-1 at the root)
  std::vector<OpId> sent;      // every send from buffer: it may be overwritten once these are done
};
BroadcastOps add_broadcast(Plan& plan, std::span<const int> members, int me, int root, std::byte* buffer, size_t bytes,
                           const Schedule& schedule, int num_links, int phase, const Deps& ready = {});

}  // namespace meshnn::ccl
