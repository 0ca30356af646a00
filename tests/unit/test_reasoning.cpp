// The reasoning parsers: an answer's <think>...</think> split from its content, whole and over every
// way a stream may cut it, against the rule restated here on the whole text; and the response
// shapes that carry the split.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/server/openai_api.hpp"
#include "meshnn/server/reasoning.hpp"

namespace meshnn::server {
namespace {

using Split = ReasoningSplitter::Split;

// The rule on the whole answer: a leading <think> is dropped; the reasoning runs to the first
// </think> (or the end); qwen3 reasons only when the answer opened with <think>.
Split whole_answer_rule(const std::string& answer, ReasoningParser parser) {
  std::string rest = answer;
  const bool opened = rest.rfind("<think>", 0) == 0;
  if (opened) rest.erase(0, 7);
  if (parser == ReasoningParser::QWEN3 && !opened) return {"", rest};
  const size_t close = rest.find("</think>");
  if (close == std::string::npos) return {rest, ""};
  return {rest.substr(0, close), rest.substr(close + 8)};
}

// The answer pushed in pieces cut at `cuts`, the last piece marked last.
Split streamed(const std::string& answer, ReasoningParser parser, const std::vector<size_t>& cuts) {
  ReasoningSplitter splitter(parser);
  Split total;
  size_t begin = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t end = i < cuts.size() ? cuts[i] : answer.size();
    const Split s = splitter.push(std::string_view(answer).substr(begin, end - begin), i == cuts.size());
    total.reasoning += s.reasoning;
    total.content += s.content;
    begin = end;
  }
  return total;
}

TEST(Reasoning, EveryCutOfAStreamGivesTheSplitOfTheWholeAnswer) {
  const std::vector<std::string> answers = {
      "<think>\nFirst, two and two.\n</think>\n\nFour.",  // Qwen3 thinking
      "<think>\n\n</think>\n\nFour.",                     // Qwen3 with enable_thinking false in the prompt
      "Four.",                                            // no reasoning at all
      "Two and two.\n</think>\n\nFour.",                  // DeepSeek-R1: <think> was in the prompt
      "<think>cut short while reasoning </thi",           // max_tokens ended it inside a tag
      "<thin",                                            // ... or inside the opening tag
      "<think></think></think>x",                         // only the first </think> ends the reasoning
      "a <think> b </think> c",                           // a <think> later on is text
      "",
      "</",
  };
  for (ReasoningParser parser : {ReasoningParser::QWEN3, ReasoningParser::DEEPSEEK_R1})
    for (const std::string& answer : answers) {
      const Split want = whole_answer_rule(answer, parser);
      const Split whole = ReasoningSplitter(parser).push(answer, true);
      EXPECT_EQ(whole.reasoning, want.reasoning) << answer;
      EXPECT_EQ(whole.content, want.content) << answer;
      // Every cut into two pieces, and every cut into single characters.
      for (size_t cut = 0; cut <= answer.size(); ++cut) {
        const Split s = streamed(answer, parser, {cut});
        EXPECT_TRUE(s.reasoning == want.reasoning && s.content == want.content) << answer << " cut at " << cut;
      }
      std::vector<size_t> every;
      for (size_t i = 1; i < answer.size(); ++i) every.push_back(i);
      const Split s = streamed(answer, parser, every);
      EXPECT_TRUE(s.reasoning == want.reasoning && s.content == want.content) << answer << " one character at a time";
    }
}

TEST(Reasoning, TextThatMayBeATagIsHeldBackUntilItCannotBe) {
  ReasoningSplitter s(ReasoningParser::QWEN3);
  Split next = s.push("<thi");  // may still open
  EXPECT_TRUE(next.reasoning.empty() && next.content.empty());
  next = s.push("nk>why</th");
  EXPECT_EQ(next.reasoning, "why");  // "</th" may be the closing tag
  next = s.push("ere");
  EXPECT_EQ(next.reasoning, "</there");
  next = s.push("</think>so");
  EXPECT_TRUE(next.reasoning.empty() && next.content == "so");
  ReasoningSplitter plain(ReasoningParser::NONE);
  EXPECT_EQ(plain.push("<think>x</think>").content, "<think>x</think>");  // no parser: all content
}

TEST(Reasoning, ParsersByVllmsNames) {
  EXPECT_EQ(reasoning_parser_named("qwen3"), ReasoningParser::QWEN3);
  EXPECT_EQ(reasoning_parser_named("deepseek_r1"), ReasoningParser::DEEPSEEK_R1);
  EXPECT_THROW(reasoning_parser_named("granite"), Error);
}

TEST(Reasoning, ChatResponsesCarryReasoningContentApart) {
  using nlohmann::json;
  const ResponseHeader h{Endpoint::CHAT_COMPLETIONS, "chatcmpl-1", 1, "m"};
  const std::string reasoning = "why", none;
  json j = json::parse(response_body(h, "Four.", FinishReason::STOP, {3, 4}, nullptr, nullptr, nullptr, &reasoning));
  EXPECT_EQ(j["choices"][0]["message"],
            (json{{"role", "assistant"}, {"content", "Four."}, {"reasoning_content", "why"}}));
  j = json::parse(response_body(h, "", FinishReason::LENGTH, {3, 4}, nullptr, nullptr, nullptr, &reasoning));
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());  // cut short while reasoning
  j = json::parse(response_body(h, "Four.", FinishReason::STOP, {3, 4}, nullptr, nullptr, nullptr, &none));
  EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_null());
  j = json::parse(response_body(h, "Four.", FinishReason::STOP, {3, 4}, nullptr, nullptr));
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));  // no parser

  auto delta = [&](const std::string& text, const std::string* r, bool first) {
    const std::string event = stream_chunk(h, text, std::nullopt, first, nullptr, nullptr, 0, r);
    return json::parse(event.substr(6))["choices"][0]["delta"];  // after "data: "
  };
  EXPECT_EQ(delta("", &reasoning, true), (json{{"role", "assistant"}, {"reasoning_content", "why"}, {"content", ""}}));
  EXPECT_EQ(delta("so", &none, false), (json{{"content", "so"}}));
  EXPECT_EQ(delta("so", &reasoning, false), (json{{"reasoning_content", "why"}, {"content", "so"}}));
}

}  // namespace
}  // namespace meshnn::server
