// The byte-level BPE tokenizer against an independent Python implementation
// (tests/text/bpe_reference.py), on tokenizer.json files that script trains in GPT-2's, Llama 3's
// and Qwen2's (NFC) forms and one with a Sequence of normalizers; then, on small hand-written
// files, the merge order, unk tokens, the normalizers and the added tokens around them, and the
// errors for files and ids it must refuse.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "meshnn/core/error.hpp"
#include "meshnn/text/byte_level_bpe.hpp"
#include "meshnn/text/load.hpp"
#include "meshnn/text/text_stream.hpp"
#include "meshnn/text/utf8.hpp"
#include "support/test_helpers.hpp"

namespace meshnn {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// Text with no added token in it: decode(encode(s)) must give s back.
const std::vector<std::string> kPlainStrings = {
    "",
    "Hello world! This is a test of the tokenizer.",
    "The quick brown fox jumps over the lazy dog.",
    "don't stop; it's I'LL and HELLO'S, we've they'd you're",
    "12345678",
    "3.14159 and 2024-11-25, 1,000,000 or 0.5%",
    "a   b\n\n\tc  ",
    "  leading spaces",
    "trailing spaces   ",
    "\r\n\r\nwindows\r\nlines\n",
    "    def tokenize(text):\n        return text.split()\n",
    "!!!???...,,,;;;",
    "café naïve résumé façade",
    "中文文本也可以被分词",
    "日本語のテキスト",
    "emoji 🙂 and 👍🏽 and 🎉🎉",
    "e\u0301 combining marks: a\u0300\u0301\u0302",
    "Ωμέγα ∑∫ ☃ ℝ Привет мир",  // characters training never saw
    [] {
      const char controls[] = "a NUL \0, controls \x01\x02\x1b\x7f and a tab\t";
      return std::string(controls, sizeof(controls) - 1);
    }(),
    "\u00a0non-breaking\u2003em space\u3000ideographic",
    " xyzzy and xyzzy",                  // " xyzzy" is a token only ignore_merges reaches
    "<|begin_of_text> <eot_id|> <| |>",  // near misses of the special tokens
};

// Text with added tokens in it (special ones vanish on decode, "<mask>" takes the white space
// before it, "[SEP]" the white space after it, "hello world" only stands alone).
const std::vector<std::string> kAddedTokenStrings = {
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "text<|endoftext|>more text<|endoftext|>",
    "<|begin_of_text|><|begin_of_text|>",
    "x <mask>  <mask>y\t<mask>",
    "hello world, hello worlds, say hello world",
    "[SEP]   next [SEP]\n",
};

// Text that the normalizers change: combining marks (in and out of canonical order), Hangul
// jamo and syllables, ligatures, full-width and half-width forms, compatibility characters and
// singletons, and the added tokens of the normalizing forms (Qwen2's special tokens, ANGSTROM SIGN
// found only as written, "café" and "ﬁ" found after normalization).
const std::vector<std::string> kNormalizationStrings = {
    "e\u0301 versus \u00e9, cafe\u0301 and caf\u00e9",
    "a\u0301\u0323 a\u0323\u0301 o\u0308\u0304 A\u030a\u0301 \u03b1\u0301 \u1f71",
    "\u1100\u1161\u11a8 \uac00\u11a8 \uac01 \ud55c\uad6d\uc5b4 \u1112\u1161\u11ab",
    "\ufb01ne \ufb02ow \ufb00 \ufb03 \ufb04 \u0132",
    "\uff26\uff55\uff4c\uff4c\uff0d\uff57\uff49\uff44\uff54\uff48 \uff11\uff12\uff13 \uff58 x",
    "\uff76\uff9e\uff77\uff9e \uff8a\uff9f \uff71\uff72\uff73",
    "\u212b \u00c5 A\u030a \u2126 \u212a \u2000 \u00a0 \u3000",
    "x\u00b2 \u2075 \u2460\u2461 \u00bd \u2153 \u33a1 \u2122 \u01c5 \u2167",
    "e<|im_end|>\u0301 <|im_start|>user\ncafe\u0301<|im_end|>\n<|endoftext|>",
    "\u212b\u030a \u212bA \ufb01<|endoftext|>\ufb01",
};

// Seeded jumbles of the fragments where the patterns and the added tokens have their edges:
// letters of every case, marks, digits and other numbers, white space of several kinds,
// contractions, symbols, the added tokens and near misses of them.
std::vector<std::string> jumbles() {
  const std::vector<std::string> fragments = {
      "a",  "Zq",     "é",           "中文",   "🙂",   "ǅ",          "\u0301",
      "Ⅻ",  "½",      "1",           "1234",   "_",      " ",          "   ",
      "\t", "\n",     "\r\n",        "\u00a0", "\u2028", "'s",         "'LL",
      "'",  "!",      "?!",          ".",      "-",      "<|eot_id|>", "<|endoftext|>",
      "<|", "<mask>", "hello world", "[SEP]",  " xyzzy", "\x01",
      // where the normalizers act
      "e", "\u1100", "\u1161", "\u11a8", "\u212b", "\ufb01", "\uff58", "\uff76", "\uff9e", "cafe",
      "<|im_start|>", "<|im_end|>"};
  std::vector<std::string> out;
  uint64_t state = 20241125;
  for (int i = 0; i < 40; ++i) {
    std::string s;
    for (int k = 0; k < 30; ++k) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      s += fragments[(state >> 33) % fragments.size()];
    }
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> all_strings() {
  std::vector<std::string> all = kPlainStrings;
  all.insert(all.end(), kAddedTokenStrings.begin(), kAddedTokenStrings.end());
  all.insert(all.end(), kNormalizationStrings.begin(), kNormalizationStrings.end());
  const std::vector<std::string> mixed = jumbles();
  all.insert(all.end(), mixed.begin(), mixed.end());
  return all;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string from_hex(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

// The forms bpe_reference.py trains: the first two without a normalizer.
const std::vector<std::string> kForms = {"gpt2", "llama3", "qwen2", "nfkc_nfd"};

bool normalizes(const std::string& form) { return form == "qwen2" || form == "nfkc_nfd"; }

struct ReferenceResult {
  std::vector<int32_t> ids;
  std::string decoded;
};

bool run(const std::string& command, std::string& error) {
  if (std::system(command.c_str()) == 0) return true;
  error = "failed: " + command;
  return false;
}

// The tokenizer files the script trains and its results for all_strings(), made once per test
// process in a temporary folder that goes when the process ends. `error` says what went wrong
// when the script could not run.
struct Reference {
  fs::path dir = fs::path(::testing::TempDir()) / ("meshnn_bpe_" + std::to_string(getpid()));
  std::map<std::string, std::vector<ReferenceResult>> results;  // by form, as kForms names them
  std::string error;

  Reference() {
    fs::create_directories(dir);
    const std::string script = std::string(MESHNN_TEST_SOURCE_DIR) + "/text/bpe_reference.py";
    const std::string python = std::string("'") + MESHNN_SYSTEM_PYTHON + "' '" + script + "' ";
    const fs::path strings = dir / "strings.json";
    std::ofstream(strings) << json(all_strings()).dump();
    if (!run(python + "train '" + dir.string() + "'", error)) return;
    for (const std::string& form : kForms) {
      const fs::path tokenizer = dir / form / "tokenizer.json", out = dir / (form + "_ids.json");
      if (!run(python + "encode '" + tokenizer.string() + "' '" + strings.string() + "' '" + out.string() + "'", error))
        return;
      for (const json& item : json::parse(read_text(out)))
        results[form].push_back({item.at("ids").get<std::vector<int32_t>>(), from_hex(item.at("decoded"))});
    }
  }
  ~Reference() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  Reference(const Reference&) = delete;
  Reference& operator=(const Reference&) = delete;
};

const Reference& reference() {
  static const Reference ref;
  return ref;
}

text::TokenizerPtr load(const std::string& form) {
  return text::load_byte_level_bpe_file((reference().dir / form / "tokenizer.json").string());
}

class AgainstReference : public ::testing::TestWithParam<std::string> {};

TEST_P(AgainstReference, SameIdsAndTextAsThePythonTokenizer) {
  const Reference& ref = reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  const text::TokenizerPtr tok = load(GetParam());
  const std::vector<std::string> strings = all_strings();
  const std::vector<ReferenceResult>& expected = ref.results.at(GetParam());
  ASSERT_EQ(expected.size(), strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(strings[i]);
    EXPECT_EQ(ids, expected[i].ids) << "text: " << strings[i];
    EXPECT_EQ(tok->decode(ids), expected[i].decoded) << "text: " << strings[i];
    if (i < kPlainStrings.size() && !normalizes(GetParam())) {
      EXPECT_EQ(tok->decode(ids), strings[i]);
    }
  }
}

TEST_P(AgainstReference, VocabularyAndTokenLookups) {
  ASSERT_TRUE(reference().error.empty()) << reference().error;
  const text::TokenizerPtr tok = load(GetParam());
  const json file = json::parse(read_text(reference().dir / GetParam() / "tokenizer.json"));
  int64_t max_id = 0;
  for (const auto& [token, id] : file["model"]["vocab"].items()) {
    max_id = std::max<int64_t>(max_id, id.get<int64_t>());
    EXPECT_EQ(tok->token_id(token), id.get<int32_t>()) << token;
  }
  for (const json& t : file["added_tokens"]) {
    max_id = std::max<int64_t>(max_id, t["id"].get<int64_t>());
    EXPECT_EQ(tok->token_id(t["content"].get<std::string>()), t["id"].get<int32_t>());
    const int32_t id = t["id"].get<int32_t>();
    EXPECT_EQ(tok->decode(std::span(&id, 1)), t["special"].get<bool>() ? "" : t["content"].get<std::string>());
  }
  EXPECT_EQ(tok->vocab_size(), max_id + 1);
  EXPECT_FALSE(tok->token_id("no such token").has_value());
  EXPECT_EQ(tok->kind(), "byte-level BPE");
}

TEST_P(AgainstReference, DecodingPartOfACharacterGivesItsFirstBytes) {
  ASSERT_TRUE(reference().error.empty()) << reference().error;
  const text::TokenizerPtr tok = load(GetParam());
  const std::string smile = "🙂";  // not in the training text, so more than one token
  const std::vector<int32_t> ids = tok->encode(smile);
  ASSERT_GE(ids.size(), 2u);
  const std::string first = tok->decode(std::span(ids.data(), 1));
  EXPECT_FALSE(first.empty());
  EXPECT_LT(first.size(), smile.size());
  EXPECT_EQ(smile.substr(0, first.size()), first);  // an incomplete UTF-8 sequence, as intended
  EXPECT_EQ(tok->decode(ids), smile);
}

TEST_P(AgainstReference, RejectsIdsOutsideTheVocabularyAndTextThatIsNotUtf8) {
  ASSERT_TRUE(reference().error.empty()) << reference().error;
  const text::TokenizerPtr tok = load(GetParam());
  for (const int32_t bad : {-1, static_cast<int32_t>(tok->vocab_size())}) {
    const std::string message = testing::error_message_of([&] { tok->decode(std::span(&bad, 1)); });
    EXPECT_NE(message.find("cannot decode id " + std::to_string(bad)), std::string::npos) << message;
  }
  for (const std::string bad : {"abc\xff", "\xc3", "\xed\xa0\x80 surrogate", "\xc0\xaf overlong"}) {
    const std::string message = testing::error_message_of([&] { tok->encode(bad); });
    EXPECT_NE(message.find("not valid UTF-8"), std::string::npos) << message;
  }
}

// Long prompts: linear time (no quadratic re-scan of the text), no PCRE2 stack limit on long runs
// of one class, and the throughput printed for the record.
TEST_P(AgainstReference, LongTextsRoundTripQuickly) {
  ASSERT_TRUE(reference().error.empty()) << reference().error;
  const text::TokenizerPtr tok = load(GetParam());
  const std::string unit = "The quick brown fox doesn't jump over 12345 lazy dogs; café 中文 🙂.\n\t  Again and again!  ";
  // A normalizer may change the text, but not across the ASCII where one unit meets the next, so
  // the prompt decodes to what one unit decodes to, repeated (to itself without a normalizer).
  const std::string unit_back = tok->decode(tok->encode(unit));
  if (!normalizes(GetParam())) {
    EXPECT_EQ(unit_back, unit);
  }
  std::string prompt, expected;
  while (prompt.size() < (1 << 20)) {
    prompt += unit;
    expected += unit_back;
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->encode(prompt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok->decode(ids), expected);
  std::cout << "[ info     ] " << GetParam() << " form: encoded " << prompt.size() / 1e6 << " MB into " << ids.size()
            << " tokens at " << prompt.size() / 1e6 / seconds << " MB/s\n";
  for (const std::string& run : {std::string(200000, ' '), std::string(200000, 'a'), std::string(200000, '7'),
                                 std::string(100000, '\n') + "x", std::string(50000, '!')})
    EXPECT_EQ(tok->decode(tok->encode(run)), run);
}

INSTANTIATE_TEST_SUITE_P(ByteLevelBpe, AgainstReference, ::testing::ValuesIn(kForms));

// ---- hand-written files ----------------------------------------------------------------------

// A tokenizer.json around `model`, with GPT-2's pre-tokenizer unless given another.
std::string tokenizer_json(const json& model,
                           const json& pre_tokenizer = json{{"type", "ByteLevel"}, {"add_prefix_space", false}}) {
  return json{{"model", model},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer},
              {"decoder", {{"type", "ByteLevel"}}},
              {"added_tokens", json::array()}}
      .dump();
}

json bpe(const json& vocab, const json& merges) { return {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}; }

std::vector<int32_t> ids(std::initializer_list<int32_t> list) { return list; }

TEST(ByteLevelBpe, MergesInRankOrderLeftmostFirst) {
  const json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}, {"aa", 6}};
  // "b c" outranks "a b", so "abc" is a + bc, then abc; "aaa" merges its leftmost pair.
  const auto tok = text::make_byte_level_bpe(tokenizer_json(bpe(vocab, {"b c", "a b", "a bc", "a a"})));
  EXPECT_EQ(tok->encode("abc"), ids({5}));
  EXPECT_EQ(tok->encode("aaa"), ids({6, 0}));
  EXPECT_EQ(tok->encode("abab"), ids({3, 3}));
  // The same merges as pairs, in another order: "a b" first now leaves "c" alone.
  const auto pairs = text::make_byte_level_bpe(tokenizer_json(bpe(vocab, json::parse(R"([["a","b"],["b","c"]])"))));
  EXPECT_EQ(pairs->encode("abc"), ids({3, 2}));
}

TEST(ByteLevelBpe, CharactersOutsideTheVocabularyBecomeUnkOrNothing) {
  json model = bpe({{"a", 0}, {"<unk>", 1}}, json::array());
  EXPECT_EQ(text::make_byte_level_bpe(tokenizer_json(model))->encode("abba"), ids({0, 0}));
  model["unk_token"] = "<unk>";
  EXPECT_EQ(text::make_byte_level_bpe(tokenizer_json(model))->encode("abba"), ids({0, 1, 1, 0}));
  model["fuse_unk"] = true;
  EXPECT_EQ(text::make_byte_level_bpe(tokenizer_json(model))->encode("abba"), ids({0, 1, 0}));
}

TEST(ByteLevelBpe, SplitOnAStringPattern) {
  const json vocab = {{"a", 0}, {",", 1}, {"aa", 2}, {"a,", 3}};
  const json pre = {{"type", "Sequence"},
                    {"pretokenizers",
                     {{{"type", "Split"}, {"pattern", {{"String", ","}}}, {"behavior", "Isolated"}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  const auto tok = text::make_byte_level_bpe(tokenizer_json(bpe(vocab, {"a a", "a ,"}), pre));
  EXPECT_EQ(tok->encode("aa,a"), ids({2, 1, 0}));  // "a," never forms: the comma is its own word
}

TEST(ByteLevelBpe, PrefixSpaceGoesBeforeEveryStretchBetweenAddedTokens) {
  // As in tokenizers: ByteLevel's add_prefix_space acts on each piece it is given, and the added
  // tokens cut the text into pieces first.
  json j = json::parse(tokenizer_json(bpe({{"a", 0}, {"Ġ", 1}, {"Ġa", 2}}, {"Ġ a"}),
                                      {{"type", "ByteLevel"}, {"add_prefix_space", true}}));
  j["added_tokens"] = {{{"id", 3}, {"content", "<x>"}, {"special", true}}};
  const auto tok = text::make_byte_level_bpe(j.dump());
  EXPECT_EQ(tok->encode("a<x>a"), ids({2, 3, 2}));
  EXPECT_EQ(tok->encode(" a"), ids({2}));  // a piece that starts with a space gets no second one
  const std::vector<int32_t> with_special = {2, 3, 2};
  EXPECT_EQ(tok->decode(with_special), " a a");
}

// ---- normalizers -----------------------------------------------------------------------------

// GPT-2's byte characters, written here apart from src/text/byte_chars.cpp: bytes that print stand
// for themselves, the others for U+0100, U+0101, ... in order.
std::string byte_character(int b) {
  const auto prints = [](int x) { return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  int code = b;
  if (!prints(b)) {
    code = 256;
    for (int earlier = 0; earlier < b; ++earlier) code += !prints(earlier);
  }
  if (code < 0x80) return std::string(1, static_cast<char>(code));
  return {static_cast<char>(0xC0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3F))};
}

// A tokenizer with `normalizer` whose vocabulary is the 256 bytes, id = byte, and no merges:
// encode() gives the bytes of the normalized text and decode() the normalized text itself.
text::TokenizerPtr bytes_tokenizer(const json& normalizer, const json& added_tokens = json::array()) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_character(b)] = b;
  json j = json::parse(tokenizer_json(bpe(vocab, json::array())));
  j["normalizer"] = normalizer;
  j["added_tokens"] = added_tokens;
  return text::make_byte_level_bpe(j.dump());
}

std::string normalized_by(const json& normalizer, const std::string& text) {
  const auto tok = bytes_tokenizer(normalizer);
  return tok->decode(tok->encode(text));
}

const json kNfc = {{"type", "NFC"}}, kNfd = {{"type", "NFD"}}, kNfkc = {{"type", "NFKC"}}, kNfkd = {{"type", "NFKD"}};

TEST(ByteLevelBpe, NfcEncodesACombiningAccentAsThePrecomposedLetter) {
  const json vocab = {{"e", 0}, {byte_character(0xC3), 1}, {byte_character(0xA9), 2},
                      {byte_character(0xC3) + byte_character(0xA9), 3}, {byte_character(0xCC), 4},
                      {byte_character(0x81), 5}};
  const json merges = {byte_character(0xC3) + " " + byte_character(0xA9)};
  json j = json::parse(tokenizer_json(bpe(vocab, merges)));
  const auto plain = text::make_byte_level_bpe(j.dump());
  j["normalizer"] = kNfc;
  const auto nfc = text::make_byte_level_bpe(j.dump());
  EXPECT_EQ(nfc->encode("\u00e9"), ids({3}));
  EXPECT_EQ(nfc->encode("e\u0301"), ids({3}));
  EXPECT_EQ(plain->encode("\u00e9"), ids({3}));
  EXPECT_EQ(plain->encode("e\u0301"), ids({0, 4, 5}));  // without a normalizer the text stays as written
}

TEST(ByteLevelBpe, EachNormalizationForm) {
  EXPECT_EQ(normalized_by(nullptr, "e\u0301 \ufb01"), "e\u0301 \ufb01");
  // Canonical composition and order; Hangul jamo into a syllable; singletons (OHM SIGN, ANGSTROM
  // SIGN) to their letters; compatibility characters kept.
  EXPECT_EQ(normalized_by(kNfc, "e\u0301 a\u0301\u0323 \u1100\u1161\u11a8 \u2126\u212b \ufb01\uff21\u00bd"),
            "\u00e9 \u1ea1\u0301 \uac01 \u03a9\u00c5 \ufb01\uff21\u00bd");
  EXPECT_EQ(normalized_by(kNfd, "\u00e9 \uac01 \u1ea1\u0301 \ufb01"),
            "e\u0301 \u1100\u1161\u11a8 a\u0323\u0301 \ufb01");
  // The fi ligature, full-width letters and digits, a vulgar fraction, half-width katakana with
  // its voiced mark.
  EXPECT_EQ(normalized_by(kNfkc, "\ufb01ne \uff26\uff55\uff4c\uff4c\uff11 \u00bd \uff76\uff9e e\u0301"),
            "fine Full1 1\u20442 \u30ac \u00e9");
  EXPECT_EQ(normalized_by(kNfkd, "\ufb01\u00e9 \uff76\uff9e"), "fie\u0301 \u30ab\u3099");
  // A Sequence runs its steps in order: NFKD then NFC is NFKC; NFKC then NFD is NFKD.
  const json nfkd_nfc = {{"type", "Sequence"}, {"normalizers", {kNfkd, kNfc}}};
  const json nfkc_nfd = {{"type", "Sequence"}, {"normalizers", {kNfkc, kNfd}}};
  EXPECT_EQ(normalized_by(nfkd_nfc, "\ufb01e\u0301"), "fi\u00e9");
  EXPECT_EQ(normalized_by(nfkc_nfd, "\ufb01\u00e9"), "fie\u0301");
  EXPECT_EQ(normalized_by({{"type", "Sequence"}, {"normalizers", json::array()}}, "e\u0301"), "e\u0301");
  // A NUL is a character like any other, not the end of the text.
  EXPECT_EQ(normalized_by(kNfd, std::string("a\0\u00e9", 4)), std::string("a\0e\u0301", 5));
}

TEST(ByteLevelBpe, RawAddedTokensBeforeNormalizingNormalizedOnesAfter) {
  const json added = {
      // found only as written: NFC turns ANGSTROM SIGN into A with a ring above
      {{"id", 300}, {"content", "\u212b"}, {"special", false}, {"normalized", false}},
      // found in the NFC text, so also where it was written decomposed
      {{"id", 301}, {"content", "\u00f1"}, {"special", false}, {"normalized", true}},
      // found wherever the NFC text has "café", as its own content normalizes to that
      {{"id", 302}, {"content", "cafe\u0301"}, {"special", false}, {"normalized", true}},
      {{"id", 303}, {"content", "<|im_end|>"}, {"special", true}, {"normalized", false}}};
  const auto tok = bytes_tokenizer(kNfc, added);
  EXPECT_EQ(tok->encode("\u212b"), ids({300}));
  EXPECT_EQ(tok->encode("\u00c5"), ids({0xC3, 0x85}));
  EXPECT_EQ(tok->encode("A\u030a"), ids({0xC3, 0x85}));
  EXPECT_EQ(tok->encode("\u00f1"), ids({301}));
  EXPECT_EQ(tok->encode("n\u0303"), ids({301}));
  EXPECT_EQ(tok->encode("caf\u00e9"), ids({302}));
  EXPECT_EQ(tok->encode("cafe\u0301!"), ids({302, '!'}));
  // Each stretch between raw tokens is normalized alone: the accent after <|im_end|> stays bare.
  EXPECT_EQ(tok->encode("e<|im_end|>\u0301"), ids({'e', 303, 0xCC, 0x81}));
  // Lookups and decoding use the contents as written.
  EXPECT_EQ(tok->token_id("cafe\u0301"), 302);
  EXPECT_EQ(tok->decode(ids({302})), "cafe\u0301");
  // Without the normalizer, the normalized tokens are found only as written.
  const auto plain = bytes_tokenizer(nullptr, added);
  EXPECT_EQ(plain->encode("n\u0303"), ids({'n', 0xCC, 0x83}));
  EXPECT_EQ(plain->encode("cafe\u0301"), ids({302}));
  EXPECT_EQ(plain->encode("caf\u00e9"), ids({'c', 'a', 'f', 0xC3, 0xA9}));
}

TEST(ByteLevelBpe, RefusesWhatItDoesNotImplement) {
  const json model = bpe({{"a", 0}}, json::array());
  const auto error_for = [](const std::string& text) {
    return testing::error_message_of([&] { text::make_byte_level_bpe(text); });
  };
  const auto with = [&](const char* key, const json& value) {
    json j = json::parse(tokenizer_json(model));
    j[key] = value;
    return error_for(j.dump());
  };
  const auto model_error = [&](const char* key, const json& value) {
    json m = model;
    m[key] = value;
    return error_for(tokenizer_json(m));
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {error_for("{\"model\": "), "not valid JSON"},
      {error_for("[1, 2]"), "must be a JSON object"},
      {error_for("{}"), "has no 'model'"},
      {with("model", {{"type", "WordPiece"}, {"vocab", json::object()}}), "model.type is 'WordPiece'"},
      {model_error("byte_fallback", true), "tokenizer.model"},
      {model_error("dropout", 0.1), "model.dropout"},
      {model_error("vocab", {{"a", -3}}), "the id -3"},
      {model_error("merges", {"a b"}), "not in model.vocab ('b')"},
      {model_error("merges", {"a"}), "two tokens separated by one space"},
      {model_error("unk_token", "<unk>"), "unk_token '<unk>'"},
      {with("normalizer", {{"type", "Lowercase"}}), "normalizer is Lowercase; a byte-level BPE takes NFC, NFD, NFKC"},
      {with("normalizer", {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "b"}}),
       "normalizer is Replace;"},
      {with("normalizer", json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Strip"}]})")),
       "normalizer.normalizers[1] is Strip;"},
      {with("normalizer", {{"type", "Sequence"}}), "normalizer.normalizers must be a list"},
      {with("normalizer", "NFC"), "normalizer must be an object"},
      {with("pre_tokenizer", {{"type", "Metaspace"}}), "Metaspace pre-tokenizer"},
      {with("pre_tokenizer", nullptr), "pre_tokenizer is null"},
      {with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}}),
       "no ByteLevel step"},
      {with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Removed"}}),
       "behavior 'Removed'"},
      {with("pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "(a"}}}, {"behavior", "Isolated"}}),
       "does not compile"},
      {with("decoder", nullptr), "decoder is null"},
      {with("decoder", {{"type", "WordPiece"}}), "decoder is WordPiece"},
      {with("added_tokens", {{{"id", 5}}}), "added_tokens[0] has no 'content'"},
      {with("added_tokens", {{{"id", 1 << 25}, {"content", "x"}}}), "at most 16777216 ids"},
  };
  for (const auto& [message, needle] : cases) EXPECT_NE(message.find(needle), std::string::npos) << message;
  const std::string missing =
      testing::error_message_of([] { text::load_byte_level_bpe_file("/nonexistent/tokenizer.json"); });
  EXPECT_NE(missing.find("cannot read the tokenizer file '/nonexistent/tokenizer.json'"), std::string::npos) << missing;
}

// What the LLM job does with a model directory that ships only tokenizer.json (Llama 3): the loader
// finds it, and streaming its ids, which split characters into bytes, gives the text back whole.
TEST(ByteLevelBpe, FoundInAModelDirectoryAndStreamedWhole) {
  ASSERT_TRUE(reference().error.empty()) << reference().error;
  const fs::path dir = reference().dir / "llama3_model";
  fs::create_directories(dir);
  fs::copy_file(reference().dir / "llama3" / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  const auto loaded = text::load_tokenizer(dir.string());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->tokenizer->kind(), "byte-level BPE");
  EXPECT_TRUE(loaded->add_bos_token);
  for (const std::string& s : all_strings()) {
    const std::vector<int32_t> ids = loaded->tokenizer->encode(s);
    EXPECT_EQ(ids, load("llama3")->encode(s));
    text::TextStream stream(*loaded->tokenizer);
    std::string joined;
    for (int32_t id : ids) {
      const std::string piece = stream.push(id);
      EXPECT_EQ(text::first_invalid_utf8(piece), std::string::npos) << s;
      joined += piece;
    }
    joined += stream.finish();
    EXPECT_EQ(joined, text::sanitize_utf8(loaded->tokenizer->decode(ids))) << s;
  }
}

// Whether BOS goes first when tokenizer_config.json does not say: the post_processor's template
// decides, as in Hugging Face's fast tokenizers (Llama 3: <|begin_of_text|> first; GPT-2 and Qwen2:
// ByteLevel, no template); an explicit add_bos_token wins.
TEST(ByteLevelBpe, BosByDefaultWhenThePostProcessorsTemplateStartsWithASpecialToken) {
  ASSERT_TRUE(reference().error.empty()) << reference().error;
  EXPECT_TRUE(load("llama3")->adds_bos_by_default());
  EXPECT_FALSE(load("gpt2")->adds_bos_by_default());
  EXPECT_FALSE(load("qwen2")->adds_bos_by_default());
  auto with_post_processor = [](const json& processor) {
    json root = json::parse(tokenizer_json(bpe(json{{"a", 0}}, json::array())));
    root["post_processor"] = processor;
    return text::make_byte_level_bpe(root.dump())->adds_bos_by_default();
  };
  const json bos_first = {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  const json text_first = {{"type", "TemplateProcessing"},
                           {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                       {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}}};
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
  EXPECT_TRUE(with_post_processor(bos_first));
  EXPECT_FALSE(with_post_processor(text_first));
  EXPECT_FALSE(with_post_processor(byte_level));
  EXPECT_FALSE(with_post_processor(nullptr));
  EXPECT_TRUE(with_post_processor({{"type", "Sequence"}, {"processors", {byte_level, bos_first}}}));  // Llama 3.1
  EXPECT_FALSE(with_post_processor({{"type", "Sequence"}, {"processors", {byte_level, text_first}}}));

  const fs::path dir = reference().dir / "qwen2_model";
  fs::create_directories(dir);
  fs::copy_file(reference().dir / "qwen2" / "tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_prefix_space": false, "bos_token": null})";
  EXPECT_FALSE(text::load_tokenizer(dir.string())->add_bos_token);
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": true})";
  EXPECT_TRUE(text::load_tokenizer(dir.string())->add_bos_token);
}

}  // namespace
}  // namespace meshnn
