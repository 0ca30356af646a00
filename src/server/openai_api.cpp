#include "meshnn/server/openai_api.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "held_text.hpp"
#include "meshnn/core/error.hpp"
#include "meshnn/text/utf8.hpp"

namespace meshnn::server {
namespace {

// Requests are read keeping their keys in order: tools and messages go on to the chat template, whose
// tojson writes them out as the client wrote them (Python dicts keep their order).
using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message) { throw ApiError(400, message); }

const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<int64_t> integer(const json& body, const char* key, int64_t low, int64_t high) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) bad(fmt::format("'{}' must be an integer, got {}", key, v->dump()));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(high))
    bad(fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, v->dump()));
  const int64_t x = v->get<int64_t>();
  if (x < low || x > high) bad(fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, x));
  return x;
}

std::optional<double> real(const json& body, const char* key, double low, double high) {
  const json* v = field(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) bad(fmt::format("'{}' must be a number, got {}", key, v->dump()));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < low || x > high) bad(fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, x));
  return x;
}

bool flag(const json& body, const char* key) {
  const json* v = field(body, key);
  if (v == nullptr) return false;
  if (!v->is_boolean()) bad(fmt::format("'{}' must be true or false, got {}", key, v->dump()));
  return v->get<bool>();
}

// Fields whose default meshnn implements and whose other values it refuses instead of ignoring.
void refuse_unimplemented(const json& body) {
  for (const char* key : {"functions", "suffix"}) {
    const json* v = field(body, key);
    const bool neutral = v == nullptr || *v == false || *v == 0 || (v->is_array() && v->empty()) ||
                         (v->is_object() && v->empty());
    if (!neutral) bad(fmt::format("'{}' is not supported by meshnn's server", key));
  }
  const std::optional<int64_t> best_of = integer(body, "best_of", 1, std::numeric_limits<int32_t>::max());
  if (best_of && *best_of != 1)
    bad("'best_of' must be 1: meshnn's server returns every choice it makes (ask for several with 'n')");
}

std::vector<int32_t> token_ids(const json& v, const char* key) {
  std::vector<int32_t> ids;
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
      bad(fmt::format("'{}' token ids must be integers in [0, 2^31), got {}", key, t.dump()));
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

// A message's fields beyond role and content, as JSON text for the template (ChatMessage::fields_json):
// a missing or null content is null there, and tool calls' arguments strings become their objects.
std::string message_fields(const json& message, size_t i) {
  json fields = json::object();
  for (const auto& [key, value] : message.items())
    if (key != "role" && key != "content") fields[key] = value;
  if (field(message, "content") == nullptr) fields["content"] = nullptr;
  if (json* calls = fields.contains("tool_calls") ? &fields["tool_calls"] : nullptr; calls != nullptr && !calls->is_null()) {
    if (!calls->is_array()) bad(fmt::format("messages[{}].tool_calls must be a list", i));
    for (json& call : *calls) {
      json* arguments = call.is_object() && call.contains("function") && call["function"].is_object() &&
                                call["function"].contains("arguments")
                            ? &call["function"]["arguments"]
                            : nullptr;
      if (arguments == nullptr || !arguments->is_string()) continue;
      const json parsed = json::parse(arguments->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_discarded()) *arguments = parsed;
    }
  }
  return fields.empty() ? std::string() : fields.dump(-1, ' ', false, json::error_handler_t::replace);
}

void read_prompt(const json& body, ApiRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr) bad("'prompt' is required");
  // A one-element list is the one prompt; a list of several is a batch, which meshnn refuses.
  const json& one = p->is_array() && p->size() == 1 && !(*p)[0].is_number() ? (*p)[0] : *p;
  if (one.is_string()) {
    if (one.get<std::string>().empty()) bad("'prompt' is empty");
    r.prompt = one.get<std::string>();
  } else if (one.is_array() && !one.empty() && one[0].is_number()) {
    r.prompt_token_ids = token_ids(one, "prompt");
  } else {
    bad("'prompt' must be a non-empty string or list of token ids (one prompt per request)");
  }
}

