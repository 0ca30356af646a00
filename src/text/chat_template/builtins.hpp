// Helpers the filters, tests, methods and globals share: Python's argument binding and the str
// methods some filters are made of (trim is strip, upper is upper, ...).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "value.hpp"

namespace meshnn::text::chat_template_detail {

// The arguments of a call to `function`, bound to `params` as Python binds them (positionally,
// then by keyword); nullopt for a parameter not given. The first `required` must be given.
std::vector<std::optional<Value>> bind(std::string_view function, Args& args,
                                       std::initializer_list<std::string_view> params, size_t required = 0);

// An argument that must be a str (or int), for messages naming `what`.
const std::string& expect_string(const Value& v, std::string_view what);
int64_t expect_integer(const Value& v, std::string_view what);

std::string str_upper(const std::string& s);
std::string str_lower(const std::string& s);
std::string str_capitalize(const std::string& s);
// str.strip(chars) and its sides; `chars` None or a str.
std::string str_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string str_replace(const std::string& s, const std::string& old, const std::string& replacement, int64_t count);
std::vector<std::string> str_splitlines(const std::string& s, bool keep_ends);

}  // namespace meshnn::text::chat_template_detail
