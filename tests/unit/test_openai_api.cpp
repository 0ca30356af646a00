// The server's OpenAI protocol without a socket: requests read from JSON bodies (and refused with
// a message naming the field), sampling as OpenAI's parameters mean it, response and stream shapes
// parsed back with nlohmann-json, and the stop-string matcher over every split of its input.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "meshnn/server/openai_api.hpp"

namespace meshnn::server {
namespace {

using nlohmann::json;
using serving::SamplingMode;
using serving::SamplingParams;

std::string refusal(std::string_view body, Endpoint endpoint = Endpoint::COMPLETIONS) {
  try {
    parse_request(body, endpoint);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "(accepted)";
}

TEST(OpenAiApi, ReadsACompletionRequest) {
  const ApiRequest r = parse_request(
      R"({"model": "m", "prompt": "hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.8, "top_k": 20,
          "seed": -3, "stop": "\n", "stream": true, "stream_options": {"include_usage": true},
          "return_token_ids": true, "n": 1, "logprobs": null, "echo": false, "presence_penalty": 0})",
      Endpoint::COMPLETIONS);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "hello");
  EXPECT_TRUE(r.prompt_token_ids.empty());
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.5);
  EXPECT_EQ(r.top_p, 0.8);
  EXPECT_EQ(r.top_k, 20);
  EXPECT_EQ(r.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(r.stream && r.include_usage && r.return_token_ids);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(parse_request(R"({"prompt": "a", "n": 3, "best_of": 1})", Endpoint::COMPLETIONS).n, 3);

  const ApiRequest ids = parse_request(R"({"prompt": [1, 2, 3]})", Endpoint::COMPLETIONS);
  EXPECT_EQ(ids.prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(ids.prompt.has_value());
  EXPECT_FALSE(ids.max_tokens.has_value());
  EXPECT_EQ(parse_request(R"({"prompt": ["one"]})", Endpoint::COMPLETIONS).prompt, "one");
  EXPECT_EQ(parse_request(R"({"prompt": [[5, 6]]})", Endpoint::COMPLETIONS).prompt_token_ids,
            (std::vector<int32_t>{5, 6}));
}

TEST(OpenAiApi, ReadsAChatRequest) {
  const ApiRequest r = parse_request(
      R"({"messages": [{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                       {"role": "assistant", "content": null}],
          "max_completion_tokens": 9, "max_tokens": 4})",
      Endpoint::CHAT_COMPLETIONS);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.max_tokens, 9);  // max_completion_tokens is the newer name and wins
}

TEST(OpenAiApi, RefusesWhatItCannotDoNamingTheField) {
  EXPECT_NE(refusal("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(refusal("[1]").find("must be a JSON object"), std::string::npos);
  EXPECT_NE(refusal("{}").find("'prompt' is required"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": ""})").find("'prompt' is empty"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": ["a", "b"]})").find("one prompt per request"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": [1, -2]})").find("token ids must be integers"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "max_tokens": 0})").find("'max_tokens' must be in [1, "), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "max_tokens": 2.5})").find("'max_tokens' must be an integer"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "temperature": -1})").find("'temperature' must be in"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "top_p": 0})").find("'top_p' must be in (0, 1]"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "top_k": -2})").find("'top_k' must be in [-1, "), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "n": 0})").find("'n' must be in [1, 64]"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "n": 65})").find("'n' must be in [1, 64]"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "best_of": 2})").find("'best_of' must be 1"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "logprobs": 21})").find("'logprobs' must be in [0, 20]"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "logprobs": true})").find("'logprobs' must be an integer"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "top_logprobs": 2})").find("completions take 'logprobs': N"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", Endpoint::CHAT_COMPLETIONS)
                .find("'echo' is a completions field"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("'top_logprobs' needs 'logprobs': true"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", Endpoint::CHAT_COMPLETIONS)
                .find("'logprobs' must be true or false"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "stream": "yes"})").find("'stream' must be true or false"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "stop": ["x", ""]})").find("'stop' strings must be non-empty"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": []})", Endpoint::CHAT_COMPLETIONS).find("non-empty list"), std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"content": "x"}]})", Endpoint::CHAT_COMPLETIONS).find("messages[0]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("only text content parts"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("'functions' is not supported"),
            std::string::npos);
}