void read_messages(const json& body, ApiRequest& r) {
  const json* m = field(body, "messages");
  if (m == nullptr || !m->is_array() || m->empty()) bad("'messages' must be a non-empty list");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& message = (*m)[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      bad(fmt::format("messages[{}] must be an object with a string 'role'", i));
    std::string content;
    const json* c = field(message, "content");
    if (c != nullptr && c->is_string()) {
      content = c->get<std::string>();
    } else if (c != nullptr && c->is_array()) {
      // OpenAI's content parts: text parts are joined; any other kind is refused.
      for (const json& part : *c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          bad(fmt::format("messages[{}]: only text content parts are supported", i));
        content += part["text"].get<std::string>();
      }
    } else if (c != nullptr) {
      bad(fmt::format("messages[{}].content must be a string or a list of text parts", i));
    }
    r.messages.push_back({message["role"].get<std::string>(), std::move(content), message_fields(message, i)});
  }
}

// tools: a list of {"type": "function", "function": {"name": ..., ...}}; tool_choice "auto", "none",
// "required" or {"type": "function", "function": {"name": ...}}.
void read_tools(const json& body, ApiRequest& r) {
  const json* tools = field(body, "tools");
  if (const json* choice = field(body, "tool_choice"); choice != nullptr) {
    const json* function = choice->is_object() && choice->value("type", "") == "function" ? field(*choice, "function")
                                                                                           : nullptr;
    const json* name = function != nullptr && function->is_object() ? field(*function, "name") : nullptr;
    if (name != nullptr && name->is_string()) {
      r.tool_choice_required = true;
      r.tool_choice_name = name->get<std::string>();
    } else if (choice->is_string() && (*choice == "auto" || *choice == "none" || *choice == "required")) {
      r.tool_choice_none = *choice == "none";
      r.tool_choice_required = *choice == "required";
    } else {
      bad(fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", "
                      "\"function\": {{\"name\": ...}}}}, got {}",
                      choice->dump()));
    }
  }
  if (tools == nullptr || (tools->is_array() && tools->empty())) {
    if (r.tool_choice_required) bad("'tool_choice' asks for a call, and there are no 'tools'");
    return;
  }
  if (r.endpoint != Endpoint::CHAT_COMPLETIONS) bad("'tools' applies to /v1/chat/completions only");
  if (!tools->is_array()) bad("'tools' must be a list of function definitions");
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& t = (*tools)[i];
    const json* function = t.is_object() ? field(t, "function") : nullptr;
    if (!t.is_object() || t.value("type", "") != "function" || function == nullptr || !function->is_object() ||
        !function->contains("name") || !(*function)["name"].is_string())
      bad(fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ..., ...}}}}", i));
  }
  const bool named = r.tool_choice_name.empty() ||
                     std::any_of(tools->begin(), tools->end(),
                                 [&](const json& t) { return t["function"]["name"] == r.tool_choice_name; });
  if (!named) bad(fmt::format("'tool_choice' names the function '{}', which is not among 'tools'", r.tool_choice_name));
  r.tools = tools->dump(-1, ' ', false, json::error_handler_t::replace);
}

// response_format: {"type": "text"} (the default), {"type": "json_object"}, or {"type":
// "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}.
std::optional<std::string> schema_of(const json* f) {
  if (f == nullptr) return std::nullopt;
  const json* type = f->is_object() ? field(*f, "type") : nullptr;
  if (type == nullptr || !type->is_string() ||
      (*type != "text" && *type != "json_object" && *type != "json_schema"))
    bad("'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
        "\"json_schema\": {\"name\": ..., \"schema\": {...}}}");
  if (*type == "text") return std::nullopt;
  const std::string any_object = R"({"type":"object"})";
  if (*type == "json_object") return any_object;
  const json* spec = field(*f, "json_schema");
  if (spec == nullptr || !spec->is_object())
    bad("'response_format' of type json_schema needs \"json_schema\": {\"name\": ..., \"schema\": {...}}");
  const json* schema = field(*spec, "schema");
  return schema == nullptr ? any_object : schema->dump();
}

