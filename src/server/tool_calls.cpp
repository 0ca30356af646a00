#include "meshnn/server/tool_calls.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "held_text.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

// A block's JSON as its call, when it is one.
std::optional<ToolCall> call_of(std::string_view body) {
  const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const auto arguments = j.contains("arguments") ? j["arguments"] : nlohmann::ordered_json::object();
  if (!arguments.is_object()) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), arguments.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

}  // namespace

ToolCallParser tool_call_parser_named(std::string_view name) {
  if (name == "hermes") return ToolCallParser::HERMES;
  throw Error(fmt::format("unknown tool call parser '{}' (expected hermes)", name));
}

ToolCallGrammar tool_call_grammar(ToolCallParser parser, std::string_view tools_json, const std::string& name) {
  MESHNN_CHECK(parser == ToolCallParser::HERMES, "tool_call_grammar: no tool call parser");
  using json = nlohmann::ordered_json;
  json calls = json::array();
  for (const json& tool : json::parse(tools_json)) {
    const json& function = tool.at("function");
    if (!name.empty() && function.at("name") != name) continue;
    const json parameters = function.contains("parameters") ? function["parameters"] : json{{"type", "object"}};
    calls.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", function.at("name")}}}, {"arguments", parameters}}},
                     {"required", {"name", "arguments"}},
                     {"additionalProperties", false}});
  }
  const json schema = calls.size() == 1 ? calls[0] : json{{"anyOf", calls}};
  return {schema.dump(), std::string(kOpen), std::string(kClose)};
}

ToolCallSplitter::ToolCallSplitter(ToolCallParser parser) : parser_(parser) {}

ToolCallSplitter::Split ToolCallSplitter::push(std::string_view text, bool last) {
  Split out;
  if (parser_ == ToolCallParser::NONE) {
    out.content = text;
    return out;
  }
  held_ += text;
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
