// SentencePiece models (a tokenizer.model file: Llama 2, TinyLlama, Mistral) through Debian's
// libsentencepiece: the same library Hugging Face's slow LlamaTokenizer calls, so the ids agree.
#pragma once

#include <string_view>

#include "meshnn/text/tokenizer.hpp"

namespace meshnn::text {

// From the bytes of a tokenizer.model (a serialized ModelProto). Throws meshnn::Error when they
// are not one.
TokenizerPtr make_sentencepiece(std::string_view serialized_model);

}  // namespace meshnn::text
