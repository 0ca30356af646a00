#include "root_relay.hpp"

#include <chrono>
#include <exception>
#include <utility>

#include "meshnn/core/error.hpp"

namespace meshnn::server {
namespace {

void append(InboxBatch& to, InboxBatch&& from) {
  for (auto& arrival : from.arrivals) to.arrivals.push_back(std::move(arrival));
  to.cancels.insert(to.cancels.end(), from.cancels.begin(), from.cancels.end());
  to.stop = to.stop || from.stop;
}

}  // namespace

RootRelay::RootRelay(Frontend& frontend, MPI_Comm control, std::vector<int> leader_rank, int64_t slots_per_replica,
                     bool own_thread)
    : frontend_(frontend), control_(control), leader_rank_(std::move(leader_rank)),
      router_(static_cast<int>(leader_rank_.size()), slots_per_replica), reused_(leader_rank_.size(), 0) {
  for (size_t r = 0; r < leader_rank_.size(); ++r) replica_of_rank_[leader_rank_[r]] = static_cast<int>(r);
  if (own_thread) thread_ = std::thread([this] { relay_loop(); });
}

RootRelay::~RootRelay() {
  quit_ = true;
  if (thread_.joinable()) thread_.join();
}

InboxBatch RootRelay::route_arrivals(int wait_ms) {
  const int replicas = router_.replicas();
  InboxBatch all = frontend_.collect(wait_ms);
  std::vector<InboxBatch> parts(static_cast<size_t>(replicas));
  {
    std::lock_guard lock(mutex_);
    for (auto& [ticket, request] : all.arrivals) {
      const int r = router_.route(request.prompt);
      replica_of_[ticket] = r;
      parts[static_cast<size_t>(r)].arrivals.emplace_back(ticket, std::move(request));
    }
    for (uint64_t ticket : all.cancels)
      if (auto it = replica_of_.find(ticket); it != replica_of_.end())
        parts[static_cast<size_t>(it->second)].cancels.push_back(ticket);
  }
  for (InboxBatch& part : parts) part.stop = all.stop;
  for (int r = 1; r < replicas; ++r)
    if (!empty(parts[static_cast<size_t>(r)]))
      outbox_.send(control_, leader_rank_[static_cast<size_t>(r)], kRouteTag, encode(parts[static_cast<size_t>(r)]));
  stop_sent_ = stop_sent_ || all.stop;
  return std::move(parts[0]);
}

InboxBatch RootRelay::next_batch(bool idle) {
  if (thread_.joinable()) {
    std::unique_lock lock(mutex_);
    if (idle) for_replica_0_changed_.wait(lock, [&] { return !empty(for_replica_0_); });
    InboxBatch batch;
    std::swap(batch, for_replica_0_);
    return batch;
  }
  const int replicas = router_.replicas();
  for (;;) {
    // With other replicas, rank 0 also looks for their reports while it waits.
    InboxBatch mine = route_arrivals(!idle ? 0 : replicas > 1 ? 1 : 200);
    if (replicas > 1) deliver_arrived();
    if (!idle || !empty(mine)) return mine;
  }
}

void RootRelay::relay_loop() {
  try {
    // Until the stop has gone out: route what arrives at once (a wait of 1 ms at most, so that
    // reports are looked for as often), and hand replica 0 its part.
    while (!quit_ && !stop_sent_) {
      InboxBatch mine = route_arrivals(1);
      if (!empty(mine)) {
        {
          std::lock_guard lock(mutex_);
          append(for_replica_0_, std::move(mine));
        }
        for_replica_0_changed_.notify_one();
      }
      deliver_arrived();
    }
    // Then the other replicas' last reports; requests that arrive meanwhile are aborted by the
    // frontend's shut_down, as without a relay thread.
    while (!quit_ && replicas_done_ < router_.replicas() - 1) {
      deliver_arrived();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (const std::exception& e) {
    fatal(std::string("the server's relay thread: ") + e.what());
  }
}

void RootRelay::ended_on_replica_0(uint64_t ticket, bool aborted, bool cancelled, bool completed) {
  frontend_.on_finish(ticket, aborted, cancelled, completed);
  std::lock_guard lock(mutex_);
  router_.ended(0);
  replica_of_.erase(ticket);
}

void RootRelay::note_reused_on_replica_0(int64_t total) {
  std::lock_guard lock(mutex_);
  reused_[0] = total;
  publish_reused();
}

void RootRelay::finish() {
  if (thread_.joinable()) {
    thread_.join();  // it ends once the stop is out and every other replica has reported its last
  } else {
    // Every other replica's last report says it has stopped: nothing is left in flight to rank 0.
    std::string message;
    for (int source = 0; replicas_done_ < router_.replicas() - 1;) {
      receive(control_, MPI_ANY_SOURCE, kReportTag, Wait::SLEEPING, message, &source);
      deliver(message, source);
    }
  }
  frontend_.shut_down();
  outbox_.finish();
}

void RootRelay::deliver(const std::string& message, int source) {
  const TokenReport r = decode_report(message);
  for (const TokenReport::PromptScores& p : r.prompts) frontend_.on_prompt_logprobs(p.ticket, p.logprobs);
  for (const TokenReport::Token& t : r.tokens)
    frontend_.on_token(t.ticket, t.token, t.logprobs ? &*t.logprobs : nullptr);
  for (const TokenReport::Ending& e : r.endings) frontend_.on_finish(e.ticket, e.aborted, e.cancelled, e.completed);
  std::lock_guard lock(mutex_);
  for (const TokenReport::Ending& e : r.endings)
    if (auto it = replica_of_.find(e.ticket); it != replica_of_.end()) {
      router_.ended(it->second);
      replica_of_.erase(it);
    }
  reused_[static_cast<size_t>(replica_of_rank_.at(source))] = r.reused_prompt_tokens;
  publish_reused();
  replicas_done_ += r.done ? 1 : 0;
}

void RootRelay::deliver_arrived() {
  std::string message;
  for (int source = 0; receive(control_, MPI_ANY_SOURCE, kReportTag, Wait::NO, message, &source);)
    deliver(message, source);
}

void RootRelay::publish_reused() {
  int64_t total = 0;
  for (int64_t n : reused_) total += n;
  frontend_.note_reused_prompt_tokens(total);
}

}  // namespace meshnn::server
