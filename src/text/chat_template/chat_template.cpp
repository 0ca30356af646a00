#include "meshnn/text/chat_template.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "evaluate.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/text/utf8.hpp"
#include "parser.hpp"

namespace meshnn::text {

namespace chat_template_detail {
struct Program {
  Body body;
};
}  // namespace chat_template_detail

namespace {

using namespace chat_template_detail;

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      MESHNN_CHECK(u <= static_cast<uint64_t>(INT64_MAX), "chat template variable: integer {} beyond 64 bits", u);
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [key, value] : j.items()) d.set(Value(key), from_json(value));
      return Value::dict(std::move(d));
    }
    default: throw Error("chat template variable: unsupported JSON value");
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source) {
  auto program = std::make_shared<Program>();
  program->body = parse(sanitize_utf8(source));
  program_ = std::move(program);
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  // What transformers passes to render(): the special tokens, then messages, tools, documents
  // and add_generation_prompt. Text that is not UTF-8 is read as Python would decode it.
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  for (const auto& [name, token] : inputs.special_tokens) globals->vars[name] = Value(sanitize_utf8(token));
  List messages;
  for (const ChatMessage& m : inputs.messages) {
    Dict message;
    message.set(Value("role"), Value(sanitize_utf8(m.role)));
    message.set(Value("content"), Value(sanitize_utf8(m.content)));
    messages.push_back(Value::dict(std::move(message)));
  }
  globals->vars["messages"] = Value::list(std::move(messages));
  globals->vars["tools"] = Value::none();
  globals->vars["documents"] = Value::none();
  globals->vars["add_generation_prompt"] = Value(inputs.add_generation_prompt);
  for (const auto& [name, json] : inputs.json_variables) {
    const auto j = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
    MESHNN_CHECK(!j.is_discarded(), "chat template variable '{}' is not valid JSON", name);
    globals->vars[name] = from_json(j);
  }
  Renderer renderer(inputs.now);
  try {
    return renderer.render(program_->body, std::move(globals));
  } catch (const RaisedError& e) {
    throw Error("chat template: " + e.message);
  } catch (const RenderError& e) {
    throw Error(fmt::format("chat template line {}: {}", e.line, e.message));
  }
}

}  // namespace meshnn::text