// Tools and the messages of a conversation that used them: the definitions go to the template as
// given; assistant tool calls' arguments strings become objects, a missing content null.
TEST(OpenAiApi, ReadsToolsAndToolMessages) {
  const ApiRequest r = parse_request(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "21 C"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
      "tool_choice": "auto"})",
                                     Endpoint::CHAT_COMPLETIONS);
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_TRUE(r.messages[0].fields_json.empty());
  const json assistant = json::parse(r.messages[1].fields_json);
  EXPECT_TRUE(assistant["content"].is_null());
  EXPECT_EQ(assistant["tool_calls"][0]["function"]["arguments"], (json{{"city", "Paris"}}));
  EXPECT_EQ(json::parse(r.messages[2].fields_json), (json{{"tool_call_id", "call_1"}}));
  EXPECT_EQ(r.messages[2].content, "21 C");
  EXPECT_EQ(json::parse(r.tools)[0]["function"]["name"], "get_weather");
  EXPECT_FALSE(r.tool_choice_none);
  EXPECT_TRUE(parse_request(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
                                "tools": [{"type": "function", "function": {"name": "f"}}]})",
                            Endpoint::CHAT_COMPLETIONS)
                  .tool_choice_none);
  EXPECT_TRUE(parse_request(R"({"messages": [{"role": "user", "content": "x"}], "tools": []})",
                            Endpoint::CHAT_COMPLETIONS)
                  .tools.empty());

  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], )";
  EXPECT_NE(refusal(chat + R"("tools": [{"type": "function"}]})", Endpoint::CHAT_COMPLETIONS).find("tools[0] must be"),
            std::string::npos);
  EXPECT_NE(refusal(chat + R"("tools": {"type": "function"}})", Endpoint::CHAT_COMPLETIONS).find("must be a list"),
            std::string::npos);
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}},
                                          {"type": "function", "function": {"name": "g"}}], )";
  const ApiRequest required = parse_request(chat + tools + R"("tool_choice": "required"})", Endpoint::CHAT_COMPLETIONS);
  EXPECT_TRUE(required.tool_choice_required && required.tool_choice_name.empty() && !required.tool_choice_none);
  const ApiRequest named = parse_request(chat + tools + R"("tool_choice": {"type": "function", "function": {"name": "g"}}})",
                                         Endpoint::CHAT_COMPLETIONS);
  EXPECT_TRUE(named.tool_choice_required && named.tool_choice_name == "g");
  EXPECT_NE(refusal(chat + R"("tool_choice": "required"})", Endpoint::CHAT_COMPLETIONS).find("there are no 'tools'"),
            std::string::npos);
  EXPECT_NE(refusal(chat + tools + R"("tool_choice": {"type": "function", "function": {"name": "h"}}})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("names the function 'h', which is not among 'tools'"),
            std::string::npos);
  EXPECT_NE(refusal(chat + tools + R"("tool_choice": "any"})", Endpoint::CHAT_COMPLETIONS).find("'tool_choice' must be"),
            std::string::npos);
  EXPECT_NE(refusal(chat + tools + R"("tool_choice": "required", "response_format": {"type": "json_object"}})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("cannot be combined"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", Endpoint::CHAT_COMPLETIONS)
                .find("messages[0].tool_calls must be a list"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]})")
                .find("applies to /v1/chat/completions only"),
            std::string::npos);
}

