// Structured output (serving/json_grammar.hpp, json_cursor.hpp, token_mask.hpp, jump_forward.hpp),
// checked against references written apart from it: nlohmann-json's parser says what is JSON, a
// small validator below says what a schema accepts, the token mask is compared with feeding each
// token's bytes to a cursor of its own, and forced bytes with random answers written on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/json_grammar.hpp"
#include "meshnn/serving/jump_forward.hpp"
#include "meshnn/serving/token_mask.hpp"

namespace meshnn::serving {
namespace {

using nlohmann::json;

// Whether the cursor takes the whole text and is complete exactly at its end, not before.
bool takes_exactly(const JsonGrammar& g, std::string_view text) {
  JsonCursor c(g);
  for (char ch : text)
    if (c.complete() || !c.feed(static_cast<uint8_t>(ch))) return false;
  return c.complete();
}

// A random JSON value, nested `depth` levels at most.
json random_value(std::mt19937& rng, int depth) {
  static const std::vector<std::string> pieces = {"a", "Z", " ", "\"", "\\", "\n", "\t", "\x01", "/", "\xC3\xA9",
                                                  "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "key", "9"};
  auto random_string = [&] {
    std::string s;
    for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += pieces[rng() % pieces.size()];
    return s;
  };
  switch (rng() % (depth > 0 ? 8 : 6)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3: return std::ldexp(static_cast<double>(rng() % 100000) - 50000, -static_cast<int>(rng() % 30));
    case 4:
    case 5: return random_string();
    case 6: {
      json a = json::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth - 1));
      return a;
    }
    default: {
      json o = json::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) o[random_string()] = random_value(rng, depth - 1);
      return o;
    }
  }
}

// `text` (compact JSON) with whitespace put before some of its structural characters, as the
// grammar allows it: a line break or not, then up to kIndentPerLevel spaces or tabs per open
// object or array.
std::string spaced(const std::string& text, std::mt19937& rng) {
  std::string out;
  bool in_string = false, escaped = false;
  int containers = 0;
  for (char c : text) {
    if (!in_string && (c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == ':') && rng() % 2 == 0) {
      if (rng() % 2 == 0) out += '\n';
      const int most = kIndentPerLevel * std::max(containers, 1);
      for (int i = static_cast<int>(rng() % static_cast<unsigned>(most + 1)); i > 0; --i) out += rng() % 3 ? ' ' : '\t';
    }
    out += c;
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else {
      if (c == '{' || c == '[') ++containers;
      if (c == '}' || c == ']') --containers;
      if (c == '"') in_string = true;
    }
  }
  return out;
}

// Whether JSON text's whitespace between values is what the grammar allows: no carriage return, a
// line break only first in its run, then at most kIndentPerLevel spaces or tabs per open object or
// array (at least kIndentPerLevel). Written apart from the cursor.
bool whitespace_allowed(const std::string& text) {
  bool ok = true, in_string = false, escaped = false;
  int containers = 0, indent = 0;
  bool run_started = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (c == '\r' || (c == '\n' && run_started)) ok = false;
      if (c == ' ' || c == '\t') ok = ok && ++indent <= kIndentPerLevel * std::max(containers, 1);
      run_started = true;
      continue;
    }
    run_started = false;
    indent = 0;
    if (c == '{' || c == '[') ++containers;
    if (c == '}' || c == ']') --containers;
    if (c == '"') in_string = true;
  }
  return ok;
}

TEST(JsonCursor, TakesEveryJsonObjectAndEndsWithIt) {
  const auto g = JsonGrammar::any_object();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    json o = json::object();
    for (int i = static_cast<int>(rng() % 5); i > 0; --i) o[fmt::format("k{}", i)] = random_value(rng, 4);
    for (const std::string& text : {o.dump(), o.dump(2), o.dump(4), spaced(o.dump(), rng)})
      EXPECT_TRUE(takes_exactly(*g, text)) << text;
    // Not an object at the root: an array, a string.
    EXPECT_FALSE(takes_exactly(*g, json::array({o}).dump()));
  }
  EXPECT_TRUE(takes_exactly(*g, "{}"));
  EXPECT_TRUE(takes_exactly(*g, "\n {\"a\":[1,-0.5e+3,1E2,0,-0,\"\\u00e9\\ud83d\\ude00\"],\"\":{}}"));
}

