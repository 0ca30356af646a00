// Chat templates: the Jinja2 `chat_template` of a model's tokenizer_config.json, rendered as
// Hugging Face transformers' apply_chat_template renders it (an immutable sandboxed environment
// with trim_blocks, lstrip_blocks and loop controls; raise_exception, strftime_now and its own
// tojson). The interpreter is written here (src/text/chat_template/): Debian has no C++ Jinja.
//
// Rendering is pure: the same template and inputs give the same text on every rank, as long as
// the caller fixes `now` (strftime_now would otherwise read each rank's clock).
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshnn::text {

struct ChatMessage {
  std::string role;
  std::string content;
  // The message's other fields as a JSON object's text (OpenAI's tool_calls, tool_call_id, name;
  // "content": null for a message without content), set on the template's message after role and
  // content. Empty: none.
  std::string fields_json;
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  // Special tokens as template variables, e.g. {"bos_token", "<s>"}, {"eos_token", "</s>"}.
  std::vector<std::pair<std::string, std::string>> special_tokens;
  // The time strftime_now() formats (local time, as Python's datetime.now()); the caller fixes it
  // so every rank renders the same text.
  std::time_t now = 0;
  // More variables, each as JSON text (e.g. {"tools", "[{\"type\": \"function\", ...}]"} or
  // {"enable_thinking", "false"}), set after the ones above so they may replace them (tools and
  // documents are None otherwise). Objects keep their key order.
  std::vector<std::pair<std::string, std::string>> json_variables;
};

// Variables a caller adds to every render (transformers' apply_chat_template(**kwargs), vLLM's
// chat_template_kwargs, e.g. {"enable_thinking": false} for Qwen3), from a JSON object's text: its
// members in order, each value as JSON text, for ChatTemplateInputs::json_variables. Throws
// meshnn::Error naming `what` when the text is not a JSON object, or names "messages" (the
// conversation is not theirs to replace).
std::vector<std::pair<std::string, std::string>> template_variables_from_json(std::string_view object_text,
                                                                              std::string_view what);
// `base` with each of `more` set on top: a name in both takes more's value, in base's place.
std::vector<std::pair<std::string, std::string>> with_variables(std::vector<std::pair<std::string, std::string>> base,
                                                                const std::vector<std::pair<std::string, std::string>>& more);

namespace chat_template_detail {
struct Program;
}

class ChatTemplate {
 public:
  // Parses a template. Throws meshnn::Error on a syntax error or a construct meshnn does not
  // implement, naming the template line and the construct (e.g. "chat template line 2: the
  // 'include' tag is not supported"). Filters and tests are looked up when they run, as in Jinja2.
  explicit ChatTemplate(std::string_view source);

  // Renders; throws meshnn::Error when the template calls raise_exception (message: "chat
  // template: " + its message) or fails at run time (a type error, an undefined value's
  // attribute, ...), naming the line. Also fails past 64 MiB of output, 100 nested macro calls
  // or 10^6 loop iterations, so a runaway template cannot hang or exhaust a rank.
  std::string render(const ChatTemplateInputs& inputs) const;

 private:
  std::shared_ptr<const chat_template_detail::Program> program_;
};

}  // namespace meshnn::text