TEST(OpenAiApi, ReadsResponseFormat) {
  EXPECT_EQ(parse_request(R"({"prompt": "a"})", Endpoint::COMPLETIONS).json_schema, std::nullopt);
  EXPECT_EQ(parse_request(R"({"prompt": "a", "response_format": {"type": "text"}})", Endpoint::COMPLETIONS).json_schema,
            std::nullopt);
  EXPECT_EQ(parse_request(R"({"prompt": "a", "response_format": {"type": "json_object"}})", Endpoint::COMPLETIONS)
                .json_schema,
            R"({"type":"object"})");
  const ApiRequest r = parse_request(R"({"prompt": "a", "response_format": {"type": "json_schema", "json_schema":
      {"name": "n", "strict": true, "schema": {"type": "object", "properties": {"b": {"type": "integer"}}}}}})",
                                     Endpoint::COMPLETIONS);
  ASSERT_TRUE(r.json_schema.has_value());
  EXPECT_EQ(json::parse(*r.json_schema), json::parse(R"({"type": "object", "properties": {"b": {"type": "integer"}}})"));
  // vLLM's structured_outputs: json as a schema or its text, json_object.
  EXPECT_EQ(json::parse(*parse_request(R"({"prompt": "a", "structured_outputs": {"json": {"type": "object",
      "properties": {"b": {"type": "integer"}}}}})", Endpoint::COMPLETIONS).json_schema),
            json::parse(R"({"type": "object", "properties": {"b": {"type": "integer"}}})"));
  EXPECT_EQ(json::parse(*parse_request(R"({"prompt": "a", "structured_outputs": {"json": "{\"type\": \"array\"}"}})",
                                       Endpoint::COMPLETIONS)
                             .json_schema),
            json::parse(R"({"type": "array"})"));
  EXPECT_EQ(parse_request(R"({"prompt": "a", "structured_outputs": {"json_object": true}})", Endpoint::COMPLETIONS)
                .json_schema,
            R"({"type":"object"})");
  EXPECT_EQ(parse_request(R"({"prompt": "a", "structured_outputs": {"choice": ["x", "y z"]}})", Endpoint::COMPLETIONS)
                .choice,
            (std::vector<std::string>{"x", "y z"}));
  EXPECT_NE(refusal(R"({"prompt": "a", "structured_outputs": {"regex": "a+"}})").find("regex is not supported"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "structured_outputs": {"choice": ["x", ""]}})").find("non-empty strings"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "structured_outputs": {"choice": ["x"], "json_object": true}})")
                .find("takes one of"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "structured_outputs": {"json_object": true}, "response_format": {"type":
      "json_object"}})").find("not both"),
            std::string::npos);
  for (const char* format : {R"("json")", R"({"type": "xml"})", R"({"type": "json_schema"})"})
    EXPECT_NE(refusal(std::string(R"({"prompt": "a", "response_format": )") + format + "}").find("'response_format'"),
              std::string::npos)
        << format;
}

TEST(OpenAiApi, ReadsLogprobsAsEachEndpointSpellsThem) {
  const auto chat = [](const std::string& fields) {
    return parse_request(R"({"messages": [{"role": "user", "content": "x"}])" + fields + "}",
                         Endpoint::CHAT_COMPLETIONS)
        .logprobs;
  };
  EXPECT_EQ(parse_request(R"({"prompt": "a"})", Endpoint::COMPLETIONS).logprobs, std::nullopt);
  EXPECT_EQ(parse_request(R"({"prompt": "a", "logprobs": null})", Endpoint::COMPLETIONS).logprobs, std::nullopt);
  EXPECT_EQ(parse_request(R"({"prompt": "a", "logprobs": 0})", Endpoint::COMPLETIONS).logprobs, 0);
  EXPECT_EQ(parse_request(R"({"prompt": "a", "logprobs": 5})", Endpoint::COMPLETIONS).logprobs, 5);
  EXPECT_TRUE(parse_request(R"({"prompt": "a", "logprobs": 1, "echo": true})", Endpoint::COMPLETIONS).echo);
  EXPECT_FALSE(parse_request(R"({"prompt": "a"})", Endpoint::COMPLETIONS).echo);
  EXPECT_EQ(chat(""), std::nullopt);
  EXPECT_EQ(chat(R"(, "logprobs": false, "top_logprobs": 0)"), std::nullopt);
  EXPECT_EQ(chat(R"(, "logprobs": true)"), 0);
  EXPECT_EQ(chat(R"(, "logprobs": true, "top_logprobs": 20)"), 20);
}

TEST(OpenAiApi, ReadsPenaltiesAndLogitBias) {
  const ApiRequest r = parse_request(
      R"({"prompt": "a", "presence_penalty": 0.5, "frequency_penalty": -2, "repetition_penalty": 1.2,
          "logit_bias": {"50256": -100, "7": 2.5}})",
      Endpoint::COMPLETIONS);
  EXPECT_EQ(r.presence_penalty, 0.5);
  EXPECT_EQ(r.frequency_penalty, -2.0);
  EXPECT_EQ(r.repetition_penalty, 1.2);
  EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {50256, -100.0f}}));  // by id
  serving::LogitPenalties defaults{0.1, 0.2, 1.1, {{1, 1.0f}}};
  EXPECT_EQ(penalties_of(r, defaults), (serving::LogitPenalties{0.5, -2.0, 1.2, r.logit_bias}));
  // What the request leaves out keeps the server's default.
  const ApiRequest bare = parse_request(R"({"prompt": "a", "frequency_penalty": 1, "logit_bias": {}})",
                                        Endpoint::COMPLETIONS);
  EXPECT_EQ(penalties_of(bare, defaults), (serving::LogitPenalties{0.1, 1.0, 1.1, {{1, 1.0f}}}));

  EXPECT_NE(refusal(R"({"prompt": "a", "presence_penalty": 2.5})").find("'presence_penalty' must be in [-2, 2]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "frequency_penalty": "1"})").find("'frequency_penalty' must be a number"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "repetition_penalty": 0})").find("'repetition_penalty' must be in (0, 100]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "logit_bias": [1]})").find("'logit_bias' must be an object"),
            std::string::npos);
  for (const char* key : {"x", "-1", "1.5", " 3", "2147483648", ""})
    EXPECT_NE(refusal(fmt::format(R"({{"prompt": "a", "logit_bias": {{"{}": 1}}}})", key))
                  .find("'logit_bias' keys must be token ids"),
              std::string::npos)
        << key;
  EXPECT_NE(refusal(R"({"prompt": "a", "logit_bias": {"5": 101}})").find("values must be numbers in [-100, 100]"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "logit_bias": {"5": "1"}})").find("values must be numbers"), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "logit_bias": {"5": 1, "05": 2}})").find("names token 5 twice"),
            std::string::npos);
}

