// The text layer: UTF-8 checks, the SentencePiece tokenizer against Debian's spm_encode/spm_decode
// on a model trained here with spm_train (Llama's settings), streaming text, and finding a
// model's tokenizer in a directory, a file or a weights file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/io/hdf5_io.hpp"
#include "meshnn/text/load.hpp"
#include "meshnn/text/sentencepiece.hpp"
#include "meshnn/text/text_stream.hpp"
#include "meshnn/text/utf8.hpp"
#include "support/test_helpers.hpp"

namespace fs = std::filesystem;
using namespace meshnn;
using namespace meshnn::text;

namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

bool valid_utf8(const std::string& s) { return sanitize_utf8(s) == s; }

TEST(Utf8, SettledLengthStopsBeforeAnUnfinishedCharacter) {
  EXPECT_EQ(settled_utf8_length("abc"), 3u);
  EXPECT_EQ(settled_utf8_length("a\xE2\x82"), 1u);              // "€" cut after 2 of 3 bytes
  EXPECT_EQ(settled_utf8_length("a\xE2\x82\xAC"), 4u);
  EXPECT_EQ(settled_utf8_length("\xF0\x9F\x99"), 0u);           // 🙂 cut after 3 of 4
  EXPECT_EQ(settled_utf8_length("\x80"), 1u);                   // never valid: settled (replaced)
  EXPECT_EQ(settled_utf8_length("\xE2" "a"), 2u);               // broken by a non-continuation
}

TEST(Utf8, SanitizeReplacesEachInvalidByte) {
  EXPECT_EQ(sanitize_utf8("caf\xC3\xA9 \xF0\x9F\x99\x82"), "caf\xC3\xA9 \xF0\x9F\x99\x82");
  EXPECT_EQ(sanitize_utf8("\x80" "abc"), kReplacement + "abc");
  EXPECT_EQ(sanitize_utf8("\xC0\xAF"), kReplacement + kReplacement);                 // overlong '/'
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), kReplacement + kReplacement + kReplacement);  // a surrogate
  EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80").size(), 4 * kReplacement.size());      // beyond U+10FFFF
  EXPECT_EQ(sanitize_utf8("ok\xE2\x82"), "ok" + kReplacement);                       // truncated at the end
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x99" "a"), kReplacement + "a");                  // truncated: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), kReplacement + kReplacement + kReplacement);  // overlong: byte by byte
}

// A corpus with words, numbers, punctuation and some non-Latin text, enough for a few hundred pieces.
std::string training_text() {
  const std::vector<std::string> words = {"the", "mesh", "device", "tensor", "shard", "gather", "reduce", "token",
                                          "model", "layer", "attention", "cache", "prefill", "decode", "rank",
                                          "ring", "matrix", "tile", "face", "weight", "users", "prompt", "stream"};
  std::ostringstream out;
  uint64_t x = 12345;
  for (int line = 0; line < 400; ++line) {
    for (int w = 0; w < 12; ++w) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      out << words[(x >> 33) % words.size()] << ((x >> 20) % 7 == 0 ? ", " : " ");
    }
    out << (line * 37) % 1000 << ". Café naïve résumé, Ελληνικά και 中文字符.\n";
  }
  return out.str();
}

