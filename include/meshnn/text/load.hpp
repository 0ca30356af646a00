// Finding a model's tokenizer where users keep it, and encoding prompts as the model expects.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshnn/text/chat_template.hpp"
#include "meshnn/text/tokenizer.hpp"

namespace meshnn::text {

struct LoadedTokenizer {
  TokenizerPtr tokenizer;
  // tokenizer_config.json's add_bos_token; when the file or the key is absent, the tokenizer's own
  // default (Tokenizer::adds_bos_by_default: Llama's SentencePiece and Llama 3's tokenizer.json
  // start every sequence with BOS, Qwen2's tokenizer.json does not).
  bool add_bos_token = true;
  std::string source;  // where it came from, for messages: "tokenizer/tokenizer.model in model.h5"
  // The model's chat template (Jinja), as Hugging Face finds it: chat_template.jinja, else
  // tokenizer_config.json's "chat_template" (its "default" entry when it holds several); nullopt
  // for a base model without one.
  std::optional<std::string> chat_template;
  // The special tokens a chat template sees as variables (bos_token, eos_token, unk_token,
  // pad_token), as text: tokenizer_config.json's, else special_tokens_map.json's.
  std::vector<std::pair<std::string, std::string>> special_tokens;
};

// The tokenizer at `path`: a tokenizer.model (SentencePiece), a tokenizer.json (byte-level BPE), a
// Hugging Face model directory holding them, or an HDF5 weights file with the tokenizer/ group
// meshnn-convert writes. When both kinds are there, tokenizer.model wins: it is the model's own
// SentencePiece, while Llama 2's tokenizer.json is a conversion of it. nullopt when a directory or
// weights file holds neither; a file that cannot be read or parsed throws meshnn::Error.
// Rank-local.
std::optional<LoadedTokenizer> load_tokenizer(const std::string& path);

// A chat template kept in a file of its own (--chat-template), parsed; errors name the file.
ChatTemplate load_chat_template(const std::string& path);

// The ids of a prompt: `bos` first (unless the text already starts with it), then the text's.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view prompt, std::optional<int32_t> bos);

}  // namespace meshnn::text