TEST(OpenAiApi, ReadsVllmsStopTokenFields) {
  const ApiRequest r = parse_request(
      R"({"prompt": "a", "max_tokens": 9, "stop_token_ids": [7, 2], "ignore_eos": true, "min_tokens": 4})",
      Endpoint::COMPLETIONS);
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{7, 2}));
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.min_tokens, 4);
  const ApiRequest bare = parse_request(R"({"prompt": "a"})", Endpoint::COMPLETIONS);
  EXPECT_TRUE(bare.stop_token_ids.empty());
  EXPECT_FALSE(bare.ignore_eos);
  EXPECT_EQ(bare.min_tokens, std::nullopt);
  EXPECT_NE(refusal(R"({"prompt": "a", "stop_token_ids": 3})").find("'stop_token_ids' must be a list"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "stop_token_ids": [1, -1]})").find("'stop_token_ids' token ids must be integers"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "ignore_eos": 1})").find("'ignore_eos' must be true or false"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "min_tokens": -1})").find("'min_tokens' must be in [0, "), std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "max_tokens": 3, "min_tokens": 4})")
                .find("'min_tokens' (4) must not exceed 'max_tokens' (3)"),
            std::string::npos);
}

TEST(OpenAiApi, ReadsChatTemplateKwargs) {
  const ApiRequest r = parse_request(
      R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"enable_thinking": false}})",
      Endpoint::CHAT_COMPLETIONS);
  ASSERT_EQ(r.chat_template_kwargs.size(), 1u);
  EXPECT_EQ(r.chat_template_kwargs[0], (std::pair<std::string, std::string>{"enable_thinking", "false"}));
  EXPECT_TRUE(parse_request(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": null})",
                            Endpoint::CHAT_COMPLETIONS)
                  .chat_template_kwargs.empty());
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": [1]})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("'chat_template_kwargs' must be a JSON object"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"messages": []}})",
                    Endpoint::CHAT_COMPLETIONS)
                .find("may not set 'messages'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"prompt": "a", "chat_template_kwargs": {"enable_thinking": false}})")
                .find("applies to /v1/chat/completions only"),
            std::string::npos);
}

TEST(OpenAiApi, SamplingAsOpenAiParametersMeanIt) {
  const SamplingParams greedy;  // the job's default
  ApiRequest r;
  EXPECT_EQ(sampling_of(r, greedy), greedy);  // nothing asked: the server's defaults
  r.temperature = 0.0;
  EXPECT_EQ(sampling_of(r, greedy).mode, SamplingMode::GREEDY);
  r.temperature = 0.7;
  SamplingParams p = sampling_of(r, greedy);
  EXPECT_EQ(p.mode, SamplingMode::TOP_P);
  EXPECT_EQ(p.temperature, 0.7);
  EXPECT_EQ(p.top_p, 1.0);  // a plain temperature draws from the whole distribution
  EXPECT_EQ(p.top_k, 0);
  r.top_k = -1;
  r.top_p = 0.9;
  r.seed = 11;
  p = sampling_of(r, greedy);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 0.9);
  EXPECT_EQ(p.seed, 11u);
  EXPECT_NO_THROW(p.validate());
  // A server started with top-p keeps its own cut unless the request names one.
  SamplingParams server{SamplingMode::TOP_P, 0.8, 40, 0.95, 5};
  ApiRequest only_temperature;
  only_temperature.temperature = 1.2;
  p = sampling_of(only_temperature, server);
  EXPECT_EQ(p.temperature, 1.2);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.top_p, 0.95);
  EXPECT_EQ(p.seed, 5u);
}

