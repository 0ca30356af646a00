// Tool calls in a chat answer. A model given `tools` (OpenAI's function definitions, which the chat
// template writes into the prompt) calls one by writing a block the server then parses, with
// vLLM's --tool-call-parser:
//   HERMES: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, the format of Hermes, Qwen2.5
//           and Qwen3 (whitespace around the JSON allowed), one block per call. Text outside the
//           blocks stays the answer's content. A block whose JSON is not an object with a string
//           "name" and an object "arguments", or that the answer never closes, stays content as
//           written.
//   LLAMA3_JSON: Llama 3.1-3.3's JSON tool calls: an answer that begins (after whitespace, and
//           <|python_tag|> when it is written as text) with "{" is a call, or several separated by
//           ";": {"name": ..., "parameters": {...}} ("arguments" read alike). Any other answer is
//           content; so is one that begins with "{" but is not such calls, as written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshnn::server {

enum class ToolCallParser { NONE, HERMES, LLAMA3_JSON };
// "hermes", "llama3_json" (vLLM's names); throws meshnn::Error naming the ones there are.
ToolCallParser tool_call_parser_named(std::string_view name);

struct ToolCall {
  std::string name;
  std::string arguments;  // the arguments object as JSON text, as OpenAI's responses carry it
  std::string id;         // the response's name for the call (the splitter leaves it empty)
  bool operator==(const ToolCall&) const = default;
};

// A call forced by tool_choice "required" or a named function: the answer is one call in the
// parser's format, its JSON constrained (serving/json_grammar.hpp) to {"name": ..., "arguments": ...}
// (LLAMA3_JSON: "parameters") of one of the tools (of `name` only, when given), the arguments
// following that tool's parameters (any object when it has none). `tools_json` is the request's
// tools list. The schema, and the block's opening and closing tags (HERMES; none for LLAMA3_JSON)
// as the grammar's prefix and suffix, for `parser` (not NONE).
struct ToolCallGrammar {
  std::string schema, open, close;
};
ToolCallGrammar tool_call_grammar(ToolCallParser parser, std::string_view tools_json, const std::string& name);

// Splits an answer, given piece by piece as it streams, into content and tool calls. Text that may
// begin a block is held back until it cannot; a block is held until it closes, then given as its
// call (or, when it does not parse, as content). The pieces add up to the split of the whole
// answer however it was cut.
class ToolCallSplitter {
 public:
  struct Split {
    std::string content;
    std::vector<ToolCall> calls;
    bool operator==(const Split&) const = default;
  };
  explicit ToolCallSplitter(ToolCallParser parser);
  // The next piece of the answer; `last`: the answer ends with it, and nothing is held back.
  Split push(std::string_view text, bool last = false);

 private:
  Split push_hermes(bool last);
  Split push_llama3_json(bool last);

  ToolCallParser parser_;
  bool in_block_ = false;
  // LLAMA3_JSON: whether the answer's start has shown it to be calls (held to the end) or content.
  bool decided_ = false, calling_ = false;
  std::string held_;  // HERMES outside a block: a possible start of one; inside: the block so far, its tag included
};

}  // namespace meshnn::server
