// The requests of an LLM job: text prompts (--prompt, --prompts FILE.jsonl), rendered by a chat
// template under --chat or as "messages", tokenized with the model's tokenizer; token ids from an
// HDF5 prompts file (--tokens); or generated ids. Every rank reads or makes the same requests, so
// every rank fails alike.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "meshnn/models/llama/config.hpp"
#include "meshnn/models/llama/llm_job.hpp"
#include "meshnn/serving/generator.hpp"
#include "meshnn/text/chat_template.hpp"
#include "meshnn/text/load.hpp"

namespace meshnn::models::llama {

struct JobRequests {
  std::vector<serving::GenerationRequest> requests;
  std::vector<std::string> prompt_texts;    // one per request when the prompts were text, else empty
  std::optional<text::LoadedTokenizer> tokenizer;  // when one was given or the weights file has one
  // eos_token_ids when the file lists several (Llama 3 ends a turn with any of them), else
  // eos_token_id; ids outside the vocabulary throw.
  std::vector<int64_t> stop_token_ids;
  std::string tokenizer_problem;  // why the weights file's tokenizer is unusable, when ids do without it
  // --interactive and --serve: the template conversations are rendered with (requests stay empty;
  // --serve: nullopt when the model has none, or has one meshnn cannot run: chat_template_problem).
  std::optional<text::ChatTemplate> chat_template;
  std::string chat_template_problem;
  // --chat-template-kwargs as template variables (ChatTemplateInputs::json_variables).
  std::vector<std::pair<std::string, std::string>> chat_variables;

  const text::Tokenizer* text_tokenizer() const { return tokenizer ? tokenizer->tokenizer.get() : nullptr; }
};

// Rank-local: throws meshnn::Error (the caller agrees on it across ranks). `now` is the time a chat
// template's strftime_now() formats: the same on every rank, so the prompts are too.
JobRequests make_job_requests(const LlmJobConfig& c, const LlamaConfig& config, const std::string& weights_file,
                              std::time_t now);

// The generator's options: prefill chunk, sampling, the stop ids (none under --ignore-eos), logits.
serving::GenerationOptions generation_options(const LlmJobConfig& c, const JobRequests& job);

}  // namespace meshnn::models::llama
