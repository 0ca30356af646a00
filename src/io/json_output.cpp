#include "meshnn/io/json_output.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fstream>

#include "meshnn/core/error.hpp"

namespace meshnn::io {

double round_to(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  const double scaled = value * scale;
  return std::isfinite(scaled) ? std::round(scaled) / scale : value;
}

std::string json_array_lines(const std::vector<std::string>& records) {
  std::string text = "[\n";
  for (size_t i = 0; i < records.size(); ++i) text += "  " + records[i] + (i + 1 < records.size() ? ",\n" : "\n");
  return text + "]\n";
}

void write_text_file(const std::string& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw Error(fmt::format("cannot write '{}'", path));
}

}  // namespace meshnn::io
