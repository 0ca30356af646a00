// World rank 0's side of the server: the HTTP threads that read requests and write responses,
// and the inbox through which they hand requests to the mesh loop (serve.cpp) and get tokens back.
// Only the mesh loop's threads call MPI (rank 0's main thread, and with several replicas its relay
// thread, root_relay.hpp); the HTTP threads touch nothing but the inbox and their own request's
// ticket.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshnn/server/openai_api.hpp"
#include "meshnn/server/serve.hpp"
#include "meshnn/text/text_stream.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace meshnn::server {

// One request between its HTTP thread and the mesh loop.
struct Ticket {
  uint64_t number = 0;  // in arrival order
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int32_t> tokens;  // generated so far
  std::vector<serving::TokenLogprobs> logprobs;  // theirs, if the request asked
  std::vector<serving::TokenLogprobs> prompt_logprobs;  // echo with logprobs: prompt tokens 1.., before any token
  bool finished = false;        // no more tokens will come
  bool aborted = false;         // finished by the server's shutdown
  bool completed = false;       // finished by closing its response_format's JSON value
};

// What the mesh loop takes from the inbox at a pass: new requests in ticket order and tickets
// whose clients went away (or met a stop string).
struct InboxBatch {
  std::vector<std::pair<uint64_t, serving::GenerationRequest>> arrivals;
  std::vector<uint64_t> cancels;
  bool stop = false;
};

class Frontend {
 public:
  // `check` throws meshnn::Error for a request the generator would refuse (it is called on the
  // HTTP threads and must only read). `stop_requested` is polled while the loop waits.
  Frontend(const ServeOptions& options, const ServeText& text,
           std::function<void(const serving::GenerationRequest&)> check, const volatile int* stop_requested);
  ~Frontend();
  // Binds host:port; returns the port. Throws meshnn::Error when it cannot.
  int bind();
  void start();  // serves on a thread of its own
  // The mesh loop's side. collect() waits up to `wait_ms` for something when the inbox is empty.
  // One thread collects; tokens and endings may come from two (replica 0's and the relay's).
  InboxBatch collect(int wait_ms);
  // A request's token, and its end (`aborted`: by the server's stop; `cancelled`: before its stop
  // token or max_tokens; `completed`: by closing its JSON value), by ticket. The end always follows
  // the last token (the same pass, or the same report), and only it finishes the ticket: its reply
  // must know how it ended.
  void on_token(uint64_t ticket, int32_t token, const serving::TokenLogprobs* logprobs);
  void on_prompt_logprobs(uint64_t ticket, const std::vector<serving::TokenLogprobs>& logprobs);
  void on_finish(uint64_t ticket, bool aborted, bool cancelled, bool completed);
  void note_reused_prompt_tokens(int64_t total) { reused_prompt_tokens_ = total; }
  // Ends the HTTP server: requests not yet ended end as aborted, listening stops, and the HTTP
  // threads finish their responses. The loop's thread; again (the destructor) does nothing more.
  void shut_down();

 private:
  // The request's `choices` tickets, handed to the mesh together (none once shutting down).
  std::vector<std::shared_ptr<Ticket>> submit(const serving::GenerationRequest& request, bool seeded, int64_t choices);
  void cancel(uint64_t ticket);
  void install_routes();
  // A completion or chat request from its body to its response (whole, or a stream).
  void answer(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // The generator's request for an API request: the prompt's ids, max_tokens and sampling, checked.
  // Throws ApiError or meshnn::Error.
  serving::GenerationRequest request_of(const ApiRequest& api) const;

  // The answer's log-probabilities as the response shows them, their texts through the tokenizer.
  std::vector<TokenLogprob> shown_logprobs(const std::vector<int32_t>& ids,
                                           const std::vector<serving::TokenLogprobs>& logprobs) const;
  // An echoed prompt's: its first token unscored, then those the generator scored.
  std::vector<TokenLogprob> shown_prompt_logprobs(const std::vector<int32_t>& prompt,
                                                  const std::vector<serving::TokenLogprobs>& logprobs) const;
  std::string token_text(int32_t id) const;

  ServeOptions options_;
  ServeText text_;
  std::optional<text::TokenTexts> token_texts_;  // with a tokenizer
  std::function<void(const serving::GenerationRequest&)> check_;
  const volatile int* stop_requested_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  std::mutex inbox_mutex_;
  std::condition_variable inbox_changed_;
  InboxBatch inbox_;
  uint64_t next_ticket_ = 0;
  bool closed_ = false;  // shutting down: new requests get 503
  std::shared_ptr<Ticket> running_ticket(uint64_t ticket);  // under running_mutex_
  std::mutex running_mutex_;
  std::unordered_map<uint64_t, std::shared_ptr<Ticket>> running_;  // collected, not yet ended
  // Responses to generation requests not yet wholly written. Stopping httplib cuts a stream short,
  // so shut_down() waits for these to end (their tickets aborted) first.
  std::mutex responses_mutex_;
  std::condition_variable responses_ended_;
  int open_responses_ = 0;
  void response_ended();
  std::unordered_map<uint64_t, std::shared_ptr<Ticket>> submitted_;  // under inbox_mutex_, until collected
  // For /metrics: set by the loop's thread, read by the HTTP threads.
  std::atomic<int64_t> running_count_{0}, prompt_tokens_{0}, reused_prompt_tokens_{0}, generated_tokens_{0};
  std::atomic<int64_t> finished_{0}, cancelled_{0}, rejected_{0};
};

}  // namespace meshnn::server
