// The OpenAI API as meshnn's server speaks it: the requests of /v1/completions and
// /v1/chat/completions read from their JSON bodies, and the responses and stream chunks written
// in the shapes OpenAI's clients (and vLLM's, whose extensions top_k and return_token_ids are
// kept) parse. Pure functions of their arguments: no sockets, no mesh.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshnn/serving/logit_penalties.hpp"
#include "meshnn/serving/sampler.hpp"
#include "meshnn/server/tool_calls.hpp"
#include "meshnn/text/chat_template.hpp"

namespace meshnn::server {

// A request the server refuses: its HTTP status and the message of the error body.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

enum class Endpoint { COMPLETIONS, CHAT_COMPLETIONS };

struct ApiRequest {
  Endpoint endpoint = Endpoint::COMPLETIONS;
  std::string model;                        // as given ("" when absent); the frontend checks it is ours
  std::optional<std::string> prompt;        // completions: text
  std::vector<int32_t> prompt_token_ids;    // completions: a prompt given as token ids instead
  std::vector<text::ChatMessage> messages;  // chat
  std::optional<int64_t> max_tokens;        // max_tokens, or chat's max_completion_tokens
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;  // vLLM's; -1 or 0: no top-k cut
  std::optional<uint64_t> seed;
  // OpenAI's presence_penalty and frequency_penalty ([-2, 2]), vLLM's repetition_penalty (> 0) and
  // OpenAI's logit_bias ({"token id": bias in [-100, 100]}); serving/logit_penalties.hpp.
  std::optional<double> presence_penalty, frequency_penalty, repetition_penalty;
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<std::string> stop;  // the text ends before the first of these
  // vLLM's: token ids that end the answer besides the model's eos; ignore the eos; and the
  // tokens to make before any of them may come (they are not drawn until then).
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<int64_t> min_tokens;
  int64_t n = 1;  // choices to make for the prompt (1 to kMaxChoices), each a request of its own
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage: a last chunk with the counts
  bool return_token_ids = false;  // vLLM's: the prompt's and the answer's ids in the response
  // Each token's log-probability and this many of the most likely tokens at its position (0-20):
  // completions' logprobs, or chat's top_logprobs (0 unless given) when its logprobs is true.
  std::optional<int64_t> logprobs;
  bool echo = false;  // completions: the answer begins with the prompt (and with logprobs, its tokens')
  // chat: vLLM's chat_template_kwargs, variables for the chat template (e.g. enable_thinking), each
  // value as JSON text.
  std::vector<std::pair<std::string, std::string>> chat_template_kwargs;
  // chat: OpenAI's tools (function definitions) as the list's JSON text, for the template's `tools`
  // (empty: none), and tool_choice: "none" (the answer is not parsed for calls), "required" (the
  // answer is a call, of any of the tools) or a function named (a call of that one).
  std::string tools;
  bool tool_choice_none = false;
  bool tool_choice_required = false;
  std::string tool_choice_name;  // "": any of the tools
  // response_format json_schema's schema (or vLLM's structured_outputs json), as JSON text
  // ({"type":"object"} for json_object): the answer is JSON that follows it
  // (serving/json_grammar.hpp). None: text.
  std::optional<std::string> json_schema;
  // vLLM's structured_outputs choice: the answer is one of these strings, as written. Empty: none.
  std::vector<std::string> choice;
};

// One generated token's log-probabilities as a response shows them: its text (the bytes it adds
// to the answer, which may be part of a character), its log-probability, and the most likely
// tokens at its position with theirs.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
  bool unscored = false;  // an echoed prompt's first token, which nothing before it scores: null
};
inline constexpr int64_t kMaxLogprobs = 20;  // alternatives per token, as vLLM's default limit
// Choices per request: each takes a slot of the cache, and those beyond the free slots wait.
inline constexpr int64_t kMaxChoices = 64;

// Reads a request body. Throws ApiError(400) naming the field for malformed JSON, a wrong type, a
// value out of range (n beyond kMaxChoices), an empty prompt or conversation, or a field meshnn does
// not implement with a non-default value (best_of, functions, suffix, ...). A
// response_format's schema is read as JSON, not compiled (serving::JsonGrammar refuses what it
// cannot follow).
// A chat message's fields beyond role and content (tool_calls, tool_call_id, name, ...) go to the
// template as given, except that a tool call's "arguments" JSON string is parsed into its object,
// as vLLM does, so that templates can write it out with tojson.
ApiRequest parse_request(std::string_view body, Endpoint endpoint);

