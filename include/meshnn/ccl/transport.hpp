// Point-to-point byte transport among the members of one collective group.
//
// A collective schedule (ccl/plan.hpp) only ever posts sends and receives of byte ranges to a peer
// *position* in the group (0..size-1) with a tag, and tests them for completion. Two transports:
//  - MpiTransport: one MPI communicator (a mesh, or one of its axis communicators); Isend/Irecv
//    matched by source and tag (never MPI_ANY_SOURCE), messages above 1 GiB split into pieces.
//  - InProcessTransport: N virtual ranks as threads of one process (1..16 in unit tests), so the
//    very same schedules are testable without MPI.
// Matching follows MPI's non-overtaking rule on both: between one (sender, receiver, tag) the k-th
// send matches the k-th receive.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::ccl {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int size() const = 0;      // members in the group
  virtual int position() const = 0;  // this member, 0..size()-1
  // Tags are 0..max_tag().
  virtual int max_tag() const = 0;

  // Posts a send / receive of `bytes` bytes and returns a request handle. The buffer must stay
  // valid and (for a send) unchanged until test() reports completion. A receive must be posted with
  // the exact size the matching send has; a mismatch is a broken invariant and aborts the job.
  virtual int post_send(int peer, int tag, const void* data, size_t bytes) = 0;
  virtual int post_recv(int peer, int tag, void* data, size_t bytes) = 0;
  // Non-blocking. True once the request completed; the handle is released then.
  virtual bool test(int request) = 0;
  // Non-blocking test of several requests at once (one progress call on MPI). True once every
  // request completed. Handles already released are -1 and skipped; a request that completed is
  // released and set to -1 (the MPI transport completes all or none per call).
  virtual bool test_all(std::span<int> requests);

  // "device 5 (1, 1)": how messages (the watchdog's) name a member.
  virtual std::string describe_member(int position) const { return "position " + std::to_string(position); }
  // The member's rank in MPI_COMM_WORLD, for traces (the position itself when there is no MPI).
  virtual int world_rank(int position) const { return position; }

  // Whether a member that waits for a peer should give up its core now and then (sched_yield).
  // Needed when members share cores (threads of one process, oversubscribed ranks): the peer may
  // need that core to make progress. Wasted otherwise: a yield costs more than a small collective.
  virtual bool yields_when_idle() const { return true; }

  // How messages travel (core/mpi_utils.hpp): choose_schedule picks algorithm and piece size by it.
  // Identical on every member.
  virtual TransportKind kind() const { return TransportKind::SHARED_MEMORY; }
};

// Over an MPI communicator; position = rank in `comm`. `kind` must be the same on every member:
// detect_transport_kind(comm)'s result, which MeshDevice keeps for its communicators. `namer`
// (optional) feeds describe_member(), called only when a message needs it. The communicator is
// borrowed, not owned.
class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, TransportKind kind, std::function<std::string(int)> namer = {});
  ~MpiTransport() override;

  int size() const override { return size_; }
  int position() const override { return rank_; }
  int max_tag() const override { return max_tag_; }
  int post_send(int peer, int tag, const void* data, size_t bytes) override;
  int post_recv(int peer, int tag, void* data, size_t bytes) override;
  bool test(int request) override;
  bool test_all(std::span<int> requests) override;
  std::string describe_member(int position) const override;
  // Translated once per transport, on first use (tracing only).
  int world_rank(int position) const override;
  // Only when this node runs more ranks than it has cores (core/process_context.hpp's
  // ranks_share_cores(), set from the Runtime's binding); true without a Runtime.
  bool yields_when_idle() const override { return yields_when_idle_; }
  TransportKind kind() const override { return kind_; }

  // Largest piece one MPI message carries (MPI counts are int).
  static constexpr size_t kMaxPieceBytes = size_t{1} << 30;

 private:
  mutable std::vector<int> world_ranks_;
  // One posted transfer. Messages up to kMaxPieceBytes (all but huge ones) are one MPI request,
  // held inline; larger ones keep one request per piece in `pieces`.
  struct Slot {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<MPI_Request> pieces;
    size_t bytes = 0;
    int peer = 0;
    int tag = 0;
    bool is_recv = false;
    int next_free = -1;
  };
  int allocate_slot();
  void release_slot(int id);
  int post(bool is_recv, int peer, int tag, void* data, size_t bytes);
  void check_received(const Slot& s, const MPI_Status* statuses) const;
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int max_tag_ = 32767;
  bool yields_when_idle_ = true;
  TransportKind kind_ = TransportKind::SHARED_MEMORY;
  std::function<std::string(int)> namer_;
  // Enough slots inline for a direct exchange among 9 members (8 peers, 2 directions, messages of
  // up to 4 pieces): small collectives, a decode step's, never touch the heap.
  static constexpr int kInlineSlots = 64;
  Slot inline_slots_[kInlineSlots];
  std::vector<Slot> more_slots_;  // slot id kInlineSlots + k
  int free_head_ = -1;
  int used_ = 0;
  Slot& slot(int id) { return id < kInlineSlots ? inline_slots_[id] : more_slots_[id - kInlineSlots]; }
};

// N virtual ranks in one process. Build one fabric, then run a function on every member's thread:
//   InProcessFabric::run(4, [](Transport& t) { ... schedule ... });
// Sends complete only when matched by the receiver (rendezvous), which is stricter than MPI's eager
// protocol, so a schedule that relies on buffering deadlocks here instead of hiding the bug.
class InProcessFabric {
 public:
  // Runs fn on `size` threads, one per member (position = thread index). Returns when all are done;
  // rethrows the first exception any member threw.
  static void run(int size, const std::function<void(Transport&)>& fn);
};

}  // namespace meshnn::ccl