std::string run(const std::string& command) {
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int32_t> ids;
  for (int32_t id; in >> id;) ids.push_back(id);
  return ids;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// One model for the suite, trained as Llama's tokenizer was: BPE, byte fallback, digits split,
// no normalization and whitespace kept as written.
class SentencePieceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("meshnn_spm_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    std::ofstream(*dir_ / "corpus.txt") << training_text();
    const std::string command =
        "spm_train --input=" + (*dir_ / "corpus.txt").string() + " --model_prefix=" + (*dir_ / "tokenizer").string() +
        " --vocab_size=500 --model_type=bpe --byte_fallback=true --split_digits=true --character_coverage=1.0"
        " --normalization_rule_name=identity --remove_extra_whitespaces=false --allow_whitespace_only_pieces=true"
        " --hard_vocab_limit=false --minloglevel=2 > " + (*dir_ / "train.log").string() + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << "spm_train failed; see " << (*dir_ / "train.log");
    model_ = new std::string(slurp(*dir_ / "tokenizer.model"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete model_;
  }

  // The ids spm_encode gives for each line of `text` (one request per line).
  static std::vector<std::vector<int32_t>> reference_ids(const std::vector<std::string>& lines) {
    std::ofstream input(*dir_ / "input.txt", std::ios::binary);
    for (const auto& l : lines) input << l << '\n';
    input.close();
    std::istringstream out(run("spm_encode --model=" + (*dir_ / "tokenizer.model").string() +
                               " --output_format=id < " + (*dir_ / "input.txt").string()));
    std::vector<std::vector<int32_t>> ids;
    for (std::string line; std::getline(out, line);) ids.push_back(parse_ids(line));
    return ids;
  }

  static inline fs::path* dir_ = nullptr;
  static inline std::string* model_ = nullptr;
};

const std::vector<std::string> kSamples = {
    "the mesh device gathers the tensor shards",
    "Café naïve résumé: Ελληνικά και 中文字符",
    "numbers 12345678 and 3.14159",
    "whitespace   runs\tand tabs  ",
    " a leading space",
    "unseen letters: ÆØÅ ß ж 🙂 👍🏽 e\xCC\x81",  // emoji, a skin-tone modifier, a combining accent
};

TEST_F(SentencePieceTest, EncodesAsSpmEncodeDoes) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  EXPECT_EQ(tok->kind(), "sentencepiece");
  EXPECT_EQ(tok->vocab_size(), 500);
  const auto expected = reference_ids(kSamples);
  ASSERT_EQ(expected.size(), kSamples.size());
  for (size_t i = 0; i < kSamples.size(); ++i) EXPECT_EQ(tok->encode(kSamples[i]), expected[i]) << kSamples[i];
}

TEST_F(SentencePieceTest, DecodeRoundTripsAndAgreesWithSpmDecode) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  std::ofstream ids_file(*dir_ / "ids.txt");
  for (const auto& s : kSamples) {
    const std::vector<int32_t> ids = tok->encode(s);
    EXPECT_EQ(tok->decode(ids), s);
    for (size_t i = 0; i < ids.size(); ++i) ids_file << (i ? " " : "") << ids[i];
    ids_file << '\n';
  }
  ids_file.close();
  std::istringstream decoded(run("spm_decode --model=" + (*dir_ / "tokenizer.model").string() +
                                 " --input_format=id < " + (*dir_ / "ids.txt").string()));
  for (const auto& s : kSamples) {
    std::string line;
    ASSERT_TRUE(std::getline(decoded, line));
    EXPECT_EQ(line, s);
  }
}

TEST_F(SentencePieceTest, SpecialTokensInTheTextBecomeTheirIds) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  const int32_t bos = *tok->token_id("<s>"), eos = *tok->token_id("</s>");
  const std::vector<int32_t> ids = tok->encode("<s>the mesh</s>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), bos);
  EXPECT_EQ(ids.back(), eos);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end() - 1), tok->encode("the mesh"));
  EXPECT_EQ(tok->decode(ids), "the mesh");  // special tokens decode to nothing
  EXPECT_FALSE(tok->token_id("no such piece").has_value());
  EXPECT_EQ(encode_prompt(*tok, "the mesh", bos).front(), bos);
  EXPECT_EQ(encode_prompt(*tok, "<s>the mesh", bos), encode_prompt(*tok, "the mesh", bos));  // BOS once
}

TEST_F(SentencePieceTest, IdsOutsideTheVocabularyAreRefused) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  const std::vector<int32_t> bad = {5, 500};
  EXPECT_NE(meshnn::testing::error_message_of([&] { tok->decode(bad); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_THROW(make_sentencepiece("not a model"), Error);
}

TEST_F(SentencePieceTest, StreamReleasesWholeCharactersOnly) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  for (const auto& s : kSamples) {
    TextStream stream(*tok);
    std::string joined;
    for (int32_t id : tok->encode(s)) {
      const std::string piece = stream.push(id);
      EXPECT_TRUE(valid_utf8(piece)) << s;
      joined += piece;
    }
    joined += stream.finish();
    EXPECT_EQ(joined, s);
    EXPECT_EQ(stream.text(), s);
  }
}

TEST_F(SentencePieceTest, StreamOfArbitraryIdsIsValidUtf8) {
  // What a model with random weights produces: stray byte pieces, control tokens, anything.
  const TokenizerPtr tok = make_sentencepiece(*model_);
  std::vector<int32_t> ids;
  for (int i = 0; i < 400; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 13) % 500));
  TextStream stream(*tok);
  std::string joined;
  for (int32_t id : ids) joined += stream.push(id);
  joined += stream.finish();
  EXPECT_TRUE(valid_utf8(joined));
  EXPECT_EQ(joined, sanitize_utf8(tok->decode(ids)));
}