// The schema a response_format value (JSON text) asks the answer to follow, as JSON text
// ({"type":"object"} for json_object); nothing for {"type": "text"}. Throws ApiError(400) for any
// other shape. The batch job's --prompts lines take the same values.
std::optional<std::string> response_format_schema(std::string_view response_format);

// The request's sampling on top of the server's defaults, as OpenAI's parameters mean it:
// temperature 0 is greedy; a temperature, top_p or top_k on a greedy default turns on sampling
// (top-p; top_p 1 and no top-k cut unless given); a seed replaces the default seed.
serving::SamplingParams sampling_of(const ApiRequest& request, const serving::SamplingParams& defaults);

// The request's penalties and logit bias: each penalty given replaces the server's default; a
// logit_bias replaces the default's bias.
serving::LogitPenalties penalties_of(const ApiRequest& request, const serving::LogitPenalties& defaults);

enum class FinishReason { STOP, LENGTH, ABORT, TOOL_CALLS };
std::string_view to_string(FinishReason reason);  // "stop", "length", "abort", "tool_calls"

// What every response and chunk of one request carries.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::COMPLETIONS;
  std::string id;     // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

// What a chat answer (or a piece of one) holds beside its content when the server parses it.
struct ChatExtras {
  // With a reasoning parser (reasoning.hpp): the reasoning, shown as reasoning_content.
  std::optional<std::string> reasoning;
  // With a tool call parser (tool_calls.hpp): the calls, each with its id; in a stream, the piece's
  // calls, the first of which is the answer's call number `first_call_index`.
  std::vector<ToolCall> tool_calls;
  size_t first_call_index = 0;
};

// One answer of a whole response. `logprobs`: its tokens', if the request asked. `extras` (chat):
// the message also carries reasoning_content (null when empty) and tool_calls (when any), and
// `text` is then the content, null when empty.
struct Choice {
  std::string text;
  FinishReason finish = FinishReason::STOP;
  const std::vector<int32_t>* token_ids = nullptr;
  const std::vector<TokenLogprob>* logprobs = nullptr;
  const ChatExtras* extras = nullptr;
};
// A whole (non-streamed) response body: the choices with their indexes in order, the usage, and
// the prompt's ids if given.
std::string response_body(const ResponseHeader& header, const std::vector<Choice>& choices, const Usage& usage,
                          const std::vector<int32_t>* prompt_ids);
// The same for one choice.
std::string response_body(const ResponseHeader& header, const std::string& text, FinishReason reason,
                          const Usage& usage, const std::vector<int32_t>* prompt_ids,
                          const std::vector<int32_t>* token_ids, const std::vector<TokenLogprob>* logprobs = nullptr,
                          const ChatExtras* extras = nullptr);
// One server-sent event of a stream ("data: {...}\n\n"): a piece of text (chat: the first
// chunk also names the role), or with `reason` the last chunk of the choice. `logprobs`: those of
// the piece's tokens, the first of which begins `text_offset` characters into the answer.
// `extras`: the piece's reasoning (in the delta's reasoning_content when not empty) and tool calls
// (each whole in the delta's tool_calls, with its index). `index`: the choice it belongs to (n).
std::string stream_chunk(const ResponseHeader& header, const std::string& text, std::optional<FinishReason> reason,
                         bool first, const std::vector<int32_t>* token_ids,
                         const std::vector<TokenLogprob>* logprobs = nullptr, int64_t text_offset = 0,
                         const ChatExtras* extras = nullptr, int64_t index = 0);
// The characters of a token's text as the response shows it (invalid UTF-8 as U+FFFD, which
// `bytes` gives exactly): how far the text offsets of completions' logprobs move past it.
int64_t characters(std::string_view text);
std::string stream_usage_chunk(const ResponseHeader& header, const Usage& usage);
inline constexpr std::string_view kStreamEnd = "data: [DONE]\n\n";
// An error body: {"error": {"message", "type", "code"}}.
std::string error_body(int status, const std::string& message);

// The text of a stream up to a stop string, released as soon as no stop string can begin in it.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds generated text; returns what may be sent now. After a stop string appeared it returns
  // the text before it and stopped() turns true; later calls return nothing.
  std::string push(std::string_view text);
  // The text held back (a possible start of a stop string), at the end of the answer.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace meshnn::server
