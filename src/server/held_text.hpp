// Streams release their text as soon as it cannot be the start of a marker they look for (a stop
// string, a <think> or <tool_call> tag), so that a marker cut across two pieces is still found.
#pragma once

#include <algorithm>
#include <string_view>

namespace meshnn::server {

// How much of the end of `text` is a proper start of `marker`, and must be held back until the
// next piece says whether the marker follows.
inline size_t marker_start_at_end(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace meshnn::server
