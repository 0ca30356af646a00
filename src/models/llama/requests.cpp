#include "requests.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "meshnn/core/error.hpp"
#include "meshnn/core/hash.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/models/llama/synthetic.hpp"
#include "meshnn/server/openai_api.hpp"
#include "meshnn/text/chat_template.hpp"

namespace meshnn::models::llama {
namespace {

struct TextPrompt {
  std::string text;                               // the prompt as given, or the user message under --chat
  std::optional<std::vector<text::ChatMessage>> messages;  // a conversation for the chat template
  int64_t max_new_tokens;
  std::optional<std::string> schema;  // structured output: the JSON Schema the answer follows
};

std::vector<text::ChatMessage> read_messages(const nlohmann::json& j, const std::string& where) {
  MESHNN_CHECK(j.is_array() && !j.empty(), "{}: \"messages\" must be a non-empty list", where);
  std::vector<text::ChatMessage> messages;
  for (const nlohmann::json& m : j) {
    MESHNN_CHECK(m.is_object() && m.contains("role") && m["role"].is_string() && m.contains("content") &&
                     m["content"].is_string(),
                 "{}: each message must be {{\"role\": string, \"content\": string}}, got {}", where, m.dump());
    for (const auto& [key, value] : m.items())
      MESHNN_CHECK(key == "role" || key == "content", "{}: unknown message key '{}' (a message has \"role\" and \"content\")",
                   where, key);
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return messages;
}

// --prompts FILE.jsonl: one JSON object per line, {"prompt": "...", "max_tokens": N} or
// {"messages": [...], "max_tokens": N}, and optionally a "response_format" as the server takes it;
// blank lines are skipped. A misspelt key is an error rather than a silently ignored setting.
std::vector<TextPrompt> read_prompts_jsonl(const std::string& path, int64_t default_max_new_tokens,
                                           const std::optional<std::string>& default_schema) {
  std::ifstream in(path);
  MESHNN_CHECK(in.good(), "cannot open prompts file '{}'", path);
  std::vector<TextPrompt> prompts;
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, line_number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    MESHNN_CHECK(!j.is_discarded() && j.is_object(), "{}: not a JSON object", where);
    for (const auto& [key, value] : j.items())
      MESHNN_CHECK(key == "prompt" || key == "messages" || key == "max_tokens" || key == "response_format",
                   "{}: unknown key '{}' (expected \"prompt\" or \"messages\", and optionally \"max_tokens\" and "
                   "\"response_format\")",
                   where, key);
    MESHNN_CHECK(j.contains("prompt") != j.contains("messages"), "{}: give either \"prompt\" or \"messages\"", where);
    TextPrompt p{"", std::nullopt, default_max_new_tokens, default_schema};
    if (j.contains("response_format")) {
      try {
        p.schema = server::response_format_schema(j["response_format"].dump());
      } catch (const server::ApiError& e) {
        throw Error(fmt::format("{}: {}", where, e.what()));
      }
    }
    if (j.contains("prompt")) {
      MESHNN_CHECK(j["prompt"].is_string(), "{}: \"prompt\" must be a string", where);
      p.text = j["prompt"].get<std::string>();
    } else {
      p.messages = read_messages(j["messages"], where);
    }
    if (j.contains("max_tokens")) {
      MESHNN_CHECK(j["max_tokens"].is_number_integer() && j["max_tokens"].get<int64_t>() >= 1,
                   "{}: \"max_tokens\" must be a whole number >= 1, got {}", where, j["max_tokens"].dump());
      p.max_new_tokens = j["max_tokens"].get<int64_t>();
    }
    prompts.push_back(std::move(p));
  }
  MESHNN_CHECK(!prompts.empty(), "prompts file '{}' holds no prompt", path);
  return prompts;
}

// The template conversations are rendered with: --chat-template's, else the model's. Parsed once,
// so that a template meshnn cannot run fails before any prompt.
text::ChatTemplate chat_template(const LlmJobConfig& c, const text::LoadedTokenizer& tokenizer) {
  if (!c.chat_template_file.empty()) return text::load_chat_template(c.chat_template_file);
  MESHNN_CHECK(tokenizer.chat_template.has_value(),
               "the model's tokenizer ({}) has no chat template (a base model?): drop --chat and \"messages\", or "
               "pass --chat-template FILE",
               tokenizer.source);
  try {
    return text::ChatTemplate(*tokenizer.chat_template);
  } catch (const Error& e) {
    throw Error(fmt::format("the chat template of {}: {}", tokenizer.source, e.what()));
  }
}

std::vector<serving::GenerationRequest> generated_requests(const LlmJobConfig& c, const LlamaConfig& config) {
  std::vector<serving::GenerationRequest> requests;
  for (int64_t b = 0; b < c.batch; ++b) {
    serving::GenerationRequest r;
    r.id = static_cast<uint64_t>(b);
    r.max_new_tokens = c.max_new_tokens;
    for (int64_t t = 0; t < c.prompt_len; ++t)
      r.prompt.push_back(static_cast<int32_t>(mix64(mix64(c.seed ^ kTokensTensorId) + b * c.prompt_len + t) %
                                              static_cast<uint64_t>(config.vocab_size)));
    requests.push_back(std::move(r));
  }
  return requests;
}

// docs/spec/hdf5.md §4: tokens [batch, seq], optional prompt_lengths [batch] and max_new_tokens [batch].
std::vector<serving::GenerationRequest> file_requests(const LlmJobConfig& c, const LlamaConfig& config) {
  io::DatasetInfo info;
  const std::vector<int64_t> ids = io::read_int_dataset_local(c.tokens, "tokens", &info);
  MESHNN_CHECK(info.shape.size() == 2 && info.shape[0] >= 1,
               "{}: dataset 'tokens' must be [batch, seq] with batch >= 1, got {} dims", c.tokens, info.shape.size());
  const int64_t batch = info.shape[0], seq = info.shape[1];
  std::vector<int64_t> lengths(static_cast<size_t>(batch), seq), new_tokens(static_cast<size_t>(batch), c.max_new_tokens);
  auto optional_vector = [&](const char* name, std::vector<int64_t>& into) {
    try {
      io::inspect_dataset_local(c.tokens, name);
    } catch (const Error&) {
      return;  // absent: the defaults stand
    }
    io::DatasetInfo i;
    const std::vector<int64_t> v = io::read_int_dataset_local(c.tokens, name, &i);
    MESHNN_CHECK(i.shape == std::vector<int64_t>{batch}, "{}: dataset '{}' must be [{}] (one per prompt)", c.tokens,
                 name, batch);
    into = v;
  };
  optional_vector("prompt_lengths", lengths);
  optional_vector("max_new_tokens", new_tokens);
  std::vector<serving::GenerationRequest> requests;
  for (int64_t b = 0; b < batch; ++b) {
    MESHNN_CHECK(lengths[b] >= 1 && lengths[b] <= seq, "{}: prompt {} has length {} (need 1..{}: an empty prompt cannot be prefilled)",
                 c.tokens, b, lengths[b], seq);
    // Checked here, on every rank for every request: the generator checks it too, but in dp and
    // hybrid only for its own replica's requests, so a bad one would fail one replica alone.
    MESHNN_CHECK(new_tokens[b] >= 1, "{}: max_new_tokens of prompt {} is {} (need >= 1)", c.tokens, b, new_tokens[b]);
    serving::GenerationRequest r;
    r.id = static_cast<uint64_t>(b);
    r.max_new_tokens = new_tokens[b];
    for (int64_t t = 0; t < lengths[b]; ++t) {
      const int64_t id = ids[static_cast<size_t>(b * seq + t)];
      MESHNN_CHECK(id >= 0 && id < config.vocab_size, "{}: token {} of prompt {} is {}, outside the vocabulary [0, {})",
                   c.tokens, t, b, id, config.vocab_size);
      r.prompt.push_back(static_cast<int32_t>(id));
    }
    requests.push_back(std::move(r));
  }
  return requests;
}

}  // namespace

JobRequests make_job_requests(const LlmJobConfig& c, const LlamaConfig& config, const std::string& weights_file,
                              std::time_t now) {
  JobRequests out;
  out.stop_token_ids = io::read_int_array_attribute_local(weights_file, "eos_token_ids");
  if (out.stop_token_ids.empty() && config.eos_token_id) out.stop_token_ids.push_back(*config.eos_token_id);
  for (int64_t id : out.stop_token_ids)
    MESHNN_CHECK(id >= 0 && id < config.vocab_size, "{}: eos token id {} is outside the vocabulary [0, {})", weights_file,
                 id, config.vocab_size);
  const bool text_prompts = !c.prompts.empty() || !c.prompts_file.empty();
  MESHNN_CHECK(!(text_prompts && !c.tokens.empty()), "--tokens cannot be combined with --prompt or --prompts");
  MESHNN_CHECK(text_prompts || (c.json_schema_file.empty() && !c.json_object),
               "--json-schema and --json-object apply to text prompts: give --prompt or --prompts");
  MESHNN_CHECK(!c.chat || text_prompts || c.interactive, "--chat applies to text prompts: give --prompt or --prompts");
  for (const auto& [option, given] : {std::pair{"--chat-template", !c.chat_template_file.empty()},
                                      std::pair{"--chat-template-kwargs", !c.chat_template_kwargs.empty()}})
    MESHNN_CHECK(!given || c.chat || c.interactive || c.serve || !c.prompts_file.empty(),
                 "{} applies to --chat, --interactive, --serve and --prompts lines with \"messages\"", option);
  if (!c.chat_template_kwargs.empty())
    out.chat_variables = text::template_variables_from_json(c.chat_template_kwargs, "--chat-template-kwargs");
  const std::string tokenizer_path = c.tokenizer.empty() ? weights_file : c.tokenizer;
  try {
    out.tokenizer = text::load_tokenizer(tokenizer_path);
  } catch (const Error& e) {
    // Token-id prompts do not need the tokenizer the weights file carries: the job runs and
    // reports ids, and says why there is no text. One asked for by name must work.
    if (text_prompts || c.interactive || !c.tokenizer.empty()) throw;
    out.tokenizer_problem = e.what();
  }
  if (out.tokenizer) {
    MESHNN_CHECK(out.tokenizer->tokenizer->vocab_size() <= config.vocab_size,
                 "the tokenizer ({}) has {} tokens but the model's vocabulary is {}", out.tokenizer->source,
                 out.tokenizer->tokenizer->vocab_size(), config.vocab_size);
  }
  if (c.serve) {
    // Clients may send token ids without a tokenizer, and completions without a chat template.
    MESHNN_CHECK(c.chat_template_file.empty() || out.tokenizer.has_value(),
                 "--chat-template needs the model's tokenizer, and {} has none", weights_file);
    if (!c.chat_template_file.empty()) {
      out.chat_template = chat_template(c, *out.tokenizer);
    } else if (out.tokenizer && out.tokenizer->chat_template) {
      // A model template meshnn cannot run leaves the completions endpoint serving.
      try {
        out.chat_template = chat_template(c, *out.tokenizer);
      } catch (const Error& e) {
        out.chat_template_problem = e.what();
      }
    }
    return out;
  }
  if (c.interactive) {
    MESHNN_CHECK(out.tokenizer.has_value(),
                 "--interactive needs the model's tokenizer, and {} has none: convert the model with meshnn-convert "
                 "from a directory holding tokenizer.model or tokenizer.json, or pass --tokenizer PATH",
                 weights_file);
    out.chat_template = chat_template(c, *out.tokenizer);
    return out;
  }
  if (!text_prompts) {
    out.requests = c.tokens.empty() ? generated_requests(c, config) : file_requests(c, config);
    return out;
  }
  MESHNN_CHECK(out.tokenizer.has_value(),
               "text prompts need a tokenizer, and {} has none: convert the model with meshnn-convert from a directory "
               "holding tokenizer.model or tokenizer.json, or pass --tokenizer PATH",
               c.tokenizer.empty() ? weights_file : c.tokenizer);
  std::optional<std::string> schema;
  if (c.json_object) schema = R"({"type":"object"})";
  if (!c.json_schema_file.empty()) {
    std::ifstream f(c.json_schema_file);
    MESHNN_CHECK(f.good(), "cannot open the JSON Schema file '{}'", c.json_schema_file);
    schema = std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::vector<TextPrompt> prompts;
  for (const std::string& p : c.prompts) prompts.push_back({p, std::nullopt, c.max_new_tokens, schema});
  if (!c.prompts_file.empty())
    for (TextPrompt& p : read_prompts_jsonl(c.prompts_file, c.max_new_tokens, schema)) prompts.push_back(std::move(p));
  std::optional<text::ChatTemplate> chat;
  text::ChatTemplateInputs chat_inputs;
  chat_inputs.special_tokens = out.tokenizer->special_tokens;
  chat_inputs.now = now;
  chat_inputs.json_variables = out.chat_variables;
  std::optional<int32_t> bos;
  if (out.tokenizer->add_bos_token && config.bos_token_id) bos = static_cast<int32_t>(*config.bos_token_id);
  for (size_t i = 0; i < prompts.size(); ++i) {
    TextPrompt& p = prompts[i];
    if (c.chat && !p.messages) {
      p.messages.emplace();
      if (!c.system_prompt.empty()) p.messages->push_back({"system", c.system_prompt});
      p.messages->push_back({"user", std::move(p.text)});
    }
    serving::GenerationRequest r;
    r.id = i;
    r.max_new_tokens = p.max_new_tokens;
    if (p.messages) {
      if (!chat) chat = chat_template(c, *out.tokenizer);
      chat_inputs.messages = std::move(*p.messages);
      p.text = chat->render(chat_inputs);
      // apply_chat_template tokenizes without special tokens of its own: the template has written
      // BOS where the model wants one (Llama 2 and 3 do; Zephyr-style templates do not).
      r.prompt = text::encode_prompt(*out.tokenizer->tokenizer, p.text, std::nullopt);
      MESHNN_CHECK(!r.prompt.empty(), "prompt {}: the chat template rendered no text", i);
    } else {
      r.prompt = text::encode_prompt(*out.tokenizer->tokenizer, p.text, bos);
      MESHNN_CHECK(!r.prompt.empty(), "prompt {} is empty and the model has no bos_token_id to start it", i);
    }
    if (p.schema) {
      try {
        r.grammar = serving::JsonGrammar::from_schema(*p.schema);
      } catch (const Error& e) {
        throw Error(fmt::format("prompt {}: {}", i, e.what()));
      }
    }
    out.requests.push_back(std::move(r));
    out.prompt_texts.push_back(std::move(p.text));
  }
  return out;
}

serving::GenerationOptions generation_options(const LlmJobConfig& c, const JobRequests& job) {
  serving::GenerationOptions go;
  go.prefill_chunk = c.prefill_chunk;
  go.sampling = c.sampling;
  go.penalties = c.penalties;
  go.draft_tokens = c.draft_tokens;
  go.jump_forward = c.jump_forward;
  if (!c.ignore_eos)
    for (int64_t id : job.stop_token_ids) go.stop_token_ids.push_back(static_cast<int32_t>(id));
  go.keep_logits = c.save_logits;
  return go;
}

}  // namespace meshnn::models::llama
