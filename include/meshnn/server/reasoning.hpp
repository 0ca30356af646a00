// Reasoning models write their thoughts between <think> and </think> before the answer (Qwen3,
// DeepSeek-R1). With a reasoning parser (vLLM's --reasoning-parser), a chat response carries the
// thoughts apart, as `reasoning_content`, and `content` is what follows </think>.
#pragma once

#include <string>
#include <string_view>

namespace meshnn::server {

// How the answer begins:
//   QWEN3:       with <think> when the model reasons (Qwen3 with enable_thinking, the default);
//                an answer that does not begin with it is all content (enable_thinking false).
//   DEEPSEEK_R1: inside the reasoning (the chat template wrote <think> into the prompt, as
//                DeepSeek-R1's and Qwen3's *-Thinking-2507 templates do); a leading <think> is
//                dropped all the same.
// Either way the reasoning ends at the first </think>; an answer cut short before it is all
// reasoning. Neither tag is shown, and nothing else is removed (the content keeps the newlines
// that follow </think>).
enum class ReasoningParser { NONE, QWEN3, DEEPSEEK_R1 };
// "qwen3" or "deepseek_r1" (vLLM's names); throws meshnn::Error naming the ones there are.
ReasoningParser reasoning_parser_named(std::string_view name);

// Splits an answer, given piece by piece as it streams, into reasoning and content. Text that may
// be the start of a tag is held back until it cannot be, so the pieces add up to the split of the
// whole answer however it was cut.
class ReasoningSplitter {
 public:
  struct Split {
    std::string reasoning, content;
    bool operator==(const Split&) const = default;
  };
  explicit ReasoningSplitter(ReasoningParser parser);
  // The next piece of the answer; `last`: the answer ends with it, and nothing is held back.
  Split push(std::string_view text, bool last = false);

 private:
  enum class State { OPENING, REASONING, CONTENT };
  ReasoningParser parser_;
  State state_ = State::OPENING;
  std::string held_;
};

}  // namespace meshnn::server
