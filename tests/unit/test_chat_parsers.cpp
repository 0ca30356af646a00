// The chat answer parsers: the reasoning parsers (an answer's <think>...</think> apart from its
// content) and the tool call parser (<tool_call> blocks as calls), each whole and over every way a
// stream may cut the answer, against the rule restated here on the whole text; and the response
// shapes that carry their results.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/server/openai_api.hpp"
#include "meshnn/server/reasoning.hpp"
#include "meshnn/server/tool_calls.hpp"
#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/json_grammar.hpp"

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

// Every cut into two pieces, and one character at a time, of `answer` through a fresh splitter
// made by `make`, each cut's pieces joined by `add`.
template <class Make, class Add, class Result>
void expect_every_cut_gives(const std::string& answer, Make make, Add add, const Result& want) {
  std::vector<std::vector<size_t>> cuttings;
  for (size_t cut = 0; cut <= answer.size(); ++cut) cuttings.push_back({cut});
  cuttings.emplace_back();
  for (size_t i = 1; i < answer.size(); ++i) cuttings.back().push_back(i);
  for (const std::vector<size_t>& cuts : cuttings) {
    auto splitter = make();
    Result total;
    size_t begin = 0;
    for (size_t i = 0; i <= cuts.size(); ++i) {
      const size_t end = i < cuts.size() ? cuts[i] : answer.size();
      add(total, splitter.push(std::string_view(answer).substr(begin, end - begin), i == cuts.size()));
      begin = end;
    }
    EXPECT_TRUE(total == want) << answer << " in " << cuts.size() + 1 << " pieces, the first cut at "
                               << (cuts.empty() ? 0 : cuts[0]);
  }
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
      expect_every_cut_gives(
          answer, [parser] { return ReasoningSplitter(parser); },
          [](Split& total, const Split& piece) {
            total.reasoning += piece.reasoning;
            total.content += piece.content;
          },
          want);
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

using Calls = ToolCallSplitter::Split;

struct CallsCase {
  std::string answer;
  Calls want;
};

// Each answer splits as `want` whole, and streamed in every cut.
void expect_splits(ToolCallParser parser, const std::vector<CallsCase>& cases) {
  for (const CallsCase& c : cases) {
    const Calls whole = ToolCallSplitter(parser).push(c.answer, true);
    EXPECT_TRUE(whole == c.want) << c.answer << ": content '" << whole.content << "', " << whole.calls.size()
                                 << " call(s)";
    expect_every_cut_gives(
        c.answer, [parser] { return ToolCallSplitter(parser); },
        [](Calls& total, Calls piece) {
          total.content += piece.content;
          for (ToolCall& call : piece.calls) total.calls.push_back(std::move(call));
        },
        c.want);
  }
}

TEST(ToolCalls, EveryCutOfAStreamGivesTheSplitOfTheWholeAnswer) {
  const std::vector<CallsCase> cases = {
      {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       {"", {{"get_weather", R"({"city":"Paris"})", ""}}}},
      {"Let me look.\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\"}"
       "</tool_call> done",
       {"Let me look.\n\n done", {{"a", "{}", ""}, {"b", "{}", ""}}}},
      {"no calls at all, not even <tool_", {"no calls at all, not even <tool_", {}}},
      // Not a call: the block stays content as written.
      {"<tool_call>{\"name\": 3}</tool_call>", {"<tool_call>{\"name\": 3}</tool_call>", {}}},
      {"<tool_call>not json</tool_call>x", {"<tool_call>not json</tool_call>x", {}}},
      {"<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>",
       {"<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>", {}}},
      // Cut short inside a block: as written.
      {"<tool_call>{\"name\": \"a\", \"argu", {"<tool_call>{\"name\": \"a\", \"argu", {}}},
      // Arguments keep their order and their non-ASCII text.
      {"<tool_call>{\"arguments\": {\"z\": 1, \"a\": \"é\"}, \"name\": \"f\"}</tool_call>",
       {"", {{"f", R"({"z":1,"a":"é"})", ""}}}},
  };
  expect_splits(ToolCallParser::HERMES, cases);
  const Calls none = ToolCallSplitter(ToolCallParser::NONE).push(cases[0].answer);
  EXPECT_TRUE(none.calls.empty() && none.content == cases[0].answer);  // no parser: all content
  EXPECT_EQ(tool_call_parser_named("hermes"), ToolCallParser::HERMES);
  EXPECT_EQ(tool_call_parser_named("llama3_json"), ToolCallParser::LLAMA3_JSON);
  EXPECT_THROW(tool_call_parser_named("mistral"), Error);
}

// Llama 3's calls: the whole answer, one object or several joined by ";", read at its end; any
// other answer is content as written, and so is one that opens with "{" without being calls.
TEST(ToolCalls, Llama3JsonAnswersAreCallsOrContentWhole) {
  const std::vector<CallsCase> cases = {
      {R"({"name": "get_weather", "parameters": {"city": "Paris"}})", {"", {{"get_weather", R"({"city":"Paris"})", ""}}}},
      {"\n\n  {\"name\": \"now\", \"arguments\": {}} ", {"", {{"now", "{}", ""}}}},
      {R"(<|python_tag|>{"name": "now"}; {"name": "get_weather", "parameters": {"city": "a;b}{", "n": [1, {"x": 2}]}})",
       {"", {{"now", "{}", ""}, {"get_weather", R"({"city":"a;b}{","n":[1,{"x":2}]})", ""}}}},
      // Parameters keep their order and their escapes' meaning.
      {R"({"parameters": {"z": "\"q\"", "a": "\u00e9"}, "name": "f"})", {"", {{"f", R"({"z":"\"q\"","a":"é"})", ""}}}},
      // Content: text first, a call cut short, text after a call, a call without a name.
      {R"(Sure. {"name": "now", "parameters": {}})", {R"(Sure. {"name": "now", "parameters": {}})", {}}},
      {R"({"name": "now", "parame)", {R"({"name": "now", "parame)", {}}},
      {R"({"name": "now"} and more)", {R"({"name": "now"} and more)", {}}},
      {R"({"name": "now"};)", {R"({"name": "now"};)", {}}},
      {R"({"parameters": {}})", {R"({"parameters": {}})", {}}},
      {R"({"name": "now", "parameters": "{}"})", {R"({"name": "now", "parameters": "{}"})", {}}},
      {"<|python", {"<|python", {}}},
      {"  ", {"  ", {}}},
      {"", {"", {}}},
  };
  expect_splits(ToolCallParser::LLAMA3_JSON, cases);
  // Streamed content goes out as it comes once the answer's start shows it is not a call.
  ToolCallSplitter s(ToolCallParser::LLAMA3_JSON);
  EXPECT_EQ(s.push("\n").content, "");
  EXPECT_EQ(s.push("The answer").content, "\nThe answer");
  EXPECT_EQ(s.push(" is 4.").content, " is 4.");
}

