#include "meshnn/text/chat_template.hpp"

#include <fmt/format.h>

#include <algorithm>
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
    if (!m.fields_json.empty()) {
      const auto fields = nlohmann::ordered_json::parse(m.fields_json, nullptr, /*allow_exceptions=*/false);
      MESHNN_CHECK(!fields.is_discarded() && fields.is_object(), "a chat message's fields must be a JSON object, got {}",
                   m.fields_json);
      for (const auto& [name, value] : fields.items()) message.set(Value(name), from_json(value));
    }
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

std::vector<std::pair<std::string, std::string>> template_variables_from_json(std::string_view object_text,
                                                                              std::string_view what) {
  const auto j = nlohmann::ordered_json::parse(object_text, nullptr, /*allow_exceptions=*/false);
  MESHNN_CHECK(!j.is_discarded() && j.is_object(), "{} must be a JSON object such as {{\"enable_thinking\": false}}, got {}",
               what, object_text);
  std::vector<std::pair<std::string, std::string>> variables;
  for (const auto& [name, value] : j.items()) {
    MESHNN_CHECK(name != "messages", "{} may not set 'messages': the conversation is the request's", what);
    variables.emplace_back(name, value.dump());
  }
  return variables;
}

std::vector<std::pair<std::string, std::string>> with_variables(std::vector<std::pair<std::string, std::string>> base,
                                                                const std::vector<std::pair<std::string, std::string>>& more) {
  for (const auto& [name, value] : more) {
    const auto it = std::find_if(base.begin(), base.end(), [&](const auto& v) { return v.first == name; });
    if (it != base.end())
      it->second = value;
    else
      base.emplace_back(name, value);
  }
  return base;
}

}  // namespace meshnn::text
