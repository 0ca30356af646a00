#include "meshnn/server/reasoning.hpp"

#include <fmt/format.h>

#include "held_text.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

ReasoningParser reasoning_parser_named(std::string_view name) {
  if (name == "qwen3") return ReasoningParser::QWEN3;
  if (name == "deepseek_r1") return ReasoningParser::DEEPSEEK_R1;
  throw Error(fmt::format("unknown reasoning parser '{}' (expected qwen3 or deepseek_r1)", name));
}

ReasoningSplitter::ReasoningSplitter(ReasoningParser parser) : parser_(parser) {
  if (parser == ReasoningParser::NONE) state_ = State::CONTENT;
}

ReasoningSplitter::Split ReasoningSplitter::push(std::string_view text, bool last) {
  Split out;
  held_ += text;
  if (state_ == State::OPENING) {
    // Wait until the answer's start is known to be, or not to be, <think>.
    if (!last && held_.size() < kOpen.size() && kOpen.substr(0, held_.size()) == held_) return out;
    const bool opened = held_.compare(0, kOpen.size(), kOpen) == 0;
    if (opened) held_.erase(0, kOpen.size());
    state_ = opened || parser_ == ReasoningParser::DEEPSEEK_R1 ? State::REASONING : State::CONTENT;
  }
  if (state_ == State::REASONING) {
    const size_t close = held_.find(kClose);
    if (close == std::string::npos) {
      const size_t keep = last ? 0 : marker_start_at_end(held_, kClose);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
    out.reasoning = held_.substr(0, close);
    held_.erase(0, close + kClose.size());
    state_ = State::CONTENT;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace meshnn::server