// Whether nlohmann-json reads `text` as JSON; nothing when it stops at a number beyond double's
// range (1e999), which JSON's grammar allows, before it has read the rest.
std::optional<bool> is_json(const std::string& text) {
  try {
    [[maybe_unused]] const json parsed = json::parse(text);
    return true;
  } catch (const json::out_of_range& e) {
    if (e.id == 406) return std::nullopt;  // "number overflow"
    return false;
  } catch (const json::exception&) {
    return false;
  }
}

// Random edits of JSON text: whatever the cursor takes whole is JSON (nlohmann parses it) and an
// object, and what nlohmann takes as an object the cursor takes too, up to the whitespace after
// it (the cursor ends with the value), when its whitespace is what the grammar allows.
TEST(JsonCursor, AgreesWithNlohmannOnEditedText) {
  const auto g = JsonGrammar::any_object();
  std::mt19937 rng(11);
  const std::string alphabet = "{}[]\",:0123456789-+.eE \\/utrfnlsa\xC3\xA9\x80\xFF\x01\n";
  int taken = 0, refused = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    json o = json::object();
    for (int i = static_cast<int>(rng() % 4); i > 0; --i) o[fmt::format("k{}", i)] = random_value(rng, 3);
    std::string text = rng() % 2 ? o.dump() : o.dump(1);
    for (int edits = 1 + static_cast<int>(rng() % 2); edits > 0; --edits) {
      const size_t at = rng() % (text.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: text.insert(at, 1, c); break;
        case 1:
          if (at < text.size()) text.erase(at, 1);
          break;
        default:
          if (at < text.size()) text[at] = c;
      }
    }
    const std::optional<bool> read = is_json(text);
    if (!read) continue;
    const bool ours = takes_exactly(*g, text.substr(0, text.find_last_not_of(" \t\n\r") + 1));
    const bool theirs =
        *read && text[text.find_first_not_of(" \t\n\r")] == '{' && whitespace_allowed(text.substr(0, text.find_last_not_of(" \t\n\r") + 1));
    EXPECT_EQ(ours, theirs) << text;
    (ours ? taken : refused) += 1;
  }
  EXPECT_GT(taken, 500);  // the edits left both kinds of text
  EXPECT_GT(refused, 500);
}

TEST(JsonCursor, RefusesWhatJsonForbids) {
  const auto g = JsonGrammar::any_object();
  for (const char* text : {"{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":+1}", "{\"a\":1e}", "{\"a\":tru}",
                           "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":\"\\ud800\"}", "{\"a\":\"\\udc00\"}",
                           "{\"a\":\"\xC0\xAF\"}", "{\"a\":\"\xED\xA0\x80\"}", "{\"a\":\"\xF4\x90\x80\x80\"}",
                           "{\"a\":1,}", "{,}", "{\"a\" 1}", "{} {}", "{}x", "[]", "\"a\"", "{\"a\":[1,]}"})
    EXPECT_FALSE(takes_exactly(*g, text)) << text;
  // A lone low surrogate is refused at its second digit, before an escape begins that cannot end.
  JsonCursor c(*g);
  ASSERT_TRUE(c.feed("{\"a\":\"\\uD"));
  JsonCursor low = c;
  EXPECT_FALSE(low.feed(static_cast<uint8_t>('C')));
  EXPECT_TRUE(c.feed(static_cast<uint8_t>('8')));
}

TEST(JsonCursor, LimitsWhitespaceAndDepth) {
  const auto g = JsonGrammar::any_object();
  // One line break, then up to kIndentPerLevel spaces or tabs per open object or array.
  EXPECT_TRUE(takes_exactly(*g, "\n    {\n    \"a\": [\n\t\t\t\t    \"b\"\n    ],\"c\" :1\n}"));
  for (const char* text : {"     {}", "{     \"a\":1}", "{\"a\":[1,         2]}", "{\n\n\"a\":1}", "{ \n\"a\":1}",
                           "{\r\n\"a\":1}"})
    EXPECT_FALSE(takes_exactly(*g, text)) << text;
  // Spaces inside a string are its text, not whitespace between values.
  EXPECT_TRUE(takes_exactly(*g, "{\"a\":\"" + std::string(100, ' ') + "\"}"));
  // The root object and kMaxJsonDepth - 1 arrays in it: 64 open values, and no 65th.
  std::string deep = "{\"a\":";
  for (int i = 1; i < kMaxJsonDepth; ++i) deep += "[";
  JsonCursor c(*g);
  ASSERT_TRUE(c.feed(deep));
  for (char refused : {'[', '1', '"', '{'}) {
    JsonCursor deeper = c;
    EXPECT_FALSE(deeper.feed(static_cast<uint8_t>(refused))) << refused;
  }
  EXPECT_TRUE(c.feed(static_cast<uint8_t>(']')));
}

