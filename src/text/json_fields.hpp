// Reading tokenizer.json's objects with errors that say which field is wrong and where.
// `where` is the object's place in the file ("model", "pre_tokenizer.pretokenizers[0]").
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace meshnn::text::detail {

// `value` as JSON text, cut short for an error message.
std::string brief(const nlohmann::json& value);

// obj[key] as a bool; `fallback` when absent or null.
bool bool_field(const nlohmann::json& obj, const char* key, bool fallback, std::string_view where);

// obj[key] as a string; throws when absent or not a string.
const std::string& string_field(const nlohmann::json& obj, const char* key, std::string_view where);

// The "type" of a component (pre-tokenizer, model, decoder); throws when `spec` is not an object
// with a string "type".
const std::string& component_type(const nlohmann::json& spec, std::string_view where);

}  // namespace meshnn::text::detail
