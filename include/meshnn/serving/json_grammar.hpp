// Structured output: the JSON an answer must be, compiled from a JSON Schema (OpenAI's
// response_format json_schema) or standing for any JSON object (json_object), into a grammar of
// nodes that JsonCursor (json_cursor.hpp) follows byte by byte while the answer is generated.
//
// What a schema may say; anything else is refused, naming the keyword and where it is:
//  - type: "object", "array", "string", "number", "integer", "boolean", "null", or a list of them;
//  - objects: properties, required, additionalProperties; arrays: items, minItems, maxItems;
//    strings: minLength, maxLength (in characters, as JSON Schema counts them: code points);
//  - enum and const (any JSON values: the answer writes one as JSON writes it compactly);
//  - anyOf and oneOf, when their branches begin with different characters (an object or null,
//    a string or a number), and so can be told apart by the first one; or when their object
//    branches all require one property whose const or enum strings tell them apart (a
//    discriminator, as tool calls' "name"), which the answer then writes first;
//  - $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion included), with $defs and
//    definitions beside;
//  - annotations, which change nothing: title, description, default, examples, $schema, $id,
//    $comment, strict.
// The answer always validates, but not every valid answer can be written:
//  - an object with properties takes only those keys (each once, in any order, the required ones
//    all), whatever additionalProperties says; without properties it takes any keys, their values
//    as additionalProperties says (any JSON when absent or true, none when false);
//  - JSON text is written without leading zeros or lone surrogates, as JSON itself requires;
//  - whitespace between tokens is at most one line break ("\n", first) and then spaces or tabs, at
//    most kIndentPerLevel per open object or array (at least kIndentPerLevel): compact and
//    pretty-printed JSON fit, and a model cannot spend its answer on blank lines and indentation
//    (small models do);
//  - values nest at most kMaxJsonDepth deep.
// The root may not be a number: nothing after its last digit would say that it is complete.
#pragma once

#include <bitset>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace meshnn::serving {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr int kIndentPerLevel = 4;

class JsonGrammar {
 public:
  enum class Kind : uint8_t {
    OBJECT,    // {...}: listed keys or any keys
    ARRAY,     // [...]
    STRING,    // "..."
    NUMBER,    // -1.5e3
    INTEGER,   // -15
    LITERALS,  // one of a few JSON texts, compactly written: true, false, null, enum and const values
    CHOICE,    // one of several nodes, told apart by their first character
    TAGGED,    // one of several objects, told apart by the value of their first key
  };
  struct Node {
    Kind kind = Kind::STRING;
    // OBJECT: the listed keys, each as it is written in JSON after its opening quote (escaped,
    // with the closing quote), sorted; the node of each one's value; the required ones as a mask
    // of their positions in `keys`. With no keys, any key goes and its value is `any_key_value`
    // (-1: no key at all, only {}).
    std::vector<std::string> keys;
    std::vector<int32_t> key_values;
    uint64_t required = 0;
    int32_t any_key_value = -1;
    // ARRAY: the items' node (-1: none, only []), and the item count's bounds. STRING: the
    // character count's bounds.
    int32_t items = -1;
    int64_t min_items = 0, max_items = std::numeric_limits<int64_t>::max();
    int64_t min_length = 0, max_length = std::numeric_limits<int64_t>::max();
    // LITERALS: the texts, sorted and distinct.
    std::vector<std::string> literals;
    // CHOICE: the alternatives, none of them a CHOICE, their first characters disjoint.
    // TAGGED: keys[0] is the discriminator's key, `literals` its values (JSON strings), and
    // alternatives[i] the OBJECT node that follows literals[i].
    std::vector<int32_t> alternatives;
    // The characters the node's text can begin with (whitespace aside).
    std::bitset<256> first;
  };

  // Any JSON object: response_format {"type": "json_object"}.
  static std::shared_ptr<const JsonGrammar> any_object();
  // The grammar of a JSON Schema given as JSON text, the value written between `prefix` and
  // `suffix` (fixed text, as a tool call's tags; whitespace may come before the suffix as between
  // values). Throws meshnn::Error naming the first keyword it does not take and where
  // ("json_schema: 'pattern' at #/properties/code is not supported ..."), or the JSON's syntax
  // error.
  static std::shared_ptr<const JsonGrammar> from_schema(std::string_view schema_json, std::string prefix = {},
                                                        std::string suffix = {});

  // One of `choices`, written as they are (not JSON; no whitespace around them): vLLM's
  // structured_outputs choice, for answers such as a label. Where a choice is complete but a longer
  // one goes on ("yes", "yes please"), the request may also end there, on a stop token
  // (JsonCursor::may_end). Throws meshnn::Error for no choice or an empty one.
  static std::shared_ptr<const JsonGrammar> choice(std::vector<std::string> choices);

  // What it was made from, as JSON text: what source() gives and from_source() reads back to the
  // same grammar in another process.
  std::string source() const;
  static std::shared_ptr<const JsonGrammar> from_source(std::string_view source);

  // The schema it was made from ({"type":"object"} for any_object; "" for a choice).
  const std::string& schema() const { return schema_; }
  const std::string& prefix() const { return prefix_; }
  const std::string& suffix() const { return suffix_; }
  // Plain text choices, not JSON: no whitespace between values.
  bool raw() const { return raw_; }
  const Node& node(int32_t index) const { return nodes_[static_cast<size_t>(index)]; }
  int32_t root() const { return root_; }

 private:
  friend class JsonSchemaCompiler;
  JsonGrammar() = default;
  std::vector<Node> nodes_;
  int32_t root_ = -1;
  std::string schema_, prefix_, suffix_;
  std::vector<std::string> choices_;
  bool raw_ = false;
};

}  // namespace meshnn::serving