// A small validator for the schema subset, written apart from the compiler: what must be true of
// a value for the schema to accept it.
bool valid(const json& v, const json& schema, const json& root) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    return valid(v, ref == "#" ? root : root.at(json::json_pointer(ref.substr(1))), root);
  }
  if (schema.contains("const")) return v == schema["const"];
  if (schema.contains("enum")) {
    for (const json& e : schema["enum"])
      if (v == e) return true;
    return false;
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (schema.contains(key)) {
      int matches = 0;
      for (const json& s : schema[key]) matches += valid(v, s, root) ? 1 : 0;
      return std::string(key) == "anyOf" ? matches > 0 : matches == 1;
    }
  if (schema.contains("type")) {
    const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    bool typed = false;
    for (const json& t : types) {
      typed = typed || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
              (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
              (t == "integer" && v.is_number_integer()) || (t == "boolean" && v.is_boolean()) ||
              (t == "null" && v.is_null());
    }
    if (!typed) return false;
  }
  if (v.is_object()) {
    for (const json& r : schema.value("required", json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    const json properties = schema.value("properties", json::object());
    for (const auto& [key, value] : v.items()) {
      if (properties.contains(key)) {
        if (!valid(value, properties[key], root)) return false;
      } else if (!valid(value, schema.value("additionalProperties", json(true)), root)) {
        return false;
      }
    }
  }
  if (v.is_string()) {
    // Characters as JSON Schema counts them: code points, each a UTF-8 lead byte.
    const std::string s = v.get<std::string>();
    const auto characters =
        static_cast<int64_t>(std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; }));
    if (characters < schema.value("minLength", int64_t{0})) return false;
    if (characters > schema.value("maxLength", std::numeric_limits<int64_t>::max())) return false;
  }
  if (v.is_array()) {
    if (static_cast<int64_t>(v.size()) < schema.value("minItems", int64_t{0})) return false;
    if (static_cast<int64_t>(v.size()) > schema.value("maxItems", std::numeric_limits<int64_t>::max())) return false;
    for (const json& item : v)
      if (!valid(item, schema.value("items", json(true)), root)) return false;
  }
  return true;
}

// Writes an answer byte by byte, each byte drawn among those the cursor takes, leaning towards
// closing values as it grows; checks that some byte is always allowed (no dead end).
std::string random_answer(const JsonGrammar& g, std::mt19937& rng) {
  JsonCursor c(g);
  std::string out;
  while (!c.complete()) {
    std::vector<uint8_t> allowed, closing;
    for (int b = 0; b < 256; ++b) {
      JsonCursor t = c;
      if (!t.feed(static_cast<uint8_t>(b))) continue;
      allowed.push_back(static_cast<uint8_t>(b));
      if (b == '}' || b == ']' || b == '"' || b == ',') closing.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "dead end after " << out;
      return out;
    }
    if (out.size() > 20000) {
      ADD_FAILURE() << "the walk does not end";
      return out;
    }
    const bool close = !closing.empty() && rng() % 100 < std::min<size_t>(90, out.size() / 4);
    const uint8_t b = close ? closing[rng() % closing.size()] : allowed[rng() % allowed.size()];
    EXPECT_TRUE(c.feed(b));
    out.push_back(static_cast<char>(b));
  }
  return out;
}

const char* const kSchemas[] = {
    R"({"type": "object"})",
    R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 3}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}},
        "required": ["name", "age"], "additionalProperties": false})",
    R"({"title": "Answer", "type": "object", "properties": {
          "verdict": {"enum": ["yes", "no", 1, 10, null, {"a": [1]}]},
          "score": {"anyOf": [{"type": "number"}, {"type": "null"}], "default": null},
          "flag": {"type": ["boolean", "string"]}, "exact": {"const": "x\"y"}},
        "required": ["verdict", "exact"]})",
    R"({"$defs": {"Node": {"type": "object", "properties": {"label": {"type": "string"},
          "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2}}, "required": ["label"]}},
        "type": "object", "properties": {"tree": {"$ref": "#/$defs/Node"}}, "required": ["tree"]})",
    R"({"type": "array", "items": {"type": "object", "additionalProperties": {"type": "integer"}}, "maxItems": 4})",
    R"({"type": "object", "properties": {"none": {"type": "array", "items": false}, "kinds": {"oneOf": [
          {"const": "a"}, {"const": "b"}, {"type": "object", "properties": {}, "additionalProperties": false}]}},
        "required": ["none", "kinds"]})",
    // Objects told apart by a discriminator ("name"), as tool calls are, beside null.
    R"({"type": "object", "properties": {"calls": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"anyOf": [
          {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": {"type": "object",
             "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}},
           "required": ["name", "arguments"], "additionalProperties": false},
          {"type": "object", "properties": {"name": {"enum": ["get_time", "now"]}, "arguments": {"type": "object",
             "properties": {"zone": {"enum": ["utc", "local"]}}, "required": ["zone"]}},
           "required": ["name", "arguments"]},
          {"type": "null"}]}}}, "required": ["calls"]})",
};

