// World rank 0's choice of replica for each request (dp and hybrid serving). A replica with a free
// slot is preferred; among those, the one that most recently ran a request whose prompt begins as
// this one does (its cache may still hold that start: prefix reuse), then the least loaded, then
// the lowest index. Pure bookkeeping on rank 0: the replicas learn the choice from its messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

namespace meshnn::server {

class Router {
 public:
  Router(int replicas, int64_t slots_per_replica);
  // The replica for a prompt; counts it as running there.
  int route(const std::vector<int32_t>& prompt);
  // A request of `replica` ended.
  void ended(int replica);
  int64_t running(int replica) const { return running_[static_cast<size_t>(replica)]; }
  int replicas() const { return static_cast<int>(running_.size()); }

 private:
  int64_t slots_;
  std::vector<int64_t> running_;
  std::vector<std::deque<std::vector<int32_t>>> recent_;  // per replica, its last prompts, newest first
};

}  // namespace meshnn::server
