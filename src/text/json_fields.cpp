#include "json_fields.hpp"

#include <nlohmann/json.hpp>

#include "meshnn/core/error.hpp"

namespace meshnn::text::detail {

std::string brief(const nlohmann::json& value) {
  std::string text = value.dump();
  constexpr size_t kShown = 80;  // a wrong value may be a whole vocabulary
  if (text.size() > kShown) text = text.substr(0, kShown) + "...";
  return text;
}

bool bool_field(const nlohmann::json& obj, const char* key, bool fallback, std::string_view where) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  MESHNN_CHECK(it->is_boolean(), "tokenizer.json: {}.{} must be true or false, got {}", where, key, brief(*it));
  return it->get<bool>();
}

const std::string& string_field(const nlohmann::json& obj, const char* key, std::string_view where) {
  const auto it = obj.find(key);
  MESHNN_CHECK(it != obj.end(), "tokenizer.json: {} has no '{}'", where, key);
  MESHNN_CHECK(it->is_string(), "tokenizer.json: {}.{} must be a string, got {}", where, key, brief(*it));
  return it->get_ref<const std::string&>();
}

const std::string& component_type(const nlohmann::json& spec, std::string_view where) {
  MESHNN_CHECK(spec.is_object(), "tokenizer.json: {} must be an object, got {}", where, brief(spec));
  return string_field(spec, "type", where);
}

}  // namespace meshnn::text::detail