TEST(JsonGrammar, RandomAnswersAreJsonTheSchemaAccepts) {
  std::mt19937 rng(5);
  int validated = 0;
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    const auto g = JsonGrammar::from_schema(text);
    for (int trial = 0; trial < 150; ++trial) {
      const std::string answer = random_answer(*g, rng);
      const std::optional<bool> read = is_json(answer);
      ASSERT_NE(read, std::optional<bool>(false)) << answer;
      if (read) {  // else a number beyond double's range stopped nlohmann-json
        EXPECT_TRUE(valid(json::parse(answer), schema, schema)) << text << "\n" << answer;
        ++validated;
      }
    }
  }
  EXPECT_GT(validated, 800);
}

TEST(JsonGrammar, TakesValidAnswersAndRefusesInvalidOnes) {
  const auto person = JsonGrammar::from_schema(kSchemas[1]);
  EXPECT_TRUE(takes_exactly(*person, R"({"name": "Ann", "age": 41})"));
  EXPECT_TRUE(takes_exactly(*person, R"({"age":41,"tags":["a"],"name":"B"})"));
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "Anna", "age": 41})"));  // maxLength 3
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "Ann"})"));                       // age is required
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "Ann", "age": 4.5})"));           // not an integer
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "Ann", "age": 4, "name": "B"})"));  // a key twice
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "Ann", "age": 4, "x": 1})"));     // not a property
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "Ann", "age": 4, "tags": []})"));  // minItems
  EXPECT_FALSE(takes_exactly(*person, R"({"name": "A", "age": 4, "tags": ["a","b","c","d"]})"));  // maxItems
  const auto answer = JsonGrammar::from_schema(kSchemas[2]);
  for (const char* verdict : {R"("yes")", "1", "10", "null", R"({"a":[1]})"})
    EXPECT_TRUE(takes_exactly(*answer, std::string(R"({"exact":"x\"y","verdict":)") + verdict + "}")) << verdict;
  for (const char* verdict : {R"("ye")", "100", "0", R"({"a": [1]})"})
    EXPECT_FALSE(takes_exactly(*answer, std::string(R"({"exact":"x\"y","verdict":)") + verdict + "}")) << verdict;
}

TEST(JsonGrammar, DiscriminatorComesFirstAndChoosesTheObject) {
  const auto g = JsonGrammar::from_schema(kSchemas[6]);
  EXPECT_TRUE(takes_exactly(*g, R"({"calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, null]})"));
  EXPECT_TRUE(takes_exactly(*g, R"({"calls": [{"name":"now","arguments":{"zone":"utc"}}]})"));
  EXPECT_FALSE(takes_exactly(*g, R"({"calls": [{"name": "now", "arguments": {"city": "Paris"}}]})"));
  EXPECT_FALSE(takes_exactly(*g, R"({"calls": [{"name": "nowhere", "arguments": {"zone": "utc"}}]})"));
  // The discriminator first: the same object with its keys the other way round is refused.
  EXPECT_FALSE(takes_exactly(*g, R"({"calls": [{"arguments": {"zone": "utc"}, "name": "now"}]})"));
}