TEST(OpenAiApi, ResponsesHaveOpenAisShapes) {
  const ResponseHeader completion{Endpoint::COMPLETIONS, "cmpl-3", 1700000000, "tiny"};
  const std::vector<int32_t> prompt{1, 2}, tokens{7, 8, 9};
  json j = json::parse(response_body(completion, "abc", FinishReason::LENGTH, {2, 3}, &prompt, &tokens));
  EXPECT_EQ(j["id"], "cmpl-3");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], "abc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["token_ids"], json(tokens));
  EXPECT_EQ(j["prompt_token_ids"], json(prompt));
  EXPECT_EQ(j["usage"]["total_tokens"], 5);

  // n choices: each with its index, in order; one usage for them all.
  const std::vector<int32_t> other{5};
  j = json::parse(response_body(
      completion, {Choice{"abc", FinishReason::LENGTH, &tokens}, Choice{"d", FinishReason::STOP, &other}}, {2, 4}, &prompt));
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "d");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["token_ids"], json(other));
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["usage"]["total_tokens"], 6);

  const ResponseHeader chat{Endpoint::CHAT_COMPLETIONS, "chatcmpl-4", 1700000000, "tiny"};
  j = json::parse(response_body(chat, "hi", FinishReason::STOP, {4, 1}, nullptr, nullptr));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"], (json{{"role", "assistant"}, {"content", "hi"}}));
  EXPECT_FALSE(j["choices"][0].contains("token_ids"));
  EXPECT_FALSE(j.contains("prompt_token_ids"));

  auto event = [](const std::string& e) {
    EXPECT_EQ(e.rfind("data: ", 0), 0u);
    EXPECT_EQ(e.substr(e.size() - 2), "\n\n");
    return json::parse(e.substr(6));
  };
  j = event(stream_chunk(chat, "", std::nullopt, true, nullptr));
  EXPECT_EQ(j["object"], "chat.completion.chunk");
  EXPECT_EQ(j["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
  j = event(stream_chunk(chat, "x", std::nullopt, false, nullptr));
  EXPECT_EQ(j["choices"][0]["delta"], (json{{"content", "x"}}));
  j = event(stream_chunk(chat, "", FinishReason::STOP, false, nullptr));
  EXPECT_EQ(j["choices"][0]["delta"], json::object());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  j = event(stream_chunk(chat, "z", std::nullopt, false, nullptr, nullptr, 0, nullptr, 2));
  EXPECT_EQ(j["choices"][0]["index"], 2);
  EXPECT_EQ(j["choices"][0]["delta"], (json{{"content", "z"}}));
  j = event(stream_chunk(completion, "y", std::nullopt, true, &tokens));
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], "y");
  EXPECT_EQ(j["choices"][0]["token_ids"], json(tokens));
  j = event(stream_usage_chunk(completion, {2, 3}));
  EXPECT_TRUE(j["choices"].empty());
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  // Text that is not UTF-8 is replaced, not thrown on.
  EXPECT_NO_THROW(event(stream_chunk(completion, "\xff", std::nullopt, false, nullptr)));

  j = json::parse(error_body(400, "bad 'x'"));
  EXPECT_EQ(j["error"]["message"], "bad 'x'");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["code"], 400);
}

