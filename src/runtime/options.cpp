#include "meshnn/runtime/options.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace meshnn {

OptionParser::OptionParser(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {
  add_flag("help", "show this help and exit");
}

void OptionParser::add_flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = Spec{false, "", help, std::nullopt};
}

void OptionParser::add_option(const std::string& name, const std::string& value_name, const std::string& help,
                              std::optional<std::string> default_value) {
  order_.push_back(name);
  specs_[name] = Spec{true, value_name, help, std::move(default_value)};
}

void OptionParser::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2)
      throw UsageError(fmt::format("unexpected argument '{}' (options start with --; see --help)", arg));
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const auto it = specs_.find(name);
    if (it == specs_.end()) throw UsageError(fmt::format("unknown option '--{}' (see --help)", name));
    if (!it->second.takes_value) {
      if (inline_value) throw UsageError(fmt::format("option '--{}' takes no value", name));
      if (name == "help") throw HelpRequested(usage());
      values_[name] = "1";
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(fmt::format("option '--{}' needs a value ({})", name, it->second.value_name));
      value = argv[++i];
    }
    values_[name] = value;
  }
}

bool OptionParser::flag(const std::string& name) const { return values_.count(name) != 0; }

bool OptionParser::has(const std::string& name) const {
  return values_.count(name) != 0 || (specs_.count(name) && specs_.at(name).default_value.has_value());
}

std::string OptionParser::get(const std::string& name) const {
  if (const auto it = values_.find(name); it != values_.end()) return it->second;
  const auto spec = specs_.find(name);
  if (spec != specs_.end() && spec->second.default_value) return *spec->second.default_value;
  throw UsageError(fmt::format("option '--{}' is required", name));
}

int64_t parse_size(const std::string& text, const std::string& what) {
  if (text.empty()) throw UsageError(fmt::format("{}: empty value", what));
  int64_t multiplier = 1;
  std::string digits = text;
  switch (text.back()) {
    case 'K': case 'k': multiplier = int64_t{1} << 10; break;
    case 'M': case 'm': multiplier = int64_t{1} << 20; break;
    case 'G': case 'g': multiplier = int64_t{1} << 30; break;
    default: break;
  }
  if (multiplier != 1) digits.pop_back();
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || errno == ERANGE || digits[0] == '+' || std::isspace(static_cast<unsigned char>(digits[0])))
    throw UsageError(fmt::format("{}: '{}' is not a whole number", what, text));
  if (v != 0 && (v > INT64_MAX / multiplier || v < INT64_MIN / multiplier))
    throw UsageError(fmt::format("{}: '{}' is too large", what, text));
  return static_cast<int64_t>(v) * multiplier;
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t min, int64_t max) {
  std::vector<int64_t> values;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string piece = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(piece.c_str(), &end, 10);
    if (piece.empty() || *end != '\0' || errno == ERANGE || std::isspace(static_cast<unsigned char>(piece[0])) ||
        v < min || v > max)
      throw UsageError(fmt::format("{}: '{}' is not a comma-separated list of whole numbers in [{}, {}]", what, text,
                                   min, max));
    values.push_back(v);
    if (comma == std::string::npos) return values;
    start = comma + 1;
  }
}

int64_t OptionParser::get_int(const std::string& name, int64_t min, int64_t max, bool suffixes) const {
  const std::string text = get(name);
  const std::string what = "--" + name;
  int64_t v;
  if (suffixes) {
    v = parse_size(text, what);
  } else {
    errno = 0;
    char* end = nullptr;
    const long long parsed = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || std::isspace(static_cast<unsigned char>(text[0])))
      throw UsageError(fmt::format("{}: '{}' is not a whole number", what, text));
    v = parsed;
  }
  if (v < min || v > max) throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", what, v, min, max));
  return v;
}

double OptionParser::get_double(const std::string& name, double min, double max) const {
  const std::string text = get(name);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    throw UsageError(fmt::format("--{}: '{}' is not a number", name, text));
  if (v < min || v > max) throw UsageError(fmt::format("--{}: {} is out of range [{}, {}]", name, v, min, max));
  return v;
}

std::string OptionParser::get_choice(const std::string& name, const std::vector<std::string>& choices) const {
  const std::string v = get(name);
  for (const std::string& c : choices)
    if (c == v) return v;
  throw UsageError(fmt::format("--{}: '{}' is not one of {}", name, v, fmt::join(choices, ", ")));
}

std::string OptionParser::usage() const {
  std::string out = fmt::format("usage: {} [options]\n{}\n\noptions:\n", program_, summary_);
  for (const std::string& name : order_) {
    const Spec& s = specs_.at(name);
    const std::string left = s.takes_value ? fmt::format("--{} {}", name, s.value_name) : "--" + name;
    out += fmt::format("  {:<28} {}{}\n", left, s.help, s.default_value ? fmt::format(" (default: {})", *s.default_value) : "");
  }
  return out;
}

}  // namespace meshnn