TEST(JsonGrammar, WritesTheValueBetweenItsPrefixAndSuffix) {
  const auto g = JsonGrammar::from_schema(kSchemas[1], "<tool_call>", "</tool_call>");
  EXPECT_TRUE(takes_exactly(*g, R"(<tool_call>{"name":"A","age":1}</tool_call>)"));
  EXPECT_FALSE(takes_exactly(*g, R"(<tool_call>{"name":"","age":1}</tool_call>)"));  // minLength 1
  EXPECT_TRUE(takes_exactly(*g, "<tool_call>\n{\"name\": \"A\", \"age\": 1}\n</tool_call>"));
  EXPECT_FALSE(takes_exactly(*g, R"({"name":"A","age":1})"));
  EXPECT_FALSE(takes_exactly(*g, R"(<tool_call>{"name":"A","age":1})"));  // not complete without the suffix
  EXPECT_FALSE(takes_exactly(*g, R"(<tool_call>{"name":"A","age":1}</tool_call>x)"));
  EXPECT_FALSE(takes_exactly(*g, R"( <tool_call>{"name":"A","age":1}</tool_call>)"));
  const auto again = JsonGrammar::from_schema(g->schema(), g->prefix(), g->suffix());
  std::mt19937 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    const std::string answer = random_answer(*g, rng);
    ASSERT_TRUE(answer.starts_with("<tool_call>") && answer.ends_with("</tool_call>")) << answer;
    const std::string value = answer.substr(11, answer.size() - 23);
    ASSERT_TRUE(json::accept(value)) << answer;
    EXPECT_TRUE(valid(json::parse(value), json::parse(kSchemas[1]), json::parse(kSchemas[1]))) << answer;
    EXPECT_TRUE(takes_exactly(*again, answer));
  }
}

