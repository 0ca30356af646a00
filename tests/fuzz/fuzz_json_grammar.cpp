// libFuzzer target: structured output's schema compiler and JSON cursor, which read what HTTP
// clients send. The input is a JSON Schema, the byte 0x1E, then answer bytes. Compiling must end in
// a grammar or meshnn::Error; the cursor then takes or refuses each byte, never crashing. Whatever
// it takes whole and calls complete must be JSON (nlohmann-json reads it, numbers beyond double's
// range aside), and the bytes it says are forced next (jump-forward) it must take: anything else
// aborts.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "meshnn/core/error.hpp"
#include "meshnn/serving/json_cursor.hpp"
#include "meshnn/serving/json_grammar.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\x1e');
  const std::string_view schema = input.substr(0, split);
  const std::string_view answer = split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
  std::shared_ptr<const meshnn::serving::JsonGrammar> grammar;
  try {
    grammar = meshnn::serving::JsonGrammar::from_schema(schema);
  } catch (const meshnn::Error&) {
    grammar = meshnn::serving::JsonGrammar::any_object();
  }
  meshnn::serving::JsonCursor cursor(*grammar);
  size_t taken = 0;
  while (taken < answer.size() && !cursor.complete()) {
    meshnn::serving::JsonCursor before = cursor;
    if (!cursor.feed(static_cast<uint8_t>(answer[taken]))) {
      cursor = before;  // a refused byte leaves the copy as it was
      break;
    }
    ++taken;
  }
  meshnn::serving::JsonCursor after = cursor;
  if (!after.feed(cursor.forced_bytes(256))) std::abort();
  if (cursor.complete()) {
    try {
      (void)nlohmann::json::parse(answer.substr(0, taken));
    } catch (const nlohmann::json::out_of_range& e) {
      if (e.id != 406) std::abort();  // 406: a number beyond double's range, which JSON allows
    } catch (const nlohmann::json::exception&) {
      std::abort();
    }
  }
  return 0;
}
