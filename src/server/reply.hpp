// One choice of a request as its tokens arrive (Reply: their text through the tokenizer, up to a
// stop string, and why it ended) and a chat answer's text through the server's parsers
// (ChatAnswerParser). World rank 0's HTTP threads use them (frontend.cpp), each on its own ticket.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "frontend.hpp"
#include "meshnn/server/openai_api.hpp"
#include "meshnn/server/reasoning.hpp"
#include "meshnn/server/tool_calls.hpp"
#include "meshnn/text/text_stream.hpp"

namespace meshnn::server {

// How often a non-streaming request's wait asks whether its client is still there.
constexpr std::chrono::milliseconds kHangUpPollInterval{100};

// One choice's answer as its tokens arrive: their text (through the tokenizer, up to a stop
// string), the ids, and at the end why it finished.
class Reply {
 public:
  struct Piece {
    std::string text;
    std::vector<int32_t> ids;
    std::vector<serving::TokenLogprobs> logprobs;  // the ids', if the request asked
    std::vector<serving::TokenLogprobs> prompt_logprobs;  // the first piece's: the prompt's, if scored
    std::optional<FinishReason> finish;
  };

  Reply(std::shared_ptr<Ticket> ticket, const ServeText& text, std::vector<int32_t> stop_ids,
        std::vector<std::string> stops)
      : ticket_(std::move(ticket)), stop_ids_(std::move(stop_ids)), matcher_(std::move(stops)) {
    if (text.tokenizer != nullptr) stream_.emplace(*text.tokenizer);
  }

  // Waits for tokens past those taken; returns their text. `cancel` is called when a stop string
  // ends the answer before the generator did. With `client_gone`, it is asked every
  // kHangUpPollInterval while nothing arrives; once it says yes the request is cancelled, and the
  // wait goes on for the end the cancel brings.
  template <typename Cancel>
  Piece next(const Cancel& cancel, const std::function<bool()>& client_gone = {}) {
    Piece piece;
    bool finished = false, aborted = false, completed = false;
    {
      std::unique_lock lock(ticket_->mutex);
      auto ready = [&] { return ticket_->finished || ticket_->tokens.size() > taken_; };
      if (!client_gone) ticket_->changed.wait(lock, ready);
      while (client_gone && !ticket_->changed.wait_for(lock, kHangUpPollInterval, ready)) {
        if (!hung_up_ && client_gone()) {
          hung_up_ = true;
          lock.unlock();
          cancel();
          lock.lock();
        }
      }
      piece.ids.assign(ticket_->tokens.begin() + static_cast<int64_t>(taken_), ticket_->tokens.end());
      if (!ticket_->logprobs.empty())
        piece.logprobs.assign(ticket_->logprobs.begin() + static_cast<int64_t>(taken_), ticket_->logprobs.end());
      if (taken_ == 0) piece.prompt_logprobs = ticket_->prompt_logprobs;  // set before the first token
      finished = ticket_->finished;
      aborted = ticket_->aborted;
      completed = ticket_->completed;
    }
    taken_ += piece.ids.size();
    std::string text;
    if (stream_) {
      for (int32_t id : piece.ids) text += stream_->push(id);
      if (finished) text += stream_->finish();
    }
    piece.text = matcher_.push(text);
    if (matcher_.stopped()) {
      if (!finished) cancel();
      piece.finish = FinishReason::STOP;
    } else if (finished) {
      piece.text += matcher_.flush();
      const bool stop_token = taken_ > 0 && std::find(stop_ids_.begin(), stop_ids_.end(), last_id(piece)) != stop_ids_.end();
      piece.finish = aborted                  ? FinishReason::ABORT
                     : stop_token || completed ? FinishReason::STOP
                                               : FinishReason::LENGTH;
    }
    if (piece.finish) done_ = true;
    return piece;
  }
  bool done() const { return done_; }
  size_t tokens_taken() const { return taken_; }

 private:
  int32_t last_id(const Piece& piece) const {
    if (!piece.ids.empty()) return piece.ids.back();
    std::lock_guard lock(ticket_->mutex);
    return ticket_->tokens.back();
  }

  std::shared_ptr<Ticket> ticket_;
  const std::vector<int32_t> stop_ids_;
  std::optional<text::TextStream> stream_;
  StopMatcher matcher_;
  size_t taken_ = 0;
  bool done_ = false;
  bool hung_up_ = false;
};

// A chat answer's text through the server's parsers, as it streams: the reasoning first
// (reasoning.hpp), then tool calls in what follows it (tool_calls.hpp), each call named
// call_<request>_<n>.
class ChatAnswerParser {
 public:
  struct Piece {
    std::string content;
    ChatExtras extras;
  };
  ChatAnswerParser(ReasoningParser reasoning, ToolCallParser tools, uint64_t request)
      : show_reasoning_(reasoning != ReasoningParser::NONE), reasoning_(reasoning), tools_(tools), request_(request) {}

  Piece push(std::string_view text, bool last) {
    ReasoningSplitter::Split r = reasoning_.push(text, last);
    ToolCallSplitter::Split t = tools_.push(r.content, last);
    Piece p{std::move(t.content), {}};
    if (show_reasoning_) p.extras.reasoning = std::move(r.reasoning);
    p.extras.first_call_index = calls_;
    for (ToolCall& call : t.calls) {
      call.id = fmt::format("call_{}_{}", request_, calls_++);
      p.extras.tool_calls.push_back(std::move(call));
    }
    return p;
  }
  // An answer that called a tool finishes with "tool_calls", as OpenAI's do.
  FinishReason finish(FinishReason reason) const {
    return calls_ > 0 && reason != FinishReason::ABORT ? FinishReason::TOOL_CALLS : reason;
  }

 private:
  bool show_reasoning_;
  ReasoningSplitter reasoning_;
  ToolCallSplitter tools_;
  uint64_t request_;
  size_t calls_ = 0;
};

}  // namespace meshnn::server