TEST(JsonGrammar, StringLengthsCountCharacters) {
  const auto g = JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 3}}})");
  auto with = [](const std::string& s) { return std::string(R"({"s":")") + s + "\"}"; };
  for (const char* s : {"ab", "abc", "\xC3\xA9\xE2\x82\xAC", "\\n\\u00e9", "a\\ud83d\\ude00", "\xF0\x9F\x98\x80" "a"})
    EXPECT_TRUE(takes_exactly(*g, with(s))) << s;
  for (const char* s : {"", "a", "abcd", "\xC3\xA9", "ab\\u00e9c", "\\ud83d\\ude00"})
    EXPECT_FALSE(takes_exactly(*g, with(s))) << s;
  // A bounded string is not plain text for the token mask: its length must be counted.
  JsonCursor c(*g);
  ASSERT_TRUE(c.feed(R"({"s":")"));
  EXPECT_FALSE(c.in_string_text());
  const auto any = JsonGrammar::any_object();
  JsonCursor free(*any);
  ASSERT_TRUE(free.feed(R"({"s":")"));
  EXPECT_TRUE(free.in_string_text());
}

TEST(JsonGrammar, ChoicesAreWrittenAsTheyAre) {
  const auto g = JsonGrammar::choice({"yes", "yes please", "no", " maybe", "no"});
  for (const char* text : {"no", " maybe", "yes please"}) EXPECT_TRUE(takes_exactly(*g, text)) << text;
  for (const char* text : {"ye", "yes", " no", "no ", "noo", "YES", "maybe", "\nno"})
    EXPECT_FALSE(takes_exactly(*g, text)) << text;
  // "yes" is whole while "yes please" goes on: the answer may end there, on a stop token.
  JsonCursor c(*g);
  EXPECT_FALSE(c.may_end());
  ASSERT_TRUE(c.feed("ye"));
  EXPECT_FALSE(c.may_end());
  ASSERT_TRUE(c.feed("s"));
  EXPECT_TRUE(c.may_end() && !c.complete());
  ASSERT_TRUE(c.feed(" "));
  EXPECT_FALSE(c.may_end());
  // A JSON grammar's answer never ends but by closing its value.
  const auto json_grammar = JsonGrammar::from_schema(R"({"type": "array", "items": {"enum": [1, 10]}})");
  JsonCursor json_cursor(*json_grammar);
  ASSERT_TRUE(json_cursor.feed("[1"));
  EXPECT_FALSE(json_cursor.may_end());
  const auto again = JsonGrammar::from_source(g->source());
  for (const char* text : {"no", " maybe", "yes please"}) EXPECT_TRUE(takes_exactly(*again, text)) << text;
  EXPECT_THROW(JsonGrammar::choice({}), Error);
  EXPECT_THROW(JsonGrammar::choice({"a", ""}), Error);
  const auto schema = JsonGrammar::from_schema(kSchemas[1], "<a>", "</a>");
  const auto rebuilt = JsonGrammar::from_source(schema->source());
  EXPECT_EQ(rebuilt->schema(), schema->schema());
  EXPECT_EQ(rebuilt->prefix(), "<a>");
  EXPECT_EQ(rebuilt->suffix(), "</a>");
}

TEST(JsonGrammar, RefusesWhatItCannotFollow) {
  auto message = [](const char* schema) {
    try {
      JsonGrammar::from_schema(schema);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message(R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^a"}}})")
                .find("'pattern' at #/properties/code is not supported"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "integer"})").find("the root may be a number"), std::string::npos);
  EXPECT_NE(message(R"({"anyOf": [{"type": "object"}, {"type": "string"}, {"const": "x"}]})").find("can both begin with '\"'"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})").find("names 'b'"),
            std::string::npos);
  EXPECT_NE(message(R"({"$ref": "https://example.com/s.json"})").find("is not supported"), std::string::npos);
  EXPECT_NE(message(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(message(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})").find("refers to itself"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 2}}})")
                .find("minItems 3 is above maxItems 2"),
            std::string::npos);
  EXPECT_NE(message("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"oneOf": [{"const": "a"}, {"enum": ["a", "b"]}]})").find("two alternatives of the oneOf"),
            std::string::npos);
  EXPECT_NE(message(R"({"type": "object", "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}})")
                .find("an integer and a number"),
            std::string::npos);
  std::string deep = R"({"type": "array", "items": )";
  for (int i = 0; i < 200; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}" + std::string(201, '}');
  EXPECT_NE(message(deep.c_str()).find("nests deeper than 128 levels"), std::string::npos);
  EXPECT_NE(message(R"({"anyOf": [{"type": "object", "properties": {"a": {"const": "x"}}},
                                  {"type": "object", "properties": {"a": {"const": "y"}}}]})")
                .find("objects with no discriminator"),
            std::string::npos);  // "a" is not required, so an object might not say which it is
  EXPECT_NE(message(R"({"type": "objet"})").find("'objet'"), std::string::npos);
}

TEST(JsonGrammar, SchemaTextRebuildsTheSameGrammar) {
  for (const char* text : kSchemas) {
    const auto g = JsonGrammar::from_schema(text);
    const auto again = JsonGrammar::from_schema(g->schema());
    EXPECT_EQ(again->schema(), g->schema());
    std::mt19937 rng(3);
    for (int trial = 0; trial < 20; ++trial) EXPECT_TRUE(takes_exactly(*again, random_answer(*g, rng)));
  }
}