// A model's vocabulary padded past its tokenizer's: ids beyond it have no text, in the stream and
// in generated_text alike, and the rest decode as without them.
TEST_F(SentencePieceTest, IdsBeyondTheTokenizerHaveNoText) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  const std::vector<int32_t> known = tok->encode(kSamples[1]);
  const auto beyond = static_cast<int32_t>(tok->vocab_size());
  std::vector<int32_t> padded;
  for (int32_t id : known) {
    padded.push_back(id);
    padded.push_back(beyond + (id % 3));
  }
  TextStream stream(*tok);
  std::string joined;
  for (int32_t id : padded) joined += stream.push(id);
  joined += stream.finish();
  EXPECT_EQ(joined, kSamples[1]);
  EXPECT_EQ(generated_text(*tok, padded), kSamples[1]);
  EXPECT_THROW(tok->decode(padded), Error);
}

// Each token's own text (as log-probabilities show it) is what it adds after other text: the
// texts of a sample's tokens, byte pieces included, add up to the sample with the space
// SentencePiece's dummy prefix stands for, which decoding the first piece alone would drop.
TEST_F(SentencePieceTest, TokenTextsAddUpToTheTextTheyFollow) {
  const TokenizerPtr tok = make_sentencepiece(*model_);
  const TokenTexts token_text(*tok);
  for (const auto& s : kSamples) {
    std::string joined;
    for (int32_t id : tok->encode(s)) joined += token_text(id);
    EXPECT_EQ(joined, " " + s);
  }
  const std::vector<int32_t> mesh = tok->encode("mesh");
  EXPECT_EQ(token_text(mesh.front()).front(), ' ');
  EXPECT_EQ(token_text(*tok->token_id("<s>")), "");  // special tokens have no text
  EXPECT_EQ(token_text(static_cast<int32_t>(tok->vocab_size())), "");
}

TEST_F(SentencePieceTest, FoundInADirectoryAFileOrAWeightsFile) {
  const fs::path model_dir = *dir_ / "hf";
  fs::create_directories(model_dir);
  fs::copy_file(*dir_ / "tokenizer.model", model_dir / "tokenizer.model", fs::copy_options::overwrite_existing);
  std::ofstream(model_dir / "tokenizer_config.json") << R"({"add_bos_token": false, "bos_token": "<s>"})";

  const auto from_dir = load_tokenizer(model_dir.string());
  ASSERT_TRUE(from_dir.has_value());
  EXPECT_FALSE(from_dir->add_bos_token);
  EXPECT_EQ(from_dir->tokenizer->encode(kSamples[0]), make_sentencepiece(*model_)->encode(kSamples[0]));

  const auto from_file = load_tokenizer((*dir_ / "tokenizer.model").string());
  ASSERT_TRUE(from_file.has_value());
  EXPECT_TRUE(from_file->add_bos_token);  // no tokenizer_config.json beside it

  const fs::path weights = *dir_ / "weights.h5";
  {
    io::Hdf5Writer w(weights.string());
    w.write_bytes("tokenizer/tokenizer.model", std::as_bytes(std::span<const char>(model_->data(), model_->size())));
    w.commit();
  }
  const auto from_h5 = load_tokenizer(weights.string());
  ASSERT_TRUE(from_h5.has_value());
  EXPECT_NE(from_h5->source.find("weights.h5"), std::string::npos);
  EXPECT_EQ(from_h5->tokenizer->vocab_size(), 500);

  const fs::path bare = *dir_ / "bare.h5";
  {
    io::Hdf5Writer w(bare.string());
    w.set_attribute("model_type", std::string("llama"));
    w.commit();
  }
  EXPECT_FALSE(load_tokenizer(bare.string()).has_value());
  EXPECT_THROW(load_tokenizer((*dir_ / "missing").string()), Error);
  std::ofstream(*dir_ / "broken.model") << "garbage";
  EXPECT_NE(meshnn::testing::error_message_of([&] { load_tokenizer((*dir_ / "broken.model").string()); }).find("broken.model"),
            std::string::npos);
}

}  // namespace
