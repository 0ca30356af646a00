// World rank 0 between the HTTP threads and the replicas: each request that arrives gets a replica
// (Router), the other replicas' leaders are sent theirs, and their reports (tokens, endings) are
// passed on to the HTTP threads. With one replica (tp, 2d) it only hands replica 0 its batches.
//
// With several replicas rank 0 is also replica 0's leader and computes its passes, which take up to
// seconds (a long prefill). Relaying only between them held the other replicas' tokens and new
// requests back for that long: on 2 ranks in dp the server made 0.78 of the batch job's tokens/s
// (docs/performance.md, session 36). So where MPI allows calls from any thread
// (MPI_THREAD_MULTIPLE), the routing and relaying run on a thread of their own, and replica 0's
// pass loop only takes its batches from it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "frontend.hpp"
#include "mesh_messages.hpp"
#include "meshnn/server/router.hpp"

namespace meshnn::server {

class RootRelay {
 public:
  // leader_rank[r]: the rank in `control` of replica r's leader (replica 0's is rank 0 itself).
  // `control`: a communicator for the server's messages alone, so that a relay thread's messages
  // never meet the passes' collectives. `own_thread`: relay on a thread of its own (MPI must be
  // initialised with MPI_THREAD_MULTIPLE); otherwise between replica 0's passes.
  RootRelay(Frontend& frontend, MPI_Comm control, std::vector<int> leader_rank, int64_t slots_per_replica,
            bool own_thread);
  ~RootRelay();  // stops the relay thread, if finish() has not

  // Replica 0's next batch. While replica 0 is `idle` it waits until there is something for it
  // (meanwhile, without a relay thread, routing what comes for the others and passing on their
  // reports).
  InboxBatch next_batch(bool idle);
  // Replica 0's side of a request's end, and its count of prompt tokens taken from its cache.
  void ended_on_replica_0(uint64_t ticket, bool aborted, bool cancelled, bool completed);
  void note_reused_on_replica_0(int64_t total);
  // After the stop: waits for every other replica's last report, then shuts the HTTP server down.
  void finish();

 private:
  // Takes what the HTTP threads handed in (waiting up to wait_ms), routes it, sends the other
  // replicas their parts, and returns replica 0's part.
  InboxBatch route_arrivals(int wait_ms);
  void relay_loop();  // the relay thread
  void deliver(const std::string& message, int source);
  void deliver_arrived();
  void publish_reused();  // under mutex_

  Frontend& frontend_;
  MPI_Comm control_;
  std::vector<int> leader_rank_;
  std::unordered_map<int, int> replica_of_rank_;
  Outbox outbox_;  // one thread's: the relay thread's if there is one
  int replicas_done_ = 0;
  bool stop_sent_ = false;

  // Between the relay thread and replica 0's pass loop.
  std::mutex mutex_;
  Router router_;
  std::unordered_map<uint64_t, int> replica_of_;  // where each running ticket went
  std::vector<int64_t> reused_;                   // per replica, prompt tokens taken from its cache
  InboxBatch for_replica_0_;                      // routed by the relay thread, not yet taken
  std::condition_variable for_replica_0_changed_;

  std::atomic<bool> quit_{false};
  std::thread thread_;
};

}  // namespace meshnn::server
