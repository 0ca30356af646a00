#define PCRE2_CODE_UNIT_WIDTH 8
#include "regex.hpp"

#include <fmt/format.h>
#include <pcre2.h>

#include <memory>
#include <string>
#include <utility>

#include "meshnn/core/error.hpp"
#include "code_points.hpp"

namespace meshnn::text::detail {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return fmt::format("PCRE2 error {}", code);
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using MatchData = std::unique_ptr<pcre2_match_data, MatchDataDeleter>;

// The subjects were checked as UTF-8 once, by the tokenizer; PCRE2 would otherwise re-check the
// rest of the text at every match, which is quadratic over a long prompt.
constexpr uint32_t kMatchOptions = PCRE2_NO_UTF_CHECK;

// Runs one match from `start`; returns false when there is none, throws on PCRE2's own failures
// (match or JIT stack limits).
bool match_at(const pcre2_code* code, std::string_view text, size_t start, uint32_t options, pcre2_match_data* m) {
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), start,
                             options | kMatchOptions, m, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  MESHNN_CHECK(rc >= 0, "tokenizer: matching a pre-tokenizer pattern failed ({})", pcre2_message(rc));
  return true;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, std::string_view what) {
  // UCP (Unicode classes) means nothing to plain text, and PCRE2 refuses it there.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &error_offset,
                        nullptr);
  MESHNN_CHECK(code_ != nullptr, "tokenizer.json: {} does not compile: {} at offset {} of '{}'", what,
               pcre2_message(error), error_offset, pattern);
  // JIT makes matching several times faster; without it (a platform that forbids executable
  // memory) PCRE2 interprets the same pattern, so a failure here is not an error.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

Regex::~Regex() { pcre2_code_free(code_); }

Regex::Regex(Regex&& other) noexcept : code_(std::exchange(other.code_, nullptr)) {}

void Regex::split_isolated(std::string_view text, FunctionRef<void(std::string_view)> piece) const {
  const MatchData m(pcre2_match_data_create_from_pattern(code_, nullptr));
  MESHNN_CHECK(m != nullptr, "tokenizer: out of memory for PCRE2 match data");
  size_t done = 0;  // text before this offset has been handed out
  size_t from = 0;
  while (from < text.size() && match_at(code_, text, from, 0, m.get())) {
    const PCRE2_SIZE* range = pcre2_get_ovector_pointer(m.get());
    const size_t begin = range[0], end = range[1];
    if (begin == end) {
      // An empty match isolates nothing; look again one character on, as Oniguruma's iteration
      // does.
      if (begin == text.size()) break;
      from = begin + utf8_length(static_cast<unsigned char>(text[begin]));
      continue;
    }
    if (done < begin) piece(text.substr(done, begin - done));
    piece(text.substr(begin, end - begin));
    done = from = end;
  }
  if (done < text.size()) piece(text.substr(done));
}

bool Regex::matches_whole(std::string_view text) const {
  const MatchData m(pcre2_match_data_create_from_pattern(code_, nullptr));
  MESHNN_CHECK(m != nullptr, "tokenizer: out of memory for PCRE2 match data");
  return match_at(code_, text, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, m.get());
}

}  // namespace meshnn::text::detail
