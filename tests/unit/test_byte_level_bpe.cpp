// The byte-level BPE tokenizer against an independent Python implementation
// (tests/text/bpe_reference.py), on tokenizer.json files that script trains in GPT-2's and
// Llama 3's forms; then, on small hand-written files, the merge order, unk tokens, and the errors
// for files and ids it must refuse.
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

// Seeded jumbles of the fragments where the patterns and the added tokens have their edges:
// letters of every case, marks, digits and other numbers, white space of several kinds,
// contractions, symbols, the added tokens and near misses of them.
std::vector<std::string> jumbles() {
  const std::vector<std::string> fragments = {
      "a",  "Zq",     "é",           "中文",   "🙂",   "ǅ",          "\u0301",
      "Ⅻ",  "½",      "1",           "1234",   "_",      " ",          "   ",
      "\t", "\n",     "\r\n",        "\u00a0", "\u2028", "'s",         "'LL",
      "'",  "!",      "?!",          ".",      "-",      "<|eot_id|>", "<|endoftext|>",
      "<|", "<mask>", "hello world", "[SEP]",  " xyzzy", "\x01"};
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
  std::map<std::string, std::vector<ReferenceResult>> results;  // by form: "gpt2", "llama3"
  std::string error;

  Reference() {
    fs::create_directories(dir);
    const std::string script = std::string(MESHNN_TEST_SOURCE_DIR) + "/text/bpe_reference.py";
    const std::string python = std::string("'") + MESHNN_SYSTEM_PYTHON + "' '" + script + "' ";
    const fs::path strings = dir / "strings.json";
    std::ofstream(strings) << json(all_strings()).dump();
    if (!run(python + "train '" + dir.string() + "'", error)) return;
    for (const char* form : {"gpt2", "llama3"}) {
      const fs::path tokenizer = dir / form / "tokenizer.json", out = dir / (std::string(form) + "_ids.json");
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
    if (i < kPlainStrings.size()) {
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
  std::string prompt;
  while (prompt.size() < (1 << 20))
    prompt += "The quick brown fox doesn't jump over 12345 lazy dogs; café 中文 🙂.\n\t  Again and again!  ";
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->encode(prompt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok->decode(ids), prompt);
  std::cout << "[ info     ] " << GetParam() << " form: encoded " << prompt.size() / 1e6 << " MB into " << ids.size()
            << " tokens at " << prompt.size() / 1e6 / seconds << " MB/s\n";
  for (const std::string& run : {std::string(200000, ' '), std::string(200000, 'a'), std::string(200000, '7'),
                                 std::string(100000, '\n') + "x", std::string(50000, '!')})
    EXPECT_EQ(tok->decode(tok->encode(run)), run);
}

INSTANTIATE_TEST_SUITE_P(ByteLevelBpe, AgainstReference, ::testing::Values("gpt2", "llama3"));

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


}  // namespace
}  // namespace meshnn
