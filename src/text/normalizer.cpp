#include "normalizer.hpp"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "json_fields.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::text::detail {
namespace {

// The utf8proc options of a normalization form, or 0 when `type` names none. STABLE is what
// utf8proc's own utf8proc_NFC() and its siblings pass.
int form_options(const std::string& type) {
  if (type == "NFC") return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
  if (type == "NFD") return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
  if (type == "NFKC") return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  if (type == "NFKD") return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  return 0;
}

void add_steps(const nlohmann::json& spec, const std::string& where, std::vector<int>& steps) {
  const std::string& type = component_type(spec, where);
  if (type == "Sequence") {
    const auto list = spec.find("normalizers");
    MESHNN_CHECK(list != spec.end() && list->is_array(), "tokenizer.json: {}.normalizers must be a list", where);
    for (size_t i = 0; i < list->size(); ++i)
      add_steps((*list)[i], fmt::format("{}.normalizers[{}]", where, i), steps);
    return;
  }
  const int options = form_options(type);
  MESHNN_CHECK(options != 0,
               "tokenizer.json: {} is {}; a byte-level BPE takes NFC, NFD, NFKC, NFKD, a Sequence of them, or "
               "none (normalizer: null)",
               where, type);
  steps.push_back(options);
}

// Every normalization form leaves ASCII as it is, and most prompts are mostly ASCII.
bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }  // utf8proc_map's result comes from malloc
};

}  // namespace

Normalizer::Normalizer(const nlohmann::json& spec) {
  if (!spec.is_null()) add_steps(spec, "normalizer", steps_);
}

std::string_view Normalizer::run(std::string_view text, std::string& buffer) const {
  if (steps_.empty() || is_ascii(text)) return text;
  std::string_view current = text;
  for (const int options : steps_) {
    utf8proc_uint8_t* mapped = nullptr;
    // With a length and without UTF8PROC_NULLTERM, a NUL in the text is a character like any other.
    const utf8proc_ssize_t size =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(current.data()),
                     static_cast<utf8proc_ssize_t>(current.size()), &mapped, static_cast<utf8proc_option_t>(options));
    const std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(mapped);
    // The text was checked as UTF-8 already, so this is running out of memory or a text too long.
    MESHNN_CHECK(size >= 0, "tokenizer: Unicode normalization of {} bytes failed ({})", current.size(),
                 utf8proc_errmsg(size));
    buffer.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(size));
    current = buffer;
  }
  return current;
}

std::string Normalizer::operator()(std::string_view text) const {
  std::string buffer;
  return std::string(run(text, buffer));
}

}  // namespace meshnn::text::detail