// vLLM's structured_outputs: {"json": a schema (or its JSON text)}, {"json_object": true} or
// {"choice": [...]}; its regex, grammar and structural_tag are refused.
void read_structured_outputs(const json& body, ApiRequest& r) {
  const json* s = field(body, "structured_outputs");
  if (s == nullptr) return;
  if (!s->is_object()) bad("'structured_outputs' must be an object");
  int given = 0;
  for (const auto& item : s->items()) {
    if (item.value().is_null() || (item.key() == "json_object" && item.value() == false)) continue;
    if (item.key() != "json" && item.key() != "json_object" && item.key() != "choice")
      bad(fmt::format("'structured_outputs' {} is not supported: meshnn's server takes \"json\" (a JSON Schema), "
                      "\"json_object\" and \"choice\"",
                      item.key()));
    ++given;
  }
  if (given > 1) bad("'structured_outputs' takes one of \"json\", \"json_object\" and \"choice\"");
  if (given == 1 && r.json_schema) bad("give either 'response_format' or 'structured_outputs', not both");
  if (const json* schema = field(*s, "json"); schema != nullptr) {
    try {
      r.json_schema = schema->is_string() ? json::parse(schema->get<std::string>()).dump() : schema->dump();
    } catch (const json::exception& e) {
      bad(fmt::format("'structured_outputs' json is not valid JSON: {}", e.what()));
    }
  }
  if (const json* object = field(*s, "json_object"); object != nullptr && *object == true)
    r.json_schema = R"({"type":"object"})";
  if (const json* choice = field(*s, "choice"); choice != nullptr) {
    if (!choice->is_array() || choice->empty()) bad("'structured_outputs' choice must be a non-empty list of strings");
    for (const json& c : *choice) {
      if (!c.is_string() || c.get<std::string>().empty())
        bad(fmt::format("'structured_outputs' choice must hold non-empty strings, got {}", c.dump()));
      r.choice.push_back(c.get<std::string>());
    }
  }
}

void read_stop(const json& body, ApiRequest& r) {
  const json* s = field(body, "stop");
  if (s == nullptr) return;
  const json list = s->is_string() ? json::array({*s}) : *s;
  if (!list.is_array() || list.size() > 16) bad("'stop' must be a string or a list of at most 16 strings");
  for (const json& x : list) {
    if (!x.is_string() || x.get<std::string>().empty()) bad("'stop' strings must be non-empty strings");
    r.stop.push_back(x.get<std::string>());
  }
}

// {"token id": bias}: the ids as decimal strings (JSON keys are strings), as OpenAI takes them.
void read_logit_bias(const json& body, ApiRequest& r) {
  const json* b = field(body, "logit_bias");
  if (b == nullptr) return;
  if (!b->is_object()) bad("'logit_bias' must be an object mapping token ids to biases in [-100, 100]");
  for (const auto& [key, value] : b->items()) {
    int64_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (error != std::errc() || end != key.data() + key.size() || id < 0 || id > std::numeric_limits<int32_t>::max())
      bad(fmt::format("'logit_bias' keys must be token ids (integers in [0, 2^31)), got \"{}\"", key));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100)
      bad(fmt::format("'logit_bias' values must be numbers in [-100, 100], got {} for token {}", value.dump(), id));
    r.logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  std::sort(r.logit_bias.begin(), r.logit_bias.end());
  for (size_t i = 1; i < r.logit_bias.size(); ++i)
    if (r.logit_bias[i].first == r.logit_bias[i - 1].first)
      bad(fmt::format("'logit_bias' names token {} twice", r.logit_bias[i].first));
}

