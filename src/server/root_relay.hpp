// World rank 0 between the HTTP threads and the replicas: each request that arrives gets a replica
// (Router), the other replicas' leaders are sent theirs, and their reports (tokens, endings) are
// passed on to the HTTP threads. With one replica (tp, 2d) it only hands replica 0 its batches.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend.hpp"
#include "mesh_messages.hpp"
#include "meshnn/server/router.hpp"

namespace meshnn::server {

class RootRelay {
 public:
  // leader_rank[r]: the world rank of replica r's leader (replica 0's is rank 0 itself).
  RootRelay(Frontend& frontend, MPI_Comm world, std::vector<int> leader_rank, int64_t slots_per_replica);

  // Replica 0's next batch. While replica 0 is `idle` it waits until there is something for it
  // (meanwhile routing what comes for the others and passing on their reports).
  InboxBatch next_batch(bool idle);
  // Replica 0's side of a request's end, and its count of prompt tokens taken from its cache.
  void ended_on_replica_0(uint64_t ticket, bool aborted, bool cancelled);
  void note_reused_on_replica_0(int64_t total);
  // After the stop: waits for every other replica's last report, then shuts the HTTP server down.
  void finish();

 private:
  void deliver(const std::string& message, int source);
  void deliver_arrived();
  void publish_reused();

  Frontend& frontend_;
  MPI_Comm world_;
  std::vector<int> leader_rank_;
  std::unordered_map<int, int> replica_of_rank_;
  Router router_;
  std::unordered_map<uint64_t, int> replica_of_;  // where each running ticket went
  std::vector<int64_t> reused_;                   // per replica, prompt tokens taken from its cache
  Outbox outbox_;
  int replicas_done_ = 0;
};

}  // namespace meshnn::server
