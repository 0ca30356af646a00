#include "meshnn/runtime/cli.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "meshnn/runtime/tracing.hpp"

namespace meshnn {
namespace {

// Whole decimal numbers only: no leading blanks, no "+", no hexadecimal or octal, no overflow.
bool parse_whole_number(const std::string& text, int64_t& value) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0])) || text[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return false;
  value = v;
  return true;
}

std::string out_of_range(int64_t value, int64_t min, int64_t max) {
  return value < min || value > max ? fmt::format("{} is out of range [{}, {}]", value, min, max) : "";
}

// A byte count with the largest suffix that keeps it whole: 1073741824 -> "1G".
std::string size_text(int64_t bytes) {
  for (const auto& [shift, suffix] : {std::pair{30, 'G'}, std::pair{20, 'M'}, std::pair{10, 'K'}})
    if (bytes != 0 && bytes % (int64_t{1} << shift) == 0) return fmt::format("{}{}", bytes >> shift, suffix);
  return std::to_string(bytes);
}

// CLI11 words everything it did not expect as "The following argument was not expected: X"; an
// unknown option is the likely mistake, so it is named as such.
std::string unexpected_arguments(std::vector<std::string> extras) {
  std::erase(extras, "--");  // the end of options, not a mistake of its own
  if (extras.empty()) return "unexpected arguments (see --help)";
  const std::string& first = extras.front();
  if (first.rfind("-", 0) == 0 && first.size() > 1)
    return fmt::format("unknown option '{}' (see --help)", first.substr(0, first.find('=')));
  return fmt::format("unexpected argument '{}' (see --help)", first);
}

}  // namespace

void parse_command_line(CLI::App& app, int argc, char** argv) {
  add_tracing_options(app);
  for (CLI::Option* option : app.get_options()) {
    // The variables hold their defaults until the parse: that is what --help shows, unless the
    // app gave a default text of its own (e.g. "1M" for a size).
    if (option->get_default_str().empty()) option->capture_default_str();
    if (option->get_items_expected_max() <= 1) option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::CallForAllHelp&) {
    throw HelpRequested(app.help("", CLI::AppFormatMode::All));
  } catch (const CLI::ExtrasError&) {
    throw UsageError(unexpected_arguments(app.remaining()));
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  begin_tracing();
}

IntRange::IntRange(int64_t min, int64_t max) {
  name_ = "INT_RANGE";
  description(fmt::format("in [{}, {}]", min, max));
  func_ = [min, max](std::string& text) -> std::string {
    int64_t value = 0;
    if (!parse_whole_number(text, value)) return fmt::format("'{}' is not a whole number", text);
    text = std::to_string(value);
    return out_of_range(value, min, max);
  };
}

FiniteRange::FiniteRange(double min, double max) {
  name_ = "FINITE_RANGE";
  const bool bounded = min > -std::numeric_limits<double>::max() || max < std::numeric_limits<double>::max();
  description(bounded ? fmt::format("in [{}, {}]", min, max) : "finite");
  func_ = [min, max](std::string& text) -> std::string {
    errno = 0;
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(value))
      return fmt::format("'{}' is not a finite number", text);
    return value < min || value > max ? fmt::format("{} is out of range [{}, {}]", value, min, max) : "";
  };
}

SizeRange::SizeRange(int64_t min, int64_t max) {
  name_ = "SIZE_RANGE";
  description(fmt::format("bytes in [{}, {}] (K, M, G: x1024)", size_text(min), size_text(max)));
  func_ = [min, max](std::string& text) -> std::string {
    try {
      const int64_t value = parse_size(text);
      if (value < min || value > max)
        return fmt::format("{} is out of range [{}, {}]", text, size_text(min), size_text(max));
      text = std::to_string(value);
      return "";
    } catch (const UsageError& e) {
      return e.what();
    }
  };
}

int64_t parse_size(const std::string& text) {
  int64_t multiplier = 1;
  std::string digits = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': multiplier = int64_t{1} << 10; break;
      case 'M': case 'm': multiplier = int64_t{1} << 20; break;
      case 'G': case 'g': multiplier = int64_t{1} << 30; break;
      default: break;
    }
  }
  if (multiplier != 1) digits.pop_back();
  int64_t value = 0;
  if (!parse_whole_number(digits, value))
    throw UsageError(fmt::format("'{}' is not a size (a whole number with an optional K, M or G suffix)", text));
  if (value > INT64_MAX / multiplier || value < INT64_MIN / multiplier)
    throw UsageError(fmt::format("'{}' is too large", text));
  return value * multiplier;
}

std::vector<int64_t> parse_int_list(const std::string& text, int64_t min, int64_t max, char separator) {
  std::vector<int64_t> values;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(separator, start);
    int64_t value = 0;
    if (!parse_whole_number(text.substr(start, end == std::string::npos ? std::string::npos : end - start), value) ||
        value < min || value > max)
      throw UsageError(fmt::format("'{}' is not a list of whole numbers in [{}, {}] separated by '{}'", text, min, max,
                                   separator));
    values.push_back(value);
    if (end == std::string::npos) return values;
    start = end + 1;
  }
}

}  // namespace meshnn
