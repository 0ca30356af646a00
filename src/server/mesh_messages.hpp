// What the server's ranks tell each other, point to point (control-plane bytes, never tensors):
// world rank 0 hands each replica's leader its requests, cancellations and the order to stop; a
// leader passes them on to the rest of its replica before each pass; a leader of another replica
// than rank 0's reports its tokens back to rank 0, which owns the HTTP connections.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include "frontend.hpp"

namespace meshnn::server {

// Tokens and endings of one replica's requests, by ticket, in the order they happened.
// A batch without arrivals, cancellations or the stop: nothing to tell anyone.
inline bool empty(const InboxBatch& b) { return b.arrivals.empty() && b.cancels.empty() && !b.stop; }

struct TokenReport {
  struct Token {
    uint64_t ticket;
    int32_t token;
    std::optional<serving::TokenLogprobs> logprobs;  // if the request asked
  };
  struct Ending {
    uint64_t ticket;
    bool aborted;    // by the server's stop
    bool cancelled;  // before its stop token or max_new_tokens (the stop, a hang-up, a stop string)
    bool completed;  // by closing its JSON value (GenerationRequest::grammar)
  };
  struct PromptScores {
    uint64_t ticket;
    std::vector<serving::TokenLogprobs> logprobs;
  };
  std::vector<PromptScores> prompts;  // before the tokens of the same report
  std::vector<Token> tokens;
  std::vector<Ending> endings;  // after the tokens of the same report
  int64_t reused_prompt_tokens = 0;  // the replica's total so far
  bool done = false;  // the replica has stopped: its last report
  bool empty() const { return prompts.empty() && tokens.empty() && endings.empty() && !done; }
};

std::string encode(const InboxBatch& batch);  // "" for an empty batch
InboxBatch decode_batch(const std::string& text);
std::string encode(const TokenReport& report);
TokenReport decode_report(const std::string& text);

// The group root's message to every other member of `comm` before each pass. While `idle` the
// others wait for it sleeping a millisecond between looks, so an idle server leaves the cores
// free; while it runs they wait as MPI does, since a message comes at every pass.
std::string share_with_group(MPI_Comm comm, const std::string& message, bool idle);

// Messages that are sent without waiting for their receiver (rank 0 to the leaders, the leaders
// to rank 0): each buffer lives until its send completes. finish() waits for all.
class Outbox {
 public:
  void send(MPI_Comm comm, int to, int tag, std::string message);
  void finish();

 private:
  struct Pending {
    std::string bytes;
    MPI_Request request;
  };
  std::list<Pending> pending_;  // a list: a send's buffer must not move while it is in flight
};

// The next message with `tag` from `from` (MPI_ANY_SOURCE: anyone) on `comm`. NO: only one that
// has arrived (returns false otherwise); SLEEPING: waits, sleeping a millisecond between looks (an
// idle server's cores stay free); AS_MPI_DOES: waits in MPI_Probe (a message is due at once).
enum class Wait { NO, SLEEPING, AS_MPI_DOES };
bool receive(MPI_Comm comm, int from, int tag, Wait wait, std::string& message, int* source = nullptr);

inline constexpr int kGroupTag = 0x5e7e;   // group root -> members: the pass's requests
inline constexpr int kRouteTag = 0x5e7f;   // world rank 0 -> a replica's leader
inline constexpr int kReportTag = 0x5e80;  // a replica's leader -> world rank 0

}  // namespace meshnn::server
