#include "meshnn/serving/json_grammar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "meshnn/core/error.hpp"

namespace meshnn::serving {

using nlohmann::json;
using Kind = JsonGrammar::Kind;

namespace {

std::bitset<256> characters(std::string_view chars) {
  std::bitset<256> set;
  for (char c : chars) set.set(static_cast<uint8_t>(c));
  return set;
}

const std::set<std::string, std::less<>> kAnnotations = {"title", "description", "default", "examples",
                                                          "$schema", "$id", "$comment", "strict"};
const std::set<std::string, std::less<>> kKeywords = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
    "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions"};

}  // namespace

// Builds a JsonGrammar's nodes from a schema, depth first. A $ref's target becomes one node,
// whatever refers to it, so a recursive schema makes a cyclic graph of nodes.
class JsonSchemaCompiler {
 public:
  explicit JsonSchemaCompiler(JsonGrammar& g, const json& document) : g_(g), document_(document) {}

  int32_t compile(const json& schema, const std::string& path) {
    // Schemas come from clients: one nested without end must not exhaust the stack.
    MESHNN_CHECK(++depth_ <= kMaxSchemaDepth, "json_schema: the schema nests deeper than {} levels at {}",
                 kMaxSchemaDepth, path);
    const int32_t n = compile_nested(schema, path);
    --depth_;
    return n;
  }

 private:
  static constexpr int kMaxSchemaDepth = 128;

