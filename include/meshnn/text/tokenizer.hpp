// Tokenizers: text to token ids and back, as the model's Hugging Face tokenizer files define them.
// Two kinds: SentencePiece models (tokenizer.model: Llama 2, TinyLlama, Mistral), through
// libsentencepiece, and byte-level BPE (tokenizer.json: Llama 3, GPT-2 style), written here.
//
// Every method is rank-local and pure: the same input gives the same ids on every rank, so ranks
// that tokenize the same prompts agree without talking.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace meshnn::text {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text` (UTF-8), without BOS or EOS. A special token written in the text (e.g.
  // "<|eot_id|>" or "</s>") becomes its own id, as Hugging Face's tokenizers do for added tokens.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;

  // The bytes that `ids` stand for. Special tokens (BOS, EOS, ...) decode to nothing. The result
  // may end in an incomplete UTF-8 sequence when the ids split a character; TextStream holds such
  // a tail back. Ids outside [0, vocab_size()) throw meshnn::Error.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  virtual int64_t vocab_size() const = 0;
  // The id of a token given by its text ("<s>", "<|begin_of_text|>"), if the vocabulary has it.
  virtual std::optional<int32_t> token_id(std::string_view token) const = 0;
  // "sentencepiece" or "byte-level BPE": printed by the jobs.
  virtual std::string kind() const = 0;
  // Whether the model's Hugging Face tokenizer starts a sequence with BOS when tokenizer_config.json
  // does not say (no add_bos_token): a SentencePiece model does (LlamaTokenizer's default); a
  // tokenizer.json does when its post_processor's template begins with a special token (Llama 3's
  // <|begin_of_text|>), not when it has none (GPT-2, Qwen2).
  virtual bool adds_bos_by_default() const = 0;
};

using TokenizerPtr = std::unique_ptr<const Tokenizer>;

}  // namespace meshnn::text