// completions: "logprobs": N; chat: "logprobs": true with "top_logprobs": N.
void read_logprobs(const json& body, ApiRequest& r) {
  if (r.endpoint == Endpoint::COMPLETIONS) {
    r.echo = flag(body, "echo");
    if (const json* t = field(body, "top_logprobs"); t != nullptr && *t != 0)
      bad("'top_logprobs' is a chat field: completions take 'logprobs': N, the alternatives per token");
    r.logprobs = integer(body, "logprobs", 0, kMaxLogprobs);
    return;
  }
  if (const json* e = field(body, "echo"); e != nullptr && *e != false)
    bad("'echo' is a completions field: chat answers do not repeat the conversation");
  const std::optional<int64_t> top = integer(body, "top_logprobs", 0, kMaxLogprobs);
  if (flag(body, "logprobs"))
    r.logprobs = top.value_or(0);
  else if (top && *top > 0)
    bad("'top_logprobs' needs 'logprobs': true");
}

json header_json(const ResponseHeader& h, bool chunk) {
  json j;
  j["id"] = h.id;
  j["object"] = h.endpoint == Endpoint::CHAT_COMPLETIONS ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                         : "text_completion";
  j["created"] = h.created;
  j["model"] = h.model;
  return j;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// [{"id", "type": "function", "function": {"name", "arguments"}}]; in a stream's delta each also
// names its index among the answer's calls.
json tool_calls_json(const ChatExtras& extras, bool delta) {
  json calls = json::array();
  for (size_t i = 0; i < extras.tool_calls.size(); ++i) {
    const ToolCall& c = extras.tool_calls[i];
    json call;
    if (delta) call["index"] = extras.first_call_index + i;
    call["id"] = c.id;
    call["type"] = "function";
    call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
    calls.push_back(std::move(call));
  }
  return calls;
}

// JSON has no -infinity: a token the model rules out shows -9999, as vLLM's do.
double shown(float logprob) { return std::max(static_cast<double>(logprob), -9999.0); }

json bytes_json(const std::string& text) {
  json bytes = json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
// Completions: {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}.
json logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>& logprobs, int64_t text_offset) {
  if (endpoint == Endpoint::CHAT_COMPLETIONS) {
    json content = json::array();
    for (const TokenLogprob& t : logprobs) {
      json top = json::array();
      for (const auto& [text, logprob] : t.top)
        top.push_back({{"token", text::sanitize_utf8(text)}, {"logprob", shown(logprob)}, {"bytes", bytes_json(text)}});
      content.push_back({{"token", text::sanitize_utf8(t.token)},
                         {"logprob", t.unscored ? json(nullptr) : json(shown(t.logprob))},
                         {"bytes", bytes_json(t.token)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
          offsets = json::array();
  for (const TokenLogprob& t : logprobs) {
    tokens.push_back(text::sanitize_utf8(t.token));
    if (t.unscored) {
      token_logprobs.push_back(nullptr);
      top_logprobs.push_back(nullptr);
    } else {
      token_logprobs.push_back(shown(t.logprob));
      json top = json::object();
      for (const auto& [text, logprob] : t.top)
        if (const std::string key = text::sanitize_utf8(text); !top.contains(key))
          top[key] = shown(logprob);  // two ids of one text: the likelier
      top_logprobs.push_back(top);
    }
    offsets.push_back(text_offset);
    text_offset += characters(t.token);
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
          {"text_offset", offsets}};
}

std::string event(const json& j) {
  // Invalid UTF-8 cannot reach here (the text stream sanitizes), but a JSON dump must not throw.
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

std::optional<std::string> response_format_schema(std::string_view response_format) {
  json f;
  try {
    f = json::parse(response_format);
  } catch (const json::exception& e) {
    bad(fmt::format("'response_format' is not valid JSON: {}", e.what()));
  }
  return schema_of(f.is_null() ? nullptr : &f);
}

ApiRequest parse_request(std::string_view body_text, Endpoint endpoint) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    bad(fmt::format("the body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) bad("the body must be a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  if (const json* m = field(body, "model"); m != nullptr && !m->is_null()) {
    if (!m->is_string()) bad(fmt::format("'model' must be a string, got {}", m->dump()));
    r.model = m->get<std::string>();
  }
  refuse_unimplemented(body);
  if (endpoint == Endpoint::COMPLETIONS)
    read_prompt(body, r);
  else
    read_messages(body, r);
  constexpr int64_t kMaxTokens = std::numeric_limits<int32_t>::max();
  r.max_tokens = integer(body, "max_tokens", 1, kMaxTokens);
  if (endpoint == Endpoint::CHAT_COMPLETIONS)
    if (auto m = integer(body, "max_completion_tokens", 1, kMaxTokens)) r.max_tokens = m;
  r.temperature = real(body, "temperature", 0.0, 100.0);
  r.top_p = real(body, "top_p", 0.0, 1.0);
  if (r.top_p && *r.top_p == 0.0) bad("'top_p' must be in (0, 1], got 0");
  r.top_k = integer(body, "top_k", -1, std::numeric_limits<int32_t>::max());
  if (auto s = integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    r.seed = static_cast<uint64_t>(*s);
  r.presence_penalty = real(body, "presence_penalty", -2.0, 2.0);
  r.frequency_penalty = real(body, "frequency_penalty", -2.0, 2.0);
  r.repetition_penalty = real(body, "repetition_penalty", 0.0, 100.0);
  if (r.repetition_penalty && *r.repetition_penalty == 0.0) bad("'repetition_penalty' must be in (0, 100], got 0");
  read_logit_bias(body, r);
  read_stop(body, r);
  r.json_schema = schema_of(field(body, "response_format"));
  read_structured_outputs(body, r);
  if (const json* ids = field(body, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array()) bad("'stop_token_ids' must be a list of token ids");
    r.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
  r.ignore_eos = flag(body, "ignore_eos");
  r.min_tokens = integer(body, "min_tokens", 0, kMaxTokens);
  if (r.min_tokens && r.max_tokens && *r.min_tokens > *r.max_tokens)
    bad(fmt::format("'min_tokens' ({}) must not exceed 'max_tokens' ({})", *r.min_tokens, *r.max_tokens));
  r.n = integer(body, "n", 1, kMaxChoices).value_or(1);
  r.stream = flag(body, "stream");
  if (const json* o = field(body, "stream_options"); o != nullptr) {
    if (!o->is_object()) bad("'stream_options' must be an object");
    r.include_usage = flag(*o, "include_usage");
  }
  r.return_token_ids = flag(body, "return_token_ids");
  read_tools(body, r);
  if ((r.json_schema || !r.choice.empty()) && r.tool_choice_required)
    bad("'response_format' or 'structured_outputs' and a 'tool_choice' that asks for a call cannot be combined: the "
        "call's JSON follows the tool's parameters");
  if (const json* kwargs = field(body, "chat_template_kwargs"); kwargs != nullptr) {
    if (endpoint != Endpoint::CHAT_COMPLETIONS) bad("'chat_template_kwargs' applies to /v1/chat/completions only");
    try {
      r.chat_template_kwargs = text::template_variables_from_json(kwargs->dump(), "'chat_template_kwargs'");
    } catch (const Error& e) {
      bad(e.what());
    }
  }
  read_logprobs(body, r);
  return r;
}

serving::SamplingParams sampling_of(const ApiRequest& r, const serving::SamplingParams& defaults) {
  serving::SamplingParams p = defaults;
  if (r.temperature || r.top_p || r.top_k) {
    const bool was_greedy = defaults.mode == serving::SamplingMode::GREEDY;
    const double temperature = r.temperature.value_or(was_greedy ? 1.0 : defaults.temperature);
    if (temperature == 0.0) {
      p.mode = serving::SamplingMode::GREEDY;
    } else {
      p.mode = serving::SamplingMode::TOP_P;
      p.temperature = temperature;
      p.top_p = r.top_p.value_or(was_greedy || defaults.mode == serving::SamplingMode::TOP_K ? 1.0 : defaults.top_p);
      p.top_k = r.top_k ? std::max<int64_t>(*r.top_k, 0) : (was_greedy ? 0 : defaults.top_k);
    }
  }
  if (r.seed) p.seed = *r.seed;
  return p;
}

serving::LogitPenalties penalties_of(const ApiRequest& r, const serving::LogitPenalties& defaults) {
  serving::LogitPenalties p = defaults;
  p.presence = r.presence_penalty.value_or(p.presence);
  p.frequency = r.frequency_penalty.value_or(p.frequency);
  p.repetition = r.repetition_penalty.value_or(p.repetition);
  if (!r.logit_bias.empty()) p.bias = r.logit_bias;
  return p;
}

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::STOP: return "stop";
    case FinishReason::LENGTH: return "length";
    case FinishReason::ABORT: return "abort";
    case FinishReason::TOOL_CALLS: return "tool_calls";
  }
  return "abort";
}

int64_t characters(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text::sanitize_utf8(text)) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::string response_body(const ResponseHeader& h, const std::vector<Choice>& choices, const Usage& usage,
                          const std::vector<int32_t>* prompt_ids) {
  json j = header_json(h, false);
  j["choices"] = json::array();
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  for (size_t index = 0; index < choices.size(); ++index) {
    const Choice& c = choices[index];
    json choice;
    choice["index"] = index;
    if (h.endpoint == Endpoint::CHAT_COMPLETIONS && c.extras != nullptr) {
      json message = {{"role", "assistant"}, {"content", or_null(c.text)}};
      if (c.extras->reasoning) message["reasoning_content"] = or_null(*c.extras->reasoning);
      if (!c.extras->tool_calls.empty()) message["tool_calls"] = tool_calls_json(*c.extras, false);
      choice["message"] = std::move(message);
    } else if (h.endpoint == Endpoint::CHAT_COMPLETIONS) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else
      choice["text"] = c.text;
    choice["logprobs"] = c.logprobs != nullptr ? logprobs_json(h.endpoint, *c.logprobs, 0) : json(nullptr);
    choice["finish_reason"] = to_string(c.finish);
    if (c.token_ids != nullptr) choice["token_ids"] = *c.token_ids;
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(usage);
  if (prompt_ids != nullptr) j["prompt_token_ids"] = *prompt_ids;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string response_body(const ResponseHeader& h, const std::string& text, FinishReason reason, const Usage& usage,
                          const std::vector<int32_t>* prompt_ids, const std::vector<int32_t>* token_ids,
                          const std::vector<TokenLogprob>* logprobs, const ChatExtras* extras) {
  return response_body(h, {Choice{text, reason, token_ids, logprobs, extras}}, usage, prompt_ids);
}

std::string stream_chunk(const ResponseHeader& h, const std::string& text, std::optional<FinishReason> reason,
                         bool first, const std::vector<int32_t>* token_ids, const std::vector<TokenLogprob>* logprobs,
                         int64_t text_offset, const ChatExtras* extras, int64_t index) {
  json j = header_json(h, true);
  json choice;
  choice["index"] = index;
  if (h.endpoint == Endpoint::CHAT_COMPLETIONS) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (extras != nullptr && extras->reasoning && !extras->reasoning->empty())
      delta["reasoning_content"] = *extras->reasoning;
    if (!text.empty() || (first && !reason)) delta["content"] = text;
    if (extras != nullptr && !extras->tool_calls.empty()) delta["tool_calls"] = tool_calls_json(*extras, true);
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs != nullptr ? logprobs_json(h.endpoint, *logprobs, text_offset) : json(nullptr);
  choice["finish_reason"] = reason ? json(to_string(*reason)) : json(nullptr);
  if (token_ids != nullptr) choice["token_ids"] = *token_ids;
  j["choices"] = json::array({choice});
  return event(j);
}

std::string stream_usage_chunk(const ResponseHeader& h, const Usage& usage) {
  json j = header_json(h, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return event(j);
}

std::string error_body(int status, const std::string& message) {
  const char* type = status == 400 || status == 404 ? "invalid_request_error" : "server_error";
  json j;
  j["error"] = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return {};
  held_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is the beginning of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) keep = std::max(keep, marker_start_at_end(held_, s));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  return out;
}

}  // namespace meshnn::server