  int32_t compile_nested(const json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      MESHNN_CHECK(schema.get<bool>(), "json_schema: the schema at {} is false: nothing can be written", path);
      return any();
    }
    MESHNN_CHECK(schema.is_object(), "json_schema: the schema at {} is {}, not an object or a boolean", path,
                 schema.type_name());
    for (const auto& [key, value] : schema.items())
      MESHNN_CHECK(kAnnotations.contains(key) || kKeywords.contains(key),
                   "json_schema: '{}' at {} is not supported (meshnn takes type, properties, required, "
                   "additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, anyOf, "
                   "oneOf, $ref, $defs and annotations such as title and description)",
                   key, path);
    auto has = [&](const char* key) { return schema.contains(key); };
    auto only_with = [&](std::initializer_list<const char*> allowed, const char* what) {
      for (const auto& item : schema.items()) {
        const std::string& key = item.key();
        const bool listed = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; });
        MESHNN_CHECK(kAnnotations.contains(key) || key == "$defs" || key == "definitions" || listed,
                     "json_schema: '{}' beside {} at {} is not supported", key, what, path);
      }
    };
    if (has("$ref")) {
      only_with({"$ref"}, "$ref");
      return reference(schema.at("$ref"), path);
    }
    if (has("enum") || has("const")) {
      only_with({"enum", "const", "type"}, has("enum") ? "enum" : "const");
      MESHNN_CHECK(!(has("enum") && has("const")), "json_schema: both enum and const at {}", path);
      std::vector<std::string> texts;
      if (has("const")) {
        texts.push_back(schema.at("const").dump());
      } else {
        const json& values = schema.at("enum");
        MESHNN_CHECK(values.is_array() && !values.empty(), "json_schema: enum at {} must be a non-empty list",
                     path);
        for (const json& v : values) texts.push_back(v.dump());
      }
      return literals(std::move(texts));
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (has(key)) {
        only_with({key}, key);
        const json& branches = schema.at(key);
        MESHNN_CHECK(branches.is_array() && !branches.empty(), "json_schema: {} at {} must be a non-empty list", key,
                     path);
        std::vector<int32_t> nodes;
        for (size_t i = 0; i < branches.size(); ++i)
          nodes.push_back(compile(branches[i], fmt::format("{}/{}/{}", path, key, i)));
        return choice(std::move(nodes), fmt::format("{}/{}", path, key), std::string_view(key) == "oneOf");
      }
    std::vector<std::string> types;
    if (has("type")) {
      const json& t = schema.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else {
        MESHNN_CHECK(t.is_array() && !t.empty(), "json_schema: type at {} must be a name or a non-empty list of names",
                     path);
        for (const json& name : t) {
          MESHNN_CHECK(name.is_string(), "json_schema: type at {} lists {}, not a name", path, name.dump());
          types.push_back(name.get<std::string>());
        }
      }
    } else if (has("properties") || has("required") || has("additionalProperties")) {
      types.push_back("object");
    } else if (has("items") || has("minItems") || has("maxItems")) {
      types.push_back("array");
    } else {
      return any();
    }
    std::vector<int32_t> nodes;
    for (const std::string& type : types) nodes.push_back(typed(type, schema, path));
    return choice(std::move(nodes), fmt::format("{}/type", path));
  }

  // The node of any JSON value: one of an object of any keys, an array, a string, a number,
  // true, false or null.
  int32_t any() {
    if (any_ >= 0) return any_;
    any_ = add(Kind::CHOICE);
    const int32_t object = add(Kind::OBJECT), array = add(Kind::ARRAY);
    node(object).any_key_value = any_;
    node(array).items = any_;
    const std::vector<int32_t> alternatives = {object, array, add(Kind::STRING), add(Kind::NUMBER),
                                               literals({"false", "null", "true"})};
    std::bitset<256> first;
    for (int32_t a : alternatives) first |= node(a).first;
    node(any_).alternatives = alternatives;
    node(any_).first = first;
    return any_;
  }

  JsonGrammar::Node& node(int32_t i) { return g_.nodes_[static_cast<size_t>(i)]; }

  int32_t add(Kind kind) {
    JsonGrammar::Node n;
    n.kind = kind;
    switch (kind) {
      case Kind::OBJECT: n.first = characters("{"); break;
      case Kind::ARRAY: n.first = characters("["); break;
      case Kind::STRING: n.first = characters("\""); break;
      case Kind::NUMBER:
      case Kind::INTEGER: n.first = characters("-0123456789"); break;
      default: break;
    }
    g_.nodes_.push_back(std::move(n));
    return static_cast<int32_t>(g_.nodes_.size() - 1);
  }

  int32_t literals(std::vector<std::string> texts) {
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    const int32_t i = add(Kind::LITERALS);
    for (const std::string& t : texts) node(i).first.set(static_cast<uint8_t>(t.front()));
    node(i).literals = std::move(texts);
    return i;
  }

  int32_t typed(const std::string& type, const json& schema, const std::string& path) {
    if (type == "string") return string(schema, path);
    if (type == "number") return add(Kind::NUMBER);
    if (type == "integer") return add(Kind::INTEGER);
    if (type == "boolean") return literals({"false", "true"});
    if (type == "null") return literals({"null"});
    if (type == "object") return object(schema, path);
    if (type == "array") return array(schema, path);
    throw Error(fmt::format("json_schema: type at {} names '{}', which is not a JSON Schema type", path, type));
  }

  int32_t object(const json& schema, const std::string& path) {
    const int32_t i = add(Kind::OBJECT);
    if (const auto p = schema.find("properties"); p != schema.end()) {
      MESHNN_CHECK(p->is_object(), "json_schema: properties at {} must be an object", path);
      MESHNN_CHECK(p->size() <= 64, "json_schema: the object at {} has {} properties; at most 64 are supported",
                   path, p->size());
      std::vector<std::pair<std::string, int32_t>> keys;
      for (const auto& [name, sub] : p->items())
        keys.emplace_back(json(name).dump().substr(1), compile(sub, fmt::format("{}/properties/{}", path, name)));
      std::sort(keys.begin(), keys.end());
      for (auto& [key, value] : keys) {
        node(i).keys.push_back(key);
        node(i).key_values.push_back(value);
      }
    } else if (const auto extra = schema.find("additionalProperties"); extra == schema.end() || *extra != false) {
      node(i).any_key_value = extra == schema.end() ? any() : compile(*extra, path + "/additionalProperties");
    }
    if (const auto r = schema.find("required"); r != schema.end()) {
      MESHNN_CHECK(r->is_array(), "json_schema: required at {} must be a list of names", path);
      for (const json& name : *r) {
        MESHNN_CHECK(name.is_string(), "json_schema: required at {} lists {}, not a name", path, name.dump());
        const std::string key = json(name).dump().substr(1);
        const std::vector<std::string>& keys = node(i).keys;
        const auto at = std::lower_bound(keys.begin(), keys.end(), key);
        MESHNN_CHECK(at != keys.end() && *at == key,
                     "json_schema: required at {} names '{}', which is not among the object's properties",
                     path, name.get<std::string>());
        node(i).required |= uint64_t{1} << (at - keys.begin());
      }
    }
    return i;
  }

  // A schema's pair of count keywords (minItems and maxItems, minLength and maxLength): 0 and no
  // bound when absent.
  static std::pair<int64_t, int64_t> bounds(const json& schema, const char* min_key, const char* max_key,
                                            const std::string& path) {
    auto count = [&](const char* key, int64_t otherwise) {
      const auto v = schema.find(key);
      if (v == schema.end()) return otherwise;
      MESHNN_CHECK(v->is_number_unsigned(), "json_schema: {} at {} must be a count, got {}", key, path, v->dump());
      return static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), std::numeric_limits<int64_t>::max()));
    };
    const int64_t low = count(min_key, 0), high = count(max_key, std::numeric_limits<int64_t>::max());
    MESHNN_CHECK(low <= high, "json_schema: {} {} is above {} {} at {}", min_key, low, max_key, high, path);
    return {low, high};
  }

  int32_t string(const json& schema, const std::string& path) {
    const auto [low, high] = bounds(schema, "minLength", "maxLength", path);
    const int32_t i = add(Kind::STRING);
    node(i).min_length = low;
    node(i).max_length = high;
    return i;
  }

  int32_t array(const json& schema, const std::string& path) {
    const auto [low, high] = bounds(schema, "minItems", "maxItems", path);
    const int32_t i = add(Kind::ARRAY);
    node(i).min_items = low;
    node(i).max_items = high;
    const auto items = schema.find("items");
    if (items == schema.end() || *items == true) {
      node(i).items = any();
    } else if (*items == false) {
      node(i).max_items = 0;
      MESHNN_CHECK(node(i).min_items == 0, "json_schema: the array at {} takes no items but minItems is {}",
                   path, node(i).min_items);
    } else {
      MESHNN_CHECK(items->is_object(), "json_schema: items at {} must be one schema (lists of schemas are not supported)",
                   path);
      const int32_t item = compile(*items, path + "/items");
      node(i).items = item;
    }
    return i;
  }

  // One node for alternatives told apart by their first character: nested choices are flattened,
  // lists of literals joined, and an integer beside a number is the number. `exclusive` (oneOf):
  // no value may follow two alternatives, so a literal twice, or an integer beside a number, is
  // refused.
  int32_t choice(std::vector<int32_t> nodes, const std::string& path, bool exclusive = false) {
    std::vector<int32_t> flat;
    std::vector<std::string> texts;
    bool literal_seen = false;
    for (int32_t n : nodes) {
      MESHNN_CHECK(filled(n), "json_schema: a $ref at {} refers to a schema that contains it, with nothing between: "
                              "it would never begin", path);
      if (node(n).kind == Kind::CHOICE) {
        flat.insert(flat.end(), node(n).alternatives.begin(), node(n).alternatives.end());
      } else {
        flat.push_back(n);
      }
    }
    std::vector<int32_t> kept;
    for (int32_t n : flat) {
      if (node(n).kind == Kind::LITERALS) {
        texts.insert(texts.end(), node(n).literals.begin(), node(n).literals.end());
        literal_seen = true;
        continue;
      }
      if (node(n).kind == Kind::INTEGER &&
          std::any_of(flat.begin(), flat.end(), [&](int32_t m) { return node(m).kind == Kind::NUMBER; }))
        continue;
      if (std::find(kept.begin(), kept.end(), n) == kept.end()) kept.push_back(n);
    }
    if (exclusive) {
      std::vector<std::string> sorted = texts;
      std::sort(sorted.begin(), sorted.end());
      const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
      MESHNN_CHECK(twice == sorted.end(), "json_schema: two alternatives of the oneOf at {} take {}", path,
                   twice == sorted.end() ? "" : *twice);
      const auto kind_in = [&](Kind k) {
        return std::any_of(flat.begin(), flat.end(), [&](int32_t m) { return node(m).kind == k; });
      };
      MESHNN_CHECK(!(kind_in(Kind::INTEGER) && kind_in(Kind::NUMBER)),
                   "json_schema: the oneOf at {} has an integer and a number, which every integer follows", path);
    }
    if (literal_seen) kept.push_back(literals(std::move(texts)));
    kept = tag_objects(std::move(kept), path);
    if (kept.size() == 1) return kept.front();
    std::bitset<256> first;
    for (size_t a = 0; a < kept.size(); ++a) {
      const std::bitset<256> both = first & node(kept[a]).first;
      if (both.any()) {
        size_t c = 0;
        while (!both.test(c)) ++c;
        throw Error(fmt::format("json_schema: the alternatives at {} can both begin with '{}'; meshnn tells "
                                "alternatives apart by their first character (an object or null, a string or a "
                                "number, ...)",
                                path, static_cast<char>(c)));
      }
      first |= node(kept[a]).first;
    }
    const int32_t i = add(Kind::CHOICE);
    node(i).alternatives = std::move(kept);
    node(i).first = first;
    return i;
  }

  // Alternatives of which several are objects: those objects become one TAGGED node, told apart by
  // a discriminator, a key all of them require whose value is a const or enum of strings, each
  // object's strings its own. The answer writes that key first, and its value decides the rest.
  std::vector<int32_t> tag_objects(std::vector<int32_t> kept, const std::string& path) {
    std::vector<int32_t> objects, others;
    for (int32_t n : kept) {
      const Kind kind = node(n).kind;
      if (kind == Kind::TAGGED) {
        objects.insert(objects.end(), node(n).alternatives.begin(), node(n).alternatives.end());
      } else {
        (kind == Kind::OBJECT ? objects : others).push_back(n);
      }
    }
    if (objects.size() < 2) return kept;
    // The key's node in object `o`, if `o` requires it and its value is a list of strings.
    auto tag_values = [&](int32_t o, const std::string& key) -> const std::vector<std::string>* {
      const JsonGrammar::Node& object = node(o);
      const auto at = std::lower_bound(object.keys.begin(), object.keys.end(), key);
      if (at == object.keys.end() || *at != key || (object.required >> (at - object.keys.begin()) & 1) == 0)
        return nullptr;
      const JsonGrammar::Node& value = node(object.key_values[static_cast<size_t>(at - object.keys.begin())]);
      if (value.kind != Kind::LITERALS) return nullptr;
      for (const std::string& t : value.literals)
        if (t.front() != '"') return nullptr;
      return &value.literals;
    };
    for (const std::string& key : node(objects.front()).keys) {
      std::vector<std::pair<std::string, int32_t>> tags;
      bool usable = true;
      for (int32_t o : objects) {
        const std::vector<std::string>* values = tag_values(o, key);
        usable = usable && values != nullptr;
        if (!usable) break;
        for (const std::string& v : *values) tags.emplace_back(v, o);
      }
      if (!usable) continue;
      std::sort(tags.begin(), tags.end());
      const bool distinct =
          std::adjacent_find(tags.begin(), tags.end(), [](const auto& a, const auto& b) { return a.first == b.first; }) ==
          tags.end();
      if (!distinct) continue;
      const int32_t i = add(Kind::TAGGED);
      node(i).first = characters("{");
      node(i).keys = {key};
      for (const auto& [value, object] : tags) {
        node(i).literals.push_back(value);
        node(i).alternatives.push_back(object);
      }
      others.push_back(i);
      return others;
    }
    throw Error(fmt::format("json_schema: the alternatives at {} are objects with no discriminator: meshnn tells "
                            "objects apart by a property every one of them requires, whose const or enum strings "
                            "are each one's own",
                            path));
  }

  int32_t reference(const json& ref, const std::string& path) {
    MESHNN_CHECK(ref.is_string(), "json_schema: $ref at {} must be a string", path);
    const std::string target = ref.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const bool local = target == "#" || target.starts_with("#/$defs/") || target.starts_with("#/definitions/");
    MESHNN_CHECK(local, "json_schema: $ref '{}' at {} is not supported (only \"#\", \"#/$defs/NAME\" and "
                        "\"#/definitions/NAME\")", target, path);
    const json::json_pointer pointer(target.substr(1));
    MESHNN_CHECK(document_.contains(pointer), "json_schema: $ref '{}' at {} names nothing in the schema", target,
                 path);
    // The target gets its node before its body is compiled, so that the body may refer back to it
    // (a tree's node holding a list of nodes); the body's node is copied into it afterwards.
    const int32_t slot = add(Kind::STRING);
    unfilled_.insert(slot);
    refs_[target] = slot;
    const int32_t body = compile(document_.at(pointer), target);
    MESHNN_CHECK(body != slot, "json_schema: $ref '{}' at {} refers to itself with nothing between", target,
                 path);
    node(slot) = node(body);
    unfilled_.erase(slot);
    return slot;
  }

  // A $ref's node is unfilled while its body compiles: the body may name it (as a property's or
  // an item's node) but not begin with it (as an alternative, whose first characters are needed).
  bool filled(int32_t n) const { return !unfilled_.contains(n); }

  JsonGrammar& g_;
  const json& document_;
  std::map<std::string, int32_t> refs_;
  std::set<int32_t> unfilled_;
  int32_t any_ = -1;
  int depth_ = 0;  // schemas being compiled, one inside the other
};