TEST(OpenAiApi, LogprobsHaveOpenAisShapes) {
  const float inf = std::numeric_limits<float>::infinity();
  // " é" is two characters in three bytes; the second token rules out its alternative.
  const std::vector<TokenLogprob> logprobs{{" \xc3\xa9", -0.25f, {{" \xc3\xa9", -0.25f}, {"x", -1.5f}, {"x", -2.0f}}},
                                           {"!", -0.5f, {{"!", -0.5f}, {"?", -inf}}}};
  const std::vector<int32_t> tokens{7, 8};
  const ResponseHeader completion{Endpoint::COMPLETIONS, "cmpl-3", 1700000000, "tiny"};
  json j = json::parse(response_body(completion, " \xc3\xa9!", FinishReason::LENGTH, {2, 2}, nullptr, nullptr, &logprobs));
  const json& c = j["choices"][0]["logprobs"];
  EXPECT_EQ(c["tokens"], (json{" \xc3\xa9", "!"}));
  EXPECT_EQ(c["token_logprobs"], (json{-0.25, -0.5}));
  // A text twice among the alternatives keeps its likelier; minus infinity shows as -9999.
  EXPECT_EQ(c["top_logprobs"][0], (json{{" \xc3\xa9", -0.25}, {"x", -1.5}}));
  EXPECT_EQ(c["top_logprobs"][1], (json{{"!", -0.5}, {"?", -9999.0}}));
  EXPECT_EQ(c["text_offset"], (json{0, 2}));
  // A stream's chunk counts its offsets from where its first token begins.
  j = json::parse(stream_chunk(completion, "!", std::nullopt, false, nullptr, &logprobs, 10).substr(6));
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], (json{10, 12}));
  j = json::parse(response_body(completion, "a", FinishReason::LENGTH, {2, 1}, nullptr, nullptr));
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());

  const ResponseHeader chat{Endpoint::CHAT_COMPLETIONS, "chatcmpl-4", 1700000000, "tiny"};
  j = json::parse(response_body(chat, " \xc3\xa9!", FinishReason::STOP, {4, 2}, nullptr, nullptr, &logprobs));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], " \xc3\xa9");
  EXPECT_EQ(content[0]["logprob"], -0.25);
  EXPECT_EQ(content[0]["bytes"], (json{32, 0xc3, 0xa9}));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 3u);  // chat lists every alternative, texts repeated or not
  EXPECT_EQ(content[0]["top_logprobs"][1], (json{{"token", "x"}, {"logprob", -1.5}, {"bytes", {120}}}));
  EXPECT_EQ(content[1]["top_logprobs"][1]["logprob"], -9999.0);
  j = json::parse(stream_chunk(chat, "!", std::nullopt, false, nullptr, &logprobs).substr(6));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 2u);

  // An echoed prompt's first token has no score: null, as OpenAI's.
  std::vector<TokenLogprob> echoed{{"<s>", 0.0f, {}, true}};
  echoed.push_back(logprobs[1]);
  j = json::parse(response_body(completion, "!", FinishReason::LENGTH, {2, 1}, nullptr, nullptr, &echoed));
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"], (json{nullptr, -0.5}));
  EXPECT_TRUE(j["choices"][0]["logprobs"]["top_logprobs"][0].is_null());
  EXPECT_EQ(j["choices"][0]["logprobs"]["text_offset"], (json{0, 3}));

  EXPECT_EQ(characters(""), 0);
  EXPECT_EQ(characters(" \xc3\xa9"), 2);
  EXPECT_EQ(characters("\xe2\x82"), 1);  // shown as one U+FFFD
  EXPECT_EQ(characters("\x94\x94"), 2);  // two stray continuation bytes: two U+FFFD
  // A byte piece shows as U+FFFD, its bytes exactly.
  const std::vector<TokenLogprob> byte_piece{{"\x94", -1.0f, {{"\x94", -1.0f}}}};
  j = json::parse(response_body(chat, "\xef\xbf\xbd", FinishReason::STOP, {4, 1}, nullptr, nullptr, &byte_piece));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["token"], "\xef\xbf\xbd");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["bytes"], (json{0x94}));
}

// The matcher gives, over any cut of the text into pushes, the text before the first stop string
// (or all of it), and never releases text that a stop string later covers.
std::string matched(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool& stopped) {
  StopMatcher m(stops);
  std::string out;
  for (const std::string& p : pieces) {
    const std::string released = m.push(p);
    out += released;
  }
  out += m.flush();
  stopped = m.stopped();
  return out;
}

TEST(OpenAiApi, StopStringsCutTheTextOverEverySplit) {
  const std::string text = "the ring reduces; the line gathers; END and more";
  const std::vector<std::vector<std::string>> cases = {{"END"}, {"; the", "END"}, {"gathers;"}, {"absent"},
                                                       {"e r"},  {"ENDX", "more"}};
  for (const auto& stops : cases) {
    size_t first = std::string::npos;
    for (const std::string& s : stops) first = std::min(first, text.find(s));
    const std::string expected = text.substr(0, first);
    for (size_t a = 0; a <= text.size(); ++a)
      for (size_t b = a; b <= text.size(); b += 3) {
        bool stopped = false;
        const std::string out = matched(stops, {text.substr(0, a), text.substr(a, b - a), text.substr(b)}, stopped);
        ASSERT_EQ(out, expected) << "stops " << stops.front() << ", cut at " << a << " and " << b;
        ASSERT_EQ(stopped, first != std::string::npos);
      }
  }
  // Held back while it may begin a stop string, released once it cannot.
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc ST"), "abc ");
  EXPECT_EQ(m.push("Ox"), "STOx");
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.flush(), "ST");
}

}  // namespace
}  // namespace meshnn::server