// The mask allows exactly the tokens whose bytes a cursor takes one by one, over a vocabulary of
// shared starts, multi-byte pieces and tokens that write nothing, whole and in shards.
TEST(TokenMask, AllowsExactlyTheTokensACursorTakes) {
  std::mt19937 rng(9);
  auto bytes = std::make_shared<TokenBytes>();
  const std::vector<std::string> pieces = {"{", "}", "\"", ":", ",", " ", "\n", "a", "1", "-", ".", "e", "[", "]",
                                           "\\", "u", "t", "rue", "null", "\xC3", "\xA9", "\xE2\x82\xAC", "name", "age"};
  for (int i = 0; i < 3000; ++i) {
    std::string t;
    for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) t += pieces[rng() % pieces.size()];
    bytes->push_back(i % 97 == 0 ? std::string() : t);
  }
  const int64_t vocab = static_cast<int64_t>(bytes->size()) + 5;  // padded past the tokenizer's ids
  for (const char* schema : {kSchemas[0], kSchemas[1]}) {
    const auto g = JsonGrammar::from_schema(schema);
    for (int64_t shard_size : {vocab, int64_t{1001}}) {
      for (int64_t offset = 0; offset < vocab; offset += shard_size) {
        const VocabShard shard{offset, std::min(shard_size, vocab - offset)};
        TokenMask mask(bytes, shard);
        // Cursors at points of random answers: in keys, strings, numbers, between values.
        for (int trial = 0; trial < 8; ++trial) {
          const std::string answer = random_answer(*g, rng);
          JsonCursor c(*g);
          ASSERT_TRUE(c.feed(std::string_view(answer).substr(0, rng() % answer.size())));
          std::vector<float> row(static_cast<size_t>(shard.valid) + 3, 1.0f);
          mask.apply(row, c);
          for (int64_t col = 0; col < shard.valid; ++col) {
            const std::string_view token = mask.bytes(static_cast<int32_t>(offset + col));
            JsonCursor t = c;
            const bool takes = !token.empty() && t.feed(token);
            EXPECT_EQ(row[static_cast<size_t>(col)] == 1.0f, takes) << "token '" << token << "'";
          }
          EXPECT_EQ(row.back(), 1.0f);  // padding columns untouched
        }
      }
    }
  }
}

// A random answer's rest from `c` with no whitespace byte at all (a compact answer, and strings
// without spaces): one of the answers forced_bytes speaks for.
std::string random_compact_rest(JsonCursor c, std::mt19937& rng) {
  std::string out;
  while (!c.complete() && out.size() < 20000) {
    std::vector<uint8_t> allowed;
    for (int b = 0; b < 256; ++b) {
      JsonCursor t = c;
      if (b != ' ' && b != '\n' && b != '\t' && b != '\r' && t.feed(static_cast<uint8_t>(b)))
        allowed.push_back(static_cast<uint8_t>(b));
    }
    if (allowed.empty()) break;
    // Close soon: '}', ']', '"' and ',' when they may come, more often as the answer grows.
    std::vector<uint8_t> closing;
    for (uint8_t b : allowed)
      if (b == '}' || b == ']' || b == '"' || b == ',') closing.push_back(b);
    const bool close = !closing.empty() && rng() % 100 < std::min<size_t>(90, out.size() / 2);
    const uint8_t b = close ? closing[rng() % closing.size()] : allowed[rng() % allowed.size()];
    c.feed(b);
    out.push_back(static_cast<char>(b));
  }
  return out;
}

// Whatever a compact answer writes next from a cursor begins with the cursor's forced bytes, at
// points of random answers of every schema (keys, literals, strings, numbers, between values).
TEST(JsonCursor, ForcedBytesBeginEveryCompactAnswerFromThere) {
  std::mt19937 rng(12);
  int forced_points = 0;
  for (const char* text : kSchemas) {
    const auto g = JsonGrammar::from_schema(text, "<tool_call>", "</tool_call>");
    for (int trial = 0; trial < 40; ++trial) {
      const std::string answer = random_answer(*g, rng);
      JsonCursor c(*g);
      ASSERT_TRUE(c.feed(std::string_view(answer).substr(0, rng() % answer.size())));
      const std::string forced = c.forced_bytes(1000);
      forced_points += forced.empty() ? 0 : 1;
      JsonCursor after = c;
      EXPECT_TRUE(after.feed(forced)) << forced;
      for (int k = 0; k < 8; ++k) {
        const std::string rest = random_compact_rest(c, rng);
        EXPECT_TRUE(rest.starts_with(forced)) << text << "\nforced '" << forced << "', an answer goes on '" << rest << "'";
      }
    }
  }
  EXPECT_GT(forced_points, 40);  // the property is not only met by empty ones
}