std::shared_ptr<const JsonGrammar> JsonGrammar::any_object() { return from_schema(R"({"type":"object"})"); }

std::shared_ptr<const JsonGrammar> JsonGrammar::choice(std::vector<std::string> choices) {
  MESHNN_CHECK(!choices.empty(), "choice: give at least one choice");
  for (const std::string& c : choices) MESHNN_CHECK(!c.empty(), "choice: a choice is empty");
  std::shared_ptr<JsonGrammar> g(new JsonGrammar());
  g->choices_ = choices;
  std::sort(choices.begin(), choices.end());
  choices.erase(std::unique(choices.begin(), choices.end()), choices.end());
  Node n;
  n.kind = Kind::LITERALS;
  for (const std::string& c : choices) n.first.set(static_cast<uint8_t>(c.front()));
  n.literals = std::move(choices);
  g->nodes_.push_back(std::move(n));
  g->root_ = 0;
  g->raw_ = true;
  return g;
}

std::string JsonGrammar::source() const {
  if (raw_) return json{{"choice", choices_}}.dump();
  return json{{"schema", schema_}, {"prefix", prefix_}, {"suffix", suffix_}}.dump();
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_source(std::string_view source) {
  const json j = json::parse(source);
  if (j.contains("choice")) return choice(j.at("choice").get<std::vector<std::string>>());
  return from_schema(j.at("schema").get<std::string>(), j.at("prefix").get<std::string>(),
                     j.at("suffix").get<std::string>());
}

std::shared_ptr<const JsonGrammar> JsonGrammar::from_schema(std::string_view schema_json, std::string prefix,
                                                            std::string suffix) {
  json document;
  try {
    document = json::parse(schema_json);
  } catch (const json::exception& e) {
    throw Error(fmt::format("json_schema: not valid JSON: {}", e.what()));
  }
  std::shared_ptr<JsonGrammar> g(new JsonGrammar());
  JsonSchemaCompiler compiler(*g, document);
  g->root_ = compiler.compile(document, "#");
  MESHNN_CHECK((g->node(g->root_).first & characters("-0123456789")).none(),
               "json_schema: the root may be a number, and nothing after a number's last digit would say that the "
               "answer is complete: make the root an object (as OpenAI requires) or an array");
  g->schema_ = document.dump();
  g->prefix_ = std::move(prefix);
  g->suffix_ = std::move(suffix);
  return g;
}

}  // namespace meshnn::serving