// tool_choice "required" or named: the grammar takes a block of one of the tools, its arguments as
// its parameters say, and the splitter reads that block back as the call.
TEST(ToolCalls, ForcedCallGrammarTakesTheBlocksTheSplitterReads) {
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "now"}}])";
  auto takes = [](const ToolCallGrammar& g, const std::string& answer) {
    const auto grammar = serving::JsonGrammar::from_schema(g.schema, g.open, g.close);
    serving::JsonCursor cursor(*grammar);
    return cursor.feed(answer) && cursor.complete();
  };
  const ToolCallGrammar any = tool_call_grammar(ToolCallParser::HERMES, tools, "");
  const std::string weather = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(takes(any, weather));
  EXPECT_TRUE(takes(any, R"(<tool_call>{"name":"now","arguments":{"x":[1]}}</tool_call>)"));
  EXPECT_FALSE(takes(any, R"(<tool_call>{"name":"get_weather","arguments":{}}</tool_call>)"));  // city is required
  EXPECT_FALSE(takes(any, R"(<tool_call>{"name":"later","arguments":{}}</tool_call>)"));
  EXPECT_FALSE(takes(any, R"(Let me look. <tool_call>{"name":"now","arguments":{}}</tool_call>)"));
  const ToolCallGrammar only_now = tool_call_grammar(ToolCallParser::HERMES, tools, "now");
  EXPECT_FALSE(takes(only_now, weather));
  EXPECT_TRUE(takes(only_now, R"(<tool_call>{"name":"now","arguments":{}}</tool_call>)"));
  ToolCallSplitter splitter(ToolCallParser::HERMES);
  EXPECT_EQ(splitter.push(weather, true),
            (ToolCallSplitter::Split{"", {ToolCall{"get_weather", R"({"city":"Paris"})", ""}}}));

  // Llama 3: the call object alone, its arguments under "parameters".
  const ToolCallGrammar llama = tool_call_grammar(ToolCallParser::LLAMA3_JSON, tools, "");
  const std::string llama_weather = R"({"name": "get_weather", "parameters": {"city": "Paris"}})";
  EXPECT_TRUE(takes(llama, llama_weather));
  EXPECT_FALSE(takes(llama, R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
  EXPECT_FALSE(takes(llama, weather));
  EXPECT_FALSE(takes(tool_call_grammar(ToolCallParser::LLAMA3_JSON, tools, "now"), llama_weather));
  EXPECT_EQ(ToolCallSplitter(ToolCallParser::LLAMA3_JSON).push(llama_weather, true),
            (ToolCallSplitter::Split{"", {ToolCall{"get_weather", R"({"city":"Paris"})", ""}}}));
}

TEST(ChatExtras, ResponsesCarryReasoningAndToolCallsApart) {
  using nlohmann::json;
  const ResponseHeader h{Endpoint::CHAT_COMPLETIONS, "chatcmpl-1", 1, "m"};
  ChatExtras extras;
  extras.reasoning = "why";
  json j = json::parse(response_body(h, "Four.", FinishReason::STOP, {3, 4}, nullptr, nullptr, nullptr, &extras));
  EXPECT_EQ(j["choices"][0]["message"],
            (json{{"role", "assistant"}, {"content", "Four."}, {"reasoning_content", "why"}}));
  j = json::parse(response_body(h, "", FinishReason::LENGTH, {3, 4}, nullptr, nullptr, nullptr, &extras));
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());  // cut short while reasoning
  extras.reasoning = "";
  j = json::parse(response_body(h, "Four.", FinishReason::STOP, {3, 4}, nullptr, nullptr, nullptr, &extras));
  EXPECT_TRUE(j["choices"][0]["message"]["reasoning_content"].is_null());
  j = json::parse(response_body(h, "Four.", FinishReason::STOP, {3, 4}, nullptr, nullptr));
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));  // no parser

  ChatExtras calls;
  calls.tool_calls = {{"get_weather", R"({"city":"Paris"})", "call_7_0"}};
  j = json::parse(response_body(h, "", FinishReason::TOOL_CALLS, {3, 4}, nullptr, nullptr, nullptr, &calls));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["message"],
            json::parse(R"({"role": "assistant", "content": null, "tool_calls": [{"id": "call_7_0",
              "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})"));

  auto delta = [&](const std::string& text, const ChatExtras* e, bool first) {
    const std::string event = stream_chunk(h, text, std::nullopt, first, nullptr, nullptr, 0, e);
    return json::parse(event.substr(6))["choices"][0]["delta"];  // after "data: "
  };
  extras.reasoning = "why";
  EXPECT_EQ(delta("", &extras, true), (json{{"role", "assistant"}, {"reasoning_content", "why"}, {"content", ""}}));
  EXPECT_EQ(delta("so", &extras, false), (json{{"reasoning_content", "why"}, {"content", "so"}}));
  extras.reasoning = "";
  EXPECT_EQ(delta("so", &extras, false), (json{{"content", "so"}}));
  calls.first_call_index = 2;
  EXPECT_EQ(delta("", &calls, false)["tool_calls"],
            json::parse(R"([{"index": 2, "id": "call_7_0", "type": "function",
              "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}])"));
}

}  // namespace
}  // namespace meshnn::server
