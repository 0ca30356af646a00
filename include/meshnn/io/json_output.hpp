// The JSON records that jobs and benchmarks write for scripts (scripts/scaling.py, llm_bench.py,
// thread_scaling.sh) and for docs/measurements/. The records themselves are built with
// nlohmann-json by their writers; what is shared here needs no JSON type, so this header stays free
// of it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace meshnn::io {

// `value` rounded to `decimals` places: a figure measured to that many is written with no more
// digits (nlohmann-json writes the shortest text that reads back as the same double).
double round_to(double value, int decimals);

// A JSON array of `records` (each one object's text) with one record per line, so that result
// files diff line by line.
std::string json_array_lines(const std::vector<std::string>& records);

// Writes `text` to `path`; throws meshnn::Error "cannot write '<path>'" when it cannot.
void write_text_file(const std::string& path, std::string_view text);

}  // namespace meshnn::io
