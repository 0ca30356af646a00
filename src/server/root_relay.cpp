#include "root_relay.hpp"

#include <utility>

namespace meshnn::server {

RootRelay::RootRelay(Frontend& frontend, MPI_Comm world, std::vector<int> leader_rank, int64_t slots_per_replica)
    : frontend_(frontend), world_(world), leader_rank_(std::move(leader_rank)),
      router_(static_cast<int>(leader_rank_.size()), slots_per_replica), reused_(leader_rank_.size(), 0) {
  for (size_t r = 0; r < leader_rank_.size(); ++r) replica_of_rank_[leader_rank_[r]] = static_cast<int>(r);
}

InboxBatch RootRelay::next_batch(bool idle) {
  const int replicas = router_.replicas();
  for (;;) {
    // With other replicas, rank 0 also looks for their reports while it waits.
    InboxBatch all = frontend_.collect(!idle ? 0 : replicas > 1 ? 1 : 200);
    std::vector<InboxBatch> parts(static_cast<size_t>(replicas));
    for (auto& [ticket, request] : all.arrivals) {
      const int r = router_.route(request.prompt);
      replica_of_[ticket] = r;
      parts[static_cast<size_t>(r)].arrivals.emplace_back(ticket, std::move(request));
    }
    for (uint64_t ticket : all.cancels)
      if (auto it = replica_of_.find(ticket); it != replica_of_.end())
        parts[static_cast<size_t>(it->second)].cancels.push_back(ticket);
    for (InboxBatch& part : parts) part.stop = all.stop;
    for (int r = 1; r < replicas; ++r)
      if (!empty(parts[static_cast<size_t>(r)]))
        outbox_.send(world_, leader_rank_[static_cast<size_t>(r)], kRouteTag, encode(parts[static_cast<size_t>(r)]));
    if (replicas > 1) deliver_arrived();
    if (!idle || !empty(parts[0])) return std::move(parts[0]);
  }
}

void RootRelay::ended_on_replica_0(uint64_t ticket, bool aborted, bool cancelled) {
  frontend_.on_finish(ticket, aborted, cancelled);
  router_.ended(0);
  replica_of_.erase(ticket);
}

void RootRelay::note_reused_on_replica_0(int64_t total) {
  reused_[0] = total;
  publish_reused();
}

void RootRelay::finish() {
  // Every other replica's last report says it has stopped: nothing is left in flight to rank 0.
  std::string message;
  for (int source = 0; replicas_done_ < router_.replicas() - 1;) {
    receive(world_, MPI_ANY_SOURCE, kReportTag, Wait::SLEEPING, message, &source);
    deliver(message, source);
  }
  frontend_.shut_down();
  outbox_.finish();
}

void RootRelay::deliver(const std::string& message, int source) {
  const TokenReport r = decode_report(message);
  for (const TokenReport::Token& t : r.tokens) frontend_.on_token(t.ticket, t.token, t.last);
  for (const TokenReport::Ending& e : r.endings) {
    frontend_.on_finish(e.ticket, e.aborted, e.cancelled);
    if (auto it = replica_of_.find(e.ticket); it != replica_of_.end()) {
      router_.ended(it->second);
      replica_of_.erase(it);
    }
  }
  reused_[static_cast<size_t>(replica_of_rank_.at(source))] = r.reused_prompt_tokens;
  publish_reused();
  replicas_done_ += r.done ? 1 : 0;
}

void RootRelay::deliver_arrived() {
  std::string message;
  for (int source = 0; receive(world_, MPI_ANY_SOURCE, kReportTag, Wait::NO, message, &source);)
    deliver(message, source);
}

void RootRelay::publish_reused() {
  int64_t total = 0;
  for (int64_t n : reused_) total += n;
  frontend_.note_reused_prompt_tokens(total);
}

}  // namespace meshnn::server