TEST(JsonCursor, ForcedBytesStopAtTheModelsChoices) {
  const auto person = JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"name": {"type": "string"}, "kind": {"enum": ["yes", "no"]}},
          "required": ["name", "kind"], "additionalProperties": false})");
  auto forced_after = [](const JsonGrammar& g, std::string_view written) {
    JsonCursor c(g);
    EXPECT_TRUE(c.feed(written)) << written;
    return c.forced_bytes(1000);
  };
  EXPECT_EQ(forced_after(*person, ""), "{\"");                     // then "name" or "kind"
  EXPECT_EQ(forced_after(*person, "{\"n"), "ame\":\"");           // then the name's text
  EXPECT_EQ(forced_after(*person, "{ \"na"), "me\":\"");          // whatever whitespace came before
  EXPECT_EQ(forced_after(*person, "{\"name\":\"x\""), ",\"kind\":\"");  // "kind" is still due
  EXPECT_EQ(forced_after(*person, "{\"name\":\"x\",\"kind\":\"y"), "es\"}");
  EXPECT_EQ(forced_after(*person, "{\"name\":\"x\",\"kind\":\"yes\"}"), "");  // complete
  EXPECT_EQ(forced_after(*person, "{\"name\":\"x"), "");  // the text goes on or closes
  // A tool call: its tag up to the first key (either may come first); the name's rest and value,
  // up to the arguments' first choice; then the closing tag.
  const auto call = JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"name": {"const": "now"}, "arguments": {"type": "object"}},
          "required": ["name", "arguments"], "additionalProperties": false})", "<tool_call>", "</tool_call>");
  EXPECT_EQ(forced_after(*call, ""), "<tool_call>{\"");
  EXPECT_EQ(forced_after(*call, "<tool_call>{\"n"), "ame\":\"now\",\"arguments\":{");
  EXPECT_EQ(forced_after(*call, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}"), "}</tool_call>");
  JsonCursor start(*call);
  EXPECT_EQ(start.forced_bytes(3), "<to");
  // Choices are written as they are; one that may end there stops it.
  const auto yes = JsonGrammar::choice({"yes", "yes please"});
  EXPECT_EQ(forced_after(*yes, ""), "yes");
  EXPECT_EQ(forced_after(*yes, "yes "), "please");
  EXPECT_EQ(forced_after(*JsonGrammar::choice({"yes", "no"}), ""), "");
}

// The forced bytes as tokens: each the longest piece that begins what is left, the highest id of
// equal pieces; the cursor goes past them; at most the tokens asked for; none where no piece fits.
TEST(ForcedTokens, SpellTheForcedBytesWithTheLongestPieces) {
  auto bytes = std::make_shared<TokenBytes>(TokenBytes{"", "<", "<tool_call>", "{", "{\"", "\"", "name", "n", "a", "m",
                                                        "e", "\":", "\":\"", ":", "o", "w", "now", "\",\"", ",",
                                                        "arguments", "\"arguments", "r", "g", "u", "s", "t", "now"});
  const auto call = JsonGrammar::from_schema(
      R"({"type": "object", "properties": {"name": {"const": "now"}, "arguments": {"type": "object"}},
          "required": ["name", "arguments"], "additionalProperties": false})", "<tool_call>", "</tool_call>");
  const ForcedTokens speller(bytes);
  JsonCursor start(*call);
  EXPECT_EQ(speller.take(start, 100), (std::vector<int32_t>{2, 4}));  // <tool_call> {"
  EXPECT_TRUE(start.feed("n"));
  const std::vector<int32_t> tokens = speller.take(start, 100);
  // a m e (no "ame" piece) ":" now (26, not 16) "," arguments (not "arguments: "," wrote its quote)
  // ": {
  EXPECT_EQ(tokens, (std::vector<int32_t>{8, 9, 10, 12, 26, 17, 19, 11, 3}));
  std::string written = "<tool_call>{\"n";
  for (int32_t t : tokens) written += (*bytes)[static_cast<size_t>(t)];
  EXPECT_EQ(written, "<tool_call>{\"name\":\"now\",\"arguments\":{");
  JsonCursor again(*call);
  EXPECT_TRUE(again.feed(written));
  EXPECT_EQ(again.forced_bytes(100), start.forced_bytes(100));  // the cursor went past them
  JsonCursor limited(*call);
  ASSERT_TRUE(limited.feed("<tool_call>{\"n"));
  EXPECT_EQ(speller.take(limited, 2), (std::vector<int32_t>{8, 9}));
  // No piece writes "}" here: nothing is spelled, and the cursor stays.
  JsonCursor closing(*call);
  ASSERT_TRUE(closing.feed(written + "}"));
  EXPECT_TRUE(speller.take(closing, 10).empty());
  EXPECT_EQ(closing.forced_bytes(100), "}</tool_call>");
}

}  // namespace
}  // namespace meshnn::serving
