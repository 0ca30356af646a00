// Byte-level BPE tokenizers from a Hugging Face tokenizer.json (GPT-2, Llama 3 and their kin,
// Qwen2), with Hugging Face's tokenizers semantics:
//   added tokens with normalized false split off the raw text -> normalizer on each stretch left
//   -> added tokens with normalized true -> pre_tokenizer (ByteLevel, Split, Sequence) -> BPE
//   merges.
//
// Accepted: model.type "BPE" (merges as "a b" strings or ["a", "b"] pairs, ignore_merges,
// unk_token/fuse_unk); normalizer null, NFC, NFD, NFKC, NFKD or a Sequence of them (through
// utf8proc); pre_tokenizer ByteLevel, Split (Regex or String pattern, behavior Isolated) and
// Sequence of them, with at least one ByteLevel; decoder ByteLevel; added_tokens with special,
// normalized, lstrip, rstrip and single_word. The post_processor is not applied: encode() adds no
// BOS, as the Tokenizer interface says; adds_bos_by_default() tells whether its template starts
// with a special token.
//
// Refused with meshnn::Error naming the part: any other model, normalizer, pre-tokenizer, Split
// behavior or decoder; BPE byte_fallback (Llama 2 style tokenizer.json, whose tokenizer.model
// SentencePiece loads), dropout, continuing_subword_prefix and end_of_word_suffix; JSON that does
// not parse, merges naming tokens outside the vocabulary, ids outside [0, 2^24).
//
// Decoding maps each token's characters back to bytes; special added tokens give nothing, other
// added tokens their text. Ids in range that no token has decode to nothing, as in tokenizers.
#pragma once

#include <string>
#include <string_view>

#include "meshnn/text/tokenizer.hpp"

namespace meshnn::text {

// A tokenizer from the text of a tokenizer.json.
TokenizerPtr make_byte_level_bpe(std::string_view tokenizer_json);

// The same from a file; errors name the file.
TokenizerPtr load_byte_level_bpe_file(const std::string& path);

}  // namespace meshnn::text
