#include "meshnn/server/tool_calls.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "held_text.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::server {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kWhitespace = " \t\r\n";

// A call's JSON object as its call, when it is one: a string "name" and an object under
// `arguments_key` (absent: no arguments).
std::optional<ToolCall> call_of(const json& j, const char* arguments_key) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const json arguments = j.contains(arguments_key) ? j[arguments_key] : json::object();
  if (!arguments.is_object()) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), arguments.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

std::optional<ToolCall> call_of(std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? std::nullopt : call_of(j, "arguments");
}

// Where the JSON object that opens `text` ends (one past its closing brace), by its braces outside
// strings; npos when it does not close. Its contents are checked when it is parsed.
size_t object_end(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// Llama 3's calls: objects separated by ";" (whitespace around them), after whitespace and the
// python tag; nothing when the text is anything else.
std::optional<std::vector<ToolCall>> llama3_calls(std::string_view text) {
  auto skip_whitespace = [&] { text.remove_prefix(std::min(text.size(), text.find_first_not_of(kWhitespace))); };
  skip_whitespace();
  if (text.starts_with(kPythonTag)) text.remove_prefix(kPythonTag.size());
  std::vector<ToolCall> calls;
  for (;;) {
    skip_whitespace();
    const size_t end = text.starts_with('{') ? object_end(text) : std::string_view::npos;
    if (end == std::string_view::npos) return std::nullopt;
    const json j = json::parse(text.substr(0, end), nullptr, /*allow_exceptions=*/false);
    std::optional<ToolCall> call = j.is_discarded() ? std::nullopt
                                   : call_of(j, j.is_object() && j.contains("parameters") ? "parameters" : "arguments");
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    text.remove_prefix(end);
    skip_whitespace();
    if (text.empty()) return calls;
    if (!text.starts_with(';')) return std::nullopt;
    text.remove_prefix(1);
  }
}

}  // namespace

ToolCallParser tool_call_parser_named(std::string_view name) {
  if (name == "hermes") return ToolCallParser::HERMES;
  if (name == "llama3_json") return ToolCallParser::LLAMA3_JSON;
  throw Error(fmt::format("unknown tool call parser '{}' (expected hermes or llama3_json)", name));
}

ToolCallGrammar tool_call_grammar(ToolCallParser parser, std::string_view tools_json, const std::string& name) {
  MESHNN_CHECK(parser != ToolCallParser::NONE, "tool_call_grammar: no tool call parser");
  // Llama 3's prompt asks for "parameters"; Hermes blocks carry "arguments".
  const char* arguments_key = parser == ToolCallParser::LLAMA3_JSON ? "parameters" : "arguments";
  json calls = json::array();
  for (const json& tool : json::parse(tools_json)) {
    const json& function = tool.at("function");
    if (!name.empty() && function.at("name") != name) continue;
    const json parameters = function.contains("parameters") ? function["parameters"] : json{{"type", "object"}};
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", function.at("name")}}}, {arguments_key, parameters}}},
                     {"required", {"name", arguments_key}},
                     {"additionalProperties", false}});
  }
  const json schema = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  if (parser == ToolCallParser::LLAMA3_JSON) return {schema.dump(), "", ""};
  return {schema.dump(), std::string(kOpen), std::string(kClose)};
}

ToolCallSplitter::ToolCallSplitter(ToolCallParser parser) : parser_(parser) {}

ToolCallSplitter::Split ToolCallSplitter::push(std::string_view text, bool last) {
  if (parser_ == ToolCallParser::NONE) return {std::string(text), {}};
  held_ += text;
  return parser_ == ToolCallParser::HERMES ? push_hermes(last) : push_llama3_json(last);
}

ToolCallSplitter::Split ToolCallSplitter::push_llama3_json(bool last) {
  Split out;
  if (!decided_) {
    // Held while the answer is whitespace, or may still be the python tag written as text.
    const size_t first = held_.find_first_not_of(kWhitespace);
    const std::string_view start = first == std::string::npos ? std::string_view() : std::string_view(held_).substr(first);
    const bool may_be_tag = start.size() < kPythonTag.size() && kPythonTag.starts_with(start);
    if (!last && (start.empty() || may_be_tag)) return out;
    decided_ = true;
    calling_ = start.starts_with('{') || start.starts_with(kPythonTag);
  }
  if (calling_ && !last) return out;  // calls are read whole, at the end
  std::optional<std::vector<ToolCall>> calls = calling_ ? llama3_calls(held_) : std::nullopt;
  if (calls)
    out.calls = std::move(*calls);
  else
    out.content = std::move(held_);
  held_.clear();
  return out;
}

ToolCallSplitter::Split ToolCallSplitter::push_hermes(bool last) {
  Split out;
  for (;;) {
    if (!in_block_) {
      const size_t open = held_.find(kOpen);
      if (open == std::string::npos) {
        const size_t keep = last ? 0 : marker_start_at_end(held_, kOpen);
        out.content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      out.content += held_.substr(0, open);
      held_.erase(0, open);
      in_block_ = true;
    }
    const size_t close = held_.find(kClose, kOpen.size());
    if (close == std::string::npos) {
      if (last) {  // never closed: the text as written
        out.content += held_;
        held_.clear();
        in_block_ = false;
      }
      return out;
    }
    const size_t end = close + kClose.size();
    if (std::optional<ToolCall> call = call_of(std::string_view(held_).substr(kOpen.size(), close - kOpen.size())))
      out.calls.push_back(std::move(*call));
    else
      out.content += held_.substr(0, end);
    held_.erase(0, end);
    in_block_ = false;
  }
}

}  // namespace meshnn::server
